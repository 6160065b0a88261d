//! Planning by sampling: the cross-entropy method over action sequences with an
//! MPPI-style choice at the end (as TD-MPC2 plans), started from the policy's own
//! chunk distribution.
//!
//! Each start state begins with a Gaussian over its next `H` actions (the policy's
//! chunk: its mean and spread). Every iteration draws `candidates` sequences from it,
//! the first being its mean, has them all scored at once (one batched call, so a world
//! model imagines every start state's candidates together), keeps the `elites` best,
//! and refits the Gaussian to them. The plan is one elite of the last iteration drawn
//! with weights `exp((score - best) / temperature)`: a draw rather
//! than the weighted mean, because the mean of two ways round the block is neither
//! (on pusht the policy's mean chunk stalls where its samples succeed). Where the
//! scores cannot tell the candidates apart (all equal), the draw is uniform over
//! samples of the policy: planning then acts as the sampling policy does.
//!
//! The algorithm knows nothing of world models: [`plan_sequences`] takes any scoring
//! function, so tests hold it to toy problems with known optima, and
//! [`ImaginedReturn`] scores sequences by imagination in a [`HostWorldModel`].

use imago_robots::bounds::{ConfigError, in_range};
use rand::{Rng, RngExt};
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

use crate::host::{HostPlan, HostWorldModel};
use crate::imagine::ImaginationConfig;

/// Settings of [`plan_sequences`] and of the imagined return it maximises.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlannerConfig {
    /// Sequences scored per start state and iteration (the first is the current
    /// mean). Range: [2, 4096].
    pub candidates: usize,
    /// Rounds of sampling, scoring and refitting. Range: [1, 16].
    pub iterations: usize,
    /// Best candidates the sampling distribution is refitted to (alike), and the plan
    /// drawn from; more than `candidates` means all of them. Range: [1, 4096].
    pub elites: usize,
    /// Scale of score differences in the last iteration's elites' chances to be the
    /// plan, `exp((score - best) / temperature)`: small picks the best alone, large
    /// any elite alike.
    /// Range: [1e-6, 1e6].
    pub temperature: f32,
    /// Least standard deviation of the refitted distribution, in units of the action
    /// limit (keeps later iterations exploring). Range: [0, 2].
    pub min_std: f32,
    /// Discount of imagined rewards per step. Range: [0, 1].
    pub discount: f32,
    /// Coefficient of the ensemble's disagreement subtracted from every imagined
    /// reward (distrust where the members part). Range: [0, 1000].
    pub uncertainty_penalty: f32,
    /// Weight of the world model's value of the last imagined latent, added
    /// discounted to the return (TD-MPC2's terminal value: what follows the horizon).
    /// Range: [0, 1000].
    pub terminal_value: f32,
}

impl Default for PlannerConfig {
    fn default() -> Self {
        // Measured on pusht (docs/worldmodel.md, "Planning"): one round, every
        // candidate an elite, weights at the scale of the imagined returns' spread.
        // Sharper choices and refitted rounds cost success there.
        Self {
            candidates: 32,
            iterations: 1,
            elites: 32,
            temperature: 1.0,
            min_std: 0.02,
            discount: 0.95,
            uncertainty_penalty: 0.0,
            terminal_value: 0.0,
        }
    }
}

impl PlannerConfig {
    /// Checks every value against its documented range; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range("candidates", self.candidates, 2..=4096)?;
        in_range("iterations", self.iterations, 1..=16)?;
        in_range("elites", self.elites, 1..=4096)?;
        in_range("temperature", self.temperature, 1e-6..=1e6)?;
        in_range("min_std", self.min_std, 0.0..=2.0)?;
        in_range("discount", self.discount, 0.0..=1.0)?;
        in_range(
            "uncertainty_penalty",
            self.uncertainty_penalty,
            0.0..=1000.0,
        )?;
        in_range("terminal_value", self.terminal_value, 0.0..=1000.0)
    }
}

