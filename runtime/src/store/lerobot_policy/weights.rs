//! LeRobot's `model.safetensors` loaded into imago's burn modules through burn-store:
//! PyTorch's layouts by its PyTorch adapter, LeRobot's parameter names by key
//! remapping (each part's own map, nested under the part's path), half and double
//! precision converted to `f32`. Every tensor the model has must be loaded and every
//! tensor of the file used, else one error lists what differs.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{anyhow, bail};
use burn::prelude::*;
use burn_store::{
    ChainAdapter, KeyRemapper, ModuleSnapshot, ModuleStore, PyTorchToBurnAdapter, SafetensorsStore,
};
use imago_policies::diffusion::DiffusionPolicyConfig;
use imago_policies::diffusion::rgb_encoder::LEROBOT_RGB_KEYS;
use imago_policies::diffusion::unet::LEROBOT_KEYS;
use imago_policies::resnet::TORCHVISION_KEYS;

use crate::store::checkpoint::{ToF32, applied_differences};

/// A key map: `(pattern, replacement)` applied in order.
pub type KeyMap = Vec<(String, String)>;

/// `keys` (a part's own map, anchored at the part's root with `^`) moved under
/// `from` in the file and `to` in the model; unanchored patterns apply anywhere.
fn nested(from: &str, to: &str, keys: &[(&str, &str)]) -> KeyMap {
    let mut out = vec![(format!("^{}", from.replace('.', r"\.")), to.to_string())];
    for (pattern, replacement) in keys {
        out.push(match pattern.strip_prefix('^') {
            Some(rest) => (
                format!("^{}{rest}", to.replace('.', r"\.")),
                format!("{to}{replacement}"),
            ),
            None => (pattern.to_string(), replacement.to_string()),
        });
    }
    out
}

/// LeRobot's names of a Diffusion Policy's tensors mapped to imago's
/// [`imago_policies::diffusion::DiffusionModel`].
pub fn diffusion_keys(config: &DiffusionPolicyConfig) -> KeyMap {
    let cameras = config.camera_keys().len();
    let rgb: Vec<(&str, &str)> = LEROBOT_RGB_KEYS
        .into_iter()
        .chain(TORCHVISION_KEYS)
        .collect();
    let mut keys = Vec::new();
    if cameras > 0 {
        if config.use_separate_rgb_encoder_per_camera {
            for i in 0..cameras {
                keys.extend(nested(
                    &format!("diffusion.rgb_encoder.{i}."),
                    &format!("rgb_encoder.{i}."),
                    &rgb,
                ));
            }
        } else {
            keys.extend(nested("diffusion.rgb_encoder.", "rgb_encoder.0.", &rgb));
        }
    }
    keys.extend(nested("diffusion.unet.", "unet.", &LEROBOT_KEYS));
    keys
}

/// The stage widths of a ResNet-18 in the weights file `path`: the output channels of
/// each stage's first convolution, the tensors named by `first_convolution(stage)`
/// (stage 0-3); `None` when the file holds none of them.
pub fn backbone_widths(
    path: &Path,
    first_convolution: impl Fn(usize) -> String,
) -> anyhow::Result<Option<[usize; 4]>> {
    let mut store = SafetensorsStore::from_file(path);
    let snapshots = store
        .get_all_snapshots()
        .map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let width = |stage: usize| snapshots.get(&first_convolution(stage)).map(|s| s.shape[0]);
    Ok(match (width(0), width(1), width(2), width(3)) {
        (Some(a), Some(b), Some(c), Some(d)) => Some([a, b, c, d]),
        _ => None,
    })
}

/// LeRobot's names of an ACT policy's tensors mapped to imago's
/// [`imago_policies::act::ActModel`] (the VAE's parts gathered under `vae`).
pub fn act_keys() -> KeyMap {
    let mut keys: KeyMap = vec![
        (r"^model\.(vae_encoder)".into(), "vae.$1".into()),
        (r"^model\.".into(), String::new()),
    ];
    keys.extend(
        TORCHVISION_KEYS
            .iter()
            .map(|(p, r)| (p.to_string(), r.to_string())),
    );
    keys
}

