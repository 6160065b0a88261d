//! Model checkpoints (policies and world models): a directory holding the weights
//! (`model.safetensors`, tensors named by their path in the module tree; checkpoints
//! written before it hold burn's `model.mpk` record, which still loads) and
//! `meta.json` (kind, config, version, parent, metrics, and the size and CRC-32 of
//! every weight file). Written to a hidden sibling directory first and
//! renamed into place, so a crash never leaves half a checkpoint. Loading validates the
//! config's ranges before anything is allocated, checks every weight file against its
//! checksum, and checks every loaded tensor's shape against the config, naming each
//! tensor that differs.

mod dtypes;
mod integrity;

pub use integrity::{
    FileDigest, Parameter, ParameterKind, parameter_shapes, parameters, shape_differences,
    sign_meta_json, verify_files, verify_meta_json,
};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;

use burn::prelude::*;
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder};
use burn_store::{ApplyError, ApplyResult, ModuleSnapshot, ModuleStore, SafetensorsStore};
use imago_policies::{VlaPolicy, VlaPolicyConfig};
use imago_robots::RobotSpec;
use imago_worldmodel::{WorldModel, WorldModelConfig};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::store::atomic;

/// The `kind` of a policy checkpoint.
pub const POLICY_KIND: &str = "vla-policy";
/// The `kind` of a world-model checkpoint.
pub const WORLD_MODEL_KIND: &str = "world-model";
/// Version of the checkpoint layout (3: the weights are `model.safetensors`; 2: burn's
/// `model.mpk` record, with `meta.json` listing the weight files' sizes and checksums;
/// 1: `model.mpk` without them). Every format loads.
pub const CHECKPOINT_FORMAT: u32 = 3;
const MODEL_STEM: &str = "model";
/// The weights of a format-3 checkpoint (docs/checkpoints.md names its tensors).
pub const SAFETENSORS_FILE: &str = "model.safetensors";
/// The weights of a format-1 or -2 checkpoint.
pub const MPK_FILE: &str = "model.mpk";
const META: &str = "meta.json";

/// `meta.json` of a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMeta {
    /// Layout version.
    pub format: u32,
    /// What the model is (e.g. `vla-policy`).
    pub kind: String,
    /// The model's config, as JSON.
    pub config: serde_json::Value,
    /// Monotonic version of the weights.
    pub version: u64,
    /// The checkpoint these weights were trained from, if any.
    pub parent: Option<String>,
    /// The name of the robot the model was trained for.
    pub robot: String,
    /// The spec of the robot the model was trained for (camera, proprioception,
    /// actions); `None` in checkpoints written before it was recorded (their model
    /// config still fixes the shapes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<RobotSpec>,
    /// Figures measured when it was saved.
    pub metrics: BTreeMap<String, f64>,
    /// Size and CRC-32 of every weight file, by name (empty in format 1).
    #[serde(default)]
    pub files: BTreeMap<String, FileDigest>,
    /// CRC-32 of the bytes of `meta.json` before this field (format 2; see
    /// [`sign_meta_json`]), so that a damaged config, version or file list is caught.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<u32>,
}

