//! The learning side of a daemon or of a fleet's learner: whenever the replay window
//! holds enough fresh episodes, one learning step on lower-priority threads, each new
//! version and each newly recorded stretch of episodes handed to a
//! [`LearnerListener`] (which decides what the actors get), and checkpoints on a
//! schedule.

use std::path::Path;
use std::time::{Duration, Instant};

use imago_robots::RobotSpec;
use imago_robots::bounds::{ConfigError, in_range};
use serde::{Deserialize, Serialize};

use crate::device::ResolvedDevice;
use crate::engine::{PolicySnapshot, ReplayWindow};
use crate::learn::finetune::{FinetuneConfig, Learner, RoundLearner, newest_policy_version};
use crate::store::checkpoint::{CheckpointMeta, save_policy};
use crate::store::replay::Episode;

/// The learner's settings (`[learner]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LearnerConfig {
    /// Train at all (off: the daemon only runs and records).
    pub enabled: bool,
    /// Complete episodes recorded within the staleness bound that a learning step
    /// waits for. Range: [1, 100000], and at most `window_episodes`.
    pub min_episodes: usize,
    /// The newest whole episodes a learning step trains on, kept in memory
    /// ([`ReplayWindow`]): the step's time and the learner's memory stop growing once
    /// the window is full. Range: [min_episodes, 100000].
    pub window_episodes: usize,
    /// The learning step's settings (rollout and round fields are not used: the actor
    /// collects).
    pub finetune: FinetuneConfig,
    /// For testing the promotion gate only: after every learning step the learner's
    /// policy is replaced by freshly initialised weights (a learner gone wrong), which
    /// it then publishes.
    pub publish_fresh_weights: bool,
}

impl Default for LearnerConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            min_episodes: 8,
            window_episodes: 100,
            finetune: FinetuneConfig {
                policy_steps: 100,
                world_model_steps: 50,
                critic_steps: 50,
                ..FinetuneConfig::default()
            },
            publish_fresh_weights: false,
        }
    }
}

impl LearnerConfig {
    /// Checks every value against its documented range; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range("min_episodes", self.min_episodes, 1..=100_000)?;
        in_range("window_episodes", self.window_episodes, 1..=100_000)?;
        if self.window_episodes < self.min_episodes {
            return Err(ConfigError::new(
                "window_episodes",
                self.window_episodes,
                format!(
                    "must be at least learner.min_episodes ({}): a learning step waits for that many episodes in the window; raise window_episodes or lower min_episodes",
                    self.min_episodes
                ),
            ));
        }
        self.finetune.validate().map_err(|e| e.within("finetune"))
    }
}

/// A learner the loop runs: imago's own ([`Learner`]) or a LeRobot policy's
/// (`engine::lerobot_daemon`).
pub(crate) trait LoopLearner: RoundLearner + Send {
    /// The current version as the actor acts with it (inference device).
    fn snapshot(&self) -> anyhow::Result<PolicySnapshot>;

    /// Writes the current version, for robots of `spec`, to the checkpoint `dir`.
    fn save(&self, spec: &RobotSpec, dir: &Path) -> anyhow::Result<()>;

    /// `publish_fresh_weights`: replaces the policy by freshly initialised weights.
    fn replace_with_fresh_weights(&mut self, device: &ResolvedDevice) -> anyhow::Result<()>;
}

impl LoopLearner for Learner {
    fn snapshot(&self) -> anyhow::Result<PolicySnapshot> {
        Ok(PolicySnapshot::new(
            self.version(),
            self.policy(),
            self.policy_config(),
        ))
    }

    fn save(&self, spec: &RobotSpec, dir: &Path) -> anyhow::Result<()> {
        save_policy(
            &self.policy(),
            self.policy_config(),
            CheckpointMeta::new(spec, self.version(), None),
            dir,
        )?;
        Ok(())
    }

    fn replace_with_fresh_weights(&mut self, device: &ResolvedDevice) -> anyhow::Result<()> {
        Learner::replace_with_fresh_weights(self, device);
        Ok(())
    }
}

/// Where the learning side's news goes: the daemon's actor (through its promotion
/// gate) or a fleet's actors.
pub(crate) trait LearnerListener<L> {
    /// Episodes the replay recorded since the last look (a promotion gate in mode
    /// `live` scores them).
    fn recorded(&mut self, episodes: &[Episode]) -> anyhow::Result<()>;

    /// The learner has a new version (to test and publish).
    fn new_version(&mut self, learner: &L) -> anyhow::Result<()>;
}

