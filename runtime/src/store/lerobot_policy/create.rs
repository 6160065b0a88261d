//! A new LeRobot policy directory: what `imago train --what bc --policy diffusion`
//! starts from. The config is written as LeRobot's `config.json` (its own keys), the
//! processors with the normalisation statistics of the data it will learn from, and
//! freshly initialised weights under the names LeRobot gives them, so the directory
//! loads in imago and in LeRobot's `from_pretrained` like one LeRobot wrote.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, anyhow, bail};
use burn::Dispatch;
use burn::DispatchDevice;
use burn_store::{BurnToPyTorchAdapter, KeyRemapper, ModuleSnapshot};
use imago_policies::diffusion::DiffusionPolicyConfig;
use imago_policies::lerobot::{FeatureType, PolicyFeatures};
use serde_json::json;

use super::processors::{POSTPROCESSOR_FILE, PREPROCESSOR_FILE};
use super::weights::{exact_names, remapper, renamed};
use super::write::save_named;
use super::{CONFIG_FILE, WEIGHTS_FILE};
use crate::store::atomic::{replace_dir, sibling_temp};
use crate::store::lerobot::EntryStats;

/// The preprocessor's statistics file, as LeRobot names it (its normaliser is step 3).
const PREPROCESSOR_STATS: &str = "policy_preprocessor_step_3_normalizer_processor.safetensors";
/// The postprocessor's statistics file (its unnormaliser is step 0).
const POSTPROCESSOR_STATS: &str = "policy_postprocessor_step_0_unnormalizer_processor.safetensors";

/// LeRobot's names of a Diffusion Policy's U-Net tensors from imago's paths: the
/// inverse of [`super::weights::diffusion_keys`]'s U-Net part, applied in order.
const DIFFUSION_UNET_NAMES: [(&str, &str); 11] = [
    (r"^unet\.final_conv\.", "diffusion.unet.final_conv.1."),
    (r"^unet\.final_block\.", "diffusion.unet.final_conv.0."),
    (
        r"^unet\.diffusion_step_encoder\.linear1\.",
        "diffusion.unet.diffusion_step_encoder.1.",
    ),
    (
        r"^unet\.diffusion_step_encoder\.linear2\.",
        "diffusion.unet.diffusion_step_encoder.3.",
    ),
    (
        r"^unet\.(down|up)_modules\.(\d+)\.resnet\.",
        "diffusion.unet.${1}_modules.${2}.0.",
    ),
    (
        r"^unet\.(down|up)_modules\.(\d+)\.resnet2\.",
        "diffusion.unet.${1}_modules.${2}.1.",
    ),
    (
        r"^unet\.(down|up)_modules\.(\d+)\.resample\.",
        "diffusion.unet.${1}_modules.${2}.2.",
    ),
    (r"^unet\.", "diffusion.unet."),
    (r"\.conv\.", ".block.0."),
    (r"\.norm\.", ".block.1."),
    (r"cond_encoder\.", "cond_encoder.1."),
];

/// Writes a new LeRobot Diffusion Policy of `config` to the directory `dir` (which
/// must not exist: the caller picks a fresh one), its normalisers scaling by `stats`
/// (by feature key: every vector input and the action), its weights initialised on
/// `device` as burn initialises them. A policy with cameras is refused: imago writes
/// the U-Net's names, not yet the image encoder's.
pub fn create_diffusion_policy(
    dir: &Path,
    config: &DiffusionPolicyConfig,
    stats: &BTreeMap<String, EntryStats>,
    device: &DispatchDevice,
) -> anyhow::Result<()> {
    config
        .validate()
        .map_err(|e| anyhow!("the new Diffusion Policy's config: {e}"))?;
    if !config.camera_keys().is_empty() {
        bail!(
            "a new Diffusion Policy reads no camera yet (it would read {}): imago starts state-based ones; train a LeRobot-made one with --init DIR",
            config.camera_keys().join(", ")
        );
    }
    let mut everything = config.input_features.clone();
    everything
        .0
        .extend(config.output_features.0.iter().cloned());
    for (key, feature) in &everything.0 {
        let given = stats
            .get(key)
            .ok_or_else(|| anyhow!("no statistics of {key} to normalise it by"))?;
        let len = feature.shape.iter().product::<usize>();
        anyhow::ensure!(
            [&given.min, &given.max, &given.mean, &given.std]
                .iter()
                .all(|s| s.len() == len),
            "the statistics of {key} are not of its {len} values"
        );
    }
    let staged = sibling_temp(dir, "new");
    std::fs::create_dir_all(&staged)
        .with_context(|| format!("cannot create {}", staged.display()))?;
    let written = stage(&staged, config, (&everything, stats), device);
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&staged);
        return Err(e);
    }
    replace_dir(&staged, dir)
}

