//! One episode on one robot, as every loop that drives a robot records it: scripted
//! collection, policy rollouts and evaluation (through `act::lock_step`) and the
//! daemon's actor. Each tick's command and the robot's answer become one
//! [`Transition`], and the episode's end, return and best coverage are kept here, so
//! the loops differ only in how they choose commands and where the records go.

use imago_robots::{Action, Observation, Step};

use crate::store::replay::{Episode, EpisodeEnd, EpisodeStart, Transition};

/// What commanded one tick, and with what.
#[derive(Debug, Clone, PartialEq)]
pub struct TickCommand {
    /// The command in robot units: what the transition records as its `action`.
    pub action: Action,
    /// What the robot is sent instead of `action`, where they differ: a perturbed
    /// demonstration ([`TickCommand::perturbed_demonstration`]) records the
    /// demonstrator's command as the label and sends a perturbed one. `None`: the robot
    /// is sent `action`.
    pub sent: Option<Action>,
    /// The log-density of the command under the policy that sampled it (`None` for a
    /// deterministic or scripted command).
    pub behaviour_log_prob: Option<f32>,
    /// The scripted expert (or a person) commanded instead of the policy.
    pub intervention: bool,
    /// The policy version that acted (0 for scripted demonstrations).
    pub policy_version: u64,
}

impl TickCommand {
    /// A command of the robot's scripted expert in a demonstration (no policy acted).
    pub fn demonstration(action: Action) -> Self {
        Self {
            action,
            sent: None,
            behaviour_log_prob: None,
            intervention: false,
            policy_version: 0,
        }
    }

    /// A command of the scripted expert standing in for the policy (`version`): a
    /// takeover or a coached tick, flagged as an intervention.
    pub fn intervention(action: Action, version: u64) -> Self {
        Self {
            action,
            sent: None,
            behaviour_log_prob: None,
            intervention: true,
            policy_version: version,
        }
    }

    /// A demonstration in which the robot is sent `sent`, a perturbation of the
    /// expert's `action`, while `action` is recorded as the label (DART): the
    /// demonstrations then visit states off the expert's own path, each labelled with
    /// what the expert commands there; the transition's `executed` is what the robot
    /// ran.
    pub fn perturbed_demonstration(action: Action, sent: Action) -> Self {
        Self {
            sent: Some(sent),
            ..Self::demonstration(action)
        }
    }

    /// What the robot is sent this tick.
    pub fn sent(&self) -> &Action {
        self.sent.as_ref().unwrap_or(&self.action)
    }
}

/// One episode in progress: the observation the next command answers, the ticks so
/// far, and once the robot says so, how it ended.
#[derive(Debug, Clone)]
pub struct EpisodeInProgress {
    start: EpisodeStart,
    observation: Observation,
    instruction_override: Option<String>,
    steps: u32,
    episode_return: f32,
    max_coverage: Option<f64>,
    success: Option<bool>,
}

impl EpisodeInProgress {
    /// An episode that starts as `start` says, at `observation` (the robot's reset).
    pub fn new(start: EpisodeStart, observation: Observation) -> Self {
        Self {
            start,
            observation,
            instruction_override: None,
            steps: 0,
            episode_return: 0.0,
            max_coverage: None,
            success: None,
        }
    }

    /// The policy reads `instruction` all episode instead of the robot's own (success
    /// still means the robot's goal): evaluation's wrong-instruction test.
    pub fn override_instruction(&mut self, instruction: String) {
        self.observation.instruction = instruction.clone();
        self.instruction_override = Some(instruction);
    }

    /// How the episode started.
    pub fn start(&self) -> &EpisodeStart {
        &self.start
    }

    /// The observation the next command answers.
    pub fn observation(&self) -> &Observation {
        &self.observation
    }

    /// The same, for a camera that draws its frame after the step.
    pub fn observation_mut(&mut self) -> &mut Observation {
        &mut self.observation
    }

    /// Ticks taken.
    pub fn steps(&self) -> u32 {
        self.steps
    }

    /// Whether the robot ended the episode.
    pub fn is_done(&self) -> bool {
        self.success.is_some()
    }

    /// Whether the episode ended in success (`false` while it runs).
    pub fn succeeded(&self) -> bool {
        self.success == Some(true)
    }

    /// The sum of the rewards so far.
    pub fn episode_return(&self) -> f32 {
        self.episode_return
    }

    /// The largest coverage of the goal reached so far, for robots scored by coverage,
    /// scored as gym-pusht and LeRobot score it (`clip(coverage / 0.95, 0, 1)`,
    /// [`imago_robots::pusht::coverage_score`]): 1 once the task succeeded.
    pub fn max_coverage(&self) -> Option<f64> {
        self.max_coverage
    }

