//! `imago train`: behaviour cloning, the world model, or fine-tuning, from a replay
//! whose recorded robot spec fixes the models' shapes.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use imago_policies::lora::LoraConfig;
use imago_policies::{ActionHeadKind, Architecture, StemInputs};
use imago_runtime::device::{DeviceSpec, resolve};
use imago_runtime::jobs::finetune::finetune_offline;
use imago_runtime::jobs::train::{PolicyShape, train_bc_offline};
use imago_runtime::jobs::train_lerobot::{
    LeRobotImitation, train_lerobot_offline, train_new_diffusion_offline,
};
use imago_runtime::jobs::train_world_model::train_world_model_offline;
use imago_runtime::learn::bc::BcConfig;
use imago_runtime::learn::finetune::{FinetuneConfig, FinetuneMethod};
use imago_runtime::learn::schedule::RateSchedule;
use imago_runtime::learn::weight_average::WeightAverageConfig;
use imago_runtime::learn::world_model::WorldModelTrainConfig;
use imago_runtime::learn::{MAX_BATCH, MAX_STEPS};
use imago_runtime::store::checkpoint::WORLD_MODEL_KIND;
use imago_runtime::store::lerobot_policy::names_lerobot_policy;
use imago_runtime::store::outputs::{Input, OutputKind, OutputPath, check_output};
use imago_runtime::store::replay::{EpisodeSelection, ReplaySource};
use imago_runtime::telemetry::{Telemetry, TelemetryConfig};
use imago_runtime::toml_file::read_toml;
use imago_worldmodel::{Supervision, TransitionFamily, WorldModelConfig};

use crate::args::{MAX_HORIZON, RerunArgs, flag_in_range, write_json};

