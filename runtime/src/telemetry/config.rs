//! Where telemetry goes and how much of it.

use std::path::PathBuf;

use imago_robots::bounds::{ConfigError, in_range};
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
    /// Events the queue holds before new ones are dropped (and counted). Range:
    /// [1, 1048576].
    pub queue: usize,
    /// A camera frame with every this many control steps of a logged episode. Range:
    /// [1, 1000000].
    pub frame_every: u32,
    /// Camera frames are shrunk by this factor in each direction (box filter). Range:
    /// [1, 64].
    pub frame_downsample: u32,
    /// The live control loop logs every this many episodes (1: all). Range: at least 1.
    pub episode_every: u64,
    /// Of episodes read back from a replay (demo phases, `imago inspect`), every this
    /// many are logged step by step. Range: at least 1.
    pub replay_episode_every: u64,
    /// Episodes that get imagined rollouts drawn next to what really followed. Range:
    /// [0, 1000].
    pub imagined_episodes: usize,
    /// Within such an episode, an imagined rollout starts every this many steps.
    /// Range: [1, 1000000].
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
    /// Checks every value against its documented range; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range("queue", self.queue, 1..=1 << 20)?;
        in_range("frame_every", self.frame_every, 1..=1_000_000)?;
        in_range("frame_downsample", self.frame_downsample, 1..=64)?;
        in_range("episode_every", self.episode_every, 1..=u64::MAX)?;
        in_range(
            "replay_episode_every",
            self.replay_episode_every,
            1..=u64::MAX,
        )?;
        in_range("imagined_episodes", self.imagined_episodes, 0..=1000)?;
        in_range("imagine_every", self.imagine_every, 1..=1_000_000)
    }
}
