//! What a robot looks like in a recording, from a live robot or from recorded
//! episodes, through the robot's drawing hooks ([`Robot::scene_drawing`],
//! [`Robot::body_from_proprio`], [`Robot::intended_path`]): nothing here knows a
//! particular robot.

use imago_robots::{Image, Robot};

use super::Telemetry;
use super::event::{
    ControlStepEvent, EpisodeEndEvent, EpisodeStartEvent, TelemetryEvent, TickTiming,
};
use crate::robot::{RobotConfig, SimRobot};
use crate::store::replay::{Episode, Transition};

/// `image` shrunk by `factor` in each direction, averaging each block.
fn downsample(image: &Image, factor: u32) -> Image {
    if factor <= 1 {
        return image.clone();
    }
    let (width, height) = (image.width / factor, image.height / factor);
    let mut rgb = Vec::with_capacity((width * height * 3) as usize);
    for y in 0..height {
        for x in 0..width {
            let mut sum = [0u32; 3];
            for dy in 0..factor {
                for dx in 0..factor {
                    let p = image.pixel(x * factor + dx, y * factor + dy);
                    for c in 0..3 {
                        sum[c] += p[c] as u32;
                    }
                }
            }
            rgb.extend(sum.map(|s| (s / (factor * factor)) as u8));
        }
    }
    Image { width, height, rgb }
}

/// The start of episode `episode` on `robot`, which has just been reset (`None`: a
/// robot imago cannot draw, such as a remote one).
pub fn episode_start_event(
    robot: Option<&dyn Robot>,
    episode: u64,
    instruction: &str,
) -> TelemetryEvent {
    TelemetryEvent::EpisodeStart(Box::new(EpisodeStartEvent {
        episode,
        instruction: instruction.to_string(),
        targets: robot.map_or_else(Vec::new, |robot| robot.scene_drawing().marks),
    }))
}

/// The control step `transition` of `robot` (taken live or recorded): the body drawn
/// from the observation's proprioception (before the action), the first action of the
/// intended `plan` and the path `intended_path` it would take the tracked point along
/// ([`Robot::intended_path`]), and the observation's frame downsampled by
/// `frame_downsample` when given. Without a robot to draw, the body is left out.
pub fn control_step_event(
    robot: Option<&dyn Robot>,
    transition: &Transition,
    plan: &[f32],
    intended_path: Vec<[f32; 2]>,
    frame_downsample: Option<u32>,
    tick: Option<TickTiming>,
) -> TelemetryEvent {
    let t = transition;
    let action_dim = t.executed.0.len().max(1);
    TelemetryEvent::ControlStep(Box::new(ControlStepEvent {
        episode: t.episode,
        step: t.step,
        arm: robot.map_or_else(Vec::new, |robot| {
            robot.body_from_proprio(&t.observation.proprio)
        }),
        intended_path,
        intended: plan.iter().take(action_dim).copied().collect(),
        executed: t.executed.0.clone(),
        frame: frame_downsample.and_then(|factor| {
            let frame = t.observation.image.as_ref()?;
            Some(downsample(frame, factor))
        }),
        policy_version: t.policy_version,
        intervention: t.intervention,
        reward: t.reward,
        tick,
    }))
}

/// Logs the recorded episodes among `episodes` whose id is a multiple of the
/// session's `replay_episode_every`, step by step, waiting for room in the queue (off
/// the control path, nothing is dropped). With the recorded robot's settings
/// (`robot`), the scene is recomputed by resetting such a robot to the recorded seed
/// and drawn only if that reproduces the recorded instruction, and the body is drawn
/// from proprioception; without them only the generic parts are logged. Returns the
/// episodes logged.
pub fn log_replay_episodes(
    telemetry: &Telemetry,
    episodes: &[Episode],
    robot: Option<&RobotConfig>,
) -> usize {
    if !telemetry.is_on() {
        return 0;
    }
    let config = telemetry.config();
    // A remote robot's replay is logged without its scene.
    let mut robot = robot.and_then(|robot| robot.build().ok());
    let mut logged = 0;
    for episode in episodes
        .iter()
        .filter(|e| e.start.episode.is_multiple_of(config.replay_episode_every))
    {
        log_episode(telemetry, episode, robot.as_mut());
        logged += 1;
    }
    logged
}

/// Logs one recorded episode step by step (see [`log_replay_episodes`]), waiting for
/// room in the queue.
pub fn log_episode(telemetry: &Telemetry, episode: &Episode, mut robot: Option<&mut SimRobot>) {
    let config = telemetry.config();
    let targets = match robot.as_deref_mut() {
        Some(robot) => {
            let reproduced =
                robot.reset(episode.start.seed).instruction == episode.start.instruction;
            if reproduced {
                robot.scene_drawing().marks
            } else {
                Vec::new()
            }
        }
        None => Vec::new(),
    };
    telemetry.send(TelemetryEvent::EpisodeStart(Box::new(EpisodeStartEvent {
        episode: episode.start.episode,
        instruction: episode.start.instruction.clone(),
        targets,
    })));
    for t in &episode.transitions {
        let drawing = robot.as_deref().map(|r| r as &dyn Robot);
        let frame = t
            .step
            .is_multiple_of(config.frame_every)
            .then_some(config.frame_downsample);
        telemetry.send(control_step_event(
            drawing,
            t,
            &t.action.0,
            Vec::new(),
            frame,
            None,
        ));
    }
    telemetry.send(TelemetryEvent::EpisodeEnd(EpisodeEndEvent {
        episode: episode.start.episode,
        steps: episode.end.steps,
        success: episode.end.success,
        episode_return: episode.transitions.iter().map(|t| t.reward).sum(),
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downsampling_averages_blocks() {
        let mut image = Image::filled(4, 2, [0, 0, 0]);
        // Left block: two white pixels of four -> half grey.
        for (x, y) in [(0, 0), (1, 1)] {
            let i = ((y * 4 + x) * 3) as usize;
            image.rgb[i..i + 3].copy_from_slice(&[255, 255, 255]);
        }
        let small = downsample(&image, 2);
        assert_eq!((small.width, small.height), (2, 1));
        assert_eq!(small.pixel(0, 0), [127, 127, 127]);
        assert_eq!(small.pixel(1, 0), [0, 0, 0]);
    }
}
