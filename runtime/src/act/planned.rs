//! Acting through a world model: the policy proposes each chunk (its Gaussian over the
//! next `K` actions), candidates drawn around it are imagined in the world model, and
//! one that imagination scores best is executed ([`imago_worldmodel::plan`]: CEM
//! rounds and MPPI's draw; docs/worldmodel.md, "Planning").
//!
//! What imagination scores: on a robot whose reward is a function of its measured
//! state (pusht's block coverage) and a model that reads its state out (a state decoder,
//! or the state in its latent), that function of each imagined state read out; else
//! the model's reward head.
//!
//! The same planner can score candidates in copies of the simulated robot instead
//! ([`ChunkPlanner::Simulator`], `act::simulated_planning`): the bound a perfect model
//! would give. A world-model planner on a simulated robot can also have its plans
//! checked there ([`WorldModelPlanner::check_in_simulator`], `act::plan_check`).

use std::path::Path;

use burn::prelude::*;
use imago_policies::{HostPolicy, Policy, PolicyBatch, PolicyConfig};
use imago_robots::{Action, Observation};
use imago_worldmodel::{
    HostWorldModel, ImaginedReturn, PlanReward, PlannedSequence, PlannerConfig,
    SequenceDistribution, WorldModel, WorldModelConfig, plan_sequences,
};
use rand::rngs::StdRng;
use rayon::prelude::*;

use crate::act::plan_check::{PlanCheck, PlanCheckReport};
use crate::act::sampling::to_robot_units;
use crate::act::simulated_planning::{SimulatorPlanner, simulated_return};
use crate::robot::{RobotConfig, SimRobot};
use crate::store::checkpoint::load_world_model;

/// Where a planner's imagined rewards come from.
#[derive(Debug, Clone, Copy)]
pub enum PlanningReward {
    /// The robot's reward of the state decoded from each imagined latent.
    DecodedState(fn(&[f32]) -> f32),
    /// The world model's reward head.
    RewardHead,
}

impl PlanningReward {
    /// What the reward is, for reports.
    pub fn describe(&self) -> &'static str {
        match self {
            Self::DecodedState(_) => "the robot's reward of the decoded state",
            Self::RewardHead => "the world model's reward head",
        }
    }
}

/// A world model loaded for planning, with the planner's settings.
pub struct WorldModelPlanner<B: Backend> {
    model: WorldModel<B>,
    config: WorldModelConfig,
    host: HostWorldModel,
    planner: PlannerConfig,
    reward: PlanningReward,
    check: Option<PlanCheck>,
}

impl<B: Backend> WorldModelPlanner<B> {
    /// The world model of checkpoint `dir` on `device`, to plan for `robot` with
    /// `planner`. A model trained for another robot, or settings out of range, are
    /// errors that name what to change.
    pub fn load(
        dir: &Path,
        planner: PlannerConfig,
        robot: &RobotConfig,
        device: &B::Device,
    ) -> anyhow::Result<Self> {
        planner
            .validate()
            .map_err(|e| anyhow::anyhow!("planner settings: {e}"))?;
        let (model, config, _) = load_world_model::<B>(dir, None, device)
            .map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
        let spec = robot.spec();
        anyhow::ensure!(
            config.proprio_dim == spec.proprio_dim() && config.action_limit == spec.action_limit,
            "{}: the world model was trained for another robot ({} proprioception entries, action limits {:?}) than {} ({} and {:?})",
            dir.display(),
            config.proprio_dim,
            config.action_limit,
            spec.summary(),
            spec.proprio_dim(),
            spec.action_limit
        );
        let host = HostWorldModel::of(&model);
        let reward = match (robot.reward_of_state(), config.reads_out_state()) {
            (Some(reward), true) => PlanningReward::DecodedState(reward),
            _ => PlanningReward::RewardHead,
        };
        Ok(Self {
            model,
            config,
            host,
            planner,
            reward,
            check: None,
        })
    }

