//! `imago export lerobot`: a replay's whole episodes written as a LeRobot v3.0
//! dataset (meta/info.json, stats.json, tasks.parquet, episodes metadata, one data
//! parquet file), camera frames as PNG image features. Written beside its
//! destination and moved into place only once complete.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, ListBuilder, StringBuilder};
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, FixedSizeListArray, Float32Array, Int64Array,
    StringArray, StructArray,
};
use arrow_schema::{DataType, Field, Fields, Schema};
use imago_robots::RobotSpec;

use super::columns::{
    BEHAVIOUR_LOG_PROB, COMMANDED_ACTION, DONE, EPISODE_SEED, INTERVENTION, POLICY_VERSION, REWARD,
    SUCCESS,
};
use super::info::{DatasetInfo, Feature, IMAGO_ROBOT};
use super::picture::encode_png;
use super::stats::{DatasetStats, VectorStats};
use super::table::TableWriter;
use crate::store::atomic;
use crate::store::outputs::{Input, OutputKind, check_output};
use crate::store::replay::{Episode, EpisodeSelection, ReplaySource, read_training_replay};

/// The state feature an export writes.
pub const STATE: &str = "observation.state";
/// The action feature an export writes (the executed command).
pub const ACTION: &str = "action";
/// The camera feature an export writes.
pub const IMAGE: &str = "observation.image";
const DATA_FILE: &str = "data/chunk-000/file-000.parquet";
const EPISODES_FILE: &str = "meta/episodes/chunk-000/file-000.parquet";

/// How camera frames are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameFormat {
    /// PNG image features inside the parquet file (lossless).
    Png,
    /// AV1 video files (LeRobot's default): not written by this build.
    Av1,
}

impl std::str::FromStr for FrameFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "png" => Ok(Self::Png),
            "av1" => Ok(Self::Av1),
            other => Err(format!("`{other}` is not a frame format (png, av1)")),
        }
    }
}

/// What to export, and where.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    /// The replay.
    pub replay: PathBuf,
    /// The new dataset folder.
    pub out: PathBuf,
    /// Frames per second to record (the robot's control rate when `None`).
    pub fps: Option<f64>,
    /// How camera frames are stored.
    pub frames: FrameFormat,
    /// Replace what `out` holds (kept until the new dataset is complete).
    pub force: bool,
}

/// What an export wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportReport {
    /// Episodes written.
    pub episodes: usize,
    /// Frames written.
    pub frames: usize,
    /// Distinct tasks.
    pub tasks: usize,
    /// Whole episodes of the replay left out as damaged.
    pub damaged: usize,
}

/// Exports a replay's whole episodes; see the module documentation.
pub fn export_lerobot(options: &ExportOptions) -> anyhow::Result<ExportReport> {
    anyhow::ensure!(
        options.frames == FrameFormat::Png,
        "--video av1: this build has no AV1 encoder (the pure-Rust one, rav1e, is not in imago's dependency tree); export with --video png, which LeRobot reads as image features, and re-encode with LeRobot's tools if you need video"
    );
    check_out(&options.out, &options.replay, options.force)?;
    let replay = read_training_replay(ReplaySource {
        dir: &options.replay,
        strict: false,
        episodes: EpisodeSelection::All,
    })?;
    let spec = replay.spec;
    let fps = options.fps.unwrap_or(spec.control_hz as f64);
    anyhow::ensure!(
        fps.is_finite() && fps > 0.0,
        "--fps {fps}: must be positive"
    );
    let episodes = &replay.contents.episodes;
    let staged = atomic::sibling_temp(&options.out, "staged");
    let written = write_dataset(&staged, &spec, episodes, fps);
    let report = match written.and_then(|r| atomic::replace_dir(&staged, &options.out).map(|()| r))
    {
        Ok(report) => report,
        Err(error) => {
            let _ = std::fs::remove_dir_all(&staged);
            return Err(error);
        }
    };
    Ok(ExportReport {
        damaged: replay.contents.damaged.len(),
        ..report
    })
}

/// `--out` must be new or an empty folder; with `--force` it may hold anything but
/// the replay (kept until the new dataset is complete).
fn check_out(out: &Path, replay: &Path, force: bool) -> anyhow::Result<()> {
    let plan = check_output(
        "--out",
        out,
        OutputKind::LeRobotDataset,
        &[Input {
            flag: "--replay",
            path: replay,
        }],
        force,
    )?;
    anyhow::ensure!(
        !plan.continues() || force,
        "--out {} holds a LeRobot dataset already, not an empty folder; an export writes a new one (choose another --out, or --force to replace it; it is kept until the new dataset is complete)",
        out.display()
    );
    Ok(())
}

