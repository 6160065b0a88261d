//! The bridge's wire protocol (docs/bridge.md): the key expressions under a robot's
//! key and the postcard-encoded messages exchanged on them.
//!
//! Every message begins with the protocol version (a postcard varint), so a peer of
//! another version is one clear error naming both versions, never bytes read as the
//! wrong fields. The messages are flat structs of integers, floats, strings, byte
//! strings, options and small enums, so that a peer in another language (the Python
//! adapter, `robots/bridge-python/`) encodes them in a few lines.

use std::io::{Read, Write};

use imago_robots::{
    Action, CameraSpec, Image, Observation, RobotSpec, SafetyVerdict, Step, StepInfo,
};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use thiserror::Error;

/// The protocol version this build speaks; a peer must speak the same.
pub const PROTOCOL_VERSION: u32 = 1;

/// Tick numbers of commands start at 1; an observation that answers no command (a
/// robot publishing on its own) carries `reply_to = 0`.
pub const UNSOLICITED: u64 = 0;

/// A message that could not be read.
#[derive(Debug, Error)]
pub enum WireError {
    /// The peer speaks another protocol version.
    #[error(
        "the peer speaks imago bridge protocol version {theirs}, this imago speaks version {ours}: run the same imago release (or imago_bridge package) on both sides"
    )]
    Version {
        /// The version the message carried.
        theirs: u32,
        /// [`PROTOCOL_VERSION`].
        ours: u32,
    },
    /// The bytes are not a message of the expected kind.
    #[error("malformed {what} message: {detail}")]
    Malformed {
        /// The kind of message expected.
        what: &'static str,
        /// What postcard or the frame decoder said.
        detail: String,
    },
}

/// The key expressions of one robot, all under its key `K` (`imago/robots/arm-1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RobotKeys {
    /// `K`.
    pub base: String,
    /// `K/alive`: the robot's liveliness token, present while it is up.
    pub alive: String,
    /// `K/spec`: the robot's queryable; it answers a [`SpecMessage`].
    pub spec: String,
    /// `K/command`: [`CommandMessage`]s from the daemon to the robot.
    pub command: String,
    /// `K/observation`: [`ObservationMessage`]s from the robot to the daemon.
    pub observation: String,
}

impl RobotKeys {
    /// The keys under `base`; an empty key, wildcards, `$`, `?`, `#` or empty path
    /// chunks are an error naming the key (zenoh key-expression rules, minus
    /// wildcards: one key names one robot).
    pub fn new(base: &str) -> Result<Self, String> {
        let bad =
            |why: &str| format!("`{base}` is not a robot key: {why} (e.g. imago/robots/arm-1)");
        if base.is_empty() {
            return Err(bad("it is empty"));
        }
        if base.contains(['*', '$', '?', '#']) {
            return Err(bad("wildcards and the characters $ ? # are not allowed"));
        }
        if base.split('/').any(str::is_empty) {
            return Err(bad(
                "it has an empty path chunk (a leading, trailing or double /)",
            ));
        }
        zenoh::key_expr::KeyExpr::try_from(base.to_string()).map_err(|e| bad(&e.to_string()))?;
        let under = |leaf: &str| format!("{base}/{leaf}");
        Ok(Self {
            base: base.to_string(),
            alive: under("alive"),
            spec: under("spec"),
            command: under("command"),
            observation: under("observation"),
        })
    }
}

/// The answer of a robot's `K/spec` queryable: what the daemon's models are sized by.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpecMessage {
    /// [`PROTOCOL_VERSION`].
    pub protocol: u32,
    /// The robot's name (`so101`, `reacher2d`).
    pub name: String,
    /// Names of the proprioception entries, in order.
    pub proprio_names: Vec<String>,
    /// Symmetric per-dimension action bound.
    pub action_limit: Vec<f32>,
    /// Control ticks per second.
    pub control_hz: f32,
    /// Step limit of one episode.
    pub max_steps: u32,
    /// Camera frame width and height, when the robot has a camera.
    pub camera: Option<(u32, u32)>,
    /// Per action dimension, the proprioception entry holding that position now.
    pub action_origin: Option<Vec<u32>>,
    /// The robot's own settings as JSON (shown and recorded, not interpreted).
    pub settings_json: String,
}

impl SpecMessage {
    /// The message describing `spec` with `settings` (JSON).
    pub fn new(spec: &RobotSpec, settings: &serde_json::Value) -> Self {
        Self {
            protocol: PROTOCOL_VERSION,
            name: spec.name.clone(),
            proprio_names: spec.proprio_names.clone(),
            action_limit: spec.action_limit.clone(),
            control_hz: spec.control_hz,
            max_steps: spec.max_steps,
            camera: spec.camera.map(|c| (c.width, c.height)),
            action_origin: spec
                .action_origin
                .as_ref()
                .map(|o| o.iter().map(|&i| i as u32).collect()),
            settings_json: settings.to_string(),
        }
    }

