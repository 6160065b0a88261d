//! The daemon's side of the bridge: a robot in another process, reached by its key.
//!
//! [`RemoteRobotSettings`] is what a config names (`robot = "remote"` with
//! `[actor.robot] key = ...`); [`RemoteRobotConfig`] is those settings joined with the
//! spec the robot answered, which sizes the models; [`RemoteRobot`] is the live link
//! the actor drives, one command per tick, never waiting longer than the observation
//! age allows.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use imago_robots::bounds::{ConfigError, in_range};
use imago_robots::{Observation, RobotSpec, Step};
use serde::{Deserialize, Serialize};
use zenoh::Wait;
use zenoh::pubsub::{Publisher, Subscriber};

use super::link::{LinkConfig, PeerAlive, express_publisher};
use super::protocol::{
    CommandKind, CommandMessage, ObservationMessage, PROTOCOL_VERSION, RobotKeys, SpecMessage,
    WireError, decode, encode, unix_ns,
};

/// The robot kind's name in the registry: `robot = "remote"`.
pub const NAME: &str = "remote";

/// Observations the link keeps while the actor is busy; older ones are dropped.
const OBSERVATION_QUEUE: usize = 64;

/// `[actor.robot]` of a daemon driving a remote robot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RemoteRobotSettings {
    /// The robot's key (`imago/robots/arm-1`); required.
    pub key: String,
    /// The zenoh session: mode, endpoints, scouting.
    pub link: LinkConfig,
    /// Longest wait for the robot's answer to a command, in ms; a later answer makes
    /// the tick a miss and the robot is held. Default: 80% of the control period.
    /// Range: [1, the control period].
    pub max_observation_age_ms: Option<f32>,
    /// How long to wait at start for the robot to answer its spec, in seconds.
    /// Range: [0.1, 3600].
    pub connect_timeout_s: f32,
    /// Longest wait for the answer to a reset before it is sent again, in seconds.
    /// Range: [0.1, 600].
    pub reset_timeout_s: f32,
}

impl Default for RemoteRobotSettings {
    fn default() -> Self {
        Self {
            key: String::new(),
            link: LinkConfig::default(),
            max_observation_age_ms: None,
            connect_timeout_s: 30.0,
            reset_timeout_s: 10.0,
        }
    }
}

