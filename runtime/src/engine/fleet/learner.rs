//! `imago learner`: the fleet's one learner. An ingest thread stores the episodes
//! actors upload (deduplicated by their origin, fsynced before the acknowledgement);
//! the calling thread trains on the replay as the daemon's learner does and publishes
//! each new version.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;
use imago_robots::RobotSpec;
use serde::{Deserialize, Serialize};
use zenoh::Session;
use zenoh::Wait;
use zenoh::pubsub::Publisher;
use zenoh::qos::CongestionControl;
use zenoh::query::{Query, Queryable};

use super::{
    EpisodeUpload, FleetKeys, IngestOutcome, IngestReply, PROTOCOL_VERSION, PolicyMessage,
};
use crate::bridge::LinkConfig;
use crate::bridge::link::alive_token;
use crate::bridge::protocol::{decode, encode};
use crate::device::ResolvedDevice;
use crate::engine::actor_feed::{ChampionCheckpoint, promotion_summary};
use crate::engine::champion::{ChampionGate, PromotionMode, PromotionSummary};
use crate::engine::daemon::{DaemonConfig, DaemonOptions, champion_checkpoint, start_gate};
use crate::engine::learner_loop::{Checkpointing, LearnerListener, LearnerLoop, LoopLearner};
use crate::engine::run_start::{prepare, starts_from_lerobot};
use crate::engine::{PolicySnapshot, SnapshotPolicy};
use crate::learn::finetune::Learner;
use crate::store::replay::{Episode, EpisodeOrigin, ReplayWriter, Transition, read_replay};

/// Uploads waiting for the ingest thread; more are refused until it catches up (the
/// actors resend).
const INGEST_QUEUE: usize = 64;

/// What the learner did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetLearnerReport {
    /// Episodes stored.
    pub episodes_stored: u64,
    /// Transitions stored.
    pub transitions_stored: u64,
    /// Uploads of episodes stored before.
    pub duplicates: u64,
    /// Uploads refused.
    pub refused: u64,
    /// Episodes stored per actor.
    pub per_actor: BTreeMap<String, u64>,
    /// Stored transitions per second of the run.
    pub intake_transitions_per_second: f64,
    /// Time from an upload's arrival to its acknowledgement (stored and fsynced),
    /// median, ms.
    pub ingest_p50_ms: f64,
    /// Learning steps completed.
    pub learning_steps: u64,
    /// The policy version at shutdown.
    pub final_policy_version: u64,
    /// Wall time, seconds.
    pub seconds: f64,
    /// What the promotion gate did: only promoted versions reach the actors.
    #[serde(flatten)]
    pub promotion: PromotionSummary,
}

