//! `imago import lerobot`: a LeRobot dataset (v2.1 or v3.0) written as a new imago
//! replay whose robot spec comes from the dataset. The replay is written beside its
//! destination and moved into place only once complete, so a failed import leaves no
//! replay that looks whole.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Instant;

use imago_policies::tokenizer::WordTokenizer;
use imago_robots::{Action, CameraSpec, Image, Observation, RobotSpec};

use super::columns;
use super::dataset::{DatasetEpisode, FrameSource, LeRobotDataset};
use super::export;
use super::info::{DatasetInfo, IMAGO_ROBOT};
use super::picture::{decode_png, resize};
use super::stats::read_stats;
use super::table::Table;
use super::video::VideoReader;
use crate::store::atomic;
use crate::store::outputs::{Input, OutputKind, check_output};
use crate::store::replay::{
    Episode, EpisodeEnd, EpisodeStart, RecordedRobot, ReplayWriter, ReplayWriterConfig, Transition,
};

/// Which camera feature becomes the replay's camera.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CameraChoice {
    /// The dataset's only picture feature (an error when it has several).
    Only,
    /// No camera: proprioception only.
    Without,
    /// This feature.
    Feature(String),
}

impl FromStr for CameraChoice {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "none" => Self::Without,
            key => Self::Feature(key.to_string()),
        })
    }
}

/// Episodes to import: `START..END` (end exclusive; either may be left out) or `N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpisodeRange {
    /// First episode index.
    pub start: u64,
    /// One past the last, `None` for all after `start`.
    pub end: Option<u64>,
}

impl EpisodeRange {
    fn contains(&self, index: u64) -> bool {
        index >= self.start && self.end.is_none_or(|end| index < end)
    }
}

impl FromStr for EpisodeRange {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let number = |t: &str| {
            t.trim().parse::<u64>().map_err(|_| {
                format!("`{s}` is not an episode range (START..END, START.., ..END or N)")
            })
        };
        let range = match s.split_once("..") {
            Some((a, b)) => Self {
                start: if a.is_empty() { 0 } else { number(a)? },
                end: if b.is_empty() { None } else { Some(number(b)?) },
            },
            None => {
                let n = number(s)?;
                Self {
                    start: n,
                    end: Some(n + 1),
                }
            }
        };
        if range.end.is_some_and(|end| end <= range.start) {
            return Err(format!("episode range `{s}` is empty"));
        }
        Ok(range)
    }
}

/// What to import, and where.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// The dataset folder.
    pub dataset: PathBuf,
    /// The new replay.
    pub out: PathBuf,
    /// The camera feature.
    pub camera: CameraChoice,
    /// The state feature (proprioception).
    pub state: String,
    /// The action feature.
    pub action: String,
    /// Episodes to import (all when `None`).
    pub episodes: Option<EpisodeRange>,
    /// Resize camera frames to `(width, height)`.
    pub resize: Option<(u32, u32)>,
    /// Record this instruction instead of the dataset's tasks.
    pub instruction: Option<String>,
    /// Replace what `out` holds (kept until the new replay is complete).
    pub force: bool,
}

/// What an import did.
#[derive(Debug, Clone)]
pub struct ImportReport {
    /// Episodes written.
    pub episodes: usize,
    /// Frames (transitions) written.
    pub frames: usize,
    /// Camera frames decoded from video.
    pub decoded_frames: u64,
    /// The replay's robot spec.
    pub spec: RobotSpec,
    /// Whether the dataset had reward or success columns (else the episodes are
    /// demonstrations without outcome: reward 0, never a success).
    pub has_outcomes: bool,
    /// Wall-clock seconds.
    pub seconds: f64,
}