/// Writes the dataset's files in the order LeRobot's layout needs them (the data
/// files, the episode and task tables, statistics, `info.json` last). About 120
/// lines: one pass over the episodes gathers the rows and the statistics the later
/// files are made of.
fn write_dataset(
    dir: &Path,
    spec: &RobotSpec,
    episodes: &[Episode],
    fps: f64,
) -> anyhow::Result<ExportReport> {
    let state_dim = spec.proprio_dim();
    let action_dim = spec.action_limit.len();
    let mut tasks: Vec<String> = Vec::new();
    let mut task_of = HashMap::new();
    for episode in episodes {
        task_of
            .entry(episode.start.instruction.clone())
            .or_insert_with(|| {
                tasks.push(episode.start.instruction.clone());
                tasks.len() - 1
            });
    }
    let schema = frame_schema(state_dim, action_dim, spec.camera.is_some());
    let mut data = TableWriter::create(&dir.join(DATA_FILE), schema, HashMap::new())?;
    let mut state_stats = VectorStats::new(state_dim);
    let mut action_stats = VectorStats::new(action_dim);
    let mut image_stats = VectorStats::new(3);
    let mut index = 0i64;
    let mut episode_rows = Vec::new();
    for (e, episode) in episodes.iter().enumerate() {
        let n = episode.transitions.len();
        let task = task_of[&episode.start.instruction] as i64;
        let ts = &episode.transitions;
        for t in ts {
            state_stats.add(&t.observation.proprio);
            action_stats.add(&t.executed.0);
            if let Some(image) = &t.observation.image {
                let mut sums = [0f64; 3];
                for px in image.rgb.chunks_exact(3) {
                    for (sum, &v) in sums.iter_mut().zip(px) {
                        *sum += v as f64;
                    }
                }
                let pixels = (image.rgb.len() / 3).max(1) as f64;
                image_stats.add(&sums.map(|s| (s / pixels / 255.0) as f32));
            }
        }
        let mut columns: Vec<ArrayRef> = vec![
            vectors(
                ts.iter().map(|t| t.observation.proprio.as_slice()),
                state_dim,
            ),
            vectors(ts.iter().map(|t| t.executed.0.as_slice()), action_dim),
        ];
        if spec.camera.is_some() {
            let mut bytes = BinaryBuilder::new();
            for (step, t) in ts.iter().enumerate() {
                let image = t.observation.image.as_ref().ok_or_else(|| {
                    anyhow::anyhow!(
                        "episode {} step {step} has no camera frame",
                        episode.start.episode
                    )
                })?;
                bytes.append_value(
                    encode_png(image)
                        .map_err(|e| anyhow::anyhow!("cannot encode a frame as PNG: {e}"))?,
                );
            }
            columns.push(image_column(bytes.finish()));
        }
        columns.extend([
            Arc::new(Float32Array::from_iter_values(
                (0..n).map(|s| (s as f64 / fps) as f32),
            )) as ArrayRef,
            Arc::new(Int64Array::from_iter_values(0..n as i64)),
            Arc::new(Int64Array::from_iter_values(std::iter::repeat_n(
                e as i64, n,
            ))),
            Arc::new(Int64Array::from_iter_values(index..index + n as i64)),
            Arc::new(Int64Array::from_iter_values(std::iter::repeat_n(task, n))),
            Arc::new(Float32Array::from_iter_values(ts.iter().map(|t| t.reward))),
            Arc::new(BooleanArray::from_iter(ts.iter().map(|t| Some(t.done)))),
            Arc::new(BooleanArray::from_iter(ts.iter().map(|t| Some(t.success)))),
            Arc::new(Int64Array::from_iter_values(
                ts.iter().map(|t| t.policy_version as i64),
            )),
            Arc::new(BooleanArray::from_iter(
                ts.iter().map(|t| Some(t.intervention)),
            )),
            vectors(ts.iter().map(|t| t.action.0.as_slice()), action_dim),
            Arc::new(Float32Array::from_iter_values(
                ts.iter().map(|t| t.behaviour_log_prob.unwrap_or(f32::NAN)),
            )),
            Arc::new(Int64Array::from_iter_values(std::iter::repeat_n(
                episode.start.seed as i64,
                n,
            ))),
        ]);
        data.write(columns)?;
        episode_rows.push((e as i64, episode.start.instruction.clone(), n as i64, index));
        index += n as i64;
    }
    data.finish()?;
    write_episodes(dir, &episode_rows)?;
    write_tasks(dir, &tasks)?;

    let mut stats = BTreeMap::new();
    stats.insert(STATE.to_string(), state_stats.finish(false));
    stats.insert(ACTION.to_string(), action_stats.finish(false));
    if spec.camera.is_some() {
        stats.insert(IMAGE.to_string(), image_stats.finish(true));
    }
    atomic::write_file(
        &dir.join("meta/stats.json"),
        &serde_json::to_vec_pretty(&DatasetStats(stats))?,
    )?;
    let info = info(spec, episodes.len(), index as u64, tasks.len(), fps);
    atomic::write_file(
        &dir.join("meta/info.json"),
        &serde_json::to_vec_pretty(&info)?,
    )?;
    Ok(ExportReport {
        episodes: episodes.len(),
        frames: index as usize,
        tasks: tasks.len(),
        damaged: 0,
    })
}

