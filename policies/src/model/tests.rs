use super::*;
use crate::input::PolicyBatch;
use crate::loss::{ImitationTargets, imitation_loss};
use crate::policy::Policy;
use burn::backend::{Autodiff, Flex, NdArray};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use imago_robots::reacher2d::Reacher2d;
use imago_robots::{Observation, Robot};

type B = Autodiff<Flex>;

fn config() -> VlaPolicyConfig {
    VlaPolicyConfig::new(8, vec![0, 1, 2, 3, 6, 7], vec![1.0, 1.0])
        .with_d_model(32)
        .with_d_ff(64)
        .with_n_layers(1)
}

fn observations(n: u64) -> Vec<Observation> {
    let mut robot = Reacher2d::default();
    (0..n).map(|seed| robot.reset(seed)).collect()
}

fn batch_of(config: &VlaPolicyConfig, observations: &[Observation]) -> PolicyBatch {
    let mut batch = PolicyBatch::new(&config.input_spec());
    for obs in observations {
        batch.push(obs).unwrap();
    }
    batch
}

#[test]
fn narrow_precision_policies_act_as_the_f32_policy_within_rounding() {
    let device = Default::default();
    let observations = observations(3);
    for head in [ActionHeadKind::Gaussian, ActionHeadKind::Flow] {
        let config = config().with_head(head);
        let policy = config.init::<Flex>(&device);
        let batch = batch_of(&config, &observations);
        let act = |policy: &VlaPolicy<Flex>| -> Vec<f32> {
            let chunk = policy.act(batch.to_input(&device), None);
            assert_eq!(chunk.dtype(), DType::F32, "chunks come back as f32");
            chunk.into_data().to_vec().unwrap()
        };
        let reference = act(&policy);
        for path in [ComputePath::Auto, ComputePath::Tensors] {
            for (precision, tolerance) in [(Precision::F16, 0.02), (Precision::Bf16, 0.1)] {
                let narrow = policy
                    .clone()
                    .with_compute_path(path)
                    .with_precision(precision);
                assert_eq!(narrow.precision(), precision);
                let worst = act(&narrow)
                    .iter()
                    .zip(&reference)
                    .map(|(n, r)| (n - r).abs())
                    .fold(0.0f32, f32::max);
                // Rounded, so not equal; close, so the same policy.
                assert!(
                    worst > 0.0 && worst < tolerance,
                    "{head:?} {path:?} {precision}: largest difference {worst}"
                );
            }
        }
    }
}

#[test]
fn output_shapes_and_bounds() {
    let config = config();
    assert_eq!(config.validate(), Ok(()));
    let device = Default::default();
    let policy = config.init::<B>(&device);
    let batch = batch_of(&config, &observations(3));
    let out = policy.gaussian(batch.to_input(&device)).unwrap();
    assert_eq!(out.mean.dims(), [3, 4, 2]);
    assert_eq!(out.log_std.dims(), [3, 4, 2]);
    let log_std: Vec<f32> = out.log_std.into_data().to_vec().unwrap();
    assert!(log_std.iter().all(|v| (-4.0..=0.5).contains(v)));

    let flow_config = config.with_head(ActionHeadKind::Flow);
    let flow = flow_config.init::<B>(&device);
    assert!(flow.gaussian(batch.to_input(&device)).is_none());
    let input = batch.to_input(&device);
    let deterministic = flow.act(input.clone(), None);
    assert_eq!(deterministic.dims(), [3, 4, 2]);
    let again = flow.act(input.clone(), None);
    assert_eq!(deterministic.into_data(), again.into_data());
    let noise = Tensor::random(
        [3, 4, 2],
        burn::tensor::Distribution::Normal(0.0, 1.0),
        &device,
    );
    let sampled = flow.act(input, Some(noise));
    assert_eq!(sampled.dims(), [3, 4, 2]);
}

