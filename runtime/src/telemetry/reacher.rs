//! What reacher2d looks like in a recording: the arm, its targets and camera, from a
//! live robot or from recorded episodes.

use imago_robots::reacher2d::{Reacher2d, Reacher2dConfig, Scene, TargetColour};
use imago_robots::{Image, Robot};

use super::Telemetry;
use super::event::{
    ControlStepEvent, EpisodeEndEvent, EpisodeStartEvent, TargetMark, TelemetryEvent, TickTiming,
};
use crate::replay::Episode;

/// Index of the end effector's `x` in reacher2d proprioception (`y` follows).
const EE_PROPRIO: usize = 6;

fn point(v: nalgebra::Vector2<f32>) -> [f32; 2] {
    [v.x, v.y]
}

/// The arm of `scene` as base, elbow and end effector.
fn arm_points(scene: &Scene) -> Vec<[f32; 2]> {
    vec![
        [0.0, 0.0],
        point(scene.arm.elbow(scene.q)),
        point(scene.arm.end_effector(scene.q)),
    ]
}

/// The arm from recorded proprioception `[cos q1, sin q1, cos q2, sin q2, qd1, qd2,
/// ee_x, ee_y]` and the upper link's length.
fn arm_from_proprio(proprio: &[f32], upper: f32) -> Vec<[f32; 2]> {
    vec![
        [0.0, 0.0],
        [upper * proprio[0], upper * proprio[1]],
        end_effector_of(proprio),
    ]
}

/// The end effector's position in recorded reacher2d proprioception.
pub(super) fn end_effector_of(proprio: &[f32]) -> [f32; 2] {
    [proprio[EE_PROPRIO], proprio[EE_PROPRIO + 1]]
}

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

fn target_marks(scene: &Scene, goal: TargetColour) -> Vec<TargetMark> {
    TargetColour::ALL
        .iter()
        .map(|&colour| TargetMark {
            position: point(scene.targets[colour.index()]),
            rgb: colour.rgb(),
            label: colour.name().to_string(),
            instructed: colour == goal,
        })
        .collect()
}

/// The start of episode `episode` on `robot`, which has just been reset.
pub fn episode_start_event(robot: &Reacher2d, episode: u64, instruction: &str) -> TelemetryEvent {
    TelemetryEvent::EpisodeStart(Box::new(EpisodeStartEvent {
        episode,
        instruction: instruction.to_string(),
        targets: target_marks(&robot.scene(), robot.goal()),
        target_radius: robot.config().target_radius,
    }))
}

/// A live control step from `scene` (before the action is applied): the arm, the
/// path the intended chunk `chunk` (robot units, one action after another, each held
/// for one tick at `control_hz`) would take the end effector along, and `frame`
/// downsampled when given.
#[allow(clippy::too_many_arguments)]
pub fn control_step_event(
    scene: &Scene,
    control_hz: f32,
    episode: u64,
    step: u32,
    chunk: &[f32],
    executed: &[f32],
    frame: Option<&Image>,
    downsample_by: u32,
    policy_version: u64,
    intervention: bool,
    reward: f32,
    tick: TickTiming,
) -> TelemetryEvent {
    let arm = arm_points(scene);
    let dt = 1.0 / control_hz;
    let action_dim = executed.len().max(1);
    let mut at = *arm.last().expect("the arm has an end effector");
    let mut intended_path = vec![at];
    for velocity in chunk.chunks(action_dim) {
        at = [at[0] + velocity[0] * dt, at[1] + velocity[1] * dt];
        intended_path.push(at);
    }
    TelemetryEvent::ControlStep(Box::new(ControlStepEvent {
        episode,
        step,
        arm,
        intended_path,
        intended: chunk.iter().take(action_dim).copied().collect(),
        executed: executed.to_vec(),
        frame: frame.map(|f| downsample(f, downsample_by)),
        policy_version,
        intervention,
        reward,
        tick: Some(tick),
    }))
}

/// Logs the recorded episodes among `episodes` whose id is a multiple of the
/// session's `replay_episode_every`, step by step, waiting for room in the queue (off
/// the control path, nothing is dropped). Targets are recomputed by resetting a
/// reacher with `robot` settings to the recorded seed, and drawn only if that
/// reproduces the recorded instruction. Returns the episodes logged.
pub fn log_replay_episodes(
    telemetry: &Telemetry,
    episodes: &[Episode],
    robot: &Reacher2dConfig,
) -> usize {
    if !telemetry.is_on() {
        return 0;
    }
    let config = telemetry.config();
    let mut reacher = Reacher2d::new(robot.clone());
    let mut logged = 0;
    for episode in episodes
        .iter()
        .filter(|e| e.start.episode.is_multiple_of(config.replay_episode_every))
    {
        log_episode(telemetry, episode, &mut reacher);
        logged += 1;
    }
    logged
}

/// Logs one recorded episode step by step (see [`log_replay_episodes`]), waiting for
/// room in the queue.
pub(super) fn log_episode(telemetry: &Telemetry, episode: &Episode, reacher: &mut Reacher2d) {
    let config = telemetry.config();
    let observation = reacher.reset(episode.start.seed);
    let mut start = EpisodeStartEvent {
        episode: episode.start.episode,
        instruction: episode.start.instruction.clone(),
        targets: target_marks(&reacher.scene(), reacher.goal()),
        target_radius: reacher.config().target_radius,
    };
    if observation.instruction != episode.start.instruction {
        start.targets.clear();
    }
    telemetry.send(TelemetryEvent::EpisodeStart(Box::new(start)));
    let upper = reacher.config().link_lengths[0];
    for t in &episode.transitions {
        telemetry.send(TelemetryEvent::ControlStep(Box::new(ControlStepEvent {
            episode: t.episode,
            step: t.step,
            arm: arm_from_proprio(&t.observation.proprio, upper),
            intended_path: Vec::new(),
            intended: t.action.0.clone(),
            executed: t.executed.0.clone(),
            frame: t
                .observation
                .image
                .as_ref()
                .filter(|_| t.step.is_multiple_of(config.frame_every))
                .map(|f| downsample(f, config.frame_downsample)),
            policy_version: t.policy_version,
            intervention: t.intervention,
            reward: t.reward,
            tick: None,
        })));
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

    #[test]
    fn the_recorded_arm_matches_the_live_one() {
        let mut robot = Reacher2d::default();
        let observation = robot.reset(7);
        let live = arm_points(&robot.scene());
        let recorded = arm_from_proprio(&observation.proprio, robot.config().link_lengths[0]);
        for (a, b) in live.iter().zip(&recorded) {
            assert!((a[0] - b[0]).abs() < 1e-5 && (a[1] - b[1]).abs() < 1e-5);
        }
    }
}