/// Flags of `imago train`.
#[derive(Debug, Args)]
pub struct TrainArgs {
    /// Replay directory.
    #[arg(long)]
    replay: PathBuf,
    /// What to train.
    #[arg(long, value_enum, default_value_t = TrainTarget::Bc)]
    what: TrainTarget,
    /// Checkpoint directory to write (new or empty; anything already there is
    /// refused, see --force).
    #[arg(long)]
    out: PathBuf,
    /// Replace what --out holds (a checkpoint or anything else), or update the
    /// --init checkpoint in place (the old one is kept until the new one is
    /// complete).
    #[arg(long)]
    force: bool,
    /// Any damage in the replay is an error (else damaged episodes are left out
    /// with a warning).
    #[arg(long)]
    strict: bool,
    /// Use only the replay's episodes that ended in success (a demonstrator's
    /// failures are left out, not imitated). Fine-tuning still learns from every
    /// rollout it collects itself.
    #[arg(long)]
    successful_only: bool,
    /// Continue from this checkpoint, or from a LeRobot policy directory (ACT,
    /// Diffusion Policy; bc and finetune write a LeRobot directory back).
    #[arg(long)]
    init: Option<PathBuf>,
    /// Optimiser steps [default: 1500 for bc, 1000 for worldmodel].
    #[arg(long)]
    steps: Option<usize>,
    /// Transitions (bc) or windows (worldmodel) per step [default: 64 for bc, 16
    /// for worldmodel].
    #[arg(long)]
    batch_size: Option<usize>,
    /// Peak learning rate [default: 1e-3 for bc and finetune, 3e-3 for worldmodel; a
    /// LeRobot policy's own `optimizer_lr` from its config.json].
    #[arg(long)]
    learning_rate: Option<f64>,
    /// World model: the transition family of the ensemble members [default: salt].
    #[arg(long)]
    family: Option<TransitionFamily>,
    /// World model: steps per training window [default: 8].
    #[arg(long)]
    horizon: Option<usize>,
    /// World model: feed predictions back in (multi-step) or not (one-step)
    /// [default: multi-step].
    #[arg(long, value_enum)]
    supervision: Option<SupervisionArg>,
    /// Policy: the architecture of a new policy, `vla` (camera, instruction and
    /// proprioception through a transformer), `linear` (proprioception only) or
    /// `diffusion` (LeRobot's Diffusion Policy reading the robot's state, sized for a
    /// CPU, written as a LeRobot directory) [default: vla; with --init, the
    /// checkpoint's].
    #[arg(long)]
    policy: Option<PolicyChoice>,
    /// Policy: the action-chunk head of a new policy [default: gaussian; with --init,
    /// the checkpoint's].
    #[arg(long)]
    head: Option<ActionHeadKind>,
    /// Policy: actions per predicted chunk of a new policy, in [1, 64] [default: 4;
    /// with --init, the checkpoint's].
    #[arg(long)]
    chunk_len: Option<usize>,
    /// Policy: the width of a new policy, in [8, 1024]: the VLA's token width (its
    /// feed-forward blocks twice that; a multiple of its 4 attention heads), the linear
    /// policy's summary [default: 64; with --init, the checkpoint's].
    #[arg(long)]
    width: Option<usize>,
    /// Policy: transformer layers of a new VLA, in [1, 12] [default: 2; with --init,
    /// the checkpoint's].
    #[arg(long)]
    layers: Option<usize>,
    /// Policy: a new VLA that does not read the camera (it is given a blank frame and
    /// learns from the instruction and proprioception alone; for pusht's pose
    /// setting, where the proprioception holds the block) [default: it reads the
    /// camera; with --init, the checkpoint's].
    #[arg(long)]
    no_camera: bool,
    /// Policy: what a new VLA's per-pixel stem reads at each pixel: `colour`,
    /// `colour-and-position` (keypoints that can find how an object is turned),
    /// `neighbourhood` (the 3x3 pixels around it: a 3x3 convolution that sees edges)
    /// or `neighbourhood-and-position` [default: colour; with --init, the
    /// checkpoint's]. For pusht's vision-only setting, where the block's pose is seen
    /// only in the frame.
    #[arg(long, value_name = "INPUTS")]
    stem_inputs: Option<StemInputs>,
    /// Policy: the side, in pixels, at which a new VLA reads the camera: the frame
    /// averaged down by a whole factor (pusht's 96x96 frames: 8, 16, 24, 32, 48 or 96)
    /// [default: the frame as it is up to 64 pixels, else averaged to at most 24; with
    /// --init, the checkpoint's]. Finer frames resolve thinner parts at a cost that
    /// grows with the pixels read.
    #[arg(long, value_name = "PIXELS")]
    frame_side: Option<usize>,
    /// Policy: channels of a new VLA's per-pixel stem, in [1, 256]: its keypoints
    /// (where in the frame each channel's features peak) and the features of each patch
    /// token [default: 16; with --init, the checkpoint's].
    #[arg(long, value_name = "N")]
    stem_channels: Option<usize>,
    /// Policy: per-pixel layers of a new VLA's stem, in [1, 4]: the first reads
    /// --stem-inputs, each further one adds a mix of the channels (a residual 1x1
    /// convolution) before the keypoints [default: 1; with --init, the checkpoint's].
    #[arg(long, value_name = "N")]
    stem_layers: Option<usize>,
    /// Policy: the proprioception entries a new policy reads, by name, comma-separated
    /// (pusht's pose setting with `agent_x,agent_y` reads what its vision setting
    /// gives) [default: every entry but velocities; with --init, the checkpoint's].
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    read_state: Option<Vec<String>>,
    /// Policy: proprioception entries, by name, that a new VLA does not read but is
    /// trained to find in its frame: a linear readout of its keypoints predicts them
    /// and its squared error joins the loss (pusht's pose setting:
    /// `block_x,block_y,block_cos,block_sin` with `--read-state agent_x,agent_y`; what
    /// a simulator knows and the robot must see) [default: none; with --init, the
    /// checkpoint's].
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    keypoint_targets: Option<Vec<String>>,
    /// Policy: the weight of --keypoint-targets' squared error in the loss, in [0,
    /// 1000] [default: 10; with --init, the checkpoint's].
    #[arg(long, value_name = "W")]
    keypoint_target_weight: Option<f64>,
    /// Behaviour cloning: move each training frame by a random shift of up to this
    /// many camera pixels in x and y, the edges repeated (random-shift augmentation;
    /// acting reads the frame unshifted), in [0, 32] [default: 0, frames as recorded].
    #[arg(long, value_name = "PIXELS")]
    frame_shift: Option<u32>,
    /// Behaviour cloning: write the exponential moving average of the weights over
    /// the steps (decay warming up as Diffusion Policy's, to 0.9999) instead of the
    /// last step's [default: the last step's; a new `--policy diffusion` always
    /// averages].
    #[arg(long)]
    ema: bool,
    /// Fine-tuning: the world-model checkpoint imagination runs in [default: a SALT
    /// world model trained on the replay first].
    #[arg(long)]
    world_model: Option<PathBuf>,
    /// Fine-tuning: advantage source and policy loss [default: awr-imagination,
    /// or the config's].
    #[arg(long)]
    method: Option<FinetuneMethod>,
    /// Fine-tuning: collect-update rounds [default: 3, or the config's].
    #[arg(long)]
    rounds: Option<usize>,
    /// Fine-tuning or world model: a TOML file of settings (`FinetuneConfig`, see
    /// docs/finetuning.md; `WorldModelTrainConfig`, see docs/worldmodel.md); flags win.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Fine-tuning: also write what the run did as JSON here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// A LeRobot policy (--init DIR) trained through LoRA adapters of this rank, in
    /// [1, 256], on its transformer's (ACT) or U-Net's (Diffusion) linear layers, at
    /// alpha = 2 x rank, every other weight frozen [default: every weight learns].
    #[arg(long)]
    lora_rank: Option<usize>,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[command(flatten)]
    rerun: RerunArgs,
}

