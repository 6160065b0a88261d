//! A world model trained briefly on reacher2d demonstrations.

use burn::Dispatch;
use burn::DispatchDevice;
use burn::backend::ndarray::NdArrayDevice;
use burn::module::AutodiffModule;
use burn::prelude::Backend;
use imago_worldmodel::{TransitionFamily, WorldModelConfig};

use super::*;
use crate::act::collect::{CollectConfig, collect_demonstrations};
use crate::store::replay::read_replay;

#[test]
fn briefly_trained_world_model_beats_copying_the_last_latent() {
    let dir = tempfile::tempdir().unwrap();
    collect_demonstrations(
        &CollectConfig {
            episodes: 300,
            ..CollectConfig::default()
        },
        dir.path(),
        false,
    )
    .unwrap();
    let episodes = read_replay(dir.path()).unwrap().episodes;
    let (training, held_out) = split_episodes(&episodes);
    assert_eq!(held_out.len(), 60);
    let device = DispatchDevice::NdArray(NdArrayDevice::Cpu);
    let training_device = DispatchDevice::autodiff(device.clone());
    Dispatch::seed(&training_device, 3);
    let config = WorldModelConfig::for_robot(
        &CollectConfig::default().robot.spec(),
        TransitionFamily::Salt,
    )
    .unwrap();
    let train = WorldModelTrainConfig {
        steps: 1000,
        horizon: 6,
        ..WorldModelTrainConfig::default()
    };
    let data = WindowDataset::new(
        &training,
        train.horizon,
        &config.action_limit,
        train.discount,
    );
    let (model, history) = train_world_model::<Dispatch>(
        config.init(&training_device),
        &config,
        &data,
        &train,
        &training_device,
    )
    .unwrap();
    // The raw prediction loss is in latent units, which the variance term expands
    // from near zero early on, so it is no measure of progress; the held-out error
    // relative to the latents' spread is.
    assert_eq!(history.len(), train.steps);

    let robot = CollectConfig::default().robot;
    let report = evaluate_world_model(
        &model.valid(),
        &config,
        &held_out,
        train.horizon,
        &PhysicalQuantities::of_robot(Some(&robot), config.proprio_dim),
        &device,
    )
    .unwrap();
    let h = train.horizon - 1;
    for i in [0, h] {
        assert!(
            report.horizon_error[i] < report.copy_last_error[i],
            "horizon {}: model {:.4} vs copy-last {:.4}",
            i + 1,
            report.horizon_error[i],
            report.copy_last_error[i]
        );
    }
    // It reads the action: rolled with another episode's actions it errs clearly more
    // (the arm's joints follow the commands).
    println!(
        "model {:?}\ncopy-last {:?}\nconstant velocity {:?}\nshuffled actions {:?}",
        report.horizon_error,
        report.copy_last_error,
        report.constant_velocity_error,
        report.shuffled_action_error
    );
    assert!(
        report.shuffled_action_error[h] > 1.2 * report.horizon_error[h],
        "horizon {}: true actions {:.4} vs another episode's {:.4}",
        h + 1,
        report.horizon_error[h],
        report.shuffled_action_error[h]
    );
    assert_eq!(report.constant_velocity_error.len(), train.horizon);
    // The latents did not collapse: the errors are relative to a real spread.
    assert!(report.latent_variance > 0.1, "{}", report.latent_variance);
    assert!(report.spearman.across_dataset.is_some());
    // Read out into the arm's measured state: a model without a state decoder is read
    // by a fitted map; reacher2d pushes nothing, so there is no contact split.
    let decoded = report.decoded.as_ref().expect("enough steps for a readout");
    assert_eq!(decoded.readout, ReadoutKind::FittedLinear);
    assert_eq!(decoded.names, robot.spec().proprio_names);
    assert_eq!(decoded.error.len(), train.horizon);
    assert!(decoded.copy_last_error[h] > decoded.copy_last_error[0]);
    assert!(decoded.error.iter().all(|e| e.is_finite()));
    // A fitted readout reads out only the ensemble's mean: no members to rank.
    assert!(decoded.spearman.is_none());
    assert!(report.contact.is_none());
}
