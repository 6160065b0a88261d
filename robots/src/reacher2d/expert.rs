//! The scripted reacher2d expert: inverse kinematics picks a reachable goal point and
//! elbow, a saturated proportional controller drives the end effector there.
//!
//! Demonstrations can be made imperfect on purpose: Gaussian action noise, and a rate of
//! episodes in which the expert goes to a wrong target (`mistake_rate`).

use nalgebra::Vector2;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Normal};

use super::Reacher2d;
use super::scene::TargetColour;
use crate::expert::ExpertConfig;
use crate::observation::Action;

/// Proportional gain of the expert's end-effector controller, 1/s.
const GAIN: f32 = 2.5;

/// A scripted controller that reads the robot's privileged state.
#[derive(Debug)]
pub struct ScriptedExpert {
    config: ExpertConfig,
    rng: StdRng,
    goal: TargetColour,
}

impl ScriptedExpert {
    /// An expert with the given imperfections.
    pub fn new(config: ExpertConfig) -> Self {
        Self {
            config,
            rng: StdRng::seed_from_u64(0),
            goal: TargetColour::Red,
        }
    }

    /// Starts an episode: draws this episode's noise stream and decides, with
    /// probability `wrong_target_rate`, to go to a wrong target.
    pub fn begin_episode(&mut self, robot: &Reacher2d, seed: u64) {
        self.rng = StdRng::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15);
        self.goal = robot.goal();
        if self
            .rng
            .random_bool(self.config.mistake_rate.clamp(0.0, 1.0))
        {
            let others: Vec<TargetColour> = TargetColour::ALL
                .into_iter()
                .filter(|&c| c != robot.goal())
                .collect();
            self.goal = others[self.rng.random_range(0..others.len())];
        }
    }

    /// The target this episode's demonstration goes to.
    pub fn goal(&self) -> TargetColour {
        self.goal
    }

    /// The expert's command for the robot's current state.
    pub fn act(&mut self, robot: &Reacher2d) -> Action {
        let scene = robot.scene();
        let limit = robot.config().max_speed;
        let goal = scene.arm.reachable(scene.targets[self.goal.index()]);
        let ee = robot.end_effector();
        let mut v: Vector2<f32> = (goal - ee) * GAIN;
        let speed = v.amax();
        if speed > limit {
            v *= limit / speed;
        }
        if self.config.noise > 0.0 {
            let normal = Normal::new(0.0, self.config.noise * limit).expect("finite noise");
            v.x += normal.sample(&mut self.rng);
            v.y += normal.sample(&mut self.rng);
        }
        Action(vec![v.x.clamp(-limit, limit), v.y.clamp(-limit, limit)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::robot::Robot;

    fn success_rate(config: ExpertConfig, episodes: u64) -> f64 {
        let mut robot = Reacher2d::default();
        let mut expert = ScriptedExpert::new(config);
        let mut successes = 0;
        for seed in 0..episodes {
            robot.reset(seed);
            expert.begin_episode(&robot, seed);
            loop {
                let step = robot.step(&expert.act(&robot));
                if step.done {
                    successes += step.success as u32;
                    break;
                }
            }
        }
        successes as f64 / episodes as f64
    }

    #[test]
    fn noiseless_expert_always_succeeds() {
        let config = ExpertConfig {
            noise: 0.0,
            mistake_rate: 0.0,
        };
        assert_eq!(success_rate(config, 200), 1.0);
    }

    #[test]
    fn wrong_target_rate_lowers_success_by_about_that_rate() {
        let config = ExpertConfig {
            noise: 0.0,
            mistake_rate: 0.5,
        };
        let rate = success_rate(config, 400);
        assert!((0.38..=0.62).contains(&rate), "{rate}");
    }

    #[test]
    fn noisy_expert_still_mostly_succeeds() {
        let rate = success_rate(
            ExpertConfig {
                mistake_rate: 0.0,
                ..ExpertConfig::default()
            },
            200,
        );
        assert!(rate > 0.9, "{rate}");
    }
}