/// A Gaussian over one start state's action sequence, `[H * A]` row-major, in units
/// of the action limit (samples are clamped to `[-1, 1]`).
#[derive(Debug, Clone, PartialEq)]
pub struct SequenceDistribution {
    /// Means.
    pub mean: Vec<f32>,
    /// Standard deviations, one per entry of `mean`.
    pub std: Vec<f32>,
}

/// What [`plan_sequences`] chose for one start state.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedSequence {
    /// The chosen sequence, `[H * A]`, in units of the action limit.
    pub actions: Vec<f32>,
    /// Its score.
    pub score: f32,
}

/// Plans every start state's sequence from `proposals` (one distribution per start
/// state, all of one length): CEM rounds, then MPPI's draw among the last round's
/// elites (the module documentation). `score` receives the candidates of all start
/// states at once, `[S * N * H * A]` with start state `s`'s `N` candidates in rows
/// `s * N .. (s + 1) * N`, and returns one score per row (higher is better). Start state
/// `s` draws its noise from `rngs[s]`, so a plan depends on its own seed alone.
///
/// # Panics
/// If the proposals differ in length, `rngs` is not one per proposal, or `score`
/// returns another number of scores than rows.
pub fn plan_sequences<R: Rng>(
    config: &PlannerConfig,
    proposals: &[SequenceDistribution],
    rngs: &mut [R],
    mut score: impl FnMut(&[f32]) -> Vec<f32>,
) -> Vec<PlannedSequence> {
    assert_eq!(proposals.len(), rngs.len(), "one generator per start state");
    let Some(first) = proposals.first() else {
        return Vec::new();
    };
    let width = first.mean.len();
    assert!(
        proposals
            .iter()
            .all(|p| p.mean.len() == width && p.std.len() == width),
        "proposals of one length"
    );
    let n = config.candidates;
    let elites = config.elites.min(n);
    let mut current: Vec<SequenceDistribution> = proposals.to_vec();
    let mut chosen = Vec::new();
    for iteration in 0..config.iterations {
        let candidates: Vec<f32> = current
            .iter()
            .zip(rngs.iter_mut())
            .flat_map(|(distribution, rng)| draw(distribution, n, rng))
            .collect();
        let scores = score(&candidates);
        assert_eq!(scores.len(), proposals.len() * n, "one score per candidate");
        let last = iteration + 1 == config.iterations;
        for (s, distribution) in current.iter_mut().enumerate() {
            let rows = &candidates[s * n * width..(s + 1) * n * width];
            let best = best_rows(&scores[s * n..(s + 1) * n], elites, &mut rngs[s]);
            if last {
                let weights = softmax_weights(&best, config.temperature);
                let pick = draw_index(&weights, &mut rngs[s]);
                let (row, score) = best[pick];
                chosen.push(PlannedSequence {
                    actions: rows[row * width..(row + 1) * width].to_vec(),
                    score,
                });
            } else {
                *distribution = refit(rows, width, &best, config.min_std);
            }
        }
    }
    chosen
}

/// `n` sequences from `distribution`: its mean, then samples clamped to `[-1, 1]`.
fn draw(distribution: &SequenceDistribution, n: usize, rng: &mut impl Rng) -> Vec<f32> {
    let mut out = Vec::with_capacity(n * distribution.mean.len());
    out.extend(distribution.mean.iter().map(|m| m.clamp(-1.0, 1.0)));
    for _ in 1..n {
        out.extend(
            distribution
                .mean
                .iter()
                .zip(&distribution.std)
                .map(|(m, s)| {
                    let z: f32 = StandardNormal.sample(rng);
                    (m + s * z).clamp(-1.0, 1.0)
                }),
        );
    }
    out
}

/// The `k` best `(row, score)` pairs, best first; NaN scores rank last, and equal
/// scores in random order (so that where no score tells candidates apart, the mean in
/// row 0 is not preferred over the samples).
fn best_rows(scores: &[f32], k: usize, rng: &mut impl Rng) -> Vec<(usize, f32)> {
    let mut ranked: Vec<(u32, usize, f32)> = scores
        .iter()
        .map(|&s| if s.is_nan() { f32::NEG_INFINITY } else { s })
        .enumerate()
        .map(|(row, score)| (rng.random(), row, score))
        .collect();
    ranked.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
    ranked.truncate(k);
    ranked
        .into_iter()
        .map(|(_, row, score)| (row, score))
        .collect()
}

