//! The robot's side of the bridge for imago's own simulated robots
//! (`imago robot-serve`): the same robots the daemon drives locally, in another
//! process, so that the remote path is tested against known behaviour.
//!
//! A simulated robot moves one tick per command, when the command arrives: the
//! daemon's clock sets the pace (the control rate), and the same seeds and actions
//! give the same episodes as the local robot, bit for bit.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use imago_robots::Robot;
use serde::Serialize;
use zenoh::Wait;

use super::link::{LinkConfig, alive_token, express_publisher, payload_queue};
use super::protocol::{
    CommandKind, CommandMessage, FrameEncoding, ObservationMessage, RobotKeys, SpecMessage, decode,
    encode, unix_ns,
};
use crate::robot::{RobotConfig, SimRobot};

/// Commands the server keeps while it steps; more are dropped (a daemon sends one
/// per tick and waits for its answer).
const COMMAND_QUEUE: usize = 256;

/// Where and how a robot is served.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The robot's key.
    pub key: String,
    /// The zenoh session.
    pub link: LinkConfig,
    /// How camera frames travel.
    pub frames: FrameEncoding,
}

/// What a server did, printed when it stops.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ServeReport {
    /// Episodes started by a reset command.
    pub resets: u64,
    /// Steps taken.
    pub steps: u64,
    /// Hold commands received.
    pub holds: u64,
    /// Commands that arrived after their deadline and were not executed.
    pub stale_commands: u64,
    /// Step commands with no episode running (before a reset or after its end).
    pub commands_without_episode: u64,
    /// Messages that could not be read (another protocol version, garbage).
    pub unreadable: u64,
}

/// Serves `robot` (a simulated robot of `config`) at `options.key` until `stop` is
/// set; `ready` runs once the robot is reachable.
pub fn serve_robot(
    config: &RobotConfig,
    options: &ServeOptions,
    stop: &AtomicBool,
    ready: impl FnOnce(),
) -> anyhow::Result<ServeReport> {
    let mut robot: SimRobot = config.build()?;
    let keys = RobotKeys::new(&options.key).map_err(anyhow::Error::msg)?;
    let session = options.link.open()?;
    let spec_reply = encode(&SpecMessage::new(robot.spec(), &config.to_json()));
    let spec_key = keys.spec.clone();
    let _queryable = session
        .declare_queryable(keys.spec.clone())
        .callback(move |query| {
            if let Err(error) = query.reply(spec_key.clone(), spec_reply.clone()).wait() {
                tracing::warn!("answering a spec query: {error}");
            }
        })
        .wait()
        .map_err(|e| anyhow::anyhow!("declaring {}: {e}", keys.spec))?;
    let observations = express_publisher(&session, &keys.observation)?;
    let (_subscriber, commands) = payload_queue(&session, &keys.command, COMMAND_QUEUE)?;
    // Declared last: a daemon that sees the robot alive finds it answering.
    let _alive = alive_token(&session, &keys.alive)?;
    ready();
    let mut report = ServeReport::default();
    let (mut seq, mut running) = (0u64, false);
    while !stop.load(Ordering::Relaxed) {
        let Ok(bytes) = commands.recv_timeout(Duration::from_millis(50)) else {
            continue;
        };
        let command: CommandMessage = match decode(&bytes, "command") {
            Ok(command) => command,
            Err(error) => {
                if report.unreadable == 0 {
                    eprintln!("robot-serve: ignored a command: {error}");
                }
                report.unreadable += 1;
                continue;
            }
        };
        if unix_ns() > command.deadline_unix_ns {
            report.stale_commands += 1;
            continue;
        }
        let message = match command.kind {
            CommandKind::Reset { seed } => {
                report.resets += 1;
                running = true;
                let observation = robot.reset(seed);
                ObservationMessage::new(seq, command.tick, &observation, None, options.frames)
            }
            CommandKind::Act { action, .. } if running => {
                report.steps += 1;
                let step = robot.step(&imago_robots::Action(action));
                running = !step.done;
                ObservationMessage::new(
                    seq,
                    command.tick,
                    &step.observation,
                    Some(&step),
                    options.frames,
                )
            }
            CommandKind::Act { .. } => {
                report.commands_without_episode += 1;
                continue;
            }
            CommandKind::Hold => {
                // A simulated robot holding still does not advance: nothing to
                // report. The daemon starts a new episode next.
                report.holds += 1;
                running = false;
                continue;
            }
        };
        seq += 1;
        if let Err(error) = observations.put(encode(&message)).wait() {
            tracing::warn!("publishing on {}: {error}", keys.observation);
        }
    }
    Ok(report)
}
