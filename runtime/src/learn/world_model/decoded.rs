//! What a world model's predictions mean physically (issue 41's "evaluation that
//! cannot flatter"): a linear readout from latents to the robot's proprioception, the
//! error of the readout of predicted latents against what the robot really measured
//! beside copying the last measurement, and every error split by whether an object
//! the robot pushes moved.
//!
//! A latent error alone can flatter: a latent that collapses onto a few directions
//! has small errors relative to its own small spread. The readout is the model's own
//! state decoder where it has one, else a map fitted on the evaluated episodes' real
//! latents (a measuring instrument, not part of the model); its own error on real
//! latents, the floor, is reported beside it.
//! Copy-last here copies the *measured* proprioception, so a model only beats it by
//! knowing where things go next. A prediction is anchored to the last measurement:
//! the measured start plus the readout's change from the start latent to the
//! predicted one, so that the readout's own error at the start cancels and a model
//! that predicts no change in latent scores exactly copy-last (the robot measures
//! where it is; what a world model adds is where things go).

use nalgebra::{DMatrix, DVector};
use serde::{Deserialize, Serialize};

use super::ranking::{RankedWindow, SpearmanReport};
use crate::robot::RobotConfig;

/// Ridge strength of the readout, per sample, on standardised latents: enough to
/// keep a near-singular latent (one that collapsed onto few directions) solvable,
/// far below the signal of a used direction.
const RIDGE_PER_SAMPLE: f64 = 1e-3;

/// An object entry "moved" over a window when it changed by more than this fraction
/// of its standard deviation over the evaluated episodes (a resting body's solver
/// drift stays far below it).
const MOVED_FRACTION: f64 = 0.01;

/// The physical quantities a world model's latents are read out into: the entries of
/// the proprioception, and which of them give the pose of an object the robot moves
/// by contact (pusht's block in its pose setting), which split the errors into
/// windows where the object moved and where it stayed still.
#[derive(Debug, Clone, PartialEq)]
pub struct PhysicalQuantities {
    names: Vec<String>,
    object_entries: Vec<usize>,
}

impl PhysicalQuantities {
    /// The proprioception entries `names`, of which those named in `object_names`
    /// (when present) give an object's pose.
    pub fn new(names: Vec<String>, object_names: &[&str]) -> Self {
        let object_entries = names
            .iter()
            .enumerate()
            .filter(|(_, name)| object_names.contains(&name.as_str()))
            .map(|(i, _)| i)
            .collect();
        Self {
            names,
            object_entries,
        }
    }

    /// Entries named `proprio_0..` for a robot whose names are not known, none of
    /// them an object's.
    pub fn unnamed(proprio_dim: usize) -> Self {
        Self::new(
            (0..proprio_dim).map(|i| format!("proprio_{i}")).collect(),
            &[],
        )
    }

    /// The quantities of `robot` (its spec's names, its object's pose entries) when
    /// known, else unnamed entries of the model's `proprio_dim`.
    pub fn of_robot(robot: Option<&RobotConfig>, proprio_dim: usize) -> Self {
        match robot {
            Some(robot) => Self::new(robot.spec().proprio_names, robot.object_pose_entries()),
            None => Self::unnamed(proprio_dim),
        }
    }
}

/// How latents are read out into the proprioception.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReadoutKind {
    /// The model's own state decoder (`state_decoder`), trained on its predictions, or
    /// the state entries of a latent that holds the state (`state_in_latent`).
    ModelDecoder,
    /// A linear map fitted here on the evaluated episodes' real latents (models
    /// without a decoder).
    FittedLinear,
}

