//! Offline behaviour cloning from a replay directory (`imago train --what bc`): the
//! policy's shapes come from the robot spec the replay records.

use std::path::Path;

use burn::Dispatch;
use burn::module::AutodiffModule;
use burn::prelude::Backend;
use imago_policies::{ActionHeadKind, Architecture, PolicyConfig};
use serde::{Deserialize, Serialize};

use crate::device::ResolvedDevice;
use crate::learn::bc::{BcConfig, ImitationDataset, train_bc};
use crate::store::checkpoint::{
    CheckpointMeta, ensure_trained_for, load_policy_to_continue, read_meta, save_policy,
    stored_architecture,
};
use crate::store::outputs::{OutputKind, OutputPath};
use crate::store::replay::{ReplaySource, read_training_replay};
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

/// The choices of a new policy's shape that are not the robot's: its action head and
/// its chunk length. `None` keeps the default for a new policy, the checkpoint's for
/// one continued with `--init` (which must not be asked to change them).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PolicyShape {
    /// The architecture of a new policy (default: the VLA); with `init`, the
    /// checkpoint's, which this must equal when given.
    pub architecture: Option<Architecture>,
    /// The action-chunk head.
    pub head: Option<ActionHeadKind>,
    /// Actions per chunk. Range: [1, 64].
    pub chunk_len: Option<usize>,
}

/// Trains a policy (of `shape`'s architecture) by behaviour cloning on the replay at `replay` and writes the
/// checkpoint to `out`. With `init`, training continues from that checkpoint, whose
/// config must match the policy config of `shape` for the replay's robot (a
/// checkpoint for a robot of another spec is an error naming both). The loss curve
/// goes to `telemetry`.
pub fn train_bc_offline(
    replay: ReplaySource<'_>,
    out: OutputPath<'_>,
    init: Option<&Path>,
    shape: PolicyShape,
    bc: &BcConfig,
    device: &ResolvedDevice,
    telemetry: &Telemetry,
) -> anyhow::Result<BcRunSummary> {
    if let Some(k) = shape.chunk_len {
        anyhow::ensure!(
            (1..=64).contains(&k),
            "--chunk-len {k}: must be in [1, 64] (actions per predicted chunk)"
        );
    }
    replay.ensure_exists()?;
    out.check(OutputKind::PolicyCheckpoint, &replay.inputs_with(init))?;
    let read = read_training_replay(replay)?;
    let (spec, contents) = (read.spec, read.contents);
    let architecture = match (init, shape.architecture) {
        (Some(dir), asked) => {
            let stored = stored_architecture(dir)?;
            if let Some(asked) = asked.filter(|&asked| asked != stored) {
                anyhow::bail!(
                    "--policy {asked}: {} holds a {stored} policy (the architecture cannot change when training continues; leave --policy out)",
                    dir.display()
                );
            }
            stored
        }
        (None, asked) => asked.unwrap_or(Architecture::Vla),
    };
    let mut expected = PolicyConfig::for_robot(architecture, &spec)
        .map_err(|e| anyhow::anyhow!("the policy for {}: {e}", spec.summary()))?;
    if let Some(head) = shape.head {
        expected = expected.with_head(head);
    }
    if let Some(k) = shape.chunk_len {
        expected = expected.with_chunk_len(k);
    }
    Dispatch::seed(&device.training, bc.seed);
    let (policy, config, version, parent) = match init {
        Some(dir) => {
            ensure_trained_for(dir, &spec)?;
            let (policy, config, meta) =
                load_policy_to_continue::<Dispatch>(dir, &expected, &device.training)?;
            if shape.head.is_some_and(|head| head != config.head()) {
                anyhow::bail!(
                    "--head {}: {} holds a policy with a {} head (a head cannot change when training continues; leave --head out)",
                    expected.head(),
                    dir.display(),
                    config.head()
                );
            }
            if shape.chunk_len.is_some_and(|k| k != config.chunk_len()) {
                anyhow::bail!(
                    "--chunk-len {}: {} holds a policy with chunks of {} (the chunk length cannot change when training continues; leave --chunk-len out)",
                    expected.chunk_len(),
                    dir.display(),
                    config.chunk_len()
                );
            }
            (
                policy,
                config,
                meta.version.saturating_add(1),
                Some(dir.display().to_string()),
            )
        }
        None => {
            // A new policy takes the statistics of the states it is trained on (an
            // architecture that normalises its state keeps them in its checkpoint).
            let states = contents
                .episodes
                .iter()
                .flat_map(|e| &e.transitions)
                .map(|t| t.observation.proprio.as_slice());
            let config = expected.fitted_to(states);
            (config.init(&device.training), config, 1, None)
        }
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
    let mut meta = CheckpointMeta::new(&spec, version, parent);
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
