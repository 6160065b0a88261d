//! LeRobot datasets in and out (docs/datasets.md).
//!
//! - [`import_lerobot`]: a local LeRobot dataset, layout v3.0 or v2.1, becomes a new
//!   replay whose robot spec comes from the dataset (state names, action bounds from
//!   `meta/stats.json`, camera size, fps as the control rate). Camera frames come from
//!   AV1 videos (decoded in pure Rust) or PNG image columns.
//! - [`export_lerobot`]: a replay's whole episodes become a LeRobot v3.0 dataset with
//!   PNG image features, which LeRobot's `LeRobotDataset` loads.
//!
//! Both write beside their destination and move the result into place only when it is
//! complete.

mod columns;
mod dataset;
mod export;
mod import;
mod info;
mod picture;
mod stats;
mod table;
mod video;

pub use dataset::{DatasetEpisode, FrameSource, LeRobotDataset};
pub use export::{ExportOptions, ExportReport, FrameFormat, export_lerobot};
pub use import::{CameraChoice, EpisodeRange, ImportOptions, ImportReport, import_lerobot};
pub use info::{DatasetInfo, Feature, Layout};
pub use stats::{DatasetStats, EntryStats, VectorStats, read_stats};
