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
    for phase in ["collect", "train_bc", "evaluate"] {
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
    assert!(run_dir.join("replay").join("manifest.json").exists());
}
