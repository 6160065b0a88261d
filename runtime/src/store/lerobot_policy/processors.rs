//! A LeRobot policy's processors (`policy_preprocessor.json`,
//! `policy_postprocessor.json`): the normaliser step of the first and the unnormaliser
//! step of the second, each with its statistics file (`KEY.STAT` tensors, e.g.
//! `observation.state.min`), read into imago's [`FeatureNormaliser`]s. Other steps
//! (renaming, batching, device moves) have nothing to carry over.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, anyhow, bail};
use burn_store::{ModuleStore, SafetensorsStore};
use imago_policies::lerobot::{
    FeatureNormaliser, NormalisationMapping, PolicyFeatures, PolicyProcessors, Stat,
};
use serde::Deserialize;

/// The preprocessor's file.
pub const PREPROCESSOR_FILE: &str = "policy_preprocessor.json";
/// The postprocessor's file.
pub const POSTPROCESSOR_FILE: &str = "policy_postprocessor.json";

#[derive(Deserialize)]
struct Pipeline {
    steps: Vec<Step>,
}

#[derive(Deserialize)]
struct Step {
    registry_name: Option<String>,
    #[serde(default)]
    config: serde_json::Value,
    state_file: Option<String>,
}

#[derive(Deserialize)]
struct NormaliserStepConfig {
    #[serde(default = "lerobot_eps")]
    eps: f32,
    features: PolicyFeatures,
    norm_map: NormalisationMapping,
}

fn lerobot_eps() -> f32 {
    1e-8
}

/// The processors of the LeRobot directory `dir`. The preprocessor scales the
/// policy's `inputs` and its action; the postprocessor its `outputs`.
pub fn read_processors(
    dir: &Path,
    inputs: &PolicyFeatures,
    outputs: &PolicyFeatures,
) -> anyhow::Result<PolicyProcessors> {
    let pre = read_step(dir, PREPROCESSOR_FILE, "normalizer_processor")?;
    let post = read_step(dir, POSTPROCESSOR_FILE, "unnormalizer_processor")?;
    let mut everything = inputs.clone();
    everything.0.extend(outputs.0.iter().cloned());
    Ok(PolicyProcessors {
        inputs: normaliser(dir, PREPROCESSOR_FILE, pre, &everything)?,
        outputs: normaliser(dir, POSTPROCESSOR_FILE, post, outputs)?,
    })
}

/// The step named `registry` of the pipeline file `name` (`None` when the pipeline
/// has none: nothing is scaled there).
fn read_step(
    dir: &Path,
    name: &str,
    registry: &str,
) -> anyhow::Result<Option<(NormaliserStepConfig, Option<String>)>> {
    let path = dir.join(name);
    if !path.is_file() {
        bail!(
            "{} is missing: LeRobot writes it beside the weights since 0.4 (a checkpoint of an older LeRobot must be migrated with LeRobot's `migrate_policy_normalization` first)",
            path.display()
        );
    }
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let pipeline: Pipeline = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a LeRobot processor pipeline", path.display()))?;
    let Some(step) = pipeline
        .steps
        .into_iter()
        .find(|s| s.registry_name.as_deref() == Some(registry))
    else {
        return Ok(None);
    };
    let config: NormaliserStepConfig = serde_json::from_value(step.config)
        .with_context(|| format!("{}: the {registry} step's config", path.display()))?;
    Ok(Some((config, step.state_file)))
}

fn normaliser(
    dir: &Path,
    file: &str,
    step: Option<(NormaliserStepConfig, Option<String>)>,
    features: &PolicyFeatures,
) -> anyhow::Result<FeatureNormaliser> {
    let Some((config, state_file)) = step else {
        return Ok(FeatureNormaliser::default());
    };
    let stats = match state_file {
        Some(name) => read_stats(&dir.join(name))?,
        None => BTreeMap::new(),
    };
    // The step's own feature list says each feature's type; the policy's must agree.
    for (key, feature) in &features.0 {
        if let Some(own) = config.features.get(key)
            && own != feature
        {
            bail!(
                "{}: the normaliser's {key} is {own:?}, config.json's {feature:?}",
                dir.join(file).display()
            );
        }
    }
    FeatureNormaliser::new(&config.features, &config.norm_map, &stats, config.eps)
        .map_err(|e| anyhow!("{}: {e}", dir.join(file).display()))
}

/// The statistics file `path`: each tensor `FEATURE.STAT` as a float vector.
fn read_stats(path: &Path) -> anyhow::Result<BTreeMap<String, BTreeMap<String, Stat>>> {
    if !path.is_file() {
        bail!("{} is missing (the processor's statistics)", path.display());
    }
    let mut store = SafetensorsStore::from_file(path);
    let snapshots = store
        .get_all_snapshots()
        .map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let mut stats: BTreeMap<String, BTreeMap<String, Stat>> = BTreeMap::new();
    for (name, snapshot) in snapshots {
        let Some((feature, stat)) = name.rsplit_once('.') else {
            bail!(
                "{}: tensor {name} is not named FEATURE.STAT",
                path.display()
            );
        };
        if !snapshot.dtype.is_float() {
            bail!(
                "{}: tensor {name} is stored as {:?}, statistics are floats",
                path.display(),
                snapshot.dtype
            );
        }
        let data = snapshot
            .to_data()
            .map_err(|e| anyhow!("{}: tensor {name}: {e:?}", path.display()))?;
        let values: Vec<f32> = data
            .convert::<f32>()
            .to_vec()
            .map_err(|e| anyhow!("{}: tensor {name}: {e:?}", path.display()))?;
        if values.iter().any(|v| !v.is_finite()) {
            bail!(
                "{}: tensor {name} holds a value that is not finite",
                path.display()
            );
        }
        stats.entry(feature.to_string()).or_default().insert(
            stat.to_string(),
            Stat {
                shape: snapshot.shape.to_vec(),
                values,
            },
        );
    }
    Ok(stats)
}