/// Why a checkpoint cannot be loaded.
#[derive(Debug, Error)]
pub enum CheckpointError {
    /// The directory does not exist.
    #[error("checkpoint {0} does not exist")]
    NotFound(PathBuf),
    /// `meta.json` is missing or unreadable.
    #[error(
        "checkpoint {path} has no readable meta.json ({reason}); it is not an imago checkpoint or was not written completely"
    )]
    MissingMeta {
        /// The checkpoint.
        path: PathBuf,
        /// The I/O error.
        reason: String,
    },
    /// `meta.json` is not what imago writes.
    #[error("checkpoint {path}: meta.json is malformed: {reason}")]
    BadMeta {
        /// The checkpoint.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The checkpoint holds another kind of model.
    #[error("checkpoint {path} holds a `{found}` model, not a `{expected}`")]
    WrongKind {
        /// The checkpoint.
        path: PathBuf,
        /// Its kind.
        found: String,
        /// The kind asked for.
        expected: &'static str,
    },
    /// The stored config differs from the one the caller needs.
    #[error("checkpoint {path} was trained with a different model config: {differences}")]
    ConfigMismatch {
        /// The checkpoint.
        path: PathBuf,
        /// `key: stored vs expected`, comma separated.
        differences: String,
    },
    /// The model was trained for a robot of another spec.
    #[error("checkpoint {path} was trained for {trained}, not for {wanted} ({differences})")]
    SpecMismatch {
        /// The checkpoint.
        path: PathBuf,
        /// The spec it was trained for, in one line.
        trained: String,
        /// The spec it is used with, in one line.
        wanted: String,
        /// `field: trained vs wanted`, comma separated.
        differences: String,
    },
    /// The weights file is missing or does not fit the config.
    #[error("checkpoint {path}: cannot load the weights: {reason}")]
    Weights {
        /// The checkpoint.
        path: PathBuf,
        /// The recorder's error.
        reason: String,
    },
    /// A weight file does not match the size and checksum `meta.json` records.
    #[error("checkpoint {path} is damaged: {reason}")]
    Damaged {
        /// The checkpoint.
        path: PathBuf,
        /// Which file, and how it differs.
        reason: String,
    },
    /// Stored tensors do not have the shapes the stored config gives, or are of a type
    /// the model's parameters cannot take.
    #[error("checkpoint {path}: its weights do not fit its config: {differences}")]
    ShapeMismatch {
        /// The checkpoint.
        path: PathBuf,
        /// One entry per offending tensor, `; `-separated.
        differences: String,
    },
    /// Writing failed.
    #[error("cannot write checkpoint {path}: {reason}")]
    Write {
        /// The checkpoint.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
}

fn recorder() -> NamedMpkFileRecorder<FullPrecisionSettings> {
    NamedMpkFileRecorder::<FullPrecisionSettings>::new()
}

/// Saves `policy` with its `config` and `meta` (whose `kind` and `config` are filled in)
/// to `dir`, atomically replacing any checkpoint there.
pub fn save_policy<B: Backend>(
    policy: &VlaPolicy<B>,
    config: &VlaPolicyConfig,
    meta: CheckpointMeta,
    dir: &Path,
) -> Result<(), CheckpointError> {
    save_checkpoint(policy, POLICY_KIND, config, meta, dir)
}

/// Loads a policy checkpoint onto `device`. With `expected`, the stored config must
/// equal it; the error then lists every differing key.
pub fn load_policy<B: Backend>(
    dir: &Path,
    expected: Option<&VlaPolicyConfig>,
    device: &B::Device,
) -> Result<(VlaPolicy<B>, VlaPolicyConfig, CheckpointMeta), CheckpointError> {
    let (config, meta) = read_policy_config(dir)?;
    if let Some(expected) = expected {
        ensure_config_matches(dir, &meta, expected)?;
    }
    let policy = load_weights(config.init::<B>(device), &meta, dir, device)?;
    Ok((policy, config, meta))
}

/// Loads a policy checkpoint onto `device` to continue training it (`train --init`,
/// the daemon): its config must equal `expected` except in the choices the checkpoint
/// keeps: its stem activation (GELU for checkpoints from before ReLU), its action head
/// (with the flow head's width and steps) and its chunk length, chosen when it was
/// first trained.
pub fn load_policy_to_continue<B: Backend>(
    dir: &Path,
    expected: &VlaPolicyConfig,
    device: &B::Device,
) -> Result<(VlaPolicy<B>, VlaPolicyConfig, CheckpointMeta), CheckpointError> {
    let (config, meta) = read_policy_config(dir)?;
    let expected = expected
        .clone()
        .with_stem_activation(config.stem_activation)
        .with_head(config.head)
        .with_flow_width(config.flow_width)
        .with_flow_steps(config.flow_steps)
        .with_chunk_len(config.chunk_len);
    ensure_config_matches(dir, &meta, &expected)?;
    let policy = load_weights(config.init::<B>(device), &meta, dir, device)?;
    Ok((policy, config, meta))
}

fn read_policy_config(dir: &Path) -> Result<(VlaPolicyConfig, CheckpointMeta), CheckpointError> {
    read_config(
        dir,
        POLICY_KIND,
        VlaPolicyConfig::fill_later_keys,
        VlaPolicyConfig::validate,
        |config| (config.proprio_dim, config.action_limit.as_slice()),
    )
}

/// Saves a world model with its `config` and `meta` to `dir`, atomically.
pub fn save_world_model<B: Backend>(
    model: &WorldModel<B>,
    config: &WorldModelConfig,
    meta: CheckpointMeta,
    dir: &Path,
) -> Result<(), CheckpointError> {
    save_checkpoint(model, WORLD_MODEL_KIND, config, meta, dir)
}

/// Loads a world-model checkpoint onto `device`; with `expected`, the stored config
/// must equal it.
pub fn load_world_model<B: Backend>(
    dir: &Path,
    expected: Option<&WorldModelConfig>,
    device: &B::Device,
) -> Result<(WorldModel<B>, WorldModelConfig, CheckpointMeta), CheckpointError> {
    let (config, meta) = read_config(
        dir,
        WORLD_MODEL_KIND,
        |_| {},
        WorldModelConfig::validate,
        |config| (config.proprio_dim, config.action_limit.as_slice()),
    )?;
    if let Some(expected) = expected {
        ensure_config_matches(dir, &meta, expected)?;
    }
    let model = load_weights(config.init::<B>(device), &meta, dir, device)?;
    Ok((model, config, meta))
}

/// Writes `model`, `config` and `meta` (its `kind` and `config` filled in) to a hidden
/// sibling of `dir`, then renames it into place.
fn save_checkpoint<B: Backend, M: Module<B>, C: Serialize>(
    model: &M,
    kind: &str,
    config: &C,
    mut meta: CheckpointMeta,
    dir: &Path,
) -> Result<(), CheckpointError> {
    let write_err = |reason: String| CheckpointError::Write {
        path: dir.to_path_buf(),
        reason,
    };
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| write_err(e.to_string()))?;
    }
    let staged = atomic::sibling_temp(dir, "staged");
    std::fs::create_dir_all(&staged).map_err(|e| write_err(e.to_string()))?;
    meta.format = CHECKPOINT_FORMAT;
    meta.kind = kind.to_string();
    meta.config = serde_json::to_value(config).map_err(|e| write_err(e.to_string()))?;
    let mut store = SafetensorsStore::from_file(staged.join(SAFETENSORS_FILE))
        .metadata("imago_kind", kind)
        .metadata("imago_version", meta.version.to_string());
    let result = model
        .save_into(&mut store)
        .map_err(|e| write_err(e.to_string()))
        .and_then(|_| {
            let digest = FileDigest::of(&staged.join(SAFETENSORS_FILE))
                .map_err(|e| write_err(e.to_string()))?;
            meta.files = BTreeMap::from([(SAFETENSORS_FILE.to_string(), digest)]);
            meta.checksum = None;
            serde_json::to_vec_pretty(&meta)
                .map(sign_meta_json)
                .map_err(|e| write_err(e.to_string()))
        })
        .and_then(|json| {
            atomic::write_file(&staged.join(META), &json).map_err(|e| write_err(format!("{e:#}")))
        })
        .and_then(|_| atomic::replace_dir(&staged, dir).map_err(|e| write_err(format!("{e:#}"))));
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&staged);
    }
    result
}

