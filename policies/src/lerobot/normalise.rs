//! LeRobot's normaliser and unnormaliser processors (`NormalizerProcessorStep`,
//! `UnnormalizerProcessorStep`, lerobot 0.4.4): each feature scaled by its dataset
//! statistics in the mode its type maps to, on burn tensors of any rank (an image's
//! statistics are per channel, `[3, 1, 1]`, and broadcast over its pixels). As in
//! LeRobot, a feature without statistics passes unchanged.

use std::collections::BTreeMap;

use burn::prelude::*;

use super::features::{FeatureType, NormMode, NormalisationMapping, PolicyFeatures};

/// One statistic of one feature (`observation.state.mean`), row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Stat {
    /// Its shape (`[length]`, or `[channels, 1, 1]` for images).
    pub shape: Vec<usize>,
    /// Its values.
    pub values: Vec<f32>,
}

/// A LeRobot policy's processors: the scaling of its inputs (the preprocessor's
/// normaliser, which also scales actions in training) and of its outputs (the
/// postprocessor's unnormaliser).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PolicyProcessors {
    /// Normalises observations (and, in training, actions).
    pub inputs: FeatureNormaliser,
    /// Unnormalises actions.
    pub outputs: FeatureNormaliser,
}

/// A feature's scaling, ready to apply, with per-element values of the statistics'
/// shape.
#[derive(Debug, Clone, PartialEq)]
enum Scaling {
    /// `(x - mean) / (std + eps)`; back: `x std + mean` (LeRobot's unnormaliser
    /// leaves `eps` out).
    MeanStd {
        shape: Vec<usize>,
        mean: Vec<f32>,
        std: Vec<f32>,
        std_eps: Vec<f32>,
    },
    /// `2 (x - low) / width - 1`, `width` being `eps` where the range is empty.
    UnitRange {
        shape: Vec<usize>,
        low: Vec<f32>,
        width: Vec<f32>,
    },
}

/// Every feature's scaling, built from LeRobot's statistics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FeatureNormaliser {
    scalings: BTreeMap<String, Scaling>,
}

impl FeatureNormaliser {
    /// The normaliser of `features` scaled by `mapping` with statistics `stats`
    /// (feature key -> statistic name -> values) and LeRobot's `eps`. A feature whose
    /// mode needs a statistic it lacks, or whose statistics do not fit its shape, is an
    /// error naming it; a feature with no statistics at all is left unchanged, as
    /// LeRobot leaves it.
    pub fn new(
        features: &PolicyFeatures,
        mapping: &NormalisationMapping,
        stats: &BTreeMap<String, BTreeMap<String, Stat>>,
        eps: f32,
    ) -> Result<Self, String> {
        let mut scalings = BTreeMap::new();
        for (key, feature) in &features.0 {
            let mode = mapping
                .get(&feature.kind)
                .copied()
                .unwrap_or(NormMode::Identity);
            let Some(stats) = stats.get(key) else {
                continue;
            };
            let (first, second) = match mode {
                NormMode::Identity => continue,
                NormMode::MeanStd => ("mean", "std"),
                NormMode::MinMax => ("min", "max"),
                NormMode::Quantiles => ("q01", "q99"),
                NormMode::Quantile10 => ("q10", "q90"),
            };
            let need = |name: &str| {
                stats.get(name).ok_or_else(|| {
                    format!("{key} is normalised {mode:?} but its statistics have no `{name}`")
                })
            };
            let (a, b) = (need(first)?, need(second)?);
            if a.shape != b.shape {
                return Err(format!(
                    "{key}: `{first}` has shape {:?} but `{second}` {:?}",
                    a.shape, b.shape
                ));
            }
            fits_feature(key, &a.shape, &feature.shape, feature.kind)?;
            let shape = a.shape.clone();
            let scaling = if mode == NormMode::MeanStd {
                Scaling::MeanStd {
                    shape,
                    mean: a.values.clone(),
                    std: b.values.clone(),
                    std_eps: b.values.iter().map(|s| s + eps).collect(),
                }
            } else {
                let width = a.values.iter().zip(&b.values).map(|(lo, hi)| hi - lo);
                Scaling::UnitRange {
                    shape,
                    low: a.values.clone(),
                    width: width.map(|w| if w == 0.0 { eps } else { w }).collect(),
                }
            };
            scalings.insert(key.clone(), scaling);
        }
        Ok(Self { scalings })
    }

    /// `x` (feature `key`, batch dimensions first) scaled by its statistics.
    pub fn normalise<B: Backend, const D: usize>(
        &self,
        key: &str,
        x: Tensor<B, D>,
    ) -> Tensor<B, D> {
        let device = x.device();
        match self.scalings.get(key) {
            None => x,
            Some(Scaling::MeanStd {
                shape,
                mean,
                std_eps,
                ..
            }) => (x - stat(shape, mean, &device)) / stat(shape, std_eps, &device),
            Some(Scaling::UnitRange { shape, low, width }) => {
                ((x - stat(shape, low, &device)).mul_scalar(2.0) / stat(shape, width, &device))
                    .sub_scalar(1.0)
            }
        }
    }

    /// The inverse of [`Self::normalise`], as LeRobot's unnormaliser computes it.
    pub fn unnormalise<B: Backend, const D: usize>(
        &self,
        key: &str,
        x: Tensor<B, D>,
    ) -> Tensor<B, D> {
        let device = x.device();
        match self.scalings.get(key) {
            None => x,
            Some(Scaling::MeanStd {
                shape, mean, std, ..
            }) => x * stat(shape, std, &device) + stat(shape, mean, &device),
            Some(Scaling::UnitRange { shape, low, width }) => {
                x.add_scalar(1.0).div_scalar(2.0) * stat(shape, width, &device)
                    + stat(shape, low, &device)
            }
        }
    }