/// The learner, its window on the replay, and where and how often it checkpoints.
pub(crate) struct LearnerLoop<'a, L> {
    config: &'a LearnerConfig,
    learner: L,
    window: ReplayWindow,
    checkpoint: Checkpointing<'a>,
    device: &'a ResolvedDevice,
    pool: rayon::ThreadPool,
    steps: u64,
}

/// Where the learner's checkpoint goes, and how often.
pub(crate) struct Checkpointing<'a> {
    /// The checkpoint directory.
    pub(crate) dir: &'a Path,
    /// The robot the policy is for.
    pub(crate) spec: RobotSpec,
    /// Time between scheduled checkpoints.
    pub(crate) every: Duration,
}

impl<'a, L: LoopLearner> LearnerLoop<'a, L> {
    /// The loop for `learner` over `window`, computing on the lower-priority learner
    /// pool (engine/priority.rs) so that an actor keeps its deadlines on the same cores.
    pub(crate) fn new(
        config: &'a LearnerConfig,
        (learner, window): (L, ReplayWindow),
        checkpoint: Checkpointing<'a>,
        device: &'a ResolvedDevice,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            config,
            learner,
            window,
            checkpoint,
            device,
            pool: super::priority::learner_pool()?,
            steps: 0,
        })
    }

    /// The learner.
    pub(crate) fn learner(&self) -> &L {
        &self.learner
    }

    /// Learning steps taken.
    pub(crate) fn steps(&self) -> u64 {
        self.steps
    }

    /// While `keep_going(steps so far)`: a learning step whenever the window holds
    /// enough fresh episodes, with the news handed to `listener`, and checkpoints on
    /// schedule (a failed one is a warning). An error of a step or of the listener
    /// ends the loop.
    pub(crate) fn run(
        &mut self,
        keep_going: impl Fn(u64) -> bool,
        listener: &mut (impl LearnerListener<L> + Send),
    ) -> anyhow::Result<()> {
        let Self {
            config,
            learner,
            window,
            checkpoint,
            device,
            pool,
            steps,
        } = self;
        let mut last_checkpoint = Instant::now();
        while keep_going(*steps) {
            if !config.enabled {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            if pool.install(|| learn_step(config, (learner, window), device, listener))? {
                *steps += 1;
            } else {
                std::thread::sleep(Duration::from_millis(200));
            }
            if last_checkpoint.elapsed() >= checkpoint.every {
                if let Err(error) = learner.save(&checkpoint.spec, checkpoint.dir) {
                    eprintln!("warning: scheduled checkpoint failed: {error:#}");
                }
                last_checkpoint = Instant::now();
            }
        }
        Ok(())
    }

    /// Writes the learner's policy to the checkpoint directory.
    pub(crate) fn save(&self) -> anyhow::Result<()> {
        self.learner
            .save(&self.checkpoint.spec, self.checkpoint.dir)
    }
}

/// Takes in what was recorded since the last look and, when enough of it is fresh,
/// learns one step; whether it did.
fn learn_step<L: LoopLearner>(
    config: &LearnerConfig,
    (learner, window): (&mut L, &mut ReplayWindow),
    device: &ResolvedDevice,
    listener: &mut impl LearnerListener<L>,
) -> anyhow::Result<bool> {
    let recorded = window.refresh()?;
    if recorded > 0 {
        let episodes = window.episodes();
        listener.recorded(&episodes[episodes.len().saturating_sub(recorded)..])?;
    }
    if !enough_fresh(window, learner.version(), config) {
        return Ok(false);
    }
    learner.learn(window.episodes(), &config.finetune, device)?;
    if config.publish_fresh_weights {
        learner.replace_with_fresh_weights(device)?;
    }
    listener.new_version(learner)?;
    Ok(true)
}

/// Whether `window`
/// holds enough episodes fresh enough for the next step of a learner at `version`:
/// recorded by a version within the staleness bound of the one it produces, or by the
/// newest version that acted (`FinetuneConfig::fresh_enough`).
pub(crate) fn enough_fresh(
    window: &mut ReplayWindow,
    version: u64,
    config: &LearnerConfig,
) -> bool {
    let next = version + 1;
    let episodes = window.episodes();
    let newest = newest_policy_version(episodes);
    let fresh = episodes
        .iter()
        .filter(|e| {
            e.transitions
                .iter()
                .any(|t| config.finetune.fresh_enough(t.policy_version, next, newest))
        })
        .count();
    fresh >= config.min_episodes
}
