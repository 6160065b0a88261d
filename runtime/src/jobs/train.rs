//! Offline behaviour cloning from a replay directory (`imago train --what bc`): the
//! policy's shapes come from the robot spec the replay records.

use std::path::Path;

use burn::Dispatch;
use burn::module::AutodiffModule;
use burn::prelude::Backend;
use imago_policies::model::{
    DEFAULT_KEYPOINT_TARGET_WEIGHT, KEYPOINT_TARGET_WEIGHTS, STEM_CHANNELS, STEM_LAYERS,
};
use imago_policies::{ActionHeadKind, Architecture, MAX_CHUNK_LEN, PolicyConfig, StemInputs};
use serde::{Deserialize, Serialize};

use crate::device::ResolvedDevice;
use crate::learn::bc::{BcConfig, ImitationDataset, train_bc};
use crate::learn::frame_shift::MAX_FRAME_SHIFT;
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

/// The choices of a new policy's shape that are not the robot's: its action head, its
/// chunk length and its size. `None` keeps the default for a new policy, the checkpoint's for
/// one continued with `--init` (which must not be asked to change them).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PolicyShape {
    /// The architecture of a new policy (default: the VLA); with `init`, the
    /// checkpoint's, which this must equal when given.
    pub architecture: Option<Architecture>,
    /// The action-chunk head.
    pub head: Option<ActionHeadKind>,
    /// Actions per chunk. Range: [1, 64].
    pub chunk_len: Option<usize>,
    /// Width of a new policy's summary ([`PolicyConfig::with_width`]). Range:
    /// [`WIDTHS`], a multiple of the VLA's attention heads.
    pub width: Option<usize>,
    /// Transformer layers of a new VLA. Range: [`LAYERS`].
    pub layers: Option<usize>,
    /// A new VLA given a blank frame instead of the camera's
    /// ([`PolicyConfig::without_camera`]); with `init`, the checkpoint must be one.
    pub no_camera: bool,
    /// What a new VLA's pixel stem reads ([`StemInputs`]); with `init`, the
    /// checkpoint's, which this must equal when given.
    pub stem_inputs: Option<StemInputs>,
    /// The side, in pixels, at which a new VLA reads the camera
    /// ([`PolicyConfig::reading_frame_at`]); with `init`, the checkpoint's, which this
    /// must equal when given.
    pub frame_side: Option<usize>,
    /// Channels of a new VLA's per-pixel stem ([`PolicyConfig::with_stem_channels`]):
    /// its keypoints, and the features of each patch token. Range: [`STEM_CHANNELS`];
    /// with `init`, the checkpoint's, which this must equal when given.
    pub stem_channels: Option<usize>,
    /// Per-pixel layers of a new VLA's stem ([`PolicyConfig::with_stem_layers`]).
    /// Range: [`STEM_LAYERS`]; with `init`, the checkpoint's, which this must equal
    /// when given.
    pub stem_layers: Option<usize>,
    /// The proprioception entries a new policy reads, by the robot's names
    /// ([`PolicyConfig::reading_proprio`]); with `init`, the checkpoint's, which this
    /// must equal when given.
    pub read_state: Option<Vec<String>>,
    /// Proprioception entries, by name, that a new VLA does not read but learns to
    /// find in its frame ([`PolicyConfig::with_keypoint_targets`]); with `init`, the
    /// checkpoint's, which this must equal when given.
    pub keypoint_targets: Option<Vec<String>>,
    /// The keypoint targets' weight in the loss, in [`KEYPOINT_TARGET_WEIGHTS`]
    /// [default: [`DEFAULT_KEYPOINT_TARGET_WEIGHT`]]; only with `keypoint_targets`.
    pub keypoint_target_weight: Option<f64>,
}

/// The indices of the proprioception entries `names` in `proprio_names` (the robot's),
/// or an error naming `flag` and the name given twice, or the unknown name and the
/// names there are.
fn proprio_entries(
    flag: &str,
    names: &[String],
    proprio_names: &[String],
) -> anyhow::Result<Vec<usize>> {
    if let Some((i, twice)) = names
        .iter()
        .enumerate()
        .find(|(i, name)| names[..*i].contains(name))
    {
        anyhow::bail!(
            "{flag} {}: names `{twice}` twice (entry {} of the list)",
            names.join(","),
            i + 1
        );
    }
    names
        .iter()
        .map(|name| {
            proprio_names.iter().position(|n| n == name).ok_or_else(|| {
                anyhow::anyhow!(
                    "{flag} {}: the robot's proprioception has no entry `{name}` (it has {})",
                    names.join(","),
                    proprio_names.join(", ")
                )
            })
        })
        .collect()
}

