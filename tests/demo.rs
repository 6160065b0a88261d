//! `imago demo --quick`: the whole pipeline, end to end, on the CPU.

mod common;

use common::{imago, stderr};

#[test]
fn quick_demo_trains_a_policy_that_follows_image_and_instruction() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    let run_dir = dir.path().join("run");
    let output = imago(&[
        "--device",
        "cpu",
        "demo",
        "--quick",
        "--report",
        report.to_str().unwrap(),
        "--run-dir",
        run_dir.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "demo failed: {}", stderr(&output));
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(table.contains("bc policy, wrong instruction"), "{table}");

    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    for key in [
        "device",
        "episodes",
        "bc_success_rate",
        "wrong_instruction_success_rate",
        "random_success_rate",
        "phases",
        "policy_latency_ms",
    ] {
        assert!(json.get(key).is_some(), "report lacks `{key}`: {json}");
    }
    for key in ["p50", "p99"] {
        assert!(json["policy_latency_ms"][key].as_f64().unwrap() > 0.0);
    }
    for phase in [
        "collect",
        "train_bc",
        "train_world_model",
        "eval_world_model",
        "evaluate",
    ] {
        assert!(
            json["phases"][phase].as_f64().unwrap() > 0.0,
            "phase {phase}"
        );
    }
    assert_eq!(json["device"], "cpu (ndarray)");

    // Paired seeds: the rows share episodes. "Well above" means the 95% intervals
    // do not overlap.
    let row = |name: &str| {
        json["controllers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no row {name}"))
    };
    let bc = row("bc policy");
    let bc_low = bc["interval"][0].as_f64().unwrap();
    for other in ["bc policy, wrong instruction", "random actions"] {
        let high = row(other)["interval"][1].as_f64().unwrap();
        assert!(
            bc_low > high,
            "bc {bc} is not well above {other} {}",
            row(other)
        );
    }
    assert!(run_dir.join("bc-policy").join("meta.json").exists());
    assert!(run_dir.join("world-model").join("meta.json").exists());

    // The world model, scored on held-out demonstrations: it beats copying the last
    // latent at the longest horizon, and its calibrated intervals cover about what
    // Gaussian ones would.
    assert!(table.contains("world model (salt)"), "{table}");
    let wm = &json["world_model"];
    let at = |key: &str, i: usize| wm[key][i].as_f64().unwrap();
    let h = wm["horizon"].as_u64().unwrap() as usize;
    assert!(
        at("horizon_error", h - 1) < at("copy_last_error", h - 1),
        "{wm}"
    );
    for i in 0..h {
        let one = wm["coverage_1sigma"]["calibrated"][i].as_f64().unwrap();
        let two = wm["coverage_2sigma"]["calibrated"][i].as_f64().unwrap();
        assert!(
            (0.55..0.8).contains(&one) && (0.85..0.99).contains(&two),
            "{wm}"
        );
    }
    assert!(
        wm["spearman"]["across_dataset"].as_f64().unwrap() > 0.0,
        "{wm}"
    );
    assert!(run_dir.join("replay").join("manifest.json").exists());
}