    /// Records the tick that `command` caused and the robot answered with `outcome`:
    /// the transition from the current observation, which `outcome`'s replaces.
    pub fn advance(&mut self, command: TickCommand, outcome: Step) -> Transition {
        debug_assert!(!self.is_done(), "a tick after the episode ended");
        let Step {
            mut observation,
            reward,
            done,
            success,
            info,
        } = outcome;
        if let Some(coverage) = info.coverage {
            let best = self.max_coverage.get_or_insert(0.0);
            *best = best.max(imago_robots::pusht::coverage_score(coverage as f64));
        }
        if let Some(instruction) = &self.instruction_override {
            observation.instruction = instruction.clone();
        }
        let transition = Transition {
            episode: self.start.episode,
            step: self.steps,
            observation: std::mem::replace(&mut self.observation, observation),
            action: command.action,
            executed: info.executed,
            reward,
            done,
            success,
            policy_version: command.policy_version,
            intervention: command.intervention,
            behaviour_log_prob: command.behaviour_log_prob,
        };
        self.steps += 1;
        self.episode_return += reward;
        if done {
            self.success = Some(success);
        }
        transition
    }

    /// The episode's end record, once the robot ended it.
    pub fn end(&self) -> Option<EpisodeEnd> {
        self.success.map(|success| EpisodeEnd {
            episode: self.start.episode,
            steps: self.steps,
            success,
            final_observation: self.observation.clone(),
        })
    }

    /// The finished episode with its `transitions` (those [`Self::advance`] gave, in
    /// order) under the replay id `id`; `None` while it runs.
    pub fn finished(&self, id: u64, mut transitions: Vec<Transition>) -> Option<Episode> {
        let mut end = self.end()?;
        end.episode = id;
        transitions.iter_mut().for_each(|t| t.episode = id);
        Some(Episode {
            start: EpisodeStart {
                episode: id,
                ..self.start.clone()
            },
            transitions,
            end,
        })
    }
}

#[cfg(test)]
mod tests {
    use imago_robots::Robot;

    use super::*;
    use crate::robot::RobotConfig;

    #[test]
    fn ticks_become_transitions_that_replay_to_the_recorded_end() {
        let config = RobotConfig::default();
        let mut robot = config.build().unwrap();
        let observation = robot.reset(5);
        let start = EpisodeStart {
            episode: 9,
            robot: config.name().into(),
            seed: 5,
            instruction: observation.instruction.clone(),
        };
        let mut episode = EpisodeInProgress::new(start, observation.clone());
        let mut transitions = Vec::new();
        let (mut rewards, mut step) = (0.0, 0);
        while !episode.is_done() {
            let action = Action(vec![0.5, -0.25 * (step % 3) as f32]);
            let outcome = robot.step(&action);
            rewards += outcome.reward;
            let command = TickCommand::intervention(action.clone(), 4);
            let t = episode.advance(command, outcome);
            assert_eq!((t.step, t.episode), (step, 9));
            assert_eq!(t.action, action);
            assert!(t.intervention && t.policy_version == 4);
            transitions.push(t);
            step += 1;
        }
        assert_eq!(episode.steps(), robot.steps());
        assert_eq!(episode.episode_return(), rewards);
        let end = episode.end().expect("ended");
        assert_eq!(end.steps, step);
        // Replaying the recorded actions on a fresh robot gives each recorded
        // observation and the final one.
        let mut replay = config.build().unwrap();
        let mut seen = replay.reset(5);
        assert_eq!(seen, observation);
        for t in &transitions {
            assert_eq!(t.observation, seen);
            seen = replay.step(&t.action).observation;
        }
        assert_eq!(end.final_observation, seen);
        let whole = episode.finished(2, transitions).unwrap();
        assert_eq!(whole.start.episode, 2);
        assert_eq!(whole.end.episode, 2);
        assert!(whole.transitions.iter().all(|t| t.episode == 2));
    }

    #[test]
    fn an_overridden_instruction_is_what_every_observation_carries() {
        let config = RobotConfig::default();
        let mut robot = config.build().unwrap();
        let observation = robot.reset(1);
        let start = EpisodeStart {
            episode: 0,
            robot: config.name().into(),
            seed: 1,
            instruction: observation.instruction.clone(),
        };
        let mut episode = EpisodeInProgress::new(start, observation);
        episode.override_instruction("touch the other one".into());
        assert_eq!(episode.observation().instruction, "touch the other one");
        let outcome = robot.step(&Action(vec![0.1, 0.1]));
        assert_ne!(outcome.observation.instruction, "touch the other one");
        episode.advance(TickCommand::demonstration(Action(vec![0.1, 0.1])), outcome);
        assert_eq!(episode.observation().instruction, "touch the other one");
        assert!(episode.end().is_none());
        assert!(episode.finished(0, Vec::new()).is_none());
    }
}