fn list_field() -> Arc<Field> {
    Arc::new(Field::new_list_field(DataType::Float32, true))
}

fn vectors<'a>(rows: impl Iterator<Item = &'a [f32]>, dim: usize) -> ArrayRef {
    let values: Vec<f32> = rows.flat_map(|r| r.iter().copied()).collect();
    Arc::new(FixedSizeListArray::new(
        list_field(),
        dim as i32,
        Arc::new(Float32Array::from(values)),
        None,
    ))
}

fn image_fields() -> Fields {
    Fields::from(vec![
        Field::new("bytes", DataType::Binary, true),
        Field::new("path", DataType::Utf8, true),
    ])
}

fn image_column(bytes: BinaryArray) -> ArrayRef {
    let paths = StringArray::new_null(bytes.len());
    Arc::new(StructArray::new(
        image_fields(),
        vec![Arc::new(bytes), Arc::new(paths)],
        None,
    ))
}

fn frame_schema(state_dim: usize, action_dim: usize, camera: bool) -> Schema {
    let vector = |name: &str, dim: usize| {
        Field::new(
            name,
            DataType::FixedSizeList(list_field(), dim as i32),
            true,
        )
    };
    let mut fields = vec![vector(STATE, state_dim), vector(ACTION, action_dim)];
    if camera {
        fields.push(Field::new(IMAGE, DataType::Struct(image_fields()), true));
    }
    fields.extend([
        Field::new("timestamp", DataType::Float32, true),
        Field::new("frame_index", DataType::Int64, true),
        Field::new("episode_index", DataType::Int64, true),
        Field::new("index", DataType::Int64, true),
        Field::new("task_index", DataType::Int64, true),
        Field::new(REWARD, DataType::Float32, true),
        Field::new(DONE, DataType::Boolean, true),
        Field::new(SUCCESS, DataType::Boolean, true),
        Field::new(POLICY_VERSION, DataType::Int64, true),
        Field::new(INTERVENTION, DataType::Boolean, true),
        vector(COMMANDED_ACTION, action_dim),
        Field::new(BEHAVIOUR_LOG_PROB, DataType::Float32, true),
        Field::new(EPISODE_SEED, DataType::Int64, true),
    ]);
    Schema::new(fields)
}

/// `meta/episodes/chunk-000/file-000.parquet`: per episode its tasks, length and
/// where its rows are.
fn write_episodes(dir: &Path, rows: &[(i64, String, i64, i64)]) -> anyhow::Result<()> {
    let int = |name: &str| Field::new(name, DataType::Int64, true);
    let schema = Schema::new(vec![
        int("episode_index"),
        Field::new(
            "tasks",
            DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))),
            true,
        ),
        int("length"),
        int("data/chunk_index"),
        int("data/file_index"),
        int("dataset_from_index"),
        int("dataset_to_index"),
        int("meta/episodes/chunk_index"),
        int("meta/episodes/file_index"),
    ]);
    let mut tasks = ListBuilder::new(StringBuilder::new());
    for (_, task, _, _) in rows {
        tasks.values().append_value(task);
        tasks.append(true);
    }
    let zeros = || Arc::new(Int64Array::from(vec![0; rows.len()])) as ArrayRef;
    let mut writer = TableWriter::create(&dir.join(EPISODES_FILE), schema, HashMap::new())?;
    writer.write(vec![
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
        Arc::new(tasks.finish()),
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
        zeros(),
        zeros(),
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.3))),
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.3 + r.2))),
        zeros(),
        zeros(),
    ])?;
    writer.finish()
}