/// Runs the learner until `stop` is set or `options.duration` passes.
pub fn run_fleet_learner(
    config: &DaemonConfig,
    options: &DaemonOptions,
    device: &ResolvedDevice,
    link: &LinkConfig,
    fleet_key: &str,
    stop: &AtomicBool,
) -> anyhow::Result<FleetLearnerReport> {
    let keys = FleetKeys::new(fleet_key).map_err(anyhow::Error::msg)?;
    anyhow::ensure!(
        !(config.promotion.enabled && config.promotion.mode == PromotionMode::Live),
        "[promotion] mode = \"live\" runs in one daemon; a fleet's learner tests challengers with mode = \"sim\" (or set enabled = false)"
    );
    // A link that cannot be opened (a port in use, a bad endpoint) is an error before
    // the run directory is touched.
    anyhow::ensure!(
        !starts_from_lerobot(config, options),
        "a fleet's learner trains imago's policies; a LeRobot policy runs in `imago daemon` on one robot"
    );
    let session = link.open()?;
    let prepared = prepare(config, options, device)?;
    let (learner, window, checkpoint) = (prepared.learner, prepared.window, prepared.checkpoint);
    let spec = config.spec();
    let store = EpisodeStore::open(&prepared.replay, config, &spec)?;
    // With the promotion gate on, actors only ever receive champions.
    let champion = ChampionCheckpoint {
        dir: champion_checkpoint(&checkpoint),
        spec: spec.clone(),
        learner_checkpoint: checkpoint.clone(),
    };
    let gate = start_gate(config, options, &learner, &champion, device)?;
    let mut feed = FleetFeed::open(&session, &keys, (gate, champion), &learner, device)?;
    let (sender, uploads) = crossbeam_channel::bounded::<(Query, Instant)>(INGEST_QUEUE);
    let _ingest_queryable = session
        .declare_queryable(keys.ingest.clone())
        .callback(move |query| {
            // A full queue: the actor hears nothing and resends later.
            let _ = sender.try_send((query, Instant::now()));
        })
        .wait()
        .map_err(|e| anyhow::anyhow!("declaring {}: {e}", keys.ingest))?;
    let _alive = alive_token(&session, &keys.learner_alive)?;
    let started = Instant::now();
    let deadline = options.duration.map(|d| started + d);
    let out_of_time = || deadline.is_some_and(|d| Instant::now() >= d);
    let ingest_stop = AtomicBool::new(false);
    let checkpointing = Checkpointing {
        dir: &checkpoint,
        spec: spec.clone(),
        every: Duration::from_secs_f64(config.checkpoint_every_seconds),
    };
    let mut learning = LearnerLoop::new(&config.learner, (learner, window), checkpointing, device)?;
    let (ingested, learned) = std::thread::scope(|scope| {
        let ingest = scope.spawn(|| {
            let mut store = store;
            while !ingest_stop.load(Ordering::Relaxed) {
                match uploads.recv_timeout(Duration::from_millis(50)) {
                    Ok((query, arrived)) => store.answer(&query, arrived),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            }
            store.close()
        });
        let learned = learning.run(
            |_| !stop.load(Ordering::Relaxed) && !out_of_time(),
            &mut feed,
        );
        ingest_stop.store(true, Ordering::Relaxed);
        (ingest.join(), learned)
    });
    learning.save()?;
    if let Some(gate) = &feed.gate {
        feed.champion.save(gate)?;
    }
    let mut report = ingested
        .map_err(|_| anyhow::anyhow!("the ingest thread panicked"))?
        .map_err(|e| e.context("recording uploads"))?;
    learned?;
    let learner = learning.learner();
    report.learning_steps = learning.steps();
    report.final_policy_version = learner.version();
    report.promotion = promotion_summary(feed.gate.as_ref(), learner.version());
    report.seconds = started.elapsed().as_secs_f64();
    report.intake_transitions_per_second = report.transitions_stored as f64 / report.seconds;
    Ok(report)
}

/// The learner's replay as the ingest thread writes it.
struct EpisodeStore<'a> {
    writer: ReplayWriter,
    /// (actor, actor's episode id) -> the learner's episode id, of every stored one.
    seen: HashMap<(String, u64), u64>,
    /// Actor id -> the run directory (instance) its episodes come from.
    instances: HashMap<String, u64>,
    spec: &'a RobotSpec,
    report: FleetLearnerReport,
    latencies: Vec<f64>,
}

impl<'a> EpisodeStore<'a> {
    /// The store over the learner's replay `dir` (for `spec`'s robot), knowing the
    /// origin of every episode it already holds.
    fn open(dir: &Path, config: &DaemonConfig, spec: &'a RobotSpec) -> anyhow::Result<Self> {
        let (writer, repaired) = ReplayWriter::open(
            dir,
            config.replay.clone(),
            &config.actor.robot,
            "imago learner",
        )?;
        repaired.warn();
        let origins = read_replay(dir)?.origins;
        let instances: HashMap<String, u64> = origins
            .iter()
            .map(|o| (o.actor.clone(), o.instance))
            .collect();
        let seen: HashMap<(String, u64), u64> = origins
            .into_iter()
            .map(|o| ((o.actor, o.actor_episode), o.episode))
            .collect();
        Ok(Self {
            writer,
            seen,
            instances,
            spec,
            report: FleetLearnerReport::default(),
            latencies: Vec::new(),
        })
    }