/// `exp((score - best) / temperature)` of each of `best` (best first), normalised.
fn softmax_weights(best: &[(usize, f32)], temperature: f32) -> Vec<f32> {
    let top = best[0].1;
    let raw: Vec<f32> = best
        .iter()
        .map(|&(_, s)| {
            let w = ((s - top) / temperature).exp();
            if w.is_finite() { w } else { 0.0 }
        })
        .collect();
    let total: f32 = raw.iter().sum();
    if total > 0.0 {
        raw.iter().map(|w| w / total).collect()
    } else {
        // Every score was -inf: no ranking, all alike.
        vec![1.0 / best.len() as f32; best.len()]
    }
}

/// An index drawn with probabilities `weights` (which sum to 1).
fn draw_index(weights: &[f32], rng: &mut impl Rng) -> usize {
    let u: f32 = rng.random();
    let mut total = 0.0;
    for (i, w) in weights.iter().enumerate() {
        total += w;
        if u < total {
            return i;
        }
    }
    weights.len() - 1
}

/// The Gaussian of the elites among `rows` (`[N * width]`), weighed alike (CEM's
/// refit: weighing them by score collapsed the spread onto the single best sample
/// after one round, and the toy problem's optimum was then out of reach), its
/// deviations at least `min_std`.
fn refit(rows: &[f32], width: usize, best: &[(usize, f32)], min_std: f32) -> SequenceDistribution {
    let w = 1.0 / best.len() as f32;
    let mut mean = vec![0.0f32; width];
    for &(row, _) in best {
        for (m, x) in mean.iter_mut().zip(&rows[row * width..(row + 1) * width]) {
            *m += w * x;
        }
    }
    let mut variance = vec![0.0f32; width];
    for &(row, _) in best {
        for ((v, x), m) in variance
            .iter_mut()
            .zip(&rows[row * width..(row + 1) * width])
            .zip(&mean)
        {
            *v += w * (x - m) * (x - m);
        }
    }
    SequenceDistribution {
        mean,
        std: variance.iter().map(|v| v.sqrt().max(min_std)).collect(),
    }
}

/// Where an imagined step's reward comes from.
#[derive(Clone, Copy)]
pub enum PlanReward<'a> {
    /// The world model's reward head.
    RewardHead,
    /// A function of the measured state, applied to the state decoded from each
    /// imagined latent and anchored to the last measurement (`s_0 + D(z_t) - D(z_0)`,
    /// so that the decoder's offset at the start state does not count as progress).
    DecodedState(&'a (dyn Fn(&[f32]) -> f32 + Sync)),
}

/// Scores action sequences by the discounted return imagined for them in a world
/// model: `sum_t discount^t (r_t - uncertainty_penalty * disagreement_t)` over the
/// sequence's `H` steps, plus `terminal_value * discount^H * V(z_H)`, each start
/// state's candidates from its own latent.
pub struct ImaginedReturn<'a> {
    /// The model, on the host.
    pub model: &'a HostWorldModel,
    /// Each start state's latent, `[S * D]`.
    pub starts: &'a [f32],
    /// Each start state's measured proprioception, `[S * P]` (used by
    /// [`PlanReward::DecodedState`]).
    pub measured: &'a [f32],
    /// Where rewards come from.
    pub reward: PlanReward<'a>,
    /// Steps of every sequence (`H`).
    pub horizon: usize,
    /// Discount and uncertainty penalty (`PlannerConfig`'s).
    pub discount: f32,
    /// Coefficient of the disagreement.
    pub uncertainty_penalty: f32,
    /// Weight of the last latent's value.
    pub terminal_value: f32,
}