/// The widths `--width` accepts.
pub const WIDTHS: std::ops::RangeInclusive<usize> = 8..=1024;

/// The layer counts `--layers` accepts.
pub const LAYERS: std::ops::RangeInclusive<usize> = 1..=12;

impl PolicyShape {
    /// Checks each given value against its range, before anything is read: the error
    /// names the flag.
    fn check_ranges(&self) -> anyhow::Result<()> {
        if let Some(k) = self.chunk_len {
            anyhow::ensure!(
                (1..=MAX_CHUNK_LEN).contains(&k),
                "--chunk-len {k}: must be in [1, {MAX_CHUNK_LEN}] (actions per predicted chunk)"
            );
        }
        if let Some(width) = self.width {
            anyhow::ensure!(
                WIDTHS.contains(&width),
                "--width {width}: must be in [{}, {}]",
                WIDTHS.start(),
                WIDTHS.end()
            );
        }
        if let Some(layers) = self.layers {
            anyhow::ensure!(
                LAYERS.contains(&layers),
                "--layers {layers}: must be in [{}, {}] (transformer layers)",
                LAYERS.start(),
                LAYERS.end()
            );
        }
        if let Some(channels) = self.stem_channels {
            anyhow::ensure!(
                STEM_CHANNELS.contains(&channels),
                "--stem-channels {channels}: must be in [{}, {}]",
                STEM_CHANNELS.start(),
                STEM_CHANNELS.end()
            );
        }
        if let Some(layers) = self.stem_layers {
            anyhow::ensure!(
                STEM_LAYERS.contains(&layers),
                "--stem-layers {layers}: must be in [{}, {}] (per-pixel layers before the keypoints)",
                STEM_LAYERS.start(),
                STEM_LAYERS.end()
            );
        }
        if let Some(weight) = self.keypoint_target_weight {
            anyhow::ensure!(
                self.keypoint_targets.is_some(),
                "--keypoint-target-weight {weight}: weighs --keypoint-targets, which is not given"
            );
            anyhow::ensure!(
                KEYPOINT_TARGET_WEIGHTS.contains(&weight),
                "--keypoint-target-weight {weight}: must be in [{}, {}]",
                KEYPOINT_TARGET_WEIGHTS.start(),
                KEYPOINT_TARGET_WEIGHTS.end()
            );
        }
        Ok(())
    }

    /// `expected` (a new policy's config for the robot) with this shape's choices
    /// (in range: [`Self::check_ranges`]), or an error naming the flag the
    /// architecture cannot take.
    ///
    /// The proprioception read and the keypoint targets are a new policy's choices: a
    /// `continuing` policy keeps its checkpoint's, and [`Self::conflict_with`] refuses
    /// others.
    fn apply(
        &self,
        mut expected: PolicyConfig,
        (proprio_names, continuing): (&[String], bool),
    ) -> anyhow::Result<PolicyConfig> {
        if let Some(k) = self.chunk_len {
            expected = expected.with_chunk_len(k);
        }
        if let Some(head) = self.head {
            expected = expected.with_head(head);
        }
        if let Some(width) = self.width {
            if let PolicyConfig::Vla(c) = &expected {
                anyhow::ensure!(
                    width.is_multiple_of(c.n_heads),
                    "--width {width}: must be a multiple of {} (the policy's attention heads)",
                    c.n_heads
                );
            }
            expected = expected.with_width(width);
        }
        if let Some(layers) = self.layers {
            anyhow::ensure!(
                expected.layers().is_some(),
                "--layers {layers}: the {} policy has no transformer layers (leave --layers out)",
                expected.architecture()
            );
            expected = expected.with_layers(layers);
        }
        if self.no_camera {
            anyhow::ensure!(
                expected.reads_camera(),
                "--no-camera: the {} policy reads no camera already (leave --no-camera out)",
                expected.architecture()
            );
            expected = expected.without_camera();
        }
        if let Some(inputs) = self.stem_inputs {
            anyhow::ensure!(
                expected.stem_inputs().is_some(),
                "--stem-inputs {inputs}: the {} policy reads no pixels (leave --stem-inputs out)",
                expected.architecture()
            );
            expected = expected.with_stem_inputs(inputs);
        }
        if let Some(channels) = self.stem_channels {
            self.ensure_camera_read(&expected, "--stem-channels", channels)?;
            expected = expected.with_stem_channels(channels);
        }
        if let Some(layers) = self.stem_layers {
            self.ensure_camera_read(&expected, "--stem-layers", layers)?;
            expected = expected.with_stem_layers(layers);
        }
        if let Some(side) = self.frame_side {
            self.ensure_camera_read(&expected, "--frame-side", side)?;
            expected = expected
                .reading_frame_at(side)
                .map_err(|e| anyhow::anyhow!("--frame-side {side}: {}", e.expected))?;
        }
        if !continuing {
            expected = self.apply_state_choices(expected, proprio_names)?;
        }
        expected
            .validate()
            .map_err(|e| anyhow::anyhow!("the policy's shape (--width, --layers): {e}"))?;
        Ok(expected)
    }