/// Cleans up after a crash that interrupted a save of the checkpoint `dir`: a save
/// writes a hidden `.NAME.staged-*` sibling and swaps it in through a hidden
/// `.NAME.old-*` one. When `dir` is missing (the crash came between the two renames),
/// the newest whole staged checkpoint, else the old one, is moved into place; every
/// other leftover is removed. Returns one line per action. Call it only while holding
/// the lock of the directory that holds `dir` (no save can be under way then).
pub fn recover_checkpoint(dir: &Path) -> anyhow::Result<Vec<String>> {
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Ok(Vec::new());
    };
    let Ok(entries) = std::fs::read_dir(parent) else {
        return Ok(Vec::new());
    };
    let name = name.to_string_lossy();
    let (staged_prefix, old_prefix) = (format!(".{name}.staged-"), format!(".{name}.old-"));
    let mut leftovers: Vec<(bool, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let file = e.file_name().to_string_lossy().into_owned();
            let staged = file.starts_with(&staged_prefix);
            (staged || file.starts_with(&old_prefix)).then(|| (staged, e.path()))
        })
        .collect();
    // Newest first: the names end in the process id and the nanosecond time.
    let stamp = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str()?.rsplit('-').next()?.parse::<u128>().ok())
            .unwrap_or(0)
    };
    leftovers.sort_by_key(|(staged, p)| (std::cmp::Reverse(*staged), std::cmp::Reverse(stamp(p))));
    let mut notes = Vec::new();
    if !dir.exists() {
        let whole = |p: &Path| read_meta(p).is_ok_and(|m| verify_files(p, &m.files).is_ok());
        if let Some(index) = leftovers.iter().position(|(_, p)| whole(p)) {
            let (_, chosen) = leftovers.remove(index);
            std::fs::rename(&chosen, dir)
                .with_context(|| format!("cannot move {} into place", chosen.display()))?;
            notes.push(format!(
                "the checkpoint {} was missing after an interrupted save; restored it from {}",
                dir.display(),
                chosen.display()
            ));
        }
    }
    for (_, path) in leftovers {
        std::fs::remove_dir_all(&path)
            .with_context(|| format!("cannot remove {}", path.display()))?;
        notes.push(format!(
            "removed {}, left by an interrupted checkpoint save",
            path.display()
        ));
    }
    Ok(notes)
}

/// Reads a checkpoint's `meta.json`.
pub fn read_meta(dir: &Path) -> Result<CheckpointMeta, CheckpointError> {
    if !dir.is_dir() {
        return Err(CheckpointError::NotFound(dir.to_path_buf()));
    }
    let text =
        std::fs::read_to_string(dir.join(META)).map_err(|e| CheckpointError::MissingMeta {
            path: dir.to_path_buf(),
            reason: e.to_string(),
        })?;
    let meta: CheckpointMeta =
        serde_json::from_str(&text).map_err(|e| CheckpointError::BadMeta {
            path: dir.to_path_buf(),
            reason: e.to_string(),
        })?;
    let bad = |reason: String| CheckpointError::BadMeta {
        path: dir.to_path_buf(),
        reason,
    };
    match meta.format {
        1 => {}
        2 | 3 => {
            let weights = if meta.format == 2 {
                MPK_FILE
            } else {
                SAFETENSORS_FILE
            };
            if !meta.files.contains_key(weights) {
                return Err(bad(format!("it lists no checksum of {weights}")));
            }
            verify_meta_json(&text).map_err(bad)?;
        }
        other => {
            return Err(bad(format!(
                "format {other}; this build reads formats 1 to {CHECKPOINT_FORMAT}"
            )));
        }
    }
    if let Some(spec) = &meta.spec {
        spec.validate()
            .map_err(|e| bad(format!("the robot spec it records: {e}")))?;
    }
    Ok(meta)
}

