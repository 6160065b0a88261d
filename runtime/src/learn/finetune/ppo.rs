//! `ppo-returns`: PPO's clipped-ratio objective over the chunks a rollout sampled,
//! credited per tick by returns to go, beside imitation of the demonstrations.
//!
//! Why: every advantage-weighted variant on pusht imitates the policy's own samples
//! with non-negative weights, and so pulls the policy's mean toward its own noise
//! faster than the weights' signal moves it toward success (docs/pusht.md). A policy
//! gradient's signed advantages cancel that pull (a sample worse than usual is made
//! less likely), and weighted naively onto the Gaussian's likelihood they diverge:
//! pushing the mean away from a bad sample lowers the loss without bound. PPO bounds
//! it: a sample's gradient stops once its probability ratio to the policy that drew
//! it leaves `[1 - clip, 1 + clip]` in the direction its advantage pushes.
//!
//! The gradient of PPO's objective `min(r A, clip(r, 1 - e, 1 + e) A)`, `r = pi /
//! pi_behaviour`, is `A r grad log pi` where the clip is not active and 0 where it is.
//! With the ratio held constant for the step, that is the gradient of the imitation
//! loss (the negative log-likelihood of the sampled chunk) weighted by `-A r` per
//! sample: [`clipped_ratio_weights`] gives those weights (as the loss's weights:
//! `A r`, since the loss is the negative log-likelihood), and the update reuses the
//! imitation loss and its host gradient unchanged.
//!
//! What is a sample: a rollout that executes the first `executed_per_plan` actions of
//! each chunk it samples draws them at one planning tick, so the sample is those
//! actions together, its density their joint density under the policy that drew them
//! (the round's starting policy; both densities with the spread scaled by the
//! rollout's exploration, the policy the next round's rollouts will sample from),
//! and its advantage the planning tick's generalised advantage over a value of the
//! proprioception fitted to the round's returns to go ([`super::state_value`]; or,
//! with `baseline = "table"`, its return to go against the mean of the round's own
//! transitions from the same reward level at the same time, [`super::return_credit`]),
//! normalised over the round's samples. The ticks between planning ticks are not
//! samples of their own and carry no gradient.

use std::collections::HashMap;

use burn::prelude::*;
use burn::{Dispatch, DispatchDevice};
use imago_policies::{
    ActionHead, ImitationTargets, Policy, PolicyBatch, effective_sample_size, leading_log_densities,
};
use rand::RngExt;
use rand::rngs::StdRng;

use super::advantages::TransitionWeights;
use super::config::{FinetuneConfig, FinetuneMethod};
use crate::learn::bc::ImitationDataset;
use crate::store::replay::Transition;

/// What the clipped ratio did to a batch's samples.
#[derive(Debug, Clone, PartialEq)]
pub struct ClippedRatios {
    /// Each sample's loss weight: `A r` where the clip is not active, 0 where it is.
    pub weights: Vec<f32>,
    /// Samples whose clip was active (no gradient).
    pub clipped: usize,
    /// The ratios' effective sample size as a fraction of the samples.
    pub ess_fraction: f32,
}

/// The imitation-loss weights of PPO's clipped objective for samples of advantage
/// `advantages[i]` whose log-density is `now[i]` under the policy being trained and
/// was `then[i]` under the policy that drew them: `A r` with `r = exp(now - then)`,
/// and 0 where `A > 0` and `r > 1 + clip`, or `A < 0` and `r < 1 - clip` (the clipped
/// branch of `min(r A, clip(r) A)` is active there and constant in the weights).
pub fn clipped_ratio_weights(
    advantages: &[f32],
    (now, then): (&[f32], &[f32]),
    clip: f32,
) -> ClippedRatios {
    let ratios: Vec<f32> = now.iter().zip(then).map(|(n, t)| (n - t).exp()).collect();
    let mut clipped = 0;
    let weights = advantages
        .iter()
        .zip(&ratios)
        .map(|(&a, &r)| {
            if (a > 0.0 && r > 1.0 + clip) || (a < 0.0 && r < 1.0 - clip) {
                clipped += 1;
                0.0
            } else {
                a * r
            }
        })
        .collect();
    ClippedRatios {
        weights,
        clipped,
        ess_fraction: if ratios.is_empty() {
            1.0
        } else {
            effective_sample_size(&ratios) / ratios.len() as f32
        },
    }
}

