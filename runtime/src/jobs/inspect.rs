//! `imago inspect`: a recorded replay (and optionally a world model) turned into a
//! rerun recording, to look at what a robot did after the fact.

use std::path::Path;

use crate::device::ResolvedDevice;
use crate::jobs::train_world_model::evaluate_world_model_checkpoint_on;
use crate::learn::world_model::{WorldModelEvalReport, is_held_out};
use crate::store::checkpoint::{ensure_trained_for, load_world_model};
use crate::store::replay::{ReplaySource, read_training_replay};
use crate::telemetry::{Telemetry, TelemetryEvent, log_replay_episodes};

/// What [`inspect_replay`] logged.
#[derive(Debug, Clone, PartialEq)]
pub struct InspectSummary {
    /// Complete episodes in the replay.
    pub episodes: usize,
    /// Episodes logged step by step.
    pub logged: usize,
    /// The world model's evaluation, when one was given.
    pub world_model: Option<WorldModelEvalReport>,
}

/// Logs the replay at `replay` to `telemetry`: every episode the session's
/// `replay_episode_every` selects, step by step, with each episode's outcome. With
/// `world_model` (a checkpoint), also its rollout error per horizon on the held-out
/// episodes (every episode when fewer than two are held out) and imagined rollouts
/// beside what really followed.
pub fn inspect_replay(
    replay: ReplaySource<'_>,
    world_model: Option<&Path>,
    horizon: usize,
    device: Option<&ResolvedDevice>,
    telemetry: &Telemetry,
) -> anyhow::Result<InspectSummary> {
    let read = read_training_replay(replay)?;
    // The world model must load before anything is recorded: a checkpoint that is
    // refused leaves no recording behind.
    if let (Some(ckpt), Some(device)) = (world_model, device) {
        ensure_trained_for(ckpt, &read.spec)?;
        load_world_model::<burn::Dispatch>(ckpt, None, &device.inference)?;
    }
    let episodes = read.contents.episodes;
    telemetry.send(TelemetryEvent::Note(format!(
        "replay {}: {} episodes, {:.1}% successful",
        replay.dir.display(),
        episodes.len(),
        100.0 * episodes.iter().filter(|e| e.end.success).count() as f64 / episodes.len() as f64
    )));
    let logged = log_replay_episodes(telemetry, &episodes, read.robot.as_ref());
    let world_model = match (world_model, device) {
        (Some(ckpt), Some(device)) => {
            let held_out = episodes.iter().filter(|e| is_held_out(e.start.episode));
            let all_episodes = held_out.count() < 2;
            ensure_trained_for(ckpt, &read.spec)?;
            Some(evaluate_world_model_checkpoint_on(
                ckpt,
                &episodes,
                read.robot.as_ref(),
                horizon,
                all_episodes,
                device,
                telemetry,
            )?)
        }
        (Some(_), None) => anyhow::bail!("a world model needs a device to run on"),
        (None, _) => None,
    };
    Ok(InspectSummary {
        episodes: episodes.len(),
        logged,
        world_model,
    })
}
