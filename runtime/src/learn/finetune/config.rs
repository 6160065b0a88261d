//! Settings of advantage-weighted fine-tuning.

use std::fmt;
use std::str::FromStr;

use imago_policies::lora::LoraConfig;
use imago_policies::{AdvantageNormaliser, HabcGate};
use imago_robots::bounds::{ConfigError, in_range};

use crate::learn::weight_average::WeightAverageConfig;
use crate::learn::{MAX_BATCH, MAX_STEPS};
use imago_worldmodel::ImaginationConfig;
use serde::{Deserialize, Serialize};

use crate::act::rollout::RolloutConfig;

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
    /// DAgger: imitation of the expert's commands alone, the demonstrations and every
    /// intervention (takeovers, coached stretches: `rollout.coaching`) at weight 1,
    /// the policy's own commands left out. Its rollouts contribute the states the
    /// policy's mistakes lead to, labelled by whoever corrected them.
    Dagger,
    /// PPO's clipped-ratio objective over the policy's own sampled chunks, credited
    /// per tick by their return to go against the round's own baseline, with the
    /// demonstrations and interventions imitated alongside (`[ppo_returns]`). Signed:
    /// a sample that did worse than usual is made less likely, not only a better one
    /// more, and the ratio's clip bounds how far one round moves the policy. Gaussian
    /// heads only.
    PpoReturns,
}

impl FinetuneMethod {
    /// Every method, in a fixed order.
    pub const ALL: [Self; 6] = [
        Self::AwrReturns,
        Self::AwrImagination,
        Self::Habc,
        Self::AdvantageFlow,
        Self::Dagger,
        Self::PpoReturns,
    ];

    /// The name used in configs and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::AwrReturns => "awr-returns",
            Self::AwrImagination => "awr-imagination",
            Self::Habc => "habc",
            Self::AdvantageFlow => "advantage-flow",
            Self::Dagger => "dagger",
            Self::PpoReturns => "ppo-returns",
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

/// Which of an episode's returns `awr-returns` credits each transition with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReturnCredit {
    /// Every transition gets its episode's return (over `max_steps`, a success held
    /// at its last reward), normalised within `return_groups`.
    #[default]
    Episode,
    /// Each transition gets its discounted return to go (`discount`) minus the mean
    /// return to go of the transitions that started from the same reward level at the
    /// same time in their episodes, normalised over all transitions
    /// (`return_groups` does not apply): credit for the ticks after which the robot
    /// progressed faster than usual from where it was.
    ReturnToGo,
}

/// What `ppo-returns` measures a sample's return to go against.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PpoBaseline {
    /// The mean return to go of the round's transitions from the same reward level
    /// at the same time (`return_credit`): no model, the state known only by its
    /// reward.
    Table,
    /// A value of the proprioception fitted to the round's returns to go (two folds,
    /// each valued by the other's fit), and generalised advantages over it with the
    /// config's `lambda` (`state_value`); the default.
    #[default]
    StateValue,
}

/// Which episodes' returns `awr-returns` normalises together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReturnGroups {
    /// Episodes that share an initial state (the demonstrations form one group):
    /// the best of a group of failures weighs as much as the best demonstration.
    #[default]
    PerStart,
    /// Every episode in one group, demonstrations and rollouts alike: a rollout
    /// weighs more than a demonstration only when its return is higher, as in AWR with
    /// a constant baseline over all replay.
    Pooled,
}

