//! The deployed policy (the champion) and the promotion test every new learner version
//! (a challenger) must pass before it becomes the champion (docs/promotion.md). In
//! mode `sim` the test runs on the learner's side, off the control path: paired
//! episodes on the robot's simulator twin from fresh seeds each time, champion against
//! challenger; a rejected challenger never acts. In mode `live` the challenger is
//! offered to the actor, which gives it at most `explore_fraction` of the real robot's
//! episodes; its episodes are paired with the champion's ([`LivePairing`]) until the
//! test decides. Either way the learner continues from its own weights.
//!
//! After a promotion the guard watches the new champion's live episodes against the
//! previous champion's live record; a certified regression rolls the previous
//! champion back in ([`RegressionGuard`]).

use std::sync::Arc;

use burn::Dispatch;
use imago_robots::bounds::{ConfigError, in_range};
use serde::{Deserialize, Serialize};

use super::actor::ActorConfig;
use super::chunking::ActorActing;
use super::snapshot::PolicySnapshot;
use crate::act::promotion_run::run_promotion_test;
use crate::device::ResolvedDevice;
use crate::promotion::{
    GuardVerdict, LiveOutcome, LivePairing, LiveRecord, PromotionMetric, PromotionTestConfig,
    RegressionGuard, Verdict,
};
use crate::robot::RobotConfig;
use crate::store::replay::Episode;
use crate::telemetry::{Telemetry, TelemetryEvent};

/// Where a promotion test runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PromotionMode {
    /// Paired episodes on the robot's simulator twin (built-in robots), learner side.
    Sim,
    /// Interleaved champion and challenger episodes on the robot the actor drives
    /// (any robot, remote ones included), the challenger in at most
    /// `explore_fraction` of them.
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
    /// Watch each new champion's live episodes and roll back a certified regression
    /// against the previous champion's live record.
    pub guard: bool,
    /// Live episodes a new champion is watched for. Range: [1, 100000].
    pub guard_episodes: u32,
    /// Mode `live`: the largest share of episodes a challenger acts in. Range:
    /// [0.01, 1].
    pub explore_fraction: f64,
    /// Test knob: the first challenger is promoted without a test (a staged gate
    /// failure), so that the guard and its rollback can be exercised.
    pub stage_regression: bool,
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
            guard: true,
            guard_episodes: 200,
            explore_fraction: 0.1,
            stage_regression: false,
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
        in_range("guard_episodes", self.guard_episodes, 1..=100_000)?;
        in_range("explore_fraction", self.explore_fraction, 0.01..=1.0)?;
        if !self.enabled {
            return Ok(());
        }
        match self.mode {
            PromotionMode::Sim if !robot.is_simulated() => Err(ConfigError::new(
                "mode",
                "sim",
                format!(
                    "needs a simulator twin, and robot {} is in another process; use mode = \"live\" (challengers tested on the robot itself) or enabled = false (every version acts at once)",
                    robot.name()
                ),
            )),
            PromotionMode::Sim | PromotionMode::Live => Ok(()),
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
    /// Champions rolled back after a certified regression (the live guard).
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
    /// How the actor acts, which the test in simulation repeats.
    acting: ActorActing,
    champion: Arc<PolicySnapshot>,
    summary: PromotionSummary,
    next_seed: u64,
    /// The champion's live record since it became champion.
    record: LiveRecord,
    /// After a promotion: the champion it replaced, and the watch over the new one.
    watch: Option<Watch>,
    /// Mode `live`: the challenger under test on the robot.
    live: Option<LiveTest>,
    /// Mode `live`: the newest version that came while a test ran, tested next.
    pending: Option<Arc<PolicySnapshot>>,
}

/// A challenger under test on the robot (mode `live`).
struct LiveTest {
    challenger: Arc<PolicySnapshot>,
    pairing: LivePairing,
}

/// What a decision of the gate changes for the actor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GateChange {
    /// The champion changed (promoted or rolled back): publish it.
    pub champion: bool,
    /// What happens to the challenger on offer (mode `live`).
    pub challenger: ChallengerChange,
}

