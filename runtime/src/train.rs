//! Offline training from a replay directory (`imago train`).

use std::path::Path;

use burn::Dispatch;
use burn::module::AutodiffModule;
use burn::prelude::Backend;
use imago_policies::{ActionHeadKind, VlaPolicyConfig};
use imago_robots::reacher2d::{NAME, Reacher2d, Reacher2dConfig};
use imago_robots::{Robot, RobotSpec};
use serde::{Deserialize, Serialize};

use crate::bc::{BcConfig, ImitationDataset, train_bc};
use crate::checkpoint::{CheckpointMeta, POLICY_KIND, load_policy, read_meta, save_policy};
use crate::device::ResolvedDevice;
use crate::outputs::{Input, OutputKind, OutputPath};
use crate::replay::{EpisodeShape, ReplayContents, read_replay};
use crate::telemetry::{Telemetry, TelemetryEvent};

/// What an offline behaviour-cloning run did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BcRunSummary {
    /// Episodes trained on.
    pub episodes: usize,
    /// Transitions trained on.
    pub transitions: usize,
    /// Episodes left out because they were unfinished (a stop or a crash cut them).
    pub unfinished_episodes: u64,
    /// Episodes left out as damaged.
    pub damaged_episodes: usize,
    /// Loss at the first step.
    pub first_loss: f32,
    /// Loss at the last step.
    pub last_loss: f32,
    /// Version of the written checkpoint.
    pub version: u64,
}

/// A replay an offline command reads, and how it treats damage.
#[derive(Debug, Clone, Copy)]
pub struct ReplaySource<'a> {
    /// The replay directory.
    pub dir: &'a Path,
    /// Any damage is an error (`--strict`), instead of leaving damaged episodes out
    /// with a warning.
    pub strict: bool,
}

impl ReplaySource<'_> {
    /// The inputs of a training command: this replay (`--replay`) and the checkpoint it
    /// continues from (`--init`), for the output check.
    pub fn inputs_with<'a>(&'a self, init: Option<&'a Path>) -> Vec<Input<'a>> {
        let mut inputs = vec![Input {
            flag: "--replay",
            path: self.dir,
        }];
        inputs.extend(init.map(|path| Input {
            flag: "--init",
            path,
        }));
        inputs
    }

    /// A cheap check that `dir` is a replay at all, for commands to fail on a wrong
    /// `--replay` before anything else.
    pub fn ensure_exists(&self) -> anyhow::Result<()> {
        crate::replay::segment_files(self.dir).map(|_| ())
    }
}

/// Damage lines printed in full; the rest are counted (`imago replay check` lists all).
const DAMAGE_LINES_SHOWN: usize = 10;

/// Reads a replay for an offline command: whole episodes only, every damaged one left
/// out with the count and the reason on standard error (an error with `strict`), and
/// checks its episodes are of the robot `expected` (when given).
pub fn read_training_replay(
    source: ReplaySource<'_>,
    expected: Option<&RobotSpec>,
) -> anyhow::Result<ReplayContents> {
    let replay = source.dir;
    let contents = read_replay(replay)?;
    let lines = contents.damage_lines();
    if contents.is_damaged() {
        let summary = format!(
            "replay {} is damaged: {} episodes left out, {} damaged stretches",
            replay.display(),
            contents.damaged.len(),
            contents.corruptions.len()
        );
        anyhow::ensure!(
            !source.strict,
            "{summary} (--strict); `imago replay check {0}` lists them, `imago replay repair {0} --out NEW` writes a clean copy",
            replay.display()
        );
        eprintln!("warning: {summary}; every whole episode is used:");
        for line in lines.iter().take(DAMAGE_LINES_SHOWN) {
            eprintln!("warning:   {line}");
        }
        if lines.len() > DAMAGE_LINES_SHOWN {
            eprintln!(
                "warning:   and {} more (`imago replay check {}` lists all)",
                lines.len() - DAMAGE_LINES_SHOWN,
                replay.display()
            );
        }
    }
    anyhow::ensure!(
        !contents.episodes.is_empty(),
        "replay {} holds no whole episode{}; record some with `imago collect`",
        replay.display(),
        if contents.damaged.is_empty() {
            String::new()
        } else {
            format!(" ({} damaged ones were left out)", contents.damaged.len())
        }
    );
    if let Some(expected) = expected {
        check_replay_robot(&contents, replay, expected)?;
    }
    Ok(contents)
}

/// Checks that the replay's episodes are of the robot `expected`: by the spec its
/// manifest records, or (replays written before it did) by the shape of its episodes.
pub fn check_replay_robot(
    contents: &ReplayContents,
    replay: &Path,
    expected: &RobotSpec,
) -> anyhow::Result<()> {
    let differences = match (&contents.spec, &contents.shape) {
        (Some(spec), _) => spec.data_differences(expected),
        (None, Some(shape)) => {
            let wanted = EpisodeShape::of(expected);
            if *shape == wanted {
                Vec::new()
            } else {
                vec![format!("episodes shaped {shape:?} vs {wanted:?}")]
            }
        }
        (None, None) => Vec::new(),
    };
    anyhow::ensure!(
        differences.is_empty(),
        "replay {} records another robot than this command runs for (replay vs command: {})",
        replay.display(),
        differences.join(", ")
    );
    Ok(())
}

/// Trains a VLA policy by behaviour cloning on the replay at `replay` and writes the
/// checkpoint to `out`. With `init`, training continues from that checkpoint, whose
/// config must match this robot's policy config with `head`. The loss curve goes to
/// `telemetry`.
pub fn train_bc_offline(
    replay: ReplaySource<'_>,
    out: OutputPath<'_>,
    init: Option<&Path>,
    head: ActionHeadKind,
    bc: &BcConfig,
    device: &ResolvedDevice,
    telemetry: &Telemetry,
) -> anyhow::Result<BcRunSummary> {
    replay.ensure_exists()?;
    out.check(
        OutputKind::Checkpoint(POLICY_KIND),
        &replay.inputs_with(init),
    )?;
    let spec = Reacher2d::new(Reacher2dConfig::default()).spec().clone();
    let contents = read_training_replay(replay, Some(&spec))?;
    let expected = VlaPolicyConfig::for_robot(&spec).with_head(head);
    Dispatch::seed(&device.training, bc.seed);
    let (policy, config, version, parent) = match init {
        Some(dir) => {
            let (policy, config, meta) =
                load_policy::<Dispatch>(dir, Some(&expected), &device.training)?;
            (
                policy,
                config,
                meta.version.saturating_add(1),
                Some(dir.display().to_string()),
            )
        }
        None => (expected.init(&device.training), expected, 1, None),
    };
    let dataset = ImitationDataset::new(&contents.episodes, &config);
    let (policy, losses) = train_bc::<Dispatch>(policy, &config, &dataset, bc, &device.training)?;
    telemetry.send(TelemetryEvent::LossCurve {
        run: "bc".into(),
        term: "loss".into(),
        values: losses.clone(),
    });
    let first_loss = *losses.first().unwrap_or(&f32::NAN);
    let last_loss = *losses.last().unwrap_or(&f32::NAN);
    let mut meta = CheckpointMeta::new(NAME, version, parent);
    meta.metrics.insert("bc_loss".into(), last_loss as f64);
    save_policy(&policy.valid(), &config, meta, out.path)?;
    read_meta(out.path)?;
    Ok(BcRunSummary {
        episodes: contents.episodes.len(),
        transitions: dataset.len(),
        unfinished_episodes: contents.unfinished_episodes,
        damaged_episodes: contents.damaged.len(),
        first_loss,
        last_loss,
        version,
    })
}
