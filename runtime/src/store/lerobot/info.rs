//! `meta/info.json` of a LeRobot dataset: its layout version, rate, path templates and
//! features.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The key of `meta/info.json` under which an export records imago's robot spec, so
/// that importing the dataset again gives the replay's spec exactly (LeRobot ignores it).
pub const IMAGO_ROBOT: &str = "imago_robot";

/// How a dataset lays out its files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// v2.1: one parquet file and one video per episode, `meta/episodes.jsonl`.
    V21,
    /// v3.0: many episodes per parquet and video file, `meta/episodes/*.parquet`.
    V30,
}

impl Layout {
    /// The `codebase_version` LeRobot writes for this layout.
    pub fn version(self) -> &'static str {
        match self {
            Self::V21 => "v2.1",
            Self::V30 => "v3.0",
        }
    }
}

/// `meta/info.json`, the fields imago reads and writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatasetInfo {
    /// The layout version (`v2.1`, `v3.0`).
    pub codebase_version: String,
    /// The robot's name as LeRobot records it.
    #[serde(default)]
    pub robot_type: Option<String>,
    /// Frames per second (written as an integer when it is one, as LeRobot does).
    #[serde(serialize_with = "whole_as_integer")]
    pub fps: f64,
    /// Episodes in the dataset.
    #[serde(default)]
    pub total_episodes: u64,
    /// Frames in the dataset.
    #[serde(default)]
    pub total_frames: u64,
    /// Distinct tasks.
    #[serde(default)]
    pub total_tasks: u64,
    /// Files per chunk folder.
    #[serde(default = "default_chunks_size")]
    pub chunks_size: u64,
    /// Template of the parquet files' paths.
    pub data_path: String,
    /// Template of the videos' paths (`None` without video features).
    #[serde(default)]
    pub video_path: Option<String>,
    /// Every column, by name.
    pub features: BTreeMap<String, Feature>,
    /// Everything else LeRobot writes (splits, file sizes), kept as it is.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

fn whole_as_integer<S: serde::Serializer>(value: &f64, s: S) -> Result<S::Ok, S::Error> {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        s.serialize_i64(*value as i64)
    } else {
        s.serialize_f64(*value)
    }
}

fn default_chunks_size() -> u64 {
    1000
}

/// One feature (column) of a dataset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Feature {
    /// `float32`, `int64`, `bool`, `image`, `video`, ...
    pub dtype: String,
    /// Shape of one frame's value.
    pub shape: Vec<usize>,
    /// Names of the entries (a list, or LeRobot v2's `{"motors": [...]}`), if any.
    #[serde(default)]
    pub names: Option<serde_json::Value>,
    /// Video settings (`video.codec`, ...), for video features.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<serde_json::Value>,
}

impl Feature {
    /// Whether frames of this feature are pictures (stored as video or as images).
    pub fn is_picture(&self) -> bool {
        matches!(self.dtype.as_str(), "video" | "image")
    }

    /// The names of a vector feature's entries, when the dataset gives them.
    pub fn entry_names(&self) -> Option<Vec<String>> {
        let list = match self.names.as_ref()? {
            serde_json::Value::Array(list) => list.clone(),
            serde_json::Value::Object(map) if map.len() == 1 => {
                map.values().next()?.as_array()?.clone()
            }
            _ => return None,
        };
        list.iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect()
    }

    /// `(width, height)` of a picture feature: its shape read with its names
    /// (`height, width, channels`), or as height-width-channels when the last entry
    /// is 3 and channels-height-width when the first is.
    pub fn picture_size(&self) -> Option<(u32, u32)> {
        let shape = &self.shape;
        if shape.len() != 3 {
            return None;
        }
        let names = self.entry_names().unwrap_or_default();
        let at = |name: &str| names.iter().position(|n| n.starts_with(name));
        let (h, w) = match (at("height"), at("width")) {
            (Some(h), Some(w)) => (shape[h], shape[w]),
            _ if shape[2] == 3 => (shape[0], shape[1]),
            _ if shape[0] == 3 => (shape[1], shape[2]),
            _ => return None,
        };
        Some((u32::try_from(w).ok()?, u32::try_from(h).ok()?))
    }

    /// The codec a video feature records (`video.codec`), if it says.
    pub fn codec(&self) -> Option<String> {
        self.info
            .as_ref()?
            .get("video.codec")?
            .as_str()
            .map(str::to_string)
    }
}