/// The challenger on offer to the actor (mode `live`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ChallengerChange {
    /// As it was.
    #[default]
    Keep,
    /// Offer [`ChampionGate::challenger`] (a new test began).
    Offer,
    /// Withdraw it (its test ended).
    Withdraw,
}

/// The watch over a newly promoted champion.
struct Watch {
    previous: (Arc<PolicySnapshot>, LiveRecord),
    guard: RegressionGuard,
}

/// Seeds of the first test; each test continues where the last stopped, so no two
/// tests share an episode.
const FIRST_TEST_SEED: u64 = 7_000_000;

impl ChampionGate {
    /// A gate whose champion is `champion`, tested on `actor`'s robot, acting as
    /// `actor` does.
    pub fn new(
        config: &PromotionConfig,
        actor: &ActorConfig,
        champion: Arc<PolicySnapshot>,
    ) -> Self {
        let version = champion.version;
        Self {
            telemetry: Telemetry::off(),
            config: config.clone(),
            robot: actor.robot.clone(),
            acting: actor.acting(),
            champion,
            summary: PromotionSummary {
                champion_version: version,
                ..PromotionSummary::default()
            },
            next_seed: FIRST_TEST_SEED,
            record: LiveRecord::default(),
            watch: None,
            live: None,
            pending: None,
        }
    }

    /// Notes each test's decision and evidence on rerun's `events` log.
    pub fn with_telemetry(mut self, telemetry: Telemetry) -> Self {
        self.telemetry = telemetry;
        self
    }

    /// Tests `challenger` against the champion: in mode `sim` at once (a promoted
    /// challenger is then the champion); in mode `live` by offering it to the actor
    /// (or, while another live test runs, after it).
    pub fn consider(
        &mut self,
        challenger: Arc<PolicySnapshot>,
        device: &ResolvedDevice,
    ) -> anyhow::Result<GateChange> {
        let version = challenger.version;
        if self.config.stage_regression && self.summary.promotions + self.summary.rollbacks == 0 {
            self.note(format!(
                "stage_regression: version {version} promoted without a test (a staged gate failure)"
            ));
            self.promote(challenger);
            return Ok(GateChange {
                champion: true,
                ..GateChange::default()
            });
        }
        if self.config.mode == PromotionMode::Live {
            return Ok(self.offer_live(challenger));
        }
        let run = run_promotion_test::<Dispatch>(
            (
                &self.champion.controller(&device.inference, self.acting),
                &challenger.controller(&device.inference, self.acting),
            ),
            &self.robot,
            &self.config.test(),
            self.next_seed,
        )?;
        self.next_seed = self.next_seed.wrapping_add(run.episodes_simulated as u64);
        self.summary.promotion_test_episodes.push(run.episodes);
        for &evidence in &run.trace {
            self.test_statistics(evidence, run.threshold);
        }
        self.note(format!(
            "promotion test of version {version} against champion {}: {:?} after {} paired episodes (evidence better {:.3}, worse {:.3}, threshold {:.0})",
            self.summary.champion_version,
            run.decision,
            run.episodes,
            run.evidence_better,
            run.evidence_worse,
            run.threshold
        ));
        let promoted = run.decision == Verdict::Promote;
        if promoted {
            self.promote(challenger);
        } else {
            self.summary.rejections += 1;
        }
        Ok(GateChange {
            champion: promoted,
            ..GateChange::default()
        })
    }

    /// Mode `live`: starts the test of `challenger` on the robot, or queues it behind
    /// the test running (replacing an older queued version).
    fn offer_live(&mut self, challenger: Arc<PolicySnapshot>) -> GateChange {
        let version = challenger.version;
        if let Some(running) = &self.live {
            self.note(format!(
                "live promotion test of version {} running: version {version} is tested after it",
                running.challenger.version
            ));
            self.pending = Some(challenger);
            return GateChange::default();
        }
        self.note(format!(
            "live promotion test of version {version} against champion {}: offered to the actor for at most {:.0}% of episodes",
            self.summary.champion_version,
            100.0 * self.config.explore_fraction
        ));
        self.live = Some(LiveTest {
            challenger,
            pairing: LivePairing::new(self.config.test().start()),
        });
        GateChange {
            challenger: ChallengerChange::Offer,
            ..GateChange::default()
        }
    }

