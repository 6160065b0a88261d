//! `imago bench`: timings of the policy's and the world model's hot paths, the camera
//! renderer and the kernels on one device.

use std::time::Instant;

use burn::Dispatch;
use burn::module::AutodiffModule;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use imago_kernels::bench::{KernelBenchDevice, KernelBenchRow};
use imago_policies::{
    HostPolicy, HostScratch, ImitationTargets, PolicyBatch, PolicyConfig, imitation_loss,
};
use imago_robots::Robot;
use serde::{Deserialize, Serialize};

use imago_worldmodel::{
    HostPlan, HostWorldModel, ImaginationConfig, LatentActor, OpenLoopActions, TransitionFamily,
    WorldModelConfig, imagine,
};

use crate::act::collect::{CollectConfig, collect_demonstrations};
use crate::act::evaluate::{Latency, time_calls};
use crate::act::sampling::plan;
use crate::device::ResolvedDevice;
use crate::learn::world_model::{WindowDataset, WorldModelTrainConfig, train_world_model};
use crate::robot::{BatchRenderer, RobotConfig, SimRobot};
use crate::stats::quantile;
use crate::store::replay::read_replay;

/// Measured timings, milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    /// The device.
    pub device: String,
    /// Parameters of the policy (weights and biases).
    pub parameters: usize,
    /// Transitions per training step.
    pub batch_size: usize,
    /// Timed training steps.
    pub steps: usize,
    /// Median training-step time (forward, backward, Adam update, loss read back).
    pub train_step_p50_ms: f64,
    /// 90th percentile training-step time.
    pub train_step_p90_ms: f64,
    /// Median batch-1 inference latency through burn's forward.
    pub inference_p50_ms: f64,
    /// 99th percentile batch-1 inference latency.
    pub inference_p99_ms: f64,
    /// Median batch-1 inference latency through the host forward (what the daemon's
    /// actor runs on a CPU device); `None` on other devices.
    pub host_inference_p50_ms: Option<f64>,
    /// 99th percentile of the same.
    pub host_inference_p99_ms: Option<f64>,
}