/// Errors of the readout of predicted latents, at every horizon `1..H`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecodedReport {
    /// What read the latents out.
    pub readout: ReadoutKind,
    /// The proprioception entries read out.
    pub names: Vec<String>,
    /// Mean over entries of the squared error divided by the entry's variance, at
    /// each horizon, of the prediction anchored to the last measurement (the
    /// measured value at the window's start plus the readout's change from the start
    /// latent to the predicted one) against the measured value.
    pub error: Vec<f64>,
    /// The same for copying the last measured value.
    pub copy_last_error: Vec<f64>,
    /// Root-mean-square error of each entry in its own units, `[horizon][entry]`.
    pub rmse: Vec<Vec<f64>>,
    /// Copy-last's root-mean-square error, `[horizon][entry]`.
    pub copy_last_rmse: Vec<Vec<f64>>,
    /// The readout's root-mean-square error on the real latents, per entry: what no
    /// prediction read out this way can go below.
    pub readout_floor_rmse: Vec<f64>,
    /// Does the members' disagreement about the state rank the state's error? Per
    /// window, the members' standard deviation of each read-out entry over the
    /// entry's standard deviation, averaged over entries, against the root of the
    /// normalised error (`error`'s measure, that window's). For a model with its own
    /// readout (the fitted one reads out only the ensemble's mean); absent in reports
    /// written before it.
    #[serde(default)]
    pub spearman: Option<SpearmanReport>,
}

/// Errors split by whether an object the robot pushes moved between a window's
/// start and the horizon (a window with contact, or one where copying the object's
/// last pose is exact).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContactSplitReport {
    /// The object's entries.
    pub entries: Vec<String>,
    /// Fraction of windows in which the object moved by each horizon.
    pub moved_share: Vec<f64>,
    /// Latent error (normalised as the report's `horizon_error`) where it moved.
    pub moved_error: Vec<f64>,
    /// Copy-last's latent error where it moved.
    pub moved_copy_last_error: Vec<f64>,
    /// Latent error where it stayed still.
    pub still_error: Vec<f64>,
    /// Copy-last's latent error where it stayed still.
    pub still_copy_last_error: Vec<f64>,
    /// Decoded error of the object's entries (mean of squared error over variance)
    /// where it moved; where it stayed still copy-last is exact for them.
    pub moved_decoded_error: Vec<f64>,
    /// Copy-last's decoded error of the object's entries where it moved.
    pub moved_decoded_copy_last_error: Vec<f64>,
    /// Decoded error of the object's entries where it stayed still: motion the model
    /// predicted without contact (copy-last's is below the "moved" threshold there).
    /// Absent in reports written before it.
    #[serde(default)]
    pub still_decoded_error: Vec<f64>,
}

/// What one evaluated episode leaves for the physical evaluation.
pub(super) struct EpisodeRecord {
    /// Target-encoder latents of steps `0..=len`, row-major `[len + 1, d]`.
    pub truth_latents: Vec<f32>,
    /// Measured proprioception of steps `0..=len`.
    pub proprio: Vec<Vec<f32>>,
    /// Ensemble-mean predicted latents, `[windows, horizon, d]`.
    pub predicted: Vec<f32>,
    /// Latent squared error summed over dimensions, model and copy-last,
    /// `[windows, horizon]`.
    pub model_sq: Vec<f64>,
    /// See `model_sq`.
    pub copy_sq: Vec<f64>,
    /// The members' standard deviation of each read-out entry, `[windows, horizon,
    /// p]`, for a model with its own readout; empty otherwise.
    pub state_spread: Vec<f32>,
}

/// An affine map from latents to the proprioception: fitted with a small ridge, or
/// the model's own state decoder.
pub(super) struct LinearReadout {
    mean: Vec<f64>,
    scale: Vec<f64>,
    /// `[d + 1, p]`: standardised latent (and a constant 1) to entries.
    weights: DMatrix<f64>,
}

impl LinearReadout {
    /// Least squares with a small ridge over the rows of `latents` (`[n, d]`) and
    /// `targets`.
    fn fit(latents: &[f32], targets: &[&[f32]], d: usize) -> anyhow::Result<Self> {
        let n = targets.len();
        anyhow::ensure!(
            n > d,
            "a readout of {d} latent dimensions needs more than {d} steps, got {n}"
        );
        let p = targets[0].len();
        let column = |j: usize| latents.iter().skip(j).step_by(d).map(|&v| v as f64);
        let mean: Vec<f64> = (0..d).map(|j| column(j).sum::<f64>() / n as f64).collect();
        let scale: Vec<f64> = (0..d)
            .map(|j| {
                let var = column(j).map(|v| (v - mean[j]).powi(2)).sum::<f64>() / n as f64;
                var.sqrt().max(1e-9)
            })
            .collect();
        let design = DMatrix::from_fn(n, d + 1, |i, j| {
            if j == d {
                1.0
            } else {
                (latents[i * d + j] as f64 - mean[j]) / scale[j]
            }
        });
        let target = DMatrix::from_fn(n, p, |i, k| targets[i][k] as f64);
        let mut gram = design.transpose() * &design;
        for j in 0..d {
            gram[(j, j)] += RIDGE_PER_SAMPLE * n as f64;
        }
        let weights = gram
            .cholesky()
            .ok_or_else(|| anyhow::anyhow!("the latents' readout is not solvable"))?
            .solve(&(design.transpose() * target));
        Ok(Self {
            mean,
            scale,
            weights,
        })
    }