/// What `--policy` names: one of imago's own architectures, or a new LeRobot one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PolicyChoice {
    /// imago's own policy of this architecture.
    Imago(Architecture),
    /// A new LeRobot Diffusion Policy (`jobs::train_lerobot::new_diffusion_config`).
    Diffusion,
}

impl std::str::FromStr for PolicyChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "diffusion" {
            return Ok(Self::Diffusion);
        }
        s.parse().map(Self::Imago).map_err(|_| {
            let mut names: Vec<&str> = Architecture::ALL.iter().map(|a| a.name()).collect();
            names.push("diffusion");
            format!("unknown policy `{s}` (one of: {})", names.join(", "))
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum TrainTarget {
    /// Behaviour cloning of the VLA policy.
    Bc,
    /// The latent world model (held-out episodes are left out).
    Worldmodel,
    /// Advantage-weighted fine-tuning of `--init` (with `--world-model`, or one trained
    /// on the replay first); collected episodes are appended to `--replay`.
    Finetune,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum SupervisionArg {
    /// Each step from the encoding of the real previous observation.
    OneStep,
    /// Predictions fed back in over the whole window.
    MultiStep,
}

impl TrainTarget {
    /// As `--what` names it.
    fn flag_value(self) -> &'static str {
        match self {
            Self::Bc => "bc",
            Self::Worldmodel => "worldmodel",
            Self::Finetune => "finetune",
        }
    }
}

impl TrainArgs {
    /// Refuses a flag the chosen trainer does not read (rather than ignoring it): one
    /// error naming the flag and the trainers it applies to.
    fn check_flags_apply(&self) -> anyhow::Result<()> {
        use TrainTarget::{Bc, Finetune, Worldmodel};
        let given: [(&str, bool, &[TrainTarget]); 25] = [
            ("--successful-only", self.successful_only, &[Bc, Finetune]),
            ("--family", self.family.is_some(), &[Worldmodel]),
            ("--horizon", self.horizon.is_some(), &[Worldmodel]),
            ("--supervision", self.supervision.is_some(), &[Worldmodel]),
            ("--policy", self.policy.is_some(), &[Bc]),
            ("--head", self.head.is_some(), &[Bc]),
            ("--chunk-len", self.chunk_len.is_some(), &[Bc]),
            ("--width", self.width.is_some(), &[Bc]),
            ("--layers", self.layers.is_some(), &[Bc]),
            ("--no-camera", self.no_camera, &[Bc]),
            ("--stem-inputs", self.stem_inputs.is_some(), &[Bc]),
            ("--frame-side", self.frame_side.is_some(), &[Bc]),
            ("--stem-channels", self.stem_channels.is_some(), &[Bc]),
            ("--stem-layers", self.stem_layers.is_some(), &[Bc]),
            ("--read-state", self.read_state.is_some(), &[Bc]),
            ("--keypoint-targets", self.keypoint_targets.is_some(), &[Bc]),
            (
                "--keypoint-target-weight",
                self.keypoint_target_weight.is_some(),
                &[Bc],
            ),
            ("--frame-shift", self.frame_shift.is_some(), &[Bc]),
            ("--ema", self.ema, &[Bc]),
            ("--world-model", self.world_model.is_some(), &[Finetune]),
            ("--method", self.method.is_some(), &[Finetune]),
            ("--rounds", self.rounds.is_some(), &[Finetune]),
            ("--config", self.config.is_some(), &[Worldmodel, Finetune]),
            ("--report", self.report.is_some(), &[Finetune]),
            ("--lora-rank", self.lora_rank.is_some(), &[Bc, Finetune]),
        ];
        for (flag, is_given, applies_to) in given {
            if is_given && !applies_to.contains(&self.what) {
                let names: Vec<&str> = applies_to.iter().map(|t| t.flag_value()).collect();
                anyhow::bail!(
                    "{flag} applies to --what {}, not --what {}",
                    names.join(" or "),
                    self.what.flag_value()
                );
            }
        }
        Ok(())
    }
}

/// Checks the flags, trains what `--what` names and says what was written.
pub fn run(args: TrainArgs, device: DeviceSpec) -> anyhow::Result<()> {
    args.check_flags_apply()?;
    if let Some(steps) = args.steps {
        flag_in_range("--steps", steps, 1..=MAX_STEPS)?;
    }
    if let Some(batch_size) = args.batch_size {
        flag_in_range("--batch-size", batch_size, 1..=MAX_BATCH)?;
    }
    if let Some(learning_rate) = args.learning_rate {
        flag_in_range("--learning-rate", learning_rate, 1e-9..=1.0)?;
    }
    if let Some(rounds) = args.rounds {
        flag_in_range("--rounds", rounds, 1..=10_000)?;
    }
    if let Some(rank) = args.lora_rank {
        flag_in_range("--lora-rank", rank, 1..=256)?;
        let lerobot = args.init.as_deref().is_some_and(names_lerobot_policy);
        anyhow::ensure!(
            lerobot,
            "--lora-rank adapts a LeRobot policy (--init DIR, a LeRobot ACT or Diffusion Policy directory); imago's own policies train whole"
        );
    }
    if let Some(horizon) = args.horizon {
        flag_in_range("--horizon", horizon, 1..=MAX_HORIZON)?;
    }
    let device = resolve(device)?;
    let session = args.rerun.start(&TelemetryConfig::default())?;
    let telemetry = session.handle();
    output(&args).announcing_replacement(|| match args.what {
        TrainTarget::Bc => train_bc(&args, &device, &telemetry),
        TrainTarget::Worldmodel => train_world_model(&args, &device, &telemetry),
        TrainTarget::Finetune => train_finetune(&args, &device, &telemetry),
    })?;
    args.rerun.finish(session)
}

fn source(args: &TrainArgs) -> ReplaySource<'_> {
    ReplaySource {
        dir: &args.replay,
        strict: args.strict,
        episodes: if args.successful_only {
            EpisodeSelection::Successful
        } else {
            EpisodeSelection::All
        },
    }
}

fn output(args: &TrainArgs) -> OutputPath<'_> {
    OutputPath {
        path: &args.out,
        force: args.force,
    }
}

