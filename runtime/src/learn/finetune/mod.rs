//! Advantage-weighted fine-tuning from imagination (`imago train --what finetune` and
//! the demo's last phase): collect episodes with the current policy, add them to
//! replay, update the world model and the critic, re-weight every recorded transition
//! by its advantage, update the policy; repeat. `docs/finetuning.md` explains the
//! methods and compares them.

mod advantages;
mod config;
mod critic;
mod latents;
mod learner;
mod run;
mod update;

pub use advantages::{AdvantageSummary, TransitionWeights, transition_weights};
pub use config::{
    AdvantageFlowSettings, AwrReturnsSettings, FinetuneConfig, FinetuneMethod, HabcSettings,
    MAX_BATCH, MAX_STEPS, ReturnGroups,
};
pub use critic::{CriticLosses, train_critic};
pub use latents::EncodedEpisodes;
pub use learner::{LearnReport, Learner};
pub use run::{FinetuneOutcome, FinetuneStart, ROLLOUT_SEED_BASE, RoundReport, finetune};
pub use update::{PolicyUpdateReport, newest_policy_version, update_policy};