#[test]
fn the_camera_comes_from_the_spec_and_unreadable_cameras_are_named() {
    let spec = |width: u32, height: u32| imago_robots::RobotSpec {
        name: "test".into(),
        proprio_names: vec!["x".into(), "x_vel".into()],
        action_limit: vec![1.0; 3],
        control_hz: 10.0,
        max_steps: 10,
        camera: Some(imago_robots::CameraSpec { width, height }),
        action_origin: None,
    };
    let config = VlaPolicyConfig::for_robot(&spec(32, 32)).unwrap();
    assert_eq!(config.image_size, 32);
    assert_eq!((config.frame_pool, config.patch_count()), (1, 16));
    assert_eq!(config.proprio_inputs, vec![0]);
    assert_eq!(config.action_dim(), 3);
    // Cameras up to 64 pixels are read as they are; larger ones averaged down to
    // at most 24 pixels a side (88 = 8 * 11 is read at 8).
    for (side, pool) in [(48, 1), (64, 1), (72, 3), (96, 4), (128, 8), (88, 11)] {
        let config = VlaPolicyConfig::for_robot(&spec(side, side)).unwrap();
        assert_eq!(config.frame_pool, pool, "{side}");
        assert_eq!(config.image_size * pool, side as usize);
        assert!(side <= 64 || config.image_size <= LARGE_FRAME_READ_SIDE);
    }
    for (width, height) in [(36, 36), (48, 32), (4, 4), (1024, 1024)] {
        let error = VlaPolicyConfig::for_robot(&spec(width, height)).unwrap_err();
        assert_eq!(error.key, "camera", "{width}x{height}");
        assert!(error.to_string().contains(&format!("{width}x{height}")));
    }
}

#[test]
fn actions_are_displacements_from_the_action_origin() {
    // The flow loss draws its noise from the backend's global generator, seeded just
    // before each of the two losses compared. Other tests of this crate initialise
    // models on Flex at the same time, so this one runs on a backend no other test
    // here draws from.
    type Solo = Autodiff<NdArray>;
    let device = Default::default();
    let obs = observations(3);
    let mut absolute = config();
    absolute.action_limit = vec![2.0, 0.5];
    // ee_x and ee_y as the positions the two action dimensions command.
    let relative = absolute.clone().with_action_origin(Some(vec![6, 7]));
    assert_eq!(relative.validate(), Ok(()));
    let origin: Vec<f32> = obs
        .iter()
        .flat_map(|o| [o.proprio[6] / 2.0, o.proprio[7] / 0.5])
        .collect();
    for head in ActionHeadKind::ALL {
        // One network; only where its displacements are measured from differs.
        let policy = absolute.clone().with_head(head).init::<Solo>(&device);
        let act = |config: &VlaPolicyConfig| -> Vec<f32> {
            let input = batch_of(config, &obs).to_input(&device);
            policy.act(input, None).into_data().to_vec().unwrap()
        };
        let (from_zero, from_origin) = (act(&absolute), act(&relative));
        for (i, (a, r)) in from_zero.iter().zip(&from_origin).enumerate() {
            let expected = origin[(i / 8) * 2 + i % 2];
            assert!((r - a - expected).abs() < 1e-5, "{head} entry {i}");
        }
        // The loss sees the same displacements: target `origin + c` under the
        // relative batch is target `c` under the absolute one.
        let chunk = Tensor::<Solo, 3>::from_data(
            TensorData::new([0.3f32, -0.2].repeat(12), [3, 4, 2]),
            &device,
        );
        let loss = |config: &VlaPolicyConfig, actions: Tensor<Solo, 3>| -> f32 {
            let input = batch_of(config, &obs).to_input(&device);
            let targets = ImitationTargets {
                actions,
                mask: Tensor::ones([3, 4], &device),
                weights: None,
            };
            Solo::seed(&device, 11);
            imitation_loss(&Policy::Vla(policy.clone()), input, &targets, None).into_scalar()
        };
        let shifted = chunk.clone()
            + Tensor::<Solo, 2>::from_data(TensorData::new(origin.clone(), [3, 2]), &device)
                .unsqueeze_dim::<3>(1);
        let (plain, moved) = (loss(&absolute, chunk), loss(&relative, shifted));
        assert!((plain - moved).abs() < 1e-4, "{head}: {plain} vs {moved}");
    }
}

