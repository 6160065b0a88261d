//! Offline training from a replay directory (`imago train`).

use std::path::Path;

use burn::Dispatch;
use burn::module::AutodiffModule;
use burn::prelude::Backend;
use imago_policies::{ActionHeadKind, VlaPolicyConfig};
use imago_robots::Robot;
use imago_robots::reacher2d::{NAME, Reacher2d, Reacher2dConfig};
use serde::{Deserialize, Serialize};

use crate::bc::{BcConfig, ImitationDataset, train_bc};
use crate::checkpoint::{CheckpointMeta, load_policy, read_meta, save_policy};
use crate::device::ResolvedDevice;
use crate::replay::{ReplayContents, read_replay};
use crate::telemetry::{Telemetry, TelemetryEvent};

/// What an offline behaviour-cloning run did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BcRunSummary {
    /// Episodes trained on.
    pub episodes: usize,
    /// Transitions trained on.
    pub transitions: usize,
    /// Episodes skipped because a crash cut them short.
    pub incomplete_episodes: u64,
    /// Damaged replay stretches skipped.
    pub corruptions: usize,
    /// Loss at the first step.
    pub first_loss: f32,
    /// Loss at the last step.
    pub last_loss: f32,
    /// Version of the written checkpoint.
    pub version: u64,
}

/// Reads a replay directory for offline training: warns about damaged stretches
/// (every record before them is kept) and checks it holds complete reacher2d episodes.
pub fn read_training_replay(replay: &Path) -> anyhow::Result<ReplayContents> {
    let contents = read_replay(replay)?;
    for corruption in &contents.corruptions {
        eprintln!(
            "warning: replay segment {} is damaged at byte {} ({}); {} bytes skipped, every record before kept",
            corruption.segment, corruption.offset, corruption.reason, corruption.skipped_bytes
        );
    }
    anyhow::ensure!(
        !contents.episodes.is_empty(),
        "replay {} holds no complete episode; record some with `imago collect`",
        replay.display()
    );
    if let Some(other) = contents.episodes.iter().find(|e| e.start.robot != NAME) {
        anyhow::bail!(
            "replay holds episodes of robot `{}`; this trainer supports `{NAME}`",
            other.start.robot
        );
    }
    Ok(contents)
}

/// Trains a VLA policy by behaviour cloning on the replay at `replay` and writes the
/// checkpoint to `out`. With `init`, training continues from that checkpoint, whose
/// config must match this robot's policy config with `head`. The loss curve goes to
/// `telemetry`.
pub fn train_bc_offline(
    replay: &Path,
    out: &Path,
    init: Option<&Path>,
    head: ActionHeadKind,
    bc: &BcConfig,
    device: &ResolvedDevice,
    telemetry: &Telemetry,
) -> anyhow::Result<BcRunSummary> {
    let contents = read_training_replay(replay)?;
    let spec = Reacher2d::new(Reacher2dConfig::default()).spec().clone();
    let expected = VlaPolicyConfig::for_robot(&spec).with_head(head);
    Dispatch::seed(&device.training, bc.seed);
    let (policy, config, version, parent) = match init {
        Some(dir) => {
            let (policy, config, meta) =
                load_policy::<Dispatch>(dir, Some(&expected), &device.training)?;
            (
                policy,
                config,
                meta.version + 1,
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
    save_policy(&policy.valid(), &config, meta, out)?;
    read_meta(out)?;
    Ok(BcRunSummary {
        episodes: contents.episodes.len(),
        transitions: dataset.len(),
        incomplete_episodes: contents.incomplete_episodes,
        corruptions: contents.corruptions.len(),
        first_loss,
        last_loss,
        version,
    })
}
