//! `meta/stats.json`: per feature, the minimum, maximum, mean, standard deviation and
//! count of its values, read for action bounds and written by exports.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The statistics of one feature, per entry (images: per channel, shaped `[3][1][1]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeatureStats {
    /// Smallest value.
    pub min: serde_json::Value,
    /// Largest value.
    pub max: serde_json::Value,
    /// Mean.
    pub mean: serde_json::Value,
    /// Standard deviation.
    pub std: serde_json::Value,
    /// Number of values.
    pub count: Vec<u64>,
}

/// `meta/stats.json`, by feature.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DatasetStats(pub BTreeMap<String, FeatureStats>);

impl DatasetStats {
    /// Per entry of `key`, the largest magnitude its values reach (`max(|min|, |max|)`),
    /// when the statistics give both as flat lists.
    pub fn bounds(&self, key: &str) -> Option<Vec<f32>> {
        let stats = self.0.get(key)?;
        let list = |v: &serde_json::Value| -> Option<Vec<f32>> {
            v.as_array()?
                .iter()
                .map(|x| x.as_f64().map(|x| x as f32))
                .collect()
        };
        let (min, max) = (list(&stats.min)?, list(&stats.max)?);
        (min.len() == max.len()).then(|| {
            min.iter()
                .zip(&max)
                .map(|(a, b)| a.abs().max(b.abs()))
                .collect()
        })
    }
}

/// Reads `meta/stats.json` of the dataset at `root`; `None` when there is none.
pub fn read_stats(root: &Path) -> anyhow::Result<Option<DatasetStats>> {
    let path = root.join("meta/stats.json");
    if !path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path)
        .map_err(|e| anyhow::anyhow!("{}: cannot read it ({e})", path.display()))?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| anyhow::anyhow!("{}: not LeRobot's stats.json ({e})", path.display()))
}

/// One vector feature's statistics per entry, as `f32`: what a LeRobot normaliser's
/// state file holds (`KEY.min`, `KEY.max`, `KEY.mean`, `KEY.std`).
#[derive(Debug, Clone, PartialEq)]
pub struct EntryStats {
    /// Smallest value.
    pub min: Vec<f32>,
    /// Largest value.
    pub max: Vec<f32>,
    /// Mean.
    pub mean: Vec<f32>,
    /// Standard deviation (population).
    pub std: Vec<f32>,
}

/// Running statistics of a vector feature.
#[derive(Debug, Clone)]
pub struct VectorStats {
    min: Vec<f64>,
    max: Vec<f64>,
    sum: Vec<f64>,
    sum_sq: Vec<f64>,
    count: u64,
}

impl VectorStats {
    /// Statistics of `dim` entries, before any value.
    pub fn new(dim: usize) -> Self {
        Self {
            min: vec![f64::INFINITY; dim],
            max: vec![f64::NEG_INFINITY; dim],
            sum: vec![0.0; dim],
            sum_sq: vec![0.0; dim],
            count: 0,
        }
    }

    /// Adds one value.
    pub fn add(&mut self, values: &[f32]) {
        for (i, &v) in values.iter().enumerate().take(self.sum.len()) {
            let v = v as f64;
            self.min[i] = self.min[i].min(v);
            self.max[i] = self.max[i].max(v);
            self.sum[i] += v;
            self.sum_sq[i] += v * v;
        }
        self.count += 1;
    }

    /// Entries per value.
    pub fn dim(&self) -> usize {
        self.sum.len()
    }

    /// Per entry, the mean and the (population) standard deviation so far.
    fn mean_and_std(&self) -> (Vec<f64>, Vec<f64>) {
        let n = self.count.max(1) as f64;
        let mean: Vec<f64> = self.sum.iter().map(|s| s / n).collect();
        let std = self
            .sum_sq
            .iter()
            .zip(&mean)
            .map(|(s, m)| (s / n - m * m).max(0.0).sqrt())
            .collect();
        (mean, std)
    }

    /// The statistics per entry as `f32`; `None` before any value.
    pub fn entries(&self) -> Option<EntryStats> {
        if self.count == 0 {
            return None;
        }
        let f32s = |values: &[f64]| values.iter().map(|&v| v as f32).collect();
        let (mean, std) = self.mean_and_std();
        Some(EntryStats {
            min: f32s(&self.min),
            max: f32s(&self.max),
            mean: f32s(&mean),
            std: f32s(&std),
        })
    }

    /// The statistics as LeRobot writes them; `shape` nests each entry (`[3, 1, 1]` for
    /// an image's channels, `[n]` for a vector).
    pub fn finish(&self, per_channel: bool) -> FeatureStats {
        let (mean, std) = self.mean_and_std();
        let shape = |values: &[f64]| -> serde_json::Value {
            if per_channel {
                values.iter().map(|v| serde_json::json!([[v]])).collect()
            } else {
                serde_json::json!(values)
            }
        };
        FeatureStats {
            min: shape(&self.min),
            max: shape(&self.max),
            mean: shape(&mean),
            std: shape(&std),
            count: vec![self.count],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_statistics_are_per_entry_over_the_values() {
        let mut stats = VectorStats::new(2);
        assert_eq!(stats.entries(), None);
        stats.add(&[1.0, -2.0]);
        stats.add(&[3.0, -2.0]);
        let s = stats.entries().unwrap();
        assert_eq!((s.min, s.max), (vec![1.0, -2.0], vec![3.0, -2.0]));
        assert_eq!((s.mean, s.std), (vec![2.0, -2.0], vec![1.0, 0.0]));
        assert_eq!(stats.dim(), 2);
    }
}
