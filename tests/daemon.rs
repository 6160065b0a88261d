//! `imago daemon`: control at a fixed rate while learning, clean shutdown on SIGTERM,
//! resumption after SIGKILL, and config errors that name the key.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use common::{daemon_holds, episodes_in, imago, stderr, wait_until};
use imago_runtime::store::replay::{ReplayContents, read_replay};
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
         [learner.finetune]\npolicy_steps = 5\nworld_model_steps = 3\ncritic_steps = 3\ncritic_batch = 16\n\
         [promotion]\nenabled = false\n",
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

/// `imago daemon --resume` on `run` for `seconds`, waited for.
fn resume_for(config: &str, run: &Path, seconds: &str) -> std::process::Output {
    imago(&[
        "daemon",
        "--config",
        config,
        "--run-dir",
        run.to_str().unwrap(),
        "--resume",
        "--duration",
        seconds,
    ])
}

fn report(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// Waits for a daemon that writes its report to `json`: it exits 0, and the replay of
/// `run` holds exactly the records the report counts.
fn exited_cleanly(
    child: std::process::Child,
    json: &Path,
    run: &Path,
) -> imago_runtime::store::replay::ReplayContents {
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let status = report(json);
    let contents = read_replay(&run.join("replay")).unwrap();
    assert_eq!(contents.records, status["replay_records"].as_u64().unwrap());
    contents
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
    let off = control_only(dir.path(), "5", None);
    let on = control_only(dir.path(), "5", Some(&recording));
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
    let spawn = |extra: &[&str]| spawn_daemon(&config, &run, extra, Stdio::piped());

    // SIGTERM: stop at a tick boundary, flush, checkpoint, exit 0.
    let child = spawn(&["--report", json.to_str().unwrap()]);
    let replay = run.join("replay");
    wait_until("a finished episode", Duration::from_secs(90), || {
        episodes_in(&replay) >= 1
    });
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let contents = exited_cleanly(child, &json, &run);
    assert!(contents.corruptions.is_empty());

    // SIGKILL mid-run: everything fsynced before the kill (every finished episode) is
    // still there after --resume, which continues recording.
    let recorded = episodes_in(&replay);
    let mut child = spawn(&["--resume"]);
    wait_until("an episode after --resume", Duration::from_secs(90), || {
        episodes_in(&replay) > recorded
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let before = read_replay(&run.join("replay")).unwrap().episodes;
    let output = resume_for(&config, &run, "6");
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
        (
            "robot = \"reacher2d\"\n[promotion]\nmode = \"live\"\nexplore_fraction = 0.0\n",
            "promotion.explore_fraction",
        ),
        (
            "robot = \"reacher2d\"\n[promotion]\nconfidence = 1.5\n",
            "promotion.confidence",
        ),
        (
            "robot = \"reacher2d\"\n[promotion]\nmetric = \"speed\"\n",
            "metric",
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

/// A daemon config for the kill test: a small learner at 50 Hz (short episodes, so
/// versions advance between kills) and no scheduled checkpoint, so that versions the
/// learner publishes are lost at a kill and `--resume` must not give their numbers out
/// again.
fn kill_config(dir: &Path) -> String {
    let path = dir.join("kill.toml");
    std::fs::write(
        &path,
        "robot = \"reacher2d\"\ndevice = \"cpu\"\ncheckpoint_every_seconds = 1000000.0\n\
         [actor.robot]\ncontrol_hz = 50.0\nmax_steps = 40\n\
         [learner]\nmin_episodes = 2\n\
         [learner.finetune]\npolicy_steps = 3\nworld_model_steps = 2\ncritic_steps = 2\ncritic_batch = 8\n\
         [promotion]\nenabled = false\n",
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

/// `imago daemon --config CONFIG --run-dir RUN EXTRA...` in the background.
fn spawn_daemon(config: &str, run: &Path, extra: &[&str], stderr: Stdio) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_imago"))
        .args([
            "daemon",
            "--config",
            config,
            "--run-dir",
            run.to_str().unwrap(),
        ])
        .args(extra)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap()
}

/// The version of the run's policy checkpoint; `None` while a kill left it between the
/// two renames of a save (the next start restores it).
fn checkpoint_version(run: &Path) -> Option<u64> {
    let meta = std::fs::read_to_string(run.join("checkpoints/policy/meta.json")).ok()?;
    serde_json::from_str::<serde_json::Value>(&meta).ok()?["version"].as_u64()
}

#[test]
fn twenty_sigkills_lose_no_fsynced_episode_and_reuse_no_version() {
    let _one = ONE_DAEMON.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let config = kill_config(dir.path());
    let run = dir.path().join("run");
    let mut seen: BTreeMap<u64, imago_runtime::store::replay::Episode> = BTreeMap::new();
    // A fixed pseudo-random sequence of kill moments, 0.3 to 3 s into each run.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next_delay = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        Duration::from_millis(300 + state % 2700)
    };
    let mut child = spawn_daemon(&config, &run, &[], Stdio::null());
    wait_until("the first episode", Duration::from_secs(90), || {
        episodes_in(&run.join("replay")) >= 1
    });
    let mut renumbered = 0;
    for kill in 0..20 {
        child.kill().unwrap();
        child.wait().unwrap();
        let contents = read_replay(&run.join("replay")).unwrap();
        assert!(
            !contents.is_damaged(),
            "kill {kill}: {:?}",
            contents.damage_lines()
        );
        let ids: BTreeMap<u64, &imago_runtime::store::replay::Episode> = contents
            .episodes
            .iter()
            .map(|e| (e.start.episode, e))
            .collect();
        for (id, episode) in &seen {
            assert_eq!(
                ids.get(id),
                Some(&episode),
                "kill {kill}: episode {id}, whole before, was lost or changed"
            );
        }
        for (id, episode) in ids {
            seen.entry(id).or_insert_with(|| episode.clone());
        }
        // What `--resume` must continue from without reusing a version number.
        let recorded = contents.max_policy_version;
        let checkpointed = checkpoint_version(&run);
        let lowest = match checkpointed {
            Some(v) if recorded > v => {
                renumbered += 1;
                recorded + 1
            }
            Some(v) => v,
            None => 0,
        };
        let known = seen.keys().max().copied();
        child = spawn_daemon(&config, &run, &["--resume"], Stdio::null());
        std::thread::sleep(next_delay());
        // Episodes the resumed run finished carry new ids and no reused version.
        let later = read_replay(&run.join("replay")).unwrap();
        for episode in later
            .episodes
            .iter()
            .filter(|e| !seen.contains_key(&e.start.episode))
        {
            assert!(
                known.is_none_or(|k| episode.start.episode > k),
                "kill {kill}"
            );
            for t in &episode.transitions {
                assert!(
                    t.policy_version >= lowest,
                    "kill {kill}: version {} acted after resuming from {checkpointed:?} with {recorded} recorded",
                    t.policy_version
                );
            }
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // A last clean run: it resumes, stops on time, and the replay holds every episode.
    let output = resume_for(&config, &run, "2");
    assert!(output.status.success(), "{}", stderr(&output));
    let last = read_replay(&run.join("replay")).unwrap();
    assert!(!last.is_damaged(), "{:?}", last.damage_lines());
    for (id, episode) in &seen {
        assert!(last.episodes.contains(episode), "episode {id} was lost");
    }
    assert!(seen.len() >= 20, "{} episodes in 20 runs", seen.len());
    eprintln!(
        "{} episodes kept over 20 kills; {renumbered} resumes renumbered lost versions",
        seen.len()
    );
}

#[test]
fn one_daemon_per_run_dir_and_restarts_say_resume_or_fresh() {
    let _one = ONE_DAEMON.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("control.toml");
    std::fs::write(
        &config,
        "robot = \"reacher2d\"\ndevice = \"cpu\"\n[learner]\nenabled = false\n",
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let run = dir.path().join("run");
    let run_arg = run.to_str().unwrap();
    let json = dir.path().join("first.json");
    let first = spawn_daemon(
        config,
        &run,
        &["--duration", "6", "--report", json.to_str().unwrap()],
        Stdio::piped(),
    );
    wait_until("the first daemon's lock", Duration::from_secs(60), || {
        daemon_holds(&run)
    });
    // A second daemon on the same run directory: refused, naming the first.
    let second = imago(&[
        "daemon",
        "--config",
        config,
        "--run-dir",
        run_arg,
        "--resume",
        "--duration",
        "1",
    ]);
    assert!(!second.status.success());
    let err = stderr(&second);
    assert!(
        err.contains(&format!("process {}", first.id())) && err.contains("imago daemon"),
        "{err}"
    );
    let contents = exited_cleanly(first, &json, &run);

    // Restarted without --resume: an error naming both ways out; nothing changed.
    let version = checkpoint_version(&run).unwrap();
    let meta = run.join("checkpoints/policy/meta.json");
    let meta_text = std::fs::read_to_string(&meta).unwrap();
    let again = imago(&[
        "daemon",
        "--config",
        config,
        "--run-dir",
        run_arg,
        "--duration",
        "1",
    ]);
    assert!(!again.status.success());
    assert!(
        stderr(&again).contains("--resume") && stderr(&again).contains("--fresh"),
        "{}",
        stderr(&again)
    );
    assert_eq!(checkpoint_version(&run), Some(version));

    // --resume with an unreadable meta.json: an error, and the checkpoint untouched.
    std::fs::write(&meta, "{ damaged").unwrap();
    let resumed = imago(&[
        "daemon",
        "--config",
        config,
        "--run-dir",
        run_arg,
        "--resume",
        "--duration",
        "1",
    ]);
    assert!(!resumed.status.success());
    assert!(
        stderr(&resumed).contains("meta.json"),
        "{}",
        stderr(&resumed)
    );
    assert_eq!(std::fs::read_to_string(&meta).unwrap(), "{ damaged");
    std::fs::write(&meta, &meta_text).unwrap();

    // --fresh moves the old run aside, whole, and starts a new one.
    let episodes = contents.episodes;
    let fresh = imago(&[
        "daemon",
        "--config",
        config,
        "--run-dir",
        run_arg,
        "--fresh",
        "--duration",
        "1",
    ]);
    assert!(fresh.status.success(), "{}", stderr(&fresh));
    let aside: Vec<std::path::PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("run.previous-")
        })
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    let kept = read_replay(&aside[0].join("replay")).unwrap().episodes;
    assert_eq!(kept, episodes);
    assert_eq!(checkpoint_version(&aside[0]), Some(version));
}

/// A learner gone wrong (`learner.publish_fresh_weights`: every version it publishes
/// has freshly initialised weights) never gets a version past the promotion gate: the
/// trained champion acts from the first tick to the last, and the control loop keeps
/// its deadlines while the tests run beside it.
#[test]
fn a_broken_learner_never_gets_past_the_promotion_gate() {
    let _one = ONE_DAEMON.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let champion = cloned_policy(dir.path(), 60, 400, &[]);
    let run = run_with_broken_learner(
        dir.path(),
        &champion,
        2,
        "[actor.robot]\ncontrol_hz = 20.0\n[promotion]\nmax_episodes = 160\n",
        &["--duration", "25"],
    );
    let status = &run.status;
    assert!(status["learning_steps"].as_u64().unwrap() >= 1, "{status}");
    assert!(
        status["final_policy_version"].as_u64().unwrap() >= 2,
        "{status}"
    );
    assert_eq!(status["promotions"], 0, "{status}");
    // The learner goes on after rejections: with the champion acting, its episodes are
    // the freshest there are. Before that rule the learner waited for ever after the
    // second rejection (its next version 3 ahead of every recorded episode); 13
    // rejections in these 25 s on the 2-core development machine.
    assert!(status["rejections"].as_u64().unwrap() >= 3, "{status}");
    assert_eq!(status["champion_version"], 1, "{status}");
    assert_eq!(status["deadline_misses"], 0, "{status}");
    let tests = status["promotion_test_episodes"].as_array().unwrap();
    assert!(tests.iter().all(|n| n.as_u64().unwrap() <= 160), "{status}");
    // Every recorded tick was the champion's.
    assert!(!run.replay.episodes.is_empty());
    for episode in &run.replay.episodes {
        assert!(episode.transitions.iter().all(|t| t.policy_version == 1));
    }
    assert_eq!(run.saved_champion, 1);
}

/// Runs the daemon without its learner for 6 s on `policy` with a policy slowed to
/// 200 ms per inference (four control periods at 20 Hz), chunks executed by `mode`,
/// acting on the chunks' means; returns its report.
fn slowed_policy_run(dir: &Path, policy: &Path, mode: &str) -> serde_json::Value {
    let config = dir.join(format!("{mode}.toml"));
    std::fs::write(
        &config,
        format!(
            "robot = \"reacher2d\"\ndevice = \"cpu\"\npolicy = \"{}\"\n\
             [actor]\nexploration = 0.0\npolicy_delay_ms = 200\n\
             [actor.takeover]\nwindow = 100000\n\
             [actor.chunking]\nmode = \"{mode}\"\n\
             [learner]\nenabled = false\n",
            policy.display()
        ),
    )
    .unwrap();
    let json = dir.join(format!("{mode}.json"));
    let run = dir.join(format!("{mode}-run"));
    let output = imago(&[
        "daemon",
        "--config",
        config.to_str().unwrap(),
        "--run-dir",
        run.to_str().unwrap(),
        "--duration",
        "6",
        "--report",
        json.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    report(&json)
}

/// A policy slower than the control period: executed synchronously (each chunk
/// whole, then the robot waits for the next), it misses deadlines at every chunk
/// boundary and jumps into each new chunk; with real-time chunking the next chunk is
/// planned while the current one executes and cross-faded in, so no deadline is
/// missed and the executed actions are smoother.
#[test]
fn real_time_chunking_keeps_deadlines_and_moves_smoother_with_a_slow_policy() {
    let _one = ONE_DAEMON.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let policy = cloned_policy(dir.path(), 60, 400, &["--chunk-len", "16"]);
    let synchronous = slowed_policy_run(dir.path(), &policy, "synchronous");
    let realtime = slowed_policy_run(dir.path(), &policy, "realtime");
    let both = format!("synchronous: {synchronous}\nrealtime: {realtime}");
    let misses = |r: &serde_json::Value| r["deadline_misses"].as_u64().unwrap();
    let jerk = |r: &serde_json::Value| r["action_jerk"].as_f64().unwrap();
    assert!(misses(&synchronous) >= 3, "{both}");
    assert!(misses(&realtime) < misses(&synchronous), "{both}");
    assert!(jerk(&realtime) < jerk(&synchronous), "{both}");
    // Both ran the policy, and finished episodes.
    for r in [&synchronous, &realtime] {
        assert!(r["episodes_finished"].as_u64().unwrap() >= 1, "{both}");
        assert_eq!(r["policy_versions"], serde_json::json!([1]), "{both}");
    }
}

/// A regression the simulator test did not catch (staged: `promotion.stage_regression`
/// promotes the first challenger untested, and the learner publishes fresh weights):
/// the guard watches the new champion's live episodes against the trained champion's
/// live record, certifies the regression, and rolls the trained champion back in; the
/// later broken versions are rejected by the test, so the run ends with it.
#[test]
fn a_staged_regression_is_rolled_back_by_the_live_guard() {
    let _one = ONE_DAEMON.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let run = run_with_broken_learner(
        dir.path(),
        trained_champion(),
        10,
        "[actor]\nexploration = 0.0\n[actor.takeover]\nwindow = 100000\n\
         [promotion]\nmax_episodes = 100\nstage_regression = true\n",
        &["--duration", "55"],
    );
    let (status, log) = (&run.status, &run.log);
    let both = format!("{status}\n{log}");
    assert_eq!(status["promotions"], 1, "{both}");
    assert_eq!(status["rollbacks"], 1, "{both}");
    assert_eq!(status["champion_version"], 1, "{both}");
    assert!(log.contains("rolled back to version 1"), "{both}");
    // The replay: the trained champion, then the staged version 2, then the trained
    // champion again, and no other version ever acted.
    let versions = run.acting_versions();
    let first_broken = versions
        .iter()
        .position(|&v| v == 2)
        .expect("version 2 acted");
    let back = versions[first_broken..]
        .iter()
        .position(|&v| v == 1)
        .expect("version 1 acted again");
    assert!(versions.iter().all(|&v| v <= 2), "{versions:?}");
    assert!(
        versions[first_broken + back..].iter().all(|&v| v == 1),
        "{versions:?}"
    );
    let broken = versions.iter().filter(|&&v| v == 2).count();
    assert!(broken <= 20, "{broken} episodes of version 2: {versions:?}");
    assert_eq!(run.saved_champion, 1);
}

/// What a daemon run with a broken learner left: its report, its log, its replay and
/// the version of the champion checkpoint it saved.
struct BrokenLearnerRun {
    status: serde_json::Value,
    log: String,
    replay: ReplayContents,
    saved_champion: u64,
}

impl BrokenLearnerRun {
    /// The policy version that acted in each recorded episode, in order.
    fn acting_versions(&self) -> Vec<u64> {
        self.replay
            .episodes
            .iter()
            .map(|e| e.transitions[0].policy_version)
            .collect()
    }
}

/// Runs the daemon (with `args`, e.g. its duration) in `dir/run` on `champion`, with a
/// learner gone wrong (`learner.publish_fresh_weights`: every version it publishes has
/// freshly initialised weights) that starts after `min_episodes` and takes small steps;
/// `tables` adds the test's own config tables (actor, promotion). The run must exit
/// cleanly.
fn run_with_broken_learner(
    dir: &Path,
    champion: &Path,
    min_episodes: u32,
    tables: &str,
    args: &[&str],
) -> BrokenLearnerRun {
    let path = |p: &Path| p.to_str().unwrap().to_string();
    let config = dir.join("broken.toml");
    std::fs::write(
        &config,
        format!(
            "robot = \"reacher2d\"\ndevice = \"cpu\"\npolicy = \"{}\"\n\
             [learner]\nmin_episodes = {min_episodes}\npublish_fresh_weights = true\n\
             [learner.finetune]\npolicy_steps = 3\nworld_model_steps = 2\ncritic_steps = 2\ncritic_batch = 8\n\
             {tables}",
            path(champion)
        ),
    )
    .unwrap();
    let (run, json) = (dir.join("run"), dir.join("status.json"));
    let (config, run_arg, json_arg) = (path(&config), path(&run), path(&json));
    let mut all = vec![
        "daemon",
        "--config",
        &config,
        "--run-dir",
        &run_arg,
        "--report",
        &json_arg,
    ];
    all.extend(args);
    let output = imago(&all);
    let log = stderr(&output);
    assert!(output.status.success(), "{log}");
    let champion_meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("checkpoints/champion/meta.json")).unwrap())
            .unwrap();
    BrokenLearnerRun {
        status: report(&json),
        log,
        replay: read_replay(&run.join("replay")).unwrap(),
        saved_champion: champion_meta["version"].as_u64().unwrap(),
    }
}

/// A policy cloned from `episodes` scripted demonstrations with `steps` optimiser
/// steps (and `extra` training flags), in `dir/bc`.
fn cloned_policy(dir: &Path, episodes: u32, steps: u32, extra: &[&str]) -> PathBuf {
    let (demos, policy) = (dir.join("demos"), dir.join("bc"));
    let output = imago(&[
        "collect",
        "--episodes",
        &episodes.to_string(),
        "--out",
        demos.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let (steps, demos, out) = (
        steps.to_string(),
        demos.to_str().unwrap().to_string(),
        policy.to_str().unwrap().to_string(),
    );
    let mut args = vec![
        "--device", "cpu", "train", "--replay", &demos, "--out", &out, "--steps", &steps,
    ];
    args.extend(extra);
    let output = imago(&args);
    assert!(output.status.success(), "{}", stderr(&output));
    policy
}

/// A champion cloned from 100 demonstrations with 1500 steps (it succeeds in most
/// episodes when it acts on its mean), trained once per run of these tests.
fn trained_champion() -> &'static Path {
    static CHAMPION: OnceLock<PathBuf> = OnceLock::new();
    CHAMPION.get_or_init(|| {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("daemon-champion");
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        cloned_policy(&root, 100, 1500, &[])
    })
}

/// Promotion mode `live` with a learner gone wrong (every version has fresh weights):
/// the challenger acts on the robot itself, but in no more than `explore_fraction` of
/// the episodes; the live test pairs its episodes with the champion's and rejects it,
/// and the trained champion ends the run, with no deadline missed.
#[test]
fn a_broken_learner_is_rejected_live_within_the_exploration_share() {
    let _one = ONE_DAEMON.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let path = |p: &Path| p.to_str().unwrap().to_string();
    let recording = dir.path().join("live.rrd");
    let run = run_with_broken_learner(
        dir.path(),
        trained_champion(),
        4,
        "[actor]\nexploration = 0.0\n[actor.takeover]\nwindow = 100000\n\
         [promotion]\nmode = \"live\"\nexplore_fraction = 0.5\nmax_episodes = 40\n",
        &["--duration", "80", "--rerun", &path(&recording)],
    );
    let (status, log) = (&run.status, &run.log);
    let both = format!("{status}\n{log}");
    assert_eq!(status["promotions"], 0, "{both}");
    assert!(status["rejections"].as_u64().unwrap() >= 1, "{both}");
    assert_eq!(status["champion_version"], 1, "{both}");
    assert_eq!(status["deadline_misses"], 0, "{both}");
    assert!(log.contains("RejectWorse after"), "{both}");
    let versions = run.acting_versions();
    let by_challengers = versions.iter().filter(|&&v| v != 1).count();
    assert!(by_challengers >= 1, "no challenger acted: {versions:?}");
    assert!(
        by_challengers as f64 <= 0.5 * versions.len() as f64 + 1.0,
        "challengers acted in {by_challengers} of {} episodes: {versions:?}",
        versions.len()
    );
    // rerun has the test's running statistic, one point per paired live episode.
    let summary = read_recording(&recording).unwrap();
    let tests = status["promotion_test_episodes"].as_array().unwrap();
    let paired: u64 = tests.iter().map(|n| n.as_u64().unwrap()).sum();
    for series in ["log10_evidence_better", "log10_evidence_worse"] {
        let rows = summary.rows.get(&format!("{}/{series}", paths::PROMOTION));
        assert!(
            rows.is_some_and(|&n| n as u64 >= paired),
            "{series}: {rows:?} rows for {paired} paired episodes"
        );
    }
    assert!(summary.timelines.contains(paths::PROMOTION_EPISODE));
}
