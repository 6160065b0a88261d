//! Real-time chunking's planner: a thread of its own that computes the next action
//! chunk while the control loop executes the current one, so the loop never waits on
//! inference. One request is in flight at a time; the loop asks again as soon as the
//! answer is in.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use burn::Dispatch;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use imago_policies::{HostScratch, PolicyBatch, PolicyConfig};
use imago_robots::Observation;
use rand::rngs::StdRng;

use super::priority;
use super::snapshot::{PolicySnapshot, SnapshotPolicy};
use crate::act::sampling::{SampledCommand, sample_leading_actions};

/// A chunk to plan: from `observation`, seen at tick `step` of `episode`, by
/// `snapshot`, exploring with `rng`.
pub(crate) struct ChunkRequest {
    pub episode: u64,
    pub step: u32,
    pub observation: Observation,
    pub snapshot: Arc<PolicySnapshot>,
    pub rng: StdRng,
}

/// A planned chunk (normalised units, `[k * action_dim]`, every action sampled with
/// the actor's exploration), and the request it answers.
pub(crate) struct PlannedChunk {
    pub episode: u64,
    pub step: u32,
    pub version: u64,
    pub chunk: Vec<f32>,
}

/// The planning thread and its one request in flight.
pub(crate) struct ChunkPlanner {
    requests: Option<Sender<ChunkRequest>>,
    replies: Receiver<anyhow::Result<PlannedChunk>>,
    thread: Option<JoinHandle<()>>,
    in_flight: bool,
}

/// How much of each sampled chunk the robot executes before the policy plans again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Executed {
    /// Its first action (`every_tick`).
    First,
    /// All of it (`synchronous`, `realtime`): every action sampled, as `imago eval
    /// --execute K --sampling-noise S` acts.
    WholeChunk,
}

/// One command sampled by `snapshot` for `observation`, through the buffers given,
/// with `exploration` times the policy's spread: its leading actions are the first
/// action or the whole chunk, as `executed` says.
pub(crate) fn sample_command(
    snapshot: &PolicySnapshot,
    observation: &Observation,
    (batch, scratch): (&mut PolicyBatch, &mut HostScratch),
    device: &burn::tensor::Device<Dispatch>,
    rng: &mut StdRng,
    (exploration, executed): (f32, Executed),
) -> anyhow::Result<SampledCommand> {
    let SnapshotPolicy::Imago { policy, host, .. } = &snapshot.policy else {
        anyhow::bail!(
            "version {} is a LeRobot policy, which acts through its own queues, not imago's sampling",
            snapshot.version
        );
    };
    let leading = match executed {
        Executed::First => 1,
        Executed::WholeChunk => policy.chunk_shape().0,
    };
    batch.clear();
    batch.push(observation)?;
    let mut commands = sample_leading_actions(
        policy,
        host.as_ref().map(|host| (host, scratch)),
        batch,
        device,
        (std::slice::from_mut(rng), &[0]),
        (exploration, leading),
    )?;
    Ok(commands.remove(0))
}

impl ChunkPlanner {
    /// Starts the thread. Each chunk is sampled with `exploration` and answered no
    /// sooner than `added_latency` after it was computed (the slowed-policy knob).
    pub(crate) fn start(
        policy_config: &PolicyConfig,
        device: &burn::tensor::Device<Dispatch>,
        exploration: f32,
        added_latency: Duration,
    ) -> anyhow::Result<Self> {
        let (requests, inbox) = crossbeam_channel::bounded::<ChunkRequest>(1);
        let (outbox, replies) = crossbeam_channel::bounded(1);
        // Its tensor math on a one-thread pool of its own, like the control loop's.
        let pool = priority::actor_pool()?;
        let (policy_config, device) = (policy_config.clone(), device.clone());
        let thread = std::thread::Builder::new()
            .name("imago-planner".into())
            .spawn(move || {
                let mut batch = PolicyBatch::new(&policy_config.input_spec());
                let mut scratch = HostScratch::default();
                pool.install(|| {
                    for mut request in inbox {
                        let planned = sample_command(
                            &request.snapshot,
                            &request.observation,
                            (&mut batch, &mut scratch),
                            &device,
                            &mut request.rng,
                            (exploration, Executed::WholeChunk),
                        )
                        .map(|command| PlannedChunk {
                            episode: request.episode,
                            step: request.step,
                            version: request.snapshot.version,
                            chunk: command.action,
                        });
                        if !added_latency.is_zero() {
                            std::thread::sleep(added_latency);
                        }
                        if outbox.send(planned).is_err() {
                            break;
                        }
                    }
                });
            })
            .map_err(|e| anyhow::anyhow!("cannot start the chunk planner's thread: {e}"))?;
        Ok(Self {
            requests: Some(requests),
            replies,
            thread: Some(thread),
            in_flight: false,
        })
    }

    /// Whether a request is being planned.
    pub(crate) fn busy(&self) -> bool {
        self.in_flight
    }

    /// Asks for a chunk; call only when not [`ChunkPlanner::busy`].
    pub(crate) fn request(&mut self, request: ChunkRequest) -> anyhow::Result<()> {
        debug_assert!(!self.in_flight, "one request at a time");
        self.requests
            .as_ref()
            .and_then(|requests| requests.send(request).ok())
            .ok_or_else(|| anyhow::anyhow!("the chunk planner's thread stopped"))?;
        self.in_flight = true;
        Ok(())
    }

    /// The answer to the request in flight, if it is in; never waits.
    pub(crate) fn try_take(&mut self) -> anyhow::Result<Option<PlannedChunk>> {
        match self.replies.try_recv() {
            Ok(planned) => {
                self.in_flight = false;
                planned.map(Some)
            }
            Err(TryRecvError::Empty) => Ok(None),
            Err(TryRecvError::Disconnected) => {
                anyhow::bail!("the chunk planner's thread stopped")
            }
        }
    }

    /// Waits for the answer to the request in flight; `None` once `stop` is set.
    pub(crate) fn wait(&mut self, stop: &AtomicBool) -> anyhow::Result<Option<PlannedChunk>> {
        while !stop.load(Ordering::Relaxed) {
            match self.replies.recv_timeout(Duration::from_millis(20)) {
                Ok(planned) => {
                    self.in_flight = false;
                    return planned.map(Some);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    anyhow::bail!("the chunk planner's thread stopped")
                }
            }
        }
        Ok(None)
    }
}

impl Drop for ChunkPlanner {
    /// Closes the request queue and waits for the thread (at most one chunk's
    /// planning).
    fn drop(&mut self) {
        self.requests.take();
        // Unblock a thread waiting to deliver an answer nobody will read.
        while self.replies.try_recv().is_ok() {}
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