    /// Stores the upload `query` carries and answers it.
    fn answer(&mut self, query: &Query, arrived: Instant) {
        let reply = match query
            .payload()
            .map(|payload| decode::<EpisodeUpload>(&payload.to_bytes(), "episode upload"))
        {
            Some(Ok(upload)) => {
                let actor_episode = upload.start.episode;
                IngestReply {
                    protocol: PROTOCOL_VERSION,
                    actor_episode,
                    outcome: self.store(upload),
                }
            }
            Some(Err(error)) => IngestReply {
                protocol: PROTOCOL_VERSION,
                actor_episode: 0,
                outcome: IngestOutcome::Refused {
                    reason: error.to_string(),
                },
            },
            None => return,
        };
        if matches!(reply.outcome, IngestOutcome::Refused { .. }) {
            self.report.refused += 1;
        }
        self.latencies.push(arrived.elapsed().as_secs_f64() * 1e3);
        let _ = query.reply(query.key_expr().clone(), encode(&reply)).wait();
    }

    fn store(&mut self, upload: EpisodeUpload) -> IngestOutcome {
        if let Some(&instance) = self.instances.get(&upload.actor)
            && instance != upload.instance
        {
            return IngestOutcome::Refused {
                reason: format!(
                    "actor id `{}` belongs to another run directory already (instance {instance:x}, this one {:x}): give each actor its own --actor-id",
                    upload.actor, upload.instance
                ),
            };
        }
        let origin_key = (upload.actor.clone(), upload.start.episode);
        if let Some(&learner_episode) = self.seen.get(&origin_key) {
            self.report.duplicates += 1;
            return IngestOutcome::Duplicate { learner_episode };
        }
        if let Err(reason) = fits(self.spec, &upload) {
            return IngestOutcome::Refused { reason };
        }
        let id = match self.writer.next_episode_id() {
            Ok(id) => id,
            Err(error) => {
                return IngestOutcome::Refused {
                    reason: format!("{error:#}"),
                };
            }
        };
        let mut episode = Episode {
            start: upload.start,
            transitions: upload.transitions,
            end: upload.end,
        };
        episode.start.episode = id;
        episode.end.episode = id;
        episode
            .transitions
            .iter_mut()
            .for_each(|t: &mut Transition| t.episode = id);
        let origin = EpisodeOrigin {
            episode: id,
            actor: upload.actor.clone(),
            instance: upload.instance,
            actor_episode: origin_key.1,
        };
        if let Err(error) = self.writer.append_episode_from(&episode, Some(&origin)) {
            return IngestOutcome::Refused {
                reason: format!("the learner could not record it: {error:#}"),
            };
        }
        self.seen.insert(origin_key, id);
        self.instances.insert(upload.actor.clone(), upload.instance);
        self.report.episodes_stored += 1;
        self.report.transitions_stored += episode.transitions.len() as u64;
        *self.report.per_actor.entry(upload.actor).or_default() += 1;
        IngestOutcome::Stored {
            learner_episode: id,
        }
    }

    fn close(self) -> anyhow::Result<FleetLearnerReport> {
        self.writer.close()?;
        let mut report = self.report;
        report.ingest_p50_ms = crate::stats::quantile(&self.latencies, 0.5);
        Ok(report)
    }
}

/// The fleet learner's [`LearnerListener`]: champions (without a gate, every version)
/// published to the actors and kept as the latest for actors that ask.
struct FleetFeed<'a> {
    gate: Option<ChampionGate>,
    champion: ChampionCheckpoint,
    device: &'a ResolvedDevice,
    latest: Arc<Mutex<Vec<u8>>>,
    publisher: Publisher<'a>,
    /// Answers actors that ask for the latest policy (declared while it lives).
    _latest_queryable: Queryable<()>,
}