fn train_bc(
    args: &TrainArgs,
    device: &imago_runtime::device::ResolvedDevice,
    telemetry: &Telemetry,
) -> anyhow::Result<()> {
    let defaults = BcConfig::default();
    if let Some(init) = args.init.as_deref().filter(|dir| names_lerobot_policy(dir)) {
        return train_lerobot_bc(args, init, device, telemetry);
    }
    let architecture = match args.policy {
        Some(PolicyChoice::Diffusion) => return train_new_diffusion(args, device, telemetry),
        Some(PolicyChoice::Imago(architecture)) => Some(architecture),
        None => None,
    };
    let steps = args.steps.unwrap_or(defaults.steps);
    let bc = BcConfig {
        steps,
        batch_size: args.batch_size.unwrap_or(defaults.batch_size),
        learning_rate: args.learning_rate.unwrap_or(defaults.learning_rate),
        seed: args.seed,
        warmup_steps: defaults.warmup_steps.min(steps / 2),
        average: args.ema.then(WeightAverageConfig::default),
        frame_shift: args.frame_shift.unwrap_or(defaults.frame_shift),
        ..defaults
    };
    let summary = train_bc_offline(
        source(args),
        output(args),
        args.init.as_deref(),
        PolicyShape {
            architecture,
            head: args.head,
            chunk_len: args.chunk_len,
            width: args.width,
            layers: args.layers,
            no_camera: args.no_camera,
            stem_inputs: args.stem_inputs,
            frame_side: args.frame_side,
            stem_channels: args.stem_channels,
            stem_layers: args.stem_layers,
            read_state: args.read_state.clone(),
            keypoint_targets: args.keypoint_targets.clone(),
            keypoint_target_weight: args.keypoint_target_weight,
        },
        &bc,
        device,
        telemetry,
    )?;
    println!(
        "trained on {} episodes ({} transitions) on {}: loss {:.3} -> {:.3}; checkpoint version {} in {}",
        summary.episodes,
        summary.transitions,
        device.description,
        summary.first_loss,
        summary.last_loss,
        summary.version,
        args.out.display()
    );
    Ok(())
}

