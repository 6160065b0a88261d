//! `imago daemon --learner ENDPOINT`: an actor of a fleet. The control loop runs and
//! records as in the daemon; instead of a learner, the calling thread forwards every
//! whole episode of the actor's replay to the fleet's learner and hot-swaps the
//! versions the learner publishes.
//!
//! The actor's replay is its spill buffer: what the learner has not acknowledged is
//! there, fsynced, and is forwarded when the learner is back (after a restart of
//! either, too). `fleet-actor.json` holds the actor's id, its run directory's random
//! identity, and the newest episode the learner acknowledged; an episode sent again
//! after a crash between the acknowledgement and that file is answered as a
//! duplicate.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use serde::{Deserialize, Serialize};
use zenoh::Wait;

use super::{EpisodeUpload, FleetKeys, IngestOutcome, IngestReply, PolicyMessage};
use crate::bridge::link::{PeerAlive, payload_queue};
use crate::bridge::protocol::{decode, encode};
use crate::bridge::{LinkConfig, PROTOCOL_VERSION};
use crate::device::ResolvedDevice;
use crate::engine::daemon::DaemonConfig;
use crate::engine::{
    ActorStart, ControlReport, PolicySnapshot, Recording, SnapshotMailbox, run_control_loop,
};
use crate::store::atomic::write_file;
use crate::store::lock::DirLock;
use crate::store::outputs::{Holding, holding, mark_run_directory};
use crate::store::replay::{Episode, ReplayFollower};
use crate::telemetry::Telemetry;

/// The run-directory marker of a fleet actor.
const RUN_KIND: &str = "fleet-actor";
/// How long one upload waits for the learner's answer.
const UPLOAD_PATIENCE: Duration = Duration::from_secs(5);
/// How long a stopping actor keeps forwarding its last episodes.
const FINAL_FORWARD: Duration = Duration::from_secs(20);

/// Where and as whom an actor runs.
#[derive(Debug, Clone)]
pub struct FleetActorOptions {
    /// The actor's run directory (its replay and forwarding cursor).
    pub run_dir: PathBuf,
    /// The actor's id, unique in the fleet and the same across its restarts.
    pub actor_id: String,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// The zenoh session (the learner's endpoint in `connect`).
    pub link: LinkConfig,
    /// The fleet's key.
    pub fleet_key: String,
    /// Where the control loop logs.
    pub telemetry: Telemetry,
}

/// What an actor did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetActorReport {
    /// The control loop and its recording.
    #[serde(flatten)]
    pub control: ControlReport,
    /// Episodes the learner acknowledged in this run (stored or already stored).
    pub episodes_forwarded: u64,
    /// Of those, ones the learner had stored before.
    pub duplicates: u64,
    /// Whole episodes of the replay the learner has not acknowledged yet.
    pub episodes_pending: u64,
    /// Wall time, seconds.
    pub seconds: f64,
}

/// `fleet-actor.json`: who the actor is, and the newest episode of its replay the
/// learner holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct ForwardCursor {
    actor: String,
    /// Drawn at random when the run directory is first used.
    instance: u64,
    through_episode: Option<u64>,
}