impl<'a> FleetFeed<'a> {
    /// The feed on `session`: what acts first (the gate's champion, or the learner's
    /// version) is the latest policy until another is published.
    fn open(
        session: &Session,
        keys: &FleetKeys,
        (gate, champion): (Option<ChampionGate>, ChampionCheckpoint),
        learner: &Learner,
        device: &'a ResolvedDevice,
    ) -> anyhow::Result<Self> {
        let acting = match &gate {
            Some(gate) => policy_message(gate.champion())?,
            None => PolicyMessage::new(
                learner.version(),
                &learner.policy(),
                learner.policy_config(),
            )?,
        };
        let latest = Arc::new(Mutex::new(encode(&acting)));
        let answer = latest.clone();
        let latest_key = keys.latest_policy.clone();
        let latest_queryable = session
            .declare_queryable(keys.latest_policy.clone())
            .callback(move |query| {
                let bytes = answer.lock().unwrap_or_else(|p| p.into_inner()).clone();
                let _ = query.reply(latest_key.clone(), bytes).wait();
            })
            .wait()
            .map_err(|e| anyhow::anyhow!("declaring {}: {e}", keys.latest_policy))?;
        let publisher = session
            .declare_publisher(keys.policy.clone())
            .congestion_control(CongestionControl::Block)
            .wait()
            .map_err(|e| anyhow::anyhow!("declaring {}: {e}", keys.policy))?;
        Ok(Self {
            gate,
            champion,
            device,
            latest,
            publisher,
            _latest_queryable: latest_queryable,
        })
    }

    /// The champion's message to the actors, after checkpointing it (a failed
    /// checkpoint is a warning: the actors still get the champion).
    fn champion_message(
        gate: &ChampionGate,
        champion: &ChampionCheckpoint,
    ) -> anyhow::Result<PolicyMessage> {
        if let Err(error) = champion.save(gate) {
            eprintln!("warning: the champion's checkpoint failed: {error:#}");
        }
        policy_message(gate.champion())
    }

    /// Sends `message` to every actor and keeps it for those that ask later.
    fn publish(&self, message: &PolicyMessage) -> anyhow::Result<()> {
        let message = encode(message);
        *self.latest.lock().unwrap_or_else(|p| p.into_inner()) = message.clone();
        self.publisher
            .put(message)
            .wait()
            .map_err(|e| anyhow::anyhow!("publishing a policy: {e}"))
    }
}

impl LearnerListener<Learner> for FleetFeed<'_> {
    fn recorded(&mut self, episodes: &[Episode]) -> anyhow::Result<()> {
        let Some(gate) = self.gate.as_mut() else {
            return Ok(());
        };
        if !gate.watch_live(episodes).champion {
            return Ok(());
        }
        let message = Self::champion_message(gate, &self.champion)?;
        self.publish(&message)
    }

    fn new_version(&mut self, learner: &Learner) -> anyhow::Result<()> {
        let message = match self.gate.as_mut() {
            None => PolicyMessage::new(
                learner.version(),
                &learner.policy(),
                learner.policy_config(),
            )?,
            Some(gate) => {
                let challenger = Arc::new(learner.snapshot()?);
                if !gate.consider(challenger, self.device)?.champion {
                    return Ok(());
                }
                Self::champion_message(gate, &self.champion)?
            }
        };
        self.publish(&message)
    }
}

/// Whether `upload` is a whole episode of `spec`'s robot; the error says what is not.
fn fits(spec: &RobotSpec, upload: &EpisodeUpload) -> Result<(), String> {
    let id = upload.start.episode;
    if upload.transitions.is_empty() || upload.end.steps as usize != upload.transitions.len() {
        return Err(format!(
            "episode {id} of {}: {} transitions for {} steps",
            upload.actor,
            upload.transitions.len(),
            upload.end.steps
        ));
    }
    for (step, t) in upload.transitions.iter().enumerate() {
        if t.step as usize != step || t.episode != id {
            return Err(format!(
                "episode {id} of {}: its steps are out of order",
                upload.actor
            ));
        }
        if t.observation.proprio.len() != spec.proprio_dim()
            || t.action.0.len() != spec.action_dim()
        {
            return Err(format!(
                "episode {id} of {}: it does not fit {}",
                upload.actor,
                spec.summary()
            ));
        }
    }
    Ok(())
}

