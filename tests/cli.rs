//! The command line's contracts: clear one-line errors, and collect -> train -> eval.

mod common;

use common::{assert_one_line_error, imago, imago_ok, stderr};

#[test]
fn absent_devices_fail_with_one_clear_line() {
    assert_one_line_error(&["--device", "wgpu:7", "demo", "--quick"], "wgpu:7");
    if std::path::Path::new("/dev/nvidia0").exists() {
        eprintln!("skipped the CUDA half: this machine has an NVIDIA device");
        return;
    }
    assert_one_line_error(&["--device", "cuda", "demo", "--quick"], "cuda");
}

/// `demo --out`, the flag `collect` and `train` write to, names the run directory: a
/// file given there is refused in one line and left as it was.
#[test]
fn demo_takes_out_for_its_run_directory_and_refuses_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, "mine").unwrap();
    let file_arg = file.to_str().unwrap();
    assert_one_line_error(
        &["--device", "cpu", "demo", "--quick", "--out", file_arg],
        "notes.txt",
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
}

#[test]
fn devices_lists_the_cpu_backends() {
    let output = imago(&["devices"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("cpu:ndarray") && text.contains("burn-flex") && text.contains("auto picks"),
        "{text}"
    );
}

#[test]
fn collect_train_eval_round_trip_and_bad_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let replay = dir.path().join("replay");
    let ckpt = dir.path().join("ckpt");
    let path = |p: &std::path::Path| p.to_str().unwrap().to_string();

    let output = imago(&[
        "collect",
        "--robot",
        "reacher2d",
        "--episodes",
        "6",
        "--out",
        &path(&replay),
        "--noise",
        "0.1",
        "--mistake-rate",
        "0.5",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains("recorded 6 episodes"));

    let train = |init: Option<&str>| {
        let mut args = vec![
            "--device",
            "cpu",
            "train",
            "--replay",
            replay.to_str().unwrap(),
            "--what",
            "bc",
        ];
        args.extend([
            "--out",
            ckpt.to_str().unwrap(),
            "--steps",
            "4",
            "--batch-size",
            "8",
        ]);
        if let Some(init) = init {
            // Continuing a copy of --out replaces --out: only with --force.
            args.extend(["--init", init, "--force"]);
        }
        imago(&args)
    };
    let output = train(None);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains("checkpoint version 1"));

    // --ema writes the moving average of the weights: after one step it is that
    // step's weights (the average starts as the weights), after more it is not the
    // last step's.
    let clone = |out: &std::path::Path, steps: &str, ema: bool| {
        let mut args = vec![
            "--device".to_string(),
            "cpu".into(),
            "train".into(),
            "--replay".into(),
            path(&replay),
            "--out".into(),
            path(out),
            "--steps".into(),
            steps.into(),
            "--batch-size".into(),
            "8".into(),
        ];
        if ema {
            args.push("--ema".into());
        }
        let output = imago(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(output.status.success(), "{}", stderr(&output));
        safetensors_by_name(&std::fs::read(out.join("model.safetensors")).unwrap())
    };
    let at = |name: &str| dir.path().join(name);
    assert_eq!(
        clone(&at("last-1"), "1", false),
        clone(&at("averaged-1"), "1", true)
    );
    assert_ne!(
        clone(&at("last-5"), "5", false),
        clone(&at("averaged-5"), "5", true)
    );

    // --successful-only clones the episodes that ended in success, and says how many;
    // a replay without one is a one-line error.
    let successful = dir.path().join("successful");
    let only_successful = |replay: &std::path::Path| {
        let (replay, out) = (path(replay), path(&successful));
        let args = [
            "--device",
            "cpu",
            "train",
            "--replay",
            &replay,
            "--out",
            &out,
            "--steps",
            "2",
            "--batch-size",
            "4",
            "--successful-only",
            "--force",
        ];
        args.map(String::from)
    };
    let output = imago(&only_successful(&replay).each_ref().map(String::as_str));
    assert!(output.status.success(), "{}", stderr(&output));
    let kept = stderr(&output)
        .split("using the ")
        .nth(1)
        .and_then(|rest| {
            rest.strip_suffix(" episodes of 6 that ended in success (--successful-only)\n")
        })
        .map(|n| n.parse::<usize>().unwrap())
        .unwrap_or_else(|| panic!("{}", stderr(&output)));
    assert!((1..6).contains(&kept), "{kept} of 6 kept");
    assert!(
        String::from_utf8_lossy(&output.stdout).contains(&format!("trained on {kept} episodes")),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    // The refused run leaves the checkpoint --out already holds as it was, even under
    // --force.
    let written = std::fs::read(successful.join("meta.json")).unwrap();
    let failed = dir.path().join("failed");
    let output = imago(&[
        "collect",
        "--episodes",
        "2",
        "--mistake-rate",
        "1",
        "--noise",
        "0",
        "--out",
        &path(&failed),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_one_line_error(
        &only_successful(&failed).each_ref().map(String::as_str),
        "none ended in success; --successful-only needs at least one",
    );
    assert_eq!(
        std::fs::read(successful.join("meta.json")).unwrap(),
        written
    );

    let report = dir.path().join("eval.json");
    let output = imago(&[
        "--device",
        "cpu",
        "eval",
        "--ckpt",
        &path(&ckpt),
        "--episodes",
        "3",
        "--report",
        &path(&report),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(json["episodes"], 3);

    let copy = dir.path().join("init");
    std::fs::create_dir_all(&copy).unwrap();
    for file in std::fs::read_dir(&ckpt).unwrap() {
        let file = file.unwrap();
        std::fs::copy(file.path(), copy.join(file.file_name())).unwrap();
    }
    let output = train(Some(copy.to_str().unwrap()));
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains("checkpoint version 2"));

    let replay_arg = path(&replay);
    let ckpt_arg = path(&ckpt);
    // A checkpoint with a flow head continues with it; asked to continue as a Gaussian
    // one, it is refused.
    let bc_args = |out: &str, extra: &[&str]| -> Vec<String> {
        [
            "--device",
            "cpu",
            "train",
            "--replay",
            &replay_arg,
            "--out",
            out,
            "--steps",
            "2",
        ]
        .iter()
        .chain(extra)
        .map(|a| a.to_string())
        .collect()
    };
    let run = |args: Vec<String>| imago(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let flow = path(&dir.path().join("flow"));
    let output = run(bc_args(&flow, &["--batch-size", "4", "--head", "flow"]));
    assert!(output.status.success(), "{}", stderr(&output));
    // Each refused, so nothing is written at --out.
    let refused_out = path(&dir.path().join("refused"));
    let continue_from = |init: &str, extra: &[&str], must_mention: &str| {
        let mut args = bc_args(&refused_out, &["--init", init]);
        args.extend(extra.iter().map(|a| a.to_string()));
        assert_one_line_error(
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
            must_mention,
        )
    };
    continue_from(
        &flow,
        &["--head", "gaussian"],
        "holds a policy with a flow head (that cannot change",
    );
    continue_from(&flow, &["--chunk-len", "8"], "chunks of 4");
    let flow_continued = path(&dir.path().join("flow-continued"));
    let output = run(bc_args(&flow_continued, &["--init", &flow]));
    assert!(output.status.success(), "{}", stderr(&output));
    // A new policy's size is chosen by --width and --layers, kept when training
    // continues, and refused out of range or where it cannot change.
    let narrow = dir.path().join("narrow");
    let output = run(bc_args(
        &path(&narrow),
        &["--batch-size", "4", "--width", "32", "--layers", "1"],
    ));
    assert!(output.status.success(), "{}", stderr(&output));
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(narrow.join("meta.json")).unwrap()).unwrap();
    assert_eq!(
        (
            &meta["config"]["d_model"],
            &meta["config"]["d_ff"],
            &meta["config"]["n_layers"]
        ),
        (&32.into(), &64.into(), &1.into())
    );
    let narrow_continued = path(&dir.path().join("narrow-continued"));
    let output = run(bc_args(&narrow_continued, &["--init", &path(&narrow)]));
    assert!(output.status.success(), "{}", stderr(&output));
    continue_from(&path(&narrow), &["--width", "64"], "width 32");
    continue_from(&path(&narrow), &["--layers", "2"], "1 transformer layers");
    // A new VLA that does not read the camera: kept when training continues, refused
    // where it cannot change, and by the linear policy, which reads none.
    assert_eq!(meta["config"]["reads_camera"], true);
    let blind = dir.path().join("blind");
    let output = run(bc_args(
        &path(&blind),
        &["--batch-size", "4", "--no-camera"],
    ));
    assert!(output.status.success(), "{}", stderr(&output));
    let blind_meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(blind.join("meta.json")).unwrap()).unwrap();
    assert_eq!(blind_meta["config"]["reads_camera"], false);
    let blind_continued = path(&dir.path().join("blind-continued"));
    let output = run(bc_args(&blind_continued, &["--init", &path(&blind)]));
    assert!(output.status.success(), "{}", stderr(&output));
    continue_from(&path(&narrow), &["--no-camera"], "a camera it reads");
    // What a new VLA's pixel stem reads: kept when training continues and refused
    // where it cannot change.
    assert_eq!(meta["config"]["stem_inputs"], "colour");
    // So is the side it reads the camera at (reacher2d's 48x48 frames read at 24x24).
    let coord = dir.path().join("coord");
    let output = run(bc_args(
        &path(&coord),
        &[
            "--batch-size",
            "4",
            "--stem-inputs",
            "neighbourhood-and-position",
            "--frame-side",
            "24",
            "--frame-shift",
            "2",
            "--stem-channels",
            "24",
            "--stem-layers",
            "2",
            "--read-state",
            "cos_q1,sin_q1,cos_q2,sin_q2",
            "--keypoint-targets",
            "ee_x,ee_y",
            "--keypoint-target-weight",
            "2",
        ],
    ));
    assert!(output.status.success(), "{}", stderr(&output));
    let coord_meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(coord.join("meta.json")).unwrap()).unwrap();
    assert_eq!(
        coord_meta["config"]["stem_inputs"],
        "neighbourhood-and-position"
    );
    assert_eq!(
        (
            &coord_meta["config"]["image_size"],
            &coord_meta["config"]["frame_pool"]
        ),
        (&24.into(), &2.into())
    );
    assert_eq!(coord_meta["config"]["stem_channels"], 24);
    assert_eq!(coord_meta["config"]["stem_layers"], 2);
    assert_eq!(
        coord_meta["config"]["proprio_inputs"],
        serde_json::json!([0, 1, 2, 3])
    );
    assert_eq!(
        coord_meta["config"]["keypoint_targets"],
        serde_json::json!([6, 7])
    );
    assert_eq!(coord_meta["config"]["keypoint_target_weight"], 2.0);
    let coord_continued = path(&dir.path().join("coord-continued"));
    let output = run(bc_args(&coord_continued, &["--init", &path(&coord)]));
    assert!(output.status.success(), "{}", stderr(&output));
    continue_from(
        &path(&coord),
        &["--stem-inputs", "colour"],
        "a pixel stem that reads neighbourhood-and-position",
    );
    continue_from(
        &path(&coord),
        &["--frame-side", "48"],
        "a camera read at 24x24",
    );
    continue_from(
        &path(&coord),
        &["--stem-channels", "16"],
        "24 stem channels",
    );
    continue_from(
        &path(&coord),
        &["--stem-layers", "1"],
        "a stem of 2 per-pixel layers",
    );
    continue_from(
        &path(&coord),
        &["--keypoint-targets", "ee_x"],
        "keypoint targets ee_x,ee_y",
    );
    continue_from(
        &path(&coord),
        &["--read-state", "cos_q1,sin_q1"],
        "the proprioception entries cos_q1,sin_q1,cos_q2,sin_q2 read",
    );
    let fresh = path(&dir.path().join("fresh"));
    for (flags, must_mention) in [
        (&["--width", "30"][..], "a multiple of 4"),
        (
            &["--width", "4096"][..],
            "--width 4096: must be in [8, 1024]",
        ),
        (&["--layers", "0"][..], "--layers 0: must be in [1, 12]"),
        (
            &["--policy", "linear", "--layers", "2"][..],
            "has no transformer layers",
        ),
        (
            &["--policy", "linear", "--no-camera"][..],
            "reads no camera already",
        ),
        (
            &["--what", "worldmodel", "--no-camera"][..],
            "--no-camera applies to --what bc, not --what worldmodel",
        ),
        (
            &["--policy", "linear", "--stem-inputs", "neighbourhood"][..],
            "reads no pixels",
        ),
        (
            &["--frame-side", "40"][..],
            "--frame-side 40: must be one of 8, 16, 24, 48",
        ),
        (
            &["--frame-side", "24", "--no-camera"][..],
            "reads no camera",
        ),
        (
            &["--policy", "linear", "--frame-side", "24"][..],
            "reads no pixels",
        ),
        (
            &["--policy", "diffusion", "--frame-side", "24"][..],
            "--frame-side does not apply to --policy diffusion",
        ),
        (
            &["--stem-channels", "0"][..],
            "--stem-channels 0: must be in [1, 256]",
        ),
        (
            &["--stem-channels", "32", "--no-camera"][..],
            "reads no camera",
        ),
        (
            &["--policy", "linear", "--stem-channels", "32"][..],
            "the linear policy reads no pixels",
        ),
        (
            &["--policy", "diffusion", "--stem-channels", "32"][..],
            "--stem-channels does not apply to --policy diffusion",
        ),
        (
            &["--stem-layers", "5"][..],
            "--stem-layers 5: must be in [1, 4]",
        ),
        (
            &["--stem-layers", "2", "--no-camera"][..],
            "reads no camera",
        ),
        (
            &["--policy", "linear", "--stem-layers", "2"][..],
            "the linear policy reads no pixels",
        ),
        (
            &["--policy", "diffusion", "--stem-layers", "2"][..],
            "--stem-layers does not apply to --policy diffusion",
        ),
        (
            &["--what", "finetune", "--stem-layers", "2"][..],
            "--stem-layers applies to --what bc, not --what finetune",
        ),
        (
            &["--read-state", "cos_q1,ee_z"][..],
            "--read-state cos_q1,ee_z: the robot's proprioception has no entry `ee_z` (it has cos_q1, sin_q1",
        ),
        (
            &["--read-state", "cos_q1,cos_q1"][..],
            "--read-state cos_q1,cos_q1: names `cos_q1` twice",
        ),
        (
            &["--keypoint-targets", "ee_x"][..],
            "--keypoint-targets ee_x: the policy reads `ee_x`, so it would not learn to see it",
        ),
        (
            &["--keypoint-target-weight", "2"][..],
            "--keypoint-target-weight 2: weighs --keypoint-targets, which is not given",
        ),
        (
            &[
                "--read-state",
                "cos_q1",
                "--keypoint-targets",
                "ee_x",
                "--keypoint-target-weight",
                "2000",
            ][..],
            "--keypoint-target-weight 2000: must be in [0, 1000]",
        ),
        (
            &[
                "--read-state",
                "cos_q1",
                "--keypoint-targets",
                "ee_x",
                "--no-camera",
            ][..],
            "--keypoint-targets ee_x with --no-camera",
        ),
        (
            &[
                "--policy",
                "linear",
                "--read-state",
                "cos_q1",
                "--keypoint-targets",
                "ee_x",
            ][..],
            "--keypoint-targets ee_x: the linear policy reads no pixels",
        ),
        (
            &["--policy", "diffusion", "--keypoint-targets", "ee_x"][..],
            "--keypoint-targets does not apply to --policy diffusion",
        ),
        (
            &["--what", "finetune", "--read-state", "cos_q1"][..],
            "--read-state applies to --what bc, not --what finetune",
        ),
        (
            &["--frame-shift", "33"][..],
            "--frame-shift 33: must be in [0, 32] camera pixels",
        ),
        (
            &["--frame-shift", "2", "--no-camera"][..],
            "the camera-less VLA policy reads no camera",
        ),
        (
            &["--policy", "linear", "--frame-shift", "2"][..],
            "the linear policy reads no camera",
        ),
        (
            &["--policy", "diffusion", "--frame-shift", "2"][..],
            "--frame-shift does not apply to --policy diffusion",
        ),
        (
            &["--what", "worldmodel", "--frame-shift", "2"][..],
            "--frame-shift applies to --what bc, not --what worldmodel",
        ),
    ] {
        let args = bc_args(&fresh, flags);
        assert_one_line_error(
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
            must_mention,
        );
    }
    // A misspelt stem names the choices (clap's error, not one line).
    let output = run(bc_args(&fresh, &["--stem-inputs", "neighborhood"]));
    assert!(!output.status.success());
    assert!(
        stderr(&output)
            .contains("use colour, colour-and-position, neighbourhood, neighbourhood-and-position"),
        "{}",
        stderr(&output)
    );
    // A size out of range is named before any replay is read.
    let missing = path(&dir.path().join("no-such-replay"));
    assert_one_line_error(
        &[
            "--device", "cpu", "train", "--replay", &missing, "--out", &fresh, "--width", "4096",
        ],
        "--width 4096: must be in [8, 1024]",
    );
    // A hand-edited meta.json no longer matches its checksum.
    let meta = std::fs::read_to_string(copy.join("meta.json")).unwrap();
    std::fs::write(
        copy.join("meta.json"),
        meta.replace("\"d_model\": 64", "\"d_model\": 32"),
    )
    .unwrap();
    continue_from(copy.to_str().unwrap(), &[], "own checksum");
    assert_one_line_error(
        &[
            "--device",
            "cpu",
            "train",
            "--replay",
            &path(dir.path()),
            "--out",
            &ckpt_arg,
        ],
        "not a replay directory",
    );
    assert_one_line_error(
        &["--device", "cpu", "eval", "--ckpt", &path(&replay)],
        "meta.json",
    );
}

/// Three training steps of a `family` world model on `replay`, written to `ckpt`.
/// A safetensors file's tensors, each by name as its raw bytes (the header's order and
/// metadata left out, so that two files compare by their weights alone).
fn safetensors_by_name(file: &[u8]) -> std::collections::BTreeMap<String, Vec<u8>> {
    let header_len = u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&file[8..8 + header_len]).unwrap();
    let data = &file[8 + header_len..];
    header
        .as_object()
        .unwrap()
        .iter()
        .filter(|(name, _)| *name != "__metadata__")
        .map(|(name, entry)| {
            let [start, end] = [0, 1].map(|i| entry["data_offsets"][i].as_u64().unwrap() as usize);
            (name.clone(), data[start..end].to_vec())
        })
        .collect()
}

fn train_tiny_world_model(
    replay: &std::path::Path,
    ckpt: &std::path::Path,
    family: &str,
) -> std::process::Output {
    imago(&[
        "--device",
        "cpu",
        "train",
        "--what",
        "worldmodel",
        "--family",
        family,
        "--replay",
        replay.to_str().unwrap(),
        "--out",
        ckpt.to_str().unwrap(),
        "--steps",
        "3",
        "--batch-size",
        "4",
        "--horizon",
        "4",
    ])
}

#[test]
fn world_model_train_and_wm_eval_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let replay = dir.path().join("replay");
    let ckpt_of = |family: &str| dir.path().join(format!("wm-{family}"));
    let report = dir.path().join("wm.json");
    let path = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let output = imago(&["collect", "--episodes", "10", "--out", &path(&replay)]);
    assert!(output.status.success(), "{}", stderr(&output));

    for family in ["residual-mlp", "salt", "action-prefix"] {
        let ckpt = ckpt_of(family);
        let output = train_tiny_world_model(&replay, &ckpt, family);
        assert!(output.status.success(), "{}", stderr(&output));
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            stdout.contains(&format!("trained a {family} world model on 8 episodes")),
            "{stdout}"
        );

        let output = imago(&[
            "--device",
            "cpu",
            "wm-eval",
            "--ckpt",
            &path(&ckpt),
            "--replay",
            &path(&replay),
            "--horizon",
            "4",
            "--report",
            &path(&report),
        ]);
        assert!(output.status.success(), "{}", stderr(&output));
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        assert_eq!(json["family"], family);
        for errors in [
            "horizon_error",
            "copy_last_error",
            "constant_velocity_error",
            "shuffled_action_error",
        ] {
            assert_eq!(json[errors].as_array().unwrap().len(), 4, "{errors}");
        }
        assert!(json["spearman"].is_object());
        for level in ["coverage_1sigma", "coverage_2sigma"] {
            for kind in ["raw", "own_rollout", "calibrated", "calibrated_gaussian"] {
                assert_eq!(
                    json[level][kind].as_array().unwrap().len(),
                    4,
                    "{level}.{kind}"
                );
            }
        }
        // One tail factor per horizon, from a Gaussian's 2 to the largest tried.
        let tails = json["tail_factor"].as_array().unwrap();
        assert_eq!(tails.len(), 4);
        assert!(
            tails
                .iter()
                .all(|t| (2.0..=4.0 + 1e-9).contains(&t.as_f64().unwrap())),
            "{tails:?}"
        );
        assert_eq!(json["episodes"], 2, "episodes 4 and 9 are held out");
        assert_eq!(json["salt_error_split"].is_object(), family == "salt");
    }

    let ckpt = ckpt_of("salt");

    // Training settings from a file, flags winning; a misspelt key or a value out of
    // range is one line naming it, and nothing is written.
    let config = dir.path().join("wm.toml");
    let train_with_config = |out: &std::path::Path| {
        vec![
            "--device".to_string(),
            "cpu".into(),
            "train".into(),
            "--what".into(),
            "worldmodel".into(),
            "--replay".into(),
            path(&replay),
            "--out".into(),
            path(out),
            "--steps".into(),
            "2".into(),
            "--config".into(),
            path(&config),
        ]
    };
    std::fs::write(&config, "ema_decay = 0.0\nbatch_size = 4\nhorizon = 3\n").unwrap();
    let from_file = dir.path().join("wm-from-file");
    let args = train_with_config(&from_file);
    let output = imago(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(output.status.success(), "{}", stderr(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("windows of 3 steps"), "{stdout}");
    for (text, named) in [
        ("ema_decy = 0.0\n", "ema_decy"),
        (
            "ema_decay = 1.5\n",
            "ema_decay = 1.5: must be in [0.0, 0.9999]",
        ),
        ("[losses]\nprediction = -1.0\n", "losses.prediction"),
    ] {
        std::fs::write(&config, text).unwrap();
        let refused = dir.path().join("wm-refused");
        let args = train_with_config(&refused);
        assert_one_line_error(&args.iter().map(String::as_str).collect::<Vec<_>>(), named);
        assert!(!refused.exists(), "{text}");
    }

    // A policy checkpoint is not a world model; a horizon of 0 is refused; a replay of
    // demonstrations holds no policy's episodes to select.
    for (model, extra, named) in [
        (&replay, &[][..], "meta.json"),
        (
            &ckpt,
            &["--horizon", "0"][..],
            "--horizon = 0: must be in [1, 64]",
        ),
        (
            &ckpt,
            &["--from-version", "1"][..],
            "none were recorded by a policy of version 1 or later; --from-version needs at least one",
        ),
    ] {
        let (model, replay) = (path(model), path(&replay));
        let mut args = vec![
            "--device", "cpu", "wm-eval", "--ckpt", &model, "--replay", &replay,
        ];
        args.extend(extra);
        assert_one_line_error(&args, named);
    }
    // Argument errors are clap's (with a usage hint), still naming the problem.
    let output = imago(&[
        "--device",
        "cpu",
        "train",
        "--what",
        "worldmodel",
        "--family",
        "lstm",
        "--replay",
        &path(&replay),
        "--out",
        &path(&ckpt),
    ]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("unknown transition family `lstm`"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn finetune_every_method_and_paired_eval() {
    let dir = tempfile::tempdir().unwrap();
    let path = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let replay = path(&dir.path().join("replay"));
    let output = imago(&["collect", "--episodes", "12", "--out", &replay]);
    assert!(output.status.success(), "{}", stderr(&output));
    let train = |what: &str, out: &str, extra: &[&str]| {
        let mut args = vec![
            "--device", "cpu", "train", "--what", what, "--replay", &replay, "--out", out,
        ];
        args.extend(extra);
        let output = imago(&args);
        assert!(output.status.success(), "{what}: {}", stderr(&output));
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let bc = path(&dir.path().join("bc"));
    let flow = path(&dir.path().join("bc-flow"));
    let wm = path(&dir.path().join("wm"));
    train("bc", &bc, &["--steps", "3", "--batch-size", "8"]);
    train(
        "bc",
        &flow,
        &["--steps", "3", "--batch-size", "8", "--head", "flow"],
    );
    train("worldmodel", &wm, &["--steps", "3", "--batch-size", "4"]);

    // Certified acceleration of a flow policy tries fewer sampler steps as well as
    // longer open-loop execution, fastest (measured) first (a budget no 16 episodes
    // can certify, so every variant is listed).
    let accelerated = dir.path().join("accelerate.json");
    let output = imago(&[
        "--device",
        "cpu",
        "accelerate",
        "--ckpt",
        &flow,
        "--budget",
        "0.01",
        "--max-episodes",
        "16",
        "--report",
        &path(&accelerated),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&accelerated).unwrap()).unwrap();
    assert_eq!(report["reference_flow_steps"], 8, "{report}");
    let variants = report["variants"].as_array().unwrap();
    let speedups: Vec<f64> = variants
        .iter()
        .map(|v| v["speedup"].as_f64().unwrap())
        .collect();
    assert!(speedups.iter().all(|&s| s > 1.0), "{report}");
    assert!(speedups.windows(2).all(|w| w[0] >= w[1]), "{report}");
    let mut flow_steps: Vec<u64> = variants
        .iter()
        .map(|v| v["flow_steps"].as_u64().unwrap())
        .collect();
    flow_steps.sort_unstable();
    flow_steps.dedup();
    assert!(flow_steps.contains(&1) && flow_steps.len() >= 2, "{report}");
    // burn-flex computes in f16 and bf16 too: both are measured, and every variant
    // listed computes in one of the precisions measured.
    assert_eq!(
        report["precisions"],
        serde_json::json!(["f32", "f16", "bf16"]),
        "{report}"
    );
    assert!(
        variants.iter().all(|v| report["precisions"]
            .as_array()
            .unwrap()
            .contains(&v["precision"])),
        "{report}"
    );
    // burn-ndarray has neither: only f32 is measured there.
    let output = imago(&[
        "--device",
        "cpu:ndarray",
        "accelerate",
        "--ckpt",
        &bc,
        "--max-episodes",
        "4",
        "--report",
        &path(&accelerated),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    // Four episodes certify nothing: the reference is kept, and said to be.
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("precisions measured on this device: f32\n")
            && stdout.contains("chosen: the reference (no faster variant"),
        "{stdout}"
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&accelerated).unwrap()).unwrap();
    assert_eq!(report["precisions"], serde_json::json!(["f32"]), "{report}");
    assert!(
        report["variants"]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v["precision"] == "f32"),
        "{report}"
    );

    let config = dir.path().join("finetune.toml");
    std::fs::write(
        &config,
        "episodes_per_round = 4\ngroup_size = 2\npolicy_steps = 3\nbatch_size = 4\n\
         world_model_steps = 2\ncritic_steps = 2\ncritic_batch = 8\ninitial_world_model_steps = 2\n\
         [rollout]\nexploration = 1.0\ntakeover = { window = 5, min_progress = 0.02 }\n\
         coaching = { probability = 0.2, ticks = 3 }\n",
    )
    .unwrap();
    let mut episodes_before = 12;
    for (method, init) in [
        ("awr-returns", &bc),
        ("awr-imagination", &bc),
        ("habc", &bc),
        ("advantage-flow", &flow),
        ("dagger", &bc),
        ("ppo-returns", &bc),
    ] {
        let out = path(&dir.path().join(method));
        let report = dir.path().join(format!("{method}.json"));
        let stdout = train(
            "finetune",
            &out,
            &[
                "--init",
                init,
                "--world-model",
                &wm,
                "--method",
                method,
                "--rounds",
                "1",
                "--config",
                &path(&config),
                "--report",
                &path(&report),
            ],
        );
        assert!(
            stdout.contains("checkpoint version 2"),
            "{method}: {stdout}"
        );
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        assert_eq!(json["episodes_before"], episodes_before, "{method}");
        let round = &json["rounds"][0];
        assert_eq!(round["episodes"], 4, "{method}");
        assert_eq!(round["policy_version"], 1, "{method}");
        assert!(round["update"]["last_loss"].as_f64().unwrap().is_finite());
        let ess = round["update"]["importance_ess_fraction"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&ess), "{method}: {ess}");
        // The coach (and the takeover) intervened; DAgger imitates exactly those
        // commands and the demonstrations', and weighs none by an advantage.
        let interventions = round["interventions"].as_u64().unwrap();
        assert!(interventions > 0, "{method}: {round}");
        if method == "dagger" {
            let advantages = &round["advantages"];
            assert_eq!(advantages["weighted"], 0, "{round}");
            // At least one command of each of the 12 demonstrations.
            assert!(
                advantages["unweighted"].as_u64().unwrap() >= 12 + interventions,
                "{round}"
            );
        }
        // PPO weighs the round's own samples by their advantage and imitates the rest:
        // the demonstrations and the interventions.
        if method == "ppo-returns" {
            let advantages = &round["advantages"];
            assert!(advantages["weighted"].as_u64().unwrap() > 0, "{round}");
            assert!(
                advantages["unweighted"].as_u64().unwrap() >= 12 + interventions,
                "{round}"
            );
            // The default baseline, the held-out state value: its share of the returns'
            // variance is at most all of it.
            let explained = advantages["baseline_explained"].as_f64().unwrap();
            assert!(explained.is_finite() && explained <= 1.0, "{round}");
        }
        // The collected episodes were appended to the replay.
        episodes_before += 4;
    }

    // --successful-only fine-tunes from the replay's successful episodes (it says how
    // many) and still learns from every rollout it collects.
    let mixed = path(&dir.path().join("mixed"));
    let output = imago(&[
        "collect",
        "--episodes",
        "8",
        "--mistake-rate",
        "0.5",
        "--out",
        &mixed,
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let (out, report) = (dir.path().join("successful"), dir.path().join("s.json"));
    let output = imago(&[
        "--device",
        "cpu",
        "train",
        "--what",
        "finetune",
        "--replay",
        &mixed,
        "--out",
        &path(&out),
        "--init",
        &bc,
        "--world-model",
        &wm,
        "--method",
        "ppo-returns",
        "--rounds",
        "1",
        "--config",
        &path(&config),
        "--report",
        &path(&report),
        "--successful-only",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let kept: u64 = stderr(&output)
        .split("using the ")
        .nth(1)
        .and_then(|rest| {
            rest.split_once(" episodes of 8 that ended in success (--successful-only)")
        })
        .and_then(|(kept, _)| kept.parse().ok())
        .unwrap_or_else(|| panic!("{}", stderr(&output)));
    assert!((1..8).contains(&kept), "{}", stderr(&output));
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(json["episodes_before"], kept, "{json}");
    assert_eq!(json["rounds"][0]["episodes"], 4, "{json}");

    let report = dir.path().join("paired.json");
    let output = imago(&[
        "--device",
        "cpu",
        "eval",
        "--ckpt",
        &path(&dir.path().join("awr-imagination")),
        "--paired-with",
        &bc,
        "--episodes",
        "5",
        "--report",
        &path(&report),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let paired = &json["paired"];
    let total: u64 = ["both", "only_baseline", "only_candidate", "neither"]
        .iter()
        .map(|k| paired[k].as_u64().unwrap())
        .sum();
    assert_eq!(total, 5);
    let [lo, hi] = [0, 1].map(|i| json["difference_interval"][i].as_f64().unwrap());
    assert!(lo <= json["difference"].as_f64().unwrap() && hi >= lo);
    // reacher2d is scored by success alone.
    assert!(json.get("coverage_difference").is_none(), "{json}");

    // Without --world-model, one is trained on the replay first.
    let output = imago(&[
        "--device",
        "cpu",
        "train",
        "--what",
        "finetune",
        "--replay",
        &replay,
        "--out",
        &path(&dir.path().join("own-world-model")),
        "--init",
        &bc,
        "--rounds",
        "1",
        "--config",
        &path(&config),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("training a salt world model on the replay first (2 steps)"),
        "{}",
        stderr(&output)
    );
    assert_one_line_error(
        &[
            "--device", "cpu", "train", "--what", "finetune", "--replay", &replay, "--out", &bc,
        ],
        "--init",
    );
    // Fine-tuning `bc` into `out` with `extra` flags fails in one line naming `needle`
    // (and writes nothing at `out`).
    let refused = path(&dir.path().join("refused"));
    let finetune_refused = |out: &str, extra: &[&str], needle: &str| {
        let mut args = vec![
            "--device", "cpu", "train", "--what", "finetune", "--replay", &replay, "--out", out,
            "--init", &bc,
        ];
        args.extend(extra);
        assert_one_line_error(&args, needle);
    };
    let config_path = path(&config);
    std::fs::write(&config, "betta = 2.0\n").unwrap();
    finetune_refused(
        &refused,
        &["--world-model", &wm, "--config", &config_path],
        "betta",
    );
    // Rollouts asked to execute more of a chunk than the policy plans: one line,
    // before any world model trains (none is given here) or rollout runs.
    std::fs::write(&config, "[rollout]\nexecuted_per_plan = 5\n").unwrap();
    let whole = path(&dir.path().join("whole-chunks"));
    finetune_refused(
        &whole,
        &["--config", &config_path],
        "chunks hold 4: execute at most 4",
    );
    assert!(!std::path::Path::new(&whole).exists());

    // Credit per tick: every transition weighted by its own return to go (the update
    // returning its weights' average); a credit misspelt is one line listing the two
    // there are.
    std::fs::write(
        &config,
        "episodes_per_round = 4\npolicy_steps = 3\nbatch_size = 4\n\
         method = \"awr-returns\"\nweight_average = {}\n[awr_returns]\ncredit = \"return-to-go\"\n",
    )
    .unwrap();
    let per_tick = dir.path().join("per-tick.json");
    let stdout = train(
        "finetune",
        &path(&dir.path().join("per-tick")),
        &[
            "--init",
            &bc,
            "--world-model",
            &wm,
            "--rounds",
            "1",
            "--config",
            &config_path,
            "--report",
            &path(&per_tick),
        ],
    );
    assert!(stdout.contains("awr-returns"), "{stdout}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&per_tick).unwrap()).unwrap();
    let advantages = &json["rounds"][0]["advantages"];
    assert!(advantages["weighted"].as_u64().unwrap() > 0, "{advantages}");
    assert_eq!(advantages["unweighted"], 0, "{advantages}");
    std::fs::write(
        &config,
        "method = \"awr-returns\"\n[awr_returns]\ncredit = \"per-tick\"\n",
    )
    .unwrap();
    finetune_refused(
        &refused,
        &["--world-model", &wm, "--config", &config_path],
        "return-to-go",
    );
    // PPO needs sampled chunks (exploration above 0) and a Gaussian head's densities.
    std::fs::write(
        &config,
        "method = \"ppo-returns\"\n[rollout]\nexploration = 0.0\n",
    )
    .unwrap();
    finetune_refused(
        &refused,
        &["--world-model", &wm, "--config", &config_path],
        "rollout.exploration",
    );
    assert!(!std::path::Path::new(&refused).exists());
    let flow_ppo = path(&dir.path().join("flow-ppo"));
    std::fs::write(&config, "episodes_per_round = 4\npolicy_steps = 3\n").unwrap();
    let args = [
        "--device",
        "cpu",
        "train",
        "--what",
        "finetune",
        "--replay",
        &replay,
        "--out",
        &flow_ppo,
        "--init",
        &flow,
        "--world-model",
        &wm,
        "--method",
        "ppo-returns",
        "--rounds",
        "1",
        "--config",
        &config_path,
    ];
    assert_one_line_error(&args, "flow head");
    assert!(!std::path::Path::new(&flow_ppo).exists());
}

#[test]
fn inspect_and_wm_eval_write_recordings_with_imagined_rollouts() {
    use imago_runtime::telemetry::{paths, read_recording};
    let dir = tempfile::tempdir().unwrap();
    let path = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let (replay, ckpt) = (dir.path().join("replay"), dir.path().join("wm"));
    let output = imago(&["collect", "--episodes", "10", "--out", &path(&replay)]);
    assert!(output.status.success(), "{}", stderr(&output));
    let output = train_tiny_world_model(&replay, &ckpt, "salt");
    assert!(output.status.success(), "{}", stderr(&output));

    let inspected = dir.path().join("inspect.rrd");
    let output = imago(&[
        "--device",
        "cpu",
        "inspect",
        "--replay",
        &path(&replay),
        "--rrd",
        &path(&inspected),
        "--ckpt",
        &path(&ckpt),
        "--horizon",
        "4",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("logged 10 of 10 episodes"), "{stdout}");
    let summary = read_recording(&inspected).unwrap();
    let (error, bound) = (
        format!("{}/h4", paths::ROLLOUT_ERROR),
        format!("{}/h4", paths::INTERVAL),
    );
    let expected = [
        paths::ARM,
        paths::TARGETS,
        paths::CAMERA,
        paths::IMAGINED,
        paths::IMAGINED_REAL,
        paths::EVAL_HORIZON_ERROR,
        paths::PROBE_RMSE,
        &error,
        &bound,
    ];
    assert_eq!(summary.missing(&expected, &[]), Vec::<&str>::new());
    // Every episode's outcome: the ten of the replay, then the held-out ones drawn
    // again with their imagined rollouts.
    assert!(
        summary.rows[paths::EPISODE_SUCCESS] >= 10,
        "{:?}",
        summary.rows
    );
    assert!(summary.has_blueprint);

    let evaluated = dir.path().join("wm-eval.rrd");
    let output = imago(&[
        "--device",
        "cpu",
        "wm-eval",
        "--ckpt",
        &path(&ckpt),
        "--replay",
        &path(&replay),
        "--horizon",
        "4",
        "--rerun",
        &path(&evaluated),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(read_recording(&evaluated).unwrap().has(paths::IMAGINED));

    // Without a replay, or with two targets at once: one clear line, no recording.
    assert_one_line_error(
        &[
            "inspect",
            "--replay",
            &path(&dir.path().join("none")),
            "--rrd",
            &path(&inspected),
        ],
        "none",
    );
    // `--out` names the recording as `collect` and `train` name theirs; the replay's
    // own directory given there is refused, and the replay still reads whole.
    assert_one_line_error(
        &[
            "inspect",
            "--replay",
            &path(&replay),
            "--out",
            &path(&replay),
        ],
        "is a directory",
    );
    let output = imago(&["replay", "check", &path(&replay)]);
    assert!(output.status.success(), "{}", stderr(&output));
    let output = imago(&[
        "collect",
        "--episodes",
        "1",
        "--out",
        &path(&replay),
        "--rerun",
        "a.rrd",
        "--rerun-spawn",
    ]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("cannot be used with"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn an_absent_live_viewer_is_a_warning_and_the_run_is_kept() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let replay = dir.path().join("replay");
    let url = format!("rerun+http://127.0.0.1:{port}/proxy");
    let output = imago(&[
        "collect",
        "--episodes",
        "2",
        "--out",
        replay.to_str().unwrap(),
        "--rerun-connect",
        &url,
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("warning: the rerun viewer did not receive the recording"),
        "{}",
        stderr(&output)
    );
    let episodes = imago_runtime::store::replay::read_replay(&replay)
        .unwrap()
        .episodes;
    assert_eq!(episodes.len(), 2);
}

/// Every file under `dir`, with its contents, for "nothing changed" checks.
fn snapshot(dir: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        for entry in std::fs::read_dir(&path).unwrap() {
            let entry = entry.unwrap().path();
            if entry.is_dir() {
                stack.push(entry);
            } else if entry.file_name().unwrap() != "imago.lock" {
                let name = entry.strip_prefix(dir).unwrap().display().to_string();
                out.insert(name, std::fs::read(&entry).unwrap());
            }
        }
    }
    out
}

#[test]
fn outputs_never_destroy_inputs_or_other_things() {
    let dir = tempfile::tempdir().unwrap();
    let path = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let replay = dir.path().join("replay");
    let output = imago(&["collect", "--episodes", "3", "--out", &path(&replay)]);
    assert!(output.status.success(), "{}", stderr(&output));
    let policy = dir.path().join("policy");
    let world_model = dir.path().join("wm");
    for (what, out) in [("bc", &policy), ("worldmodel", &world_model)] {
        let output = imago(&[
            "--device",
            "cpu",
            "train",
            "--what",
            what,
            "--replay",
            &path(&replay),
            "--out",
            &path(out),
            "--steps",
            "2",
            "--batch-size",
            "4",
        ]);
        assert!(output.status.success(), "{}", stderr(&output));
    }
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "field notes").unwrap();
    let before = snapshot(dir.path());
    let train_into = |out: &std::path::Path, extra: &[&str]| {
        let mut args = vec![
            "--device".to_string(),
            "cpu".into(),
            "train".into(),
            "--what".into(),
            "bc".into(),
            "--replay".into(),
            path(&replay),
            "--out".into(),
            path(out),
            "--steps".into(),
            "2".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    for (out, extra, must_mention) in [
        (replay.clone(), &[][..], "is also --replay"),
        (replay.clone(), &["--force"][..], "is also --replay"),
        (
            replay.join("segments"),
            &["--force"][..],
            "lies inside --replay",
        ),
        (
            dir.path().to_path_buf(),
            &["--force"][..],
            "contains --replay",
        ),
        (notes.clone(), &[][..], "holds a file"),
        (
            world_model.clone(),
            &[][..],
            "holds a `world-model` checkpoint",
        ),
        (
            policy.clone(),
            &["--init", &path(&policy)][..],
            "pass --force",
        ),
        (
            policy.clone(),
            &[][..],
            "already holds a `vla-policy` checkpoint",
        ),
    ] {
        let args = train_into(&out, extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_one_line_error(&args, must_mention);
    }
    assert_one_line_error(
        &["collect", "--episodes", "1", "--out", &path(&policy)],
        "holds a `vla-policy` checkpoint",
    );
    assert_one_line_error(
        &[
            "--device",
            "cpu",
            "eval",
            "--ckpt",
            &path(&policy),
            "--episodes",
            "1",
            "--report",
            &path(&replay.join("segments/report.json")),
        ],
        "lies inside a replay",
    );
    assert_eq!(
        snapshot(dir.path()),
        before,
        "a refused command changed files"
    );

    // --force replaces a plain file, whole, and leaves nothing hidden beside it.
    let args = train_into(&notes, &["--force"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = imago(&args);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(notes.join("meta.json").exists());
    let hidden: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(hidden.is_empty(), "{hidden:?}");
    // And updates --init in place with --force.
    let args = train_into(&policy, &["--init", &path(&policy), "--force"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = imago(&args);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains("checkpoint version 2"));
    // And replaces a checkpoint it does not continue only with --force, saying so.
    let args = train_into(&policy, &["--force"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = imago(&args);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stderr(&output).contains("replaced a `vla-policy` checkpoint (version 2)"));
}

#[test]
fn damaged_replays_are_checked_repaired_and_cut_not_stitched() {
    let dir = tempfile::tempdir().unwrap();
    let path = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let replay = dir.path().join("replay");
    let output = imago(&["collect", "--episodes", "8", "--out", &path(&replay)]);
    assert!(output.status.success(), "{}", stderr(&output));
    let output = imago(&["replay", "check", &path(&replay)]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains("8 whole episodes, 0 damaged"));

    // A flipped bit in the middle of the only segment.
    let segment = replay.join("segments/000000.seg");
    let mut bytes = std::fs::read(&segment).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x20;
    std::fs::write(&segment, &bytes).unwrap();
    let output = imago(&["replay", "check", &path(&replay)]);
    assert!(!output.status.success());
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(
        table.contains("7 whole episodes, 1 damaged") && table.contains("damage at"),
        "{table}"
    );
    assert!(
        stderr(&output).contains("replay repair"),
        "{}",
        stderr(&output)
    );

    let ckpt = path(&dir.path().join("ckpt"));
    let train = |strict: bool| {
        let mut args = vec![
            "--device",
            "cpu",
            "train",
            "--replay",
            replay.to_str().unwrap(),
            "--out",
            &ckpt,
            "--steps",
            "2",
            "--batch-size",
            "4",
        ];
        if strict {
            args.push("--strict");
        }
        imago(&args)
    };
    assert_one_line_error(
        &[
            "--device",
            "cpu",
            "train",
            "--replay",
            &path(&replay),
            "--out",
            &ckpt,
            "--steps",
            "2",
            "--strict",
        ],
        "--strict",
    );
    let output = train(false);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("1 episodes left out"),
        "{}",
        stderr(&output)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("trained on 7 episodes"));
    assert!(train(true).status.code() != Some(0));

    let repaired = dir.path().join("repaired");
    let output = imago(&[
        "replay",
        "repair",
        &path(&replay),
        "--out",
        &path(&repaired),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains("copied 7 whole episodes"));
    let output = imago(&["replay", "check", &path(&repaired)]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_one_line_error(
        &["replay", "repair", &path(&replay), "--out", &path(&replay)],
        "is also the replay",
    );
}

#[test]
fn out_of_range_flags_and_config_values_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let replay = dir.path().join("replay");
    let replay = replay.to_str().unwrap();
    for (args, must_mention) in [
        (
            vec![
                "--device",
                "cpu",
                "eval",
                "--ckpt",
                "x",
                "--episodes",
                "100000000000",
            ],
            "--episodes = 100000000000",
        ),
        (
            vec!["collect", "--episodes", "1", "--out", replay, "--noise=-1"],
            "--noise = -1.0",
        ),
        (
            vec![
                "--device",
                "cpu",
                "train",
                "--replay",
                replay,
                "--out",
                "c",
                "--batch-size",
                "1000000000000",
            ],
            "--batch-size",
        ),
        (
            vec![
                "--device",
                "cpu",
                "wm-eval",
                "--ckpt",
                "c",
                "--replay",
                replay,
                "--horizon",
                "100000",
            ],
            "--horizon = 100000",
        ),
    ] {
        assert_one_line_error(&args, must_mention);
    }
    let config = dir.path().join("robot.toml");
    for (text, must_mention) in [
        (
            "[actor.robot]\nimage_size = 100000\n",
            "actor.robot.image_size = 100000",
        ),
        (
            "[actor.robot]\nimage_size = 7\n",
            "actor.robot.image_size = 7",
        ),
        (
            "[actor.robot]\ncontrol_hz = 1e-30\n",
            "actor.robot.control_hz = 1e-30",
        ),
        (
            "[actor.robot]\nmax_speed = nan\n",
            "actor.robot.max_speed = NaN",
        ),
        (
            "[actor.robot]\nlink_lengths = [0.0, 0.0]\n",
            "actor.robot.link_lengths[0]",
        ),
        ("[actor.robot.safety]\nmax_rate = -1.0\n", "max_rate"),
        ("status_every_seconds = 1e20\n", "status_every_seconds"),
        (
            "[learner.finetune]\nbatch_size = 1000000000000\n",
            "learner.finetune.batch_size",
        ),
        (
            "[learner.finetune]\ncritic_batch = 1000000000\n",
            "critic_batch",
        ),
        (
            "[learner.finetune.imagination]\nhorizon = 100000\n",
            "imagination.horizon",
        ),
        ("[telemetry]\nqueue = 1000000000000\n", "telemetry.queue"),
        (
            "[replay]\nretention_bytes = 1000\n",
            "replay.retention_bytes",
        ),
        ("[learner.finetune]\nbatch_size = -3\n", "batch_size = -3"),
    ] {
        std::fs::write(
            &config,
            format!("robot = \"reacher2d\"\ndevice = \"cpu\"\n{text}"),
        )
        .unwrap();
        assert_one_line_error(
            &[
                "daemon",
                "--config",
                config.to_str().unwrap(),
                "--duration",
                "1",
            ],
            must_mention,
        );
    }
    std::fs::write(&config, "robot = \"reacher2d\"\ndevice = \"cpu\"\n").unwrap();
    assert_one_line_error(
        &[
            "daemon",
            "--config",
            config.to_str().unwrap(),
            "--duration",
            "1e19",
        ],
        "--duration = 1e19",
    );
}

/// A copy of the replay `from` at `to` as an older build wrote it: without the robot's
/// settings in its manifest and, unless `keep_spec`, without the spec.
fn as_older_replay(from: &std::path::Path, to: &std::path::Path, keep_spec: bool) {
    std::fs::create_dir_all(to.join("segments")).unwrap();
    for entry in std::fs::read_dir(from.join("segments")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join("segments").join(entry.file_name())).unwrap();
    }
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(from.join("manifest.json")).unwrap()).unwrap();
    let fields = manifest.as_object_mut().unwrap();
    fields
        .remove("robot")
        .expect("the manifest records the robot's settings");
    if !keep_spec {
        fields.insert("spec".into(), serde_json::Value::Null);
    }
    std::fs::write(
        to.join("manifest.json"),
        serde_json::to_vec_pretty(&manifest).unwrap(),
    )
    .unwrap();
}

#[test]
fn the_robot_spec_travels_with_replays_and_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let (replay, ckpt, small) = (path("replay"), path("ckpt"), path("small.toml"));
    std::fs::write(&small, "image_size = 32\nmax_steps = 8\n").unwrap();
    let run = imago_ok;
    // The robot is named once, when data is made; offline commands read it back.
    run(&[
        "collect",
        "--robot",
        "reacher2d",
        "--episodes",
        "20",
        "--out",
        &replay,
    ]);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("replay/manifest.json")).unwrap())
            .unwrap();
    assert_eq!(manifest["spec"]["camera"]["width"], 48);
    assert_eq!(manifest["robot"]["reacher2d"]["image_size"], 48);
    run(&[
        "--device", "cpu", "train", "--what", "bc", "--replay", &replay, "--out", &ckpt, "--steps",
        "50",
    ]);
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("ckpt/meta.json")).unwrap()).unwrap();
    assert_eq!(meta["spec"]["camera"]["width"], 48);

    // Another camera: a replay and a checkpoint of their own, shapes from the spec.
    let (replay32, ckpt32) = (path("replay32"), path("ckpt32"));
    let collect32 = |out: &str| {
        imago(&[
            "collect",
            "--robot-config",
            &small,
            "--episodes",
            "4",
            "--out",
            out,
        ])
    };
    assert!(collect32(&replay32).status.success());
    run(&[
        "--device",
        "cpu",
        "train",
        "--replay",
        &replay32,
        "--out",
        &ckpt32,
        "--steps",
        "2",
        "--batch-size",
        "4",
    ]);
    run(&[
        "--device",
        "cpu",
        "eval",
        "--ckpt",
        &ckpt32,
        "--robot-config",
        &small,
        "--episodes",
        "2",
    ]);

    // Every crossing of specs is one error naming both.
    let both = "camera: 48x48 vs 32x32";
    let output = collect32(&replay);
    assert!(!output.status.success());
    let error = stderr(&output);
    assert!(
        error.contains("reacher2d (camera 48x48, proprioception 8, action 2)")
            && error.contains("reacher2d (camera 32x32, proprioception 8, action 2)")
            && error.contains(both),
        "{error}"
    );
    assert_one_line_error(
        &[
            "--device",
            "cpu",
            "train",
            "--replay",
            &replay32,
            "--init",
            &ckpt,
            "--out",
            &path("crossed"),
            "--steps",
            "2",
        ],
        both,
    );
    assert_one_line_error(
        &[
            "--device",
            "cpu",
            "eval",
            "--ckpt",
            &ckpt,
            "--robot-config",
            &small,
            "--episodes",
            "2",
        ],
        both,
    );
    assert_one_line_error(
        &[
            "--device",
            "cpu",
            "eval",
            "--ckpt",
            &ckpt32,
            "--episodes",
            "2",
        ],
        "camera: 32x32 vs 48x48",
    );
    let world_model = dir.path().join("wm");
    let output = train_tiny_world_model(dir.path().join("replay").as_path(), &world_model, "salt");
    assert!(output.status.success(), "{}", stderr(&output));
    assert_one_line_error(
        &[
            "--device",
            "cpu",
            "wm-eval",
            "--ckpt",
            world_model.to_str().unwrap(),
            "--replay",
            &replay32,
            "--all-episodes",
        ],
        both,
    );

    // A camera the pixel stem cannot read, a typo and an unknown robot are config
    // errors naming them.
    let odd = path("odd.toml");
    std::fs::write(&odd, "image_size = 36\n").unwrap();
    assert_one_line_error(
        &["collect", "--robot-config", &odd, "--out", &path("odd")],
        "image_size",
    );
    std::fs::write(&odd, "image_sise = 32\n").unwrap();
    assert_one_line_error(
        &["collect", "--robot-config", &odd, "--out", &path("odd")],
        "image_sise",
    );
    let output = imago(&["collect", "--robot", "reacher3d", "--out", &path("odd")]);
    assert!(!output.status.success());
    assert!(stderr(&output).contains("reacher2d"), "{}", stderr(&output));
    assert!(!dir.path().join("odd").exists());

    // Replays written before manifests kept the robot's settings, or its spec, still
    // train (the spec-less one only when its episodes fit the default reacher2d).
    let older = |from: &str, name: &str, keep_spec: bool| {
        as_older_replay(&dir.path().join(from), &dir.path().join(name), keep_spec);
        let (replay, out) = (path(name), path(&format!("{name}-ckpt")));
        imago(&[
            "--device",
            "cpu",
            "train",
            "--replay",
            &replay,
            "--out",
            &out,
            "--steps",
            "2",
            "--batch-size",
            "4",
        ])
    };
    for (from, name, keep_spec) in [
        ("replay32", "no-settings", true),
        ("replay", "no-spec", false),
    ] {
        let output = older(from, name, keep_spec);
        assert!(output.status.success(), "{name}: {}", stderr(&output));
    }
    let output = older("replay32", "no-spec32", false);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("do not fit the default reacher2d"),
        "{}",
        stderr(&output)
    );
}

/// A clone of pusht's pose setting that reads the pusher alone and learns to find the
/// block in the frame (`--keypoint-targets`) is retargeted to the vision setting and
/// acts there; a clone that reads the block cannot be, nor one already for it.
fn retarget_a_clone_that_learned_to_see_the_block(
    dir: &std::path::Path,
    replay: &str,
    pose_clone: &str,
) {
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let (seeing, retargeted, vision) = (path("seeing"), path("seeing-vision"), path("vision.toml"));
    std::fs::write(
        &vision,
        "image_size = 32\nmax_steps = 30\nobservation = \"vision\"\n",
    )
    .unwrap();
    let run = imago_ok;
    run(&[
        "--device",
        "cpu",
        "train",
        "--replay",
        replay,
        "--out",
        &seeing,
        "--steps",
        "2",
        "--batch-size",
        "4",
        "--read-state",
        "agent_x,agent_y",
        "--keypoint-targets",
        "block_x,block_y,block_cos,block_sin",
    ]);
    let retarget = |ckpt: &str, settings: &str, out: &str| -> Vec<String> {
        [
            "--device",
            "cpu",
            "retarget",
            "--ckpt",
            ckpt,
            "--robot",
            "pusht",
            "--robot-config",
            settings,
            "--out",
            out,
        ]
        .map(String::from)
        .to_vec()
    };
    let args = retarget(&seeing, &vision, &retargeted);
    let said = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        said.contains("reads agent_x, agent_y (its keypoint readout left out"),
        "{said}"
    );
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("seeing-vision/meta.json")).unwrap())
            .unwrap();
    assert_eq!(
        meta["spec"]["proprio_names"],
        serde_json::json!(["agent_x", "agent_y"])
    );
    assert_eq!(meta["config"]["proprio_dim"], 2);
    assert_eq!(meta["config"]["keypoint_targets"], serde_json::json!([]));
    assert_eq!(meta["parent"], seeing.as_str());
    let table = run(&[
        "--device",
        "cpu",
        "eval",
        "--ckpt",
        &retargeted,
        "--episodes",
        "2",
        "--robot",
        "pusht",
        "--robot-config",
        &vision,
    ]);
    assert!(table.contains("max coverage"), "{table}");
    let settings = path("pusht.toml");
    for (args, must_mention) in [
        (
            retarget(pose_clone, &vision, &path("refused")),
            "cannot act on pusht (camera 32x32, proprioception 2, action 2): the policy reads `block_x`, which is not among agent_x, agent_y",
        ),
        (
            retarget(&seeing, &settings, &path("refused")),
            "is already a policy for pusht",
        ),
        (retarget(&retargeted, &settings, &seeing), "--out"),
    ] {
        assert_one_line_error(
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
            must_mention,
        );
    }
    assert!(
        !dir.join("refused").exists(),
        "a refused retargeting writes nothing"
    );
}

#[test]
fn pusht_collects_trains_and_evaluates_with_coverage() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let (replay, ckpt, settings, report) = (
        path("replay"),
        path("ckpt"),
        path("pusht.toml"),
        path("r.json"),
    );
    std::fs::write(&settings, "image_size = 32\nmax_steps = 30\n").unwrap();
    let run = imago_ok;
    let robot = ["--robot", "pusht", "--robot-config", &settings];
    let collect: Vec<&str> = ["collect", "--episodes", "4", "--out", &replay]
        .into_iter()
        .chain(robot)
        .collect();
    let said = run(&collect);
    assert!(said.contains("4 episodes of pusht"), "{said}");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("replay/manifest.json")).unwrap())
            .unwrap();
    assert_eq!(manifest["spec"]["name"], "pusht");
    assert_eq!(manifest["spec"]["proprio_names"][4], "block_angle");
    assert_eq!(manifest["robot"]["pusht"]["image_size"], 32);
    // The action is the pusher's target: measured from agent_x and agent_y.
    assert_eq!(manifest["spec"]["action_origin"], serde_json::json!([0, 1]));
    run(&[
        "--device",
        "cpu",
        "train",
        "--replay",
        &replay,
        "--out",
        &ckpt,
        "--steps",
        "2",
        "--batch-size",
        "4",
    ]);
    let eval: Vec<&str> = [
        "--device",
        "cpu",
        "eval",
        "--ckpt",
        &ckpt,
        "--episodes",
        "3",
        "--report",
        &report,
    ]
    .into_iter()
    .chain(robot)
    .collect();
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("ckpt/meta.json")).unwrap()).unwrap();
    assert_eq!(meta["config"]["action_origin"], serde_json::json!([0, 1]));
    retarget_a_clone_that_learned_to_see_the_block(dir.path(), &replay, &ckpt);
    let table = run(&eval);
    assert!(table.contains("max coverage"), "{table}");
    let row: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let coverage = row["mean_max_coverage"]
        .as_f64()
        .expect("coverage reported");
    assert!((0.0..=1.0).contains(&coverage), "{row}");
    let [lo, hi] = [0, 1].map(|i| row["coverage_interval"][i].as_f64().unwrap());
    assert!(lo <= coverage && coverage <= hi, "{row}");
    // Paired with itself: the same seeds give the same coverages, a difference of 0.
    let paired: Vec<&str> = eval
        .iter()
        .copied()
        .chain(["--paired-with", ckpt.as_str()])
        .collect();
    let table = run(&paired);
    assert!(
        table.contains("mean max coverage, paired: +0.000"),
        "{table}"
    );
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(
        json["coverage_difference"],
        serde_json::json!({"difference": 0.0, "interval": [0.0, 0.0]}),
        "{json}"
    );
    // Receding horizon: the checkpoint executing its whole chunk of 4 per plan, paired
    // with itself re-planning every tick; more than its chunk holds is one error.
    let receding: Vec<&str> = paired
        .iter()
        .copied()
        .chain(["--execute", "4", "--baseline-execute", "1"])
        .collect();
    let table = run(&receding);
    assert!(table.contains("mean max coverage, paired"), "{table}");
    // Sampled actions, paired with itself at the same noise: each episode draws the
    // same noise from its seed, a difference of 0; and against its own mean.
    let sampled: Vec<&str> = paired
        .iter()
        .copied()
        .chain(["--sampling-noise", "1"])
        .collect();
    let table = run(&sampled);
    assert!(
        table.contains("mean max coverage, paired: +0.000"),
        "{table}"
    );
    let against_mean: Vec<&str> = sampled
        .iter()
        .copied()
        .chain(["--baseline-sampling-noise", "0"])
        .collect();
    assert!(run(&against_mean).contains("mean max coverage, paired"));
    for (flag, value, must_mention) in [
        ("--execute", "5", "chunks hold 4: execute at most 4"),
        ("--execute", "0", "--execute = 0"),
        ("--baseline-execute", "65", "--baseline-execute = 65"),
        ("--sampling-noise", "11", "--sampling-noise = 11.0"),
        (
            "--baseline-sampling-noise",
            "NaN",
            "--baseline-sampling-noise = NaN",
        ),
    ] {
        let args: Vec<&str> = paired.iter().copied().chain([flag, value]).collect();
        assert_one_line_error(&args, must_mention);
    }
    // Planning in a world model (trained for two steps, with a state decoder): the
    // policy's chunks proposed, candidates imagined, pusht's coverage of the decoded
    // state scored; one seed, one result; the paired baseline acts without planning.
    let (wm, wm_settings, planner) = (path("wm"), path("wm.toml"), path("planner.toml"));
    std::fs::write(
        &wm_settings,
        "batch_size = 4\nhorizon = 3\n[losses]\nstate = 1.0\n",
    )
    .unwrap();
    // Two steps of `imago train --what worldmodel` on the replay.
    let train_world_model = |out: &str, settings: &str, family: &str| -> Vec<String> {
        [
            "--device",
            "cpu",
            "train",
            "--what",
            "worldmodel",
            "--replay",
            &replay,
            "--out",
            out,
            "--steps",
            "2",
            "--family",
            family,
            "--config",
            settings,
        ]
        .map(str::to_string)
        .to_vec()
    };
    fn as_args(args: &[String]) -> Vec<&str> {
        args.iter().map(String::as_str).collect()
    }
    run(&as_args(&train_world_model(&wm, &wm_settings, "salt")));
    std::fs::write(&planner, "candidates = 6\niterations = 2\nelites = 2\n").unwrap();
    let plan_flags = |model: &str| -> Vec<String> {
        [
            "--execute",
            "4",
            "--plan-with",
            model,
            "--planner",
            &planner,
        ]
        .map(str::to_string)
        .to_vec()
    };
    // The sampled evaluation planning in `model` (a checkpoint, or `simulator`).
    let planned_in = |model: &str| -> Vec<String> {
        let sampled = sampled.iter().map(|s| s.to_string());
        sampled.chain(plan_flags(model)).collect()
    };
    // Plans in `model`, and stderr says where the candidates' rewards come from.
    let plans = |model: &str, says: &str| {
        let output = imago(&as_args(&planned_in(model)));
        assert!(output.status.success(), "{}", stderr(&output));
        assert!(stderr(&output).contains(says), "{}", stderr(&output));
    };
    plans(
        &wm,
        "6 candidates x 2 iterations, rewards from the robot's reward of the decoded state",
    );
    let planned = planned_in(&wm);
    let first = std::fs::read(&report).unwrap();
    assert!(imago(&as_args(&planned)).status.success());
    assert_eq!(first, std::fs::read(&report).unwrap(), "planning is seeded");
    let json: serde_json::Value = serde_json::from_slice(&first).unwrap();
    assert!(json["coverage_difference"].is_object(), "{json}");
    assert!(json["candidate"].get("plan_check").is_none(), "{json}");
    // A world model whose latent holds the measured state, its change gated: asked of
    // a family that cannot gate it, one error naming the family and nothing written;
    // with the residual MLP it reads the state out exactly and plans the same way.
    let (gated, gated_settings) = (path("gated"), path("gated.toml"));
    std::fs::write(
        &gated_settings,
        "batch_size = 4\nhorizon = 3\nstate_in_latent = true\n[losses]\nstate = 300.0\n",
    )
    .unwrap();
    assert_one_line_error(
        &as_args(&train_world_model(&gated, &gated_settings, "salt")),
        "must be residual-mlp",
    );
    assert!(!std::path::Path::new(&gated).exists());
    run(&as_args(&train_world_model(
        &gated,
        &gated_settings,
        "residual-mlp",
    )));
    let scored = run(&[
        "--device",
        "cpu",
        "wm-eval",
        "--ckpt",
        &gated,
        "--replay",
        &replay,
        "--horizon",
        "2",
        "--all-episodes",
    ]);
    assert!(
        scored.contains("block_x") && scored.contains("still dec."),
        "{scored}"
    );
    assert_eq!(scored.matches("floor 0.0000").count(), 7, "{scored}");
    // Its members' read-out states are ranked against the state's error.
    assert!(
        scored.contains(
            "state disagreement-error Spearman (the members' read-out states): across windows "
        ),
        "{scored}"
    );
    plans(
        &gated,
        "rewards from the robot's reward of the decoded state",
    );
    // Its plans checked in the simulator: every plan's candidates ranked both ways.
    let checked: Vec<String> = planned_in(&gated)
        .into_iter()
        .chain(["--check-plans".to_string()])
        .collect();
    let said = run(&as_args(&checked));
    assert!(
        said.contains("plans checked in the simulator: ")
            && said.contains("the model ranks their candidates as the simulator does"),
        "{said}"
    );
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let check = &json["candidate"]["plan_check"];
    assert!(check["plans"].as_u64().unwrap() > 0, "{json}");
    assert!(json["baseline"].get("plan_check").is_none(), "{json}");
    let mut nothing_to_check = planned_in("simulator");
    nothing_to_check.push("--check-plans".into());
    assert_one_line_error(&as_args(&nothing_to_check), "no model to check");
    // Planning in the simulator itself (copies of each episode's pusht): the same
    // planner, the candidates scored by the rewards they earn there.
    plans(
        "simulator",
        "planning in simulator: 6 candidates x 2 iterations, rewards from the simulated robot's own rewards",
    );
    // A robot in another process has no simulator to copy: refused before it is
    // contacted (no adapter runs here, so reaching it would wait and time out).
    let remote = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/gym-pusht-remote.toml"
    );
    assert_one_line_error(
        &[
            "--device",
            "cpu",
            "eval",
            "--remote",
            remote,
            "--ckpt",
            &ckpt,
            "--sampling-noise",
            "1",
            "--plan-with",
            "simulator",
        ],
        "--remote drives a robot in another process",
    );
    // Planning's mistakes: a policy checkpoint as the world model, a misspelt planner
    // key, a planner setting out of range, no sampling noise to draw candidates with.
    let error_of = |args: Vec<String>| {
        let output = imago(&as_args(&args));
        assert!(!output.status.success(), "{args:?}");
        stderr(&output)
    };
    let mut policy_as_model = planned.clone();
    let at = policy_as_model
        .iter()
        .position(|a| a == "--plan-with")
        .unwrap();
    policy_as_model[at + 1] = ckpt.clone();
    let error = error_of(policy_as_model);
    assert!(
        error.contains("world") && error.contains("policy"),
        "{error}"
    );
    std::fs::write(&planner, "candidate = 8\n").unwrap();
    let error = error_of(planned.clone());
    assert!(error.contains("candidate"), "{error}");
    std::fs::write(&planner, "elites = 0\n").unwrap();
    let error = error_of(planned.clone());
    assert!(error.contains("elites"), "{error}");
    std::fs::write(&planner, "").unwrap();
    let noiseless: Vec<String> = paired
        .iter()
        .chain(&["--sampling-noise", "0"])
        .map(|s| s.to_string())
        .chain(plan_flags(&wm))
        .collect();
    let error = error_of(noiseless);
    assert!(error.contains("sampling noise above 0"), "{error}");
    // The pusht policy on reacher2d: one error naming both specs.
    let output = imago(&[
        "--device",
        "cpu",
        "eval",
        "--ckpt",
        &ckpt,
        "--robot",
        "reacher2d",
        "--episodes",
        "1",
    ]);
    assert!(!output.status.success());
    let error = stderr(&output);
    assert!(
        error.contains("pusht (camera 32x32, proprioception 7, action 2)")
            && error.contains("reacher2d"),
        "{error}"
    );
}

#[test]
fn gate_settings_out_of_range_are_one_error_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("absent");
    let ckpt = ckpt.to_str().unwrap();
    let gate = |extra: &[&str]| {
        let mut args = vec!["gate", "--champion", ckpt, "--challenger", ckpt];
        args.extend(extra);
        let output = imago(&args);
        assert!(!output.status.success(), "{extra:?}");
        stderr(&output)
    };
    assert!(gate(&["--confidence", "0.3"]).contains("--confidence"));
    assert!(gate(&["--max-episodes", "0"]).contains("--max-episodes"));
    assert!(gate(&["--metric", "return"]).contains("not built"));
    assert!(gate(&[]).contains("does not exist"));
    let output = imago(&["accelerate", "--ckpt", ckpt, "--budget", "1.5"]);
    assert!(!output.status.success());
    assert!(stderr(&output).contains("--budget"), "{}", stderr(&output));
}

#[test]
fn train_refuses_flags_its_trainer_does_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let (replay, out) = (dir.path().join("replay"), dir.path().join("out"));
    for (what, flag, value, names) in [
        (
            "bc",
            "--horizon",
            "4",
            "--horizon applies to --what worldmodel, not --what bc",
        ),
        (
            "bc",
            "--report",
            "r.json",
            "--report applies to --what finetune, not --what bc",
        ),
        (
            "worldmodel",
            "--head",
            "flow",
            "--head applies to --what bc, not --what worldmodel",
        ),
        (
            "worldmodel",
            "--rounds",
            "2",
            "--rounds applies to --what finetune",
        ),
        (
            "finetune",
            "--family",
            "salt",
            "--family applies to --what worldmodel",
        ),
        (
            "finetune",
            "--chunk-len",
            "8",
            "--chunk-len applies to --what bc",
        ),
    ] {
        assert_one_line_error(
            &[
                "--device",
                "cpu",
                "train",
                "--what",
                what,
                "--replay",
                replay.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
                flag,
                value,
            ],
            names,
        );
        assert!(!out.exists() && !dir.path().join("r.json").exists());
    }
}