/// Runs an actor of the fleet until `stop` is set or `options.duration` passes, then
/// forwards what is left (up to 20 s).
pub fn run_fleet_actor(
    config: &DaemonConfig,
    options: &FleetActorOptions,
    device: &ResolvedDevice,
    stop: &AtomicBool,
) -> anyhow::Result<FleetActorReport> {
    let keys = FleetKeys::new(&options.fleet_key).map_err(anyhow::Error::msg)?;
    let session = options.link.open()?;
    let _lock = open_actor_dir(&options.run_dir)?;
    // Its cursor (and whose run directory this is) is checked before the learner is
    // waited for.
    let replay = options.run_dir.join("replay");
    let mut forwarder = Forwarder::new(
        &session,
        &keys,
        &options.actor_id,
        &options.run_dir,
        &replay,
    )?;
    let (_policy_subscriber, policies) = payload_queue(&session, &keys.policy, 4)?;
    let learner_up = PeerAlive::watch(&session, &keys.learner_alive)?;
    let Some(first) = latest_policy(&session, &keys, stop)? else {
        anyhow::bail!("stopped before the learner answered");
    };
    let (policy_config, policy) = first.policy(&device.inference)?;
    let mut version = first.version;
    eprintln!(
        "actor {}: policy version {version} from the learner at {}",
        options.actor_id, options.fleet_key
    );
    let mailbox = SnapshotMailbox::default();
    let started = Instant::now();
    let deadline = options.duration.map(|d| started + d);
    let out_of_time = || deadline.is_some_and(|d| Instant::now() >= d);
    let mut forward_error = None;
    let control = run_control_loop(
        ActorStart {
            config: &config.actor,
            initial: std::sync::Arc::new(PolicySnapshot::new(version, policy, &policy_config)),
            device: &device.inference,
        },
        Recording {
            dir: &replay,
            config: config.replay.clone(),
            status_every: Some(Duration::from_secs_f64(config.status_every_seconds)),
            telemetry: options.telemetry.clone(),
            purpose: "imago daemon (fleet actor)",
        },
        &mailbox,
        stop,
        || {
            while !stop.load(Ordering::Relaxed) && !out_of_time() {
                if let Some(newer) = newest_policy(&policies, version, device) {
                    version = newer.version;
                    mailbox.publish(std::sync::Arc::new(newer));
                }
                if learner_up.is_alive()
                    && let Err(error) = forwarder.pump(Duration::from_millis(500))
                {
                    forward_error = Some(error);
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            stop.store(true, Ordering::Relaxed);
        },
    )?;
    if let Some(error) = forward_error {
        return Err(error.context("forwarding episodes to the learner"));
    }
    // The last episodes the control loop recorded, while the learner is there.
    let until = Instant::now() + FINAL_FORWARD;
    while Instant::now() < until && learner_up.is_alive() {
        forwarder.pump(Duration::from_secs(1))?;
        if forwarder.pending.is_empty() && forwarder.poll()? == 0 {
            break;
        }
    }
    forwarder.poll()?;
    Ok(FleetActorReport {
        control,
        episodes_forwarded: forwarder.forwarded,
        duplicates: forwarder.duplicates,
        episodes_pending: forwarder.pending.len() as u64,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The actor's run directory, locked: new, or an earlier run of a fleet actor, which
/// is continued (its unforwarded episodes are forwarded). Anything else there is an
/// error.
fn open_actor_dir(run_dir: &Path) -> anyhow::Result<DirLock> {
    let lock = DirLock::acquire(run_dir, "imago daemon (fleet actor)")?;
    match holding(run_dir) {
        Holding::Nothing | Holding::EmptyDirectory => mark_run_directory(run_dir, RUN_KIND)?,
        Holding::RunDirectory(kind) if kind == RUN_KIND => {}
        other => anyhow::bail!(
            "{} holds {other}, not a fleet actor's run; give the actor a directory of its own (--run-dir)",
            run_dir.display()
        ),
    }
    Ok(lock)
}

/// Asks the learner for its current policy until it answers (or `stop` is set).
fn latest_policy(
    session: &zenoh::Session,
    keys: &FleetKeys,
    stop: &AtomicBool,
) -> anyhow::Result<Option<PolicyMessage>> {
    let mut said = false;
    while !stop.load(Ordering::Relaxed) {
        let replies = session
            .get(&keys.latest_policy)
            .timeout(Duration::from_secs(2))
            .wait()
            .map_err(|e| anyhow::anyhow!("querying {}: {e}", keys.latest_policy))?;
        if let Ok(reply) = replies.recv()
            && let Ok(sample) = reply.result()
        {
            let message: PolicyMessage = decode(&sample.payload().to_bytes(), "policy")
                .map_err(|e| anyhow::anyhow!("the learner: {e}"))?;
            return Ok(Some(message));
        }
        if !said {
            eprintln!("waiting for the learner at {} ...", keys.latest_policy);
            said = true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(None)
}

/// The newest policy the learner published that is newer than `current`, ready to
/// swap in; a damaged one is reported and skipped.
fn newest_policy(
    policies: &Receiver<Vec<u8>>,
    current: u64,
    device: &ResolvedDevice,
) -> Option<PolicySnapshot> {
    let newest = policies
        .try_iter()
        .filter_map(|bytes| match decode::<PolicyMessage>(&bytes, "policy") {
            Ok(message) => Some(message),
            Err(error) => {
                eprintln!("warning: ignored a policy from the learner: {error}");
                None
            }
        })
        .filter(|message| message.version > current)
        .max_by_key(|message| message.version)?;
    match newest.policy(&device.inference) {
        Ok((config, policy)) => Some(PolicySnapshot::new(newest.version, policy, &config)),
        Err(error) => {
            eprintln!("warning: ignored a policy from the learner: {error:#}");
            None
        }
    }
}

/// Sends the actor's whole episodes to the learner, in order, each until it is
/// acknowledged.
struct Forwarder<'a> {
    session: &'a zenoh::Session,
    keys: &'a FleetKeys,
    actor: String,
    instance: u64,
    cursor_path: PathBuf,
    through: Option<u64>,
    follower: ReplayFollower,
    pending: VecDeque<Episode>,
    forwarded: u64,
    duplicates: u64,
}

impl<'a> Forwarder<'a> {
    fn new(
        session: &'a zenoh::Session,
        keys: &'a FleetKeys,
        actor: &str,
        run_dir: &Path,
        replay: &Path,
    ) -> anyhow::Result<Self> {
        let cursor_path = run_dir.join("fleet-actor.json");
        let cursor = match std::fs::read(&cursor_path) {
            Ok(bytes) => {
                let cursor: ForwardCursor = serde_json::from_slice(&bytes).map_err(|e| {
                    anyhow::anyhow!("{} is not readable: {e}", cursor_path.display())
                })?;
                anyhow::ensure!(
                    cursor.actor == actor,
                    "{} belongs to actor {}, not {actor}: each actor needs its own run directory (or pass --actor-id {})",
                    run_dir.display(),
                    cursor.actor,
                    cursor.actor
                );
                cursor
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let cursor = ForwardCursor {
                    actor: actor.to_string(),
                    instance: rand::random(),
                    through_episode: None,
                };
                write_file(&cursor_path, &serde_json::to_vec(&cursor)?)?;
                cursor
            }
            Err(e) => {
                return Err(anyhow::anyhow!(
                    "cannot read {}: {e}",
                    cursor_path.display()
                ));
            }
        };
        Ok(Self {
            session,
            keys,
            actor: actor.to_string(),
            instance: cursor.instance,
            cursor_path,
            through: cursor.through_episode,
            follower: ReplayFollower::new(replay),
            pending: VecDeque::new(),
            forwarded: 0,
            duplicates: 0,
        })
    }

    /// Takes in the whole episodes recorded since the last look; returns how many.
    fn poll(&mut self) -> anyhow::Result<usize> {
        let (through, pending) = (self.through, &mut self.pending);
        let mut taken = 0;
        self.follower.poll(|episode| {
            if through.is_none_or(|t| episode.start.episode > t) {
                pending.push_back(episode);
                taken += 1;
            }
        })?;
        Ok(taken)
    }

    /// Forwards pending episodes for up to `budget`; stops at the first the learner
    /// does not answer (it is away or busy: they are sent again later).
    fn pump(&mut self, budget: Duration) -> anyhow::Result<()> {
        if self.pending.is_empty() {
            self.poll()?;
        }
        let until = Instant::now() + budget;
        while let Some(episode) = self.pending.front() {
            if Instant::now() >= until {
                break;
            }
            let upload = EpisodeUpload {
                protocol: PROTOCOL_VERSION,
                actor: self.actor.clone(),
                instance: self.instance,
                start: episode.start.clone(),
                transitions: episode.transitions.clone(),
                end: episode.end.clone(),
            };
            let Some(reply) = self.send(&upload)? else {
                break;
            };
            match reply.outcome {
                IngestOutcome::Stored { .. } => {}
                IngestOutcome::Duplicate { .. } => self.duplicates += 1,
                IngestOutcome::Refused { reason } => {
                    anyhow::bail!(
                        "the learner refused episode {}: {reason}",
                        upload.start.episode
                    )
                }
            }
            self.forwarded += 1;
            self.through = Some(upload.start.episode);
            let cursor = ForwardCursor {
                actor: self.actor.clone(),
                instance: self.instance,
                through_episode: self.through,
            };
            write_file(&self.cursor_path, &serde_json::to_vec(&cursor)?)?;
            self.pending.pop_front();
        }
        Ok(())
    }

    /// One upload and the learner's answer; `None` when none came in time.
    fn send(&self, upload: &EpisodeUpload) -> anyhow::Result<Option<IngestReply>> {
        let replies = self
            .session
            .get(&self.keys.ingest)
            .payload(encode(upload))
            .timeout(UPLOAD_PATIENCE)
            .wait()
            .map_err(|e| anyhow::anyhow!("sending to {}: {e}", self.keys.ingest))?;
        let Ok(reply) = replies.recv() else {
            return Ok(None);
        };
        let Ok(sample) = reply.result() else {
            return Ok(None);
        };
        let reply: IngestReply = decode(&sample.payload().to_bytes(), "ingest reply")
            .map_err(|e| anyhow::anyhow!("the learner: {e}"))?;
        anyhow::ensure!(
            reply.actor_episode == upload.start.episode,
            "the learner answered for episode {} when {} was sent",
            reply.actor_episode,
            upload.start.episode
        );
        Ok(Some(reply))
    }
}