#[test]
fn configs_written_before_origins_pooling_relu_and_deep_stems_load_as_they_were_trained() {
    let mut json = serde_json::to_value(config().with_action_origin(Some(vec![6, 7]))).unwrap();
    let fields = json.as_object_mut().unwrap();
    assert!(fields.remove("action_origin").is_some());
    assert!(fields.remove("frame_pool").is_some());
    assert!(fields.remove("stem_activation").is_some());
    assert!(fields.remove("stem_inputs").is_some());
    assert!(fields.remove("stem_layers").is_some());
    assert!(fields.remove("keypoint_targets").is_some());
    assert!(fields.remove("keypoint_target_weight").is_some());
    VlaPolicyConfig::fill_later_keys(&mut json);
    let old: VlaPolicyConfig = serde_json::from_value(json).unwrap();
    assert_eq!((old.action_origin, old.frame_pool), (None, 1));
    assert_eq!(old.stem_layers, 1);
    assert_eq!(old.stem_activation, StemActivation::Gelu);
    assert_eq!(old.stem_inputs, StemInputs::Colour);
    assert!(old.keypoint_targets.is_empty());
    assert_eq!(old.keypoint_target_weight, 1.0);
    // Keys a config has are kept.
    let mut new = serde_json::to_value(
        config()
            .with_frame_pool(2)
            .with_stem_inputs(StemInputs::ColourAndPosition)
            .with_stem_layers(2),
    )
    .unwrap();
    VlaPolicyConfig::fill_later_keys(&mut new);
    assert_eq!(new["frame_pool"], 2);
    assert_eq!(new["stem_layers"], 2);
    assert_eq!(new["stem_inputs"], "colour-and-position");
}

#[test]
fn invalid_configs_are_named() {
    let key = |c: VlaPolicyConfig| c.validate().unwrap_err().key;
    assert_eq!(key(config().with_patch_size(7)), "patch_size");
    assert_eq!(key(config().with_n_heads(5)), "n_heads");
    assert_eq!(
        key(VlaPolicyConfig::new(8, vec![0], vec![])),
        "action_limit"
    );
    assert_eq!(key(config().with_flow_steps(0)), "flow_steps");
    assert_eq!(
        key(config().with_action_origin(Some(vec![6]))),
        "action_origin"
    );
    assert_eq!(
        key(config().with_action_origin(Some(vec![6, 8]))),
        "action_origin"
    );
    assert_eq!(key(config().with_n_layers(100_000)), "n_layers");
    assert_eq!(key(config().with_d_model(1_000_000)), "d_model");
    assert_eq!(key(config().with_d_ff(0)), "d_ff");
    // Each size within its range, together too large to allocate.
    let huge = config()
        .with_d_model(2048)
        .with_n_layers(64)
        .with_d_ff(16_384);
    assert_eq!(key(huge), "parameters");
    // Keypoint targets: unread entries of the proprioception, each once, found in a
    // frame the policy reads, with a weight in range.
    let targets = |t: Vec<usize>| config().with_keypoint_targets(t);
    for (bad, why) in [
        (targets(vec![0]), "which the policy reads"),
        (targets(vec![4, 4]), "twice"),
        (targets(vec![8]), "proprioception has 8 entries"),
        (
            targets(vec![4]).with_reads_camera(false),
            "reads the camera",
        ),
    ] {
        let error = bad.validate().unwrap_err();
        assert_eq!(error.key, "keypoint_targets");
        assert!(error.expected.contains(why), "{error}");
    }
    for weight in [-1.0, f64::NAN, 1e4] {
        let bad = targets(vec![4, 5]).with_keypoint_target_weight(weight);
        assert_eq!(key(bad), "keypoint_target_weight");
    }
    assert_eq!(targets(vec![5, 4]).validate(), Ok(()));
    for config in [
        config(),
        config().with_head(ActionHeadKind::Flow),
        targets(vec![4, 5]),
    ] {
        let policy = config.init::<B>(&Default::default());
        assert_eq!(config.parameter_count(), policy.num_params());
    }
}