    /// `expected` reading `--read-state` and trained on `--keypoint-targets`.
    fn apply_state_choices(
        &self,
        mut expected: PolicyConfig,
        proprio_names: &[String],
    ) -> anyhow::Result<PolicyConfig> {
        if let Some(names) = &self.read_state {
            let flag = format!("--read-state {}", names.join(","));
            let read = proprio_entries("--read-state", names, proprio_names)?;
            anyhow::ensure!(!read.is_empty(), "{flag}: name at least one entry");
            expected = expected.reading_proprio(read);
            expected
                .validate()
                .map_err(|e| anyhow::anyhow!("{flag}: {}", e.expected))?;
        }
        if let Some(named) = &self.keypoint_targets {
            let targets = proprio_entries("--keypoint-targets", named, proprio_names)?;
            let names = named.join(",");
            self.ensure_camera_read(&expected, "--keypoint-targets", &names)?;
            if let Some(read) = targets
                .iter()
                .find(|t| expected.proprio_inputs().contains(t))
            {
                anyhow::bail!(
                    "--keypoint-targets {names}: the policy reads `{}`, so it would not learn to see it (name the entries it reads with --read-state)",
                    proprio_names[*read]
                );
            }
            expected = expected.with_keypoint_targets(
                targets,
                self.keypoint_target_weight
                    .unwrap_or(DEFAULT_KEYPOINT_TARGET_WEIGHT),
            );
            expected
                .validate()
                .map_err(|e| anyhow::anyhow!("--keypoint-targets {names}: {e}"))?;
        }
        Ok(expected)
    }

    /// Refuses `flag value`, a choice of how a VLA reads its camera, for a policy that
    /// reads no pixels (the linear one) or is given a blank frame (`--no-camera`).
    fn ensure_camera_read(
        &self,
        expected: &PolicyConfig,
        flag: &str,
        value: impl std::fmt::Display,
    ) -> anyhow::Result<()> {
        anyhow::ensure!(
            expected.frame_side().is_some(),
            "{flag} {value}: the {} policy reads no pixels (leave {flag} out)",
            expected.architecture()
        );
        anyhow::ensure!(
            !self.no_camera,
            "{flag} {value} with --no-camera: a policy given a blank frame reads no camera (leave one out)"
        );
        Ok(())
    }

