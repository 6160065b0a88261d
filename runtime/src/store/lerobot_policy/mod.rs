//! A LeRobot policy directory (`pretrained_model/`, lerobot 0.4.4's layout) read into
//! imago's burn models: `config.json` (the architecture and its settings),
//! `model.safetensors` (the weights, through burn-store with LeRobot's names remapped:
//! [`weights`]) and the processors' normalisation statistics ([`processors`]). Every
//! problem is one error naming the file and what is wrong with it.

pub mod create;
pub mod processors;
pub mod weights;
pub mod write;

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use imago_policies::act::{ActPolicy, ActPolicyConfig};
use imago_policies::diffusion::{DiffusionPolicy, DiffusionPolicyConfig};
use imago_policies::lerobot::PolicyFeatures;
use imago_policies::lora::LoraConfig;

pub use processors::read_processors;
pub use weights::load_lerobot_weights;
pub use write::{save_lerobot_checkpoint, write_lerobot_policy};

/// The file LeRobot's config is in.
pub const CONFIG_FILE: &str = "config.json";
/// The file LeRobot's weights are in.
pub const WEIGHTS_FILE: &str = "model.safetensors";

/// A LeRobot policy imago runs. (Loaded once per command and held by reference: the
/// variants' sizes differ but nothing moves them.)
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum LeRobotPolicy<B: Backend> {
    /// Diffusion Policy.
    Diffusion(DiffusionPolicy<B>),
    /// ACT.
    Act(ActPolicy<B>),
}

impl<B: Backend> LeRobotPolicy<B> {
    /// LeRobot's name of the architecture (`config.json`'s `type`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Diffusion(_) => "diffusion",
            Self::Act(_) => "act",
        }
    }

    /// What it reads and what it writes, as `config.json` lists them.
    pub fn features(&self) -> (&PolicyFeatures, &PolicyFeatures) {
        match self {
            Self::Diffusion(p) => (&p.config.input_features, &p.config.output_features),
            Self::Act(p) => (&p.config.input_features, &p.config.output_features),
        }
    }
}

impl<B: Backend> LeRobotPolicy<B> {
    /// The policy set for LoRA fine-tuning: every weight frozen, fresh adapters on its
    /// transformer's (ACT) or U-Net's (Diffusion) linear layers.
    pub fn with_lora(self, config: &LoraConfig, device: &B::Device) -> Self {
        match self {
            Self::Diffusion(p) => Self::Diffusion(p.with_lora(config, device)),
            Self::Act(p) => Self::Act(p.with_lora(config, device)),
        }
    }

    /// The policy with any adapters folded into its weights.
    pub fn merged(self) -> Self {
        match self {
            Self::Diffusion(p) => Self::Diffusion(p.merged()),
            Self::Act(p) => Self::Act(p.merged()),
        }
    }
}

impl<B: AutodiffBackend> LeRobotPolicy<B> {
    /// The same policy without gradient tracking: what acts while it trains.
    pub fn valid(&self) -> LeRobotPolicy<B::InnerBackend> {
        match self {
            Self::Diffusion(p) => LeRobotPolicy::Diffusion(p.valid()),
            Self::Act(p) => LeRobotPolicy::Act(p.valid()),
        }
    }

    /// The learning rate LeRobot trained it at (`config.json`'s `optimizer_lr`).
    pub fn optimizer_lr(&self) -> f64 {
        match self {
            Self::Diffusion(p) => p.config.optimizer_lr,
            Self::Act(p) => p.config.optimizer_lr,
        }
    }
}

/// Whether `dir` looks like a LeRobot policy directory (a `config.json` and a
/// `model.safetensors`, no imago `meta.json`).
pub fn is_lerobot_policy_dir(dir: &Path) -> bool {
    dir.join(CONFIG_FILE).is_file()
        && dir.join(WEIGHTS_FILE).is_file()
        && !dir.join("meta.json").exists()
}

