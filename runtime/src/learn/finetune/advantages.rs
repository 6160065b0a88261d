//! Per-transition weights of an advantage-weighted update, for each method.

use std::collections::BTreeMap;

use burn::Dispatch;
use burn::prelude::*;
use imago_policies::{awr_weights, effective_sample_size, generalised_advantages, segment_credit};
use imago_worldmodel::LatentCritic;
use serde::{Deserialize, Serialize};

use super::config::{FinetuneConfig, FinetuneMethod, ReturnCredit, ReturnGroups};
use super::latents::EncodedEpisodes;
use super::return_credit::return_to_go_advantages;
use super::state_value::{StateValues, explained_variance};
use crate::store::replay::{Episode, Transition};

/// What a round's weights look like.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct AdvantageSummary {
    /// Transitions weighted by their advantage.
    pub weighted: usize,
    /// Transitions kept at weight 1 (interventions, under HABC; the expert's
    /// commands, under DAgger).
    pub unweighted: usize,
    /// Mean AWR weight of the weighted transitions (under `ppo-returns`, whose samples
    /// are weighed per step: the mean magnitude of their advantages).
    pub mean_weight: f32,
    /// Fraction of weighted transitions at the clip.
    pub clipped_fraction: f32,
    /// Effective sample size of the AWR weights, as a fraction of their count.
    pub ess_fraction: f32,
    /// Under `ppo-returns`: the share of the variance of the round's returns to go
    /// that its baseline explains (`state_value::explained_variance`).
    #[serde(default)]
    pub baseline_explained: f32,
}

/// Every transition's normalised advantage and AWR weight, `[episode][step]`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TransitionWeights {
    /// Normalised advantages; `None` for transitions that keep weight 1.
    pub advantages: Vec<Vec<Option<f32>>>,
    /// AWR weights.
    pub weights: Vec<Vec<f32>>,
}

impl TransitionWeights {
    /// `(advantage, weight)` of at most `count` weighted transitions, the newest
    /// episodes' last, in replay order.
    pub fn newest(&self, count: usize) -> Vec<(f32, f32)> {
        let mut newest: Vec<(f32, f32)> = self
            .advantages
            .iter()
            .zip(&self.weights)
            .rev()
            .flat_map(|(a, w)| {
                a.iter()
                    .zip(w)
                    .rev()
                    .filter_map(|(a, w)| a.map(|a| (a, *w)))
            })
            .take(count)
            .collect();
        newest.reverse();
        newest
    }
}

/// Whether an episode was recorded by a scripted demonstrator (no policy version).
fn is_demonstration(episode: &Episode) -> bool {
    episode.transitions.iter().all(|t| t.policy_version == 0)
}

fn read(values: Tensor<Dispatch, 1>) -> anyhow::Result<Vec<f32>> {
    values
        .into_data()
        .convert::<f32>()
        .to_vec()
        .map_err(|e| anyhow::anyhow!("cannot read critic output: {e:?}"))
}