/// Everything a fine-tuning run needs to know; every field has a default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FinetuneConfig {
    /// Advantage source and policy loss.
    pub method: FinetuneMethod,
    /// Collect-update rounds; each bumps the policy version. Range: [1, 10000].
    pub rounds: usize,
    /// Policy episodes collected per round. Range: [1, 10000].
    pub episodes_per_round: usize,
    /// Episodes per initial state (the group of return normalisation). Range: [1, 1024].
    pub group_size: usize,
    /// How episodes are collected (exploration, takeover, coaching).
    pub rollout: RolloutConfig,
    /// Policy optimiser steps per round. Range: [0, 10000000].
    pub policy_steps: usize,
    /// Transitions per policy step. Range: [1, 4096].
    pub batch_size: usize,
    /// Policy learning rate (Adam, constant). Range: [1e-9, 1].
    pub learning_rate: f64,
    /// A LeRobot policy's learning rate (Adam, constant); unset, its own
    /// `optimizer_lr` from its `config.json` (the rate LeRobot trained it at: 1e-4 for
    /// Diffusion Policy, 1e-5 for ACT by default). Range: [1e-9, 1].
    pub lerobot_learning_rate: Option<f64>,
    /// A LeRobot policy fine-tuned through LoRA adapters of its transformer (ACT) or
    /// U-Net (Diffusion) linear layers, every other weight frozen (`[lora]` with `rank`
    /// and `alpha`; docs/lerobot-policies.md); unset, every weight learns. imago's own
    /// policies train whole and refuse it.
    pub lora: Option<LoraConfig>,
    /// Each round's update returns the moving average of the policy's weights over
    /// its steps (`[weight_average]`, `learn::weight_average`; the average starts
    /// afresh at the round's starting weights) instead of the last step's; unset, the
    /// last step's.
    pub weight_average: Option<WeightAverageConfig>,
    /// AWR temperature: weights are `exp(A / beta)`. Range: [1e-6, 1e6].
    pub beta: f32,
    /// Largest AWR weight. Range: [1, 1e9].
    pub max_weight: f32,
    /// How raw advantages are normalised.
    pub normaliser: AdvantageNormaliser,
    /// Discount of returns and advantages. Range: [0, 1].
    pub discount: f32,
    /// Lambda of lambda-returns and generalised advantages. Range: [0, 1].
    pub lambda: f32,
    /// World-model steps per round, on all replay so far. Range: [0, 10000000].
    pub world_model_steps: usize,
    /// Offline fine-tuning without a world-model checkpoint: steps of the world model
    /// trained on the replay before the first round. Range: [1, 10000000].
    pub initial_world_model_steps: usize,
    /// Critic steps per round. Range: [0, 10000000].
    pub critic_steps: usize,
    /// Imagined start states per critic step. Range: [1, 65536].
    pub critic_batch: usize,
    /// Critic learning rate (Adam). Range: [1e-9, 1].
    pub critic_learning_rate: f64,
    /// Horizon and uncertainty penalty of imagination.
    pub imagination: ImaginationConfig,
    /// Policy transitions older than this many versions are not trained on. Range:
    /// [0, 1000000].
    pub max_staleness: u64,
    /// Truncation bound of importance weights. Range: [1, 1e6].
    pub max_importance_ratio: f32,
    /// Seed of sampling and initial weights. Any value.
    pub seed: u64,
    /// `awr-returns`' own settings (`[awr_returns]`; only with that method).
    pub awr_returns: Option<AwrReturnsSettings>,
    /// `advantage-flow`'s own settings (`[advantage_flow]`; only with that method).
    pub advantage_flow: Option<AdvantageFlowSettings>,
    /// `habc`'s own settings (`[habc]`; only with that method).
    pub habc: Option<HabcSettings>,
    /// `ppo-returns`' own settings (`[ppo_returns]`; only with that method).
    pub ppo_returns: Option<PpoReturnsSettings>,
}

/// Settings only `awr-returns` reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AwrReturnsSettings {
    /// Which episodes' returns are normalised together (episode credit).
    pub return_groups: ReturnGroups,
    /// Which return each transition is credited with.
    pub credit: ReturnCredit,
}

/// Settings only `advantage-flow` reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdvantageFlowSettings {
    /// Weight of the pull toward the behaviour policy. Range: [0, 1000].
    pub regulariser: f64,
}

impl Default for AdvantageFlowSettings {
    fn default() -> Self {
        Self { regulariser: 0.5 }
    }
}

/// Settings only `habc` reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HabcSettings {
    /// The gate between viability and efficiency.
    pub gate: HabcGate,
}

/// Settings only `ppo-returns` reads.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PpoReturnsSettings {
    /// The ratio's clip: a sample's probability ratio to the policy that drew it
    /// stops pulling once it leaves `[1 - clip, 1 + clip]` in the direction its
    /// advantage pushes. Range: [0.01, 1].
    pub clip: f32,
    /// Share of each batch drawn from the imitated transitions (demonstrations and
    /// interventions), the rest from the round's own sampled chunks; where either is
    /// missing the batch is all of the other. Range: [0, 0.99].
    pub imitation_share: f32,
    /// Weight of each imitated transition against a sampled chunk's advantage (whose
    /// magnitudes average about 0.8 after normalisation). Range: [0, 1000].
    pub imitation_weight: f32,
    /// What each sample's return to go is measured against.
    pub baseline: PpoBaseline,
    /// Training steps (of 256 states) of each fold's state value per round, under
    /// `baseline = "state-value"`. Range: [1, 100000].
    pub value_steps: usize,
}