fn train_world_model(
    args: &TrainArgs,
    device: &imago_runtime::device::ResolvedDevice,
    telemetry: &Telemetry,
) -> anyhow::Result<()> {
    let defaults = match &args.config {
        Some(path) => {
            let config_file = Input {
                flag: "--config",
                path,
            };
            // Before the file is read, that --out spares it; the rest of the output's
            // check (what --out holds already) is the trainer's.
            check_output(
                "--out",
                &args.out,
                OutputKind::Checkpoint(WORLD_MODEL_KIND),
                &[config_file],
                args.force,
            )?;
            read_toml::<WorldModelTrainConfig>(path)?
        }
        None => WorldModelTrainConfig::default(),
    };
    let steps = args.steps.unwrap_or(defaults.steps);
    let horizon = args.horizon.unwrap_or(defaults.horizon);
    let train = WorldModelTrainConfig {
        steps,
        batch_size: args.batch_size.unwrap_or(defaults.batch_size),
        learning_rate: args.learning_rate.unwrap_or(defaults.learning_rate),
        horizon,
        supervision: match args.supervision {
            Some(SupervisionArg::OneStep) => Supervision::OneStep,
            Some(SupervisionArg::MultiStep) => Supervision::MultiStep,
            None => defaults.supervision,
        },
        seed: args.seed,
        // A short run warms up for at most half its steps.
        warmup_steps: defaults.warmup_steps.min(steps / 2),
        ..defaults
    };
    train
        .validate()
        .map_err(|e| anyhow::anyhow!("world-model training settings: {e}"))?;
    let family = args
        .family
        .unwrap_or(WorldModelConfig::new(1, vec![1.0]).family);
    let summary = train_world_model_offline(
        source(args),
        output(args),
        args.init.as_deref(),
        family,
        &train,
        device,
        telemetry,
    )?;
    println!(
        "trained a {family} world model on {} episodes ({} windows of {horizon} steps; {} held out) on {}: prediction loss {:.4} -> {:.4}; checkpoint version {} in {}",
        summary.episodes,
        summary.windows,
        summary.held_out,
        device.description,
        summary.first_prediction_loss,
        summary.last_prediction_loss,
        summary.version,
        args.out.display()
    );
    Ok(())
}

/// `--lora-rank R`'s adapters: rank `R` at alpha `2 R`.
fn lora_of_rank(rank: usize) -> LoraConfig {
    LoraConfig {
        rank,
        alpha: 2.0 * rank as f64,
    }
}

