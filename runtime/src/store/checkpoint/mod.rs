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
pub(crate) use dtypes::ToF32;
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
use imago_policies::{Architecture, Policy, PolicyConfig};
use imago_robots::RobotSpec;
use imago_worldmodel::{WorldModel, WorldModelConfig};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::store::atomic;

/// The `kind`s of policy checkpoints, one per architecture
/// (`Architecture::checkpoint_kind`), as errors name them: `vla-policy or ...`.
pub fn policy_kinds() -> String {
    let kinds: Vec<&str> = Architecture::ALL
        .iter()
        .map(|a| a.checkpoint_kind())
        .collect();
    kinds.join(" or ")
}
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
/// The meta of a LeRobot policy directory that is a daemon's checkpoint: what
/// `meta.json` holds for imago's checkpoints, under a name of its own so that the
/// directory stays LeRobot's (LeRobot's `from_pretrained` reads it as it is).
pub const LEROBOT_META: &str = "imago-checkpoint.json";

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
        /// The kind (or kinds) asked for.
        expected: String,
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

/// Saves `policy` with its `config` and `meta` (whose `kind` and `config` are filled in:
/// the architecture's checkpoint kind and its own config) to `dir`, atomically
/// replacing any checkpoint there. Tensors are named by their path in the
/// architecture's module, as they were before there was more than one.
pub fn save_policy<B: Backend>(
    policy: &Policy<B>,
    config: &PolicyConfig,
    meta: CheckpointMeta,
    dir: &Path,
) -> Result<(), CheckpointError> {
    let (kind, stored) = (config.architecture().checkpoint_kind(), config.to_stored());
    match policy {
        Policy::Vla(model) => save_checkpoint(model, kind, &stored, meta, dir),
        Policy::Linear(model) => save_checkpoint(model, kind, &stored, meta, dir),
    }
}

/// Loads a policy checkpoint of any architecture onto `device`. With `expected`, the
/// stored config must equal it; the error then lists every differing key.
pub fn load_policy<B: Backend>(
    dir: &Path,
    expected: Option<&PolicyConfig>,
    device: &B::Device,
) -> Result<(Policy<B>, PolicyConfig, CheckpointMeta), CheckpointError> {
    let (config, meta) = read_policy_config(dir)?;
    if let Some(expected) = expected {
        ensure_policy_matches(dir, &config, expected)?;
    }
    let policy = load_policy_weights(&config, &meta, dir, device)?;
    Ok((policy, config, meta))
}

/// Loads a policy checkpoint onto `device` to continue training it (`train --init`,
/// the daemon): its config must equal `expected` (of the same architecture: ask
/// [`stored_architecture`]) except in the choices the checkpoint keeps
/// ([`PolicyConfig::keeping_choices_of`]: its head, chunk length, size and, for the
/// VLA, its stem activation, chosen when it was first trained).
pub fn load_policy_to_continue<B: Backend>(
    dir: &Path,
    expected: &PolicyConfig,
    device: &B::Device,
) -> Result<(Policy<B>, PolicyConfig, CheckpointMeta), CheckpointError> {
    let (config, meta) = read_policy_config(dir)?;
    let expected = expected.clone().keeping_choices_of(&config);
    ensure_policy_matches(dir, &config, &expected)?;
    let policy = load_policy_weights(&config, &meta, dir, device)?;
    Ok((policy, config, meta))
}

/// The architecture of the policy checkpoint in `dir`.
pub fn stored_architecture(dir: &Path) -> Result<Architecture, CheckpointError> {
    let meta = read_meta(dir)?;
    Architecture::of_checkpoint_kind(&meta.kind).ok_or(CheckpointError::WrongKind {
        path: dir.to_path_buf(),
        found: meta.kind,
        expected: policy_kinds(),
    })
}

/// Whether a checkpoint of `kind` holds a policy (of any architecture).
pub fn is_policy_kind(kind: &str) -> bool {
    Architecture::of_checkpoint_kind(kind).is_some()
}

