//! Episodes built from a list of rewards, for the advantage tests.

use imago_robots::{Action, Observation};

use crate::store::replay::{Episode, EpisodeEnd, EpisodeStart, Transition};

/// An episode from initial state `seed`, recorded by `version` (0: a
/// demonstration), with one transition per reward.
pub(super) fn episode(seed: u64, version: u64, rewards: &[f32]) -> Episode {
    ended(seed, version, rewards, false)
}

/// [`episode`], ended in `success` or not.
pub(super) fn ended(seed: u64, version: u64, rewards: &[f32], success: bool) -> Episode {
    let observation = Observation {
        image: None,
        proprio: vec![0.0],
        instruction: String::new(),
    };
    let transitions = rewards
        .iter()
        .enumerate()
        .map(|(step, &reward)| Transition {
            episode: seed,
            step: step as u32,
            observation: observation.clone(),
            action: Action(vec![0.0]),
            executed: Action(vec![0.0]),
            reward,
            done: step + 1 == rewards.len(),
            success: success && step + 1 == rewards.len(),
            policy_version: version,
            intervention: false,
            behaviour_log_prob: None,
        })
        .collect();
    Episode {
        start: EpisodeStart {
            episode: seed,
            robot: "test".into(),
            seed,
            instruction: String::new(),
        },
        transitions,
        end: EpisodeEnd {
            episode: seed,
            steps: rewards.len() as u32,
            success,
            final_observation: observation,
        },
    }
}
