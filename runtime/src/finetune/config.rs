//! Settings of advantage-weighted fine-tuning.

use std::fmt;
use std::str::FromStr;

use imago_policies::{AdvantageNormaliser, HabcGate};
use imago_worldmodel::ImaginationConfig;
use serde::{Deserialize, Serialize};

use super::rollout::RolloutConfig;

/// Where advantages come from and which loss the policy is updated with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FinetuneMethod {
    /// AWR with each episode's real return as every one of its transitions'
    /// advantage, normalised within groups of episodes from the same initial state.
    AwrReturns,
    /// AWR with generalised advantage estimates on real transitions from a critic
    /// trained on imagined lambda-returns; the default.
    AwrImagination,
    /// HABC: viability and efficiency heads, the state-adaptive gate, credit only
    /// within policy-executed segments.
    Habc,
    /// AdvantageFlow: the imagination advantages with a flow-matching head, plus a
    /// regulariser toward the behaviour policy.
    AdvantageFlow,
}

impl FinetuneMethod {
    /// Every method, in a fixed order.
    pub const ALL: [Self; 4] = [
        Self::AwrReturns,
        Self::AwrImagination,
        Self::Habc,
        Self::AdvantageFlow,
    ];

    /// The name used in configs and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::AwrReturns => "awr-returns",
            Self::AwrImagination => "awr-imagination",
            Self::Habc => "habc",
            Self::AdvantageFlow => "advantage-flow",
        }
    }

    /// Whether the method trains the critic's value head in imagination.
    pub fn uses_imagination(self) -> bool {
        matches!(self, Self::AwrImagination | Self::AdvantageFlow)
    }
}

impl fmt::Display for FinetuneMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FinetuneMethod {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown fine-tuning method `{s}`; use one of {}",
                    Self::ALL.map(Self::name).join(", ")
                )
            })
    }
}

/// Everything a fine-tuning run needs to know; every field has a default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FinetuneConfig {
    /// Advantage source and policy loss.
    pub method: FinetuneMethod,
    /// Collect-update rounds; each bumps the policy version.
    pub rounds: usize,
    /// Policy episodes collected per round.
    pub episodes_per_round: usize,
    /// Episodes per initial state (the group of return normalisation).
    pub group_size: usize,
    /// How episodes are collected (exploration, takeover).
    pub rollout: RolloutConfig,
    /// Policy optimiser steps per round.
    pub policy_steps: usize,
    /// Transitions per policy step.
    pub batch_size: usize,
    /// Policy learning rate (Adam, constant).
    pub learning_rate: f64,
    /// AWR temperature: weights are `exp(A / beta)`.
    pub beta: f32,
    /// Largest AWR weight.
    pub max_weight: f32,
    /// How raw advantages are normalised.
    pub normaliser: AdvantageNormaliser,
    /// Discount of returns and advantages.
    pub discount: f32,
    /// Lambda of lambda-returns and generalised advantages.
    pub lambda: f32,
    /// World-model steps per round, on all replay so far.
    pub world_model_steps: usize,
    /// Offline fine-tuning without a world-model checkpoint: steps of the world model
    /// trained on the replay before the first round.
    pub initial_world_model_steps: usize,
    /// Critic steps per round.
    pub critic_steps: usize,
    /// Imagined start states per critic step.
    pub critic_batch: usize,
    /// Critic learning rate (Adam).
    pub critic_learning_rate: f64,
    /// Horizon and uncertainty penalty of imagination.
    pub imagination: ImaginationConfig,
    /// Policy transitions older than this many versions are not trained on.
    pub max_staleness: u64,
    /// Truncation bound of importance weights.
    pub max_importance_ratio: f32,
    /// AdvantageFlow: weight of the pull toward the behaviour policy.
    pub flow_regulariser: f64,
    /// HABC: the gate between viability and efficiency.
    pub gate: HabcGate,
    /// Seed of sampling and initial weights.
    pub seed: u64,
}

impl Default for FinetuneConfig {
    fn default() -> Self {
        Self {
            method: FinetuneMethod::AwrImagination,
            rounds: 3,
            episodes_per_round: 100,
            group_size: 4,
            rollout: RolloutConfig::default(),
            policy_steps: 400,
            batch_size: 32,
            learning_rate: 1e-3,
            beta: 1.0,
            max_weight: 20.0,
            normaliser: AdvantageNormaliser::MeanStd,
            discount: 0.95,
            lambda: 0.95,
            world_model_steps: 150,
            initial_world_model_steps: 1000,
            critic_steps: 150,
            critic_batch: 128,
            critic_learning_rate: 1e-3,
            imagination: ImaginationConfig::default(),
            max_staleness: 2,
            max_importance_ratio: 2.0,
            flow_regulariser: 0.5,
            gate: HabcGate::default(),
            seed: 0,
        }
    }
}

impl FinetuneConfig {
    /// Whether data recorded by policy version `recorded` is fresh enough to train
    /// the policy version `next` (at most `max_staleness` versions older).
    pub fn within_staleness(&self, recorded: u64, next: u64) -> bool {
        recorded + self.max_staleness >= next
    }

    /// Checks the settings; a message names the first bad one.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("rounds", self.rounds),
            ("episodes_per_round", self.episodes_per_round),
            ("group_size", self.group_size),
            ("batch_size", self.batch_size),
            ("critic_batch", self.critic_batch),
            ("initial_world_model_steps", self.initial_world_model_steps),
            ("imagination.horizon", self.imagination.horizon),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{name} must be at least 1"));
        }
        if !(self.beta.is_finite() && self.beta > 0.0) {
            return Err(format!("beta must be positive, not {}", self.beta));
        }
        if !(self.max_weight >= 1.0 && self.max_importance_ratio >= 1.0) {
            return Err("max_weight and max_importance_ratio must be at least 1".into());
        }
        if !((0.0..=1.0).contains(&self.discount) && (0.0..=1.0).contains(&self.lambda)) {
            return Err("discount and lambda must lie in [0, 1]".into());
        }
        self.normaliser.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_names_round_trip_and_configs_validate() {
        for method in FinetuneMethod::ALL {
            assert_eq!(method.name().parse::<FinetuneMethod>(), Ok(method));
        }
        assert!(
            "ppo"
                .parse::<FinetuneMethod>()
                .unwrap_err()
                .contains("awr-returns")
        );
        assert_eq!(FinetuneConfig::default().validate(), Ok(()));
        let bad = FinetuneConfig {
            group_size: 0,
            ..FinetuneConfig::default()
        };
        assert!(bad.validate().unwrap_err().contains("group_size"));
        let parsed: FinetuneConfig =
            toml::from_str("method = \"habc\"\nnormaliser = { kind = \"constant\", k = 60.0 }")
                .unwrap();
        assert_eq!(parsed.method, FinetuneMethod::Habc);
        assert_eq!(parsed.normaliser, AdvantageNormaliser::Constant { k: 60.0 });
        assert!(toml::from_str::<FinetuneConfig>("betta = 1.0").is_err());
    }
}
