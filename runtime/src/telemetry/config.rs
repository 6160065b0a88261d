//! Where telemetry goes and how much of it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The address `--rerun-connect` uses when given no URL: a viewer on this machine.
pub const DEFAULT_VIEWER_URL: &str = "rerun+http://127.0.0.1:9876/proxy";

/// Where a recording goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TelemetryTarget {
    /// Saved to an `.rrd` file (`--rerun PATH.rrd`).
    File(PathBuf),
    /// Streamed to a running viewer at this gRPC URL (`--rerun-connect [URL]`).
    Connect(String),
    /// Streamed to a viewer this process starts (`--rerun-spawn`; needs `rerun` on
    /// the `PATH`).
    Spawn,
}

/// How much is logged; every field has a default (`[telemetry]` in a daemon config).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// Events the queue holds before new ones are dropped (and counted).
    pub queue: usize,
    /// A camera frame with every this many control steps of a logged episode.
    pub frame_every: u32,
    /// Camera frames are shrunk by this factor in each direction (box filter).
    pub frame_downsample: u32,
    /// The live control loop logs every this many episodes (1: all).
    pub episode_every: u64,
    /// Of episodes read back from a replay (demo phases, `imago inspect`), every this
    /// many are logged step by step.
    pub replay_episode_every: u64,
    /// Episodes that get imagined rollouts drawn next to what really followed.
    pub imagined_episodes: usize,
    /// Within such an episode, an imagined rollout starts every this many steps.
    pub imagine_every: u32,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            queue: 4096,
            frame_every: 5,
            frame_downsample: 1,
            episode_every: 1,
            replay_episode_every: 10,
            imagined_episodes: 3,
            imagine_every: 4,
        }
    }
}

impl TelemetryConfig {
    /// Checks that every count and rate is usable.
    pub fn validate(&self) -> Result<(), String> {
        for (name, value) in [
            ("queue", self.queue as u64),
            ("frame_every", self.frame_every as u64),
            ("frame_downsample", self.frame_downsample as u64),
            ("episode_every", self.episode_every),
            ("replay_episode_every", self.replay_episode_every),
            ("imagine_every", self.imagine_every as u64),
        ] {
            if value == 0 {
                return Err(format!("{name} must be at least 1"));
            }
        }
        Ok(())
    }
}
