//! `imago bench`: timings of the policy's hot paths on one device.

use std::time::Instant;

use burn::Dispatch;
use burn::module::AutodiffModule;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use imago_policies::{PolicyBatch, VlaPolicyConfig, gaussian_nll};
use imago_robots::Robot;
use imago_robots::reacher2d::Reacher2d;
use serde::{Deserialize, Serialize};

use crate::device::ResolvedDevice;
use crate::evaluate::measure_latency;
use crate::stats::quantile;

/// Measured timings, milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    /// The device.
    pub device: String,
    /// Transitions per training step.
    pub batch_size: usize,
    /// Timed training steps.
    pub steps: usize,
    /// Median training-step time (forward, backward, Adam update, loss read back).
    pub train_step_p50_ms: f64,
    /// 90th percentile training-step time.
    pub train_step_p90_ms: f64,
    /// Median batch-1 inference latency.
    pub inference_p50_ms: f64,
    /// 99th percentile batch-1 inference latency.
    pub inference_p99_ms: f64,
}

/// Times `steps` behaviour-cloning steps of the demo's policy at `batch_size`, after
/// three untimed warm-up steps, and batch-1 inference.
pub fn bench_policy(
    device: &ResolvedDevice,
    batch_size: usize,
    steps: usize,
) -> anyhow::Result<BenchReport> {
    let mut robot = Reacher2d::default();
    let spec = robot.spec().clone();
    let config = VlaPolicyConfig::for_robot(&spec);
    let mut batch = PolicyBatch::new(&config);
    for seed in 0..batch_size as u64 {
        batch.push(&robot.reset(seed))?;
    }
    let (k, a) = (config.chunk_len, config.action_dim());
    let targets: Vec<f32> = (0..batch_size * k * a)
        .map(|i| (i % 7) as f32 / 7.0 - 0.5)
        .collect();
    let mut policy = config.init::<Dispatch>(&device.training);
    let mut optimizer = AdamConfig::new().init();
    let mut times = Vec::with_capacity(steps);
    for step in 0..steps + 3 {
        let start = Instant::now();
        let target = Tensor::<Dispatch, 3>::from_data(
            TensorData::new(targets.clone(), [batch_size, k, a]),
            &device.training,
        );
        let mask = Tensor::<Dispatch, 2>::ones([batch_size, k], &device.training);
        let loss = gaussian_nll(
            &policy.forward(batch.to_input(&device.training)),
            target,
            mask,
        );
        let _: f32 = loss.clone().into_scalar().elem();
        let grads = GradientsParams::from_grads(loss.backward(), &policy);
        policy = optimizer.step(1e-4, policy, grads);
        if step >= 3 {
            times.push(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    let latency = measure_latency(
        &policy.valid(),
        &config,
        &device.inference,
        &robot.reset(0),
        100,
    )?;
    Ok(BenchReport {
        device: device.description.clone(),
        batch_size,
        steps,
        train_step_p50_ms: quantile(&times, 0.5),
        train_step_p90_ms: quantile(&times, 0.9),
        inference_p50_ms: latency.p50,
        inference_p99_ms: latency.p99,
    })
}