/// Checks that the checkpoint in `dir` was trained for a robot of `spec` before its
/// model is used on such a robot or its data: a difference is one error naming both
/// specs. A checkpoint that predates recorded specs passes (its model config, checked
/// when it is loaded, still fixes every shape).
pub fn ensure_trained_for(dir: &Path, spec: &RobotSpec) -> Result<CheckpointMeta, CheckpointError> {
    let meta = read_meta(dir)?;
    if let Some(trained) = &meta.spec {
        let differences = trained.data_differences(spec);
        if !differences.is_empty() {
            return Err(CheckpointError::SpecMismatch {
                path: dir.to_path_buf(),
                trained: trained.summary(),
                wanted: spec.summary(),
                differences: differences.join(", "),
            });
        }
    }
    Ok(meta)
}

/// Reads the meta and config of a checkpoint of `kind`, gives keys added since it was
/// written their old meaning (`fill_later_keys`) and validates the config: its ranges
/// (the same as a config file's), and its proprioception length and action limits
/// (`robot_fields`) against the robot spec the meta records, so that a config edited
/// apart from its spec is refused before a model is built from it.
fn read_config<C: DeserializeOwned>(
    dir: &Path,
    kind: &'static str,
    fill_later_keys: impl Fn(&mut serde_json::Value),
    validate: impl Fn(&C) -> Result<(), imago_robots::ConfigError>,
    robot_fields: fn(&C) -> (usize, &[f32]),
) -> Result<(C, CheckpointMeta), CheckpointError> {
    let mut meta = read_meta(dir)?;
    fill_later_keys(&mut meta.config);
    if meta.kind != kind {
        return Err(CheckpointError::WrongKind {
            path: dir.to_path_buf(),
            found: meta.kind,
            expected: kind,
        });
    }
    let bad = |reason: String| CheckpointError::BadMeta {
        path: dir.to_path_buf(),
        reason: format!("config: {reason}"),
    };
    let config: C = serde_json::from_value(meta.config.clone()).map_err(|e| bad(e.to_string()))?;
    validate(&config).map_err(|e| bad(e.to_string()))?;
    if let Some(spec) = &meta.spec {
        let (proprio_dim, action_limit) = robot_fields(&config);
        if proprio_dim != spec.proprio_dim() || action_limit != spec.action_limit.as_slice() {
            return Err(bad(format!(
                "proprio_dim {proprio_dim} and action_limit {action_limit:?} disagree with the robot it records ({}, action limits {:?})",
                spec.summary(),
                spec.action_limit
            )));
        }
    }
    Ok((config, meta))
}

/// Checks that the config stored in `meta` (read from `dir`) equals `expected`; the
/// error lists every differing key.
fn ensure_config_matches<C: Serialize>(
    dir: &Path,
    meta: &CheckpointMeta,
    expected: &C,
) -> Result<(), CheckpointError> {
    let differences = config_differences(&meta.config, expected);
    if differences.is_empty() {
        return Ok(());
    }
    Err(CheckpointError::ConfigMismatch {
        path: dir.to_path_buf(),
        differences: differences.join(", "),
    })
}

/// Loads the weights of the checkpoint in `dir` (described by `meta`) into `model`,
/// a fresh model of the checkpoint's config: the weight files are checked against
/// their checksums first, the loaded tensors' shapes against `model`'s after.
fn load_weights<B: Backend, M: Module<B>>(
    model: M,
    meta: &CheckpointMeta,
    dir: &Path,
    device: &B::Device,
) -> Result<M, CheckpointError> {
    verify_files(dir, &meta.files).map_err(|reason| CheckpointError::Damaged {
        path: dir.to_path_buf(),
        reason,
    })?;
    let expected = parameters(&model);
    let weights_err = |reason: String| CheckpointError::Weights {
        path: dir.to_path_buf(),
        reason,
    };
    let loaded = if meta.format >= 3 {
        let mut model = model;
        let mut store = SafetensorsStore::from_file(dir.join(SAFETENSORS_FILE))
            .allow_partial(true)
            .validate(false);
        // Every stored tensor's type is checked before burn sees one (dtypes.rs).
        let stored = store
            .get_all_snapshots()
            .map_err(|e| weights_err(e.to_string()))?;
        let types = dtypes::check_stored_types(stored, &expected);
        if !types.problems.is_empty() {
            return Err(CheckpointError::ShapeMismatch {
                path: dir.to_path_buf(),
                differences: types.problems.join("; "),
            });
        }
        if types.needs_conversion {
            store = store.with_from_adapter(dtypes::ToF32);
        }
        let applied = model
            .load_from(&mut store)
            .map_err(|e| weights_err(e.to_string()))?;
        let differences = applied_differences(&applied);
        if !differences.is_empty() {
            return Err(CheckpointError::ShapeMismatch {
                path: dir.to_path_buf(),
                differences: differences.join("; "),
            });
        }
        model
    } else {
        model
            .load_file(dir.join(MODEL_STEM), &recorder(), device)
            .map_err(|e| weights_err(e.to_string()))?
    };
    let expected = expected.into_iter().map(|(p, v)| (p, v.shape)).collect();
    let differences = shape_differences(&expected, &parameter_shapes(&loaded));
    if !differences.is_empty() {
        return Err(CheckpointError::ShapeMismatch {
            path: dir.to_path_buf(),
            differences: differences.join("; "),
        });
    }
    Ok(loaded)
}