/// The AWR weight of every transition of every episode (`weights[e][t]`), from
/// `critic` (inference) over `encoded`, by `config.method`:
/// - `awr-returns`: each episode's return over `max_steps` ticks (a success held to
///   the limit, `held_return`), for every one of its transitions, normalised among
///   episodes that share an initial state (demonstrations, one per state, form one
///   group) or among all episodes, by `config.return_groups()`;
/// - `awr-imagination` and `advantage-flow`: generalised advantages of the real
///   rewards under the critic's imagination-trained values, normalised over all
///   transitions;
/// - `dagger`: 1 for demonstrations and interventions, 0 for the policy's own
///   commands (no advantage at all);
/// - `ppo-returns`: the normalised return-to-go advantage of each chunk the policy
///   `version` (the one about to be updated) sampled (against the table, or
///   generalised over `state_values` where given), and weight 1 for it and for every
///   imitated transition ([`sample_advantages`]);
/// - `habc`: the gated mix of the viability advantage (segment outcome minus the
///   viability head) and the efficiency advantage (`gamma^steps` to the goal, 0 for a
///   failed segment, minus the efficiency head) of policy-executed transitions,
///   normalised over them; intervened transitions keep weight 1.
pub fn transition_weights(
    episodes: &[Episode],
    encoded: &EncodedEpisodes,
    critic: &LatentCritic<Dispatch>,
    config: &FinetuneConfig,
    (version, max_steps): (u64, u32),
    state_values: Option<&StateValues>,
) -> anyhow::Result<(TransitionWeights, AdvantageSummary)> {
    // Raw advantages; `None` marks a transition that keeps weight 1.
    let mut raw: Vec<Vec<Option<f32>>> = Vec::with_capacity(episodes.len());
    let mut groups: BTreeMap<Option<u64>, Vec<(usize, usize)>> = BTreeMap::new();
    match config.method {
        FinetuneMethod::AwrReturns => {
            let advantages = match config.return_credit() {
                ReturnCredit::Episode => return_advantages(episodes, config, max_steps),
                ReturnCredit::ReturnToGo => tick_advantages(episodes, config, max_steps),
            };
            return Ok(finish(advantages, config));
        }
        FinetuneMethod::Dagger => return Ok(expert_commands(episodes)),
        FinetuneMethod::PpoReturns => {
            return Ok(sample_advantages(
                episodes,
                version,
                config,
                max_steps,
                state_values,
            ));
        }
        FinetuneMethod::AwrImagination | FinetuneMethod::AdvantageFlow => {
            let values = read(critic.value(encoded.latents.clone()))?;
            for (e, episode) in episodes.iter().enumerate() {
                let rewards: Vec<f32> = episode.transitions.iter().map(|t| t.reward).collect();
                let continues: Vec<f32> = episode
                    .transitions
                    .iter()
                    .map(|t| if t.done && t.success { 0.0 } else { 1.0 })
                    .collect();
                let start = encoded.row(e, 0);
                let advantages = generalised_advantages(
                    &rewards,
                    &continues,
                    &values[start..start + rewards.len() + 1],
                    config.discount,
                    config.lambda,
                );
                raw.push(advantages.into_iter().map(Some).collect());
                groups
                    .entry(None)
                    .or_default()
                    .extend((0..rewards.len()).map(|t| (e, t)));
            }
        }
        FinetuneMethod::Habc => {
            let viability = read(critic.viability(encoded.latents.clone()))?;
            let efficiency = read(critic.efficiency(encoded.latents.clone()))?;
            for (e, episode) in episodes.iter().enumerate() {
                let interventions: Vec<bool> =
                    episode.transitions.iter().map(|t| t.intervention).collect();
                let credit = segment_credit(&interventions, episode.end.success);
                let mut advantages = Vec::with_capacity(credit.len());
                for (t, credit) in credit.into_iter().enumerate() {
                    let Some(credit) = credit else {
                        advantages.push(None);
                        continue;
                    };
                    // Outcome credit: the segment's own outcome against the heads'
                    // expectations (Monte Carlo, so a poorly fitted head is only a
                    // baseline, never the signal).
                    let row = encoded.row(e, t);
                    let outcome = credit.success as u8 as f32;
                    let discounted = outcome * config.discount.powi(credit.steps_to_end as i32 - 1);
                    advantages.push(Some(config.habc_gate().combine(
                        viability[row],
                        outcome - viability[row],
                        discounted - efficiency[row],
                    )));
                    groups.entry(None).or_default().push((e, t));
                }
                raw.push(advantages);
            }
        }
    }
    for members in groups.values() {
        let mut values: Vec<f32> = members
            .iter()
            .map(|&(e, t)| raw[e][t].expect("grouped transitions have advantages"))
            .collect();
        config.normaliser.normalise(&mut values);
        for (&(e, t), a) in members.iter().zip(values) {
            raw[e][t] = Some(a);
        }
    }
    Ok(finish(raw, config))
}

/// An episode's return over `max_steps` ticks. A success ends an episode early, but a
/// robot at its goal would go on earning the success reward, so the ticks it did not
/// need count at its last reward. Without this, on a task whose reward is positive
/// while the goal is near (pusht's coverage), an episode that lingers just short of
/// the goal out-earns one that reaches it quickly and stops.
fn held_return(episode: &Episode, max_steps: u32) -> f32 {
    let earned: f32 = episode.transitions.iter().map(|t| t.reward).sum();
    match episode.transitions.last() {
        Some(last) if episode.end.success => {
            let unused = max_steps.saturating_sub(episode.transitions.len() as u32);
            earned + unused as f32 * last.reward
        }
        _ => earned,
    }
}