impl ImaginedReturn<'_> {
    /// Scores of `candidates` (`[S * N * H * A]`, as [`plan_sequences`] hands them
    /// over, `H` = [`Self::horizon`]), one per row. A decoded-state reward on a model without a state decoder
    /// scores nothing: `None`.
    pub fn score(&self, candidates: &[f32]) -> Option<Vec<f32>> {
        let (d, a, horizon) = (
            self.model.latent_dim(),
            self.model.action_dim(),
            self.horizon,
        );
        let starts = self.starts.len() / d;
        let n = candidates.len() / (starts * horizon * a).max(1);
        let start_rows: Vec<f32> = (0..starts)
            .flat_map(|s| {
                let latent = &self.starts[s * d..(s + 1) * d];
                std::iter::repeat_n(latent, n).flatten().copied()
            })
            .collect();
        let imagined = self.model.imagine(
            &start_rows,
            HostPlan::Actions(candidates),
            &ImaginationConfig {
                horizon,
                uncertainty_penalty: 0.0,
            },
        );
        let batch = starts * n;
        let rewards: Vec<f32> = match self.reward {
            PlanReward::RewardHead => imagined.raw_rewards.clone(),
            PlanReward::DecodedState(reward) => {
                let decoded = self.model.decode_states(&imagined.latents)?;
                let p = decoded.len() / (batch * (horizon + 1));
                let mut rewards = Vec::with_capacity(batch * horizon);
                let mut state = vec![0.0f32; p];
                for row in 0..batch {
                    let measured = &self.measured[(row / n) * p..][..p];
                    let at = |t: usize| &decoded[(row * (horizon + 1) + t) * p..][..p];
                    for t in 1..=horizon {
                        for (i, s) in state.iter_mut().enumerate() {
                            *s = measured[i] + at(t)[i] - at(0)[i];
                        }
                        rewards.push(reward(&state));
                    }
                }
                rewards
            }
        };
        Some(
            (0..batch)
                .map(|row| {
                    let rewards: f32 = (0..horizon)
                        .map(|t| {
                            let i = row * horizon + t;
                            self.discount.powi(t as i32)
                                * (rewards[i] - self.uncertainty_penalty * imagined.disagreement[i])
                        })
                        .sum();
                    let last = imagined.values[row * (horizon + 1) + horizon];
                    rewards + self.terminal_value * self.discount.powi(horizon as i32) * last
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    fn proposal(mean: f32, std: f32, width: usize) -> SequenceDistribution {
        SequenceDistribution {
            mean: vec![mean; width],
            std: vec![std; width],
        }
    }

    fn rngs(seeds: std::ops::Range<u64>) -> Vec<StdRng> {
        seeds.map(StdRng::seed_from_u64).collect()
    }

    /// A point on a line that moves half an action a step, `x_{t+1} = x_t + a_t / 2`,
    /// from 0 towards a goal at 2, rewarded `-(x_t - 2)^2` after every step of four:
    /// the goal is reachable only at full speed, so the known optimum is every action
    /// at the limit (+1), return -3.5. The planner starts from a proposal heading the
    /// wrong way.
    #[test]
    fn the_planner_finds_the_known_optimum_of_a_toy_model() {
        let horizon = 4;
        let toy = |candidates: &[f32]| -> Vec<f32> {
            candidates
                .chunks(horizon)
                .map(|actions| {
                    let mut x = 0.0f32;
                    actions
                        .iter()
                        .map(|a| {
                            x += 0.5 * a;
                            -(x - 2.0) * (x - 2.0)
                        })
                        .sum()
                })
                .collect()
        };
        let config = PlannerConfig {
            candidates: 256,
            iterations: 10,
            elites: 32,
            temperature: 0.01,
            discount: 1.0,
            ..PlannerConfig::default()
        };
        let proposals = vec![proposal(-0.5, 0.5, horizon); 3];
        let planned = plan_sequences(&config, &proposals, &mut rngs(0..3), toy);
        assert_eq!(planned.len(), 3);
        let optimum = toy(&[1.0; 4])[0];
        for plan in &planned {
            // The action executed first (receding horizon) is the optimum's; the last
            // moves the return least (0.03 from 1 to 0.65), so the return is held to
            // within 0.05 of the optimum's (1.4%) rather than every action.
            assert!(plan.actions[0] > 0.95, "{:?}", plan.actions);
            assert!(plan.score > optimum - 0.05, "{} vs {optimum}", plan.score);
            assert_eq!(plan.score, toy(&plan.actions)[0], "the score is the plan's");
        }
    }

    /// Several start states planned in one batch: each gets its own optimum (a
    /// target sequence of its own), scored in its own rows.
    #[test]
    fn each_start_state_is_planned_from_its_own_rows() {
        let targets = [[0.6f32, -0.3], [-0.8, 0.2], [0.0, 0.9]];
        let n = 128;
        let score = |candidates: &[f32]| -> Vec<f32> {
            candidates
                .chunks(2)
                .enumerate()
                .map(|(row, c)| {
                    let t = targets[row / n];
                    -((c[0] - t[0]).powi(2) + (c[1] - t[1]).powi(2))
                })
                .collect()
        };
        let config = PlannerConfig {
            candidates: n,
            iterations: 5,
            elites: 8,
            temperature: 0.01,
            ..PlannerConfig::default()
        };
        let planned = plan_sequences(
            &config,
            &vec![proposal(0.0, 0.6, 2); 3],
            &mut rngs(7..10),
            score,
        );
        for (plan, target) in planned.iter().zip(targets) {
            for (a, t) in plan.actions.iter().zip(target) {
                assert!((a - t).abs() < 0.1, "{:?} vs {target:?}", plan.actions);
            }
        }
    }

    /// Where the scores tell the candidates nothing, the plan is a draw from the
    /// policy's distribution (its mean and spread), not its mean.
    #[test]
    fn flat_scores_plan_as_the_sampling_policy_acts() {
        let config = PlannerConfig {
            candidates: 16,
            iterations: 1,
            elites: 4,
            ..PlannerConfig::default()
        };
        let flat = |candidates: &[f32]| vec![0.0; candidates.len()];
        let starts = 2000;
        let planned = plan_sequences(
            &config,
            &vec![proposal(0.2, 0.3, 1); starts],
            &mut rngs(0..starts as u64),
            flat,
        );
        let first: Vec<f32> = planned.iter().map(|p| p.actions[0]).collect();
        let mean = first.iter().sum::<f32>() / starts as f32;
        let std = (first.iter().map(|a| (a - mean).powi(2)).sum::<f32>() / starts as f32).sqrt();
        let at_mean = first.iter().filter(|&&a| a == 0.2).count();
        assert!((mean - 0.2).abs() < 0.03, "{mean}");
        assert!((std - 0.3).abs() < 0.03, "{std}");
        assert!(at_mean < starts / 8, "the mean was chosen {at_mean} times");
    }

    /// A plan depends on its start state's generator alone: planning it beside other
    /// start states gives the same actions.
    #[test]
    fn a_plan_depends_on_its_own_seed_alone() {
        let config = PlannerConfig::default();
        let score = |candidates: &[f32]| -> Vec<f32> {
            candidates.chunks(4).map(|c| -c[0].abs()).collect()
        };
        let alone = plan_sequences(&config, &[proposal(0.1, 0.4, 4)], &mut rngs(5..6), score);
        let beside = plan_sequences(
            &config,
            &[proposal(0.3, 0.2, 4), proposal(0.1, 0.4, 4)],
            &mut [StdRng::seed_from_u64(9), StdRng::seed_from_u64(5)],
            score,
        );
        assert_eq!(alone[0], beside[1]);
    }

    #[test]
    fn settings_out_of_range_name_the_key() {
        let bad = PlannerConfig {
            elites: 0,
            ..PlannerConfig::default()
        };
        assert!(bad.validate().unwrap_err().to_string().contains("elites"));
        let bad = PlannerConfig {
            temperature: f32::NAN,
            ..PlannerConfig::default()
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("temperature")
        );
        assert!(PlannerConfig::default().validate().is_ok());
    }
}