    /// The robot spec, checked: a spec no model could be built for is an error naming
    /// the field.
    pub fn spec(&self) -> Result<RobotSpec, String> {
        let spec = RobotSpec {
            name: self.name.clone(),
            proprio_names: self.proprio_names.clone(),
            action_limit: self.action_limit.clone(),
            control_hz: self.control_hz,
            max_steps: self.max_steps,
            camera: self
                .camera
                .map(|(width, height)| CameraSpec { width, height }),
            action_origin: self
                .action_origin
                .as_ref()
                .map(|o| o.iter().map(|&i| i as usize).collect()),
        };
        spec.validate().map_err(|e| e.to_string())?;
        Ok(spec)
    }
}

/// What the daemon asks of the robot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CommandKind {
    /// Start a new episode from the initial condition `seed` selects (a simulated
    /// robot resets; a real one reports where it is).
    Reset {
        /// The episode's seed.
        seed: u64,
    },
    /// Execute `action` now. `chunk` is the policy's whole predicted chunk, flattened
    /// row-major (`action` first), for a robot that keeps acting between commands.
    Act {
        /// The command for this tick, in the robot's units.
        action: Vec<f32>,
        /// The predicted chunk, `steps x action_dim` values.
        chunk: Vec<f32>,
    },
    /// Hold still (the safety envelope's hold): the daemon has no fresh observation
    /// or lost its robot.
    Hold,
}

/// A command from the daemon, on `K/command`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommandMessage {
    /// [`PROTOCOL_VERSION`].
    pub protocol: u32,
    /// The daemon's tick number (from 1); the robot's answer carries it as `reply_to`.
    pub tick: u64,
    /// The daemon's episode id.
    pub episode: u64,
    /// The policy version that chose the command (0 for resets and holds).
    pub policy_version: u64,
    /// Unix time in nanoseconds after which the command is stale and must not be
    /// executed (clocks of two machines must be synchronised, e.g. by NTP or PTP).
    pub deadline_unix_ns: u64,
    /// What to do.
    pub kind: CommandKind,
}

/// How a frame's pixels travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FrameEncoding {
    /// `width * height * 3` RGB bytes.
    Raw,
    /// The raw bytes deflated (zlib format: Python's `zlib.compress` writes it).
    Deflate,
}

/// A camera frame on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireFrame {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// How `bytes` hold the RGB pixels.
    pub encoding: FrameEncoding,
    /// The pixels, row-major, top row first, `[r, g, b]` per pixel.
    pub bytes: Vec<u8>,
}

impl WireFrame {
    /// `image` encoded as `encoding`.
    pub fn encode(image: &Image, encoding: FrameEncoding) -> Self {
        let bytes = match encoding {
            FrameEncoding::Raw => image.rgb.clone(),
            FrameEncoding::Deflate => {
                let mut encoder = flate2::write::ZlibEncoder::new(
                    Vec::with_capacity(image.rgb.len() / 4),
                    flate2::Compression::fast(),
                );
                // Writing into a Vec cannot fail.
                let _ = encoder.write_all(&image.rgb);
                encoder.finish().unwrap_or_default()
            }
        };
        Self {
            width: image.width,
            height: image.height,
            encoding,
            bytes,
        }
    }

    /// The frame's pixels; a size mismatch or a corrupt deflate stream is an error.
    pub fn decode(&self) -> Result<Image, WireError> {
        let expected = self.width as usize * self.height as usize * 3;
        let malformed = |detail: String| WireError::Malformed {
            what: "frame",
            detail,
        };
        let rgb = match self.encoding {
            FrameEncoding::Raw => self.bytes.clone(),
            FrameEncoding::Deflate => {
                let mut rgb = Vec::with_capacity(expected);
                flate2::read::ZlibDecoder::new(&self.bytes[..])
                    .take(expected as u64 + 1)
                    .read_to_end(&mut rgb)
                    .map_err(|e| malformed(format!("deflate stream: {e}")))?;
                rgb
            }
        };
        if rgb.len() != expected {
            return Err(malformed(format!(
                "{}x{} frame has {} bytes of pixels, expected {expected}",
                self.width,
                self.height,
                rgb.len()
            )));
        }
        Ok(Image {
            width: self.width,
            height: self.height,
            rgb,
        })
    }
}