    /// The same planner, each plan's last-round candidates also scored in a copy of
    /// the simulated robot it plans for ([`Self::check_report`]; a robot not simulated
    /// here is not checked).
    pub fn check_in_simulator(self) -> Self {
        Self {
            check: Some(PlanCheck::default()),
            ..self
        }
    }

    /// What checking the plans in the simulator found, if asked for.
    pub fn check_report(&self) -> Option<PlanCheckReport> {
        self.check.as_ref().map(PlanCheck::report)
    }

    /// Where imagined rewards come from.
    pub fn reward(&self) -> PlanningReward {
        self.reward
    }

    /// The planner's settings.
    pub fn settings(&self) -> &PlannerConfig {
        &self.planner
    }

    /// Plans one chunk `[K * A]` (units of the action limit) for each observation,
    /// from the policy's proposal for it; observation `i` draws its noise from
    /// `rngs[i]`. With the check on and the simulated `robots` the observations came
    /// from, the plans are also checked there.
    pub fn plan(
        &self,
        (observations, robots): (&[&Observation], Option<&[&SimRobot]>),
        proposals: &[SequenceDistribution],
        rngs: &mut [StdRng],
        device: &B::Device,
    ) -> anyhow::Result<Vec<PlannedSequence>> {
        let mut batch = PolicyBatch::new(&self.config.input_spec());
        for obs in observations {
            batch.push(obs)?;
        }
        let starts: Vec<f32> = self
            .model
            .encode(&batch.to_input(device))
            .into_data()
            .convert::<f32>()
            .to_vec()
            .map_err(|e| anyhow::anyhow!("cannot read the world model's latents: {e:?}"))?;
        let measured: Vec<f32> = observations
            .iter()
            .flat_map(|o| o.proprio.iter().copied())
            .collect();
        let action_dim = self.config.action_dim();
        let horizon = proposals.first().map_or(0, |p| p.mean.len() / action_dim);
        let imagined = ImaginedReturn {
            model: &self.host,
            starts: &starts,
            measured: &measured,
            reward: match &self.reward {
                PlanningReward::DecodedState(reward) => PlanReward::DecodedState(reward),
                PlanningReward::RewardHead => PlanReward::RewardHead,
            },
            horizon,
            discount: self.planner.discount,
            uncertainty_penalty: self.planner.uncertainty_penalty,
            terminal_value: self.planner.terminal_value,
        };
        let checked = self.check.as_ref().zip(robots);
        let mut last_round = (Vec::new(), Vec::new());
        let plans = plan_sequences(&self.planner, proposals, rngs, |candidates| {
            let scores = imagined.score(candidates).expect(
                "a decoded-state reward is chosen only for a model that reads out its state",
            );
            if checked.is_some() {
                last_round = (candidates.to_vec(), scores.clone());
            }
            scores
        });
        if let Some((check, robots)) = checked {
            let (candidates, scores) = last_round;
            let (n, width) = (self.planner.candidates, horizon * action_dim);
            let discount = self.planner.discount;
            let truth: Vec<f32> = candidates
                .par_chunks(width.max(1))
                .enumerate()
                .map(|(row, actions)| simulated_return(robots[row / n], actions, discount))
                .collect();
            for (s, plan) in plans.iter().enumerate() {
                let rows = s * n..(s + 1) * n;
                let chosen = simulated_return(robots[s], &plan.actions, discount);
                check.record(&scores[rows.clone()], &truth[rows], chosen);
            }
        }
        Ok(plans)
    }
}

/// What a planned policy's candidates are scored in: a learned world model, or copies
/// of the simulated robot itself.
pub enum ChunkPlanner<B: Backend> {
    /// Imagination in a world model checkpoint (boxed: the model is large, the
    /// simulator's settings small).
    WorldModel(Box<WorldModelPlanner<B>>),
    /// The robot's own simulator (evaluation on a simulated robot only).
    Simulator(SimulatorPlanner),
}