    /// The challenger under test on the robot (mode `live`).
    pub fn challenger(&self) -> Option<&Arc<PolicySnapshot>> {
        self.live.as_ref().map(|l| &l.challenger)
    }

    /// Mode `live`: an episode of the challenger under test (`by_challenger`) or of
    /// the champion ended; concludes the test when it decides.
    fn live_episode(&mut self, by_challenger: bool, outcome: LiveOutcome) -> GateChange {
        let Some(live) = &mut self.live else {
            return GateChange::default();
        };
        let paired = live.pairing.test().episodes();
        let verdict = if by_challenger {
            live.pairing.challenger_episode(outcome)
        } else {
            live.pairing.champion_episode(outcome)
        };
        let test = live.pairing.test();
        if test.episodes() > paired {
            let (evidence, threshold) = (test.evidence(), test.config().threshold());
            self.test_statistics(evidence, threshold);
        }
        if !verdict.is_final() {
            return GateChange::default();
        }
        let Some(LiveTest {
            challenger,
            pairing,
        }) = self.live.take()
        else {
            return GateChange::default();
        };
        let version = challenger.version;
        let test = pairing.test();
        let (better, worse) = test.evidence();
        self.summary.promotion_test_episodes.push(test.episodes());
        self.note(format!(
            "live promotion test of version {version} against champion {}: {verdict:?} after {} paired live episodes (evidence better {better:.3}, worse {worse:.3}, threshold {:.0})",
            self.summary.champion_version,
            test.episodes(),
            test.config().threshold()
        ));
        let promoted = verdict == Verdict::Promote;
        if promoted {
            self.promote(challenger);
        } else {
            self.summary.rejections += 1;
        }
        let mut change = GateChange {
            champion: promoted,
            challenger: ChallengerChange::Withdraw,
        };
        if let Some(next) = self.pending.take() {
            change.challenger = self.offer_live(next).challenger;
        }
        change
    }

    /// Makes `challenger` the champion. With the guard on, the last trusted champion
    /// (the one replaced, or, if that one was still being watched, the one it would
    /// have rolled back to) is kept with its live record until the watch over the new
    /// one is over.
    fn promote(&mut self, challenger: Arc<PolicySnapshot>) {
        let version = challenger.version;
        self.summary.promotions += 1;
        self.summary.champion_version = version;
        let replaced = (
            std::mem::replace(&mut self.champion, challenger),
            std::mem::take(&mut self.record),
        );
        let previous = match self.watch.take() {
            Some(watch) => watch.previous,
            None => replaced,
        };
        if !self.config.guard {
            return;
        }
        let record = previous.1;
        match RegressionGuard::new(record, self.config.confidence, self.config.guard_episodes) {
            Some(guard) => {
                self.note(format!(
                    "guard: watching version {version} for up to {} live episodes against version {} ({} of {} live successes, lower bound {:.3})",
                    self.config.guard_episodes,
                    previous.0.version,
                    record.successes,
                    record.episodes,
                    guard.baseline()
                ));
                self.watch = Some(Watch { previous, guard });
            }
            None => self.note(format!(
                "guard: version {version} is not watched: version {} had no live success to compare with ({} episodes)",
                previous.0.version, record.episodes
            )),
        }
    }

