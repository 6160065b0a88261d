//! Checks that a device computes what the CPU computes: one behaviour-cloning
//! training step from identical weights on identical data, compared.

use burn::Dispatch;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder};
use imago_policies::{ImitationTargets, Policy, PolicyBatch, PolicyConfig, imitation_loss};
use imago_robots::Robot;

use crate::device::ResolvedDevice;
use crate::robot::RobotConfig;

/// Agreement required between devices: relative to values of order one, float32
/// reductions in another order differ by far less.
pub const PARITY_TOLERANCE: f32 = 1e-3;

/// How far a device's training step is from the reference device's.
#[derive(Debug, Clone, PartialEq)]
pub struct StepComparison {
    /// Loss before the step on the reference and on the candidate.
    pub loss: (f32, f32),
    /// Largest absolute difference of the predicted means after the step.
    pub max_mean_difference: f32,
    /// Largest absolute value of those means (for scale).
    pub max_mean: f32,
}

impl StepComparison {
    /// Whether the two devices agree within `tolerance` (absolute, on unit-scale values).
    pub fn agrees(&self, tolerance: f32) -> bool {
        (self.loss.0 - self.loss.1).abs() <= tolerance * self.loss.0.abs().max(1.0)
            && self.max_mean_difference <= tolerance * self.max_mean.max(1.0)
    }
}

/// Runs one training step of a small policy for `robot` on `reference` and on
/// `candidate` from the same weights and batch, and compares the loss and the
/// predictions after the step.
pub fn compare_training_step(
    robot: &RobotConfig,
    reference: &ResolvedDevice,
    candidate: &ResolvedDevice,
) -> anyhow::Result<StepComparison> {
    let config =
        PolicyConfig::for_robot(imago_policies::Architecture::Vla, &robot.spec())?.compact();
    let mut batch = PolicyBatch::new(&config.input_spec());
    let mut robot = robot.build()?;
    for seed in 0..8 {
        batch.push(&robot.reset(seed))?;
    }
    let n = batch.len();
    let targets: Vec<f32> = (0..n * config.chunk_len() * config.action_dim())
        .map(|i| ((i * 37 % 17) as f32 / 8.0) - 1.0)
        .collect();

    let staged = tempfile::tempdir()?;
    let weights = staged.path().join("weights");
    let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    Dispatch::seed(&reference.training, 7);
    config
        .init::<Dispatch>(&reference.training)
        .save_file(&weights, &recorder)
        .map_err(|e| anyhow::anyhow!("cannot stage weights: {e}"))?;

    let run = |device: &ResolvedDevice| -> anyhow::Result<(f32, Vec<f32>)> {
        let policy: Policy<Dispatch> = config
            .init::<Dispatch>(&device.training)
            .load_file(&weights, &recorder, &device.training)
            .map_err(|e| anyhow::anyhow!("cannot load staged weights: {e}"))?;
        let targets = ImitationTargets {
            actions: Tensor::<Dispatch, 3>::from_data(
                TensorData::new(
                    targets.clone(),
                    [n, config.chunk_len(), config.action_dim()],
                ),
                &device.training,
            ),
            mask: Tensor::ones([n, config.chunk_len()], &device.training),
            weights: None,
        };
        let loss = imitation_loss(&policy, batch.to_input(&device.training), &targets, None);
        let loss_value: f32 = loss.clone().into_scalar().elem();
        let grads = GradientsParams::from_grads(loss.backward(), &policy);
        let mut optimizer = AdamConfig::new().init();
        let policy = optimizer.step(1e-3, policy, grads);
        let means = policy
            .act(batch.to_input(&device.training), None)
            .into_data()
            .convert::<f32>()
            .to_vec()
            .map_err(|e| anyhow::anyhow!("cannot read predictions: {e:?}"))?;
        Ok((loss_value, means))
    };
    let (loss_a, means_a) = run(reference)?;
    let (loss_b, means_b) = run(candidate)?;
    Ok(StepComparison {
        loss: (loss_a, loss_b),
        max_mean_difference: means_a
            .iter()
            .zip(&means_b)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max),
        max_mean: means_a.iter().map(|a| a.abs()).fold(0.0, f32::max),
    })
}
