//! Windows of recorded episodes for world-model training.

use imago_policies::{PolicyBatch, PolicyInputError, discounted_returns};
use imago_robots::Observation;

use crate::store::replay::Episode;

/// Every window of `H` consecutive steps (and the `H + 1` observations around them)
/// of a set of episodes; episodes shorter than `H` steps give none.
pub struct WindowDataset<'a> {
    episodes: &'a [Episode],
    windows: Vec<(usize, usize)>,
    returns: Vec<Vec<f32>>,
    horizon: usize,
    action_limit: Vec<f32>,
}

/// Host-side targets of a batch of windows, flattened window-major.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WindowTargets {
    /// Executed actions in units of the action limit, `[n, H, A]`.
    pub actions: Vec<f32>,
    /// Rewards, `[n, H]`.
    pub rewards: Vec<f32>,
    /// 1 where the episode goes on after the step, `[n, H]`.
    pub continues: Vec<f32>,
    /// Discounted returns from each step's observation, `[n, H]`.
    pub returns: Vec<f32>,
}

/// The `k`-th observation of `episode` (the one after the last step at `k = len`).
pub fn observation_at(episode: &Episode, k: usize) -> &Observation {
    episode
        .transitions
        .get(k)
        .map_or(&episode.end.final_observation, |t| &t.observation)
}

/// The executed actions of `episode` over steps `t..t + horizon` for every `t` in
/// `starts`, in units of `limits` (clamped to [-1, 1]), window after window: the
/// `[windows, horizon, action_dim]` input of an open-loop rollout.
pub fn window_actions(
    episode: &Episode,
    starts: impl IntoIterator<Item = usize>,
    horizon: usize,
    limits: &[f32],
) -> Vec<f32> {
    starts
        .into_iter()
        .flat_map(|t| {
            (t..t + horizon).flat_map(|k| episode.transitions[k].executed.0.iter().copied())
        })
        .zip(limits.iter().cycle())
        .map(|(v, l)| (v / l).clamp(-1.0, 1.0))
        .collect()
}

/// Whether the episode stopped for good after step `k` (the task was achieved); a
/// cut at the step limit is not an end of the world, only of the recording.
fn terminates(episode: &Episode, k: usize) -> bool {
    let t = &episode.transitions[k];
    t.done && t.success
}

impl<'a> WindowDataset<'a> {
    /// Every window of `horizon` steps of `episodes`; returns are discounted by
    /// `discount` and stop at the episode's end.
    pub fn new(
        episodes: &'a [Episode],
        horizon: usize,
        action_limit: &[f32],
        discount: f32,
    ) -> Self {
        let windows = episodes
            .iter()
            .enumerate()
            .flat_map(|(e, ep)| {
                let len = ep.transitions.len();
                (0..(len + 1).saturating_sub(horizon)).map(move |t| (e, t))
            })
            .collect();
        let returns = episodes
            .iter()
            .map(|ep| {
                let rewards: Vec<f32> = ep.transitions.iter().map(|t| t.reward).collect();
                discounted_returns(&rewards, discount)
            })
            .collect();
        Self {
            episodes,
            windows,
            returns,
            horizon,
            action_limit: action_limit.to_vec(),
        }
    }

    /// Number of windows.
    pub fn len(&self) -> usize {
        self.windows.len()
    }

    /// Whether there is no window.
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }

    /// Steps per window.
    pub fn horizon(&self) -> usize {
        self.horizon
    }

    /// The episode and start step of window `i`.
    pub fn window(&self, i: usize) -> (&Episode, usize) {
        let (e, t) = self.windows[i];
        (&self.episodes[e], t)
    }

    /// Fills `starts` with the first observation of each window of `indices` and
    /// `frames` with all `H + 1` observations of each, and returns the targets.
    pub fn fill(
        &self,
        indices: &[usize],
        starts: &mut PolicyBatch,
        frames: &mut PolicyBatch,
    ) -> anyhow::Result<WindowTargets> {
        starts.clear();
        frames.clear();
        let mut targets = WindowTargets::default();
        for &i in indices {
            let (e, t) = self.windows[i];
            let episode = &self.episodes[e];
            let context = |err: PolicyInputError| {
                anyhow::anyhow!("episode {} step {t}: {err}", episode.start.episode)
            };
            starts.push(observation_at(episode, t)).map_err(context)?;
            for k in t..=t + self.horizon {
                frames.push(observation_at(episode, k)).map_err(context)?;
            }
            for k in t..t + self.horizon {
                let step = &episode.transitions[k];
                targets.actions.extend(
                    step.executed
                        .0
                        .iter()
                        .zip(&self.action_limit)
                        .map(|(v, l)| (v / l).clamp(-1.0, 1.0)),
                );
                targets.rewards.push(step.reward);
                targets
                    .continues
                    .push(if terminates(episode, k) { 0.0 } else { 1.0 });
                targets.returns.push(self.returns[e][k]);
            }
        }
        Ok(targets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::act::collect::{CollectConfig, collect_demonstrations};
    use crate::store::replay::read_replay;

    #[test]
    fn windows_cover_every_start_with_returns_and_terminal_flags() {
        let dir = tempfile::tempdir().unwrap();
        collect_demonstrations(
            &CollectConfig {
                episodes: 3,
                ..CollectConfig::default()
            },
            dir.path(),
            false,
        )
        .unwrap();
        let episodes = read_replay(dir.path()).unwrap().episodes;
        let data = WindowDataset::new(&episodes, 4, &[0.5, 0.5], 0.9);
        let expected: usize = episodes.iter().map(|e| e.transitions.len() - 3).sum();
        assert_eq!(data.len(), expected);

        let last = data.len() - 1;
        let (episode, t) = data.window(last);
        assert_eq!(t + 4, episode.transitions.len());
        let spec = imago_worldmodel::WorldModelConfig::new(8, vec![0.5, 0.5]).input_spec();
        let (mut starts, mut frames) = (PolicyBatch::new(&spec), PolicyBatch::new(&spec));
        let targets = data.fill(&[0, last], &mut starts, &mut frames).unwrap();
        assert_eq!((starts.len(), frames.len()), (2, 10));
        assert_eq!(targets.actions.len(), 2 * 4 * 2);
        assert!(targets.actions.iter().all(|a| (-1.0..=1.0).contains(a)));
        // Returns follow G_t = r_t + 0.9 G_{t+1}, ending at 0 after the last step.
        let rewards = &targets.rewards[4..];
        let returns = &targets.returns[4..];
        assert!((returns[3] - rewards[3]).abs() < 1e-6);
        assert!((returns[2] - (rewards[2] + 0.9 * returns[3])).abs() < 1e-5);
        // Only a successful last step ends the world.
        let last_continues = targets.continues[7];
        assert_eq!(last_continues == 0.0, episode.end.success);
        assert!(targets.continues[..7].iter().all(|&c| c == 1.0));
    }
}