    /// Takes in recorded live episodes. Those the champion acted from start to end add
    /// to its record and, while it is watched, to the guard, which may roll the
    /// previous champion back in; in mode `live` they and the challenger's feed the
    /// test under way.
    pub fn watch_live(&mut self, episodes: &[Episode]) -> GateChange {
        let mut change = GateChange::default();
        let max_steps = self.robot.spec().max_steps.max(1) as f64;
        for episode in episodes {
            let Some(first) = episode.transitions.first() else {
                continue;
            };
            let version = first.policy_version;
            if episode
                .transitions
                .iter()
                .any(|t| t.policy_version != version)
            {
                continue;
            }
            let success =
                episode.end.success && !episode.transitions.iter().any(|t| t.intervention);
            let outcome = LiveOutcome {
                success,
                score: match (success, self.config.metric) {
                    (false, _) => 0.0,
                    (true, PromotionMetric::Success) => 1.0,
                    (true, PromotionMetric::StepsToSuccess) => {
                        1.0 - f64::from(episode.end.steps) / max_steps
                    }
                },
            };
            if self
                .live
                .as_ref()
                .is_some_and(|l| l.challenger.version == version)
            {
                let decided = self.live_episode(true, outcome);
                change.champion |= decided.champion;
                if decided.challenger != ChallengerChange::Keep {
                    change.challenger = decided.challenger;
                }
                continue;
            }
            if version != self.summary.champion_version {
                continue;
            }
            if self.champion_episode(success) {
                change.champion = true;
                // The test under way compared with the champion rolled back: it ends.
                if let Some(live) = self.live.take() {
                    self.note(format!(
                        "live promotion test of version {} abandoned: its champion was rolled back",
                        live.challenger.version
                    ));
                    change.challenger = ChallengerChange::Withdraw;
                    if let Some(next) = self.pending.take() {
                        change.challenger = self.offer_live(next).challenger;
                    }
                }
                continue;
            }
            let decided = self.live_episode(false, outcome);
            change.champion |= decided.champion;
            if decided.challenger != ChallengerChange::Keep {
                change.challenger = decided.challenger;
            }
        }
        change
    }

    /// A live episode of the champion: its record, and the guard while it is watched.
    /// Returns `true` when a certified regression rolled the previous champion back in.
    fn champion_episode(&mut self, success: bool) -> bool {
        let version = self.summary.champion_version;
        self.record.observe(success);
        let Some(watch) = &mut self.watch else {
            return false;
        };
        let verdict = watch.guard.observe(success);
        let (evidence, threshold) = watch.guard.evidence();
        self.statistics(&[
            ("log10_guard_evidence", evidence.log10()),
            ("log10_guard_threshold", threshold.log10()),
        ]);
        let Some(watch) = &mut self.watch else {
            return false;
        };
        match verdict {
            GuardVerdict::Watching => false,
            GuardVerdict::Cleared => {
                let line = format!(
                    "guard: version {version} cleared after {} live episodes ({} successes)",
                    watch.guard.episodes(),
                    self.record.successes
                );
                self.watch = None;
                self.note(line);
                false
            }
            GuardVerdict::Regressed => {
                let (evidence, threshold) = watch.guard.evidence();
                let line = format!(
                    "guard: version {version} regressed ({} successes in {} live episodes, certified below {:.3}: evidence {evidence:.1} >= {threshold:.0}); rolled back to version {}",
                    self.record.successes,
                    self.record.episodes,
                    watch.guard.baseline(),
                    watch.previous.0.version
                );
                let Some(Watch { previous, .. }) = self.watch.take() else {
                    return false;
                };
                (self.champion, self.record) = previous;
                self.summary.champion_version = self.champion.version;
                self.summary.rollbacks += 1;
                self.note(line);
                true
            }
        }
    }

    /// A test's e-values after one more paired episode, on rerun's `promotion/` plots.
    fn test_statistics(&self, (better, worse): (f64, f64), threshold: f64) {
        self.statistics(&[
            ("log10_evidence_better", better.log10()),
            ("log10_evidence_worse", worse.log10()),
            ("log10_threshold", threshold.log10()),
        ]);
    }

    /// `values` on rerun's `promotion/` plots, one more weighed episode.
    fn statistics(&self, values: &[(&str, f64)]) {
        self.telemetry.send(TelemetryEvent::PromotionStatistics(
            values.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
        ));
    }

    /// A line on standard error and on rerun's `events` log.
    fn note(&self, line: String) {
        eprintln!("{line}");
        self.telemetry.offer(TelemetryEvent::Note(line));
    }

    /// The champion (its version is the snapshot's).
    pub fn champion(&self) -> &Arc<PolicySnapshot> {
        &self.champion
    }

    /// What the gate did so far.
    pub fn summary(&self) -> &PromotionSummary {
        &self.summary
    }
}
