//! `imago demo`: collect imperfect demonstrations, clone them into a VLA policy,
//! train a world model on them and score it on held-out episodes, fine-tune the policy
//! with advantage weights from imagination, and evaluate both policies against a wrong
//! instruction and a random policy on paired seeds.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::Dispatch;
use burn::module::AutodiffModule;
use burn::prelude::Backend;
use imago_policies::PolicyConfig;
use imago_robots::{ExpertConfig, Robot};
use imago_worldmodel::{TransitionFamily, WorldModelConfig};

use crate::act::collect::{CollectConfig, collect_demonstrations};
use crate::act::evaluate::{Controller, EvalOutcome, evaluate, measure_latency};
use crate::act::paired::{PairedCounts, coverage_difference};
use crate::act::rollout::{CoachingConfig, RolloutConfig};
use crate::device::{DeviceSpec, resolve};
use crate::jobs::report::{ControllerRow, DemoReport};
use crate::jobs::train_world_model::train_and_save_world_model;
use crate::learn::bc::{BcConfig, ImitationDataset, train_bc};
use crate::learn::finetune::{FinetuneConfig, FinetuneMethod, FinetuneStart, finetune};
use crate::learn::world_model::{
    WorldModelTrainConfig, evaluate_world_model, log_imagined_windows, log_world_model_losses,
    split_episodes,
};
use crate::robot::RobotConfig;
use crate::store::atomic;
use crate::store::checkpoint::{CheckpointMeta, save_policy};
use crate::store::lock::DirLock;
use crate::store::outputs::{OutputKind, check_output, mark_run_directory};
use crate::store::replay::{ReplayWriter, ReplayWriterConfig, read_replay};
use crate::telemetry::{Telemetry, TelemetryEvent, log_replay_episodes};

/// Seeds of evaluation episodes start here, far from the demonstrations' seeds.
pub const EVAL_SEED_BASE: u64 = 1_000_000;

/// The demo's demonstrator: the scripted expert with action noise, making the robot's
/// deliberate mistake in 35% of episodes (reacher2d: going to a wrong target, as an
/// operator who sometimes reaches for the wrong object).
/// Behaviour cloning averages those episodes into its policy; advantage-weighted
/// fine-tuning is what is meant to take them back out.
pub fn demonstrator() -> ExpertConfig {
    ExpertConfig {
        mistake_rate: 0.35,
        ..ExpertConfig::default()
    }
}

/// How big a demo to run.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoPlan {
    /// Demonstration episodes.
    pub demonstrations: usize,
    /// How imperfect they are.
    pub expert: ExpertConfig,
    /// Behaviour-cloning settings.
    pub bc: BcConfig,
    /// World-model training settings.
    pub world_model: WorldModelTrainConfig,
    /// The world model's transition family.
    pub world_model_family: TransitionFamily,
    /// Advantage-weighted fine-tuning of the cloned policy.
    pub finetune: FinetuneConfig,
    /// Evaluation episodes per controller.
    pub eval_episodes: usize,
    /// Batch-1 inferences timed for the latency figures.
    pub latency_repeats: usize,
}

impl DemoPlan {
    /// The reduced demo: about 1 minute on 2 CPU cores (reacher2d).
    pub fn quick() -> Self {
        Self {
            demonstrations: 600,
            expert: demonstrator(),
            bc: BcConfig {
                steps: 800,
                batch_size: 32,
                learning_rate: 2e-3,
                ..BcConfig::default()
            },
            world_model: WorldModelTrainConfig {
                steps: 500,
                ..WorldModelTrainConfig::default()
            },
            world_model_family: TransitionFamily::Salt,
            finetune: FinetuneConfig {
                rounds: 2,
                episodes_per_round: 80,
                ..FinetuneConfig::default()
            },
            eval_episodes: 100,
            latency_repeats: 100,
        }
    }