/// The remapper of `keys`: `(pattern, replacement)` applied in order.
pub fn remapper<P: AsRef<str>, R: AsRef<str>>(
    keys: impl IntoIterator<Item = (P, R)>,
) -> anyhow::Result<KeyRemapper> {
    let mut remapper = KeyRemapper::new();
    for (pattern, replacement) in keys {
        let pattern = pattern.as_ref();
        remapper = remapper
            .add_pattern(pattern, replacement.as_ref())
            .map_err(|e| anyhow!("key map {pattern}: {e}"))?;
    }
    Ok(remapper)
}

/// `name` as `remapper` renames it (every pattern, in order).
pub fn renamed(remapper: &KeyRemapper, name: &str) -> String {
    remapper
        .to_regex_pairs()
        .iter()
        .fold(name.to_string(), |name, (regex, to)| {
            regex.replace_all(&name, to.as_str()).into_owned()
        })
}

/// The remapper renaming each `(path, name)` pair's path, exactly, to its name: how a
/// model's tensors are written under LeRobot's names.
pub fn exact_names(
    pairs: impl IntoIterator<Item = (String, String)>,
) -> anyhow::Result<KeyRemapper> {
    let patterns: BTreeMap<String, String> = pairs
        .into_iter()
        .map(|(path, name)| (format!("^{}$", path.replace('.', r"\.")), name))
        .collect();
    KeyRemapper::from_patterns(patterns.into_iter().collect()).map_err(|e| anyhow!("key map: {e}"))
}

/// `model` with the weights of the LeRobot file `path`, names mapped by `keys`.
pub fn load_lerobot_weights<B: Backend, M: ModuleSnapshot<B>>(
    mut model: M,
    path: &Path,
    keys: &KeyMap,
) -> anyhow::Result<M> {
    let remapper = remapper(keys.iter().map(|(p, r)| (p, r)))?;
    let mut store = SafetensorsStore::from_file(path)
        .allow_partial(true)
        .validate(false)
        .skip_enum_variants(true)
        .remap(remapper);
    let snapshots = store
        .get_all_snapshots()
        .map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let mut convert = false;
    for (name, snapshot) in snapshots {
        match snapshot.dtype {
            d if d.is_float() => convert |= !matches!(d, burn::tensor::DType::F32),
            // torch's BatchNorm counter: no use at inference, left unused below.
            _ if name.ends_with("num_batches_tracked") => {}
            other => bail!(
                "{}: tensor {name} is stored as {other:?}; the model's tensors are floats",
                path.display()
            ),
        }
    }
    store = if convert {
        store.with_from_adapter(ChainAdapter::new(PyTorchToBurnAdapter, ToF32))
    } else {
        store.with_from_adapter(PyTorchToBurnAdapter)
    };
    let applied = model
        .load_from(&mut store)
        .map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let problems = applied_differences(&applied, |name| harmlessly_unused(name, &applied.applied));
    if !problems.is_empty() {
        let shown = problems.len().min(8);
        bail!(
            "{} does not fit config.json ({} problems): {}{}",
            path.display(),
            problems.len(),
            problems[..shown].join("; "),
            if problems.len() > shown { "; ..." } else { "" }
        );
    }
    Ok(model)
}

/// burn-store lists a norm's PyTorch names (`weight`, `bias`) as unused even when its
/// adapter applied them as `gamma` and `beta`; and torch's batch-norm counter has no
/// use here.
fn harmlessly_unused(name: &str, applied: &[String]) -> bool {
    if name.ends_with("num_batches_tracked") {
        return true;
    }
    let burn_name = match name.rsplit_once('.') {
        Some((stem, "weight")) => format!("{stem}.gamma"),
        Some((stem, "bias")) => format!("{stem}.beta"),
        _ => return false,
    };
    applied.contains(&burn_name)
}
