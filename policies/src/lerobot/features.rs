//! A LeRobot policy's inputs and outputs as its `config.json` declares them
//! (`input_features`, `output_features`, `normalization_mapping`), in the order written
//! there: LeRobot concatenates its cameras' features in that order.

use std::collections::BTreeMap;
use std::fmt;

use imago_robots::bounds::ConfigError;
use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The key of the proprioception feature.
pub const STATE_KEY: &str = "observation.state";
/// The key of the environment-state feature.
pub const ENV_STATE_KEY: &str = "observation.environment_state";
/// The key of the action feature.
pub const ACTION_KEY: &str = "action";

/// LeRobot's `FeatureType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FeatureType {
    /// Proprioception (`observation.state`).
    State,
    /// A camera image `[channels, height, width]` (`observation.image`, `observation.images.*`).
    Visual,
    /// The environment's state (`observation.environment_state`).
    Env,
    /// The action.
    Action,
    /// A reward.
    Reward,
    /// Language tokens.
    Language,
}

/// LeRobot's `NormalizationMode`: how a feature type is scaled by its statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum NormMode {
    /// `2 (x - min) / (max - min) - 1`.
    MinMax,
    /// `(x - mean) / (std + eps)`.
    MeanStd,
    /// Unchanged.
    Identity,
    /// `2 (x - q01) / (q99 - q01) - 1`.
    Quantiles,
    /// `2 (x - q10) / (q90 - q10) - 1`.
    Quantile10,
}

/// One feature: its type and shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyFeature {
    /// What it is.
    #[serde(rename = "type")]
    pub kind: FeatureType,
    /// Its shape (`[length]` for vectors, `[channels, height, width]` for images).
    pub shape: Vec<usize>,
}

/// Features by key, in the order `config.json` lists them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyFeatures(pub Vec<(String, PolicyFeature)>);

impl PolicyFeatures {
    /// The feature named `key`.
    pub fn get(&self, key: &str) -> Option<&PolicyFeature> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, f)| f)
    }

    /// The features of type `kind`, in order.
    pub fn of_type(&self, kind: FeatureType) -> impl Iterator<Item = (&str, &PolicyFeature)> {
        self.0
            .iter()
            .filter(move |(_, f)| f.kind == kind)
            .map(|(k, f)| (k.as_str(), f))
    }

    /// The length of the vector feature `key`, if there is one; a feature of another
    /// rank is an error naming it (`what` says which list holds it).
    pub fn vector_len(&self, key: &str, what: &str) -> Result<Option<usize>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(f) if f.shape.len() == 1 && f.shape[0] > 0 => Ok(Some(f.shape[0])),
            Some(f) => Err(ConfigError::new(
                format!("{what}.{key}.shape"),
                &f.shape,
                "one positive length",
            )),
        }
    }

    /// The length of the vector feature `key`, which must be there.
    pub fn required_len(&self, key: &str, what: &str) -> Result<usize, ConfigError> {
        self.vector_len(key, what)?
            .ok_or_else(|| ConfigError::new(what, key, format!("must hold `{key}`")))
    }

    /// The camera features' keys, in the order their features are concatenated.
    pub fn camera_keys(&self) -> Vec<&str> {
        self.of_type(FeatureType::Visual)
            .map(|(key, _)| key)
            .collect()
    }

    /// `[channels, height, width]` of the cameras, which must all be the same with 3
    /// colour channels (as LeRobot's ResNet backbones require), or `None` without.
    pub fn camera_shape(&self) -> Result<Option<[usize; 3]>, ConfigError> {
        let mut shape: Option<[usize; 3]> = None;
        for (key, feature) in self.of_type(FeatureType::Visual) {
            let at = format!("input_features.{key}.shape");
            let this: [usize; 3] =
                feature.shape.as_slice().try_into().map_err(|_| {
                    ConfigError::new(&at, &feature.shape, "[channels, height, width]")
                })?;
            if this[0] != 3 {
                return Err(ConfigError::new(
                    at,
                    this,
                    "3 colour channels (the ResNet's input)",
                ));
            }
            if let Some(first) = shape
                && first != this
            {
                return Err(ConfigError::new(
                    at,
                    this,
                    format!("the other cameras' shape, {first:?}"),
                ));
            }
            shape = Some(this);
        }
        Ok(shape)
    }

    /// Checks that these inputs hold a camera (of a shape [`Self::camera_shape`] takes)
    /// or the environment state, as LeRobot's ACT and Diffusion Policy require.
    pub fn require_camera_or_env_state(&self) -> Result<(), ConfigError> {
        let env = self.vector_len(ENV_STATE_KEY, "input_features")?;
        if self.camera_shape()?.is_none() && env.is_none() {
            return Err(ConfigError::new(
                "input_features",
                self.0.iter().map(|(k, _)| k).collect::<Vec<_>>(),
                "at least one camera or `observation.environment_state`, as LeRobot requires",
            ));
        }
        Ok(())
    }
}

/// Checks LeRobot's `vision_backbone`: imago builds torchvision's `resnet18` only.
pub fn require_resnet18(vision_backbone: &str) -> Result<(), ConfigError> {
    if vision_backbone == "resnet18" {
        Ok(())
    } else {
        Err(ConfigError::new(
            "vision_backbone",
            vision_backbone,
            "resnet18 (the only backbone imago builds)",
        ))
    }
}

impl Serialize for PolicyFeatures {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (key, feature) in &self.0 {
            map.serialize_entry(key, feature)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for PolicyFeatures {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct InOrder;
        impl<'de> Visitor<'de> for InOrder {
            type Value = PolicyFeatures;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of feature names to {type, shape}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut features = Vec::new();
                while let Some(entry) = map.next_entry::<String, PolicyFeature>()? {
                    features.push(entry);
                }
                Ok(PolicyFeatures(features))
            }
        }
        deserializer.deserialize_map(InOrder)
    }
}

/// Per feature type, its normalisation (LeRobot's `normalization_mapping`; a type it
/// does not name is left unchanged).
pub type NormalisationMapping = BTreeMap<FeatureType, NormMode>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_keep_the_order_config_json_lists_them() {
        let json = r#"{"observation.images.top": {"type": "VISUAL", "shape": [3, 4, 5]},
                       "observation.state": {"type": "STATE", "shape": [2]},
                       "observation.images.side": {"type": "VISUAL", "shape": [3, 4, 5]}}"#;
        let features: PolicyFeatures = serde_json::from_str(json).unwrap();
        let cameras: Vec<&str> = features
            .of_type(FeatureType::Visual)
            .map(|(k, _)| k)
            .collect();
        assert_eq!(
            cameras,
            ["observation.images.top", "observation.images.side"]
        );
        assert_eq!(
            features.vector_len("observation.state", "input_features"),
            Ok(Some(2))
        );
        let error = features
            .vector_len("observation.images.top", "input_features")
            .unwrap_err();
        assert_eq!(error.key, "input_features.observation.images.top.shape");
        let back: PolicyFeatures =
            serde_json::from_str(&serde_json::to_string(&features).unwrap()).unwrap();
        assert_eq!(back, features);
    }
}