    /// The plan for `robot`: [`Self::quick`] or [`Self::full`], resized for pusht,
    /// whose episodes run up to 300 ticks (five times reacher2d's) on a 96x96 camera,
    /// and whose demonstrator has its own imperfections: the robot's default target
    /// noise (0.02 of the half workspace, 5 units) and 30% near-miss episodes (a
    /// placement 12 units and 0.2 rad off the goal that looks right and fails the 0.95
    /// coverage). Cloning gets six and ten times reacher2d's steps (4800 and 12000
    /// against 800 and 1200): on pusht the cloned policy's coverage kept rising with
    /// steps (docs/policy.md, docs/pusht.md), and a step at its 24x24 read side costs
    /// about a third of reacher2d's.
    pub fn for_robot(robot: &RobotConfig, quick: bool) -> Self {
        let plan = if quick { Self::quick() } else { Self::full() };
        if robot.name() != imago_robots::pusht::NAME {
            return plan;
        }
        let scale = |quick_value: usize, full_value: usize| {
            if quick { quick_value } else { full_value }
        };
        Self {
            demonstrations: scale(150, 300),
            expert: ExpertConfig {
                mistake_rate: 0.3,
                ..robot.default_expert()
            },
            bc: BcConfig {
                steps: scale(4800, 12_000),
                ..plan.bc
            },
            world_model: WorldModelTrainConfig {
                steps: 500,
                ..plan.world_model
            },
            // DAgger: the noiseless expert coaches stretches of 8 ticks (a chance of
            // 0.05 a tick, 29% of the ticks) in the policy's rollouts, and the policy
            // imitates its commands with the demonstrations. No advantage-weighted
            // method moved the pusht clone measurably (real returns rank episodes that
            // all fail; the world model does not beat copying the last latent), while
            // five rounds of this one raised its mean max coverage by 0.10
            // (docs/pusht.md).
            finetune: FinetuneConfig {
                method: FinetuneMethod::Dagger,
                rounds: scale(2, 5),
                episodes_per_round: scale(48, 96),
                group_size: 1,
                policy_steps: 1000,
                learning_rate: 3e-4,
                world_model_steps: 0,
                critic_steps: 0,
                rollout: RolloutConfig {
                    exploration: 0.5,
                    takeover: None,
                    coaching: Some(CoachingConfig {
                        probability: 0.05,
                        ticks: 8,
                    }),
                },
                ..plan.finetune
            },
            eval_episodes: scale(50, 200),
            ..plan
        }
    }

    /// The full demo: under 10 minutes on 2 CPU cores.
    pub fn full() -> Self {
        Self {
            demonstrations: 1000,
            expert: demonstrator(),
            bc: BcConfig {
                steps: 1200,
                batch_size: 32,
                learning_rate: 2e-3,
                ..BcConfig::default()
            },
            world_model: WorldModelTrainConfig {
                steps: 500,
                ..WorldModelTrainConfig::default()
            },
            world_model_family: TransitionFamily::Salt,
            finetune: FinetuneConfig::default(),
            eval_episodes: 200,
            latency_repeats: 200,
        }
    }
}

/// Options of `imago demo`.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// The robot the demo runs on (it needs a scripted expert).
    pub robot: RobotConfig,
    /// Run the reduced demo.
    pub quick: bool,
    /// Where models run.
    pub device: DeviceSpec,
    /// Where the replay and the checkpoints go. A previous demo run there is replaced
    /// once this one is complete; anything else there is refused unless `force`.
    pub run_dir: PathBuf,
    /// Replace what `run_dir` holds even when it is not a demo run (once the new run
    /// is complete).
    pub force: bool,
    /// Seed of the whole run.
    pub seed: u64,
    /// Where the run is logged: sampled episodes of every phase, training curves,
    /// imagined rollouts beside real ones, learning steps and evaluations.
    pub telemetry: Telemetry,
}