/// Imports a LeRobot dataset into a new replay; see the module documentation.
pub fn import_lerobot(options: &ImportOptions) -> anyhow::Result<ImportReport> {
    let started = Instant::now();
    let plan = check_output(
        "--out",
        &options.out,
        OutputKind::Replay,
        &[Input {
            flag: "the dataset",
            path: &options.dataset,
        }],
        options.force,
    )?;
    anyhow::ensure!(
        !plan.continues() || options.force,
        "--out {} holds a replay already; an import writes a new one (choose another --out, or --force to replace it)",
        options.out.display()
    );
    let (info, layout) = DatasetInfo::read(&options.dataset)?;
    let camera = match &options.camera {
        CameraChoice::Without => None,
        CameraChoice::Feature(key) => {
            let feature = info.feature(key, "--camera")?;
            anyhow::ensure!(
                feature.is_picture(),
                "--camera {key} is a `{}` feature, not a camera (image or video); cameras: {}",
                feature.dtype,
                info.cameras().join(", ")
            );
            Some(key.clone())
        }
        CameraChoice::Only => match info.cameras().as_slice() {
            [] => None,
            [only] => Some(only.to_string()),
            several => anyhow::bail!(
                "the dataset has {} cameras ({}); choose one with --camera KEY (or --camera none)",
                several.len(),
                several.join(", ")
            ),
        },
    };
    let dataset = LeRobotDataset::open(&options.dataset, (info, layout), camera.as_deref())?;
    let info = &dataset.info;
    let episodes: Vec<DatasetEpisode> = dataset
        .episodes
        .iter()
        .filter(|e| options.episodes.is_none_or(|r| r.contains(e.index)))
        .cloned()
        .collect();
    anyhow::ensure!(
        !episodes.is_empty(),
        "--episodes selects none of the dataset's {} episodes (indices {}..={})",
        dataset.episodes.len(),
        dataset.episodes[0].index,
        dataset.episodes[dataset.episodes.len() - 1].index
    );
    let instructions = instructions(&episodes, options.instruction.as_deref())?;
    let spec = spec(&dataset, options, camera.as_deref(), &episodes)?;
    spec.validate().map_err(|e| {
        anyhow::anyhow!(
            "dataset {} describes a robot imago cannot record: {e}",
            options.dataset.display()
        )
    })?;
    let columns =
        columns::FrameColumns::names(info, &options.state, &options.action, camera.as_deref())?;

    let staged = atomic::sibling_temp(&options.out, "staged");
    let mut reader = EpisodeReader {
        columns,
        camera_size: spec.camera.map(|c| (c.width, c.height)),
        resizing: options.resize.is_some(),
        data: None,
        videos: Videos {
            fps: info.fps,
            open: HashMap::new(),
        },
    };
    let written = (|| -> anyhow::Result<(usize, bool)> {
        let recorded = RecordedRobot {
            spec: spec.clone(),
            settings: None,
        };
        let (mut writer, _) = ReplayWriter::open(
            &staged,
            ReplayWriterConfig::default(),
            recorded,
            "imago import lerobot",
        )?;
        let mut frames = 0;
        let mut has_outcomes = false;
        for (episode, instruction) in episodes.iter().zip(&instructions) {
            let id = writer.next_episode_id()?;
            let (built, outcomes) = reader.episode(episode, id, instruction, &spec)?;
            has_outcomes |= outcomes;
            frames += built.transitions.len();
            writer.append_episode(&built)?;
        }
        writer.close()?;
        Ok((frames, has_outcomes))
    })();
    let (frames, has_outcomes) = match written.and_then(|w| {
        atomic::replace_dir(&staged, &options.out)?;
        Ok(w)
    }) {
        Ok(w) => w,
        Err(error) => {
            let _ = std::fs::remove_dir_all(&staged);
            return Err(error);
        }
    };
    Ok(ImportReport {
        episodes: episodes.len(),
        frames,
        decoded_frames: reader.videos.decoded(),
        spec,
        has_outcomes,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The instruction of every episode: `given`, or its first task. Every word must be
/// in the policies' vocabulary; the error names the word and suggests `--instruction`.
fn instructions(episodes: &[DatasetEpisode], given: Option<&str>) -> anyhow::Result<Vec<String>> {
    let tokenizer = WordTokenizer::new(usize::MAX);
    let mut out = Vec::with_capacity(episodes.len());
    for episode in episodes {
        let text = match given {
            Some(text) => text.to_string(),
            None => episode.tasks.first().cloned().ok_or_else(|| {
                anyhow::anyhow!(
                    "episode {} has no task; give one with --instruction TEXT",
                    episode.index
                )
            })?,
        };
        tokenizer.encode(&text).map_err(|e| {
            anyhow::anyhow!(
                "episode {}: {e}. imago's policies read a fixed vocabulary (docs/datasets.md); record another instruction with --instruction, e.g. --instruction \"push the block onto the target\"",
                episode.index
            )
        })?;
        out.push(text);
    }
    Ok(out)
}

/// The replay's robot spec, from the dataset: state names, action bounds (from
/// `meta/stats.json`, else from the imported actions), camera size, fps.
fn spec(
    dataset: &LeRobotDataset,
    options: &ImportOptions,
    camera: Option<&str>,
    episodes: &[DatasetEpisode],
) -> anyhow::Result<RobotSpec> {
    let info = &dataset.info;
    let state = info.feature(&options.state, "--state")?;
    let action = info.feature(&options.action, "--action")?;
    let vector = |key: &str, flag: &str, f: &super::info::Feature| -> anyhow::Result<usize> {
        match f.shape.as_slice() {
            [n] if *n > 0 && matches!(f.dtype.as_str(), "float32" | "float64") => Ok(*n),
            _ => anyhow::bail!(
                "{flag} {key} is a `{}` feature of shape {:?}; imago reads a vector of floats there",
                f.dtype,
                f.shape
            ),
        }
    };
    let state_dim = vector(&options.state, "--state", state)?;
    let action_dim = vector(&options.action, "--action", action)?;
    let proprio_names = match state.entry_names() {
        Some(names) if names.len() == state_dim => names,
        _ => (0..state_dim).map(|i| format!("state_{i}")).collect(),
    };
    let bounds = match read_stats(&dataset.root)?.and_then(|s| s.bounds(&options.action)) {
        Some(bounds) => bounds,
        None => action_bounds_from_data(episodes, &options.action, action_dim)?,
    };
    anyhow::ensure!(
        bounds.len() == action_dim,
        "meta/stats.json gives {} bounds for `{}`, info.json {action_dim} entries",
        bounds.len(),
        options.action
    );
    let action_limit = bounds
        .iter()
        .map(|&b| if b > 1e-6 && b.is_finite() { b } else { 1.0 })
        .collect();
    let camera_spec = match camera {
        Some(key) => {
            let feature = info.feature(key, "--camera")?;
            let (width, height) = feature.picture_size().ok_or_else(|| {
                anyhow::anyhow!(
                    "camera `{key}` has shape {:?}, not a picture's",
                    feature.shape
                )
            })?;
            let (width, height) = options.resize.unwrap_or((width, height));
            Some(CameraSpec { width, height })
        }
        None => None,
    };
    let max_steps = episodes.iter().map(|e| e.length).max().unwrap_or(1);
    if let Some(recorded) = imago_spec(info, options, camera) {
        return Ok(RobotSpec {
            camera: camera_spec,
            ..recorded
        });
    }
    Ok(RobotSpec {
        name: info
            .robot_type
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "lerobot".into()),
        proprio_names,
        action_limit,
        control_hz: info.fps as f32,
        max_steps: u32::try_from(max_steps)?,
        camera: camera_spec,
        action_origin: None,
    })
}

/// The spec an imago export recorded, when the import reads the columns the export
/// wrote and it fits them.
fn imago_spec(
    info: &DatasetInfo,
    options: &ImportOptions,
    camera: Option<&str>,
) -> Option<RobotSpec> {
    let spec: RobotSpec = serde_json::from_value(info.other.get(IMAGO_ROBOT)?.clone()).ok()?;
    let fits = options.state == export::STATE
        && options.action == export::ACTION
        && camera.is_none_or(|c| c == export::IMAGE)
        && info.features.get(export::STATE)?.shape == [spec.proprio_dim()]
        && info.features.get(export::ACTION)?.shape == [spec.action_limit.len()];
    fits.then_some(spec)
}

/// Per action entry, the largest magnitude in the episodes' actions.
fn action_bounds_from_data(
    episodes: &[DatasetEpisode],
    action: &str,
    dim: usize,
) -> anyhow::Result<Vec<f32>> {
    let mut bounds = vec![0f32; dim];
    let mut files: Vec<&Path> = episodes.iter().map(|e| e.data_file.as_path()).collect();
    files.dedup();
    for file in files {
        for row in Table::read(file)?.vectors(action, dim)? {
            for (b, v) in bounds.iter_mut().zip(row) {
                *b = b.max(v.abs());
            }
        }
    }
    Ok(bounds)
}

/// Reads episodes' frames, keeping the last parquet file and every open video.
struct EpisodeReader {
    columns: columns::FrameColumns,
    camera_size: Option<(u32, u32)>,
    resizing: bool,
    data: Option<(PathBuf, columns::FrameRows)>,
    videos: Videos,
}

impl EpisodeReader {
    /// The episode `source` as imago's episode `id`; also whether it had outcomes.
    /// About 120 lines: each frame's columns, image and outcome are read and checked
    /// in one pass, in the dataset's row order.
    fn episode(
        &mut self,
        source: &DatasetEpisode,
        id: u64,
        instruction: &str,
        spec: &RobotSpec,
    ) -> anyhow::Result<(Episode, bool)> {
        if self
            .data
            .as_ref()
            .is_none_or(|(path, _)| *path != source.data_file)
        {
            let table = Table::read(&source.data_file)?;
            self.data = Some((source.data_file.clone(), self.columns.read(&table)?));
        }
        let (path, rows) = self.data.as_ref().expect("read above");
        let picked = rows.episode_rows(source.index);
        let shown = path.display();
        anyhow::ensure!(
            picked.len() == source.length,
            "{shown}: episode {} has {} frames, the episode metadata says {}",
            source.index,
            picked.len(),
            source.length
        );
        let mut transitions = Vec::with_capacity(picked.len());
        for (step, &row) in picked.iter().enumerate() {
            anyhow::ensure!(
                rows.frame_index[row] == step as i64,
                "{shown}: episode {} has frame_index {} where {step} belongs (a frame is missing or repeated)",
                source.index,
                rows.frame_index[row]
            );
            let image = match &source.frames {
                None => None,
                Some(FrameSource::Images) => {
                    let bytes = &rows.images.as_ref().expect("read with a camera")[row];
                    Some(decode_png(bytes).map_err(|e| {
                        anyhow::anyhow!("{shown}: episode {} frame {step}: {e}", source.index)
                    })?)
                }
                Some(FrameSource::Video { path, from_seconds }) => {
                    let at = from_seconds + rows.timestamp[row] as f64;
                    Some(self.videos.frame(path, at)?)
                }
            };
            let image = match (image, self.camera_size) {
                (Some(image), Some(size)) => {
                    let place = format!("{shown}: episode {} frame {step}", source.index);
                    Some(fit(image, size, self.resizing, &place)?)
                }
                (image, _) => image,
            };
            let state = rows.state[row].clone();
            let action = rows.action[row].clone();
            let commanded = rows
                .commanded
                .as_ref()
                .map_or_else(|| action.clone(), |c| c[row].clone());
            for (name, values) in [("state", &state), ("action", &action)] {
                anyhow::ensure!(
                    values.iter().all(|v| v.is_finite()),
                    "{shown}: episode {} frame {step}: the {name} holds a value that is not finite",
                    source.index
                );
            }
            transitions.push(Transition {
                episode: id,
                step: step as u32,
                observation: Observation {
                    image,
                    proprio: state,
                    instruction: instruction.to_string(),
                },
                action: Action(commanded),
                executed: Action(action),
                reward: rows.reward.as_ref().map_or(0.0, |r| r[row]),
                done: step + 1 == picked.len(),
                success: rows.success.as_ref().is_some_and(|s| s[row]),
                policy_version: rows
                    .policy_version
                    .as_ref()
                    .map_or(0, |v| v[row].max(0) as u64),
                intervention: rows.intervention.as_ref().is_some_and(|v| v[row]),
                behaviour_log_prob: rows
                    .behaviour_log_prob
                    .as_ref()
                    .map(|v| v[row])
                    .filter(|v| v.is_finite()),
            });
        }
        let last = transitions
            .last()
            .ok_or_else(|| anyhow::anyhow!("{shown}: episode {} has no frames", source.index))?;
        let end = EpisodeEnd {
            episode: id,
            steps: transitions.len() as u32,
            success: transitions.iter().any(|t| t.success),
            // LeRobot keeps no observation after the last action: the last one stands in.
            final_observation: last.observation.clone(),
        };
        let seed = rows
            .episode_seed
            .as_ref()
            .map_or(source.index, |s| s[picked[0]].max(0) as u64);
        let start = EpisodeStart {
            episode: id,
            robot: spec.name.clone(),
            seed,
            instruction: instruction.to_string(),
        };
        let outcomes = rows.reward.is_some() || rows.success.is_some();
        Ok((
            Episode {
                start,
                transitions,
                end,
            },
            outcomes,
        ))
    }
}

/// The videos an import has open, each read forward.
struct Videos {
    fps: f64,
    open: HashMap<PathBuf, VideoReader>,
}

impl Videos {
    /// The frame of the video at `path` shown at `seconds`.
    fn frame(&mut self, path: &Path, seconds: f64) -> anyhow::Result<Image> {
        let tolerance = 0.4 / self.fps;
        let reopen = self
            .open
            .get(path)
            .is_none_or(|video| video.is_past(seconds, tolerance));
        if reopen {
            let decoded = self.open.get(path).map_or(0, |v| v.decoded);
            let mut video = VideoReader::open(path)?;
            video.decoded = decoded;
            self.open.insert(path.to_path_buf(), video);
        }
        self.open
            .get_mut(path)
            .expect("opened above")
            .frame_at(seconds, tolerance)
    }

    /// Frames decoded so far.
    fn decoded(&self) -> u64 {
        self.open.values().map(|v| v.decoded).sum()
    }
}

/// A frame at the replay's camera size: resized when `--resize` asked for it, else
/// it must have the size the dataset's info.json gives.
fn fit(
    image: Image,
    (width, height): (u32, u32),
    resizing: bool,
    place: &str,
) -> anyhow::Result<Image> {
    if (image.width, image.height) == (width, height) {
        return Ok(image);
    }
    anyhow::ensure!(
        resizing,
        "{place}: the frame is {}x{}, the dataset's info.json gives {width}x{height}",
        image.width,
        image.height
    );
    Ok(resize(&image, width, height))
}
