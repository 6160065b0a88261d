//! Writing a LeRobot policy directory back in LeRobot's layout: `model.safetensors`
//! from imago's burn model (PyTorch's layouts by burn-store's adapter, each tensor
//! under the name LeRobot gave it in the source directory), the config and processors
//! (with their statistics) copied as they were. What `imago export policy` and the
//! fine-tuning of a LeRobot policy write, and a daemon's checkpoint of one.

use std::path::Path;

use anyhow::{Context, anyhow};
use burn::Dispatch;
use burn_store::{
    BurnToPyTorchAdapter, KeyRemapper, ModuleSnapshot, ModuleStore, SafetensorsStore,
};

use super::weights::{KeyMap, act_keys, diffusion_keys, exact_names, remapper, renamed};
use super::{LeRobotPolicy, WEIGHTS_FILE};
use crate::store::atomic::{replace_dir, sibling_temp};
use crate::store::checkpoint::{CheckpointMeta, LEROBOT_META, write_lerobot_meta};

/// Writes `policy` to the directory `path` (checked by the caller) in LeRobot's layout:
/// its weights under the names the LeRobot directory `source` gave them, and
/// `source`'s config and processors as they are (a fine-tuned policy keeps its
/// normalisation statistics). Built beside `path` and moved into place when complete;
/// the number of tensors written.
pub fn write_lerobot_policy(
    policy: &LeRobotPolicy<Dispatch>,
    source: &Path,
    path: &Path,
) -> anyhow::Result<usize> {
    let staged = sibling_temp(path, "export");
    let tensors = staged_then(&staged, || stage(policy, source, &staged))?;
    replace_dir(&staged, path)?;
    Ok(tensors)
}

/// Saves `policy` as a daemon's checkpoint `dir`: a LeRobot directory as
/// [`write_lerobot_policy`] writes it, with imago's signed meta ([`LEROBOT_META`]:
/// `meta`'s version and robot, the weights' size and checksum) written last. Staged
/// as imago's checkpoints are, so `recover_checkpoint` finishes a save a crash cut
/// short.
pub fn save_lerobot_checkpoint(
    policy: &LeRobotPolicy<Dispatch>,
    source: &Path,
    dir: &Path,
    meta: CheckpointMeta,
) -> anyhow::Result<()> {
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let staged = sibling_temp(dir, "staged");
    staged_then(&staged, || {
        stage(policy, source, &staged)?;
        write_lerobot_meta(&staged, meta, &format!("lerobot-{}", policy.kind()))
    })?;
    replace_dir(&staged, dir)
}

/// Creates the directory `staged` and runs `write` to fill it; on an error the
/// directory is removed.
fn staged_then<T>(staged: &Path, write: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
    std::fs::create_dir_all(staged)
        .with_context(|| format!("cannot create {}", staged.display()))?;
    let written = write();
    if written.is_err() {
        let _ = std::fs::remove_dir_all(staged);
    }
    written
}

/// Fills `staged` with `policy`'s weights under `source`'s names and `source`'s other
/// files (config, processors; not a checkpoint's imago meta, which belongs to the
/// weights it was written with); the number of tensors written.
fn stage(policy: &LeRobotPolicy<Dispatch>, source: &Path, staged: &Path) -> anyhow::Result<usize> {
    let weights = source.join(WEIGHTS_FILE);
    for entry in
        std::fs::read_dir(source).with_context(|| format!("cannot read {}", source.display()))?
    {
        let entry = entry?;
        let name = entry.file_name();
        if entry.file_type()?.is_file() && name != WEIGHTS_FILE && name != LEROBOT_META {
            std::fs::copy(entry.path(), staged.join(&name))
                .with_context(|| format!("cannot copy {}", entry.path().display()))?;
        }
    }
    let path = staged.join(WEIGHTS_FILE);
    match policy {
        LeRobotPolicy::Diffusion(p) => save_named(
            &p.model,
            &path,
            inverse_keys(&weights, &diffusion_keys(&p.config))?,
        ),
        LeRobotPolicy::Act(p) => save_named(&p.model, &path, inverse_keys(&weights, &act_keys())?),
    }
}

/// Writes `model`'s tensors to the safetensors file `path` in PyTorch's layouts, names
/// mapped by `names`; the number of tensors written.
pub(super) fn save_named<M: ModuleSnapshot<Dispatch>>(
    model: &M,
    path: &Path,
    names: KeyRemapper,
) -> anyhow::Result<usize> {
    let mut store = SafetensorsStore::from_file(path)
        .with_to_adapter(BurnToPyTorchAdapter)
        .skip_enum_variants(true)
        .remap(names);
    model
        .save_into(&mut store)
        .map_err(|e| anyhow!("cannot write {}: {e}", path.display()))?;
    let mut written = SafetensorsStore::from_file(path);
    Ok(written
        .get_all_snapshots()
        .map_err(|e| anyhow!("{}: {e}", path.display()))?
        .len())
}

/// The remapper from imago's tensor paths back to LeRobot's names: every name of the
/// source file `weights`, mapped forward by `keys` as loading maps it, then reversed.
fn inverse_keys(weights: &Path, keys: &KeyMap) -> anyhow::Result<KeyRemapper> {
    let forward = remapper(keys.iter().map(|(p, r)| (p, r)))?;
    let mut store = SafetensorsStore::from_file(weights);
    let names: Vec<String> = store
        .get_all_snapshots()
        .map_err(|e| anyhow!("{}: {e}", weights.display()))?
        .keys()
        .cloned()
        .collect();
    exact_names(
        names
            .into_iter()
            .map(|name| (renamed(&forward, &name), name)),
    )
}