/// Times `steps` behaviour-cloning steps of the default policy for `robot` at
/// `batch_size`, after three untimed warm-up steps, and batch-1 inference.
pub fn bench_policy(
    device: &ResolvedDevice,
    robot: &RobotConfig,
    batch_size: usize,
    steps: usize,
) -> anyhow::Result<BenchReport> {
    let config = PolicyConfig::for_robot(imago_policies::Architecture::Vla, &robot.spec())?;
    let mut robot = robot.build()?;
    let mut batch = PolicyBatch::new(&config.input_spec());
    for seed in 0..batch_size as u64 {
        batch.push(&robot.reset(seed))?;
    }
    let (k, a) = (config.chunk_len(), config.action_dim());
    let targets: Vec<f32> = (0..batch_size * k * a)
        .map(|i| (i % 7) as f32 / 7.0 - 0.5)
        .collect();
    let mut policy = config.init::<Dispatch>(&device.training);
    let mut optimizer = AdamConfig::new().init();
    let mut times = Vec::with_capacity(steps);
    for step in 0..steps + 3 {
        let start = Instant::now();
        let targets = ImitationTargets {
            actions: Tensor::<Dispatch, 3>::from_data(
                TensorData::new(targets.clone(), [batch_size, k, a]),
                &device.training,
            ),
            mask: Tensor::ones([batch_size, k], &device.training),
            weights: None,
        };
        let loss = imitation_loss(&policy, batch.to_input(&device.training), &targets, None);
        let _: f32 = loss.clone().into_scalar().elem();
        let grads = GradientsParams::from_grads(loss.backward(), &policy);
        policy = optimizer.step(1e-4, policy, grads);
        if step >= 3 {
            times.push(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    let policy = policy.valid();
    // burn's forward, timed as such even where the robot runs the host forward (the
    // next figure): what a GPU, or a policy without a host copy, runs.
    let observation = robot.reset(0);
    let latency = time_calls(5, 100, || {
        plan(
            &policy,
            &config,
            &device.inference,
            std::iter::once(&observation),
        )
        .map(drop)
    })?;
    let host = policy
        .host_copy()
        .map(|host| measure_host_latency(&host, &config, &robot.reset(0), 1000))
        .transpose()?;
    Ok(BenchReport {
        device: device.description.clone(),
        parameters: config.parameter_count(),
        batch_size,
        steps,
        train_step_p50_ms: quantile(&times, 0.5),
        train_step_p90_ms: quantile(&times, 0.9),
        inference_p50_ms: latency.p50,
        inference_p99_ms: latency.p99,
        host_inference_p50_ms: host.as_ref().map(|l| l.p50),
        host_inference_p99_ms: host.as_ref().map(|l| l.p99),
    })
}

/// Batch-1 latency of the host forward as the actor runs it (the observation pushed,
/// the chunk distribution computed), over `repeats` calls after 20 warm-up calls.
fn measure_host_latency(
    host: &HostPolicy,
    config: &PolicyConfig,
    observation: &imago_robots::Observation,
    repeats: usize,
) -> anyhow::Result<Latency> {
    let mut batch = PolicyBatch::new(&config.input_spec());
    let mut scratch = HostScratch::default();
    let ka = config.chunk_len() * config.action_dim();
    let (mut mean, mut log_std) = (vec![0.0; ka], vec![0.0; ka]);
    time_calls(20, repeats, || {
        batch.clear();
        batch.push(observation)?;
        host.gaussian(&batch, 0, &mut scratch, &mut mean, &mut log_std);
        Ok(())
    })
}

/// Timings of one world-model transition family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorldModelBenchRow {
    /// The device.
    pub device: String,
    /// The transition family.
    pub family: TransitionFamily,
    /// Parameters of the world model (both encoders, every member, the heads).
    pub parameters: usize,
    /// Windows per training step.
    pub batch_size: usize,
    /// Horizon of training windows and of imagination.
    pub horizon: usize,
    /// Median training-step time (multi-step supervision), milliseconds.
    pub train_step_p50_ms: f64,
    /// Start states per imagination call.
    pub imagination_batch: usize,
    /// Median time of one closed-loop imagination call (latent actor, every step
    /// asks the policy), milliseconds.
    pub imagine_closed_loop_ms: f64,
    /// Imagined steps per second in closed loop (`batch x horizon / time`).
    pub imagined_steps_per_s: f64,
    /// Median time of one open-loop imagination call (a fixed action sequence of
    /// `horizon` steps; one pass per member for the action-prefix family),
    /// milliseconds.
    pub imagine_open_loop_ms: f64,
    /// The same closed-loop call through the host imagination
    /// ([`HostWorldModel::imagine`], what fine-tuning runs on a CPU device): start
    /// states read back, imagined, the rollout made tensors again and its rewards read
    /// back; `None` on other devices.
    pub host_imagine_closed_loop_ms: Option<f64>,
    /// Imagined steps per second of the host imagination in closed loop.
    pub host_imagined_steps_per_s: Option<f64>,
    /// The open-loop call through the host imagination.
    pub host_imagine_open_loop_ms: Option<f64>,
}

impl WorldModelBenchRow {
    /// The rows as an aligned text table.
    pub fn table(rows: &[Self]) -> String {
        let mut out = format!(
            "{:<14} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
            "family",
            "train ms",
            "closed ms",
            "steps/s",
            "open ms",
            "host cl ms",
            "host st/s",
            "host op ms"
        );
        let optional = |v: Option<f64>, decimals: usize| {
            v.map_or_else(|| "-".into(), |v| format!("{v:.decimals$}"))
        };
        for r in rows {
            out += &format!(
                "{:<14} {:>10.1} {:>10.1} {:>10.0} {:>10.1} {:>10} {:>10} {:>10}\n",
                r.family.name(),
                r.train_step_p50_ms,
                r.imagine_closed_loop_ms,
                r.imagined_steps_per_s,
                r.imagine_open_loop_ms,
                optional(r.host_imagine_closed_loop_ms, 1),
                optional(r.host_imagined_steps_per_s, 0),
                optional(r.host_imagine_open_loop_ms, 1),
            );
        }
        if let Some(r) = rows.first() {
            out += &format!(
                "({}; training batch {} windows of {} steps; imagination {} starts x {} steps, median of {} calls)\n",
                r.device,
                r.batch_size,
                r.horizon,
                r.imagination_batch,
                r.horizon,
                IMAGINATION_REPEATS
            );
        }
        out
    }
}

/// Timed imagination calls per family.
const IMAGINATION_REPEATS: usize = 20;

/// Times, for every transition family, `steps` world-model training steps (after
/// three warm-up steps) on windows of 8 steps from 12 demonstrations recorded on
/// `robot`, and closed- and open-loop imagination of 8 steps from 512 start states.
pub fn bench_world_model(
    device: &ResolvedDevice,
    robot: &RobotConfig,
    batch_size: usize,
    steps: usize,
) -> anyhow::Result<Vec<WorldModelBenchRow>> {
    let horizon = 8;
    let scratch = tempfile::tempdir()?;
    collect_demonstrations(
        &CollectConfig {
            robot: robot.clone(),
            episodes: 12,
            ..CollectConfig::default()
        },
        scratch.path(),
        false,
    )?;
    let episodes = read_replay(scratch.path())?.episodes;
    let mut rows = Vec::new();
    for family in TransitionFamily::ALL {
        let config = WorldModelConfig::for_robot(&robot.spec(), family)?;
        let train = WorldModelTrainConfig {
            steps: steps + 3,
            batch_size,
            horizon,
            ..WorldModelTrainConfig::default()
        };
        let data = WindowDataset::new(&episodes, horizon, &config.action_limit, train.discount);
        let (model, history) = train_world_model::<Dispatch>(
            config.init(&device.training),
            &config,
            &data,
            &train,
            &device.training,
        )?;
        let times: Vec<f64> = history[3..].iter().map(|s| s.seconds * 1e3).collect();
        let model = model.valid();

        let imagination_batch = 512;
        let mut robot = robot.build()?;
        let mut batch = PolicyBatch::new(&config.input_spec());
        for seed in 0..imagination_batch as u64 {
            batch.push(&robot.reset(seed))?;
        }
        let starts = model.encode(&batch.to_input(&device.inference));
        let actions: Vec<f32> = (0..imagination_batch * horizon * config.action_dim())
            .map(|i| ((i as f32) * 0.37).sin())
            .collect();
        let actions = Tensor::<Dispatch, 3>::from_data(
            TensorData::new(actions, [imagination_batch, horizon, config.action_dim()]),
            &device.inference,
        );
        let imagination = ImaginationConfig {
            horizon,
            ..ImaginationConfig::default()
        };
        let time_calls = |imagine: &dyn Fn() -> Tensor<Dispatch, 2>| {
            let mut times = Vec::with_capacity(IMAGINATION_REPEATS);
            for call in 0..IMAGINATION_REPEATS + 2 {
                let start = Instant::now();
                let _: Vec<f32> = imagine()
                    .into_data()
                    .convert::<f32>()
                    .to_vec()
                    .unwrap_or_default();
                if call >= 2 {
                    times.push(start.elapsed().as_secs_f64() * 1e3);
                }
            }
            quantile(&times, 0.5)
        };
        let closed = time_calls(&|| {
            imagine(&model, starts.clone(), &LatentActor(&model), &imagination).rewards
        });
        let open = time_calls(&|| {
            imagine(
                &model,
                starts.clone(),
                &OpenLoopActions(actions.clone()),
                &imagination,
            )
            .rewards
        });
        let host = HostWorldModel::for_device(&model, &device.inference);
        let host_times = host.map(|host| {
            let action_values: Vec<f32> = actions.clone().into_data().to_vec().unwrap_or_default();
            let on_host = |plan: HostPlan<'_>| {
                let start: Vec<f32> = starts.clone().into_data().to_vec().unwrap_or_default();
                host.imagine(&start, plan, &imagination)
                    .into_rollout::<Dispatch>(&device.inference)
                    .rewards
            };
            (
                time_calls(&|| on_host(HostPlan::LatentActor)),
                time_calls(&|| on_host(HostPlan::Actions(&action_values))),
            )
        });
        rows.push(WorldModelBenchRow {
            device: device.description.clone(),
            family,
            parameters: config.parameter_count(),
            batch_size,
            horizon,
            train_step_p50_ms: quantile(&times, 0.5),
            imagination_batch,
            imagine_closed_loop_ms: closed,
            imagined_steps_per_s: (imagination_batch * horizon) as f64 / (closed / 1e3),
            imagine_open_loop_ms: open,
            host_imagine_closed_loop_ms: host_times.map(|(closed, _)| closed),
            host_imagined_steps_per_s: host_times
                .map(|(closed, _)| (imagination_batch * horizon) as f64 / (closed / 1e3)),
            host_imagine_open_loop_ms: host_times.map(|(_, open)| open),
        });
    }
    Ok(rows)
}

/// One mode of the daemon benchmark.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DaemonBenchRow {
    /// `overlapped` (actor and learner at once) or `in turns` (synchronous).
    pub mode: String,
    /// Wall time for the learning steps, seconds.
    pub seconds: f64,
    /// Learning steps per minute.
    pub learning_steps_per_minute: f64,
    /// Transitions recorded meanwhile.
    pub transitions: u64,
    /// 99th percentile of the tick latency, ms.
    pub tick_p99_ms: f64,
    /// Largest tick latency, ms.
    pub tick_max_ms: f64,
    /// Deadlines missed.
    pub deadline_misses: u64,
}