/// The imitation of a LeRobot policy the flags ask for (behaviour cloning's defaults
/// for what they leave out; the rate `None`: the policy's own, held constant; the last
/// step's weights written).
fn lerobot_imitation(args: &TrainArgs, lora: Option<LoraConfig>) -> LeRobotImitation {
    let defaults = BcConfig::default();
    LeRobotImitation {
        steps: args.steps.unwrap_or(defaults.steps),
        batch_size: args.batch_size.unwrap_or(defaults.batch_size),
        learning_rate: args.learning_rate,
        seed: args.seed,
        schedule: RateSchedule::Constant,
        lora,
        average: args.ema.then(WeightAverageConfig::default),
    }
}

/// Why a new Diffusion Policy refuses the VLA's camera flags.
const READS_NO_CAMERA: &str =
    "a new Diffusion Policy reads the robot's state and the block's keypoints, no camera";

/// Why a new Diffusion Policy refuses the size flags.
const SIZED_FOR_A_CPU: &str = "a new Diffusion Policy's U-Net is sized for a CPU (docs/pusht.md)";

/// `--what bc --policy diffusion`: a new LeRobot Diffusion Policy trained on the replay.
fn train_new_diffusion(
    args: &TrainArgs,
    device: &imago_runtime::device::ResolvedDevice,
    telemetry: &Telemetry,
) -> anyhow::Result<()> {
    let refused = [
        (
            "--init",
            args.init.is_some(),
            "a new policy starts from fresh weights; to continue a Diffusion Policy, pass its directory as --init and leave --policy out",
        ),
        (
            "--head",
            args.head.is_some(),
            "a Diffusion Policy's head is its denoising U-Net",
        ),
        (
            "--chunk-len",
            args.chunk_len.is_some(),
            "a new Diffusion Policy denoises 16 actions and executes 8",
        ),
        ("--width", args.width.is_some(), SIZED_FOR_A_CPU),
        ("--layers", args.layers.is_some(), SIZED_FOR_A_CPU),
        ("--no-camera", args.no_camera, READS_NO_CAMERA),
        ("--stem-inputs", args.stem_inputs.is_some(), READS_NO_CAMERA),
        ("--frame-side", args.frame_side.is_some(), READS_NO_CAMERA),
        (
            "--stem-channels",
            args.stem_channels.is_some(),
            READS_NO_CAMERA,
        ),
        ("--stem-layers", args.stem_layers.is_some(), READS_NO_CAMERA),
        (
            "--keypoint-targets",
            args.keypoint_targets.is_some(),
            READS_NO_CAMERA,
        ),
        (
            "--keypoint-target-weight",
            args.keypoint_target_weight.is_some(),
            READS_NO_CAMERA,
        ),
        (
            "--read-state",
            args.read_state.is_some(),
            "a new Diffusion Policy reads the robot's whole state",
        ),
        ("--frame-shift", args.frame_shift.is_some(), READS_NO_CAMERA),
    ];
    if let Some((flag, _, why)) = refused.iter().find(|(_, given, _)| *given) {
        anyhow::bail!("{flag} does not apply to --policy diffusion: {why}");
    }
    let summary = train_new_diffusion_offline(
        source(args),
        output(args),
        &lerobot_imitation(args, None).with_diffusion_recipe(),
        device,
        telemetry,
    )?;
    println!(
        "trained a new Diffusion Policy on {} episodes ({} transitions) on {}: loss {:.3} -> {:.3}; LeRobot policy directory in {}",
        summary.episodes,
        summary.transitions,
        device.description,
        summary.first_loss,
        summary.last_loss,
        args.out.display()
    );
    Ok(())
}