    /// The first of this shape's choices that `stored` (the config of the checkpoint
    /// in `dir`, to be continued) does not share, as the error's text.
    fn conflict_with(
        &self,
        dir: &Path,
        stored: &PolicyConfig,
        proprio_names: &[String],
    ) -> Option<String> {
        let held_layers = stored.layers().map_or("no".to_string(), |l| l.to_string());
        let named = |entries: &[usize]| -> String {
            entries
                .iter()
                .map(|&i| proprio_names.get(i).map_or("?", String::as_str))
                .collect::<Vec<_>>()
                .join(",")
        };
        let held_read = named(stored.proprio_inputs());
        let (held_targets, held_weight) = stored
            .keypoint_targets()
            .filter(|(t, _)| !t.is_empty())
            .map_or(("none".to_string(), 1.0), |(t, w)| (named(t), w));
        // (flag, asked, held, the checkpoint's policy described with `held`)
        let choices = [
            (
                "--head",
                self.head.map(|h| h.to_string()),
                stored.head().to_string(),
                format!("a {} head", stored.head()),
            ),
            (
                "--chunk-len",
                self.chunk_len.map(|k| k.to_string()),
                stored.chunk_len().to_string(),
                format!("chunks of {}", stored.chunk_len()),
            ),
            (
                "--width",
                self.width.map(|w| w.to_string()),
                stored.width().to_string(),
                format!("width {}", stored.width()),
            ),
            (
                "--layers",
                self.layers.map(|l| l.to_string()),
                held_layers.clone(),
                format!("{held_layers} transformer layers"),
            ),
            (
                "--no-camera",
                self.no_camera.then(|| "set".to_string()),
                if stored.reads_camera() {
                    "unset"
                } else {
                    "set"
                }
                .to_string(),
                "a camera it reads".to_string(),
            ),
            (
                "--stem-inputs",
                self.stem_inputs.map(|i| i.to_string()),
                stored
                    .stem_inputs()
                    .map_or("none".to_string(), |i| i.to_string()),
                format!(
                    "a pixel stem that reads {}",
                    stored
                        .stem_inputs()
                        .map_or("no pixels".to_string(), |i| i.to_string())
                ),
            ),
            (
                "--stem-channels",
                self.stem_channels.map(|c| c.to_string()),
                stored
                    .stem_channels()
                    .map_or("none".to_string(), |c| c.to_string()),
                stored
                    .stem_channels()
                    .map_or("no pixel stem".to_string(), |c| {
                        format!("{c} stem channels")
                    }),
            ),
            (
                "--stem-layers",
                self.stem_layers.map(|l| l.to_string()),
                stored
                    .stem_layers()
                    .map_or("none".to_string(), |l| l.to_string()),
                stored
                    .stem_layers()
                    .map_or("no pixel stem".to_string(), |l| {
                        format!(
                            "a stem of {l} per-pixel layer{}",
                            if l == 1 { "" } else { "s" }
                        )
                    }),
            ),
            (
                "--read-state",
                self.read_state.as_ref().map(|names| names.join(",")),
                held_read.clone(),
                format!("the proprioception entries {held_read} read"),
            ),
            (
                "--keypoint-targets",
                self.keypoint_targets.as_ref().map(|names| names.join(",")),
                held_targets.clone(),
                format!("keypoint targets {held_targets}"),
            ),
            (
                "--keypoint-target-weight",
                self.keypoint_target_weight.map(|w| w.to_string()),
                held_weight.to_string(),
                format!("keypoint targets weighted {held_weight}"),
            ),
            (
                "--frame-side",
                self.frame_side.map(|s| s.to_string()),
                stored
                    .frame_side()
                    .map_or("none".to_string(), |s| s.to_string()),
                stored.frame_side().map_or("no camera".to_string(), |s| {
                    format!("a camera read at {s}x{s}")
                }),
            ),
        ];
        choices.into_iter().find_map(|(flag, asked, held, holds)| {
            asked.filter(|a| *a != held).map(|a| {
                format!(
                    "{flag} {a}: {} holds a policy with {holds} (that cannot change when training continues; leave {flag} out)",
                    dir.display()
                )
            })
        })
    }
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
    shape.check_ranges()?;
    anyhow::ensure!(
        bc.frame_shift <= MAX_FRAME_SHIFT,
        "--frame-shift {}: must be in [0, {MAX_FRAME_SHIFT}] camera pixels",
        bc.frame_shift
    );
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
    let expected = shape.apply(
        PolicyConfig::for_robot(architecture, &spec)
            .map_err(|e| anyhow::anyhow!("the policy for {}: {e}", spec.summary()))?,
        (&spec.proprio_names, init.is_some()),
    )?;
    Dispatch::seed(&device.training, bc.seed);
    let (policy, config, version, parent) = match init {
        Some(dir) => {
            ensure_trained_for(dir, &spec)?;
            let (policy, config, meta) =
                load_policy_to_continue::<Dispatch>(dir, &expected, &device.training)?;
            if let Some(conflict) = shape.conflict_with(dir, &config, &spec.proprio_names) {
                anyhow::bail!(conflict);
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
    anyhow::ensure!(
        bc.frame_shift == 0 || config.reads_camera(),
        "--frame-shift {}: the {} policy reads no camera (a shift of its frames would change nothing; leave --frame-shift out)",
        bc.frame_shift,
        if config.frame_side().is_some() {
            "camera-less VLA"
        } else {
            "linear"
        }
    );
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