#[test]
fn bad_observations_are_rejected_with_reasons() {
    let mut batch = PolicyBatch::new(&config().input_spec());
    let mut obs = observations(1).remove(0);
    obs.proprio[2] = f32::NAN;
    assert!(
        batch
            .push(&obs)
            .unwrap_err()
            .to_string()
            .contains("not a finite number")
    );
    obs.proprio.pop();
    assert!(
        batch
            .push(&obs)
            .unwrap_err()
            .to_string()
            .contains("expects 8")
    );
    obs.image = None;
    assert!(batch.push(&obs).is_err());
    assert!(batch.is_empty(), "failed pushes leave the batch unchanged");
}

/// Trains a fresh policy for `steps` on `targets` and returns its losses.
fn fit(
    config: &VlaPolicyConfig,
    observations: &[Observation],
    targets: ImitationTargets<B>,
    steps: usize,
) -> (VlaPolicy<B>, Vec<f32>) {
    let _serial = crate::AUTODIFF_TESTS
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let device = Default::default();
    B::seed(&device, 3);
    let mut policy = config.init::<B>(&device);
    let batch = batch_of(config, observations);
    let mut optim = AdamConfig::new().init();
    let mut losses = Vec::new();
    for _ in 0..steps {
        // A clone shares the parameters' ids: the gradients are the policy's.
        let seam = Policy::Vla(policy.clone());
        let loss = imitation_loss(&seam, batch.to_input(&device), &targets, None);
        losses.push(loss.clone().into_scalar());
        let grads = GradientsParams::from_grads(loss.backward(), &policy);
        policy = optim.step(3e-3, policy, grads);
    }
    (policy, losses)
}

#[test]
fn imitation_loss_falls_for_both_heads() {
    let device = Default::default();
    let obs = observations(8);
    // Targets depend on the observation, so the network must read its inputs.
    let targets: Vec<f32> = obs
        .iter()
        .flat_map(|o| {
            let (x, y) = (o.proprio[6], o.proprio[7]);
            std::iter::repeat_n([x, -y], 4).flatten()
        })
        .collect();
    let targets = ImitationTargets {
        actions: Tensor::<B, 3>::from_data(TensorData::new(targets, [8, 4, 2]), &device),
        mask: Tensor::ones([8, 4], &device),
        weights: None,
    };
    for (head, steps, drop) in [
        (ActionHeadKind::Gaussian, 60, 1.0),
        (ActionHeadKind::Flow, 150, 0.5),
    ] {
        let (_, losses) = fit(&config().with_head(head), &obs, targets.clone(), steps);
        let first = losses[..5].iter().sum::<f32>() / 5.0;
        let last = losses[steps - 5..].iter().sum::<f32>() / 5.0;
        assert!(last < first - drop, "{head}: loss {first} -> {last}");
    }
}

