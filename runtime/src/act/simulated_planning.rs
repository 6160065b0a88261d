//! Planning with the robot's own simulator as the model: each candidate chunk is
//! scored by stepping a copy of the episode's simulated robot through it.
//!
//! Why: planning in a learned world model (`act::planned`) mixes two things, how good
//! the planner is and how good the model is. With the true dynamics as the model the
//! same planner, proposals and settings measure the first alone: the most planning
//! could add with a perfect model (docs/worldmodel.md, "Planning"). It is a bound a
//! simulation has and a robot does not, so `imago eval --plan-with simulator` only.

use imago_robots::Robot;
use imago_worldmodel::{PlannedSequence, PlannerConfig, SequenceDistribution, plan_sequences};
use rand::rngs::StdRng;
use rayon::prelude::*;

use crate::act::sampling::to_robot_units;
use crate::robot::SimRobot;

/// The planner's settings, scoring candidates in copies of the simulated robots.
#[derive(Debug, Clone)]
pub struct SimulatorPlanner {
    settings: PlannerConfig,
}

impl SimulatorPlanner {
    /// A planner with `settings` (their uncertainty penalty and terminal value are
    /// unused: the simulator is certain and has no value head). Settings out of range
    /// are an error naming the key.
    pub fn new(settings: PlannerConfig) -> anyhow::Result<Self> {
        settings
            .validate()
            .map_err(|e| anyhow::anyhow!("planner settings: {e}"))?;
        Ok(Self { settings })
    }

    /// The planner's settings.
    pub fn settings(&self) -> &PlannerConfig {
        &self.settings
    }

    /// Plans one chunk `[K * A]` (units of the action limit) for each of `robots`
    /// (their current states), from the policy's proposal for it; robot `i` draws its
    /// noise from `rngs[i]`. Candidates are scored in parallel.
    pub fn plan(
        &self,
        robots: &[&SimRobot],
        proposals: &[SequenceDistribution],
        rngs: &mut [StdRng],
    ) -> Vec<PlannedSequence> {
        let width = proposals.first().map_or(0, |p| p.mean.len());
        let n = self.settings.candidates;
        plan_sequences(&self.settings, proposals, rngs, |candidates| {
            candidates
                .par_chunks(width.max(1))
                .enumerate()
                .map(|(row, actions)| {
                    simulated_return(robots[row / n], actions, self.settings.discount)
                })
                .collect()
        })
    }
}

/// The discounted return of `actions` (`[H * A]`, units of the robot's action limit)
/// stepped from `robot`'s current state in a copy of it: `sum_k discount^k r_k`, a
/// success holding its last reward for the ticks of the horizon it did not need (as
/// returns are counted for fine-tuning), a step limit ending it.
pub fn simulated_return(robot: &SimRobot, actions: &[f32], discount: f32) -> f32 {
    let mut copy = robot.planning_copy();
    let limits = copy.spec().action_limit.clone();
    let steps: Vec<&[f32]> = actions.chunks(limits.len()).collect();
    let (mut total, mut weight) = (0.0f32, 1.0f32);
    for (k, action) in steps.iter().enumerate() {
        let step = copy.step(&to_robot_units(action, &limits));
        total += weight * step.reward;
        weight *= discount;
        if step.done {
            if step.success {
                for _ in k + 1..steps.len() {
                    total += weight * step.reward;
                    weight *= discount;
                }
            }
            break;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use imago_robots::{Action, Robot};
    use rand::SeedableRng;

    use super::*;
    use crate::robot::RobotConfig;

    /// Scoring a candidate leaves the robot where it was, and the score is the
    /// discounted sum of the rewards the same actions earn on the robot itself.
    #[test]
    fn a_candidates_return_is_the_robots_own_and_leaves_it_untouched() {
        for config in [RobotConfig::default(), RobotConfig::named("pusht").unwrap()] {
            let mut robot = config.build().unwrap();
            robot.reset(3);
            let before = robot
                .planning_copy()
                .step(&Action(vec![0.0; 2]))
                .observation;
            let actions: Vec<f32> = (0..8).map(|i| (i as f32 * 0.3).sin() * 0.5).collect();
            let score = simulated_return(&robot, &actions, 0.9);
            let after = robot
                .planning_copy()
                .step(&Action(vec![0.0; 2]))
                .observation;
            assert_eq!(before.proprio, after.proprio, "{}", config.name());
            let limits = robot.spec().action_limit.clone();
            let mut expected = 0.0;
            for (k, action) in actions.chunks(2).enumerate() {
                let step = robot.step(&to_robot_units(action, &limits));
                expected += 0.9f32.powi(k as i32) * step.reward;
            }
            assert!(
                (score - expected).abs() < 1e-5,
                "{score} against {expected}"
            );
        }
    }

    /// With the simulator as its model and a sharp choice, the planner picks, among a
    /// proposal's candidates, one that earns at least what the proposal's mean earns
    /// (the mean is the first candidate scored).
    #[test]
    fn the_planner_does_no_worse_than_the_proposals_mean() {
        let config = RobotConfig::default();
        let mut robot = config.build().unwrap();
        robot.reset(5);
        let planner = SimulatorPlanner::new(PlannerConfig {
            candidates: 16,
            iterations: 1,
            elites: 1,
            ..PlannerConfig::default()
        })
        .unwrap();
        let proposal = SequenceDistribution {
            mean: vec![0.0; 8],
            std: vec![0.5; 8],
        };
        let mut rngs = [StdRng::seed_from_u64(2)];
        let plan = planner.plan(&[&robot], std::slice::from_ref(&proposal), &mut rngs);
        let discount = planner.settings().discount;
        let mean_return = simulated_return(&robot, &proposal.mean, discount);
        let chosen = simulated_return(&robot, &plan[0].actions, discount);
        assert!((chosen - plan[0].score).abs() < 1e-5);
        assert!(chosen >= mean_return, "{chosen} < {mean_return}");
    }
}
