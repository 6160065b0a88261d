//! Writing a LeRobot policy directory back in LeRobot's layout: `model.safetensors`
//! from imago's burn model (PyTorch's layouts by burn-store's adapter, each tensor
//! under the name LeRobot gave it in the source directory), the config and processors
//! (with their statistics) copied as they were. What `imago export policy` and the
//! fine-tuning of a LeRobot policy write.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, anyhow};
use burn::Dispatch;
use burn_store::{
    BurnToPyTorchAdapter, KeyRemapper, ModuleSnapshot, ModuleStore, SafetensorsStore,
};

use super::weights::{KeyMap, act_keys, diffusion_keys};
use super::{LeRobotPolicy, WEIGHTS_FILE};
use crate::store::atomic::{replace_dir, sibling_temp};

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
    let weights = source.join(WEIGHTS_FILE);
    let staged = sibling_temp(path, "export");
    std::fs::create_dir_all(&staged)
        .with_context(|| format!("cannot create {}", staged.display()))?;
    let written = (|| -> anyhow::Result<usize> {
        for entry in std::fs::read_dir(source)
            .with_context(|| format!("cannot read {}", source.display()))?
        {
            let entry = entry?;
            if entry.file_type()?.is_file() && entry.file_name() != WEIGHTS_FILE {
                std::fs::copy(entry.path(), staged.join(entry.file_name()))
                    .with_context(|| format!("cannot copy {}", entry.path().display()))?;
            }
        }
        let path = staged.join(WEIGHTS_FILE);
        match policy {
            LeRobotPolicy::Diffusion(p) => save(
                &p.model,
                &path,
                inverse_keys(&weights, &diffusion_keys(&p.config))?,
            ),
            LeRobotPolicy::Act(p) => save(&p.model, &path, inverse_keys(&weights, &act_keys())?),
        }
    })();
    let tensors = match written {
        Ok(n) => n,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staged);
            return Err(e);
        }
    };
    replace_dir(&staged, path)?;
    Ok(tensors)
}

/// Writes `model`'s tensors to the safetensors file `path` in PyTorch's layouts, names
/// mapped by `names`; the number of tensors written.
fn save<M: ModuleSnapshot<Dispatch>>(
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
    let mut forward = KeyRemapper::new();
    for (pattern, replacement) in keys {
        forward = forward.add_pattern(pattern.as_str(), replacement.as_str())?;
    }
    let mut store = SafetensorsStore::from_file(weights);
    let names: Vec<String> = store
        .get_all_snapshots()
        .map_err(|e| anyhow!("{}: {e}", weights.display()))?
        .keys()
        .cloned()
        .collect();
    let patterns: Vec<(String, String)> = names
        .into_iter()
        .map(|name| {
            let burn = forward
                .to_regex_pairs()
                .iter()
                .fold(name.clone(), |path, (regex, to)| {
                    regex.replace_all(&path, to.as_str()).into_owned()
                });
            (format!("^{}$", burn.replace('.', r"\.")), name)
        })
        .collect::<BTreeMap<_, _>>()
        .into_iter()
        .collect();
    KeyRemapper::from_patterns(patterns).map_err(|e| anyhow!("key map: {e}"))
}
