//! LeRobot datasets in and out, end to end through the `imago` binary.
//!
//! The dataset fixtures are written by `tests/fixtures/lerobot_fixture.py` (pyarrow and
//! PyAV, whose wheel carries the AV1 and H.264 encoders) with the Python in
//! `IMAGO_PYTHON` (else `python3`); without those modules the tests say they skipped,
//! except under `CI=true`, where `.ci/run` installs them.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{imago, stderr};
use imago_runtime::store::replay::{Episode, read_replay};

/// The Python that has pyarrow and PyAV, or why the test skips.
fn fixture_python() -> Option<String> {
    common::python_with(&["pyarrow", "av", "numpy"], "pip install pyarrow av")
}

/// Writes a fixture dataset of `layout` with `frames` under `root`; returns its path.
fn fixture(python: &str, root: &Path, layout: &str, frames: &str) -> PathBuf {
    let out = root.join(format!("{layout}-{frames}"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lerobot_fixture.py");
    let output = Command::new(python)
        .arg(&script)
        .arg(&out)
        .args(["--layout", layout, "--frames", frames])
        .env("SVT_LOG", "1")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    out
}

fn path(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

fn episodes(replay: &Path) -> Vec<Episode> {
    let contents = read_replay(replay).unwrap();
    assert!(!contents.is_damaged(), "{:?}", contents.damage_lines());
    contents.episodes
}

/// Three reacher2d episodes collected into `DIR/replay` and exported to `DIR/dataset`.
fn collected_and_exported(dir: &Path) -> (PathBuf, PathBuf) {
    let replay = dir.join("replay");
    let output = imago(&["collect", "--episodes", "3", "--out", &path(&replay)]);
    assert!(output.status.success(), "{}", stderr(&output));
    let dataset = dir.join("dataset");
    let output = imago(&[
        "export",
        "lerobot",
        "--replay",
        &path(&replay),
        "--out",
        &path(&dataset),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    (replay, dataset)
}

/// Checks an imported replay against what the fixture script recorded it wrote.
/// Frames are compared by their mean colour: exactly for PNG, within the codec's
/// loss for AV1.
fn check_import(dataset: &Path, replay: &Path, colour_tolerance: f64) {
    let expected: serde_json::Value = serde_json::from_slice(
        &std::fs::read(format!("{}.expected.json", dataset.display())).unwrap(),
    )
    .unwrap();
    let expected = expected.as_array().unwrap();
    let episodes = episodes(replay);
    assert_eq!(episodes.len(), expected.len());
    let floats = |v: &serde_json::Value| -> Vec<f32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect()
    };
    for (episode, want) in episodes.iter().zip(expected) {
        assert_eq!(episode.start.instruction, want["task"].as_str().unwrap());
        let states = want["state"].as_array().unwrap();
        assert_eq!(episode.transitions.len(), states.len());
        for (t, transition) in episode.transitions.iter().enumerate() {
            assert_eq!(transition.observation.proprio, floats(&states[t]));
            assert_eq!(transition.executed.0, floats(&want["action"][t]));
            assert_eq!(transition.action, transition.executed);
            assert_eq!(
                transition.reward,
                want["reward"][t].as_f64().unwrap() as f32
            );
            assert_eq!(transition.success, want["success"][t].as_bool().unwrap());
            assert_eq!(transition.done, t + 1 == states.len());
            let image = transition.observation.image.as_ref().unwrap();
            assert_eq!((image.width, image.height), (32, 32));
            let mean: Vec<f64> = (0..3)
                .map(|c| {
                    image
                        .rgb
                        .iter()
                        .skip(c)
                        .step_by(3)
                        .map(|&v| v as f64)
                        .sum::<f64>()
                        / (image.rgb.len() / 3) as f64
                })
                .collect();
            for (c, m) in mean.iter().enumerate() {
                let w = want["mean_colour"][t][c].as_f64().unwrap();
                assert!(
                    (m - w).abs() <= colour_tolerance,
                    "{}: episode {} frame {t} channel {c}: mean {m:.2}, written {w:.2}",
                    dataset.display(),
                    episode.start.episode
                );
            }
        }
        assert!(episode.end.success);
        assert_eq!(
            episode.end.final_observation,
            episode.transitions.last().unwrap().observation
        );
    }
}

#[test]
fn lerobot_datasets_of_both_layouts_import_exactly_and_train() {
    let Some(python) = fixture_python() else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    for (layout, frames, tolerance) in [
        ("v3.0", "av1", 6.0),
        ("v2.1", "av1", 6.0),
        ("v3.0", "png", 1e-9),
        ("v2.1", "png", 1e-9),
    ] {
        let dataset = fixture(&python, root.path(), layout, frames);
        let replay = root.path().join(format!("replay-{layout}-{frames}"));
        let output = imago(&[
            "import",
            "lerobot",
            &path(&dataset),
            "--out",
            &path(&replay),
        ]);
        assert!(
            output.status.success(),
            "{layout} {frames}: {}",
            stderr(&output)
        );
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            stdout.contains("imported 4 episodes (54 frames)"),
            "{stdout}"
        );
        assert!(
            stdout.contains("pointer (camera 32x32, proprioception 2, action 2)"),
            "{stdout}"
        );
        check_import(&dataset, &replay, tolerance);
        if frames == "av1" {
            let ckpt = root.path().join(format!("bc-{layout}"));
            let output = imago(&[
                "--device",
                "cpu",
                "train",
                "--what",
                "bc",
                "--replay",
                &path(&replay),
                "--out",
                &path(&ckpt),
                "--steps",
                "20",
                "--batch-size",
                "8",
            ]);
            assert!(output.status.success(), "{}", stderr(&output));
            assert!(ckpt.join("model.safetensors").exists());
        }
    }
    // A subset, resized, with another instruction.
    let dataset = root.path().join("v3.0-av1");
    let replay = root.path().join("subset");
    let output = imago(&[
        "import",
        "lerobot",
        &path(&dataset),
        "--out",
        &path(&replay),
        "--episodes",
        "1..3",
        "--resize",
        "16x16",
        "--instruction",
        "reach the target",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let subset = episodes(&replay);
    assert_eq!(subset.len(), 2);
    assert_eq!(
        subset[0].start.seed, 1,
        "the dataset's episode index is the seed"
    );
    let image = subset[0].transitions[0].observation.image.as_ref().unwrap();
    assert_eq!((image.width, image.height), (16, 16));
    assert!(
        subset
            .iter()
            .all(|e| e.start.instruction == "reach the target")
    );
}

#[test]
fn a_replay_exported_and_imported_again_has_the_same_episodes() {
    let root = tempfile::tempdir().unwrap();
    let (replay, dataset) = collected_and_exported(root.path());
    for file in [
        "meta/info.json",
        "meta/stats.json",
        "meta/tasks.parquet",
        "meta/episodes/chunk-000/file-000.parquet",
        "data/chunk-000/file-000.parquet",
    ] {
        assert!(dataset.join(file).is_file(), "{file} missing");
    }
    let back = root.path().join("back");
    let output = imago(&["import", "lerobot", &path(&dataset), "--out", &path(&back)]);
    assert!(output.status.success(), "{}", stderr(&output));
    let (original, imported) = (read_replay(&replay).unwrap(), read_replay(&back).unwrap());
    assert_eq!(original.spec, imported.spec);
    assert_eq!(original.episodes.len(), 3);
    for (a, b) in original.episodes.iter().zip(&imported.episodes) {
        // Everything but the observation after the last tick, which LeRobot has no
        // place for: the import repeats the last observation there.
        assert_eq!(a.start, b.start);
        assert_eq!(a.transitions, b.transitions);
        assert_eq!(a.end.steps, b.end.steps);
        assert_eq!(a.end.success, b.end.success);
        assert_eq!(
            b.end.final_observation,
            b.transitions.last().unwrap().observation
        );
    }

    // What LeRobot reads: the columns and features, checked with pyarrow.
    let Some(python) = fixture_python() else {
        return;
    };
    let check = r#"
import json, sys, pyarrow.parquet as pq
root = sys.argv[1]
info = json.load(open(f"{root}/meta/info.json"))
data = pq.read_table(f"{root}/data/chunk-000/file-000.parquet")
assert info["codebase_version"] == "v3.0" and info["total_frames"] == data.num_rows
assert set(info["features"]) == set(data.column_names), (set(info["features"]) ^ set(data.column_names))
assert data.schema.field("observation.image").type.names == ["bytes", "path"]
tasks = pq.read_table(f"{root}/meta/tasks.parquet")
assert tasks.schema.pandas_metadata["index_columns"] == ["task"]
assert tasks.column("task_index").to_pylist() == list(range(tasks.num_rows))
eps = pq.read_table(f"{root}/meta/episodes/chunk-000/file-000.parquet").to_pylist()
assert sum(e["length"] for e in eps) == data.num_rows
assert [e["dataset_from_index"] for e in eps] == [sum(x["length"] for x in eps[:i]) for i in range(len(eps))]
print("ok", data.num_rows)
"#;
    let output = Command::new(&python)
        .args(["-c", check, &path(&dataset)])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
}

/// Runs an import expected to fail; returns its error, having checked that it is one
/// line and that no replay was left at `out`.
fn failed_import(args: &[&str], out: &Path) -> String {
    let output = imago(args);
    assert!(!output.status.success(), "{args:?} succeeded");
    let message = stderr(&output);
    assert_eq!(
        message.lines().filter(|l| l.starts_with("error:")).count(),
        1,
        "{message}"
    );
    assert!(!message.contains("panicked"), "{message}");
    assert!(!out.exists(), "{args:?} left {}", out.display());
    let leftovers: Vec<_> = std::fs::read_dir(out.parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains("staged"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    message
}

#[test]
fn damaged_or_unsupported_datasets_are_one_clear_error_and_leave_no_replay() {
    let Some(python) = fixture_python() else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let out = root.path().join("out");
    let dataset = fixture(&python, root.path(), "v3.0", "av1");
    let d = path(&dataset);
    let o = path(&out);
    let import_fails = |extra: &[&str]| {
        let mut args = vec!["import", "lerobot", &d, "--out", &o];
        args.extend(extra);
        failed_import(&args, &out)
    };

    let message = import_fails(&["--state", "observation.pose"]);
    assert!(
        message.contains("no feature `observation.pose`") && message.contains("observation.state"),
        "{message}"
    );
    let message = import_fails(&["--camera", "action"]);
    assert!(message.contains("not a camera"), "{message}");
    let message = import_fails(&["--episodes", "9..12"]);
    assert!(message.contains("selects none"), "{message}");
    let message = import_fails(&["--instruction", "grasp the cube"]);
    assert!(
        message.contains("unknown word `grasp`") && message.contains("--instruction"),
        "{message}"
    );

    // A cut video, a cut parquet file, an H.264 video, an unknown version.
    let video = dataset.join("videos/observation.image/chunk-000/file-001.mp4");
    let bytes = std::fs::read(&video).unwrap();
    std::fs::write(&video, &bytes[..bytes.len() / 2]).unwrap();
    let message = import_fails(&[]);
    assert!(message.contains("file-001.mp4"), "{message}");
    std::fs::write(&video, &bytes).unwrap();

    let data = dataset.join("data/chunk-000/file-001.parquet");
    let bytes = std::fs::read(&data).unwrap();
    std::fs::write(&data, &bytes[..bytes.len() - 20]).unwrap();
    let message = import_fails(&[]);
    assert!(
        message.contains("file-001.parquet") && message.contains("parquet"),
        "{message}"
    );
    std::fs::write(&data, &bytes).unwrap();

    let h264 = fixture(&python, root.path(), "v2.1", "h264");
    let message = failed_import(&["import", "lerobot", &path(&h264), "--out", &o], &out);
    assert!(
        message.contains("H.264") && message.contains("libsvtav1"),
        "{message}"
    );

    let info_path = dataset.join("meta/info.json");
    let info = std::fs::read_to_string(&info_path).unwrap();
    std::fs::write(&info_path, info.replace("\"v3.0\"", "\"v1.6\"")).unwrap();
    let message = import_fails(&[]);
    assert!(message.contains("codebase_version `v1.6`"), "{message}");
    std::fs::write(&info_path, &info).unwrap();

    let message = failed_import(
        &[
            "import",
            "lerobot",
            &path(&root.path().join("nowhere")),
            "--out",
            &o,
        ],
        &out,
    );
    assert!(message.contains("not a directory"), "{message}");

    // An existing replay is never written over without --force.
    let output = imago(&["import", "lerobot", &d, "--out", &o]);
    assert!(output.status.success(), "{}", stderr(&output));
    let before = read_replay(&out).unwrap().episodes;
    let output = imago(&["import", "lerobot", &d, "--out", &o, "--episodes", "0"]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("holds a replay already"),
        "{}",
        stderr(&output)
    );
    assert_eq!(read_replay(&out).unwrap().episodes, before);

    // Export refuses a folder that holds something, and AV1 by name.
    let output = imago(&["export", "lerobot", "--replay", &o, "--out", &d]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("not an empty folder"),
        "{}",
        stderr(&output)
    );
    let output = imago(&[
        "export",
        "lerobot",
        "--replay",
        &o,
        "--out",
        &path(&root.path().join("e")),
        "--video",
        "av1",
    ]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("no AV1 encoder"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_checkpoint_opens_with_pythons_safetensors() {
    let Some(python) = fixture_python() else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let replay = root.path().join("replay");
    let output = imago(&["collect", "--episodes", "2", "--out", &path(&replay)]);
    assert!(output.status.success(), "{}", stderr(&output));
    let ckpt = root.path().join("ckpt");
    let output = imago(&[
        "--device",
        "cpu",
        "train",
        "--replay",
        &path(&replay),
        "--out",
        &path(&ckpt),
        "--steps",
        "2",
        "--batch-size",
        "4",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    // Every tensor by its module path, with the shape meta.json's config gives.
    let check = r#"
import json, sys
from safetensors.numpy import load_file
from safetensors import safe_open
path = sys.argv[1]
tensors = load_file(f"{path}/model.safetensors")
meta = json.load(open(f"{path}/meta.json"))
d = meta["config"]["d_model"]
assert tensors["encoder.layers.0.mha.query.weight"].shape == (d, d), tensors["encoder.layers.0.mha.query.weight"].shape
assert all(t.dtype.name == "float32" for t in tensors.values())
with safe_open(f"{path}/model.safetensors", "np") as f:
    assert f.metadata()["imago_kind"] == "vla-policy"
print(len(tensors))
"#;
    let output = Command::new(&python)
        .args(["-c", check, &path(&ckpt)])
        .output()
        .unwrap();
    assert!(
        output.status.success()
            || stderr(&output).contains("No module named 'safetensors'")
                && std::env::var("CI").as_deref() != Ok("true"),
        "{}",
        stderr(&output)
    );
    if output.status.success() {
        let count: usize = String::from_utf8_lossy(&output.stdout)
            .trim()
            .parse()
            .unwrap();
        assert!(count > 10, "{count} tensors");
    } else {
        println!("skipped: the Python has no safetensors module (pip install safetensors)");
    }
}

/// With LeRobot itself, in the Python `IMAGO_LEROBOT_PYTHON` names (lerobot pins torch,
/// so it lives in an environment of its own; `.ci/run` does not install it; skipped,
/// saying so, when that is not set): `LeRobotDataset` loads an export and iterates it,
/// and datasets LeRobot's own writer recorded (AV1 video, PNG images) import with the
/// same states, actions and outcomes and frames within the codec's loss.
#[test]
fn lerobot_reads_imago_exports_and_imago_reads_lerobot_recordings() {
    let Ok(python) = std::env::var("IMAGO_LEROBOT_PYTHON") else {
        println!("skipped: IMAGO_LEROBOT_PYTHON does not name a Python with lerobot installed");
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let (replay, dataset) = collected_and_exported(root.path());
    let frames: usize = read_replay(&replay)
        .unwrap()
        .episodes
        .iter()
        .map(|e| e.transitions.len())
        .sum();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/lerobot-check.py");
    let output = Command::new(&python)
        .arg(&script)
        .arg(&dataset)
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(&format!("3 episodes, {frames} frames")),
        "{stdout}"
    );

    let record = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/lerobot-record.py");
    let mut imported = Vec::new();
    for kind in ["video", "images"] {
        let recorded = root.path().join(format!("recorded-{kind}"));
        let mut command = Command::new(&python);
        command
            .arg(&record)
            .arg(&recorded)
            .env("HF_HUB_OFFLINE", "1")
            .env("SVT_LOG", "1");
        if kind == "images" {
            command.arg("--images");
        }
        let output = command.output().unwrap();
        assert!(output.status.success(), "{}", stderr(&output));
        let replay = root.path().join(format!("replay-{kind}"));
        let output = imago(&[
            "import",
            "lerobot",
            &path(&recorded),
            "--out",
            &path(&replay),
        ]);
        assert!(output.status.success(), "{}", stderr(&output));
        imported.push(episodes(&replay));
    }
    let (video, images) = (&imported[0], &imported[1]);
    assert_eq!(video.len(), 3);
    for (a, b) in video.iter().zip(images) {
        assert_eq!(a.start.instruction, "push the block onto the target");
        assert_eq!(a.transitions.len(), b.transitions.len());
        assert!(a.end.success);
        for (ta, tb) in a.transitions.iter().zip(&b.transitions) {
            assert_eq!(ta.observation.proprio, tb.observation.proprio);
            assert_eq!(
                (&ta.executed, ta.reward, ta.success),
                (&tb.executed, tb.reward, tb.success)
            );
            let (fa, fb) = (
                ta.observation.image.as_ref().unwrap(),
                tb.observation.image.as_ref().unwrap(),
            );
            let mean_difference = fa
                .rgb
                .iter()
                .zip(&fb.rgb)
                .map(|(x, y)| (*x as f64 - *y as f64).abs())
                .sum::<f64>()
                / fa.rgb.len() as f64;
            assert!(
                mean_difference < 8.0,
                "AV1 frame differs from PNG by {mean_difference:.2} on average"
            );
        }
    }
}