impl RemoteRobotSettings {
    /// Checks the key, the link and every range that does not need the robot's spec.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.key.is_empty() {
            return Err(ConfigError::new(
                "key",
                "",
                "is required: the robot's key, e.g. \"imago/robots/arm-1\" (docs/bridge.md)",
            ));
        }
        RobotKeys::new(&self.key).map_err(|e| ConfigError::new("key", &self.key, e))?;
        self.link
            .validate()
            .map_err(|e| ConfigError::new("link", &self.link.connect, e))?;
        in_range("connect_timeout_s", self.connect_timeout_s, 0.1..=3600.0)?;
        in_range("reset_timeout_s", self.reset_timeout_s, 0.1..=600.0)?;
        if let Some(age) = self.max_observation_age_ms {
            in_range("max_observation_age_ms", age, 1.0..=10_000.0)?;
        }
        Ok(())
    }

    /// Asks the robot at `key` for its spec, waiting up to `connect_timeout_s` for it
    /// to come up. No answer, an answer of another protocol version or a spec no
    /// model fits is an error naming the key.
    pub fn connect(&self) -> anyhow::Result<RemoteRobotConfig> {
        self.validate()?;
        let keys = RobotKeys::new(&self.key).map_err(anyhow::Error::msg)?;
        let session = self.link.open()?;
        let deadline = Instant::now() + Duration::from_secs_f32(self.connect_timeout_s);
        let mut announced = false;
        loop {
            let replies = session
                .get(&keys.spec)
                .timeout(Duration::from_secs(1))
                .wait()
                .map_err(|e| anyhow::anyhow!("querying {}: {e}", keys.spec))?;
            if let Ok(reply) = replies.recv() {
                let sample = reply.result().map_err(|e| {
                    anyhow::anyhow!("the robot at {} answered an error: {e:?}", keys.base)
                })?;
                let message: SpecMessage = decode(&sample.payload().to_bytes(), "spec")
                    .map_err(|e| anyhow::anyhow!("the robot at {}: {e}", keys.base))?;
                let spec = message.spec().map_err(|e| {
                    anyhow::anyhow!("the robot at {} sent an unusable spec: {e}", keys.base)
                })?;
                let robot_settings = serde_json::from_str(&message.settings_json)
                    .unwrap_or(serde_json::Value::String(message.settings_json));
                let config = RemoteRobotConfig {
                    settings: self.clone(),
                    spec,
                    robot_settings,
                };
                config.validate()?;
                return Ok(config);
            }
            if Instant::now() >= deadline {
                anyhow::bail!(
                    "no robot answered at {} within {} s: is `imago robot-serve` (or your adapter) running with --key {}, and can this machine reach it (link.connect = {:?})?",
                    keys.base,
                    self.connect_timeout_s,
                    keys.base,
                    self.link.connect
                );
            }
            if !announced {
                eprintln!("waiting for the robot at {} ...", keys.base);
                announced = true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// A remote robot's settings with the spec it answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteRobotConfig {
    /// What the config said.
    pub settings: RemoteRobotSettings,
    /// What the robot answered: its spaces, rate and camera.
    pub spec: RobotSpec,
    /// The robot's own settings as it reported them.
    pub robot_settings: serde_json::Value,
}

impl RemoteRobotConfig {
    /// Checks the settings, and the observation age against the robot's period.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.settings.validate()?;
        let period_ms = 1000.0 / self.spec.control_hz;
        if let Some(age) = self.settings.max_observation_age_ms
            && age > period_ms
        {
            return Err(ConfigError::new(
                "max_observation_age_ms",
                age,
                format!(
                    "must be at most the robot's control period ({period_ms:.1} ms at {} Hz): a later answer would overrun the next tick",
                    self.spec.control_hz
                ),
            ));
        }
        Ok(())
    }

    /// Longest wait for the answer to a command.
    pub fn observation_wait(&self) -> Duration {
        let period_ms = 1000.0 / self.spec.control_hz;
        Duration::from_secs_f32(
            self.settings
                .max_observation_age_ms
                .unwrap_or(0.8 * period_ms)
                / 1000.0,
        )
    }
}

/// Why a commanded tick has no observation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interruption {
    /// The robot did not answer within the observation age.
    Late,
    /// The robot's liveliness token is gone (process ended, network lost).
    LinkLost,
}

/// The live link to a remote robot: commands out, observations in, liveliness
/// watched. Observations arrive on zenoh's threads into a bounded queue; the actor
/// only waits on that queue, up to a deadline.
pub struct RemoteRobot {
    config: RemoteRobotConfig,
    keys: RobotKeys,
    commands: Publisher<'static>,
    observations: Receiver<Result<ObservationMessage, WireError>>,
    alive: PeerAlive,
    _observation_subscriber: Subscriber<()>,
    // Declared last: dropped after the publisher and subscribers it carries.
    _session: zenoh::Session,
    tick: u64,
    wait: Duration,
}

impl RemoteRobot {
    /// Opens a session and the robot's keys.
    pub fn open(config: &RemoteRobotConfig) -> anyhow::Result<Self> {
        let keys = RobotKeys::new(&config.settings.key).map_err(anyhow::Error::msg)?;
        let session = config.settings.link.open()?;
        let commands = express_publisher(&session, &keys.command)?;
        let (sender, observations) = crossbeam_channel::bounded(OBSERVATION_QUEUE);
        let observation_subscriber = session
            .declare_subscriber(keys.observation.clone())
            .callback(move |sample| {
                let message = decode(&sample.payload().to_bytes(), "observation");
                let _ = sender.try_send(message);
            })
            .wait()
            .map_err(|e| anyhow::anyhow!("subscribing to {}: {e}", keys.observation))?;
        let alive = PeerAlive::watch(&session, &keys.alive)?;
        Ok(Self {
            wait: config.observation_wait(),
            config: config.clone(),
            keys,
            commands,
            observations,
            alive,
            _observation_subscriber: observation_subscriber,
            _session: session,
            tick: 0,
        })
    }