/// `awr-returns`: each episode's [`held_return`] as the advantage of all its
/// transitions, normalised within `config.return_groups()`.
fn return_advantages(
    episodes: &[Episode],
    config: &FinetuneConfig,
    max_steps: u32,
) -> Vec<Vec<Option<f32>>> {
    let mut advantages: Vec<Vec<Option<f32>>> = episodes
        .iter()
        .map(|episode| vec![None; episode.transitions.len()])
        .collect();
    let mut returns: BTreeMap<Option<u64>, Vec<(usize, f32)>> = BTreeMap::new();
    for (e, episode) in episodes.iter().enumerate() {
        let key = match config.return_groups() {
            ReturnGroups::PerStart => (!is_demonstration(episode)).then_some(episode.start.seed),
            ReturnGroups::Pooled => None,
        };
        returns
            .entry(key)
            .or_default()
            .push((e, held_return(episode, max_steps)));
    }
    for group in returns.values() {
        let mut values: Vec<f32> = group.iter().map(|(_, r)| *r).collect();
        config.normaliser.normalise(&mut values);
        for (&(e, _), a) in group.iter().zip(values) {
            advantages[e].iter_mut().for_each(|slot| *slot = Some(a));
        }
    }
    advantages
}

/// `awr-returns` with `credit = "return-to-go"`: each transition's return to go
/// against its cell's baseline (`return_credit`), normalised over all transitions.
fn tick_advantages(
    episodes: &[Episode],
    config: &FinetuneConfig,
    max_steps: u32,
) -> Vec<Vec<Option<f32>>> {
    let advantages = return_to_go_advantages(episodes, max_steps, config.discount).advantages;
    let mut values: Vec<f32> = advantages.iter().flatten().copied().collect();
    config.normaliser.normalise(&mut values);
    let mut next = values.into_iter();
    advantages
        .iter()
        .map(|episode| episode.iter().map(|_| next.next()).collect())
        .collect()
}

/// Whether `transition` (of a demonstration or not) is one of `version`'s samples:
/// the planning tick of a chunk that policy sampled (it recorded the chunk's
/// density), not an intervention.
fn is_sample(demonstration: bool, transition: &Transition, version: u64) -> bool {
    !is_imitated(demonstration, transition)
        && transition.policy_version == version
        && transition.behaviour_log_prob.is_some()
}

/// The episodes that hold samples of policy `version` (its rollouts of the round
/// being learnt from), in replay order.
pub(super) fn round_episodes(episodes: &[Episode], version: u64) -> Vec<usize> {
    (0..episodes.len())
        .filter(|&e| {
            let demonstration = is_demonstration(&episodes[e]);
            episodes[e]
                .transitions
                .iter()
                .any(|t| is_sample(demonstration, t, version))
        })
        .collect()
}

/// Whether a transition is imitated at a fixed weight: a demonstration's or an
/// intervention's.
fn is_imitated(demonstration: bool, transition: &Transition) -> bool {
    demonstration || transition.intervention
}

/// The weights `ppo-returns` starts an update from, for the policy `version` that
/// collected the round: each of its samples' normalised advantage (weight 1, to be
/// drawn), every imitated transition at weight 1 with no advantage, and every other
/// transition (older versions', the ticks between planning ticks) at weight 0.
///
/// The advantages are returns to go against the table of [`return_to_go_advantages`],
/// or, given `state_values` (one entry per [`round_episodes`] episode, in that
/// order), generalised advantages over those values with the config's `lambda`.
pub(super) fn sample_advantages(
    episodes: &[Episode],
    version: u64,
    config: &FinetuneConfig,
    max_steps: u32,
    state_values: Option<&StateValues>,
) -> (TransitionWeights, AdvantageSummary) {
    let demonstration: Vec<bool> = episodes.iter().map(is_demonstration).collect();
    let round = round_episodes(episodes, version);
    let in_round: Vec<&Episode> = round.iter().map(|&e| &episodes[e]).collect();
    let (raw, explained) = match state_values {
        None => {
            let credit = return_to_go_advantages(&in_round, max_steps, config.discount);
            let (returns, raw) = (credit.returns, credit.advantages);
            let baseline = returns
                .iter()
                .flatten()
                .zip(raw.iter().flatten())
                .map(|(g, a)| g - a);
            let explained = explained_variance(returns.iter().flatten().copied(), baseline);
            (raw, explained)
        }
        Some(state_values) => {
            let raw = in_round
                .iter()
                .zip(&state_values.values)
                .map(|(episode, values)| {
                    let rewards: Vec<f32> = episode.transitions.iter().map(|t| t.reward).collect();
                    // The values end with the exact value after the last transition,
                    // so every transition continues into it.
                    let continues = vec![1.0; rewards.len()];
                    generalised_advantages(
                        &rewards,
                        &continues,
                        values,
                        config.discount,
                        config.lambda,
                    )
                })
                .collect();
            (raw, state_values.explained)
        }
    };
    let mut advantages: Vec<Vec<Option<f32>>> = episodes
        .iter()
        .map(|e| vec![None; e.transitions.len()])
        .collect();
    let mut samples = Vec::new();
    for (&e, raw) in round.iter().zip(&raw) {
        for (t, &a) in raw.iter().enumerate() {
            if is_sample(demonstration[e], &episodes[e].transitions[t], version) {
                samples.push((e, t, a));
            }
        }
    }
    let mut values: Vec<f32> = samples.iter().map(|s| s.2).collect();
    config.normaliser.normalise(&mut values);
    for (&(e, t, _), a) in samples.iter().zip(&values) {
        advantages[e][t] = Some(*a);
    }
    let mut imitated = 0;
    let weights = episodes
        .iter()
        .zip(&advantages)
        .zip(&demonstration)
        .map(|((episode, advantages), &demonstration)| {
            episode
                .transitions
                .iter()
                .zip(advantages)
                .map(|(t, a)| {
                    let keep = a.is_some() || is_imitated(demonstration, t);
                    imitated += (a.is_none() && keep) as usize;
                    keep as u8 as f32
                })
                .collect()
        })
        .collect();
    let summary = AdvantageSummary {
        weighted: values.len(),
        unweighted: imitated,
        mean_weight: values.iter().map(|a| a.abs()).sum::<f32>() / values.len().max(1) as f32,
        clipped_fraction: 0.0,
        ess_fraction: 1.0,
        baseline_explained: explained,
    };
    (
        TransitionWeights {
            advantages,
            weights,
        },
        summary,
    )
}