/// The keypoint targets' loss joins the imitation loss: at weight 0 the loss is the
/// same weights' loss without the readout, at weight 1 it is larger by the readout's
/// error, and training lowers that error. One initialisation throughout (burn's
/// parameter seed is global, so two initialisations in parallel tests may differ).
#[test]
fn keypoint_targets_add_their_error_and_are_learned() {
    let _serial = crate::AUTODIFF_TESTS
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let device = Default::default();
    let obs = observations(8);
    let actions: Vec<f32> = (0..8 * 4 * 2).map(|i| (i % 5) as f32 / 5.0 - 0.4).collect();
    let targets = ImitationTargets {
        actions: Tensor::<B, 3>::from_data(TensorData::new(actions, [8, 4, 2]), &device),
        mask: Tensor::ones([8, 4], &device),
        weights: None,
    };
    // A policy that reads the joint angles and learns to see the end effector (ee_x,
    // ee_y: entries 6 and 7).
    let reading_joints = VlaPolicyConfig {
        proprio_inputs: vec![0, 1, 2, 3],
        ..config()
    };
    let with_targets = reading_joints
        .clone()
        .with_keypoint_targets(vec![6, 7])
        .with_keypoint_target_weight(2.0);
    let input = || batch_of(&with_targets, &obs).to_input(&device);
    // Seeded (tests that do not take the lock may still draw from the same generator):
    // how far 80 steps lower the target error depends on the initialisation, from
    // 0.15 to 0.53 of where it started over the seeds tried.
    B::seed(&device, 5);
    let policy = with_targets.init::<B>(&device);
    let loss = |policy: &VlaPolicy<B>, input: PolicyInput<B>| -> f32 {
        imitation_loss(&Policy::Vla(policy.clone()), input, &targets, None).into_scalar()
    };
    let target_loss = |policy: &VlaPolicy<B>| -> f32 {
        let (_, loss) = policy.summary_and_target_loss(input());
        loss.expect("a batch with targets").into_scalar()
    };
    // Parameters are initialised lazily, each copy on its own: the host copy reads
    // every one of them before the policy is copied.
    assert!(crate::host::HostPolicy::of(&policy).is_some());
    let with_error = loss(&policy, input());
    let before = target_loss(&policy);
    assert!(before > 0.0);
    let mut without_readout = policy.clone();
    without_readout.keypoint_readout = None;
    let plain = loss(
        &without_readout,
        batch_of(&reading_joints, &obs).to_input(&device),
    );
    let unweighted = VlaPolicy {
        keypoint_target_weight: 0.0,
        ..policy.clone()
    };
    let at_zero = loss(&unweighted, input());
    assert!((at_zero - plain).abs() < 1e-5, "{at_zero} against {plain}");
    assert!(
        (with_error - plain - before).abs() < 1e-4 * with_error.abs().max(1.0),
        "{with_error} = {plain} + {before}"
    );
    // The target loss is weighted: at weight 1 it is half what it is at 2.
    let at_one = target_loss(&VlaPolicy {
        keypoint_target_weight: 1.0,
        ..policy.clone()
    });
    assert!(
        (2.0 * at_one - before).abs() < 1e-5 * before,
        "{at_one} x 2 against {before}"
    );

    let mut policy = policy;
    let mut optim = AdamConfig::new().init();
    for _ in 0..80 {
        let seam = Policy::Vla(policy.clone());
        let loss = imitation_loss(&seam, input(), &targets, None);
        let grads = GradientsParams::from_grads(loss.backward(), &policy);
        policy = optim.step(3e-3, policy, grads);
    }
    let after = target_loss(&policy);
    assert!(after < 0.7 * before, "target loss {before} -> {after}");
}

#[test]
fn advantage_weights_pull_the_mean_toward_the_favoured_action() {
    let device = Default::default();
    // Every observation twice: once with action +0.5, once with -0.5.
    let base = observations(4);
    let obs: Vec<Observation> = base.iter().chain(&base).cloned().collect();
    let actions: Vec<f32> = (0..8)
        .flat_map(|i| [if i < 4 { 0.5f32 } else { -0.5 }; 8])
        .collect();
    let actions = Tensor::<B, 3>::from_data(TensorData::new(actions, [8, 4, 2]), &device);
    let mean_action = |weights: Option<Vec<f32>>| {
        let targets = ImitationTargets {
            actions: actions.clone(),
            mask: Tensor::ones([8, 4], &device),
            weights: weights.map(|w| Tensor::from_data(TensorData::new(w, [8]), &device)),
        };
        let (policy, _) = fit(&config(), &obs, targets, 120);
        let batch = batch_of(&config(), &base);
        let chunk: Vec<f32> = policy
            .act(batch.to_input(&device), None)
            .into_data()
            .to_vec()
            .unwrap();
        chunk.iter().sum::<f32>() / chunk.len() as f32
    };
    let plain = mean_action(None);
    // exp(A / beta) with A = +-1.6, beta = 1: about 5 against 0.2.
    let weighted = mean_action(Some(
        (0..8).map(|i| if i < 4 { 4.95 } else { 0.2 }).collect(),
    ));
    // The weighted optimum is (4.95 * 0.5 - 0.2 * 0.5) / 5.15 = 0.46.
    assert!(plain.abs() < 0.15, "unweighted mean {plain}");
    assert!(weighted > 0.35, "weighted mean {weighted}");
}
