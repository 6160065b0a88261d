//! A second policy architecture (the state-only `linear` policy) runs through every
//! command that takes a policy, with no code of its own outside its module: cloning,
//! continued training, evaluation, the promotion gate and the daemon (acting,
//! fine-tuning, publishing and saving it).

mod common;

use std::path::Path;

use common::{assert_one_line_error, imago, printed_losses, stderr};

fn meta(checkpoint: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(checkpoint.join("meta.json")).unwrap()).unwrap()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `imago --device cpu train --what bc` of `extra` on `replay` into `out`; returns
/// the first and last loss it printed.
fn clone_policy(replay: &Path, out: &Path, extra: &[&str]) -> (f32, f32) {
    let mut args = vec![
        "--device",
        "cpu",
        "train",
        "--what",
        "bc",
        "--replay",
        path(replay),
        "--out",
        path(out),
    ];
    args.extend(extra);
    let output = imago(&args);
    assert!(output.status.success(), "{}", stderr(&output));
    printed_losses(&String::from_utf8_lossy(&output.stdout))
}

#[test]
fn a_linear_policy_trains_evaluates_gates_and_runs_in_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let demos = dir.path().join("demos");
    let output = imago(&["collect", "--episodes", "12", "--out", path(&demos)]);
    assert!(output.status.success(), "{}", stderr(&output));

    // Cloning: the architecture is recorded as the checkpoint's kind, and the loss
    // falls (the arm's joint angles and end effector predict the expert's command).
    let linear = dir.path().join("linear");
    let (first, last) = clone_policy(
        &demos,
        &linear,
        &["--policy", "linear", "--steps", "300", "--batch-size", "32"],
    );
    assert!(last < first - 0.5, "loss {first} -> {last}");
    let stored = meta(&linear);
    assert_eq!(stored["kind"], "linear-policy");
    assert!(stored["config"]["width"].is_u64(), "{}", stored["config"]);
    // It keeps the statistics of the states it was trained on: reacher2d's six
    // position entries (velocities are not read).
    let means = stored["config"]["state_normalizer"]["mean"]
        .as_array()
        .unwrap();
    assert_eq!(means.len(), 6, "{}", stored["config"]);

    // Continued training keeps the architecture, and refuses to change it.
    let continued = dir.path().join("continued");
    clone_policy(
        &demos,
        &continued,
        &["--init", path(&linear), "--steps", "2"],
    );
    assert_eq!(meta(&continued)["kind"], "linear-policy");
    assert_eq!(meta(&continued)["version"], 2);
    assert_one_line_error(
        &[
            "--device",
            "cpu",
            "train",
            "--replay",
            path(&demos),
            "--out",
            path(&dir.path().join("vla")),
            "--init",
            path(&linear),
            "--policy",
            "vla",
        ],
        "holds a linear policy",
    );

    // Evaluation.
    let report = dir.path().join("eval.json");
    let output = imago(&[
        "--device",
        "cpu",
        "eval",
        "--ckpt",
        path(&linear),
        "--episodes",
        "3",
        "--report",
        path(&report),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(json["episodes"], 3);

    // The promotion gate, between two linear policies.
    let report = dir.path().join("gate.json");
    let output = imago(&[
        "--device",
        "cpu",
        "gate",
        "--champion",
        path(&linear),
        "--challenger",
        path(&continued),
        "--max-episodes",
        "20",
        "--report",
        path(&report),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert!(json["episodes"].as_u64().unwrap() >= 1, "{json}");

    // The daemon acts with it, fine-tunes it in the background, publishes new
    // versions and saves it as what it is.
    let config = dir.path().join("daemon.toml");
    std::fs::write(
        &config,
        format!(
            "robot = \"reacher2d\"\ndevice = \"cpu\"\npolicy = \"{}\"\n\
             [actor.robot]\ncontrol_hz = 20.0\nmax_steps = 30\n\
             [learner]\nmin_episodes = 2\n\
             [learner.finetune]\npolicy_steps = 3\nworld_model_steps = 2\ncritic_steps = 2\ncritic_batch = 16\n\
             [promotion]\nenabled = false\n",
            linear.display()
        ),
    )
    .unwrap();
    let (run, report) = (dir.path().join("run"), dir.path().join("daemon.json"));
    let output = imago(&[
        "daemon",
        "--config",
        path(&config),
        "--run-dir",
        path(&run),
        "--duration",
        "15",
        "--report",
        path(&report),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert!(json["replay_records"].as_u64().unwrap() > 0, "{json}");
    assert!(
        json["final_policy_version"].as_u64().unwrap() > 1,
        "the learner published no new version: {json}"
    );
    assert_eq!(
        meta(&run.join("checkpoints").join("policy"))["kind"],
        "linear-policy"
    );
}