    /// The model's own decoder: `weight` `[d, p]` row-major and `bias` `[p]`.
    pub(super) fn of_decoder(
        (weight, bias): (Vec<f32>, Vec<f32>),
        d: usize,
    ) -> anyhow::Result<Self> {
        let p = bias.len();
        anyhow::ensure!(
            weight.len() == d * p,
            "the state decoder has {} weights, not {d} x {p}",
            weight.len()
        );
        Ok(Self {
            mean: vec![0.0; d],
            scale: vec![1.0; d],
            weights: DMatrix::from_fn(d + 1, p, |j, k| {
                if j == d {
                    bias[k] as f64
                } else {
                    weight[j * p + k] as f64
                }
            }),
        })
    }

    /// The proprioception `latent` reads out to.
    pub(super) fn apply(&self, latent: &[f32]) -> Vec<f64> {
        let d = self.mean.len();
        let mut row = DVector::from_fn(d + 1, |j, _| {
            if j == d {
                1.0
            } else {
                (latent[j] as f64 - self.mean[j]) / self.scale[j]
            }
        });
        row = self.weights.transpose() * row;
        row.iter().copied().collect()
    }

    /// The state `predicted` reads out to, anchored to the measurement at its start:
    /// `measured + D(predicted) - D(start)`, given `start_readout = D(start)` (see the
    /// module documentation).
    pub(super) fn anchored(
        &self,
        measured: &[f32],
        start_readout: &[f64],
        predicted: &[f32],
    ) -> Vec<f64> {
        self.apply(predicted)
            .iter()
            .zip(start_readout)
            .zip(measured)
            .map(|((predicted, anchor), &measured)| measured as f64 + predicted - anchor)
            .collect()
    }
}