impl DaemonBenchRow {
    fn new(mode: &str, report: &crate::engine::daemon::DaemonReport) -> Self {
        Self {
            mode: mode.to_string(),
            seconds: report.seconds,
            learning_steps_per_minute: 60.0 * report.learning_steps as f64 / report.seconds,
            transitions: report.control.transitions_written,
            tick_p99_ms: report.control.tick_latency_ms.p99,
            tick_max_ms: report.control.tick_latency_ms.max,
            deadline_misses: report.control.deadline_misses,
        }
    }

    /// The rows as a table.
    pub fn table(rows: &[Self]) -> String {
        let mut out = format!(
            "{:<12} {:>9} {:>14} {:>12} {:>9} {:>9} {:>7}\n",
            "mode", "seconds", "steps/minute", "transitions", "p99 ms", "max ms", "misses"
        );
        for r in rows {
            out.push_str(&format!(
                "{:<12} {:>9.1} {:>14.2} {:>12} {:>9.2} {:>9.2} {:>7}\n",
                r.mode,
                r.seconds,
                r.learning_steps_per_minute,
                r.transitions,
                r.tick_p99_ms,
                r.tick_max_ms,
                r.deadline_misses
            ));
        }
        out
    }
}

/// Runs the daemon's work (`steps` learning steps with the default learner settings on
/// `robot` at its control rate, each waiting for 8 fresh episodes) twice from the same
/// fresh start: with the actor and the learner overlapped, and in turns.
pub fn bench_daemon(
    device: &ResolvedDevice,
    robot: &RobotConfig,
    steps: u64,
) -> anyhow::Result<Vec<DaemonBenchRow>> {
    use crate::engine::daemon::{DaemonConfig, DaemonOptions, run_daemon, run_in_turns};
    let mut config = DaemonConfig::parse(&format!(
        "robot = \"{}\"\nstatus_every_seconds = 86400.0",
        robot.name()
    ))?;
    config.actor.robot = robot.clone();
    let mut rows = Vec::with_capacity(2);
    for mode in ["overlapped", "in turns"] {
        let dir = tempfile::tempdir()?;
        let options = DaemonOptions {
            run_dir: Some(dir.path().to_path_buf()),
            max_learning_steps: Some(steps),
            ..DaemonOptions::default()
        };
        let report = if mode == "overlapped" {
            run_daemon(
                &config,
                &options,
                device,
                &std::sync::atomic::AtomicBool::new(false),
            )?
        } else {
            run_in_turns(&config, &options, device, steps)?
        };
        rows.push(DaemonBenchRow::new(mode, &report));
    }
    Ok(rows)
}

