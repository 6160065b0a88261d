//! `imago daemon`: control at a fixed rate while learning, clean shutdown on SIGTERM,
//! resumption after SIGKILL, and config errors that name the key.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use common::{imago, stderr};
use imago_runtime::replay::read_replay;
use imago_runtime::telemetry::{paths, read_recording};

/// Daemons run one at a time: two learners on the same two cores would measure each
/// other, not the control loop.
static ONE_DAEMON: Mutex<()> = Mutex::new(());

/// A daemon config whose learner steps are small enough for a test.
fn small_config(dir: &Path) -> String {
    let path = dir.join("robot.toml");
    std::fs::write(
        &path,
        "robot = \"reacher2d\"\ndevice = \"cpu\"\n\
         [actor.robot]\ncontrol_hz = 20.0\n\
         [learner]\nmin_episodes = 2\n\
         [learner.finetune]\npolicy_steps = 5\nworld_model_steps = 3\ncritic_steps = 3\ncritic_batch = 16\n",
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

fn report(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn daemon_learns_while_it_controls_and_loses_no_transition() {
    let _one = ONE_DAEMON.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let json = dir.path().join("status.json");
    let recording = dir.path().join("daemon.rrd");
    let output = imago(&[
        "daemon",
        "--config",
        &small_config(dir.path()),
        "--run-dir",
        run.to_str().unwrap(),
        "--duration",
        "20",
        "--report",
        json.to_str().unwrap(),
        "--rerun",
        recording.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let status = report(&json);
    for key in [
        "ticks",
        "deadline_misses",
        "tick_latency_ms",
        "queue_drops",
        "policy_versions",
        "transitions_written",
        "replay_records",
    ] {
        assert!(status.get(key).is_some(), "no `{key}` in {status}");
    }
    // 20 Hz on 2 cores while the learner trains: no deadline missed.
    assert_eq!(status["deadline_misses"], 0, "{status}");
    assert!(status["ticks"].as_u64().unwrap() >= 350, "{status}");
    // The learner published at least two new versions and the actor used them.
    let versions = status["policy_versions"].as_array().unwrap();
    assert!(versions.len() >= 3, "{status}");
    assert_eq!(status["queue_drops"], 0);
    assert_eq!(status["transitions_written"], status["actor_transitions"]);
    let contents = read_replay(&run.join("replay")).unwrap();
    assert_eq!(contents.records, status["replay_records"].as_u64().unwrap());
    assert!(run.join("checkpoints/policy/meta.json").exists());

    // Logged live, off the control path: every tick, the intended chunk, the learner.
    assert_eq!(status["telemetry_dropped"], 0, "{status}");
    let summary = read_recording(&recording).unwrap();
    assert_eq!(
        summary.rows[paths::TICK_LATENCY] as u64,
        status["ticks"].as_u64().unwrap(),
        "one latency sample per tick"
    );
    let learner_version = format!("{}/policy_version", paths::LEARNER);
    let live = [
        paths::INTENDED_PATH,
        paths::DEADLINE_MISSES,
        paths::ARM,
        paths::CAMERA,
        paths::TARGETS,
        paths::ADVANTAGES,
        &learner_version,
    ];
    assert_eq!(summary.missing(&live, &[]), Vec::<&str>::new());
}

/// Runs the daemon without its learner for `seconds` at 50 Hz, with or without a
/// recording, and returns its report.
fn control_only(dir: &Path, seconds: &str, recording: Option<&Path>) -> serde_json::Value {
    let config = dir.join("control.toml");
    std::fs::write(
        &config,
        "robot = \"reacher2d\"\ndevice = \"cpu\"\n\
         [actor.robot]\ncontrol_hz = 50.0\n\
         [learner]\nenabled = false\n",
    )
    .unwrap();
    let json = dir.join("control.json");
    let run = dir.join("control-run");
    let mut args = vec![
        "daemon",
        "--config",
        config.to_str().unwrap(),
        "--run-dir",
        run.to_str().unwrap(),
        "--duration",
        seconds,
        "--report",
        json.to_str().unwrap(),
    ];
    if let Some(path) = recording {
        args.extend(["--rerun", path.to_str().unwrap()]);
    }
    let output = imago(&args);
    assert!(output.status.success(), "{}", stderr(&output));
    let _ = std::fs::remove_dir_all(run);
    report(&json)
}

#[test]
fn logging_does_not_add_deadline_misses() {
    let _one = ONE_DAEMON.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let recording = dir.path().join("control.rrd");
    let off = control_only(dir.path(), "8", None);
    let on = control_only(dir.path(), "8", Some(&recording));
    let misses = |r: &serde_json::Value| r["deadline_misses"].as_u64().unwrap();
    assert!(
        misses(&on) <= misses(&off),
        "logging on: {on}\nlogging off: {off}"
    );
    assert_eq!(on["telemetry_dropped"], 0, "{on}");
    // Every tick is in the recording: nothing was skipped to keep the rate.
    let summary = read_recording(&recording).unwrap();
    assert_eq!(
        summary.rows[paths::TICK_LATENCY] as u64,
        on["ticks"].as_u64().unwrap()
    );
}

#[test]
fn sigterm_stops_cleanly_and_sigkill_resumes_with_every_record() {
    let _one = ONE_DAEMON.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let config = small_config(dir.path());
    let run = dir.path().join("run");
    let json = dir.path().join("status.json");
    let spawn = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_imago"))
            .args([
                "daemon",
                "--config",
                &config,
                "--run-dir",
                run.to_str().unwrap(),
            ])
            .args(extra)
            .env("XDG_RUNTIME_DIR", std::env::temp_dir())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };

    // SIGTERM: stop at a tick boundary, flush, checkpoint, exit 0.
    let child = spawn(&["--report", json.to_str().unwrap()]);
    std::thread::sleep(Duration::from_secs(6));
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let status = report(&json);
    let contents = read_replay(&run.join("replay")).unwrap();
    assert_eq!(contents.records, status["replay_records"].as_u64().unwrap());
    assert!(contents.corruptions.is_empty());

    // SIGKILL mid-run: everything fsynced before the kill (every finished episode) is
    // still there after --resume, which continues recording.
    let mut child = spawn(&[]);
    std::thread::sleep(Duration::from_secs(8));
    child.kill().unwrap();
    child.wait().unwrap();
    let before = read_replay(&run.join("replay")).unwrap().episodes;
    let output = imago(&[
        "daemon",
        "--config",
        &config,
        "--run-dir",
        run.to_str().unwrap(),
        "--resume",
        "--duration",
        "6",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let after = read_replay(&run.join("replay")).unwrap().episodes;
    assert!(
        after.len() > before.len(),
        "{} vs {}",
        after.len(),
        before.len()
    );
    for (old, new) in before.iter().zip(&after) {
        assert_eq!(old, new, "an episode written before the kill changed");
    }
}

#[test]
fn bad_configs_name_the_key_and_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("robot.toml");
    for (text, must_mention) in [
        (
            "robot = \"reacher2d\"\n[actor.robot]\ncontol_hz = 20.0\n",
            "contol_hz",
        ),
        ("robot = \"ur5\"\n", "unknown robot"),
        (
            "robot = \"reacher2d\"\n[actor.robot]\ncontrol_hz = -5.0\n",
            "control_hz",
        ),
        ("robot = \"reacher2d\"\ndevice = \"tpu\"\n", "device"),
        (
            "robot = \"reacher2d\"\n[learner.finetune]\nbeta = 0.0\n",
            "beta",
        ),
    ] {
        std::fs::write(&path, text).unwrap();
        let output = imago(&[
            "daemon",
            "--config",
            path.to_str().unwrap(),
            "--duration",
            "1",
        ]);
        assert!(!output.status.success(), "{text}");
        let err = stderr(&output);
        assert!(
            err.starts_with("error: ") && err.contains(must_mention),
            "{text}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}