    /// The robot's spec.
    pub fn spec(&self) -> &RobotSpec {
        &self.config.spec
    }

    /// The robot's key.
    pub fn key(&self) -> &str {
        &self.config.settings.key
    }

    /// Whether the robot's liveliness token is present.
    pub fn is_alive(&self) -> bool {
        self.alive.is_alive()
    }

    /// Sends a command for the next tick and returns its number.
    fn send(
        &mut self,
        episode: u64,
        policy_version: u64,
        valid_for: Duration,
        kind: CommandKind,
    ) -> u64 {
        self.tick += 1;
        let message = CommandMessage {
            protocol: PROTOCOL_VERSION,
            tick: self.tick,
            episode,
            policy_version,
            deadline_unix_ns: unix_ns() + valid_for.as_nanos() as u64,
            kind,
        };
        // With congestion control `Drop` a put never waits on the network: a command
        // that cannot be sent now is lost, and its tick ends without an answer.
        if let Err(error) = self.commands.put(encode(&message)).wait() {
            tracing::warn!("sending to {}: {error}", self.keys.command);
        }
        self.tick
    }

    /// The answer to command `tick`, waiting until `deadline`; older answers are
    /// skipped. `Ok(None)`: none came in time.
    fn answer(&self, tick: u64, deadline: Instant) -> anyhow::Result<Option<ObservationMessage>> {
        loop {
            match self.observations.recv_deadline(deadline) {
                Ok(Ok(message)) if message.reply_to == tick => return Ok(Some(message)),
                Ok(Ok(_stale)) => continue,
                Ok(Err(error)) => {
                    return Err(anyhow::anyhow!("the robot at {}: {error}", self.keys.base));
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                    return Ok(None);
                }
            }
        }
    }

