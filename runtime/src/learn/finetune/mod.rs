//! Advantage-weighted fine-tuning from imagination (`imago train --what finetune` and
//! the demo's last phase): collect episodes with the current policy, add them to
//! replay, update the world model and the critic, re-weight every recorded transition
//! by its advantage, update the policy; repeat. The same rounds fine-tune a LeRobot
//! policy ([`LeRobotLearner`]) through its own training loss. `docs/finetuning.md`
//! explains the methods and compares them.

mod advantage_models;
mod advantages;
mod config;
mod critic;
mod latents;
mod learner;
mod lerobot_learner;
mod ppo;
mod return_credit;
mod run;
mod state_value;
#[cfg(test)]
mod test_episodes;
mod update;

pub use advantage_models::{AdvantageModels, Weighed};
pub use advantages::{AdvantageSummary, TransitionWeights, transition_weights};
pub use config::{
    AdvantageFlowSettings, AwrReturnsSettings, FinetuneConfig, FinetuneMethod, HabcSettings,
    PpoBaseline, PpoReturnsSettings, ReturnCredit, ReturnGroups,
};
pub use critic::{CriticLosses, train_critic};
pub use latents::EncodedEpisodes;
pub use learner::{LearnReport, Learner};
pub use lerobot_learner::LeRobotLearner;
pub use ppo::check_head as check_ppo_head;
pub use run::{
    FinetuneOutcome, FinetuneStart, ROLLOUT_SEED_BASE, RoundLearner, RoundReport, finetune,
    run_rounds,
};
pub use update::{PolicyUpdateReport, eligible_samples, newest_policy_version, update_policy};