/// The number of actions the chunk sampled at `episode[t]` (a planning tick) put
/// into the episode: up to the next planning tick (the next recorded density), an
/// intervention or the episode's end, at most `chunk_len`.
pub fn sample_length(episode: &[Transition], t: usize, chunk_len: usize) -> usize {
    1 + episode[t + 1..]
        .iter()
        .take(chunk_len.saturating_sub(1))
        .take_while(|next| next.behaviour_log_prob.is_none() && !next.intervention)
        .count()
}

/// `ppo-returns` weighs the densities of a Gaussian head's chunks: with a flow-head
/// policy it is an error (checked before anything trains or rolls out); any other
/// method passes.
pub fn check_head<B: Backend>(config: &FinetuneConfig, policy: &Policy<B>) -> anyhow::Result<()> {
    anyhow::ensure!(
        config.method != FinetuneMethod::PpoReturns
            || matches!(policy.head(), ActionHead::Gaussian(_)),
        "method ppo-returns weighs the density of a Gaussian head's sampled chunks, and this policy has a flow head: use awr-returns or advantage-flow"
    );
    Ok(())
}

/// Largest gap, in nats, between a chunk's recorded first-action density and the
/// sampling policy's density of it recomputed at the rollout's exploration, before
/// the update refuses the data (host and burn forwards agree within 1e-5 relative).
const DENSITY_TOLERANCE: f32 = 1e-2;

/// Samples per forward pass when the sampling policy's densities are computed, once,
/// before the update's steps.
const DENSITY_BATCH: usize = 64;

/// Rows of `data` filled into a policy batch, with what the PPO weights read of them.
struct FilledRows {
    /// The rows' imitation targets.
    targets: ImitationTargets<Dispatch>,
    /// The target chunks read back, `[n * K * A]`.
    actions: Vec<f32>,
    /// Their validity mask read back, `[n * K]`.
    mask: Vec<f32>,
    /// Each row's sample length ([`sample_length`]); 0 for an imitated row.
    steps: Vec<usize>,
}

impl FilledRows {
    /// Fills `batch` with the observations of `indices` (of `data`, whose samples are
    /// the transitions with an advantage).
    fn fill(
        (data, advantages): (&ImitationDataset, &[Vec<Option<f32>>]),
        indices: &[usize],
        batch: &mut PolicyBatch,
        device: &DispatchDevice,
    ) -> anyhow::Result<Self> {
        let targets = data.targets::<Dispatch>(indices, None, None, batch, device)?;
        let read = |t: Tensor<Dispatch, 2>| -> anyhow::Result<Vec<f32>> {
            t.into_data()
                .convert::<f32>()
                .to_vec()
                .map_err(|e| anyhow::anyhow!("cannot read targets: {e:?}"))
        };
        let [n, k, a] = targets.actions.dims();
        let actions = read(targets.actions.clone().reshape([n, k * a]))?;
        let mask = read(targets.mask.clone())?;
        let episodes = data.episodes();
        let steps = indices
            .iter()
            .map(|&i| {
                let (e, t) = data.sample(i);
                match advantages[e][t] {
                    Some(_) => sample_length(&episodes[e].transitions, t, k),
                    None => 0,
                }
            })
            .collect();
        Ok(Self {
            targets,
            actions,
            mask,
            steps,
        })
    }

    /// Each row's joint density of its sample's actions under `policy` at `spread`
    /// (0 for an imitated row), `batch` holding the rows.
    fn densities(
        &self,
        policy: &Policy<Dispatch>,
        (batch, device): (&PolicyBatch, &DispatchDevice),
        spread: f32,
    ) -> anyhow::Result<Vec<f32>> {
        leading_log_densities(policy, batch, (&self.actions, &self.steps), spread, device)
            .ok_or_else(|| anyhow::anyhow!("ppo-returns needs a Gaussian head"))
    }
}