/// `--what bc --init DIR` of a LeRobot policy directory.
fn train_lerobot_bc(
    args: &TrainArgs,
    init: &std::path::Path,
    device: &imago_runtime::device::ResolvedDevice,
    telemetry: &Telemetry,
) -> anyhow::Result<()> {
    let shaping = [
        ("--policy", args.policy.is_some()),
        ("--head", args.head.is_some()),
        ("--chunk-len", args.chunk_len.is_some()),
        ("--width", args.width.is_some()),
        ("--layers", args.layers.is_some()),
        ("--no-camera", args.no_camera),
        ("--stem-inputs", args.stem_inputs.is_some()),
        ("--frame-side", args.frame_side.is_some()),
        ("--stem-channels", args.stem_channels.is_some()),
        ("--stem-layers", args.stem_layers.is_some()),
        ("--read-state", args.read_state.is_some()),
        ("--keypoint-targets", args.keypoint_targets.is_some()),
        (
            "--keypoint-target-weight",
            args.keypoint_target_weight.is_some(),
        ),
    ];
    if let Some((flag, _)) = shaping.iter().find(|(_, given)| *given) {
        anyhow::bail!(
            "{flag}: {} is a LeRobot policy, whose architecture, head, chunk length and size are its config.json's; leave {flag} out",
            init.display()
        );
    }
    anyhow::ensure!(
        args.frame_shift.is_none(),
        "--frame-shift: {} is a LeRobot policy, whose image augmentation is its config.json's (Diffusion Policy's `crop_shape` and `crop_is_random`); leave --frame-shift out",
        init.display()
    );
    let summary = train_lerobot_offline(
        source(args),
        output(args),
        init,
        &lerobot_imitation(args, args.lora_rank.map(lora_of_rank)),
        device,
        telemetry,
    )?;
    println!(
        "trained {} on {} episodes ({} transitions) on {}: loss {:.3} -> {:.3}; LeRobot policy directory in {}",
        init.display(),
        summary.episodes,
        summary.transitions,
        device.description,
        summary.first_loss,
        summary.last_loss,
        args.out.display()
    );
    Ok(())
}

fn train_finetune(
    args: &TrainArgs,
    device: &imago_runtime::device::ResolvedDevice,
    telemetry: &Telemetry,
) -> anyhow::Result<()> {
    let init = args.init.as_deref().ok_or_else(|| {
        anyhow::anyhow!("fine-tuning needs --init, the policy checkpoint to improve")
    })?;
    let lerobot = names_lerobot_policy(init);
    let mut settings = match &args.config {
        Some(path) => {
            let config_file = Input {
                flag: "--config",
                path,
            };
            let kind = if lerobot {
                OutputKind::LeRobotPolicy
            } else {
                OutputKind::PolicyCheckpoint
            };
            // As for the world model's settings above.
            check_output("--out", &args.out, kind, &[config_file], args.force)?;
            read_toml::<FinetuneConfig>(path)?
        }
        None => FinetuneConfig::default(),
    };
    settings.seed = args.seed;
    settings.method = args.method.unwrap_or(settings.method);
    settings.rounds = args.rounds.unwrap_or(settings.rounds);
    settings.policy_steps = args.steps.unwrap_or(settings.policy_steps);
    settings.batch_size = args.batch_size.unwrap_or(settings.batch_size);
    settings.lora = args.lora_rank.map(lora_of_rank).or(settings.lora);
    // `--learning-rate` sets the rate of the policy being fine-tuned, whichever it is.
    if lerobot {
        settings.lerobot_learning_rate = args.learning_rate.or(settings.lerobot_learning_rate);
    } else {
        settings.learning_rate = args.learning_rate.unwrap_or(settings.learning_rate);
    }
    settings
        .validate()
        .map_err(|e| anyhow::anyhow!("fine-tuning settings: {e}"))?;
    let summary = finetune_offline(
        source(args),
        init,
        args.world_model.as_deref(),
        output(args),
        &settings,
        device,
        telemetry,
    )?;
    let written = if lerobot {
        "LeRobot policy directory, version"
    } else {
        "checkpoint version"
    };
    println!(
        "fine-tuned {} ({}, {} rounds) on {}: {written} {} in {}",
        init.display(),
        settings.method,
        summary.rounds.len(),
        device.description,
        summary.version,
        args.out.display()
    );
    if let Some(path) = &args.report {
        write_json(path, &summary)?;
    }
    Ok(())
}
