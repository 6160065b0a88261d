//! Fleet learning end to end, on loopback (docs/fleet.md): `imago learner` and three
//! actors (`imago daemon --learner`), one actor and then the learner killed with
//! SIGKILL and restarted; every whole episode an actor recorded ends up in the
//! learner's replay exactly once.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use common::{episodes_in, free_port, spawn, wait_until};
use imago_runtime::store::replay::read_replay;

fn learner(config: &str, run: &Path, port: u16, key: &str, extra: &[&str]) -> Child {
    let listen = format!("tcp/127.0.0.1:{port}");
    let mut args = vec![
        "learner",
        "--config",
        config,
        "--run-dir",
        run.to_str().unwrap(),
        "--listen",
        &listen,
        "--fleet-key",
        key,
    ];
    args.extend_from_slice(extra);
    spawn(&args)
}

fn actor(config: &str, dir: &Path, id: &str, port: u16, key: &str, seconds: &str) -> Child {
    let run = dir.join(id);
    let report = dir.join(format!("{id}.json"));
    let endpoint = format!("tcp/127.0.0.1:{port}");
    spawn(&[
        "daemon",
        "--config",
        config,
        "--run-dir",
        run.to_str().unwrap(),
        "--learner",
        &endpoint,
        "--fleet-key",
        key,
        "--actor-id",
        id,
        "--duration",
        seconds,
        "--report",
        report.to_str().unwrap(),
    ])
}

/// Waits for `child` and asserts it exited 0.
fn succeeded(child: Child, what: &str) {
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn every_episode_of_every_actor_reaches_the_learner_once_through_crashes_of_both() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("fleet.toml");
    std::fs::write(
        &config,
        "robot = \"reacher2d\"\ndevice = \"cpu\"\n\
         [actor.robot]\ncontrol_hz = 20.0\nmax_steps = 30\n\
         [learner]\nmin_episodes = 2\n\
         [learner.finetune]\npolicy_steps = 5\nworld_model_steps = 3\ncritic_steps = 3\ncritic_batch = 16\n\
         [promotion]\nenabled = false\n",
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let (port, key) = (
        free_port(),
        format!("imago/test/{}/fleet", std::process::id()),
    );
    let run = dir.path().join("learner");
    let first_learner = learner(config, &run, port, &key, &[]);
    let actors: Vec<Child> = ["a0", "a1"]
        .iter()
        .map(|id| actor(config, dir.path(), id, port, &key, "30"))
        .collect();
    let mut doomed = actor(config, dir.path(), "a2", port, &key, "30");
    let replay_of = |id: &str| dir.path().join(id).join("replay");
    wait_until(
        "an episode from every actor at the learner",
        Duration::from_secs(120),
        || {
            ["a0", "a1", "a2"]
                .iter()
                .all(|id| episodes_in(&replay_of(id)) >= 1)
                && episodes_in(&run.join("replay")) >= 1
        },
    );
    // An actor dies without a word, stays away for 2 s, and comes back on its own
    // run directory.
    doomed.kill().unwrap();
    doomed.wait().unwrap();
    let before_crash = episodes_in(&replay_of("a2"));
    std::thread::sleep(Duration::from_secs(2));
    let back = actor(config, dir.path(), "a2", port, &key, "16");
    wait_until(
        "an episode from the restarted actor",
        Duration::from_secs(90),
        || episodes_in(&replay_of("a2")) > before_crash,
    );
    // So does the learner, which resumes its run.
    let mut first_learner = first_learner;
    first_learner.kill().unwrap();
    first_learner.wait().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let second_learner = learner(config, &run, port, &key, &["--resume"]);
    for (child, id) in actors.into_iter().zip(["a0", "a1"]) {
        succeeded(child, id);
    }
    succeeded(back, "a2 restarted");
    let _ = Command::new("kill")
        .args(["-INT", &second_learner.id().to_string()])
        .status();
    succeeded(second_learner, "the resumed learner");

    let stored = read_replay(&run.join("replay")).unwrap();
    assert!(!stored.is_damaged(), "{:?}", stored.damage_lines());
    let mut copies: BTreeMap<(String, u64), u64> = BTreeMap::new();
    for origin in &stored.origins {
        *copies
            .entry((origin.actor.clone(), origin.actor_episode))
            .or_default() += 1;
    }
    assert!(
        copies.values().all(|&n| n == 1),
        "an episode was stored twice: {copies:?}"
    );
    for id in ["a0", "a1", "a2"] {
        let local = read_replay(&dir.path().join(id).join("replay")).unwrap();
        assert!(!local.is_damaged(), "{id}: {:?}", local.damage_lines());
        assert!(local.episodes.len() >= 4, "{id}: {}", local.episodes.len());
        for episode in &local.episodes {
            let key = (id.to_string(), episode.start.episode);
            assert_eq!(
                copies.get(&key),
                Some(&1),
                "{id}'s episode {key:?} is not stored once"
            );
            let origin = stored
                .origins
                .iter()
                .find(|o| (o.actor.as_str(), o.actor_episode) == (id, episode.start.episode))
                .unwrap();
            let there = stored
                .episodes
                .iter()
                .find(|e| e.start.episode == origin.episode)
                .unwrap();
            assert_eq!(there.transitions.len(), episode.transitions.len());
            for (a, b) in there.transitions.iter().zip(&episode.transitions) {
                assert_eq!(
                    (&a.observation, &a.action, a.reward, a.policy_version),
                    (&b.observation, &b.action, b.reward, b.policy_version)
                );
            }
        }
        // Every actor acted with at least two of the learner's versions.
        let mut versions: Vec<u64> = local
            .episodes
            .iter()
            .flat_map(|e| e.transitions.iter().map(|t| t.policy_version))
            .collect();
        versions.dedup();
        versions.sort_unstable();
        versions.dedup();
        assert!(versions.len() >= 2, "{id} acted with versions {versions:?}");
    }
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("a0.json")).unwrap()).unwrap();
    assert_eq!(report["episodes_pending"], 0, "{report}");
}