/// One `ppo-returns` policy update's batches: half (by `imitation_share`) imitated
/// transitions at a fixed weight, the rest the round's samples at their clipped
/// advantage-times-ratio weights, each sample's loss over the actions it put into
/// its episode.
pub struct PpoUpdate<'a> {
    data: &'a ImitationDataset<'a>,
    advantages: &'a [Vec<Option<f32>>],
    imitated: Vec<usize>,
    samples: Vec<usize>,
    /// Each sample's joint density under the policy that drew it, by transition
    /// index: fixed for the update, so computed once.
    then: HashMap<usize, f32>,
    config: &'a FinetuneConfig,
}

impl<'a> PpoUpdate<'a> {
    /// The update of `policy` from `behaviour` (the policy that sampled the round)
    /// over the `eligible` transitions of `data`, weighed by
    /// [`super::advantages::sample_advantages`]: computes every sample's density under
    /// `behaviour` at the rollout's exploration (through `batch` on `device`), after
    /// checking the first batch's against the densities the rollouts recorded. A flow
    /// head ([`check_head`]), no sampling policy, or recorded densities that differ
    /// (the chunks were sampled at another spread) are errors.
    pub fn new(
        (policy, behaviour): (&Policy<Dispatch>, Option<&Policy<Dispatch>>),
        (data, weighed): (&'a ImitationDataset<'a>, &'a TransitionWeights),
        eligible: &[usize],
        config: &'a FinetuneConfig,
        (batch, device): (&mut PolicyBatch, &DispatchDevice),
    ) -> anyhow::Result<Self> {
        check_head(config, policy)?;
        let behaviour = behaviour.ok_or_else(|| {
            anyhow::anyhow!("ppo-returns needs the policy that sampled the round")
        })?;
        let (samples, imitated): (Vec<usize>, Vec<usize>) = eligible.iter().partition(|&&i| {
            let (e, t) = data.sample(i);
            weighed.advantages[e][t].is_some()
        });
        let spread = config.rollout.exploration;
        let mut then = HashMap::with_capacity(samples.len());
        for (n, chunk) in samples.chunks(DENSITY_BATCH).enumerate() {
            let rows = FilledRows::fill((data, &weighed.advantages), chunk, batch, device)?;
            if n == 0 {
                check_recorded_densities(behaviour, (data, chunk), &rows, (batch, device), spread)?;
            }
            let densities = rows.densities(behaviour, (batch, device), spread)?;
            then.extend(chunk.iter().copied().zip(densities));
        }
        Ok(Self {
            data,
            advantages: &weighed.advantages,
            imitated,
            samples,
            then,
            config,
        })
    }

    /// `n` transition indices: `round(n * imitation_share)` imitated ones and the
    /// rest samples, uniformly with replacement; all of one kind where the other is
    /// missing.
    pub fn draw(&self, n: usize, rng: &mut StdRng) -> Vec<usize> {
        let imitated = match (self.imitated.is_empty(), self.samples.is_empty()) {
            (true, _) => 0,
            (false, true) => n,
            (false, false) => {
                ((n as f32 * self.config.ppo().imitation_share).round() as usize).min(n)
            }
        };
        let pick = |pool: &[usize], rng: &mut StdRng| pool[rng.random_range(0..pool.len())];
        (0..n)
            .map(|i| match i < imitated {
                true => pick(&self.imitated, rng),
                false => pick(&self.samples, rng),
            })
            .collect()
    }

    /// Fills `batch` with `indices`' observations and returns their targets: the
    /// imitated rows at `imitation_weight` over their whole chunk, each sample at
    /// its clipped ratio weight over the actions it put into its episode; with what
    /// the clip did.
    pub fn targets(
        &self,
        policy: &Policy<Dispatch>,
        (indices, batch): (&[usize], &mut PolicyBatch),
        device: &DispatchDevice,
    ) -> anyhow::Result<(ImitationTargets<Dispatch>, ClippedRatios)> {
        let rows = FilledRows::fill((self.data, self.advantages), indices, batch, device)?;
        let now = rows.densities(policy, (batch, device), self.config.rollout.exploration)?;
        let sampled: Vec<usize> = (0..indices.len()).filter(|&r| rows.steps[r] > 0).collect();
        let advantages: Vec<f32> = sampled
            .iter()
            .map(|&r| {
                let (e, t) = self.data.sample(indices[r]);
                self.advantages[e][t].unwrap_or(0.0)
            })
            .collect();
        let now: Vec<f32> = sampled.iter().map(|&r| now[r]).collect();
        let then: Vec<f32> = sampled.iter().map(|&r| self.then[&indices[r]]).collect();
        let ratios = clipped_ratio_weights(&advantages, (&now, &then), self.config.ppo().clip);
        let FilledRows {
            mut targets,
            mut mask,
            steps,
            ..
        } = rows;
        let (n, k) = (indices.len(), mask.len() / indices.len().max(1));
        let mut weights = vec![self.config.ppo().imitation_weight; n];
        for (&r, &w) in sampled.iter().zip(&ratios.weights) {
            weights[r] = w;
            mask[r * k + steps[r]..(r + 1) * k]
                .iter_mut()
                .for_each(|m| *m = 0.0);
        }
        targets.mask = Tensor::from_data(TensorData::new(mask, [n, k]), device);
        targets.weights = Some(Tensor::from_data(TensorData::new(weights, [n]), device));
        Ok((targets, ratios))
    }
}

/// Each sample's recorded first-action density (`rows` of `chunk`, filled into
/// `batch`) against `behaviour`'s at `spread`: an error naming the setting where
/// they differ, the chunks having been sampled at another spread.
fn check_recorded_densities(
    behaviour: &Policy<Dispatch>,
    (data, chunk): (&ImitationDataset, &[usize]),
    rows: &FilledRows,
    (batch, device): (&PolicyBatch, &DispatchDevice),
    spread: f32,
) -> anyhow::Result<()> {
    let first: Vec<usize> = rows.steps.iter().map(|&s| s.min(1)).collect();
    let recomputed =
        leading_log_densities(behaviour, batch, (&rows.actions, &first), spread, device)
            .ok_or_else(|| anyhow::anyhow!("ppo-returns needs a Gaussian head"))?;
    let episodes = data.episodes();
    for (&i, recomputed) in chunk.iter().zip(recomputed) {
        let (e, t) = data.sample(i);
        if let Some(recorded) = episodes[e].transitions[t].behaviour_log_prob {
            anyhow::ensure!(
                (recorded - recomputed).abs() <= DENSITY_TOLERANCE * recorded.abs().max(1.0),
                "ppo-returns: episode {} step {t} recorded a density of {recorded:.4} for its sampled action, and the policy that sampled it gives {recomputed:.4} at [rollout] exploration = {spread}: the chunks were sampled at another spread; set rollout.exploration to the one the rollouts used",
                episodes[e].start.episode
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::learn::finetune::advantages::{round_episodes, sample_advantages};
    use crate::learn::finetune::return_credit::{held_tail, returns_to_go};
    use crate::learn::finetune::state_value::StateValues;
    use crate::learn::finetune::test_episodes::{ended, episode};
    use crate::store::replay::Episode;

    /// PPO's objective for one sample, `min(r A, clip(r, 1 - e, 1 + e) A)`.
    fn objective(a: f32, log_ratio: f32, clip: f32) -> f32 {
        let r = log_ratio.exp();
        (r * a).min(r.clamp(1.0 - clip, 1.0 + clip) * a)
    }

    /// Each weight is the derivative of PPO's objective with respect to the sample's
    /// log-density (central differences), away from the clip's kinks: the weighted
    /// imitation loss has PPO's gradient.
    #[test]
    fn the_weights_are_the_objectives_derivative() {
        let clip = 0.2;
        for a in [-2.0f32, -0.5, 0.7, 1.5] {
            for log_ratio in [-0.6f32, -0.3, -0.1, 0.0, 0.1, 0.15, 0.3, 0.6] {
                let h = 1e-3;
                let slope = (objective(a, log_ratio + h, clip) - objective(a, log_ratio - h, clip))
                    / (2.0 * h);
                let weights = clipped_ratio_weights(&[a], (&[log_ratio], &[0.0]), clip);
                assert!(
                    (weights.weights[0] - slope).abs() < 1e-2 * slope.abs().max(1.0),
                    "A {a}, log r {log_ratio}: weight {} against slope {slope}",
                    weights.weights[0]
                );
                assert_eq!(weights.clipped, (slope == 0.0) as usize);
            }
        }
        // By hand: r = 1.1 inside the clip; r = 1.3 with A > 0 clipped, with A < 0 not.
        let by_hand = clipped_ratio_weights(
            &[1.0, 1.0, -1.0, -1.0],
            (
                &[1.1f32.ln(), 1.3f32.ln(), 1.3f32.ln(), 0.7f32.ln()],
                &[0.0; 4],
            ),
            0.2,
        );
        let expected = [1.1, 0.0, -1.3, 0.0];
        for (w, e) in by_hand.weights.iter().zip(expected) {
            assert!((w - e).abs() < 1e-5, "{:?}", by_hand.weights);
        }
        assert_eq!(by_hand.clipped, 2);
    }

    /// Marks an episode's planning ticks (every `every`-th) as sampled by its version.
    fn sampled(mut episode: Episode, every: usize) -> Episode {
        for (t, transition) in episode.transitions.iter_mut().enumerate() {
            transition.behaviour_log_prob = (t % every == 0).then_some(-1.0);
        }
        episode
    }

    #[test]
    fn only_the_rounds_planning_ticks_are_samples_and_demonstrations_are_imitated() {
        let config = FinetuneConfig {
            method: FinetuneMethod::PpoReturns,
            discount: 0.9,
            ..FinetuneConfig::default()
        };
        let demonstration = episode(0, 0, &[0.1, 0.5, 1.0, 1.0]);
        let older = sampled(episode(1, 1, &[0.1, 0.2, 0.3, 0.4]), 2);
        let progressed = sampled(ended(2, 2, &[0.1, 0.2, 0.6, 1.0], true), 2);
        let stalled = sampled(episode(3, 2, &[0.1, 0.2, 0.2, 0.2]), 2);
        let mut intervened = sampled(episode(4, 2, &[0.1, 0.2, 0.3, 0.3]), 2);
        intervened.transitions[1].intervention = true;
        let episodes = [demonstration, older, progressed, stalled, intervened];
        let (weights, summary) = sample_advantages(&episodes, 2, &config, 4, None);
        assert_eq!(weights.weights[0], vec![1.0; 4], "a demonstration");
        assert_eq!(weights.weights[1], vec![0.0; 4], "an older version's");
        assert_eq!(
            weights.weights[2],
            vec![1.0, 0.0, 1.0, 0.0],
            "planning ticks"
        );
        assert_eq!(
            weights.weights[4],
            vec![1.0, 1.0, 1.0, 0.0],
            "an intervention"
        );
        assert_eq!(weights.advantages[4][1], None, "imitated, not a sample");
        assert_eq!((summary.weighted, summary.unweighted), (6, 5));
        // The progressed episode's ticks 0 and 2 did better than the stalled one's from
        // the same cells; normalised over the six samples.
        let a = |e: usize, t: usize| weights.advantages[e][t].unwrap();
        assert!(a(2, 0) > a(3, 0) && a(2, 2) > a(3, 2), "{weights:?}");
        let all: Vec<f32> = weights
            .advantages
            .iter()
            .flatten()
            .flatten()
            .copied()
            .collect();
        assert_eq!(all.len(), 6);
        assert!(all.iter().sum::<f32>().abs() < 1e-4, "mean 0: {all:?}");
    }

    #[test]
    fn with_state_values_a_sample_is_credited_by_generalised_advantages() {
        let config = FinetuneConfig {
            method: FinetuneMethod::PpoReturns,
            discount: 0.5,
            lambda: 0.5,
            ..FinetuneConfig::default()
        };
        let progressed = sampled(ended(2, 2, &[0.1, 0.2, 0.6, 1.0], true), 2);
        let stalled = sampled(episode(3, 2, &[0.1, 0.2, 0.2, 0.2]), 2);
        let episodes = [progressed, stalled];
        let round = round_episodes(&episodes, 2);
        assert_eq!(round, vec![0, 1]);
        // Values equal to the returns to go (the tail last) leave no advantage.
        let exact = StateValues {
            values: episodes
                .iter()
                .map(|e| {
                    let mut v = returns_to_go(e, 6, 0.5);
                    v.push(held_tail(e, 6, 0.5));
                    v
                })
                .collect(),
            explained: 1.0,
        };
        let (weights, summary) = sample_advantages(&episodes, 2, &config, 6, Some(&exact));
        assert!(
            weights
                .advantages
                .iter()
                .flatten()
                .flatten()
                .all(|a| a.abs() < 1e-5),
            "{weights:?}"
        );
        assert_eq!(summary.baseline_explained, 1.0);
        // Zero values but the tail: the sample at tick 2 of the stalled episode gets
        // delta_2 + gamma lambda delta_3 = 0.2 + 0.25 * 0.2 = 0.25 before
        // normalisation, the progressed one's 0.6 + 0.25 * (1.0 + 0.5 * 1.5) (its
        // tail: the success's reward 1 held for 2 unused ticks, 1 + 0.5 * 1).
        let zero = StateValues {
            values: episodes
                .iter()
                .map(|e| {
                    let mut v = vec![0.0; e.transitions.len()];
                    v.push(held_tail(e, 6, 0.5));
                    v
                })
                .collect(),
            explained: 0.0,
        };
        let (weights, _) = sample_advantages(&episodes, 2, &config, 6, Some(&zero));
        let raw: Vec<f32> = [(0, 0), (0, 2), (1, 0), (1, 2)]
            .iter()
            .map(|&(e, t)| {
                let rewards: Vec<f32> = episodes[e].transitions.iter().map(|t| t.reward).collect();
                let v = &zero.values[e];
                let delta = |k: usize| rewards[k] + 0.5 * v[k + 1] - v[k];
                (t..rewards.len())
                    .map(|k| 0.25f32.powi((k - t) as i32) * delta(k))
                    .sum()
            })
            .collect();
        assert!(
            (raw[1] - (0.6 + 0.25 * (1.0 + 0.5 * 1.5))).abs() < 1e-6,
            "{raw:?}"
        );
        assert!((raw[3] - 0.25).abs() < 1e-6, "{raw:?}");
        let mut expected = raw.clone();
        config.normaliser.normalise(&mut expected);
        let got: Vec<f32> = [(0, 0), (0, 2), (1, 0), (1, 2)]
            .iter()
            .map(|&(e, t)| weights.advantages[e][t].unwrap())
            .collect();
        for (g, e) in got.iter().zip(&expected) {
            assert!((g - e).abs() < 1e-5, "{got:?} against {expected:?}");
        }
    }

    /// On reacher2d rollouts that sample chunks of 2 at exploration 1.5: before any
    /// step the policy is the one that sampled, so every ratio is 1 and each sample's
    /// weight its advantage; a sample's loss covers the actions it put into its
    /// episode, a demonstration's its whole chunk at the imitation weight. Told the
    /// wrong exploration, the update refuses the data, before any step, in one error
    /// naming the setting.
    #[test]
    fn a_fresh_batch_weighs_samples_by_their_advantage_over_their_own_actions() {
        use burn::backend::ndarray::NdArrayDevice;
        use imago_policies::{Architecture, PolicyConfig};
        use rand::SeedableRng;

        use crate::act::rollout::{ActingPolicy, RolloutConfig, collect_policy_episodes};
        use crate::robot::RobotConfig;
        use crate::store::replay::{ReplayWriter, ReplayWriterConfig};

        let dir = tempfile::tempdir().unwrap();
        let robot = RobotConfig::default();
        let mut writer =
            ReplayWriter::open(dir.path(), ReplayWriterConfig::default(), &robot, "test")
                .unwrap()
                .0;
        let device = DispatchDevice::NdArray(NdArrayDevice::Cpu);
        let policy_config = PolicyConfig::for_robot(Architecture::Vla, &robot.spec()).unwrap();
        let policy = policy_config.init::<Dispatch>(&device);
        let rollout = RolloutConfig {
            exploration: 1.5,
            executed_per_plan: 2,
            ..RolloutConfig::default()
        };
        let acting = ActingPolicy {
            policy: &policy,
            config: &policy_config,
            device: &device,
            version: 3,
        };
        let mut episodes =
            collect_policy_episodes(&acting, &robot, &[5, 6, 7], &rollout, &mut writer).unwrap();
        // The first episode stands in for a demonstration.
        for t in &mut episodes[0].transitions {
            t.policy_version = 0;
        }
        let config = FinetuneConfig {
            method: FinetuneMethod::PpoReturns,
            rollout: rollout.clone(),
            ..FinetuneConfig::default()
        };
        let (weighed, _) = sample_advantages(&episodes, 3, &config, robot.spec().max_steps, None);
        let data = ImitationDataset::new(&episodes, &policy_config);
        let eligible: Vec<usize> = (0..data.samples().len())
            .filter(|&i| {
                let (e, t) = data.sample(i);
                weighed.weights[e][t] > 0.0
            })
            .collect();
        let mut batch = PolicyBatch::new(&policy_config.input_spec());
        let update = PpoUpdate::new(
            (&policy, Some(&policy)),
            (&data, &weighed),
            &eligible,
            &config,
            (&mut batch, &device),
        )
        .unwrap();
        let mut rng = StdRng::seed_from_u64(1);
        let indices = update.draw(16, &mut rng);
        let (targets, ratios) = update
            .targets(&policy, (&indices, &mut batch), &device)
            .unwrap();
        let read = |t: Tensor<Dispatch, 1>| t.into_data().convert::<f32>().to_vec::<f32>().unwrap();
        let weights = read(targets.weights.clone().unwrap());
        let mask = read(targets.mask.clone().reshape([-1]));
        let k = policy_config.chunk_len();
        assert_eq!(ratios.clipped, 0);
        let (mut samples, mut imitated) = (0, 0);
        for (r, &i) in indices.iter().enumerate() {
            let (e, t) = data.sample(i);
            let valid = (episodes[e].transitions.len() - t).min(k);
            let row = &mask[r * k..(r + 1) * k];
            match weighed.advantages[e][t] {
                Some(a) => {
                    samples += 1;
                    assert!(
                        (weights[r] - a).abs() < 1e-4,
                        "ratio 1: {} against {a}",
                        weights[r]
                    );
                    let own = sample_length(&episodes[e].transitions, t, k);
                    assert!(own <= 2 && own <= valid, "{own}");
                    assert_eq!(row.iter().sum::<f32>(), own as f32, "row {r}");
                }
                None => {
                    imitated += 1;
                    assert_eq!(e, 0, "only the demonstration is imitated");
                    assert_eq!(weights[r], config.ppo().imitation_weight);
                    assert_eq!(row.iter().sum::<f32>(), valid as f32, "row {r}");
                }
            }
        }
        assert_eq!((imitated, samples), (8, 8), "half and half");

        let told_wrong = FinetuneConfig {
            rollout: RolloutConfig {
                exploration: 1.0,
                ..rollout
            },
            ..config
        };
        let Err(error) = PpoUpdate::new(
            (&policy, Some(&policy)),
            (&data, &weighed),
            &eligible,
            &told_wrong,
            (&mut batch, &device),
        ) else {
            panic!("densities sampled at another spread were accepted");
        };
        let error = error.to_string();
        assert!(error.contains("rollout.exploration"), "{error}");
        writer.close().unwrap();
    }
}