/// What came of a commanded step, as the robot knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireOutcome {
    /// The reward the step earned (0 when the robot does not know one).
    pub reward: f32,
    /// The episode is over.
    pub done: bool,
    /// The task was achieved on this step.
    pub success: bool,
    /// The episode ended by its step limit, not by success.
    pub truncated: bool,
    /// The command actually executed (after the robot's own safety envelope).
    pub executed: Vec<f32>,
    /// What the robot's envelope did to the command.
    pub safety: SafetyVerdict,
    /// Distance of the tracked part to the goal, in robot units (NaN when unknown).
    pub distance_to_goal: f32,
    /// Goal coverage, for tasks scored by it.
    pub coverage: Option<f32>,
}

/// An observation from the robot, on `K/observation`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservationMessage {
    /// [`PROTOCOL_VERSION`].
    pub protocol: u32,
    /// The robot's own sequence number, one more per message.
    pub seq: u64,
    /// The tick of the command this observation follows ([`UNSOLICITED`]: none).
    pub reply_to: u64,
    /// The robot's clock when the observation was taken, Unix nanoseconds.
    pub robot_time_ns: u64,
    /// The camera frame.
    pub frame: Option<WireFrame>,
    /// Proprioception, laid out as the spec names it.
    pub proprio: Vec<f32>,
    /// The episode's instruction.
    pub instruction: String,
    /// The outcome of the step that led here; `None` after a reset.
    pub outcome: Option<WireOutcome>,
}

impl ObservationMessage {
    /// The message for `observation` after a reset (`step: None`) or a step.
    pub fn new(
        seq: u64,
        reply_to: u64,
        observation: &Observation,
        step: Option<&Step>,
        frames: FrameEncoding,
    ) -> Self {
        Self {
            protocol: PROTOCOL_VERSION,
            seq,
            reply_to,
            robot_time_ns: unix_ns(),
            frame: observation
                .image
                .as_ref()
                .map(|image| WireFrame::encode(image, frames)),
            proprio: observation.proprio.clone(),
            instruction: observation.instruction.clone(),
            outcome: step.map(|step| WireOutcome {
                reward: step.reward,
                done: step.done,
                success: step.success,
                truncated: step.info.truncated,
                executed: step.info.executed.0.clone(),
                safety: step.info.safety.clone(),
                distance_to_goal: step.info.distance_to_goal,
                coverage: step.info.coverage,
            }),
        }
    }

    /// The observation it carries.
    pub fn observation(&self) -> Result<Observation, WireError> {
        Ok(Observation {
            image: self.frame.as_ref().map(WireFrame::decode).transpose()?,
            proprio: self.proprio.clone(),
            instruction: self.instruction.clone(),
        })
    }

    /// The step it reports; an error without an outcome.
    pub fn step(&self) -> Result<Step, WireError> {
        let outcome = self.outcome.as_ref().ok_or(WireError::Malformed {
            what: "observation",
            detail: "the answer to a step command has no outcome".into(),
        })?;
        Ok(Step {
            observation: self.observation()?,
            reward: outcome.reward,
            done: outcome.done,
            success: outcome.success,
            info: StepInfo {
                executed: Action(outcome.executed.clone()),
                safety: outcome.safety.clone(),
                truncated: outcome.truncated,
                distance_to_goal: outcome.distance_to_goal,
                coverage: outcome.coverage,
            },
        })
    }
}

/// A message as bytes.
pub fn encode<T: Serialize>(message: &T) -> Vec<u8> {
    // Serialising these plain structs into a Vec cannot fail.
    postcard::to_stdvec(message).unwrap_or_default()
}

/// Reads a message of kind `what`, first checking its protocol version.
pub fn decode<T: DeserializeOwned>(bytes: &[u8], what: &'static str) -> Result<T, WireError> {
    let malformed = |e: postcard::Error| WireError::Malformed {
        what,
        detail: e.to_string(),
    };
    let (version, _) = postcard::take_from_bytes::<u32>(bytes).map_err(malformed)?;
    if version != PROTOCOL_VERSION {
        return Err(WireError::Version {
            theirs: version,
            ours: PROTOCOL_VERSION,
        });
    }
    let (message, rest) = postcard::take_from_bytes::<T>(bytes).map_err(malformed)?;
    if !rest.is_empty() {
        return Err(WireError::Malformed {
            what,
            detail: format!("{} bytes after the message", rest.len()),
        });
    }
    Ok(message)
}