/// The decoded errors and, where the robot names an object, the contact split, of
/// the recorded episodes' windows at horizons `1..=horizon`, read out by the model's
/// `decoder` (weight and bias) when it has one, else by a linear map fitted on the
/// real latents; `None` when there is no decoder and too few steps to fit one (no
/// more than the latent's dimensions). `latent_variance` turns summed latent errors
/// into the report's normalised ones.
pub(super) fn physical_errors(
    records: &[EpisodeRecord],
    quantities: &PhysicalQuantities,
    decoder: Option<(Vec<f32>, Vec<f32>)>,
    (horizon, d): (usize, usize),
    latent_variance: f64,
) -> anyhow::Result<Option<(DecodedReport, Option<ContactSplitReport>)>> {
    let p = quantities.names.len();
    let rows: Vec<&[f32]> = records
        .iter()
        .flat_map(|r| r.proprio.iter().map(Vec::as_slice))
        .collect();
    anyhow::ensure!(
        rows.iter().all(|r| r.len() == p),
        "the proprioception has other entries than the robot names ({p})"
    );
    if decoder.is_none() && rows.len() <= d {
        return Ok(None);
    }
    let latents: Vec<f32> = records
        .iter()
        .flat_map(|r| r.truth_latents.iter().copied())
        .collect();
    let (readout, kind) = match decoder {
        Some(weights) => (
            LinearReadout::of_decoder(weights, d)?,
            ReadoutKind::ModelDecoder,
        ),
        None => (
            LinearReadout::fit(&latents, &rows, d)?,
            ReadoutKind::FittedLinear,
        ),
    };
    anyhow::ensure!(
        readout.weights.ncols() == p,
        "the state decoder reads out {} entries, the robot names {p}",
        readout.weights.ncols()
    );
    let count = rows.len() as f64;
    let entry_mean: Vec<f64> = (0..p)
        .map(|k| rows.iter().map(|r| r[k] as f64).sum::<f64>() / count)
        .collect();
    let variance: Vec<f64> = (0..p)
        .map(|k| {
            let v = rows
                .iter()
                .map(|r| (r[k] as f64 - entry_mean[k]).powi(2))
                .sum::<f64>()
                / count;
            v.max(1e-12)
        })
        .collect();
    let mut floor = vec![0.0; p];
    for (row, latent) in rows.iter().zip(latents.chunks(d)) {
        for (k, value) in readout.apply(latent).into_iter().enumerate() {
            floor[k] += (value - row[k] as f64).powi(2);
        }
    }

    let mut sums = PhysicalSums::new(horizon, p);
    for (index, record) in records.iter().enumerate() {
        sums.add(
            (index, record),
            &readout,
            quantities,
            &variance,
            (horizon, d),
        );
    }
    let normalised = |sq: &[f64], entries: &[usize], n: usize| {
        entries.iter().map(|&k| sq[k] / variance[k]).sum::<f64>()
            / (entries.len() * n.max(1)) as f64
    };
    let all: Vec<usize> = (0..p).collect();
    let objects = &quantities.object_entries;
    let rmse = |sq: &[f64], n: usize| -> Vec<f64> {
        sq.iter().map(|s| (s / n.max(1) as f64).sqrt()).collect()
    };
    let decoded = DecodedReport {
        readout: kind,
        names: quantities.names.clone(),
        error: (0..horizon)
            .map(|i| normalised(&sums.model[i], &all, sums.windows[i]))
            .collect(),
        copy_last_error: (0..horizon)
            .map(|i| normalised(&sums.copy[i], &all, sums.windows[i]))
            .collect(),
        rmse: (0..horizon)
            .map(|i| rmse(&sums.model[i], sums.windows[i]))
            .collect(),
        copy_last_rmse: (0..horizon)
            .map(|i| rmse(&sums.copy[i], sums.windows[i]))
            .collect(),
        readout_floor_rmse: rmse(&floor, rows.len()),
        spearman: (kind == ReadoutKind::ModelDecoder && !sums.ranked[0].is_empty())
            .then(|| SpearmanReport::of(&sums.ranked, records.len())),
    };
    let latent = |sq: &[f64], n: &[usize]| -> Vec<f64> {
        sq.iter()
            .zip(n)
            .map(|(s, &n)| s / (n.max(1) * d) as f64 / latent_variance)
            .collect()
    };
    let still = sums.still();
    let contact = (!objects.is_empty()).then(|| ContactSplitReport {
        entries: objects
            .iter()
            .map(|&k| quantities.names[k].clone())
            .collect(),
        moved_share: (0..horizon)
            .map(|i| sums.moved[i] as f64 / sums.windows[i].max(1) as f64)
            .collect(),
        moved_error: latent(&sums.moved_latent, &sums.moved),
        moved_copy_last_error: latent(&sums.moved_latent_copy, &sums.moved),
        still_error: latent(&sums.still_latent, &still),
        still_copy_last_error: latent(&sums.still_latent_copy, &still),
        moved_decoded_error: (0..horizon)
            .map(|i| normalised(&sums.moved_model[i], objects, sums.moved[i]))
            .collect(),
        moved_decoded_copy_last_error: (0..horizon)
            .map(|i| normalised(&sums.moved_copy[i], objects, sums.moved[i]))
            .collect(),
        still_decoded_error: (0..horizon)
            .map(|i| normalised(&sums.still_model[i], objects, still[i]))
            .collect(),
    });
    Ok(Some((decoded, contact)))
}

/// Squared-error sums per horizon (and per entry where decoded), over all windows
/// and over those whose object moved or stayed still.
struct PhysicalSums {
    windows: Vec<usize>,
    model: Vec<Vec<f64>>,
    copy: Vec<Vec<f64>>,
    moved: Vec<usize>,
    moved_model: Vec<Vec<f64>>,
    moved_copy: Vec<Vec<f64>>,
    still_model: Vec<Vec<f64>>,
    moved_latent: Vec<f64>,
    moved_latent_copy: Vec<f64>,
    still_latent: Vec<f64>,
    still_latent_copy: Vec<f64>,
    /// Per horizon: (episode, state disagreement, state error) of every window of a
    /// record with its members' spread.
    ranked: Vec<Vec<RankedWindow>>,
}

