//! The deployed policy (the champion) and the promotion test every new learner version
//! (a challenger) must pass before it reaches the motors (docs/promotion.md). In mode
//! `sim` the test runs on the learner's side, off the control path: paired episodes on
//! the robot's simulator twin from fresh seeds each time, champion against challenger.
//! A rejected challenger never acts; the learner continues from its own weights.

use burn::Dispatch;
use imago_policies::{VlaPolicy, VlaPolicyConfig};
use imago_robots::bounds::ConfigError;
use serde::{Deserialize, Serialize};

use crate::act::evaluate::Controller;
use crate::act::promotion_run::run_promotion_test;
use crate::device::ResolvedDevice;
use crate::promotion::{PromotionMetric, PromotionTestConfig, Verdict};
use crate::robot::RobotConfig;
use crate::telemetry::{Telemetry, TelemetryEvent};

/// Where a promotion test runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PromotionMode {
    /// Paired episodes on the robot's simulator twin (built-in robots), learner side.
    Sim,
    /// Interleaved champion and challenger episodes on the real robot: not built yet.
    Live,
}

/// The `[promotion]` table of a daemon config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PromotionConfig {
    /// Gate new versions (off: every version the learner publishes acts at once).
    pub enabled: bool,
    /// Where the test runs.
    pub mode: PromotionMode,
    /// One minus the largest false-promotion rate allowed. Range: [0.5, 0.9999].
    pub confidence: f64,
    /// Paired episodes after which an undecided test keeps the champion. Range:
    /// [1, 100000].
    pub max_episodes: u32,
    /// What is compared: `success` or `steps_to_success`.
    pub metric: PromotionMetric,
    /// How much better the challenger must be. Range: [0, 0.45].
    pub min_improvement: f64,
}

impl Default for PromotionConfig {
    fn default() -> Self {
        let test = PromotionTestConfig::default();
        Self {
            enabled: true,
            mode: PromotionMode::Sim,
            confidence: test.confidence,
            max_episodes: test.max_episodes,
            metric: test.metric,
            min_improvement: test.min_improvement,
        }
    }
}

impl PromotionConfig {
    /// The sequential test these settings give.
    pub fn test(&self) -> PromotionTestConfig {
        PromotionTestConfig {
            confidence: self.confidence,
            max_episodes: self.max_episodes,
            metric: self.metric,
            min_improvement: self.min_improvement,
        }
    }

    /// Checks the ranges, and that the mode can run for `robot`.
    pub fn validate(&self, robot: &RobotConfig) -> Result<(), ConfigError> {
        self.test().validate()?;
        if !self.enabled {
            return Ok(());
        }
        match self.mode {
            PromotionMode::Live => Err(ConfigError::new(
                "mode",
                "live",
                "is not built yet; use mode = \"sim\" (robots with a simulator twin) or enabled = false",
            )),
            PromotionMode::Sim if !robot.is_simulated() => Err(ConfigError::new(
                "mode",
                "sim",
                format!(
                    "needs a simulator twin, and robot {} is in another process; use enabled = false (every version then acts at once)",
                    robot.name()
                ),
            )),
            PromotionMode::Sim => Ok(()),
        }
    }
}

/// What the promotion gate did over a run (keys of the daemon's report).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PromotionSummary {
    /// Challengers promoted.
    pub promotions: u64,
    /// Challengers rejected (the champion kept).
    pub rejections: u64,
    /// Champions rolled back after a certified regression (the live guard; always 0
    /// in mode `sim`).
    pub rollbacks: u64,
    /// The version of the policy acting at the end.
    pub champion_version: u64,
    /// Paired episodes each test used, in order.
    pub promotion_test_episodes: Vec<u32>,
}

/// The champion, and the test a challenger must pass to replace it.
pub struct ChampionGate {
    telemetry: Telemetry,
    config: PromotionConfig,
    robot: RobotConfig,
    champion: VlaPolicy<Dispatch>,
    summary: PromotionSummary,
    next_seed: u64,
}

/// Seeds of the first test; each test continues where the last stopped, so no two
/// tests share an episode.
const FIRST_TEST_SEED: u64 = 7_000_000;

impl ChampionGate {
    /// A gate whose champion is `champion` (version `version`), tested on `robot`.
    pub fn new(
        config: &PromotionConfig,
        robot: &RobotConfig,
        (champion, version): (VlaPolicy<Dispatch>, u64),
    ) -> Self {
        Self {
            telemetry: Telemetry::off(),
            config: config.clone(),
            robot: robot.clone(),
            champion,
            summary: PromotionSummary {
                champion_version: version,
                ..PromotionSummary::default()
            },
            next_seed: FIRST_TEST_SEED,
        }
    }

    /// Notes each test's decision and evidence on rerun's `events` log.
    pub fn with_telemetry(mut self, telemetry: Telemetry) -> Self {
        self.telemetry = telemetry;
        self
    }

    /// Tests `challenger` (version `version`) against the champion; whether it was
    /// promoted (it is then the champion).
    pub fn consider(
        &mut self,
        (challenger, config, version): (VlaPolicy<Dispatch>, &VlaPolicyConfig, u64),
        device: &ResolvedDevice,
    ) -> anyhow::Result<bool> {
        let controller = |policy| Controller::Policy {
            policy,
            config,
            device: &device.inference,
            wrong_instruction: false,
            execute_steps: 1,
        };
        let run = run_promotion_test::<Dispatch>(
            (&controller(&self.champion), &controller(&challenger)),
            &self.robot,
            &self.config.test(),
            self.next_seed,
        )?;
        self.next_seed = self.next_seed.wrapping_add(run.episodes_simulated as u64);
        self.summary.promotion_test_episodes.push(run.episodes);
        let line = format!(
            "promotion test of version {version} against champion {}: {:?} after {} paired episodes (evidence better {:.3}, worse {:.3}, threshold {:.0})",
            self.summary.champion_version,
            run.decision,
            run.episodes,
            run.evidence_better,
            run.evidence_worse,
            run.threshold
        );
        eprintln!("{line}");
        self.telemetry.offer(TelemetryEvent::Note(line));
        let promoted = run.decision == Verdict::Promote;
        if promoted {
            self.summary.promotions += 1;
            self.summary.champion_version = version;
            self.champion = challenger;
        } else {
            self.summary.rejections += 1;
        }
        Ok(promoted)
    }

    /// The champion and its version.
    pub fn champion(&self) -> (&VlaPolicy<Dispatch>, u64) {
        (&self.champion, self.summary.champion_version)
    }

    /// What the gate did so far.
    pub fn summary(&self) -> &PromotionSummary {
        &self.summary
    }
}