impl Default for PpoReturnsSettings {
    fn default() -> Self {
        Self {
            clip: 0.2,
            imitation_share: 0.5,
            imitation_weight: 1.0,
            baseline: PpoBaseline::StateValue,
            value_steps: 500,
        }
    }
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
            lerobot_learning_rate: None,
            lora: None,
            weight_average: None,
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
            seed: 0,
            awr_returns: None,
            advantage_flow: None,
            habc: None,
            ppo_returns: None,
        }
    }
}

impl FinetuneConfig {
    /// Whether data recorded by policy version `recorded` is fresh enough to train
    /// the policy version `next` (at most `max_staleness` versions older).
    pub fn within_staleness(&self, recorded: u64, next: u64) -> bool {
        recorded + self.max_staleness >= next
    }

    /// Whether data recorded by policy version `recorded` may train the version
    /// `next` when the newest data there is was recorded by version `newest`: within
    /// the staleness bound, or recorded by that newest version. While the promotion
    /// gate keeps a champion acting, the learner's versions run ahead of everything
    /// the actor records; the champion's episodes are then the freshest data there is,
    /// and refusing them stalled the daemon's learner for good after two rejected
    /// challengers (found 2026-12-04 by `imago bench --what daemon`).
    pub fn fresh_enough(&self, recorded: u64, next: u64, newest: u64) -> bool {
        recorded >= newest || self.within_staleness(recorded, next)
    }

    /// `awr-returns`: which episodes' returns are normalised together.
    pub fn return_groups(&self) -> ReturnGroups {
        self.awr_returns
            .as_ref()
            .map_or_else(ReturnGroups::default, |s| s.return_groups)
    }

    /// `awr-returns`: which return each transition is credited with.
    pub fn return_credit(&self) -> ReturnCredit {
        self.awr_returns
            .as_ref()
            .map_or_else(ReturnCredit::default, |s| s.credit)
    }

    /// `advantage-flow`: the weight of the pull toward the behaviour policy.
    pub fn flow_regulariser(&self) -> f64 {
        self.advantage_flow.as_ref().map_or_else(
            || AdvantageFlowSettings::default().regulariser,
            |s| s.regulariser,
        )
    }

    /// `habc`: the gate between viability and efficiency.
    pub fn habc_gate(&self) -> HabcGate {
        self.habc
            .as_ref()
            .map_or_else(HabcGate::default, |s| s.gate)
    }

    /// `ppo-returns`: its settings, the defaults where the table is not given.
    pub fn ppo(&self) -> PpoReturnsSettings {
        self.ppo_returns.unwrap_or_default()
    }

