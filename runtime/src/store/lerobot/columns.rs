//! Which parquet columns of a LeRobot dataset hold which field of imago's records,
//! both ways (docs/datasets.md has the table).

use std::collections::HashMap;

use super::info::DatasetInfo;
use super::table::Table;

/// Reward of the transition (`next.reward`).
pub const REWARD: &str = "next.reward";
/// The episode ended with the transition (`next.done`).
pub const DONE: &str = "next.done";
/// The task was achieved on the transition (`next.success`).
pub const SUCCESS: &str = "next.success";
/// imago's extra column: version of the policy that acted (0: scripted or human).
pub const POLICY_VERSION: &str = "policy_version";
/// imago's extra column: the command came from an intervention.
pub const INTERVENTION: &str = "intervention";
/// imago's extra column: the command as the policy chose it, before the safety
/// envelope (`action` is the command as executed).
pub const COMMANDED_ACTION: &str = "commanded_action";
/// imago's extra column: the behaviour policy's log-density of the command (NaN: none).
pub const BEHAVIOUR_LOG_PROB: &str = "behaviour_log_prob";
/// imago's extra column: the seed the robot was reset with for the episode.
pub const EPISODE_SEED: &str = "episode_seed";

/// The columns an import reads.
#[derive(Debug, Clone)]
pub struct FrameColumns {
    state: String,
    action: String,
    state_dim: usize,
    action_dim: usize,
    /// The camera column, when frames are PNG images in the parquet file.
    image: Option<String>,
}

/// The columns of one parquet file, read.
pub struct FrameRows {
    /// `frame_index` per row.
    pub frame_index: Vec<i64>,
    /// `timestamp` per row, seconds from the episode's start.
    pub timestamp: Vec<f32>,
    /// The state.
    pub state: Vec<Vec<f32>>,
    /// The executed action.
    pub action: Vec<Vec<f32>>,
    /// PNG bytes of the camera frames.
    pub images: Option<Vec<Vec<u8>>>,
    /// `next.reward`, when present.
    pub reward: Option<Vec<f32>>,
    /// `next.success`, when present.
    pub success: Option<Vec<bool>>,
    /// imago's extra columns, when present.
    pub policy_version: Option<Vec<i64>>,
    /// See [`INTERVENTION`].
    pub intervention: Option<Vec<bool>>,
    /// See [`COMMANDED_ACTION`].
    pub commanded: Option<Vec<Vec<f32>>>,
    /// See [`BEHAVIOUR_LOG_PROB`].
    pub behaviour_log_prob: Option<Vec<f32>>,
    /// See [`EPISODE_SEED`].
    pub episode_seed: Option<Vec<i64>>,
    /// Rows of each episode, in frame order.
    by_episode: HashMap<i64, Vec<usize>>,
}

impl FrameColumns {
    /// The columns for `state`, `action` and `camera` of a dataset described by `info`.
    pub fn names(
        info: &DatasetInfo,
        state: &str,
        action: &str,
        camera: Option<&str>,
    ) -> anyhow::Result<Self> {
        let dim = |key: &str, flag: &str| -> anyhow::Result<usize> {
            Ok(info.feature(key, flag)?.shape.iter().product())
        };
        let image = camera.filter(|c| info.features.get(*c).is_some_and(|f| f.dtype == "image"));
        Ok(Self {
            state: state.to_string(),
            action: action.to_string(),
            state_dim: dim(state, "--state")?,
            action_dim: dim(action, "--action")?,
            image: image.map(str::to_string),
        })
    }

    /// Reads the columns from `table`.
    pub fn read(&self, table: &Table) -> anyhow::Result<FrameRows> {
        let optional_bools = |name: &str| table.has(name).then(|| table.booleans(name)).transpose();
        let episode_index = table.integers("episode_index")?;
        let frame_index = table.integers("frame_index")?;
        let mut by_episode: HashMap<i64, Vec<usize>> = HashMap::new();
        for (row, &episode) in episode_index.iter().enumerate() {
            by_episode.entry(episode).or_default().push(row);
        }
        for rows in by_episode.values_mut() {
            rows.sort_by_key(|&r| frame_index[r]);
        }
        Ok(FrameRows {
            by_episode,
            frame_index,
            timestamp: table.floats("timestamp")?,
            state: table.vectors(&self.state, self.state_dim)?,
            action: table.vectors(&self.action, self.action_dim)?,
            images: self
                .image
                .as_deref()
                .map(|c| table.image_bytes(c))
                .transpose()?,
            reward: table
                .has(REWARD)
                .then(|| table.floats(REWARD))
                .transpose()?,
            success: optional_bools(SUCCESS)?,
            policy_version: table
                .has(POLICY_VERSION)
                .then(|| table.integers(POLICY_VERSION))
                .transpose()?,
            intervention: optional_bools(INTERVENTION)?,
            commanded: table
                .has(COMMANDED_ACTION)
                .then(|| table.vectors(COMMANDED_ACTION, self.action_dim))
                .transpose()?,
            behaviour_log_prob: table
                .has(BEHAVIOUR_LOG_PROB)
                .then(|| table.floats(BEHAVIOUR_LOG_PROB))
                .transpose()?,
            episode_seed: table
                .has(EPISODE_SEED)
                .then(|| table.integers(EPISODE_SEED))
                .transpose()?,
        })
    }
}

impl FrameRows {
    /// The rows of episode `index`, in frame order.
    pub fn episode_rows(&self, index: u64) -> &[usize] {
        self.by_episode
            .get(&(index as i64))
            .map_or(&[], Vec::as_slice)
    }
}