/// Every tensor a safetensors file did not fit the model with, one line each: missing,
/// extra, or of another shape or type.
fn applied_differences(applied: &ApplyResult) -> Vec<String> {
    let mut out: Vec<String> = applied
        .errors
        .iter()
        .map(|error| match error {
            ApplyError::ShapeMismatch {
                path,
                expected,
                found,
            } => format!(
                "tensor {path}: stored {:?}, the config gives {:?}",
                found.as_slice(),
                expected.as_slice()
            ),
            ApplyError::DTypeMismatch {
                path,
                expected,
                found,
            } => format!("tensor {path}: stored as {found:?}, the model holds {expected:?}"),
            other => format!("{other}"),
        })
        .collect();
    out.extend(
        applied
            .missing
            .iter()
            .map(|(path, _)| format!("tensor {path}: missing")),
    );
    out.extend(
        applied
            .unused
            .iter()
            .map(|path| format!("tensor {path}: not in the model the config gives")),
    );
    out
}

fn config_differences<C: Serialize>(stored: &serde_json::Value, expected: &C) -> Vec<String> {
    let expected = serde_json::to_value(expected).unwrap_or_default();
    let (Some(stored), Some(expected)) = (stored.as_object(), expected.as_object()) else {
        return vec!["config is not an object".into()];
    };
    let mut keys: Vec<&String> = stored.keys().chain(expected.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| stored.get(*k) != expected.get(*k))
        .map(|k| {
            let show =
                |v: Option<&serde_json::Value>| v.map_or("absent".to_string(), |v| v.to_string());
            format!("{k}: {} vs {}", show(stored.get(k)), show(expected.get(k)))
        })
        .collect()
}

impl CheckpointMeta {
    /// Meta for a new checkpoint of a model for a robot of `spec` at `version`.
    pub fn new(spec: &RobotSpec, version: u64, parent: Option<String>) -> Self {
        Self {
            format: CHECKPOINT_FORMAT,
            kind: POLICY_KIND.to_string(),
            config: serde_json::Value::Null,
            version,
            parent,
            robot: spec.name.clone(),
            spec: Some(spec.clone()),
            metrics: BTreeMap::new(),
            files: BTreeMap::new(),
            checksum: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::{Dispatch, DispatchDevice, backend::flex::FlexDevice};
    use imago_policies::{ActionHeadKind, PolicyBatch, StemActivation};
    use imago_robots::Robot;

    use super::*;
    use crate::robot::RobotConfig;

    /// The policy's deterministic action chunk for [`observation`].
    fn outputs(
        policy: &VlaPolicy<Dispatch>,
        config: &VlaPolicyConfig,
        device: &DispatchDevice,
    ) -> anyhow::Result<Vec<f32>> {
        let mut batch = PolicyBatch::new(config);
        batch.push(&observation())?;
        policy
            .act(batch.to_input(device), None)
            .into_data()
            .to_vec::<f32>()
            .map_err(|e| anyhow::anyhow!("{e:?}"))
    }

    fn config() -> VlaPolicyConfig {
        VlaPolicyConfig::new(8, vec![0, 1, 2, 3, 6, 7], vec![1.0, 1.0])
            .with_d_model(16)
            .with_d_ff(32)
            .with_n_layers(1)
    }

    /// Saves a fresh policy to `dir`; returns its actions on a fixed observation.
    fn saved(dir: &Path) -> (Vec<f32>, DispatchDevice) {
        saved_with(dir, &config())
    }

    /// Saves a fresh policy of `config` to `dir`; returns its actions on a fixed
    /// observation.
    fn saved_with(dir: &Path, config: &VlaPolicyConfig) -> (Vec<f32>, DispatchDevice) {
        let device = DispatchDevice::Flex(FlexDevice);
        let policy = config.init::<Dispatch>(&device);
        // burn initialises parameters lazily: use the policy before saving a clone of
        // it, or the clone and the original would draw different weights.
        let actions = outputs(&policy, config, &device).unwrap();
        save_policy(
            &policy,
            config,
            CheckpointMeta::new(&RobotConfig::default().spec(), 4, None),
            dir,
        )
        .unwrap();
        (actions, device)
    }

    fn observation() -> imago_robots::Observation {
        RobotConfig::default().build().unwrap().reset(3)
    }

    #[test]
    fn round_trip_keeps_weights_config_and_meta() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("ckpt");
        let (before, device) = saved(&dir);
        let (loaded, loaded_config, meta) =
            load_policy::<Dispatch>(&dir, Some(&config()), &device).unwrap();
        assert_eq!(loaded_config, config());
        assert_eq!(meta.version, 4);
        assert_eq!(meta.kind, POLICY_KIND);
        let after = outputs(&loaded, &config(), &device).unwrap();
        assert_eq!(before, after);
    }

    #[test]
    fn checkpoints_written_before_pooling_action_origins_and_relu_still_load() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("ckpt");
        let old = config().with_stem_activation(StemActivation::Gelu);
        let (before, device) = saved_with(&dir, &old);
        // The meta as a build before `frame_pool`, `action_origin` and
        // `stem_activation` wrote it.
        let path = dir.join(META);
        let mut meta: CheckpointMeta =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let fields = meta.config.as_object_mut().unwrap();
        assert!(fields.remove("frame_pool").is_some());
        assert!(fields.remove("action_origin").is_some());
        assert!(fields.remove("stem_activation").is_some());
        meta.checksum = None;
        std::fs::write(
            &path,
            sign_meta_json(serde_json::to_vec_pretty(&meta).unwrap()),
        )
        .unwrap();
        let (loaded, loaded_config, _) =
            load_policy::<Dispatch>(&dir, Some(&old), &device).unwrap();
        assert_eq!(loaded_config, old);
        assert_eq!(outputs(&loaded, &old, &device).unwrap(), before);
        // Today's default config differs from it in the activation alone: loading it
        // as that is refused, continuing it keeps its GELU.
        let err = load_policy::<Dispatch>(&dir, Some(&config()), &device).unwrap_err();
        assert!(err.to_string().contains("stem_activation"), "{err}");
        let (continued, continued_config, _) =
            load_policy_to_continue::<Dispatch>(&dir, &config(), &device).unwrap();
        assert_eq!(continued_config, old);
        assert_eq!(outputs(&continued, &old, &device).unwrap(), before);
        // So are its head and chunk length.
        let (_, continued_config, _) = load_policy_to_continue::<Dispatch>(
            &dir,
            &config().with_chunk_len(7).with_head(ActionHeadKind::Flow),
            &device,
        )
        .unwrap();
        assert_eq!(continued_config, old);
        // Anything else that differs is still refused.
        let err = load_policy_to_continue::<Dispatch>(&dir, &config().with_d_model(32), &device)
            .unwrap_err();
        assert!(err.to_string().contains("d_model"), "{err}");
    }

