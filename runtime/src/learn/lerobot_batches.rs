//! Training batches of a LeRobot policy from recorded episodes, as LeRobot's dataset
//! reads an episode through the policy's delta timestamps: for a transition at tick
//! `t`, the observations and actions at ticks `t + offset`, an index outside the
//! episode clamped to its edge and flagged as padding (`action_is_pad`). As for imago's
//! policies (`learn::bc::chunk_from`), an intervention's actions end where the
//! intervention does: the commands after it are the policy's, not what the expert
//! meant to do next, so they count as padding.

use burn::Dispatch;
use burn::prelude::*;
use imago_policies::act::ActDemonstrations;
use imago_policies::diffusion::{DemonstrationBatch, ImageCrop, ObservationHistory};
use imago_policies::lerobot::TickObservation;

use crate::act::lerobot_driver::LeRobotBinding;
use crate::learn::bc::chunk_from;
use crate::store::replay::{Episode, Transition};

/// Diffusion Policy's batch of `samples` (transitions `(e, t)` of `episodes`): the
/// `n_obs_steps` observations up to `t`, and the `horizon` actions from the oldest of
/// them on; its images cropped where `crop` says.
pub fn diffusion_batch(
    binding: &LeRobotBinding<Dispatch>,
    (episodes, samples): (&[Episode], &[(usize, usize)]),
    (n_obs_steps, horizon): (usize, usize),
    crop: ImageCrop,
) -> anyhow::Result<DemonstrationBatch<Dispatch>> {
    let first = 1 - n_obs_steps as isize;
    let mut steps = Vec::with_capacity(n_obs_steps);
    for j in 0..n_obs_steps {
        let ticks = samples
            .iter()
            .map(|&(e, t)| observation_at(binding, &episodes[e], t, first + j as isize))
            .collect::<anyhow::Result<Vec<_>>>()?;
        steps.push(TickObservation::cat(ticks));
    }
    let (actions, action_is_pad) = action_windows(binding, (episodes, samples), first, horizon);
    Ok(DemonstrationBatch {
        history: ObservationHistory::stacked(&steps),
        actions,
        action_is_pad: Some(action_is_pad),
        crop,
    })
}

/// ACT's batch of `samples`: the observation at `t` and the `chunk_size` actions from
/// `t` on.
pub fn act_batch(
    binding: &LeRobotBinding<Dispatch>,
    (episodes, samples): (&[Episode], &[(usize, usize)]),
    chunk_size: usize,
) -> anyhow::Result<ActDemonstrations<Dispatch>> {
    let ticks = samples
        .iter()
        .map(|&(e, t)| observation_at(binding, &episodes[e], t, 0))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let (actions, action_is_pad) = action_windows(binding, (episodes, samples), 0, chunk_size);
    Ok(ActDemonstrations {
        observation: TickObservation::cat(ticks),
        actions,
        action_is_pad,
    })
}

/// The observation of `episode` at tick `t + offset`, clamped to the episode.
fn observation_at(
    binding: &LeRobotBinding<Dispatch>,
    episode: &Episode,
    t: usize,
    offset: isize,
) -> anyhow::Result<TickObservation<Dispatch>> {
    let last = episode.transitions.len() - 1;
    let k = (t as isize + offset).clamp(0, last as isize) as usize;
    binding
        .tick_observation(&episode.transitions[k].observation)
        .map_err(|e| anyhow::anyhow!("episode {} step {k}: {e}", episode.start.episode))
}

/// The `len` actions from tick `t + first` on of every sample `[batch, len,
/// action_dim]` in LeRobot's units, and which of them are padding `[batch, len]`.
fn action_windows(
    binding: &LeRobotBinding<Dispatch>,
    (episodes, samples): (&[Episode], &[(usize, usize)]),
    first: isize,
    len: usize,
) -> (Tensor<Dispatch, 3>, Tensor<Dispatch, 2, Bool>) {
    let device = binding.device();
    let mut values = Vec::new();
    let mut pads = Vec::with_capacity(samples.len() * len);
    let mut width = 0;
    for &(e, t) in samples {
        let transitions = &episodes[e].transitions;
        for (k, pad) in action_window(transitions, t, first, len) {
            let action = binding.lerobot_action(&transitions[k].action);
            width = action.len();
            values.extend(action);
            pads.push(pad);
        }
    }
    (
        Tensor::from_data(TensorData::new(values, [samples.len(), len, width]), device),
        Tensor::from_data(TensorData::new(pads, [samples.len(), len]), device),
    )
}

/// The ticks whose actions fill a window of `len` from `t + first` in `transitions`,
/// each with whether it is padding: outside the episode, or past the end of the chunk
/// of `t` (an intervention's). Padding repeats the nearest tick inside.
fn action_window(
    transitions: &[Transition],
    t: usize,
    first: isize,
    len: usize,
) -> impl Iterator<Item = (usize, bool)> {
    // Ticks from `t` on that belong to the sample's chunk.
    let ahead = chunk_from(transitions, t).count() as isize;
    (0..len as isize).map(move |j| {
        let offset = first + j;
        let k = t as isize + offset;
        let pad = k < 0 || offset >= ahead;
        (k.clamp(0, t as isize + ahead - 1) as usize, pad)
    })
}

#[cfg(test)]
mod tests {
    use imago_robots::{Action, Observation};

    use super::*;

    /// Transitions whose interventions are `flags`.
    fn transitions(flags: &[bool]) -> Vec<Transition> {
        flags
            .iter()
            .enumerate()
            .map(|(step, &intervention)| Transition {
                episode: 0,
                step: step as u32,
                observation: Observation {
                    image: None,
                    proprio: vec![step as f32],
                    instruction: String::new(),
                },
                action: Action(vec![step as f32]),
                executed: Action(vec![step as f32]),
                reward: 0.0,
                done: step + 1 == flags.len(),
                success: false,
                policy_version: 1,
                intervention,
                behaviour_log_prob: None,
            })
            .collect()
    }

    #[test]
    fn windows_pad_outside_the_episode_and_past_an_interventions_end() {
        let policy = transitions(&[false; 5]);
        let window = |episode: &[Transition], t, first, len| -> Vec<(usize, bool)> {
            action_window(episode, t, first, len).collect()
        };
        // Diffusion's window: one tick of history (before the start: padding, a copy
        // of tick 0), then on past the end (padding, copies of the last tick).
        assert_eq!(
            window(&policy, 0, -1, 4),
            [(0, true), (0, false), (1, false), (2, false)]
        );
        assert_eq!(
            window(&policy, 3, -1, 4),
            [(2, false), (3, false), (4, false), (4, true)]
        );
        // ACT's window from the tick on.
        assert_eq!(window(&policy, 4, 0, 2), [(4, false), (4, true)]);
        // An intervention's chunk ends where the intervention does; history before it
        // is kept.
        let coached = transitions(&[false, true, true, false, false]);
        assert_eq!(
            window(&coached, 1, -1, 4),
            [(0, false), (1, false), (2, false), (2, true)]
        );
        // The policy's own tick reads on through its episode.
        assert_eq!(
            window(&coached, 3, 0, 3),
            [(3, false), (4, false), (4, true)]
        );
    }
}