/// Now, in Unix nanoseconds.
pub fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::robot::RobotConfig;
    use imago_robots::Robot;

    #[test]
    fn messages_round_trip_and_frames_decode_to_the_same_pixels() {
        let config = RobotConfig::default();
        let mut robot = config.build().unwrap();
        let first = robot.reset(5);
        let step = robot.step(&Action(vec![0.3, -0.2]));
        for frames in [FrameEncoding::Raw, FrameEncoding::Deflate] {
            let message = ObservationMessage::new(7, 3, &step.observation, Some(&step), frames);
            let back: ObservationMessage = decode(&encode(&message), "observation").unwrap();
            assert_eq!(back.step().unwrap(), step);
            let reset = ObservationMessage::new(1, 1, &first, None, frames);
            let back: ObservationMessage = decode(&encode(&reset), "observation").unwrap();
            assert_eq!(back.observation().unwrap(), first);
            assert!(back.step().is_err(), "a reset carries no outcome");
        }
        let spec = config.spec();
        let message = SpecMessage::new(&spec, &config.to_json());
        let back: SpecMessage = decode(&encode(&message), "spec").unwrap();
        assert_eq!(back.spec().unwrap(), spec);
        let command = CommandMessage {
            protocol: PROTOCOL_VERSION,
            tick: 9,
            episode: 2,
            policy_version: 4,
            deadline_unix_ns: 1,
            kind: CommandKind::Act {
                action: vec![0.5, 0.1],
                chunk: vec![0.5, 0.1, 0.2, 0.0],
            },
        };
        let back: CommandMessage = decode(&encode(&command), "command").unwrap();
        assert_eq!(back, command);
    }

    #[test]
    fn another_protocol_version_is_one_error_naming_both_versions() {
        let mut message = SpecMessage::new(&RobotConfig::default().spec(), &serde_json::json!({}));
        message.protocol = PROTOCOL_VERSION + 1;
        let error = decode::<SpecMessage>(&encode(&message), "spec").unwrap_err();
        let text = error.to_string();
        assert!(matches!(error, WireError::Version { .. }), "{text}");
        assert!(
            text.contains(&format!("version {}", PROTOCOL_VERSION + 1))
                && text.contains(&format!("version {PROTOCOL_VERSION}")),
            "{text}"
        );
        // Garbage and trailing bytes are malformed, not misread.
        assert!(decode::<SpecMessage>(&[1, 0xff, 0xff], "spec").is_err());
        let mut bytes = encode(&SpecMessage::new(
            &RobotConfig::default().spec(),
            &serde_json::json!({}),
        ));
        bytes.push(0);
        let text = decode::<SpecMessage>(&bytes, "spec")
            .unwrap_err()
            .to_string();
        assert!(text.contains("after the message"), "{text}");
    }

    #[test]
    fn a_frame_of_the_wrong_size_or_a_corrupt_stream_is_an_error() {
        let image = Image::filled(4, 4, [1, 2, 3]);
        let mut frame = WireFrame::encode(&image, FrameEncoding::Deflate);
        assert_eq!(frame.decode().unwrap(), image);
        frame.width = 5;
        assert!(
            frame
                .decode()
                .unwrap_err()
                .to_string()
                .contains("expected 60")
        );
        let mut corrupt = WireFrame::encode(&image, FrameEncoding::Deflate);
        corrupt.bytes[2] ^= 0xff;
        assert!(corrupt.decode().is_err());
    }

    #[test]
    fn robot_keys_reject_wildcards_and_empty_chunks() {
        let keys = RobotKeys::new("imago/robots/arm-1").unwrap();
        assert_eq!(keys.command, "imago/robots/arm-1/command");
        for bad in ["", "imago/*", "imago//arm", "/imago", "imago/arm/", "a/$b"] {
            let error = RobotKeys::new(bad).unwrap_err();
            assert!(error.contains("not a robot key"), "{bad}: {error}");
        }
    }

    #[test]
    fn a_spec_no_model_fits_is_an_error_naming_the_field() {
        let mut message = SpecMessage::new(&RobotConfig::default().spec(), &serde_json::json!({}));
        message.action_limit = vec![1.0, f32::NAN];
        assert!(message.spec().unwrap_err().contains("action_limit"));
        message.action_limit = vec![1.0, 1.0];
        message.action_origin = Some(vec![0, 99]);
        assert!(message.spec().unwrap_err().contains("action_origin"));
        message.action_origin = None;
        message.action_limit = vec![1.0, 1e30];
        assert!(
            message
                .spec()
                .unwrap_err()
                .contains("action_limit[1] = 1e30")
        );
        message.action_limit = vec![1.0, 1.0];
        message.control_hz = 0.0;
        assert!(message.spec().unwrap_err().contains("control_hz"));
        message.control_hz = 10.0;
        message.name.clear();
        assert!(message.spec().unwrap_err().contains("name"));
    }
}