/// Camera frames rendered on the CPU versus in one wgpu dispatch, for one batch size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RenderBenchRow {
    /// The wgpu adapter.
    pub adapter: String,
    /// Scenes per call.
    pub batch: usize,
    /// Median time to render the batch with the CPU reference renderer, one scene
    /// after another.
    pub cpu_ms: f64,
    /// Median time of one batched dispatch, upload and read-back included.
    pub gpu_ms: f64,
}

impl RenderBenchRow {
    /// A printable table of `rows`.
    pub fn table(rows: &[Self]) -> String {
        let mut out = format!(
            "camera frames, median of timed calls; gpu: {}\n{:>6} {:>10} {:>10} {:>9}\n",
            rows.first().map_or("-", |r| r.adapter.as_str()),
            "batch",
            "cpu ms",
            "gpu ms",
            "cpu/gpu"
        );
        for row in rows {
            out.push_str(&format!(
                "{:>6} {:>10.3} {:>10.3} {:>8.2}x\n",
                row.batch,
                row.cpu_ms,
                row.gpu_ms,
                row.cpu_ms / row.gpu_ms
            ));
        }
        out
    }
}

/// Times `robot`'s camera at each of `batches` scenes per call, `steps` timed calls
/// each after one untimed warm-up, on the CPU and through the robot's batched WGSL
/// renderer on the first wgpu adapter.
pub fn bench_render(
    robot: &RobotConfig,
    batches: &[usize],
    steps: usize,
) -> anyhow::Result<Vec<RenderBenchRow>> {
    let gpu = imago_shaders::GpuContext::new()?;
    let adapter = gpu.description();
    let renderer = BatchRenderer::new(robot, gpu)
        .ok_or_else(|| anyhow::anyhow!("robot {} has no batched renderer", robot.name()))?;
    let median = |times: Vec<f64>| quantile(&times, 0.5);
    let mut rows = Vec::with_capacity(batches.len());
    for &batch in batches {
        let robots: Vec<SimRobot> = (0..batch as u64)
            .map(|seed| {
                let mut sim = robot.build()?;
                sim.reset(seed);
                Ok(sim)
            })
            .collect::<anyhow::Result<_>>()?;
        let scenes: Vec<&SimRobot> = robots.iter().collect();
        let time = |f: &mut dyn FnMut() -> anyhow::Result<()>| -> anyhow::Result<f64> {
            f()?;
            let mut times = Vec::with_capacity(steps);
            for _ in 0..steps {
                let start = Instant::now();
                f()?;
                times.push(start.elapsed().as_secs_f64() * 1e3);
            }
            Ok(median(times))
        };
        let cpu_ms = time(&mut || {
            for robot in &scenes {
                std::hint::black_box(robot.render_frame());
            }
            Ok(())
        })?;
        let gpu_ms = time(&mut || {
            std::hint::black_box(renderer.render(&scenes)?);
            Ok(())
        })?;
        rows.push(RenderBenchRow {
            adapter: adapter.clone(),
            batch,
            cpu_ms,
            gpu_ms,
        });
    }
    Ok(rows)
}

/// The CubeCL kernels against burn's composite ops on `device` (its wgpu or CUDA
/// device; the CPU reference on a CPU device), `steps` timed calls each.
pub fn bench_kernels(device: &ResolvedDevice, steps: usize) -> Vec<KernelBenchRow> {
    let target = match &device.inference {
        #[cfg(feature = "wgpu")]
        burn::DispatchDevice::Wgpu(wgpu) => KernelBenchDevice::Wgpu(wgpu.clone()),
        #[cfg(feature = "cuda")]
        burn::DispatchDevice::Cuda(cuda) => KernelBenchDevice::Cuda(cuda.clone()),
        _ => KernelBenchDevice::Cpu,
    };
    imago_kernels::bench::bench_kernels(&target, steps)
}