    /// The keys it scales (the others pass unchanged).
    pub fn scaled_keys(&self) -> impl Iterator<Item = &str> {
        self.scalings.keys().map(String::as_str)
    }
}

/// A statistic as a tensor of rank `D` that broadcasts over `x`'s leading (batch)
/// dimensions.
fn stat<B: Backend, const D: usize>(
    shape: &[usize],
    values: &[f32],
    device: &B::Device,
) -> Tensor<B, D> {
    let mut full = [1usize; D];
    full[D - shape.len()..].copy_from_slice(shape);
    Tensor::from_data(TensorData::new(values.to_vec(), full), device)
}

/// Checks that statistics of `shape` fit feature `key` of `feature_shape`: a vector's
/// statistics have its length; an image's one value per channel (`[channels, 1, 1]`)
/// or one per pixel.
fn fits_feature(
    key: &str,
    shape: &[usize],
    feature_shape: &[usize],
    kind: FeatureType,
) -> Result<(), String> {
    let per_channel = kind == FeatureType::Visual
        && feature_shape.len() == 3
        && shape == [feature_shape[0], 1, 1];
    if shape == feature_shape || per_channel {
        Ok(())
    } else {
        Err(format!(
            "{key}: statistics of shape {shape:?} do not fit the feature's shape {feature_shape:?}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;

    use super::*;
    use crate::lerobot::features::PolicyFeature;

    type B = Flex;

    fn features() -> PolicyFeatures {
        let feature = |kind, shape: &[usize]| PolicyFeature {
            kind,
            shape: shape.to_vec(),
        };
        PolicyFeatures(vec![
            (
                "observation.state".into(),
                feature(FeatureType::State, &[2]),
            ),
            (
                "observation.image".into(),
                feature(FeatureType::Visual, &[2, 1, 2]),
            ),
            ("action".into(), feature(FeatureType::Action, &[2])),
        ])
    }

    fn stats(
        entries: &[(&str, &str, &[usize], &[f32])],
    ) -> BTreeMap<String, BTreeMap<String, Stat>> {
        let mut out: BTreeMap<String, BTreeMap<String, Stat>> = BTreeMap::new();
        for (key, name, shape, values) in entries {
            out.entry(key.to_string()).or_default().insert(
                name.to_string(),
                Stat {
                    shape: shape.to_vec(),
                    values: values.to_vec(),
                },
            );
        }
        out
    }

    fn values<const D: usize>(x: Tensor<B, D>) -> Vec<f32> {
        x.into_data().to_vec().unwrap()
    }

    #[test]
    fn features_scale_as_lerobots_processors_scale_them() {
        let mapping = NormalisationMapping::from([
            (FeatureType::State, NormMode::MinMax),
            (FeatureType::Visual, NormMode::MeanStd),
            (FeatureType::Action, NormMode::MinMax),
        ]);
        let stats = stats(&[
            ("observation.state", "min", &[2], &[0.0, 5.0]),
            ("observation.state", "max", &[2], &[10.0, 5.0]),
            ("observation.image", "mean", &[2, 1, 1], &[0.5, 0.25]),
            ("observation.image", "std", &[2, 1, 1], &[0.5, 0.25]),
        ]);
        let normaliser = FeatureNormaliser::new(&features(), &mapping, &stats, 1e-8).unwrap();
        let device = Default::default();
        let state = Tensor::<B, 2>::from_floats([[5.0, 5.0]], &device);
        // An empty range divides by eps: the minimum maps to -1, as in LeRobot.
        assert_eq!(
            values(normaliser.normalise("observation.state", state.clone())),
            [0.0, -1.0]
        );
        let back = normaliser.unnormalise(
            "observation.state",
            normaliser.normalise("observation.state", state),
        );
        assert_eq!(values(back), [5.0, 5.0]);
        let image = Tensor::<B, 4>::from_floats([[[[1.0, 0.0]], [[0.5, 0.25]]]], &device);
        assert_eq!(
            values(normaliser.normalise("observation.image", image)),
            [1.0, -1.0, 1.0, 0.0]
        );
        // The action has no statistics: unchanged, as LeRobot leaves it.
        let action = Tensor::<B, 2>::from_floats([[3.0, 4.0]], &device);
        assert_eq!(values(normaliser.unnormalise("action", action)), [3.0, 4.0]);
        assert_eq!(
            normaliser.scaled_keys().collect::<Vec<_>>(),
            ["observation.image", "observation.state"]
        );
    }

    #[test]
    fn statistics_that_do_not_fit_are_errors_naming_the_feature() {
        let mapping = NormalisationMapping::from([(FeatureType::State, NormMode::MeanStd)]);
        let missing = stats(&[("observation.state", "mean", &[2], &[0.0, 1.0])]);
        let error = FeatureNormaliser::new(&features(), &mapping, &missing, 1e-8).unwrap_err();
        assert!(
            error.contains("observation.state") && error.contains("`std`"),
            "{error}"
        );
        let wrong = stats(&[
            ("observation.state", "mean", &[3], &[0.0, 1.0, 2.0]),
            ("observation.state", "std", &[3], &[1.0, 1.0, 1.0]),
        ]);
        let error = FeatureNormaliser::new(&features(), &mapping, &wrong, 1e-8).unwrap_err();
        assert!(error.contains("[3]") && error.contains("[2]"), "{error}");
    }
}