/// Whether `dir` is a LeRobot policy directory or the training checkpoint above one
/// (whose `pretrained_model/` [`load_lerobot_policy`] refuses to guess at, naming it):
/// what commands taking a policy ask before treating `dir` as LeRobot's.
pub fn names_lerobot_policy(dir: &Path) -> bool {
    is_lerobot_policy_dir(dir) || is_lerobot_policy_dir(&dir.join("pretrained_model"))
}

/// The policy of the LeRobot directory `dir`, on `device`.
pub fn load_lerobot_policy<B: Backend>(
    dir: &Path,
    device: &B::Device,
) -> anyhow::Result<LeRobotPolicy<B>> {
    let config_path = existing_file(dir, CONFIG_FILE)?;
    existing_file(dir, WEIGHTS_FILE)?;
    let text = std::fs::read_to_string(&config_path)
        .with_context(|| format!("cannot read {}", config_path.display()))?;
    // The type from a `Value`; the config from the text itself, so that its features
    // keep the order `config.json` lists them in (a `Value`'s maps sort their keys).
    let json: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not JSON", config_path.display()))?;
    let kind = json.get("type").and_then(|t| t.as_str()).unwrap_or("");
    match kind {
        "diffusion" => {
            let mut config: DiffusionPolicyConfig =
                serde_json::from_str(&text).with_context(|| {
                    format!("{} is not a Diffusion Policy config", config_path.display())
                })?;
            let first = if config.use_separate_rgb_encoder_per_camera {
                "0."
            } else {
                ""
            };
            let widths = weights::backbone_widths(&dir.join(WEIGHTS_FILE), |stage| {
                format!(
                    "diffusion.rgb_encoder.{first}backbone.{}.0.conv1.weight",
                    stage + 4
                )
            })?;
            config.backbone_widths = widths.unwrap_or(config.backbone_widths);
            let model = config
                .init::<B>(device)
                .map_err(|e| anyhow::anyhow!("{}: {e}", config_path.display()))?;
            let keys = weights::diffusion_keys(&config);
            let model = load_lerobot_weights(model, &dir.join(WEIGHTS_FILE), &keys)?;
            let processors = read_processors(dir, &config.input_features, &config.output_features)?;
            Ok(LeRobotPolicy::Diffusion(DiffusionPolicy::new(
                model, config, processors,
            )))
        }
        "act" => {
            let mut config: ActPolicyConfig = serde_json::from_str(&text)
                .with_context(|| format!("{} is not an ACT config", config_path.display()))?;
            let widths = weights::backbone_widths(&dir.join(WEIGHTS_FILE), |stage| {
                format!("model.backbone.layer{}.0.conv1.weight", stage + 1)
            })?;
            config.backbone_widths = widths.unwrap_or(config.backbone_widths);
            let model = config
                .init::<B>(device)
                .map_err(|e| anyhow::anyhow!("{}: {e}", config_path.display()))?;
            let model = load_lerobot_weights(model, &dir.join(WEIGHTS_FILE), &weights::act_keys())?;
            let processors = read_processors(dir, &config.input_features, &config.output_features)?;
            Ok(LeRobotPolicy::Act(ActPolicy::new(
                model, config, processors,
            )))
        }
        "" => bail!(
            "{} has no `type`: not a LeRobot policy config",
            config_path.display()
        ),
        other => bail!(
            "{}: a LeRobot `{other}` policy; imago loads `act` and `diffusion` (see docs/lerobot-policies.md for what loads)",
            config_path.display()
        ),
    }
}

/// `dir/name`, or an error saying what is missing, with a hint when `dir` is a
/// LeRobot training checkpoint holding the policy one level down.
fn existing_file(dir: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let path = dir.join(name);
    if path.is_file() {
        return Ok(path);
    }
    if !dir.is_dir() {
        bail!("{} is not a directory", dir.display());
    }
    let inner = dir.join("pretrained_model");
    if inner.join(name).is_file() {
        bail!(
            "{} has no {name}; the LeRobot policy is in {}: pass that directory",
            dir.display(),
            inner.display()
        );
    }
    bail!(
        "{} has no {name}: not a LeRobot policy directory (`pretrained_model/`, with config.json and model.safetensors)",
        dir.display()
    )
}

#[cfg(test)]
mod tests;