impl DatasetInfo {
    /// Reads `meta/info.json` of the dataset at `root`; the error names the file and
    /// what is wrong with it.
    pub fn read(root: &Path) -> anyhow::Result<(Self, Layout)> {
        anyhow::ensure!(
            root.is_dir(),
            "{} is not a directory; `imago import lerobot` reads a LeRobot dataset from a local folder (meta/info.json, data/, videos/)",
            root.display()
        );
        let path = root.join("meta/info.json");
        let text = std::fs::read_to_string(&path).map_err(|e| {
            anyhow::anyhow!(
                "{}: cannot read it ({e}); a LeRobot dataset has meta/info.json",
                path.display()
            )
        })?;
        let info: Self = serde_json::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{}: not LeRobot's info.json: {e}", path.display()))?;
        let layout = match info.codebase_version.as_str() {
            "v3.0" => Layout::V30,
            "v2.1" | "v2.0" => Layout::V21,
            other => anyhow::bail!(
                "{}: codebase_version `{other}` is not one imago reads (v2.0, v2.1, v3.0); convert it with LeRobot's own converter first",
                path.display()
            ),
        };
        anyhow::ensure!(
            info.fps.is_finite() && info.fps > 0.0,
            "{}: fps is {}, it must be positive",
            path.display(),
            info.fps
        );
        Ok((info, layout))
    }

    /// The feature named `key`; the error lists the dataset's features.
    pub fn feature(&self, key: &str, flag: &str) -> anyhow::Result<&Feature> {
        self.features.get(key).ok_or_else(|| {
            anyhow::anyhow!(
                "the dataset has no feature `{key}` ({flag}); its features: {}",
                self.features.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        })
    }

    /// The picture features (cameras), by name.
    pub fn cameras(&self) -> Vec<&str> {
        self.features
            .iter()
            .filter(|(_, f)| f.is_picture())
            .map(|(k, _)| k.as_str())
            .collect()
    }
}

/// `template` (`data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet`) with
/// every `{name}` or `{name:0Nd}` replaced by its value in `values`, under `root`.
pub fn fill_template(
    root: &Path,
    template: &str,
    values: &[(&str, &str)],
) -> anyhow::Result<PathBuf> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..]
            .find('}')
            .map(|c| open + c)
            .ok_or_else(|| anyhow::anyhow!("path template `{template}` has an unclosed `{{`"))?;
        let field = &rest[open + 1..close];
        let (name, format) = field.split_once(':').unwrap_or((field, ""));
        let value = values
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "path template `{template}` names `{name}`, which imago does not know"
                )
            })?;
        let width: usize = format
            .strip_prefix('0')
            .and_then(|f| f.strip_suffix('d'))
            .and_then(|w| w.parse().ok())
            .unwrap_or(0);
        out.push_str(&format!("{value:0>width$}"));
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    Ok(root.join(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_of_both_layouts_fill_in() {
        let root = Path::new("/d");
        let v3 = fill_template(
            root,
            "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
            &[
                ("video_key", "observation.image"),
                ("chunk_index", "0"),
                ("file_index", "12"),
            ],
        )
        .unwrap();
        assert_eq!(
            v3,
            Path::new("/d/videos/observation.image/chunk-000/file-012.mp4")
        );
        let v2 = fill_template(
            root,
            "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
            &[("episode_chunk", "1"), ("episode_index", "1234")],
        )
        .unwrap();
        assert_eq!(v2, Path::new("/d/data/chunk-001/episode_001234.parquet"));
        assert!(fill_template(root, "x/{nope}", &[]).is_err());
    }

    #[test]
    fn picture_sizes_follow_the_names() {
        let feature = |shape: Vec<usize>, names: serde_json::Value| Feature {
            dtype: "video".into(),
            shape,
            names: Some(names),
            info: None,
        };
        let hwc = feature(
            vec![480, 640, 3],
            serde_json::json!(["height", "width", "channels"]),
        );
        assert_eq!(hwc.picture_size(), Some((640, 480)));
        let chw = feature(
            vec![3, 96, 128],
            serde_json::json!(["channels", "height", "width"]),
        );
        assert_eq!(chw.picture_size(), Some((128, 96)));
        let unnamed = feature(vec![3, 96, 128], serde_json::Value::Null);
        assert_eq!(unnamed.picture_size(), Some((128, 96)));
        let motors = Feature {
            dtype: "float32".into(),
            shape: vec![2],
            names: Some(serde_json::json!({"motors": ["a", "b"]})),
            info: None,
        };
        assert_eq!(motors.entry_names().unwrap(), vec!["a", "b"]);
    }
}
