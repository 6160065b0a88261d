//! Simulated robots stepped in lock-step, one episode each: the episode runner of
//! collection, policy rollouts and evaluation. Each tick the caller commands the
//! running lanes (a policy sees their observations as one batch); [`LockStep::step`]
//! steps them, records each tick through [`EpisodeInProgress`], watches for a stalled
//! policy and draws the new frames (one dispatch on a wgpu GPU).
//!
//! The daemon's actor records its episodes through the same [`EpisodeInProgress`] but
//! drives one robot at its control rate, which may be remote, so it has its own loop
//! (`engine::actor`).

use imago_robots::{Action, Observation, Robot};

use crate::act::camera::BatchCamera;
use crate::act::episode::{EpisodeInProgress, TickCommand};
use crate::act::takeover::{TakeoverConfig, TakeoverWatch};
use crate::robot::{RobotConfig, SimRobot};
use crate::store::replay::{EpisodeStart, Transition};

/// One robot and its episode.
pub struct Lane {
    /// The robot.
    pub robot: SimRobot,
    /// Its episode so far.
    pub episode: EpisodeInProgress,
    /// Whether its scripted expert has taken over a stalled policy.
    pub takeover: TakeoverWatch,
}

impl Lane {
    /// The seed the robot was reset to.
    pub fn seed(&self) -> u64 {
        self.episode.start().seed
    }

    /// The command of the robot's started scripted expert.
    pub fn expert_action(&mut self) -> anyhow::Result<Action> {
        self.robot
            .expert_action()
            .ok_or_else(|| anyhow::anyhow!("the scripted expert was not started"))
    }
}

/// The lanes of one lock-step run, and the camera that draws their frames.
pub struct LockStep<'c> {
    lanes: Vec<Lane>,
    camera: &'c BatchCamera,
}

impl<'c> LockStep<'c> {
    /// One robot of `robot` per seed, reset to it, with its frame drawn; a stalled
    /// policy is taken over as `takeover` says (never without one).
    pub fn start(
        robot: &RobotConfig,
        seeds: &[u64],
        camera: &'c BatchCamera,
        takeover: Option<&TakeoverConfig>,
    ) -> anyhow::Result<Self> {
        let mut lanes = seeds
            .iter()
            .map(|&seed| {
                let mut sim = robot.build()?;
                sim.set_frame_source(camera.frame_source());
                let observation: Observation = sim.reset(seed);
                let start = EpisodeStart {
                    episode: 0,
                    robot: robot.name().to_string(),
                    seed,
                    instruction: observation.instruction.clone(),
                };
                Ok(Lane {
                    takeover: TakeoverWatch::new(takeover, &sim),
                    robot: sim,
                    episode: EpisodeInProgress::new(start, observation),
                })
            })
            .collect::<anyhow::Result<Vec<Lane>>>()?;
        camera.fill(
            lanes
                .iter_mut()
                .map(|lane| (&lane.robot, lane.episode.observation_mut())),
        )?;
        Ok(Self { lanes, camera })
    }

    /// The lanes, in seed order.
    pub fn lanes(&self) -> &[Lane] {
        &self.lanes
    }

    /// The same, to command or start experts.
    pub fn lanes_mut(&mut self) -> &mut [Lane] {
        &mut self.lanes
    }

    /// Whether any episode still runs.
    pub fn any_running(&self) -> bool {
        self.lanes.iter().any(|lane| !lane.episode.is_done())
    }

    /// The lanes whose episode still runs.
    pub fn running(&self) -> Vec<usize> {
        (0..self.lanes.len())
            .filter(|&i| !self.lanes[i].episode.is_done())
            .collect()
    }

    /// Steps every lane that has a command (`commands[i]` for lane `i`) and returns
    /// the tick's transitions with their lanes. A command for a finished episode is an
    /// error; after the step, the robot's expert takes over a stalled policy, and the
    /// new frames are drawn before anything reads them.
    pub fn step(
        &mut self,
        commands: Vec<Option<TickCommand>>,
    ) -> anyhow::Result<Vec<(usize, Transition)>> {
        anyhow::ensure!(
            commands.len() == self.lanes.len(),
            "{} commands for {} robots",
            commands.len(),
            self.lanes.len()
        );
        let mut stepped = Vec::new();
        for (i, (lane, command)) in self.lanes.iter_mut().zip(commands).enumerate() {
            let Some(command) = command else { continue };
            anyhow::ensure!(!lane.episode.is_done(), "a command after episode end");
            let outcome = lane.robot.step(command.sent());
            let transition = lane.episode.advance(command, outcome);
            let seed = lane.seed();
            lane.takeover
                .observe(&mut lane.robot, seed, lane.episode.is_done());
            stepped.push((i, transition));
        }
        let mut drawn = stepped.iter().map(|(i, _)| *i).peekable();
        self.camera.fill(
            self.lanes
                .iter_mut()
                .enumerate()
                .filter(|(i, _)| drawn.next_if_eq(i).is_some())
                .map(|(_, lane)| (&lane.robot, lane.episode.observation_mut())),
        )?;
        Ok(stepped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_step_only_when_commanded_and_stop_at_their_end() {
        let robot = crate::robot::reacher2d_with("max_steps = 4");
        let camera = BatchCamera::PerRobot;
        let mut run = LockStep::start(&robot, &[3, 4], &camera, None).unwrap();
        let command = || Some(TickCommand::demonstration(Action(vec![0.2, 0.1])));
        // Lane 1 waits a tick: its episode ends a tick after lane 0's.
        let first = run.step(vec![command(), None]).unwrap();
        assert_eq!(first.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [0]);
        let mut ticks = 1;
        while !run.lanes()[0].episode.is_done() {
            run.step(vec![command(), command()]).unwrap();
            ticks += 1;
        }
        assert_eq!(ticks, 4);
        assert_eq!(run.running(), [1]);
        assert!(run.step(vec![command(), None]).is_err());
        run.step(vec![None, command()]).unwrap();
        assert!(!run.any_running());
        let lanes = run.lanes();
        assert_eq!(lanes[1].episode.steps(), 4);
        assert_eq!(lanes[1].seed(), 4);
        // Each lane's frames are the robot's own after its last step.
        let mut replay = robot.build().unwrap();
        replay.reset(4);
        let mut last = None;
        for _ in 0..4 {
            last = Some(replay.step(&Action(vec![0.2, 0.1])).observation);
        }
        assert_eq!(
            lanes[1].episode.end().unwrap().final_observation,
            last.unwrap()
        );
    }
}