/// A config as LeRobot's `config.json` holds it: its `type` beside its settings.
#[derive(serde::Serialize)]
struct TypedConfig<'a, C> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(flatten)]
    config: &'a C,
}

fn stage(
    staged: &Path,
    config: &DiffusionPolicyConfig,
    (everything, stats): (&PolicyFeatures, &BTreeMap<String, EntryStats>),
    device: &DispatchDevice,
) -> anyhow::Result<()> {
    // Written straight from the config (not through a `Value`, whose maps sort their
    // keys): the features keep their order, which is the order they are read in.
    let tagged = serde_json::to_string_pretty(&TypedConfig {
        kind: "diffusion",
        config,
    })?;
    let config_path = staged.join(CONFIG_FILE);
    std::fs::write(&config_path, tagged)
        .with_context(|| format!("cannot write {}", config_path.display()))?;
    let norm_map = serde_json::to_value(&config.normalization_mapping)?;
    let normaliser = |features: &PolicyFeatures, registry: &str, file: &str| {
        json!({
            "registry_name": registry,
            "config": {"eps": 1e-8, "features": features, "norm_map": norm_map},
            "state_file": file,
        })
    };
    let device_step = json!({
        "registry_name": "device_processor",
        "config": {"device": "cpu", "float_dtype": null},
    });
    write_json(
        &staged.join(PREPROCESSOR_FILE),
        &json!({
            "name": "policy_preprocessor",
            "steps": [
                {"registry_name": "rename_observations_processor", "config": {"rename_map": {}}},
                {"registry_name": "to_batch_processor", "config": {}},
                device_step,
                normaliser(everything, "normalizer_processor", PREPROCESSOR_STATS),
            ],
        }),
    )?;
    write_json(
        &staged.join(POSTPROCESSOR_FILE),
        &json!({
            "name": "policy_postprocessor",
            "steps": [
                normaliser(&config.output_features, "unnormalizer_processor", POSTPROCESSOR_STATS),
                device_step,
            ],
        }),
    )?;
    write_stats(&staged.join(PREPROCESSOR_STATS), everything, stats)?;
    write_stats(
        &staged.join(POSTPROCESSOR_STATS),
        &config.output_features,
        stats,
    )?;
    let model = config
        .init::<Dispatch>(device)
        .map_err(|e| anyhow!("the new Diffusion Policy's config: {e}"))?;
    save_named(
        &model,
        &staged.join(WEIGHTS_FILE),
        lerobot_names(&model, &DIFFUSION_UNET_NAMES)?,
    )?;
    Ok(())
}

/// The remapper from each of `model`'s tensor paths, as the writer sees them (after
/// the PyTorch adapter: a norm's `gamma` is `weight`), to its LeRobot name (`names`
/// applied in order).
fn lerobot_names<M: ModuleSnapshot<Dispatch>>(
    model: &M,
    names: &[(&str, &str)],
) -> anyhow::Result<KeyRemapper> {
    let inverse = remapper(names.iter().copied())?;
    exact_names(
        model
            .collect(None, Some(Box::new(BurnToPyTorchAdapter)), true)
            .iter()
            .map(|snapshot| {
                let path = snapshot.full_path();
                let name = renamed(&inverse, &path);
                (path, name)
            }),
    )
}

