//! Fleet learning (docs/fleet.md): many actors, one learner, over zenoh.
//!
//! - Each actor (`imago daemon --learner ENDPOINT`) runs the control loop as a daemon
//!   does and records into its own crash-safe replay, which is also its spill buffer:
//!   [`actor`] forwards every whole episode to the learner and remembers, in a cursor
//!   file written after the learner's acknowledgement, how far it got. A learner that
//!   is away costs nothing but a longer backlog.
//! - The learner (`imago learner`) stores each episode it receives in its replay
//!   (one writer; the episode's origin, actor and id there, recorded beside it, so a
//!   resent episode is recognised as a duplicate even after a crash), acknowledges it
//!   once it is on disk, trains the daemon's [`crate::learn::finetune::Learner`] on
//!   its replay, and publishes each new policy version with a checksum.
//!
//! Versions are the learner's, so the staleness bound and the importance weights work
//! across actors unchanged.

pub mod actor;
pub mod learner;

use burn::module::Module;
use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Recorder};
use burn::{Dispatch, DispatchDevice};
use imago_policies::{Policy, PolicyConfig};
use serde::{Deserialize, Serialize};

use crate::bridge::PROTOCOL_VERSION;
use crate::store::replay::{EpisodeEnd, EpisodeStart, Transition};

/// The fleet's key when none is given.
pub const DEFAULT_FLEET_KEY: &str = "imago/fleet/default";

/// The key expressions of one fleet, all under its key `F`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetKeys {
    /// `F/learner/alive`: the learner's liveliness token.
    pub learner_alive: String,
    /// `F/ingest`: the learner's queryable taking an [`EpisodeUpload`] and answering
    /// an [`IngestReply`] once the episode is on disk.
    pub ingest: String,
    /// `F/policy`: each new [`PolicyMessage`], published.
    pub policy: String,
    /// `F/policy/latest`: the learner's queryable answering the current policy.
    pub latest_policy: String,
}

impl FleetKeys {
    /// The keys under `base` (checked as a robot key is).
    pub fn new(base: &str) -> Result<Self, String> {
        crate::bridge::RobotKeys::new(base).map_err(|e| e.replace("robot key", "fleet key"))?;
        Ok(Self {
            learner_alive: format!("{base}/learner/alive"),
            ingest: format!("{base}/ingest"),
            policy: format!("{base}/policy"),
            latest_policy: format!("{base}/policy/latest"),
        })
    }
}

/// One whole episode from an actor, as its replay holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeUpload {
    /// The protocol version.
    pub protocol: u32,
    /// The actor's id.
    pub actor: String,
    /// The actor's run directory's random identity (see [`crate::store::replay::EpisodeOrigin`]).
    pub instance: u64,
    /// The episode's start (its id is the actor's).
    pub start: EpisodeStart,
    /// Its ticks.
    pub transitions: Vec<Transition>,
    /// Its end.
    pub end: EpisodeEnd,
}

/// What the learner did with an upload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum IngestOutcome {
    /// Stored and on disk, as the learner's episode `learner_episode`.
    Stored {
        /// Its id in the learner's replay.
        learner_episode: u64,
    },
    /// Stored before (a resend after a lost acknowledgement or a restart).
    Duplicate {
        /// Its id in the learner's replay.
        learner_episode: u64,
    },
    /// Not stored: it does not fit the learner's robot, or recording failed.
    Refused {
        /// Why.
        reason: String,
    },
}

/// The learner's answer to an upload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IngestReply {
    /// The protocol version.
    pub protocol: u32,
    /// The episode's id in the actor's replay.
    pub actor_episode: u64,
    /// What happened.
    pub outcome: IngestOutcome,
}

/// A policy version from the learner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyMessage {
    /// The protocol version.
    pub protocol: u32,
    /// The learner's version number.
    pub version: u64,
    /// The policy's config, JSON.
    pub config_json: String,
    /// CRC-32 of `weights`.
    pub checksum: u32,
    /// burn's named MessagePack record of the weights (full precision).
    pub weights: Vec<u8>,
}

impl PolicyMessage {
    /// `policy` (with `config`) as version `version`.
    pub fn new(
        version: u64,
        policy: &Policy<Dispatch>,
        config: &PolicyConfig,
    ) -> anyhow::Result<Self> {
        let weights = NamedMpkBytesRecorder::<FullPrecisionSettings>::default()
            .record(policy.clone().into_record(), ())
            .map_err(|e| anyhow::anyhow!("serialising policy version {version}: {e}"))?;
        Ok(Self {
            protocol: PROTOCOL_VERSION,
            version,
            config_json: serde_json::to_string(config)?,
            checksum: crc32fast::hash(&weights),
            weights,
        })
    }

    /// The policy on `device`; a checksum mismatch or an unreadable config or record
    /// is an error naming the version.
    pub fn policy(
        &self,
        device: &DispatchDevice,
    ) -> anyhow::Result<(PolicyConfig, Policy<Dispatch>)> {
        let version = self.version;
        anyhow::ensure!(
            crc32fast::hash(&self.weights) == self.checksum,
            "policy version {version}: the weights do not match their checksum (damaged in transit)"
        );
        let config: PolicyConfig = serde_json::from_str(&self.config_json)
            .map_err(|e| anyhow::anyhow!("policy version {version}: its config: {e}"))?;
        config
            .validate()
            .map_err(|e| anyhow::anyhow!("policy version {version}: its config: {e}"))?;
        let record = NamedMpkBytesRecorder::<FullPrecisionSettings>::default()
            .load(self.weights.clone(), device)
            .map_err(|e| anyhow::anyhow!("policy version {version}: its weights: {e}"))?;
        let policy = config.init::<Dispatch>(device).load_record(record);
        Ok((config, policy))
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::ndarray::NdArrayDevice;
    use imago_policies::PolicyBatch;
    use imago_robots::Robot;

    use super::*;
    use crate::robot::RobotConfig;

    #[test]
    fn a_policy_travels_whole_and_damage_in_transit_is_an_error() {
        let device = DispatchDevice::NdArray(NdArrayDevice::Cpu);
        let config = PolicyConfig::for_robot(
            imago_policies::Architecture::Vla,
            &RobotConfig::default().spec(),
        )
        .unwrap();
        let policy = config.init::<Dispatch>(&device);
        let observation = RobotConfig::default().build().unwrap().reset(3);
        let actions = |policy: &Policy<Dispatch>| {
            let mut batch = PolicyBatch::new(&config.input_spec());
            batch.push(&observation).unwrap();
            policy
                .act(batch.to_input(&device), None)
                .into_data()
                .to_vec::<f32>()
                .unwrap()
        };
        // Acting initialises the (lazily initialised) weights that are sent.
        let before = actions(&policy);
        let message = PolicyMessage::new(3, &policy, &config).unwrap();
        let (back_config, back) = message.policy(&device).unwrap();
        assert_eq!(back_config, config);
        assert_eq!(actions(&back), before);
        let mut damaged = message.clone();
        let middle = damaged.weights.len() / 2;
        damaged.weights[middle] ^= 1;
        let error = format!("{:#}", damaged.policy(&device).unwrap_err());
        assert!(error.contains("checksum"), "{error}");
    }
}
