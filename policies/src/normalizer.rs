//! Per-feature statistics of a dataset (mean, standard deviation, minimum, maximum),
//! computed once from the training data and stored in the policy's config, so that a
//! checkpoint carries the scaling its weights were trained with (as LeRobot's
//! policies carry their dataset stats).

use burn::prelude::*;
use imago_robots::bounds::ConfigError;
use serde::{Deserialize, Serialize};

/// Standard deviations below this are treated as this (a constant feature would
/// otherwise divide by zero).
pub const MIN_STD: f32 = 1e-3;

/// How a feature is scaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NormalizationMode {
    /// `(x - mean) / std`.
    #[default]
    MeanStd,
    /// `2 (x - min) / (max - min) - 1`: the data's range to [-1, 1].
    MinMax,
}

/// Statistics of each feature of a vector, and how the vector is scaled by them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Normalizer {
    /// How the features are scaled.
    pub mode: NormalizationMode,
    /// Per feature, the mean.
    pub mean: Vec<f32>,
    /// Per feature, the standard deviation (population).
    pub std: Vec<f32>,
    /// Per feature, the smallest value seen.
    pub min: Vec<f32>,
    /// Per feature, the largest value seen.
    pub max: Vec<f32>,
}

impl Normalizer {
    /// The statistics of `rows` (each a vector of the same length), scaled by `mode`;
    /// `None` without rows or with rows of different lengths.
    pub fn of_rows<'a>(
        rows: impl IntoIterator<Item = &'a [f32]>,
        mode: NormalizationMode,
    ) -> Option<Self> {
        let mut rows = rows.into_iter().peekable();
        let width = rows.peek()?.len();
        let (mut sum, mut square) = (vec![0.0f64; width], vec![0.0f64; width]);
        let (mut min, mut max) = (vec![f32::INFINITY; width], vec![f32::NEG_INFINITY; width]);
        let mut count = 0usize;
        for row in rows {
            if row.len() != width {
                return None;
            }
            for (i, &v) in row.iter().enumerate() {
                sum[i] += v as f64;
                square[i] += (v as f64) * (v as f64);
                min[i] = min[i].min(v);
                max[i] = max[i].max(v);
            }
            count += 1;
        }
        let n = count as f64;
        let mean: Vec<f32> = sum.iter().map(|s| (s / n) as f32).collect();
        let std = square
            .iter()
            .zip(&sum)
            .map(|(q, s)| ((q / n - (s / n).powi(2)).max(0.0)).sqrt() as f32)
            .collect();
        Some(Self {
            mode,
            mean,
            std,
            min,
            max,
        })
    }

    /// Number of features.
    pub fn len(&self) -> usize {
        self.mean.len()
    }

    /// Whether there are no features.
    pub fn is_empty(&self) -> bool {
        self.mean.is_empty()
    }

    /// Per feature, `(scale, shift)` with `normalised = x * scale + shift`.
    pub fn affine(&self) -> (Vec<f32>, Vec<f32>) {
        match self.mode {
            NormalizationMode::MeanStd => self
                .mean
                .iter()
                .zip(&self.std)
                .map(|(&m, &s)| {
                    let scale = 1.0 / s.max(MIN_STD);
                    (scale, -m * scale)
                })
                .unzip(),
            NormalizationMode::MinMax => self
                .min
                .iter()
                .zip(&self.max)
                .map(|(&lo, &hi)| {
                    let scale = 2.0 / (hi - lo).max(MIN_STD);
                    (scale, -lo * scale - 1.0)
                })
                .unzip(),
        }
    }

    /// `x` `[batch, features]` scaled feature by feature.
    pub fn normalise<B: Backend>(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let (device, dtype, width) = (x.device(), x.dtype(), self.len());
        let (scale, shift) = self.affine();
        let row = |values: Vec<f32>| {
            Tensor::<B, 2>::from_data(TensorData::new(values, [1, width]), (&device, dtype))
        };
        x * row(scale) + row(shift)
    }

    /// Checks that the statistics describe `features` features with finite values and
    /// ordered ranges; the error names `key`.
    pub fn validate(&self, key: &str, features: usize) -> Result<(), ConfigError> {
        let lengths = [
            self.mean.len(),
            self.std.len(),
            self.min.len(),
            self.max.len(),
        ];
        if lengths.iter().any(|&l| l != features) {
            return Err(ConfigError::new(
                key,
                format!("{lengths:?}"),
                format!("needs mean, std, min and max of {features} features each"),
            ));
        }
        let values = self
            .mean
            .iter()
            .chain(&self.std)
            .chain(&self.min)
            .chain(&self.max);
        if let Some(v) = values.clone().find(|v| !v.is_finite()) {
            return Err(ConfigError::new(key, v, "statistics must be finite"));
        }
        if self.std.iter().any(|&s| s < 0.0) || self.min.iter().zip(&self.max).any(|(a, b)| a > b) {
            return Err(ConfigError::new(
                key,
                "std < 0 or min > max",
                "needs std >= 0 and min <= max for every feature",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;

    use super::*;

    #[test]
    fn statistics_and_scaling_by_hand() {
        let rows: [&[f32]; 4] = [&[1.0, 10.0], &[3.0, 10.0], &[5.0, 10.0], &[7.0, 10.0]];
        let n = Normalizer::of_rows(rows, NormalizationMode::MeanStd).unwrap();
        // Feature 0: mean 4, population std sqrt(5); feature 1 is constant.
        assert_eq!(n.mean, vec![4.0, 10.0]);
        assert!((n.std[0] - 5f32.sqrt()).abs() < 1e-6 && n.std[1] == 0.0);
        assert_eq!(
            (n.min.clone(), n.max.clone()),
            (vec![1.0, 10.0], vec![7.0, 10.0])
        );
        assert_eq!(n.validate("state", 2), Ok(()));
        assert!(n.validate("state", 3).is_err());

        let device = Default::default();
        let x = Tensor::<Flex, 2>::from_data([[7.0f32, 10.0]], &device);
        let scaled: Vec<f32> = n.normalise(x.clone()).into_data().to_vec().unwrap();
        assert!((scaled[0] - 3.0 / 5f32.sqrt()).abs() < 1e-5, "{scaled:?}");
        assert_eq!(
            scaled[1], 0.0,
            "a constant feature is centred, not blown up"
        );

        let range = Normalizer {
            mode: NormalizationMode::MinMax,
            ..n
        };
        let scaled: Vec<f32> = range.normalise(x).into_data().to_vec().unwrap();
        assert!(
            (scaled[0] - 1.0).abs() < 1e-6,
            "the largest value maps to 1: {scaled:?}"
        );
        assert!(
            Normalizer::of_rows([&[1.0f32][..], &[1.0, 2.0]], NormalizationMode::MinMax).is_none()
        );
    }
}