    #[test]
    fn saving_again_replaces_atomically_and_leaves_no_temporaries() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("ckpt");
        saved(&dir);
        saved(&dir);
        let names: Vec<String> = std::fs::read_dir(root.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["ckpt".to_string()]);
    }

    #[test]
    fn a_checkpoint_knows_its_robot_spec_and_refuses_another() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("ckpt");
        saved(&dir);
        let spec = RobotConfig::default().spec();
        assert_eq!(
            ensure_trained_for(&dir, &spec).unwrap().spec,
            Some(spec.clone())
        );
        let small = crate::robot::reacher2d_with("image_size = 32").spec();
        let error = ensure_trained_for(&dir, &small).unwrap_err().to_string();
        assert!(
            error.contains(&spec.summary())
                && error.contains(&small.summary())
                && error.contains("camera: 48x48 vs 32x32"),
            "{error}"
        );
    }

    #[test]
    fn config_mismatch_names_every_differing_key() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("ckpt");
        let (_, device) = saved(&dir);
        let other = config().with_d_model(32).with_chunk_len(2);
        let err = load_policy::<Dispatch>(&dir, Some(&other), &device).unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, CheckpointError::ConfigMismatch { .. }));
        assert!(
            message.contains("d_model: 16 vs 32") && message.contains("chunk_len: 4 vs 2"),
            "{message}"
        );
    }

    #[test]
    fn missing_malformed_wrong_kind_and_corrupt_weights_are_clear_errors() {
        let root = tempfile::tempdir().unwrap();
        let device = DispatchDevice::Flex(FlexDevice);
        let missing = root.path().join("absent");
        assert!(matches!(
            load_policy::<Dispatch>(&missing, None, &device),
            Err(CheckpointError::NotFound(_))
        ));

        let dir = root.path().join("ckpt");
        saved(&dir);
        let meta_path = dir.join(META);
        let good_meta = std::fs::read_to_string(&meta_path).unwrap();

        std::fs::write(&meta_path, "{ not json").unwrap();
        assert!(matches!(
            load_policy::<Dispatch>(&dir, None, &device),
            Err(CheckpointError::BadMeta { .. })
        ));

        // Edited by hand (its checksum recomputed): another kind is refused by name.
        let resigned = |edit: &dyn Fn(&mut CheckpointMeta)| {
            let mut meta: CheckpointMeta = serde_json::from_str(&good_meta).unwrap();
            edit(&mut meta);
            meta.checksum = None;
            String::from_utf8(sign_meta_json(serde_json::to_vec_pretty(&meta).unwrap())).unwrap()
        };
        std::fs::write(&meta_path, resigned(&|m| m.kind = "world-model".into())).unwrap();
        let err = load_policy::<Dispatch>(&dir, None, &device).unwrap_err();
        assert!(err.to_string().contains("`world-model`"), "{err}");
        // Edited without recomputing its checksum: refused as damaged.
        std::fs::write(
            &meta_path,
            good_meta.replace("\"version\": 4", "\"version\": 5"),
        )
        .unwrap();
        let err = load_policy::<Dispatch>(&dir, None, &device).unwrap_err();
        assert!(err.to_string().contains("own checksum"), "{err}");

        std::fs::write(&meta_path, &good_meta).unwrap();
        let model = dir.join(SAFETENSORS_FILE);
        let bytes = std::fs::read(&model).unwrap();
        std::fs::write(&model, &bytes[..bytes.len() / 2]).unwrap();
        let err = load_policy::<Dispatch>(&dir, None, &device).unwrap_err();
        assert!(matches!(err, CheckpointError::Damaged { .. }), "{err}");
        assert!(err.to_string().contains("model.safetensors has"), "{err}");

        // One flipped bit anywhere in the weights is caught by the checksum.
        let mut flipped = bytes.clone();
        flipped[bytes.len() * 2 / 3] ^= 0x10;
        std::fs::write(&model, &flipped).unwrap();
        let err = load_policy::<Dispatch>(&dir, None, &device).unwrap_err();
        assert!(err.to_string().contains("checksum"), "{err}");
        std::fs::write(&model, &bytes).unwrap();

        // A config whose sizes the stored tensors do not have: each tensor is named.
        std::fs::write(
            &meta_path,
            resigned(&|m| m.config["stem_channels"] = serde_json::json!(8)),
        )
        .unwrap();
        let err = load_policy::<Dispatch>(&dir, None, &device).unwrap_err();
        let message = err.to_string();
        assert!(
            matches!(err, CheckpointError::ShapeMismatch { .. }),
            "{message}"
        );
        assert!(
            message.contains("tensor stem.weight: stored [3, 16], the config gives [3, 8]"),
            "{message}"
        );

        // A meta without the checksum of its weights.
        std::fs::write(&meta_path, resigned(&|m| m.files.clear())).unwrap();
        let err = load_policy::<Dispatch>(&dir, None, &device).unwrap_err();
        assert!(err.to_string().contains("no checksum"), "{err}");

        std::fs::remove_file(&meta_path).unwrap();
        assert!(matches!(
            load_policy::<Dispatch>(&dir, None, &device),
            Err(CheckpointError::MissingMeta { .. })
        ));
    }

    #[test]
    fn damaged_checkpoints_never_load_other_weights_and_never_panic() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("ckpt");
        let (reference, device) = saved(&dir);
        let pristine: Vec<(String, Vec<u8>)> = [SAFETENSORS_FILE, META]
            .iter()
            .map(|f| (f.to_string(), std::fs::read(dir.join(f)).unwrap()))
            .collect();
        let mut cases = 0;
        let mut refused = 0;
        for (file, bytes) in &pristine {
            let len = bytes.len();
            let mut mutations: Vec<Vec<u8>> = Vec::new();
            for position in (0..len).step_by((len / 60).max(1)) {
                let mut flipped = bytes.clone();
                flipped[position] ^= 1 << (position % 8);
                mutations.push(flipped);
            }
            for cut in [0, 1, len / 3, len / 2, len - 1] {
                mutations.push(bytes[..cut].to_vec());
            }
            for start in (0..len).step_by((len / 8).max(1)) {
                let mut zeroed = bytes.clone();
                zeroed[start..(start + 64).min(len)].fill(0);
                mutations.push(zeroed);
            }
            for mutated in mutations {
                std::fs::write(dir.join(file), &mutated).unwrap();
                cases += 1;
                match load_policy::<Dispatch>(&dir, None, &device) {
                    Ok((policy, config, _)) => {
                        let actions = outputs(&policy, &config, &device);
                        assert_eq!(
                            actions.ok(),
                            Some(reference.clone()),
                            "{file}: a damaged checkpoint loaded other weights"
                        );
                    }
                    Err(_) => refused += 1,
                }
            }
            std::fs::write(dir.join(file), bytes).unwrap();
        }
        // Every change to either file is refused.
        assert!(cases > 100, "{cases}");
        assert_eq!(refused, cases);
    }

    #[test]
    fn stored_configs_and_specs_are_checked_with_config_file_ranges_and_against_each_other() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("ckpt");
        let (reference, device) = saved(&dir);
        let refused = |dir: &Path| {
            let error = load_policy::<Dispatch>(dir, None, &device).unwrap_err();
            assert!(matches!(error, CheckpointError::BadMeta { .. }), "{error}");
            error.to_string()
        };
        // Out of the range a config file allows (checksums re-signed, as a hand edit).
        rewrite_meta(&dir, |m| {
            m.config["action_limit"] = serde_json::json!([1e30, 1e30])
        });
        let message = refused(&dir);
        assert!(message.contains("action_limit[0] = 1e30"), "{message}");
        // In range, but apart from the robot the checkpoint records.
        rewrite_meta(&dir, |m| {
            m.config["action_limit"] = serde_json::json!([2.0, 2.0])
        });
        let message = refused(&dir);
        assert!(
            message.contains("disagree with the robot it records"),
            "{message}"
        );
        // Both edited together: the spec's own ranges catch it, for every reader of
        // the meta (ensure_trained_for too).
        rewrite_meta(&dir, |m| {
            m.config["action_limit"] = serde_json::json!([1e30, 1e30]);
            m.spec.as_mut().unwrap().action_limit = vec![1e30; 2];
        });
        let message = refused(&dir);
        assert!(
            message.contains("the robot spec it records: action_limit[0] = 1e30"),
            "{message}"
        );
        assert!(ensure_trained_for(&dir, &RobotConfig::default().spec()).is_err());
        rewrite_meta(&dir, |m| {
            m.config["action_limit"] = serde_json::json!([1.0, 1.0]);
            let spec = m.spec.as_mut().unwrap();
            spec.action_limit = vec![1.0; 2];
            spec.control_hz = 0.0;
        });
        assert!(refused(&dir).contains("control_hz"));
        // Put back, it loads the same weights.
        rewrite_meta(&dir, |m| m.spec.as_mut().unwrap().control_hz = 20.0);
        let (policy, config, _) = load_policy::<Dispatch>(&dir, None, &device).unwrap();
        assert_eq!(outputs(&policy, &config, &device).unwrap(), reference);
    }

    /// Edits the `meta.json` of the checkpoint in `dir` and signs it again, as a hand
    /// edit that keeps its checksum right would.
    fn rewrite_meta(dir: &Path, edit: impl Fn(&mut CheckpointMeta)) {
        let path = dir.join(META);
        let mut meta: CheckpointMeta =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        edit(&mut meta);
        meta.checksum = None;
        std::fs::write(
            &path,
            sign_meta_json(serde_json::to_vec_pretty(&meta).unwrap()),
        )
        .unwrap();
    }

    /// The tensor names and shapes in a safetensors file's header.
    fn safetensors_header(path: &Path) -> BTreeMap<String, Vec<usize>> {
        let bytes = std::fs::read(path).unwrap();
        let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + len]).unwrap();
        header
            .as_object()
            .unwrap()
            .iter()
            .filter(|(name, _)| *name != "__metadata__")
            .map(|(name, v)| {
                let shape = v["shape"].as_array().unwrap();
                (
                    name.clone(),
                    shape.iter().map(|d| d.as_u64().unwrap() as usize).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn safetensors_tensors_are_named_by_the_module_tree_and_mismatches_name_each_tensor() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("ckpt");
        let (_, device) = saved(&dir);
        let meta = read_meta(&dir).unwrap();
        assert_eq!(meta.format, 3);
        assert!(meta.files.contains_key(SAFETENSORS_FILE));
        let stored = safetensors_header(&dir.join(SAFETENSORS_FILE));
        let policy = config().init::<Dispatch>(&device);
        assert_eq!(stored, parameter_shapes(&policy));
        assert!(
            stored.contains_key("encoder.layers.0.mha.query.weight"),
            "{stored:?}"
        );

        // A config with a second layer: every tensor of it is named missing.
        rewrite_meta(&dir, |m| m.config["n_layers"] = serde_json::json!(2));
        let err = load_policy::<Dispatch>(&dir, None, &device).unwrap_err();
        let message = err.to_string();
        assert!(
            matches!(err, CheckpointError::ShapeMismatch { .. }),
            "{message}"
        );
        assert!(
            message.contains("tensor encoder.layers.1.mha.query.weight: missing"),
            "{message}"
        );

        // Saved with two layers, loaded with a config of one: the extra ones are named.
        saved_with(&dir, &config().with_n_layers(2));
        rewrite_meta(&dir, |m| m.config["n_layers"] = serde_json::json!(1));
        let message = load_policy::<Dispatch>(&dir, None, &device)
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("tensor encoder.layers.1.mha.query.weight: not in the model"),
            "{message}"
        );
    }

    #[test]
    fn checkpoints_with_burn_mpk_weights_still_load() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("ckpt");
        std::fs::create_dir_all(&dir).unwrap();
        let device = DispatchDevice::Flex(FlexDevice);
        let policy = config().init::<Dispatch>(&device);
        let before = outputs(&policy, &config(), &device).unwrap();
        // A format-2 checkpoint as builds before safetensors wrote it.
        policy.save_file(dir.join(MODEL_STEM), &recorder()).unwrap();
        let mut meta = CheckpointMeta::new(&RobotConfig::default().spec(), 7, None);
        meta.format = 2;
        meta.config = serde_json::to_value(config()).unwrap();
        meta.files = BTreeMap::from([(
            MPK_FILE.to_string(),
            FileDigest::of(&dir.join(MPK_FILE)).unwrap(),
        )]);
        std::fs::write(
            dir.join(META),
            sign_meta_json(serde_json::to_vec_pretty(&meta).unwrap()),
        )
        .unwrap();
        let (loaded, _, meta) = load_policy::<Dispatch>(&dir, Some(&config()), &device).unwrap();
        assert_eq!(meta.version, 7);
        assert_eq!(outputs(&loaded, &config(), &device).unwrap(), before);
        // Saving it again writes safetensors, with the same weights.
        save_policy(&loaded, &config(), meta, &dir).unwrap();
        assert!(dir.join(SAFETENSORS_FILE).exists() && !dir.join(MPK_FILE).exists());
        let (again, _, _) = load_policy::<Dispatch>(&dir, Some(&config()), &device).unwrap();
        assert_eq!(outputs(&again, &config(), &device).unwrap(), before);
    }
}