    /// A method's own table given with another method is an error naming both.
    fn check_method_tables(&self) -> Result<(), ConfigError> {
        let tables = [
            (
                "awr_returns",
                FinetuneMethod::AwrReturns,
                self.awr_returns.is_some(),
            ),
            (
                "advantage_flow",
                FinetuneMethod::AdvantageFlow,
                self.advantage_flow.is_some(),
            ),
            ("habc", FinetuneMethod::Habc, self.habc.is_some()),
            (
                "ppo_returns",
                FinetuneMethod::PpoReturns,
                self.ppo_returns.is_some(),
            ),
        ];
        for (table, method, given) in tables {
            if given && self.method != method {
                return Err(ConfigError::new(
                    table,
                    format_args!("[{table}]"),
                    format!(
                        "holds settings of method = \"{method}\" only, and the method is \"{}\": remove the table or choose that method",
                        self.method
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Checks every value against its documented range, and that a method's own
    /// settings come with that method; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check_method_tables()?;
        in_range("rounds", self.rounds, 1..=10_000)?;
        in_range("episodes_per_round", self.episodes_per_round, 1..=10_000)?;
        in_range("group_size", self.group_size, 1..=1024)?;
        self.rollout.validate().map_err(|e| e.within("rollout"))?;
        in_range("policy_steps", self.policy_steps, 0..=MAX_STEPS)?;
        in_range("batch_size", self.batch_size, 1..=MAX_BATCH)?;
        in_range("learning_rate", self.learning_rate, 1e-9..=1.0)?;
        if let Some(rate) = self.lerobot_learning_rate {
            in_range("lerobot_learning_rate", rate, 1e-9..=1.0)?;
        }
        if let Some(lora) = &self.lora {
            lora.validate().map_err(|e| e.within("lora"))?;
        }
        if let Some(average) = &self.weight_average {
            average.validate().map_err(|e| e.within("weight_average"))?;
        }
        in_range("beta", self.beta, 1e-6..=1e6)?;
        in_range("max_weight", self.max_weight, 1.0..=1e9)?;
        self.normaliser
            .validate()
            .map_err(|e| e.within("normaliser"))?;
        in_range("discount", self.discount, 0.0..=1.0)?;
        in_range("lambda", self.lambda, 0.0..=1.0)?;
        in_range("world_model_steps", self.world_model_steps, 0..=MAX_STEPS)?;
        in_range(
            "initial_world_model_steps",
            self.initial_world_model_steps,
            1..=MAX_STEPS,
        )?;
        in_range("critic_steps", self.critic_steps, 0..=MAX_STEPS)?;
        in_range("critic_batch", self.critic_batch, 1..=65_536)?;
        in_range(
            "critic_learning_rate",
            self.critic_learning_rate,
            1e-9..=1.0,
        )?;
        self.imagination
            .validate()
            .map_err(|e| e.within("imagination"))?;
        in_range("max_staleness", self.max_staleness, 0..=1_000_000)?;
        in_range("max_importance_ratio", self.max_importance_ratio, 1.0..=1e6)?;
        if let Some(flow) = &self.advantage_flow {
            in_range("advantage_flow.regulariser", flow.regulariser, 0.0..=1000.0)?;
        }
        if self.method == FinetuneMethod::PpoReturns && self.rollout.exploration <= 0.0 {
            return Err(ConfigError::new(
                "rollout.exploration",
                self.rollout.exploration,
                "must be above 0 with method = \"ppo-returns\", which learns from the chunks its rollouts sample",
            ));
        }
        if let Some(ppo) = &self.ppo_returns {
            in_range("ppo_returns.clip", ppo.clip, 0.01..=1.0)?;
            in_range(
                "ppo_returns.imitation_share",
                ppo.imitation_share,
                0.0..=0.99,
            )?;
            in_range(
                "ppo_returns.imitation_weight",
                ppo.imitation_weight,
                0.0..=1000.0,
            )?;
            in_range("ppo_returns.value_steps", ppo.value_steps, 1..=100_000)?;
        }
        match &self.habc {
            Some(habc) => habc.gate.validate().map_err(|e| e.within("habc.gate")),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The learner at version 3 (next: 4) behind a champion, version 1, that the gate
    /// kept acting: the champion's episodes are the newest there are and stay
    /// trainable; older ones than the bound allows do not.
    #[test]
    fn the_acting_versions_data_is_never_too_stale() {
        let config = FinetuneConfig::default();
        assert_eq!(config.max_staleness, 2);
        assert!(!config.within_staleness(1, 4));
        assert!(config.fresh_enough(1, 4, 1), "the champion's own episodes");
        assert!(!config.fresh_enough(0, 4, 1) || config.within_staleness(0, 4));
        assert!(
            !config.fresh_enough(1, 4, 2),
            "an older version than the newest"
        );
        assert!(config.fresh_enough(2, 4, 3), "within the bound");
        assert!(!config.fresh_enough(1, 5, 3));
    }

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
        assert_eq!(bad.validate().unwrap_err().key, "group_size");
        let averaged: FinetuneConfig = toml::from_str("weight_average = {}").unwrap();
        assert_eq!(
            averaged.weight_average,
            Some(WeightAverageConfig::default())
        );
        let bad: FinetuneConfig = toml::from_str("weight_average = { max_decay = 1.0 }").unwrap();
        assert_eq!(bad.validate().unwrap_err().key, "weight_average.max_decay");
        let parsed: FinetuneConfig =
            toml::from_str("method = \"habc\"\nnormaliser = { kind = \"constant\", k = 60.0 }")
                .unwrap();
        assert_eq!(parsed.method, FinetuneMethod::Habc);
        assert_eq!(parsed.normaliser, AdvantageNormaliser::Constant { k: 60.0 });
        assert_eq!(parsed.return_groups(), ReturnGroups::PerStart);
        let pooled: FinetuneConfig =
            toml::from_str("method = \"awr-returns\"\n[awr_returns]\nreturn_groups = \"pooled\"")
                .unwrap();
        assert_eq!(pooled.validate(), Ok(()));
        assert_eq!(pooled.return_groups(), ReturnGroups::Pooled);
        assert!(
            toml::from_str::<FinetuneConfig>("[awr_returns]\nreturn_groups = \"per-seed\"")
                .is_err()
        );
        assert!(toml::from_str::<FinetuneConfig>("betta = 1.0").is_err());
        // The settings of the old layout, one table up, are unknown keys.
        assert!(toml::from_str::<FinetuneConfig>("flow_regulariser = 0.5").is_err());
    }

    #[test]
    fn a_methods_own_settings_come_with_that_method_only() {
        let read = |text: &str| toml::from_str::<FinetuneConfig>(text).unwrap();
        let flow = read("method = \"advantage-flow\"\n[advantage_flow]\nregulariser = 2.0");
        assert_eq!(flow.validate(), Ok(()));
        assert_eq!(flow.flow_regulariser(), 2.0);
        assert_eq!(read("method = \"advantage-flow\"").flow_regulariser(), 0.5);
        let habc = read("method = \"habc\"\n[habc.gate]\nthreshold = 0.8");
        assert_eq!(habc.habc_gate().threshold, 0.8);
        assert_eq!(habc.habc_gate().sharpness, HabcGate::default().sharpness);
        for (text, table) in [
            ("[advantage_flow]\nregulariser = 2.0", "advantage_flow"),
            ("method = \"dagger\"\n[habc.gate]\nthreshold = 0.8", "habc"),
            ("method = \"habc\"\n[awr_returns]", "awr_returns"),
            ("[ppo_returns]\nclip = 0.1", "ppo_returns"),
        ] {
            let error = read(text).validate().unwrap_err();
            assert_eq!(error.key, table, "{text}");
            assert!(error.expected.contains("remove the table"), "{error:?}");
        }
        let ppo = read("method = \"ppo-returns\"\n[ppo_returns]\nclip = 0.1");
        assert_eq!(ppo.validate(), Ok(()));
        assert_eq!(ppo.ppo().clip, 0.1);
        assert_eq!(ppo.ppo().imitation_share, 0.5, "the rest defaults");
        assert_eq!(ppo.ppo().baseline, PpoBaseline::StateValue);
        let table = read("method = \"ppo-returns\"\n[ppo_returns]\nbaseline = \"table\"");
        assert_eq!(table.ppo().baseline, PpoBaseline::Table);
        for (text, key) in [
            ("clip = 0.0", "ppo_returns.clip"),
            ("value_steps = 0", "ppo_returns.value_steps"),
            ("imitation_share = 1.0", "ppo_returns.imitation_share"),
            ("imitation_weight = nan", "ppo_returns.imitation_weight"),
        ] {
            let bad = read(&format!("method = \"ppo-returns\"\n[ppo_returns]\n{text}"));
            assert_eq!(bad.validate().unwrap_err().key, key, "{text}");
        }
        let example = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/pusht-ppo.toml"),
        )
        .unwrap();
        let example = read(&example);
        assert_eq!(example.validate(), Ok(()));
        assert_eq!(
            (example.method, example.ppo().baseline),
            (FinetuneMethod::PpoReturns, PpoBaseline::StateValue)
        );
        let noiseless = read("method = \"ppo-returns\"\n[rollout]\nexploration = 0.0");
        assert_eq!(noiseless.validate().unwrap_err().key, "rollout.exploration");
        let out_of_range = read("method = \"habc\"\n[habc.gate]\nthreshold = 1.5");
        assert_eq!(
            out_of_range.validate().unwrap_err().key,
            "habc.gate.threshold"
        );
    }
}