/// The weights of the policy checkpoint in `dir` in a fresh policy of `config`: each
/// architecture's tensors load into its own module.
fn load_policy_weights<B: Backend>(
    config: &PolicyConfig,
    meta: &CheckpointMeta,
    dir: &Path,
    device: &B::Device,
) -> Result<Policy<B>, CheckpointError> {
    Ok(match config.init::<B>(device) {
        Policy::Vla(fresh) => Policy::Vla(load_weights(fresh, meta, dir, device)?),
        Policy::Linear(fresh) => Policy::Linear(load_weights(fresh, meta, dir, device)?),
    })
}

/// Checks that the `stored` policy config of the checkpoint in `dir` equals
/// `expected`: the same architecture, and every key the same (each listed if not).
fn ensure_policy_matches(
    dir: &Path,
    stored: &PolicyConfig,
    expected: &PolicyConfig,
) -> Result<(), CheckpointError> {
    let differences = if stored.architecture() != expected.architecture() {
        vec![format!(
            "architecture: stored {}, expected {}",
            stored.architecture(),
            expected.architecture()
        )]
    } else {
        config_differences(&stored.to_stored(), &expected.to_stored())
    };
    if differences.is_empty() {
        return Ok(());
    }
    Err(CheckpointError::ConfigMismatch {
        path: dir.to_path_buf(),
        differences: differences.join(", "),
    })
}

