//! A user's LeRobot policy directory (ACT or Diffusion Policy, made by LeRobot 0.4.4:
//! `scripts/lerobot_policy_fixtures.py`) runs in `imago eval` on PushT, its actions read
//! in gym-pusht's pixels; directories it cannot run are one clear error.

mod common;

use std::path::{Path, PathBuf};

use common::{assert_one_line_error, imago, printed_losses, stderr};

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

/// `imago eval` of `policy_dir` on pusht set by `robot_config` over `episodes`
/// episodes, which must succeed; its report (written in `dir`), without the policy's
/// name.
fn eval_report(
    dir: &Path,
    policy_dir: &Path,
    robot_config: &Path,
    episodes: &str,
) -> serde_json::Value {
    let json = dir.join("eval.json");
    let output = imago(&[
        "--device",
        "cpu",
        "eval",
        "--policy",
        path(policy_dir),
        "--robot",
        "pusht",
        "--robot-config",
        path(robot_config),
        "--episodes",
        episodes,
        "--report",
        path(&json),
    ]);
    assert!(
        output.status.success(),
        "{}: {}",
        policy_dir.display(),
        stderr(&output)
    );
    let mut report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    report.as_object_mut().unwrap().remove("name");
    report
}

#[test]
fn lerobot_act_and_diffusion_policies_run_in_imago_eval_on_pusht() {
    let dir = tempfile::tempdir().unwrap();
    let config = pusht_config(dir.path());
    for policy in ["act_policy", "diffusion_policy"] {
        let report = eval_report(dir.path(), &fixture(policy), &config, "2");
        // Every episode ran to its end: the policy acted on every tick.
        assert_eq!(report["episodes"], 2, "{report}");
        assert_eq!(report["mean_length"], 40.0, "{report}");
    }
    // A LeRobot policy executes and samples as its own config says: imago's receding
    // horizon and sampling noise are refused, one line each.
    let act = fixture("act_policy");
    for (flag, must_mention) in [
        ("--execute", "n_action_steps"),
        ("--sampling-noise", "samples as its own config says"),
    ] {
        assert_one_line_error(
            &[
                "--device",
                "cpu",
                "eval",
                "--policy",
                path(&act),
                "--robot",
                "pusht",
                "--robot-config",
                path(&config),
                "--episodes",
                "1",
                flag,
                "2",
            ],
            must_mention,
        );
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

/// `imago export policy` writes a LeRobot directory back: every tensor under LeRobot's
/// name with LeRobot's values (the weights file reads back equal, tensor for tensor),
/// the config and processors as they were, and the export evaluates as the source
/// does. (That LeRobot itself loads an export and acts the same is checked by
/// scripts/lerobot_policy_roundtrip.py, docs/lerobot-policies.md.) It never writes over
/// its input or a directory of other files.
#[test]
fn a_lerobot_policy_exports_back_to_lerobots_layout() {
    let dir = tempfile::tempdir().unwrap();
    let config = pusht_config(dir.path());
    for policy in ["act_policy", "diffusion_policy"] {
        let source = fixture(policy);
        let out = dir.path().join(policy);
        let output = imago(&[
            "export",
            "policy",
            "--format",
            "lerobot",
            "--policy",
            path(&source),
            "--out",
            path(&out),
        ]);
        assert!(output.status.success(), "{policy}: {}", stderr(&output));
        for entry in std::fs::read_dir(&source).unwrap() {
            let name = entry.unwrap().file_name();
            assert!(out.join(&name).is_file(), "{policy}: {name:?} written");
        }
        assert_eq!(
            std::fs::read(out.join("config.json")).unwrap(),
            std::fs::read(source.join("config.json")).unwrap()
        );
        assert_eq!(tensors(&out), tensors(&source), "{policy}: the weights");
        assert_eq!(
            eval_report(dir.path(), &out, &config, "2"),
            eval_report(dir.path(), &source, &config, "2"),
            "{policy}"
        );
    }
    let act = path(&fixture("act_policy")).to_string();
    assert_one_line_error(
        &["export", "policy", "--policy", &act, "--out", &act],
        "replace the input",
    );
    let other = dir.path().join("notes");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("todo.txt"), "keep me").unwrap();
    assert_one_line_error(
        &["export", "policy", "--policy", &act, "--out", path(&other)],
        "--force",
    );
    assert_eq!(
        std::fs::read_to_string(other.join("todo.txt")).unwrap(),
        "keep me"
    );
}

/// Every tensor of a policy directory's weights: name, shape and bytes.
fn tensors(dir: &Path) -> Vec<(String, Vec<usize>, Vec<u8>)> {
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    let data = &bytes[8 + header_len..];
    let mut out: Vec<_> = header
        .into_iter()
        .filter(|(name, _)| name != "__metadata__")
        .map(|(name, info)| {
            let shape = info["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap() as usize)
                .collect();
            let offsets = info["data_offsets"].as_array().unwrap();
            let (start, end) = (
                offsets[0].as_u64().unwrap() as usize,
                offsets[1].as_u64().unwrap() as usize,
            );
            (name, shape, data[start..end].to_vec())
        })
        .collect();
    out.sort();
    out
}

/// A LeRobot policy learns on the device through its own loss and comes back as a
/// LeRobot directory: one fine-tuning round of each (DAgger with the scripted coach,
/// advantage weights from imagination) and behaviour cloning on a replay. Trainable
/// tensors move, ACT's frozen batch-norm statistics do not, and the result runs in
/// `imago eval` and meets its source in `imago gate`. Mistakes are one clear error that writes nothing.
#[test]
fn lerobot_policies_fine_tune_and_imitate_on_pusht_into_lerobot_directories() {
    let dir = tempfile::tempdir().unwrap();
    let robot_config = dir.path().join("pusht.toml");
    std::fs::write(&robot_config, "image_size = 48\nmax_steps = 20\n").unwrap();
    let replay = dir.path().join("replay");
    let output = imago(&[
        "collect",
        "--robot",
        "pusht",
        "--robot-config",
        path(&robot_config),
        "--episodes",
        "4",
        "--out",
        path(&replay),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let settings = dir.path().join("finetune.toml");
    std::fs::write(
        &settings,
        "episodes_per_round = 2\ngroup_size = 1\npolicy_steps = 3\nbatch_size = 4\n\
         world_model_steps = 2\ncritic_steps = 2\ncritic_batch = 8\ninitial_world_model_steps = 2\n\
         [rollout]\ncoaching = { probability = 0.3, ticks = 3 }\n",
    )
    .unwrap();
    let train = |args: &[&str]| {
        let mut all = vec!["--device", "cpu", "train", "--replay", path(&replay)];
        all.extend(args);
        let output = imago(&all);
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
    };
    let evaluates = |policy_dir: &Path| {
        eval_report(dir.path(), policy_dir, &robot_config, "1");
    };
    for policy in ["act_policy", "diffusion_policy"] {
        let source = fixture(policy);
        for method in ["dagger", "awr-imagination"] {
            let out = dir.path().join(format!("{policy}-{method}"));
            let report = dir.path().join(format!("{policy}-{method}.json"));
            train(&[
                "--what",
                "finetune",
                "--init",
                path(&source),
                "--out",
                path(&out),
                "--method",
                method,
                "--rounds",
                "1",
                "--config",
                path(&settings),
                "--report",
                path(&report),
            ]);
            let report: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
            let round = &report["rounds"][0];
            assert_eq!(report["version"], 1, "{policy} {method}: {report}");
            assert_eq!(round["episodes"], 2, "{policy} {method}: {round}");
            assert!(
                round["update"]["eligible"].as_u64().unwrap() > 0
                    && round["update"]["last_loss"].as_f64().unwrap().is_finite(),
                "{policy} {method}: {round}"
            );
            if method == "dagger" {
                // The coach stepped in, and only expert commands were imitated.
                assert!(round["interventions"].as_u64().unwrap() > 0, "{round}");
                assert_eq!(round["advantages"]["weighted"], 0, "{round}");
            } else {
                assert!(round["advantages"]["weighted"].as_u64().unwrap() > 0);
            }
            assert_learned(&source, &out, policy);
            evaluates(&out);
            // The promotion gate takes the pair as it takes imago's checkpoints: a
            // random policy fine-tuned for one round is not proven better.
            let output = imago(&[
                "--device",
                "cpu",
                "gate",
                "--champion",
                path(&source),
                "--challenger",
                path(&out),
                "--robot",
                "pusht",
                "--robot-config",
                path(&robot_config),
                "--max-episodes",
                "4",
            ]);
            assert!(output.status.success(), "{}", stderr(&output));
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(stdout.contains("keep the champion"), "{stdout}");
        }
        let imitated = dir.path().join(format!("{policy}-bc"));
        train(&[
            "--what",
            "bc",
            "--init",
            path(&source),
            "--out",
            path(&imitated),
            "--steps",
            "3",
            "--batch-size",
            "4",
        ]);
        assert_learned(&source, &imitated, policy);
        evaluates(&imitated);
    }
    // LoRA: the transformer's linear layers learn through adapters merged back into
    // them; everything else (the action head among it) stays as it was.
    let act = fixture("act_policy");
    let adapted = dir.path().join("act-lora");
    train(&[
        "--what",
        "bc",
        "--init",
        path(&act),
        "--out",
        path(&adapted),
        "--steps",
        "2",
        "--batch-size",
        "4",
        "--lora-rank",
        "4",
        "--learning-rate",
        "1e-3",
    ]);
    let changed: Vec<String> = tensors(&act)
        .into_iter()
        .zip(tensors(&adapted))
        .filter(|(before, after)| before.2 != after.2)
        .map(|(before, _)| before.0)
        .collect();
    assert!(
        changed.iter().any(|n| n.ends_with("linear1.weight"))
            && changed.iter().any(|n| n.ends_with("in_proj_weight"))
            && changed.iter().all(|n| n.contains("layers.")),
        "{changed:?}"
    );
    evaluates(&adapted);
    let before = tensors(&act);
    let refused = |args: &[&str], needle: &str| {
        let mut all = vec!["--device", "cpu", "train", "--replay", path(&replay)];
        all.extend(args);
        assert_one_line_error(&all, needle);
    };
    refused(
        &[
            "--what",
            "finetune",
            "--init",
            path(&act),
            "--out",
            path(&dir.path().join("flow")),
            "--method",
            "advantage-flow",
        ],
        "advantage-flow fine-tunes a flow head",
    );
    refused(
        &[
            "--what",
            "finetune",
            "--init",
            path(&act),
            "--out",
            path(&act),
            "--config",
            path(&settings),
        ],
        "replace the input",
    );
    // A LeRobot policy executes its chunks through its own queue.
    let whole_chunks = dir.path().join("whole-chunks.toml");
    std::fs::write(
        &whole_chunks,
        std::fs::read_to_string(&settings)
            .unwrap()
            .replace("[rollout]\n", "[rollout]\nexecuted_per_plan = 2\n"),
    )
    .unwrap();
    refused(
        &[
            "--what",
            "finetune",
            "--init",
            path(&act),
            "--out",
            path(&dir.path().join("whole")),
            "--config",
            path(&whole_chunks),
        ],
        "executes its chunks through its own queue",
    );
    refused(
        &[
            "--what",
            "bc",
            "--init",
            path(&act),
            "--out",
            path(&dir.path().join("head")),
            "--head",
            "flow",
        ],
        "leave --head out",
    );
    refused(
        &[
            "--what",
            "bc",
            "--init",
            path(&act),
            "--out",
            path(&dir.path().join("stem")),
            "--stem-layers",
            "2",
        ],
        "leave --stem-layers out",
    );
    refused(
        &[
            "--what",
            "bc",
            "--init",
            path(&act),
            "--out",
            path(&dir.path().join("head")),
            "--frame-shift",
            "4",
        ],
        "image augmentation is its config.json's",
    );
    refused(
        &[
            "--what",
            "bc",
            "--out",
            path(&dir.path().join("lora")),
            "--lora-rank",
            "4",
        ],
        "adapts a LeRobot policy",
    );
    refused(
        &[
            "--what",
            "bc",
            "--init",
            path(&act),
            "--out",
            path(&dir.path().join("lora")),
            "--lora-rank",
            "0",
        ],
        "--lora-rank",
    );
    assert_eq!(
        tensors(&act),
        before,
        "a refused run leaves its input as it was"
    );
    for refused in ["flow", "head", "lora"] {
        assert!(!dir.path().join(refused).exists(), "{refused}");
    }
}

/// `trained` holds `source`'s tensors under the same names and shapes, some of them
/// changed by training; batch-norm statistics (ACT's frozen backbone) unchanged.
fn assert_learned(source: &Path, trained: &Path, policy: &str) {
    let (before, after) = (tensors(source), tensors(trained));
    assert_eq!(before.len(), after.len(), "{policy}");
    let mut moved = 0;
    for ((name, shape, old), (new_name, new_shape, new)) in before.iter().zip(&after) {
        assert_eq!((name, shape), (new_name, new_shape), "{policy}");
        if name.ends_with("running_mean") || name.ends_with("running_var") {
            assert_eq!(old, new, "{policy}: {name} is a frozen statistic");
        }
        moved += (old != new) as usize;
    }
    assert!(
        moved > before.len() / 4,
        "{policy}: {moved} of {} tensors moved",
        before.len()
    );
}

/// `imago accelerate` of a LeRobot Diffusion Policy tries DDIM in fewer steps than the
/// policy's DDPM 100, fewest first, each in paired episodes with the reference; a
/// random policy solves nothing, so nothing is certified and the reference is kept.
/// ACT has no steps to cut: one clear error.
#[test]
fn accelerate_tries_fewer_denoising_steps_of_a_lerobot_diffusion_policy() {
    let dir = tempfile::tempdir().unwrap();
    let config = pusht_config(dir.path());
    let report = dir.path().join("accelerate.json");
    let diffusion = fixture("diffusion_policy");
    let output = imago(&[
        "--device",
        "cpu",
        "accelerate",
        "--ckpt",
        path(&diffusion),
        "--robot",
        "pusht",
        "--robot-config",
        path(&config),
        "--max-episodes",
        "2",
        "--report",
        path(&report),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("chosen: the reference"), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(report["reference"]["sampler"], "DDPM", "{report}");
    assert_eq!(report["reference"]["steps"], 100, "{report}");
    let variants = report["variants"].as_array().unwrap();
    let steps: Vec<u64> = variants
        .iter()
        .map(|v| v["steps"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [1, 3, 6, 12, 25, 50], "{report}");
    assert!(
        variants
            .iter()
            .all(|v| v["sampler"] == "DDIM" && v["episodes"] == 2)
    );
    // One denoising step against a hundred: faster by far on any machine.
    assert!(variants[0]["speedup"].as_f64().unwrap() > 3.0, "{report}");
    assert_one_line_error(
        &[
            "--device",
            "cpu",
            "accelerate",
            "--ckpt",
            path(&fixture("act_policy")),
            "--robot",
            "pusht",
            "--robot-config",
            path(&config),
        ],
        "no denoising steps",
    );
    // Out-of-range settings are refused before any episode runs, as for imago's own.
    for (flag, value) in [("--budget", "NaN"), ("--confidence", "0.2")] {
        assert_one_line_error(
            &[
                "--device",
                "cpu",
                "accelerate",
                "--ckpt",
                path(&diffusion),
                "--robot",
                "pusht",
                "--robot-config",
                path(&config),
                flag,
                value,
            ],
            flag,
        );
    }
}

/// A daemon config for pusht (the fixtures' 48x48 camera, 20-tick episodes) starting
/// from the LeRobot policy `policy`, with `extra` appended (tables of its own).
fn lerobot_daemon_config(dir: &Path, policy: &Path, extra: &str) -> PathBuf {
    let config = dir.join("robot.toml");
    std::fs::write(
        &config,
        format!(
            "robot = \"pusht\"\ndevice = \"cpu\"\npolicy = \"{}\"\n\
             [actor.robot]\nimage_size = 48\nmax_steps = 20\n{extra}",
            path(policy)
        ),
    )
    .unwrap();
    config
}

/// `imago daemon` of `config` on `run` for `seconds` (with `--resume` when asked); its
/// report.
fn lerobot_daemon(config: &Path, run: &Path, seconds: &str, resume: bool) -> serde_json::Value {
    let json = run.with_extension("json");
    let mut args = vec![
        "daemon",
        "--config",
        path(config),
        "--run-dir",
        path(run),
        "--duration",
        seconds,
        "--report",
        path(&json),
    ];
    if resume {
        args.push("--resume");
    }
    let output = imago(&args);
    assert!(output.status.success(), "{}", stderr(&output));
    serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap()
}

/// A LeRobot policy in `imago daemon`: ACT acts through its own queues at pusht's
/// rate, its transitions recorded, while the learner fine-tunes it and each new version
/// acts from the next episode; the checkpoint is a LeRobot directory `imago eval`
/// runs (and LeRobot's `from_pretrained` reads: same layout as the export), which
/// `--resume` continues without reusing a version; through the promotion gate, each
/// version is tested in simulation first. Diffusion Policy acts and records with the
/// learner off. Settings a LeRobot run cannot honour are one clear error before the
/// run directory is made.
#[test]
fn lerobot_policies_act_learn_and_resume_in_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let act = fixture("act_policy");
    let learning = "[learner]\nmin_episodes = 2\nwindow_episodes = 8\n\
                    [learner.finetune]\npolicy_steps = 2\nbatch_size = 4\nworld_model_steps = 2\n\
                    critic_steps = 2\ncritic_batch = 8\n[promotion]\nenabled = false\n";
    let config = lerobot_daemon_config(dir.path(), &act, learning);
    let run = dir.path().join("act-run");
    let status = lerobot_daemon(&config, &run, "10", false);
    let versions = status["policy_versions"].as_array().unwrap();
    assert!(
        status["final_policy_version"].as_u64().unwrap() >= 2 && versions.len() >= 2,
        "the learner published a version and the actor acted with it: {status}"
    );
    assert_eq!(status["queue_drops"], 0, "{status}");
    let contents = imago_runtime::store::replay::read_replay(&run.join("replay")).unwrap();
    assert_eq!(contents.records, status["replay_records"].as_u64().unwrap());
    let checkpoint = run.join("checkpoints/policy");
    for file in ["config.json", "model.safetensors", "imago-checkpoint.json"] {
        assert!(checkpoint.join(file).is_file(), "{file}");
    }
    assert!(!checkpoint.join("meta.json").exists());
    assert_learned(&act, &checkpoint, "act");
    eval_report(dir.path(), &checkpoint, &pusht_config(dir.path()), "1");
    let last = status["final_policy_version"].as_u64().unwrap();
    let resumed = lerobot_daemon(&config, &run, "3", true);
    let first_resumed = resumed["policy_versions"][0].as_u64().unwrap();
    assert!(first_resumed >= last, "{resumed} after {status}");

    // A damaged checkpoint is refused, naming it.
    let weights = checkpoint.join("model.safetensors");
    let mut bytes = std::fs::read(&weights).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&weights, bytes).unwrap();
    let output = imago(&[
        "daemon",
        "--config",
        path(&config),
        "--run-dir",
        path(&run),
        "--resume",
        "--duration",
        "1",
    ]);
    assert!(!output.status.success());
    assert!(stderr(&output).contains("damaged"), "{}", stderr(&output));

    // Through the promotion gate (mode `sim`, the default): each new version is tested
    // against the champion in paired simulated episodes; the champion is kept as a
    // LeRobot directory beside the learner's checkpoint.
    let gated_dir = dir.path().join("gated");
    std::fs::create_dir_all(&gated_dir).unwrap();
    let gated = learning.replace(
        "[promotion]\nenabled = false\n",
        "[promotion]\nmax_episodes = 4\n",
    );
    let config = lerobot_daemon_config(&gated_dir, &act, &gated);
    let run = gated_dir.join("run");
    let status = lerobot_daemon(&config, &run, "7", false);
    let tests = status["promotion_test_episodes"].as_array().unwrap();
    assert!(!tests.is_empty(), "{status}");
    assert_eq!(
        status["promotions"].as_u64().unwrap() + status["rejections"].as_u64().unwrap(),
        tests.len() as u64,
        "{status}"
    );
    let champion = run.join("checkpoints/champion");
    assert!(champion.join("imago-checkpoint.json").is_file());
    eval_report(dir.path(), &champion, &pusht_config(dir.path()), "1");

    // Diffusion Policy acts and records, its history and queue kept per episode.
    let diffusion_dir = dir.path().join("diffusion");
    std::fs::create_dir_all(&diffusion_dir).unwrap();
    let config = lerobot_daemon_config(
        &diffusion_dir,
        &fixture("diffusion_policy"),
        "[learner]\nenabled = false\n",
    );
    let status = lerobot_daemon(&config, &diffusion_dir.join("run"), "4", false);
    assert!(status["ticks"].as_u64().unwrap() >= 10, "{status}");
    assert_eq!(status["policy_versions"], serde_json::json!([1]));

    // What a LeRobot run cannot do: one line each, and no run directory made.
    for (extra, mention) in [
        (
            "[learner.finetune]\nmethod = \"advantage-flow\"\n[promotion]\nenabled = false\n",
            "awr-returns",
        ),
        (
            "[actor.chunking]\nmode = \"realtime\"\n[learner]\nenabled = false\n",
            "every_tick",
        ),
    ] {
        let bad_dir = dir.path().join("bad");
        std::fs::create_dir_all(&bad_dir).unwrap();
        let config = lerobot_daemon_config(&bad_dir, &act, extra);
        let run = bad_dir.join("run");
        assert_one_line_error(
            &[
                "daemon",
                "--config",
                path(&config),
                "--run-dir",
                path(&run),
                "--duration",
                "1",
            ],
            mention,
        );
        assert!(!run.exists(), "{extra}");
    }
}

#[test]
fn a_new_diffusion_policy_trains_on_pushts_state_and_keypoints_and_runs_in_eval() {
    let dir = tempfile::tempdir().unwrap();
    let config = pusht_config(dir.path());
    let (replay, new) = (dir.path().join("replay"), dir.path().join("new"));
    let collect = imago(&[
        "collect",
        "--robot",
        "pusht",
        "--robot-config",
        path(&config),
        "--episodes",
        "6",
        "--out",
        path(&replay),
    ]);
    assert!(collect.status.success(), "{}", stderr(&collect));
    let train = |extra: &[&str]| {
        let mut args = vec![
            "--device",
            "cpu",
            "train",
            "--what",
            "bc",
            "--replay",
            path(&replay),
            "--out",
            path(&new),
            "--batch-size",
            "16",
            "--learning-rate",
            "0.001",
        ];
        args.extend_from_slice(extra);
        imago(&args)
    };
    let output = train(&["--policy", "diffusion", "--steps", "40"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let said = String::from_utf8_lossy(&output.stdout).into_owned();
    let (first, last) = printed_losses(&said);
    assert!(last < 0.8 * first, "the loss fell too little: {said}");
    // Nothing left beside --out: the fresh weights trained from a temporary directory.
    let mut beside: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    beside.sort();
    assert_eq!(beside, ["new", "pusht.toml", "replay"]);
    // LeRobot's layout: the state, then gym-pusht's 16 keypoint coordinates.
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(new.join("config.json")).unwrap()).unwrap();
    assert_eq!(written["type"], "diffusion");
    let text = std::fs::read_to_string(new.join("config.json")).unwrap();
    assert!(
        text.find("observation.state").unwrap()
            < text.find("observation.environment_state").unwrap(),
        "{text}"
    );
    assert_eq!(
        written["input_features"]["observation.environment_state"]["shape"],
        serde_json::json!([16])
    );
    let report = eval_report(dir.path(), &new, &config, "2");
    assert_eq!(report["episodes"], 2, "{report}");
    assert_eq!(report["mean_length"], 40.0, "{report}");
    // It continues as any LeRobot directory does.
    let again = imago(&[
        "--device",
        "cpu",
        "train",
        "--replay",
        path(&replay),
        "--init",
        path(&new),
        "--out",
        path(&dir.path().join("more")),
        "--steps",
        "2",
        "--batch-size",
        "4",
    ]);
    assert!(again.status.success(), "{}", stderr(&again));

    // A user's slips: flags a new Diffusion Policy has no use for, a misspelt name.
    for (extra, mention) in [
        (&["--policy", "diffusion", "--head", "flow"][..], "--head"),
        (
            &["--policy", "diffusion", "--chunk-len", "8"][..],
            "--chunk-len",
        ),
        (
            &["--policy", "diffusion", "--no-camera"][..],
            "--no-camera does not apply to --policy diffusion",
        ),
        (
            &["--policy", "diffuson"][..],
            "one of: vla, linear, diffusion",
        ),
    ] {
        let output = train(extra);
        assert!(!output.status.success(), "{extra:?}");
        let error = stderr(&output);
        assert!(error.contains(mention), "{extra:?}: {error}");
    }
}

#[test]
fn a_new_diffusion_policy_for_a_robot_without_an_environment_state_is_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let replay = dir.path().join("replay");
    let collect = imago(&["collect", "--episodes", "2", "--out", path(&replay)]);
    assert!(collect.status.success(), "{}", stderr(&collect));
    let out = dir.path().join("new");
    assert_one_line_error(
        &[
            "--device",
            "cpu",
            "train",
            "--replay",
            path(&replay),
            "--policy",
            "diffusion",
            "--out",
            path(&out),
        ],
        "gives no environment state",
    );
    assert!(!out.exists());
}