impl<B: Backend> ChunkPlanner<B> {
    /// The planner's settings.
    pub fn settings(&self) -> &PlannerConfig {
        match self {
            Self::WorldModel(planner) => planner.settings(),
            Self::Simulator(planner) => planner.settings(),
        }
    }

    /// Where candidates' rewards come from, for reports.
    pub fn describe_reward(&self) -> &'static str {
        match self {
            Self::WorldModel(planner) => planner.reward().describe(),
            Self::Simulator(_) => "the simulated robot's own rewards",
        }
    }
}

/// The policy's chunk distribution for every observation, as the planner's proposals:
/// its Gaussian head's means and standard deviations scaled by `spread` (the sampling
/// noise the policy acts with), through the host forward where there is one. A
/// policy with another head is an error.
fn policy_proposals<B: Backend>(
    (policy, config, device): (&Policy<B>, &PolicyConfig, &B::Device),
    host: Option<&HostPolicy>,
    observations: &[&Observation],
    spread: f32,
) -> anyhow::Result<Vec<SequenceDistribution>> {
    let mut batch = PolicyBatch::new(&config.input_spec());
    for obs in observations {
        batch.push(obs)?;
    }
    let (mean, log_std) = match host {
        Some(host) => host.gaussian_rows(&batch),
        None => {
            let chunk = policy.gaussian(batch.to_input(device)).ok_or_else(|| {
                anyhow::anyhow!(
                    "planning starts from a Gaussian head's chunks; this policy has a flow head"
                )
            })?;
            let read = |t: Tensor<B, 3>| -> anyhow::Result<Vec<f32>> {
                t.into_data()
                    .convert::<f32>()
                    .to_vec()
                    .map_err(|e| anyhow::anyhow!("cannot read policy output: {e:?}"))
            };
            (read(chunk.mean)?, read(chunk.log_std)?)
        }
    };
    let width = config.chunk_len() * config.action_dim();
    Ok(mean
        .chunks(width)
        .zip(log_std.chunks(width))
        .map(|(mean, log_std)| SequenceDistribution {
            mean: mean.to_vec(),
            std: log_std.iter().map(|l| l.exp() * spread).collect(),
        })
        .collect())
}

/// The actions, in robot units, that a planned policy executes from each observation
/// before it plans again: the first `executed` of the chunk `planner` plans from the
/// policy's proposal (its spread scaled by `noise`), observation `i` drawing from
/// `rngs[i]`; the planning counterpart of `sampling::leading_actions`. A simulator
/// planner needs the simulated `robots` the observations came from (`None`, as for a
/// robot in another process, is an error).
pub fn planned_leading_actions<B: Backend>(
    (policy, config, device): (&Policy<B>, &PolicyConfig, &B::Device),
    host: Option<&HostPolicy>,
    planner: &ChunkPlanner<B>,
    (observations, robots): (&[&Observation], Option<&[&SimRobot]>),
    (executed, noise): (usize, f32),
    rngs: &mut [StdRng],
) -> anyhow::Result<Vec<Vec<Action>>> {
    let proposals = policy_proposals((policy, config, device), host, observations, noise)?;
    let planned = match (planner, robots) {
        (ChunkPlanner::WorldModel(planner), robots) => {
            planner.plan((observations, robots), &proposals, rngs, device)?
        }
        (ChunkPlanner::Simulator(planner), Some(robots)) => planner.plan(robots, &proposals, rngs),
        (ChunkPlanner::Simulator(_), None) => anyhow::bail!(
            "planning in the simulator needs a robot simulated here; a robot in another process (--remote) has none to copy"
        ),
    };
    let limits = config.action_limit();
    Ok(planned
        .iter()
        .map(|plan| {
            plan.actions
                .chunks(limits.len())
                .take(executed)
                .map(|action| to_robot_units(action, limits))
                .collect()
        })
        .collect())
}