fn read_policy_config(dir: &Path) -> Result<(PolicyConfig, CheckpointMeta), CheckpointError> {
    read_config(
        dir,
        &policy_kinds(),
        |kind, stored| {
            Architecture::of_checkpoint_kind(kind)
                .map(|architecture| PolicyConfig::from_stored(architecture, stored))
        },
        PolicyConfig::validate,
        |config| (config.proprio_dim(), config.action_limit()),
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

/// Loads a world-model checkpoint onto `device` (a config written before a key
/// existed reads as such checkpoints did); with `expected`, the stored config must
/// equal it but for `state_decoder`, which stays the checkpoint's.
pub fn load_world_model<B: Backend>(
    dir: &Path,
    expected: Option<&WorldModelConfig>,
    device: &B::Device,
) -> Result<(WorldModel<B>, WorldModelConfig, CheckpointMeta), CheckpointError> {
    let (config, meta) = read_config(
        dir,
        WORLD_MODEL_KIND,
        |kind, mut stored| {
            (kind == WORLD_MODEL_KIND).then(|| {
                WorldModelConfig::fill_later_keys(&mut stored);
                serde_json::from_value(stored)
            })
        },
        WorldModelConfig::validate,
        |config| (config.proprio_dim, config.action_limit.as_slice()),
    )?;
    if let Some(expected) = expected {
        // Whether the model decodes its state, and how, is the checkpoint's: one
        // written before the decoder existed continues without it.
        let expected = expected
            .clone()
            .with_state_decoder(config.state_decoder)
            .with_state_in_latent(config.state_in_latent);
        ensure_config_matches(dir, &config, &expected)?;
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
            write_signed_meta(&staged, META, meta).map_err(|e| write_err(format!("{e:#}")))
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
        let whole = |p: &Path| {
            read_meta(p).is_ok_and(|m| verify_files(p, &m.files).is_ok())
                || read_lerobot_meta(p).is_ok()
        };
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

/// Writes `meta` as the [`LEROBOT_META`] of the LeRobot policy directory `dir`, whose
/// weights are complete: their size and checksum recorded, the file signed. Written
/// last, so that a directory with a valid one is whole.
pub fn write_lerobot_meta(dir: &Path, mut meta: CheckpointMeta, kind: &str) -> anyhow::Result<()> {
    meta.format = CHECKPOINT_FORMAT;
    meta.kind = kind.to_string();
    write_signed_meta(dir, LEROBOT_META, meta)
}

/// Writes `meta` as the file `name` of the checkpoint directory `dir`, whose weights
/// (`model.safetensors`) are complete: their size and checksum recorded, the whole
/// signed ([`sign_meta_json`]), atomically.
fn write_signed_meta(dir: &Path, name: &str, mut meta: CheckpointMeta) -> anyhow::Result<()> {
    let weights = dir.join(SAFETENSORS_FILE);
    let digest =
        FileDigest::of(&weights).with_context(|| format!("cannot read {}", weights.display()))?;
    meta.files = BTreeMap::from([(SAFETENSORS_FILE.to_string(), digest)]);
    meta.checksum = None;
    let json = sign_meta_json(serde_json::to_vec_pretty(&meta)?);
    atomic::write_file(&dir.join(name), &json)
}

/// Reads and checks the [`LEROBOT_META`] of the LeRobot policy directory `dir` (a
/// daemon's checkpoint): its own checksum and that of the weights.
pub fn read_lerobot_meta(dir: &Path) -> Result<CheckpointMeta, CheckpointError> {
    let path = dir.join(LEROBOT_META);
    let text = std::fs::read_to_string(&path).map_err(|e| CheckpointError::MissingMeta {
        path: dir.to_path_buf(),
        reason: format!("{LEROBOT_META}: {e}"),
    })?;
    let bad = |reason: String| CheckpointError::BadMeta {
        path: dir.to_path_buf(),
        reason: format!("{LEROBOT_META}: {reason}"),
    };
    let meta: CheckpointMeta = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    verify_meta_json(&text).map_err(bad)?;
    verify_files(dir, &meta.files).map_err(|reason| CheckpointError::Damaged {
        path: dir.to_path_buf(),
        reason,
    })?;
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

/// Reads the meta and config of a checkpoint of one of `kinds` (parsed by `parse`,
/// which gives keys added since it was written their old meaning, and answers `None`
/// for a kind it does not read) and validates the config: its ranges (the same as a
/// config file's), and its proprioception length and action limits (`robot_fields`)
/// against the robot spec the meta records, so that a config edited apart from its
/// spec is refused before a model is built from it.
fn read_config<C>(
    dir: &Path,
    kinds: &str,
    parse: impl Fn(&str, serde_json::Value) -> Option<Result<C, serde_json::Error>>,
    validate: impl Fn(&C) -> Result<(), imago_robots::ConfigError>,
    robot_fields: fn(&C) -> (usize, &[f32]),
) -> Result<(C, CheckpointMeta), CheckpointError> {
    let meta = read_meta(dir)?;
    let bad = |reason: String| CheckpointError::BadMeta {
        path: dir.to_path_buf(),
        reason: format!("config: {reason}"),
    };
    let config = match parse(&meta.kind, meta.config.clone()) {
        None => {
            return Err(CheckpointError::WrongKind {
                path: dir.to_path_buf(),
                found: meta.kind,
                expected: kinds.to_string(),
            });
        }
        Some(parsed) => parsed.map_err(|e| bad(e.to_string()))?,
    };
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

/// Checks that the `stored` config of the checkpoint in `dir` equals `expected`; the
/// error lists every differing key.
fn ensure_config_matches<C: Serialize>(
    dir: &Path,
    stored: &C,
    expected: &C,
) -> Result<(), CheckpointError> {
    let stored = serde_json::to_value(stored).unwrap_or_default();
    let differences = config_differences(&stored, expected);
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
        let differences = applied_differences(&applied, |_| false);
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
/// extra (but those `harmlessly_unused` says a loader may leave), or of another shape
/// or type.
pub(crate) fn applied_differences(
    applied: &ApplyResult,
    harmlessly_unused: impl Fn(&str) -> bool,
) -> Vec<String> {
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
            .filter(|path| !harmlessly_unused(path))
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
            kind: Architecture::Vla.checkpoint_kind().to_string(),
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
mod tests;