    /// Starts episode `episode` from `seed`: waits (checking `stop` every 50 ms) for
    /// the robot to be up, asks it to reset, and returns the first observation; a
    /// reset left unanswered is sent again. `None` once `stop` is set.
    pub fn reset(
        &mut self,
        seed: u64,
        episode: u64,
        stop: &AtomicBool,
    ) -> anyhow::Result<Option<Observation>> {
        let patience = Duration::from_secs_f32(self.config.settings.reset_timeout_s);
        let mut waiting_said = false;
        while !stop.load(Ordering::Relaxed) {
            if !self.is_alive() {
                if !waiting_said {
                    eprintln!("waiting for the robot at {} to come up ...", self.keys.base);
                    waiting_said = true;
                }
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            let tick = self.send(episode, 0, patience, CommandKind::Reset { seed });
            let give_up = Instant::now() + patience;
            while Instant::now() < give_up && !stop.load(Ordering::Relaxed) {
                let slice = (Instant::now() + Duration::from_millis(50)).min(give_up);
                if let Some(message) = self.answer(tick, slice)? {
                    return Ok(Some(message.observation().map_err(|e| {
                        anyhow::anyhow!("the robot at {}: {e}", self.keys.base)
                    })?));
                }
                if !self.is_alive() {
                    break;
                }
            }
        }
        Ok(None)
    }

    /// Sends `action` (with its `chunk`) and waits up to the observation age for the
    /// step it led to. A late answer or a lost robot is an [`Interruption`]; a
    /// message of another protocol version is an error.
    pub fn step(
        &mut self,
        episode: u64,
        policy_version: u64,
        action: &[f32],
        chunk: &[f32],
    ) -> anyhow::Result<Result<Step, Interruption>> {
        if !self.is_alive() {
            return Ok(Err(Interruption::LinkLost));
        }
        let sent = Instant::now();
        let kind = CommandKind::Act {
            action: action.to_vec(),
            chunk: chunk.to_vec(),
        };
        let tick = self.send(episode, policy_version, self.wait, kind);
        match self.answer(tick, sent + self.wait)? {
            Some(message) => Ok(Ok(message
                .step()
                .map_err(|e| anyhow::anyhow!("the robot at {}: {e}", self.keys.base))?)),
            None if self.is_alive() => Ok(Err(Interruption::Late)),
            None => Ok(Err(Interruption::LinkLost)),
        }
    }

    /// Sets how long [`Self::step`] waits for each answer, which is also how long each
    /// command stays valid at the robot: the observation age unless set. Evaluation,
    /// which keeps no control rate, waits longer, so that a loaded machine slows it
    /// down instead of ending it.
    pub fn wait_for_answers(&mut self, wait: Duration) {
        self.wait = wait;
    }

    /// How long [`Self::step`] waits for each answer.
    pub fn answer_wait(&self) -> Duration {
        self.wait
    }

    /// Tells the robot to hold still.
    pub fn hold(&mut self, episode: u64) {
        self.send(episode, 0, self.wait, CommandKind::Hold);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small robot's spec: 20 Hz, a 16x16 camera, two actions.
    fn spec() -> RobotSpec {
        RobotSpec {
            name: "test".into(),
            proprio_names: vec!["x".into(), "y".into()],
            action_limit: vec![1.0, 1.0],
            control_hz: 20.0,
            max_steps: 10,
            camera: Some(imago_robots::CameraSpec {
                width: 16,
                height: 16,
            }),
            action_origin: None,
        }
    }

    /// A loopback TCP port nobody listens on now.
    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    /// Settings reaching a robot at `key` listening on `port`, giving up after 10 s.
    fn settings(key: &str, port: u16) -> RemoteRobotSettings {
        RemoteRobotSettings {
            key: key.into(),
            link: LinkConfig::explicit(vec![], vec![format!("tcp/127.0.0.1:{port}")]),
            connect_timeout_s: 10.0,
            ..RemoteRobotSettings::default()
        }
    }

    #[test]
    fn a_robot_of_another_protocol_version_is_one_clear_error() {
        let port = free_port();
        let key = format!("imago/test/{}/version", std::process::id());
        let robot = LinkConfig::explicit(vec![format!("tcp/127.0.0.1:{port}")], vec![])
            .open()
            .unwrap();
        let mut message = SpecMessage::new(&spec(), &serde_json::json!({}));
        message.protocol = PROTOCOL_VERSION + 1;
        let (reply, spec_key) = (encode(&message), format!("{key}/spec"));
        let _queryable = robot
            .declare_queryable(spec_key.clone())
            .callback(move |query| {
                let _ = query.reply(spec_key.clone(), reply.clone()).wait();
            })
            .wait()
            .unwrap();
        let error = format!("{:#}", settings(&key, port).connect().unwrap_err());
        assert!(
            error.contains(&key)
                && error.contains(&format!("protocol version {}", PROTOCOL_VERSION + 1)),
            "{error}"
        );
    }

    #[test]
    fn no_robot_is_an_error_naming_the_key_after_the_timeout() {
        let key = format!("imago/test/{}/nobody", std::process::id());
        let mut lonely = settings(&key, free_port());
        lonely.connect_timeout_s = 1.0;
        let started = Instant::now();
        let error = format!("{:#}", lonely.connect().unwrap_err());
        assert!(
            error.contains("no robot answered") && error.contains(&key),
            "{error}"
        );
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn settings_out_of_range_name_the_key() {
        let error = RemoteRobotSettings::default().validate().unwrap_err();
        assert_eq!(error.key, "key");
        let mut bad = settings("imago/robots/arm", 7447);
        bad.max_observation_age_ms = Some(0.0);
        assert_eq!(bad.validate().unwrap_err().key, "max_observation_age_ms");
        bad.max_observation_age_ms = Some(80.0);
        let config = RemoteRobotConfig {
            settings: bad,
            spec: spec(),
            robot_settings: serde_json::Value::Null,
        };
        // 80 ms is longer than the 50 ms period.
        let error = config.validate().unwrap_err();
        assert!(error.expected.contains("control period"), "{error}");
    }
}