/// Runs the demo and returns its report. The run is built in a hidden sibling of the
/// run directory and swapped in whole at the end, so an interrupted demo never leaves
/// a half-replaced run directory.
pub fn run_demo(options: &DemoOptions) -> anyhow::Result<DemoReport> {
    let run_dir = &options.run_dir;
    let plan = check_output(
        "--run-dir",
        run_dir,
        OutputKind::RunDirectory("demo"),
        &[],
        options.force,
    )?;
    let created = !run_dir.exists();
    let lock = DirLock::acquire(run_dir, "imago demo")?;
    if plan.continues() {
        eprintln!(
            "the previous demo run in {} is replaced once this one is complete",
            run_dir.display()
        );
    }
    let staged = atomic::sibling_temp(run_dir, "staged");
    let report = run_demo_in(options, &staged).and_then(|report| {
        mark_run_directory(&staged, "demo")?;
        atomic::replace_dir(&staged, run_dir)?;
        Ok(report)
    });
    drop(lock);
    if report.is_err() {
        let _ = std::fs::remove_dir_all(&staged);
        if created {
            let _ = std::fs::remove_dir_all(run_dir);
        }
    }
    report
}

/// The demo, writing its replay and checkpoints into `work`.
fn run_demo_in(options: &DemoOptions, work: &Path) -> anyhow::Result<DemoReport> {
    let plan = DemoPlan::for_robot(&options.robot, options.quick);
    let device = resolve(options.device)?;
    let mut phases = BTreeMap::new();
    let robot_config = options.robot.clone();
    let replay_dir = work.join("replay");

    eprintln!("collecting {} scripted demonstrations", plan.demonstrations);
    let start = Instant::now();
    let collected = collect_demonstrations(
        &CollectConfig {
            robot: robot_config.clone(),
            expert: plan.expert.clone(),
            episodes: plan.demonstrations,
            first_seed: options.seed.wrapping_mul(10_000_000),
        },
        &replay_dir,
        false,
    )?;
    let contents = read_replay(&replay_dir)?;
    phases.insert("collect".to_string(), start.elapsed().as_secs_f64());
    let telemetry = &options.telemetry;
    telemetry.send(TelemetryEvent::Note(format!(
        "collected {} scripted demonstrations ({:.1}% successful)",
        collected.episodes,
        100.0 * collected.success_rate()
    )));
    log_replay_episodes(telemetry, &contents.episodes, Some(&robot_config));

    let spec = robot_config.spec();
    let policy_config = PolicyConfig::for_robot(imago_policies::Architecture::Vla, &spec)?;
    eprintln!(
        "training the VLA policy by behaviour cloning on {} transitions ({} steps, {})",
        contents
            .episodes
            .iter()
            .map(|e| e.transitions.len())
            .sum::<usize>(),
        plan.bc.steps,
        device.description
    );
    let start = Instant::now();
    Dispatch::seed(&device.training, options.seed);
    let bc = BcConfig {
        seed: options.seed,
        ..plan.bc.clone()
    };
    let dataset = ImitationDataset::new(&contents.episodes, &policy_config);
    let (policy, losses) = train_bc::<Dispatch>(
        policy_config.init(&device.training),
        &policy_config,
        &dataset,
        &bc,
        &device.training,
    )?;
    let bc_training = policy;
    let policy = bc_training.valid();
    telemetry.send(TelemetryEvent::LossCurve {
        run: "bc".into(),
        term: "loss".into(),
        values: losses.clone(),
    });
    phases.insert("train_bc".to_string(), start.elapsed().as_secs_f64());

    let checkpoint_dir = work.join("bc-policy");
    let mut meta = CheckpointMeta::new(&spec, 1, None);
    meta.metrics
        .insert("bc_loss".into(), *losses.last().unwrap_or(&f32::NAN) as f64);
    save_policy(&policy, &policy_config, meta, &checkpoint_dir)?;

    let (training, held_out) = split_episodes(&contents.episodes);
    let wm_config = WorldModelConfig::for_robot(&spec, plan.world_model_family)?;
    eprintln!(
        "training a {} world model on {} episodes ({} steps), scoring it on {} held-out ones",
        plan.world_model_family,
        training.len(),
        plan.world_model.steps,
        held_out.len()
    );
    let start = Instant::now();
    let wm_train = WorldModelTrainConfig {
        seed: options.seed,
        ..plan.world_model.clone()
    };
    let trained_world_model = train_and_save_world_model(
        wm_config.init(&device.training),
        &wm_config,
        &training,
        &wm_train,
        CheckpointMeta::new(&spec, 1, None),
        &work.join("world-model"),
        &device,
    )?;
    let world_model = trained_world_model.model;
    log_world_model_losses(telemetry, &trained_world_model.history);
    phases.insert(
        "train_world_model".to_string(),
        start.elapsed().as_secs_f64(),
    );
    let start = Instant::now();
    let world_model_report = evaluate_world_model(
        &world_model,
        &wm_config,
        &held_out,
        wm_train.horizon,
        &device.inference,
    )?;
    telemetry.send(TelemetryEvent::WorldModelEvaluation {
        horizon_error: world_model_report.horizon_error.clone(),
        copy_last_error: world_model_report.copy_last_error.clone(),
        coverage_2sigma: world_model_report.coverage_2sigma.calibrated.clone(),
    });
    phases.insert(
        "eval_world_model".to_string(),
        start.elapsed().as_secs_f64(),
    );

    let finetune_config = FinetuneConfig {
        seed: options.seed,
        ..plan.finetune.clone()
    };
    eprintln!(
        "fine-tuning the policy ({}, {} rounds of {} episodes)",
        finetune_config.method, finetune_config.rounds, finetune_config.episodes_per_round
    );
    let start = Instant::now();
    let (mut writer, _) = ReplayWriter::open(
        &replay_dir,
        ReplayWriterConfig::default(),
        &robot_config,
        "imago demo",
    )?;
    let finetuned = finetune(
        FinetuneStart {
            policy: (bc_training, &policy_config),
            version: 1,
            world_model: (trained_world_model.training, &wm_config),
            world_model_training: wm_train.clone(),
            episodes: training.clone(),
        },
        &finetune_config,
        &robot_config,
        &mut writer,
        &device,
        telemetry,
    )?;
    writer.close()?;
    let mut meta = CheckpointMeta::new(&spec, finetuned.version, Some("bc-policy".into()));
    meta.metrics.insert(
        "rollout_success_rate".into(),
        finetuned
            .rounds
            .last()
            .map_or(f64::NAN, |r| r.rollout_success_rate),
    );
    save_policy(
        &finetuned.policy,
        &policy_config,
        meta,
        &work.join("finetuned-policy"),
    )?;
    phases.insert("finetune".to_string(), start.elapsed().as_secs_f64());

    eprintln!("evaluating on {} paired seeds", plan.eval_episodes);
    let start = Instant::now();
    let seeds: Vec<u64> = (0..plan.eval_episodes as u64)
        .map(|i| {
            EVAL_SEED_BASE
                .wrapping_add(options.seed.wrapping_mul(10_000_000))
                .wrapping_add(i)
        })
        .collect();
    let policy_controller = |policy, wrong_instruction| Controller::Policy {
        policy,
        config: &policy_config,
        device: &device.inference,
        wrong_instruction,
        execute_steps: 1,
    };
    let bc_outcome = evaluate(
        &policy_controller(&policy, false),
        &robot_config,
        &seeds,
        "eval bc",
    )?;
    let finetuned_outcome = evaluate(
        &policy_controller(&finetuned.policy, false),
        &robot_config,
        &seeds,
        "eval fine-tuned",
    )?;
    // A robot with a single task (pusht) has no other instruction to give.
    let has_alternatives = !robot_config.build()?.alternative_instructions().is_empty();
    let (wrong_outcome, finetuned_wrong_outcome) = if has_alternatives {
        (
            Some(evaluate(
                &policy_controller(&policy, true),
                &robot_config,
                &seeds,
                "eval wrong",
            )?),
            Some(evaluate(
                &policy_controller(&finetuned.policy, true),
                &robot_config,
                &seeds,
                "eval fine-tuned wrong",
            )?),
        )
    } else {
        (None, None)
    };
    let random_outcome = evaluate(
        &Controller::<Dispatch>::Random,
        &robot_config,
        &seeds,
        "eval random",
    )?;
    let expert_outcome = evaluate(
        &Controller::<Dispatch>::Expert(plan.expert.clone()),
        &robot_config,
        &seeds,
        "eval expert",
    )?;
    phases.insert("evaluate".to_string(), start.elapsed().as_secs_f64());
    let rows: Vec<(&str, &str, &EvalOutcome)> = [
        ("bc", "bc policy", Some(&bc_outcome)),
        ("finetuned", "fine-tuned policy", Some(&finetuned_outcome)),
        (
            "bc_wrong_instruction",
            "bc policy, wrong instruction",
            wrong_outcome.as_ref(),
        ),
        (
            "finetuned_wrong_instruction",
            "fine-tuned, wrong instruction",
            finetuned_wrong_outcome.as_ref(),
        ),
        ("random", "random actions", Some(&random_outcome)),
        (
            "demonstrator",
            "demonstrator (scripted)",
            Some(&expert_outcome),
        ),
    ]
    .into_iter()
    .filter_map(|(name, row, outcome)| outcome.map(|o| (name, row, o)))
    .collect();
    for &(name, _, outcome) in &rows {
        telemetry.send(TelemetryEvent::EvalSuccess {
            name: name.into(),
            rate: outcome.success_rate(),
        });
    }

    // Last in the recording (a saved one opens at its end): the world model's imagined
    // rollouts on held-out episodes beside what really followed.
    log_imagined_windows(
        telemetry,
        &world_model,
        &wm_config,
        &held_out,
        &training,
        &world_model_report.calibration_scale,
        Some(&robot_config),
        &device.inference,
    )?;

    let start = Instant::now();
    let sample = robot_config.build()?.reset(EVAL_SEED_BASE);
    let latency = measure_latency(
        &policy,
        &policy_config,
        &device.inference,
        &sample,
        plan.latency_repeats,
    )?;
    phases.insert("latency".to_string(), start.elapsed().as_secs_f64());

    let paired = PairedCounts::count(&bc_outcome, &finetuned_outcome)?;
    let mut bc_loss = BTreeMap::new();
    bc_loss.insert(
        "first".to_string(),
        *losses.first().unwrap_or(&f32::NAN) as f64,
    );
    bc_loss.insert(
        "last".to_string(),
        *losses.last().unwrap_or(&f32::NAN) as f64,
    );
    Ok(DemoReport {
        device: device.description,
        quick: options.quick,
        episodes: plan.eval_episodes,
        demonstrations: collected.episodes,
        demonstration_success_rate: collected.success_rate(),
        bc_success_rate: bc_outcome.success_rate(),
        wrong_instruction_success_rate: wrong_outcome.as_ref().map(EvalOutcome::success_rate),
        random_success_rate: random_outcome.success_rate(),
        finetuned_success_rate: finetuned_outcome.success_rate(),
        paired: paired.into(),
        improvement: paired.into(),
        coverage_improvement: coverage_difference(&bc_outcome, &finetuned_outcome).map(Into::into),
        finetune_method: finetune_config.method.to_string(),
        finetune_rounds: finetuned.rounds,
        controllers: rows
            .iter()
            .map(|&(_, row, outcome)| ControllerRow::new(row, outcome))
            .collect(),
        bc_loss,
        phases,
        policy_latency_ms: latency,
        world_model: world_model_report,
        run_dir: options.run_dir.display().to_string(),
    })
}
