//! Model checkpoints (policies and world models): a directory holding the burn record (`model.mpk`) and
//! `meta.json` (kind, config, version, parent, metrics). Written to a hidden sibling
//! directory first and renamed into place, so a crash never leaves half a checkpoint.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use burn::prelude::*;
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder};
use imago_policies::{VlaPolicy, VlaPolicyConfig};
use imago_worldmodel::{WorldModel, WorldModelConfig};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::atomic;

/// The `kind` of a policy checkpoint.
pub const POLICY_KIND: &str = "vla-policy";
/// The `kind` of a world-model checkpoint.
pub const WORLD_MODEL_KIND: &str = "world-model";
/// Version of the checkpoint layout.
pub const CHECKPOINT_FORMAT: u32 = 1;
const MODEL_STEM: &str = "model";
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
    /// The robot the model was trained for.
    pub robot: String,
    /// Figures measured when it was saved.
    pub metrics: BTreeMap<String, f64>,
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
    /// The weights file is missing or does not fit the config.
    #[error("checkpoint {path}: cannot load the weights: {reason}")]
    Weights {
        /// The checkpoint.
        path: PathBuf,
        /// The recorder's error.
        reason: String,
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
    let (config, meta) = read_config(dir, POLICY_KIND, expected, VlaPolicyConfig::validate)?;
    let policy = load_weights(config.init::<B>(device), dir, device)?;
    Ok((policy, config, meta))
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
    let (config, meta) = read_config(dir, WORLD_MODEL_KIND, expected, WorldModelConfig::validate)?;
    let model = load_weights(config.init::<B>(device), dir, device)?;
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
    let result = model
        .clone()
        .save_file(staged.join(MODEL_STEM), &recorder())
        .map_err(|e| write_err(e.to_string()))
        .and_then(|_| serde_json::to_vec_pretty(&meta).map_err(|e| write_err(e.to_string())))
        .and_then(|json| {
            atomic::write_file(&staged.join(META), &json).map_err(|e| write_err(format!("{e:#}")))
        })
        .and_then(|_| atomic::replace_dir(&staged, dir).map_err(|e| write_err(format!("{e:#}"))));
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&staged);
    }
    result
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
    serde_json::from_str(&text).map_err(|e| CheckpointError::BadMeta {
        path: dir.to_path_buf(),
        reason: e.to_string(),
    })
}

/// Reads the meta and config of a checkpoint of `kind`, validates the config and, with
/// `expected`, checks it equals the stored one.
fn read_config<C: Serialize + DeserializeOwned>(
    dir: &Path,
    kind: &'static str,
    expected: Option<&C>,
    validate: impl Fn(&C) -> Result<(), String>,
) -> Result<(C, CheckpointMeta), CheckpointError> {
    let meta = read_meta(dir)?;
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
    validate(&config).map_err(bad)?;
    if let Some(expected) = expected {
        let differences = config_differences(&meta.config, expected);
        if !differences.is_empty() {
            return Err(CheckpointError::ConfigMismatch {
                path: dir.to_path_buf(),
                differences: differences.join(", "),
            });
        }
    }
    Ok((config, meta))
}

/// Loads the weights of the checkpoint in `dir` into `model`.
fn load_weights<B: Backend, M: Module<B>>(
    model: M,
    dir: &Path,
    device: &B::Device,
) -> Result<M, CheckpointError> {
    model
        .load_file(dir.join(MODEL_STEM), &recorder(), device)
        .map_err(|e| CheckpointError::Weights {
            path: dir.to_path_buf(),
            reason: e.to_string(),
        })
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
    /// Meta for a new checkpoint of `robot` at `version`.
    pub fn new(robot: &str, version: u64, parent: Option<String>) -> Self {
        Self {
            format: CHECKPOINT_FORMAT,
            kind: POLICY_KIND.to_string(),
            config: serde_json::Value::Null,
            version,
            parent,
            robot: robot.to_string(),
            metrics: BTreeMap::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::{Dispatch, DispatchDevice, backend::flex::FlexDevice};
    use imago_robots::Robot;
    use imago_robots::reacher2d::Reacher2d;

    use super::*;
    use crate::evaluate::plan;

    fn config() -> VlaPolicyConfig {
        VlaPolicyConfig::new(8, vec![0, 1, 2, 3, 6, 7], vec![1.0, 1.0])
            .with_d_model(16)
            .with_d_ff(32)
            .with_n_layers(1)
    }

    /// Saves a fresh policy to `dir`; returns its actions on a fixed observation.
    fn saved(dir: &Path) -> (Vec<Vec<imago_robots::Action>>, DispatchDevice) {
        let device = DispatchDevice::Flex(FlexDevice);
        let policy = config().init::<Dispatch>(&device);
        // burn initialises parameters lazily: use the policy before saving a clone of
        // it, or the clone and the original would draw different weights.
        let actions = plan(&policy, &config(), &device, std::iter::once(&observation())).unwrap();
        save_policy(
            &policy,
            &config(),
            CheckpointMeta::new("reacher2d", 4, None),
            dir,
        )
        .unwrap();
        (actions, device)
    }

    fn observation() -> imago_robots::Observation {
        Reacher2d::default().reset(3)
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
        let after = plan(&loaded, &config(), &device, std::iter::once(&observation())).unwrap();
        assert_eq!(before, after);
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

        std::fs::write(&meta_path, good_meta.replace(POLICY_KIND, "world-model")).unwrap();
        let err = load_policy::<Dispatch>(&dir, None, &device).unwrap_err();
        assert!(err.to_string().contains("`world-model`"), "{err}");

        std::fs::write(&meta_path, &good_meta).unwrap();
        let model = dir.join("model.mpk");
        let bytes = std::fs::read(&model).unwrap();
        std::fs::write(&model, &bytes[..bytes.len() / 2]).unwrap();
        let err = load_policy::<Dispatch>(&dir, None, &device).unwrap_err();
        assert!(matches!(err, CheckpointError::Weights { .. }), "{err}");

        std::fs::remove_file(&meta_path).unwrap();
        assert!(matches!(
            load_policy::<Dispatch>(&dir, None, &device),
            Err(CheckpointError::MissingMeta { .. })
        ));
    }
}
