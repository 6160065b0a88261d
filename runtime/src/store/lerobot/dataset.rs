//! A LeRobot dataset on disk: its info and, per episode, its length, tasks, the
//! parquet file holding its frames and where its camera frames are, in both layouts.

use std::path::{Path, PathBuf};

use super::info::{DatasetInfo, Layout, fill_template};
use super::table::Table;

/// Where an episode's camera frames are.
#[derive(Debug, Clone, PartialEq)]
pub enum FrameSource {
    /// An MP4 file, from this many seconds into it (v3.0 files hold many episodes).
    Video {
        /// The file.
        path: PathBuf,
        /// When the episode's first frame is shown.
        from_seconds: f64,
    },
    /// PNG bytes in the parquet file's image column.
    Images,
}

/// One episode of a dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetEpisode {
    /// `episode_index`.
    pub index: u64,
    /// Frames.
    pub length: usize,
    /// The episode's tasks (LeRobot allows several; imago uses the first).
    pub tasks: Vec<String>,
    /// The parquet file with its frames.
    pub data_file: PathBuf,
    /// Its camera frames, when a camera is read.
    pub frames: Option<FrameSource>,
}

/// A dataset opened for reading.
pub struct LeRobotDataset {
    /// The dataset folder.
    pub root: PathBuf,
    /// `meta/info.json`.
    pub info: DatasetInfo,
    /// Its layout.
    pub layout: Layout,
    /// Every episode, by `episode_index`.
    pub episodes: Vec<DatasetEpisode>,
}

impl LeRobotDataset {
    /// The dataset at `root` whose `meta/info.json` ([`DatasetInfo::read`]) is `info`:
    /// its episode index, locating the frames of `camera`.
    pub fn open(
        root: &Path,
        (info, layout): (DatasetInfo, Layout),
        camera: Option<&str>,
    ) -> anyhow::Result<Self> {
        if let Some(camera) = camera {
            info.feature(camera, "--camera")?;
        }
        let mut episodes = match layout {
            Layout::V30 => episodes_v30(root, &info, camera)?,
            Layout::V21 => episodes_v21(root, &info, camera)?,
        };
        episodes.sort_by_key(|e| e.index);
        anyhow::ensure!(
            !episodes.is_empty(),
            "{}: the dataset lists no episodes",
            root.display()
        );
        Ok(Self {
            root: root.to_path_buf(),
            info,
            layout,
            episodes,
        })
    }
}

fn is_video(info: &DatasetInfo, camera: &str) -> bool {
    info.features
        .get(camera)
        .is_some_and(|f| f.dtype == "video")
}

fn episodes_v30(
    root: &Path,
    info: &DatasetInfo,
    camera: Option<&str>,
) -> anyhow::Result<Vec<DatasetEpisode>> {
    let folder = root.join("meta/episodes");
    let mut files = Vec::new();
    for chunk in sorted_entries(&folder)? {
        files.extend(
            sorted_entries(&chunk)?
                .into_iter()
                .filter(|p| p.extension().is_some_and(|e| e == "parquet")),
        );
    }
    anyhow::ensure!(
        !files.is_empty(),
        "{}: no episode metadata (meta/episodes/chunk-*/file-*.parquet)",
        folder.display()
    );
    let mut out = Vec::new();
    for file in files {
        let table = Table::read(&file)?;
        let index = table.integers("episode_index")?;
        let length = table.integers("length")?;
        let tasks = table.string_lists("tasks")?;
        let data_chunk = table.integers("data/chunk_index")?;
        let data_file = table.integers("data/file_index")?;
        let video = match camera.filter(|c| is_video(info, c)) {
            Some(camera) => {
                let template = info.video_path.as_deref().ok_or_else(|| {
                    anyhow::anyhow!(
                        "{}: `{camera}` is a video but info.json has no video_path",
                        root.display()
                    )
                })?;
                let chunk = table.integers(&format!("videos/{camera}/chunk_index"))?;
                let file_index = table.integers(&format!("videos/{camera}/file_index"))?;
                let from = table.floats(&format!("videos/{camera}/from_timestamp"))?;
                Some((template, camera, chunk, file_index, from))
            }
            None => None,
        };
        for row in 0..table.rows() {
            let frames = match &video {
                Some((template, camera, chunk, file_index, from)) => Some(FrameSource::Video {
                    path: fill_template(
                        root,
                        template,
                        &[
                            ("video_key", camera),
                            ("chunk_index", &chunk[row].to_string()),
                            ("file_index", &file_index[row].to_string()),
                        ],
                    )?,
                    from_seconds: from[row] as f64,
                }),
                None => camera.map(|_| FrameSource::Images),
            };
            out.push(DatasetEpisode {
                index: non_negative(index[row], "episode_index", &file)?,
                length: non_negative(length[row], "length", &file)? as usize,
                tasks: tasks[row].clone(),
                data_file: fill_template(
                    root,
                    &info.data_path,
                    &[
                        ("chunk_index", &data_chunk[row].to_string()),
                        ("file_index", &data_file[row].to_string()),
                    ],
                )?,
                frames,
            });
        }
    }
    Ok(out)
}

/// A line of `meta/episodes.jsonl` (v2.1).
#[derive(serde::Deserialize)]
struct EpisodeLine {
    episode_index: u64,
    tasks: Vec<String>,
    length: usize,
}

fn episodes_v21(
    root: &Path,
    info: &DatasetInfo,
    camera: Option<&str>,
) -> anyhow::Result<Vec<DatasetEpisode>> {
    let path = root.join("meta/episodes.jsonl");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| anyhow::anyhow!("{}: cannot read it ({e})", path.display()))?;
    let mut out = Vec::new();
    for (number, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let line: EpisodeLine = serde_json::from_str(line).map_err(|e| {
            anyhow::anyhow!(
                "{} line {}: not an episode entry ({e})",
                path.display(),
                number + 1
            )
        })?;
        let chunk = (line.episode_index / info.chunks_size.max(1)).to_string();
        let episode = line.episode_index.to_string();
        let frames = match camera {
            Some(camera) if is_video(info, camera) => {
                let template = info.video_path.as_deref().ok_or_else(|| {
                    anyhow::anyhow!(
                        "{}: `{camera}` is a video but info.json has no video_path",
                        root.display()
                    )
                })?;
                Some(FrameSource::Video {
                    path: fill_template(
                        root,
                        template,
                        &[
                            ("episode_chunk", &chunk),
                            ("video_key", camera),
                            ("episode_index", &episode),
                        ],
                    )?,
                    from_seconds: 0.0,
                })
            }
            Some(_) => Some(FrameSource::Images),
            None => None,
        };
        out.push(DatasetEpisode {
            index: line.episode_index,
            length: line.length,
            tasks: line.tasks,
            data_file: fill_template(
                root,
                &info.data_path,
                &[("episode_chunk", &chunk), ("episode_index", &episode)],
            )?,
            frames,
        });
    }
    Ok(out)
}

fn non_negative(value: i64, column: &str, file: &Path) -> anyhow::Result<u64> {
    u64::try_from(value)
        .map_err(|_| anyhow::anyhow!("{}: column `{column}` holds {value}", file.display()))
}

fn sorted_entries(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| anyhow::anyhow!("{}: cannot list it ({e})", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    Ok(entries)
}
