//! A user's LeRobot policy directory (ACT or Diffusion Policy, made by LeRobot 0.4.4:
//! `scripts/lerobot_policy_fixtures.py`) runs in `imago eval` on PushT, its actions read
//! in gym-pusht's pixels; directories it cannot run are one clear error.

mod common;

use std::path::{Path, PathBuf};

use common::{assert_one_line_error, imago, stderr};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/lerobot")
        .join(name)
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A PushT config of the fixtures' 48x48 camera and short episodes.
fn pusht_config(dir: &Path) -> PathBuf {
    let config = dir.join("pusht.toml");
    std::fs::write(&config, "image_size = 48\nmax_steps = 40\n").unwrap();
    config
}

#[test]
fn lerobot_act_and_diffusion_policies_run_in_imago_eval_on_pusht() {
    let dir = tempfile::tempdir().unwrap();
    let config = pusht_config(dir.path());
    for policy in ["act_policy", "diffusion_policy"] {
        let report = dir.path().join(format!("{policy}.json"));
        let policy_dir = fixture(policy);
        let args = [
            "--device",
            "cpu",
            "eval",
            "--policy",
            path(&policy_dir),
            "--robot",
            "pusht",
            "--robot-config",
            path(&config),
            "--episodes",
            "2",
            "--report",
            path(&report),
        ];
        let output = imago(&args);
        assert!(output.status.success(), "{policy}: {}", stderr(&output));
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        // Every episode ran to its end: the policy acted on every tick.
        assert_eq!(report["episodes"], 2, "{report}");
        assert_eq!(report["mean_length"], 40.0, "{report}");
    }
}

#[test]
fn a_lerobot_policy_that_does_not_fit_the_robot_is_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let act = path(&fixture("act_policy")).to_string();
    // PushT's default camera is 96x96; the fixture reads 48x48.
    assert_one_line_error(
        &[
            "--device",
            "cpu",
            "eval",
            "--policy",
            &act,
            "--robot",
            "pusht",
            "--episodes",
            "1",
        ],
        "48x48",
    );
    // reacher2d's state and actions are not PushT's.
    assert_one_line_error(
        &[
            "--device",
            "cpu",
            "eval",
            "--policy",
            &act,
            "--robot",
            "reacher2d",
            "--episodes",
            "1",
        ],
        "observation.state",
    );
    // The training checkpoint above the policy directory.
    let outer = dir.path().join("checkpoints/last");
    std::fs::create_dir_all(outer.join("pretrained_model")).unwrap();
    for entry in std::fs::read_dir(fixture("act_policy")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(
            entry.path(),
            outer.join("pretrained_model").join(entry.file_name()),
        )
        .unwrap();
    }
    let config = pusht_config(dir.path());
    assert_one_line_error(
        &[
            "--device",
            "cpu",
            "eval",
            "--policy",
            path(&outer),
            "--robot",
            "pusht",
            "--robot-config",
            path(&config),
            "--episodes",
            "1",
        ],
        "pretrained_model",
    );
}