/// The message that sends the imago policy of `snapshot` to the actors (a fleet's
/// learner trains imago's policies only: `run_fleet_learner` refuses a LeRobot one).
fn policy_message(snapshot: &PolicySnapshot) -> anyhow::Result<PolicyMessage> {
    match &snapshot.policy {
        SnapshotPolicy::Imago { policy, config, .. } => {
            PolicyMessage::new(snapshot.version, policy, config)
        }
        SnapshotPolicy::LeRobot(_) => {
            anyhow::bail!("a fleet's actors take imago's policies, not a LeRobot policy")
        }
    }
}

#[cfg(test)]
mod tests {
    use imago_robots::{Action, Robot};

    use super::*;
    use crate::robot::RobotConfig;
    use crate::store::replay::{EpisodeEnd, EpisodeStart, ReplayWriterConfig};

    /// Episode `id` of `actor` (instance `instance`): three ticks of reacher2d.
    fn upload(actor: &str, instance: u64, id: u64) -> EpisodeUpload {
        let mut robot = RobotConfig::default().build().unwrap();
        let mut observation = robot.reset(id);
        let start = EpisodeStart {
            episode: id,
            robot: "reacher2d".into(),
            seed: id,
            instruction: observation.instruction.clone(),
        };
        let transitions = (0..3)
            .map(|step| {
                let action = Action(vec![0.1, -0.1]);
                let outcome = robot.step(&action);
                let before = std::mem::replace(&mut observation, outcome.observation);
                Transition {
                    episode: id,
                    step,
                    observation: before,
                    action,
                    executed: outcome.info.executed,
                    reward: outcome.reward,
                    done: step == 2,
                    success: false,
                    policy_version: 1,
                    intervention: false,
                    behaviour_log_prob: None,
                }
            })
            .collect();
        EpisodeUpload {
            protocol: PROTOCOL_VERSION,
            actor: actor.into(),
            instance,
            start,
            transitions,
            end: EpisodeEnd {
                episode: id,
                steps: 3,
                success: false,
                final_observation: observation,
            },
        }
    }

    #[test]
    fn uploads_are_stored_once_and_a_second_run_directory_under_one_id_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let robot = RobotConfig::default();
        let spec = robot.spec();
        let (writer, _) =
            ReplayWriter::open(dir.path(), ReplayWriterConfig::default(), &robot, "test").unwrap();
        let mut store = EpisodeStore {
            writer,
            seen: HashMap::new(),
            instances: HashMap::new(),
            spec: &spec,
            report: FleetLearnerReport::default(),
            latencies: Vec::new(),
        };
        assert_eq!(
            store.store(upload("a1", 7, 4)),
            IngestOutcome::Stored { learner_episode: 0 }
        );
        // A resend (the acknowledgement was lost) is recognised.
        assert_eq!(
            store.store(upload("a1", 7, 4)),
            IngestOutcome::Duplicate { learner_episode: 0 }
        );
        // Another actor's episode 4 is another episode.
        assert_eq!(
            store.store(upload("a2", 9, 4)),
            IngestOutcome::Stored { learner_episode: 1 }
        );
        // Two run directories under one id (a copied config, a typo) would mix their
        // episodes: refused, with the way out.
        let IngestOutcome::Refused { reason } = store.store(upload("a1", 8, 5)) else {
            panic!("a second run directory under a1 was accepted");
        };
        assert!(reason.contains("--actor-id"), "{reason}");
        let mut misfit = upload("a3", 1, 0);
        misfit.transitions[1].observation.proprio.pop();
        let IngestOutcome::Refused { reason } = store.store(misfit) else {
            panic!("an episode of another robot was accepted");
        };
        assert!(reason.contains("does not fit"), "{reason}");
        let report = store.close().unwrap();
        assert_eq!((report.episodes_stored, report.duplicates), (2, 1));
        let contents = read_replay(dir.path()).unwrap();
        assert_eq!(contents.episodes.len(), 2);
        let origins: Vec<(String, u64, u64)> = contents
            .origins
            .iter()
            .map(|o| (o.actor.clone(), o.actor_episode, o.episode))
            .collect();
        assert_eq!(origins, [("a1".into(), 4, 0), ("a2".into(), 4, 1)]);
        assert_eq!(contents.episodes[1].transitions[0].episode, 1);
    }
}