fn write_json(path: &Path, value: &serde_json::Value) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// The statistics of `features` as LeRobot's normaliser state file holds them: one
/// `float32` tensor `KEY.STAT` per feature and statistic.
fn write_stats(
    path: &Path,
    features: &PolicyFeatures,
    stats: &BTreeMap<String, EntryStats>,
) -> anyhow::Result<()> {
    let mut tensors: Vec<(String, Vec<u8>, usize)> = Vec::new();
    for (key, feature) in &features.0 {
        if feature.kind == FeatureType::Visual {
            continue;
        }
        let s = &stats[key];
        for (stat, values) in [
            ("min", &s.min),
            ("max", &s.max),
            ("mean", &s.mean),
            ("std", &s.std),
        ] {
            let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            tensors.push((format!("{key}.{stat}"), bytes, values.len()));
        }
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(name, bytes, len)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![*len], bytes)
                .map(|view| (name.clone(), view))
        })
        .collect::<Result<_, _>>()?;
    safetensors::serialize_to_file(views, None, path)
        .with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use burn::backend::flex::FlexDevice;
    use burn_store::{ModuleStore, SafetensorsStore};
    use imago_policies::lerobot::PolicyFeature;

    use super::*;
    use crate::store::lerobot::VectorStats;
    use crate::store::lerobot_policy::{LeRobotPolicy, load_lerobot_policy};

    fn names_in(path: &Path) -> Vec<String> {
        let mut names: Vec<String> = SafetensorsStore::from_file(path)
            .get_all_snapshots()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        names.sort();
        names
    }

    /// A state-based config whose U-Net is the one of the committed LeRobot fixture
    /// `diffusion_sampling_unet.safetensors` (made by LeRobot 0.4.4: action 2,
    /// conditioning 2 x 7, widths 16/32/64, step embedding 16).
    fn fixture_sized() -> DiffusionPolicyConfig {
        let vector = |kind, len| PolicyFeature {
            kind,
            shape: vec![len],
        };
        DiffusionPolicyConfig {
            input_features: PolicyFeatures(vec![
                ("observation.state".into(), vector(FeatureType::State, 2)),
                (
                    "observation.environment_state".into(),
                    vector(FeatureType::Env, 5),
                ),
            ]),
            output_features: PolicyFeatures(vec![(
                "action".into(),
                vector(FeatureType::Action, 2),
            )]),
            crop_shape: None,
            down_dims: vec![16, 32, 64],
            diffusion_step_embed_dim: 16,
            ..DiffusionPolicyConfig::default()
        }
    }

    fn stats_of(len: usize, offset: f32) -> EntryStats {
        let mut stats = VectorStats::new(len);
        for r in 0..4 {
            let row: Vec<f32> = (0..len).map(|i| offset + (r * len + i) as f32).collect();
            stats.add(&row);
        }
        stats.entries().unwrap()
    }

    #[test]
    fn a_new_policy_has_lerobots_names_and_loads_with_its_statistics() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("new");
        let stats = BTreeMap::from([
            ("observation.state".to_string(), stats_of(2, 0.0)),
            (
                "observation.environment_state".to_string(),
                stats_of(5, 10.0),
            ),
            ("action".to_string(), stats_of(2, 100.0)),
        ]);
        let device = DispatchDevice::Flex(FlexDevice);
        create_diffusion_policy(&out, &fixture_sized(), &stats, &device).unwrap();

        let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/lerobot/diffusion_sampling_unet.safetensors");
        let lerobots: Vec<String> = names_in(&fixture)
            .into_iter()
            .map(|name| format!("diffusion.unet.{name}"))
            .collect();
        assert_eq!(names_in(&out.join(WEIGHTS_FILE)), lerobots);

        let LeRobotPolicy::Diffusion(policy) =
            load_lerobot_policy::<Dispatch>(&out, &device).unwrap()
        else {
            panic!("not a Diffusion Policy");
        };
        assert_eq!(policy.config, {
            let mut want = fixture_sized();
            want.backbone_widths = policy.config.backbone_widths;
            want
        });
        // The action's range [100, 107] maps to [-1, 1] and back.
        let action = burn::tensor::Tensor::<Dispatch, 2>::from_data(
            burn::tensor::TensorData::new(vec![100.0f32, 107.0], [1, 2]),
            &device,
        );
        let scaled = policy
            .processors()
            .inputs
            .normalise("action", action.clone());
        let values: Vec<f32> = scaled.clone().into_data().to_vec().unwrap();
        assert!((values[0] + 1.0).abs() < 1e-5 && (values[1] - 1.0).abs() < 1e-5);
        let back: Vec<f32> = policy
            .processors()
            .outputs
            .unnormalise("action", scaled)
            .into_data()
            .to_vec()
            .unwrap();
        assert!((back[0] - 100.0).abs() < 1e-4 && (back[1] - 107.0).abs() < 1e-4);
    }

    #[test]
    fn missing_statistics_and_cameras_are_refused_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("new");
        let device = DispatchDevice::Flex(FlexDevice);
        let partial = BTreeMap::from([("observation.state".to_string(), stats_of(2, 0.0))]);
        let error = create_diffusion_policy(&out, &fixture_sized(), &partial, &device)
            .unwrap_err()
            .to_string();
        assert!(error.contains("observation.environment_state"), "{error}");
        let short = BTreeMap::from([
            ("observation.state".to_string(), stats_of(1, 0.0)),
            (
                "observation.environment_state".to_string(),
                stats_of(5, 10.0),
            ),
            ("action".to_string(), stats_of(2, 100.0)),
        ]);
        let error = create_diffusion_policy(&out, &fixture_sized(), &short, &device)
            .unwrap_err()
            .to_string();
        assert!(error.contains("not of its 2 values"), "{error}");
        let mut with_camera = fixture_sized();
        with_camera.input_features.0.push((
            "observation.image".into(),
            PolicyFeature {
                kind: FeatureType::Visual,
                shape: vec![3, 32, 32],
            },
        ));
        let error = create_diffusion_policy(&out, &with_camera, &partial, &device)
            .unwrap_err()
            .to_string();
        assert!(error.contains("reads no camera yet"), "{error}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