/// `meta/tasks.parquet`: `task_index` with the task text as pandas' index, which
/// LeRobot reads with `pd.read_parquet`.
fn write_tasks(dir: &Path, tasks: &[String]) -> anyhow::Result<()> {
    let schema = Schema::new(vec![
        Field::new("task_index", DataType::Int64, true),
        Field::new("task", DataType::Utf8, true),
    ]);
    let pandas = serde_json::json!({
        "index_columns": ["task"],
        "column_indexes": [{"name": null, "field_name": null, "pandas_type": "unicode",
                            "numpy_type": "object", "metadata": {"encoding": "UTF-8"}}],
        "columns": [
            {"name": "task_index", "field_name": "task_index", "pandas_type": "int64",
             "numpy_type": "int64", "metadata": null},
            {"name": "task", "field_name": "task", "pandas_type": "unicode",
             "numpy_type": "object", "metadata": null}
        ],
        "creator": {"library": "imago", "version": env!("CARGO_PKG_VERSION")},
        "pandas_version": "2.2.3"
    });
    let metadata = HashMap::from([("pandas".to_string(), pandas.to_string())]);
    let mut writer = TableWriter::create(&dir.join("meta/tasks.parquet"), schema, metadata)?;
    writer.write(vec![
        Arc::new(Int64Array::from_iter_values(0..tasks.len() as i64)),
        Arc::new(StringArray::from_iter_values(tasks)),
    ])?;
    writer.finish()
}

fn info(spec: &RobotSpec, episodes: usize, frames: u64, tasks: usize, fps: f64) -> DatasetInfo {
    let scalar = |dtype: &str| Feature {
        dtype: dtype.into(),
        shape: vec![1],
        names: None,
        info: None,
    };
    let vector = |names: Vec<String>| Feature {
        dtype: "float32".into(),
        shape: vec![names.len()],
        names: Some(serde_json::json!(names)),
        info: None,
    };
    let action_names: Vec<String> = (0..spec.action_limit.len())
        .map(|i| format!("action_{i}"))
        .collect();
    let mut features = BTreeMap::from([
        (STATE.to_string(), vector(spec.proprio_names.clone())),
        (ACTION.to_string(), vector(action_names.clone())),
        (COMMANDED_ACTION.to_string(), vector(action_names)),
        ("timestamp".to_string(), scalar("float32")),
        ("frame_index".to_string(), scalar("int64")),
        ("episode_index".to_string(), scalar("int64")),
        ("index".to_string(), scalar("int64")),
        ("task_index".to_string(), scalar("int64")),
        (REWARD.to_string(), scalar("float32")),
        (DONE.to_string(), scalar("bool")),
        (SUCCESS.to_string(), scalar("bool")),
        (POLICY_VERSION.to_string(), scalar("int64")),
        (INTERVENTION.to_string(), scalar("bool")),
        (BEHAVIOUR_LOG_PROB.to_string(), scalar("float32")),
        (EPISODE_SEED.to_string(), scalar("int64")),
    ]);
    if let Some(camera) = spec.camera {
        features.insert(
            IMAGE.to_string(),
            Feature {
                dtype: "image".into(),
                shape: vec![camera.height as usize, camera.width as usize, 3],
                names: Some(serde_json::json!(["height", "width", "channel"])),
                info: None,
            },
        );
    }
    let other = BTreeMap::from([
        ("data_files_size_in_mb".to_string(), serde_json::json!(100)),
        ("video_files_size_in_mb".to_string(), serde_json::json!(500)),
        (
            "splits".to_string(),
            serde_json::json!({"train": format!("0:{episodes}")}),
        ),
        (IMAGO_ROBOT.to_string(), serde_json::json!(spec)),
    ]);
    DatasetInfo {
        codebase_version: "v3.0".into(),
        robot_type: Some(spec.name.clone()),
        fps,
        total_episodes: episodes as u64,
        total_frames: frames,
        total_tasks: tasks as u64,
        chunks_size: 1000,
        data_path: "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet".into(),
        video_path: None,
        features,
        other,
    }
}