/// `dagger`: weight 1 for every command of an expert (a demonstration's, an
/// intervention's), 0 for the policy's own.
fn expert_commands(episodes: &[Episode]) -> (TransitionWeights, AdvantageSummary) {
    let demonstration: Vec<bool> = episodes.iter().map(is_demonstration).collect();
    let weights: Vec<Vec<f32>> = episodes
        .iter()
        .zip(&demonstration)
        .map(|(episode, &demonstration)| {
            episode
                .transitions
                .iter()
                .map(|t| (demonstration || t.intervention) as u8 as f32)
                .collect()
        })
        .collect();
    let unweighted = weights.iter().flatten().filter(|&&w| w > 0.0).count();
    let summary = AdvantageSummary {
        unweighted,
        ..AdvantageSummary::default()
    };
    let advantages = weights.iter().map(|w| vec![None; w.len()]).collect();
    (
        TransitionWeights {
            advantages,
            weights,
        },
        summary,
    )
}

/// Turns normalised advantages into clipped AWR weights and summarises them.
fn finish(
    normalised: Vec<Vec<Option<f32>>>,
    config: &FinetuneConfig,
) -> (TransitionWeights, AdvantageSummary) {
    let advantages: Vec<f32> = normalised.iter().flatten().flatten().copied().collect();
    let all = awr_weights(&advantages, config.beta, config.max_weight);
    let mut next = all.iter();
    let mut unweighted = 0;
    let weights = normalised
        .iter()
        .map(|episode| {
            episode
                .iter()
                .map(|a| match a {
                    Some(_) => *next.next().expect("one weight per advantage"),
                    None => {
                        unweighted += 1;
                        1.0
                    }
                })
                .collect()
        })
        .collect();
    let count = all.len().max(1) as f32;
    let summary = AdvantageSummary {
        weighted: all.len(),
        unweighted,
        mean_weight: all.iter().sum::<f32>() / count,
        clipped_fraction: all.iter().filter(|&&w| w >= config.max_weight).count() as f32 / count,
        ess_fraction: effective_sample_size(&all) / count,
        baseline_explained: 0.0,
    };
    (
        TransitionWeights {
            advantages: normalised,
            weights,
        },
        summary,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::learn::finetune::AwrReturnsSettings;
    use crate::learn::finetune::test_episodes::{ended, episode};

    /// The advantage of each episode's first transition.
    fn first(advantages: &[Vec<Option<f32>>]) -> Vec<f32> {
        advantages.iter().map(|a| a[0].unwrap()).collect()
    }

    #[test]
    fn returns_are_normalised_per_start_or_over_all_episodes() {
        // Two demonstrations with returns 4 and 2; two rollouts from one initial state
        // with returns 1 and 0.5, both worse than either demonstration.
        let episodes = vec![
            episode(1, 0, &[2.0, 2.0]),
            episode(2, 0, &[1.0, 1.0]),
            episode(9, 1, &[0.5, 0.5]),
            episode(9, 1, &[0.25, 0.25]),
        ];
        let per_start = return_advantages(&episodes, &FinetuneConfig::default(), 2);
        let a = first(&per_start);
        // Each group is normalised on its own: the better rollout ranks as high as the
        // better demonstration.
        assert!(
            (a[0] - a[2]).abs() < 1e-5 && (a[1] - a[3]).abs() < 1e-5,
            "{a:?}"
        );
        assert!(a[0] > 0.0 && a[1] < 0.0);
        let pooled = return_advantages(
            &episodes,
            &FinetuneConfig {
                method: FinetuneMethod::AwrReturns,
                awr_returns: Some(AwrReturnsSettings {
                    return_groups: ReturnGroups::Pooled,
                    ..AwrReturnsSettings::default()
                }),
                ..FinetuneConfig::default()
            },
            2,
        );
        let a = first(&pooled);
        // One group: the order of the returns, both rollouts below both demonstrations.
        assert!(a[0] > a[1] && a[1] > a[2] && a[2] > a[3], "{a:?}");
        assert!(a[1] > 0.0 && a[2] < 0.0, "{a:?}");
        // Every transition of an episode carries its advantage.
        assert!(pooled.iter().all(|e| e.iter().all(|x| *x == e[0])));
    }

    #[test]
    fn return_to_go_credit_weighs_ticks_within_an_episode() {
        // Both episodes end with the same return, so episode credit weighs them
        // alike; per tick, the one that progressed first is credited for the ticks
        // before its progress, the late one for its own.
        let early = episode(1, 1, &[0.2, 0.2, 0.8, 0.8, 0.8]);
        let late = episode(2, 1, &[0.2, 0.2, 0.2, 0.8, 1.4]);
        let episodes = [early, late];
        let by_episode = return_advantages(&episodes, &FinetuneConfig::default(), 5);
        assert!(by_episode.iter().flatten().all(|a| a.unwrap().abs() < 1e-5));
        let config = FinetuneConfig {
            method: FinetuneMethod::AwrReturns,
            discount: 0.9,
            awr_returns: Some(AwrReturnsSettings {
                credit: ReturnCredit::ReturnToGo,
                ..AwrReturnsSettings::default()
            }),
            ..FinetuneConfig::default()
        };
        let per_tick = tick_advantages(&episodes, &config, 5);
        let a: Vec<Vec<f32>> = per_tick
            .iter()
            .map(|e| e.iter().map(|a| a.unwrap()).collect())
            .collect();
        // Ticks 0-2 share cells: the early riser's are credited, the other's not.
        for t in 0..3 {
            assert!(a[0][t] > 0.0 && a[1][t] < 0.0, "{a:?}");
        }
        // Normalised over all transitions: mean 0.
        let mean: f32 = a.iter().flatten().sum::<f32>() / 10.0;
        assert!(mean.abs() < 1e-5, "{a:?}");
    }

    #[test]
    fn dagger_keeps_the_experts_commands_and_leaves_out_the_policys() {
        let mut rollout = episode(9, 2, &[0.1, 0.2, 0.3, 0.4]);
        rollout.transitions[1].intervention = true;
        rollout.transitions[2].intervention = true;
        let episodes = vec![episode(1, 0, &[1.0, 1.0]), rollout];
        let (weights, summary) = expert_commands(&episodes);
        assert_eq!(
            weights.weights,
            vec![vec![1.0, 1.0], vec![0.0, 1.0, 1.0, 0.0]]
        );
        assert!(weights.advantages.iter().flatten().all(Option::is_none));
        assert_eq!((summary.weighted, summary.unweighted), (0, 4));
    }

    #[test]
    fn a_quick_success_outranks_lingering_near_the_goal() {
        // pusht-like rewards over a 6-tick limit: one demonstration reaches the goal
        // (reward 1) after 3 ticks and stops; another hovers at 0.9 for all 6 ticks.
        let reached = ended(1, 0, &[0.2, 0.6, 1.0], true);
        let lingered = ended(2, 0, &[0.2, 0.9, 0.9, 0.9, 0.9, 0.9], false);
        assert!((held_return(&reached, 6) - 4.8).abs() < 1e-5);
        assert!((held_return(&lingered, 6) - 4.7).abs() < 1e-5);
        // What was earned is all a failure gets, and a success at the limit gets no more.
        assert!((held_return(&ended(3, 0, &[1.0, 1.0], true), 2) - 2.0).abs() < 1e-6);
        let a = first(&return_advantages(
            &[reached, lingered],
            &FinetuneConfig::default(),
            6,
        ));
        assert!(a[0] > a[1], "{a:?}");
    }
}