impl PhysicalSums {
    fn new(horizon: usize, p: usize) -> Self {
        let per_entry = || vec![vec![0.0; p]; horizon];
        Self {
            windows: vec![0; horizon],
            model: per_entry(),
            copy: per_entry(),
            moved: vec![0; horizon],
            moved_model: per_entry(),
            moved_copy: per_entry(),
            still_model: per_entry(),
            moved_latent: vec![0.0; horizon],
            moved_latent_copy: vec![0.0; horizon],
            still_latent: vec![0.0; horizon],
            still_latent_copy: vec![0.0; horizon],
            ranked: vec![Vec::new(); horizon],
        }
    }

    fn still(&self) -> Vec<usize> {
        self.windows
            .iter()
            .zip(&self.moved)
            .map(|(w, m)| w - m)
            .collect()
    }

    fn add(
        &mut self,
        (index, record): (usize, &EpisodeRecord),
        readout: &LinearReadout,
        quantities: &PhysicalQuantities,
        variance: &[f64],
        (horizon, d): (usize, usize),
    ) {
        let windows = record.model_sq.len() / horizon;
        for w in 0..windows {
            let start = &record.proprio[w];
            let start_readout = readout.apply(&record.truth_latents[w * d..(w + 1) * d]);
            let mut moved = false;
            for i in 0..horizon {
                let truth = &record.proprio[w + i + 1];
                let at = (w * horizon + i) * d;
                let decoded =
                    readout.anchored(start, &start_readout, &record.predicted[at..at + d]);
                moved = moved
                    || quantities.object_entries.iter().any(|&k| {
                        (truth[k] - start[k]).abs() as f64 > MOVED_FRACTION * variance[k].sqrt()
                    });
                self.windows[i] += 1;
                let (latent, latent_copy) = (
                    record.model_sq[w * horizon + i],
                    record.copy_sq[w * horizon + i],
                );
                if moved {
                    self.moved[i] += 1;
                    self.moved_latent[i] += latent;
                    self.moved_latent_copy[i] += latent_copy;
                } else {
                    self.still_latent[i] += latent;
                    self.still_latent_copy[i] += latent_copy;
                }
                let p = decoded.len();
                let mut normalised_sq = 0.0;
                for (k, value) in decoded.into_iter().enumerate() {
                    let model_sq = (value - truth[k] as f64).powi(2);
                    let copy_sq = ((start[k] - truth[k]) as f64).powi(2);
                    normalised_sq += model_sq / variance[k];
                    self.model[i][k] += model_sq;
                    self.copy[i][k] += copy_sq;
                    if moved {
                        self.moved_model[i][k] += model_sq;
                        self.moved_copy[i][k] += copy_sq;
                    } else {
                        self.still_model[i][k] += model_sq;
                    }
                }
                let spread_at = (w * horizon + i) * p;
                if let Some(spread) = record.state_spread.get(spread_at..spread_at + p) {
                    let disagreement = spread
                        .iter()
                        .zip(variance)
                        .map(|(&s, v)| s as f64 / v.sqrt())
                        .sum::<f64>()
                        / p as f64;
                    let error = (normalised_sq / p as f64).sqrt();
                    self.ranked[i].push((index, disagreement, error));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Latents that are an affine image of a two-entry proprioception, and a
    /// prediction that is exact for one episode's second half.
    fn record(proprio: Vec<Vec<f32>>, predicted_offset: f32, horizon: usize) -> EpisodeRecord {
        let d = 3;
        let encode = |p: &[f32]| vec![2.0 * p[0] + 1.0, -p[1], p[0] - p[1]];
        let truth_latents: Vec<f32> = proprio.iter().flat_map(|p| encode(p)).collect();
        let windows = proprio.len() - horizon;
        let mut predicted = Vec::new();
        let (mut model_sq, mut copy_sq) = (Vec::new(), Vec::new());
        for w in 0..windows {
            for i in 0..horizon {
                let truth = encode(&proprio[w + i + 1]);
                let guess: Vec<f32> = truth.iter().map(|v| v + predicted_offset).collect();
                model_sq.push(d as f64 * (predicted_offset as f64).powi(2));
                let last = encode(&proprio[w]);
                copy_sq.push(
                    last.iter()
                        .zip(&truth)
                        .map(|(a, b)| ((a - b) as f64).powi(2))
                        .sum(),
                );
                predicted.extend(guess);
            }
        }
        EpisodeRecord {
            truth_latents,
            proprio,
            predicted,
            model_sq,
            copy_sq,
            state_spread: Vec::new(),
        }
    }

    #[test]
    fn an_exact_model_reads_out_exactly_and_copy_last_pays_for_the_motion() {
        let horizon = 3;
        // The pusher (entry 0) moves every step; the object (entry 1) moves only in
        // the first half of the episode.
        let proprio: Vec<Vec<f32>> = (0..40)
            .map(|t| vec![t as f32 * 0.1, (t.min(20) as f32 * 0.05).sin()])
            .collect();
        let quantities = PhysicalQuantities::new(
            vec!["pusher".into(), "object".into()],
            &["object", "absent"],
        );
        let records = [record(proprio.clone(), 0.0, horizon)];
        let (decoded, contact) = physical_errors(&records, &quantities, None, (horizon, 3), 1.0)
            .unwrap()
            .unwrap();
        for i in 0..horizon {
            // The ridge shrinks the readout by about a thousandth.
            assert!(decoded.error[i] < 1e-4, "{:?}", decoded.error);
            assert!(
                decoded.copy_last_error[i] > 1e-3,
                "{:?}",
                decoded.copy_last_error
            );
            // The pusher moves 0.1 a step: copy-last errs by exactly that times i + 1.
            let expected = 0.1 * (i + 1) as f64;
            assert!((decoded.copy_last_rmse[i][0] - expected).abs() < 1e-5);
        }
        assert!(
            decoded.readout_floor_rmse.iter().all(|&e| e < 1e-2),
            "{:?}",
            decoded.readout_floor_rmse
        );
        let contact = contact.expect("an object is named");
        assert_eq!(contact.entries, ["object"]);
        // 37 windows; those starting at step 20 or later see a still object.
        assert!(
            (contact.moved_share[0] - 20.0 / 37.0).abs() < 1e-9,
            "{:?}",
            contact.moved_share
        );
        assert!(contact.still_error.iter().all(|&e| e == 0.0));
        assert!(contact.moved_decoded_error.iter().all(|&e| e < 1e-4));
        assert!(
            contact
                .moved_decoded_copy_last_error
                .iter()
                .all(|&e| e > 1e-3)
        );
        assert!(contact.still_decoded_error.iter().all(|&e| e < 1e-4));
        // A model off by a constant in latent units moves the still object too.
        let offset = [record(proprio, 0.5, horizon)];
        let (_, contact) = physical_errors(&offset, &quantities, None, (horizon, 3), 1.0)
            .unwrap()
            .unwrap();
        let contact = contact.expect("an object is named");
        assert!(
            contact.still_decoded_error.iter().all(|&e| e > 1e-3),
            "{:?}",
            contact.still_decoded_error
        );
    }

    #[test]
    fn a_model_off_by_a_constant_errs_in_decoded_units_and_without_an_object_there_is_no_split() {
        let horizon = 2;
        let proprio: Vec<Vec<f32>> = (0..30)
            .map(|t| vec![(t as f32 * 0.3).cos(), (t as f32 * 0.2).sin()])
            .collect();
        let quantities = PhysicalQuantities::unnamed(2);
        let records = [record(proprio, 0.5, horizon)];
        let (decoded, contact) = physical_errors(&records, &quantities, None, (horizon, 3), 1.0)
            .unwrap()
            .unwrap();
        assert!(contact.is_none());
        assert_eq!(decoded.names, ["proprio_0", "proprio_1"]);
        assert!(
            decoded.error.iter().all(|&e| e > 0.01),
            "{:?}",
            decoded.error
        );
    }

    /// A ramp and a cosine over `steps` steps: a two-entry proprioception.
    fn ramp_and_cosine(steps: usize) -> Vec<Vec<f32>> {
        (0..steps)
            .map(|t| vec![t as f32 * 0.1, (t as f32 * 0.4).cos()])
            .collect()
    }

    /// The inverse of the test encoding as a decoder's weight and bias: p0 = (z0 - 1)
    /// / 2, p1 = -z1.
    fn inverse_decoder() -> (Vec<f32>, Vec<f32>) {
        (vec![0.5, 0.0, 0.0, -1.0, 0.0, 0.0], vec![-0.5, 0.0])
    }

    #[test]
    fn the_models_own_decoder_reads_out_when_it_has_one() {
        let horizon = 2;
        let records = [record(ramp_and_cosine(20), 0.0, horizon)];
        let decoder = inverse_decoder();
        let quantities = PhysicalQuantities::unnamed(2);
        let (decoded, _) = physical_errors(&records, &quantities, Some(decoder), (horizon, 3), 1.0)
            .unwrap()
            .unwrap();
        assert_eq!(decoded.readout, ReadoutKind::ModelDecoder);
        assert!(decoded.readout_floor_rmse.iter().all(|&e| e < 1e-6));
        assert!(
            decoded.error.iter().all(|&e| e < 1e-10),
            "{:?}",
            decoded.error
        );
        // A decoder of the wrong width is an error, not a panic.
        let wrong = (vec![0.0; 9], vec![0.0; 3]);
        let err = physical_errors(&records, &quantities, Some(wrong), (horizon, 3), 1.0)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("reads out 3 entries, the robot names 2"),
            "{err}"
        );
    }

    #[test]
    fn the_members_spread_of_the_state_is_ranked_against_the_states_error() {
        let horizon = 2;
        let proprio = ramp_and_cosine(24);
        let decoder = inverse_decoder();
        let quantities = PhysicalQuantities::unnamed(2);
        // Each window's prediction is off by its own amount, in scrambled order.
        let exact = record(proprio.clone(), 0.0, horizon);
        let windows = exact.predicted.len() / (horizon * 3);
        let off = |w: usize| ((w * 7) % windows) as f32 * 0.05;
        let with_spread = |spread: &dyn Fn(usize) -> f32| {
            let mut r = record(proprio.clone(), 0.0, horizon);
            for (i, v) in r.predicted.iter_mut().enumerate() {
                *v += off(i / (horizon * 3));
            }
            r.state_spread = (0..windows * horizon * 2)
                .map(|i| spread(i / (horizon * 2)))
                .collect();
            r
        };
        let ranked = |spread: &dyn Fn(usize) -> f32| {
            let records = [with_spread(spread)];
            let (decoded, _) = physical_errors(
                &records,
                &quantities,
                Some(decoder.clone()),
                (horizon, 3),
                1.0,
            )
            .unwrap()
            .unwrap();
            decoded.spearman.expect("the model's own readout")
        };
        let following = ranked(&|w| off(w) + 0.01);
        assert_eq!(following.within_trajectory, Some(1.0));
        assert_eq!(following.per_horizon, [Some(1.0), Some(1.0)]);
        let against = ranked(&|w| 1.0 - off(w));
        assert_eq!(against.within_trajectory, Some(-1.0));
        // A readout fitted on the episodes reads out no member, so ranks nothing.
        let records = [with_spread(&|w| off(w))];
        let (fitted, _) = physical_errors(&records, &quantities, None, (horizon, 3), 1.0)
            .unwrap()
            .unwrap();
        assert_eq!(fitted.readout, ReadoutKind::FittedLinear);
        assert!(fitted.spearman.is_none());
    }

    #[test]
    fn too_few_steps_for_a_fitted_readout_measure_nothing_and_fail_nothing() {
        let proprio: Vec<Vec<f32>> = (0..3).map(|t| vec![t as f32, 0.0]).collect();
        let records = [record(proprio, 0.0, 1)];
        let measured =
            physical_errors(&records, &PhysicalQuantities::unnamed(2), None, (1, 3), 1.0).unwrap();
        assert!(measured.is_none());
        // The fit itself says why.
        let rows: Vec<&[f32]> = records[0].proprio.iter().map(Vec::as_slice).collect();
        let err = LinearReadout::fit(&records[0].truth_latents, &rows, 3)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("needs more than 3 steps"), "{err}");
    }
}
