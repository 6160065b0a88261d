//! The robot bridge end to end, on loopback (docs/bridge.md): `imago daemon` with
//! `robot = "remote"` driving `imago robot-serve`, a robot that dies and comes back,
//! and robots served from Python (a gymnasium environment, a LeRobot-style arm).
//!
//! The Python tests need `IMAGO_PYTHON` (else `python3`) with `imago_bridge`
//! (`pip install ./robots/bridge-python`) and gymnasium's classic-control extra;
//! without them they say they skipped, except under `CI=true`, where `.ci/run`
//! installs them and their absence is a failure.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{episodes_in, free_port, imago, spawn, stderr, wait_until};
use imago_robots::Robot;
use imago_runtime::robot::RobotConfig;
use imago_runtime::store::replay::{ReplayContents, read_replay};

/// One daemon at a time: each holds the control loop to its rate on two cores.
static ONE_DAEMON: Mutex<()> = Mutex::new(());

/// A key of this process alone, so that tests never see each other's robots.
fn unique_key(name: &str) -> String {
    format!("imago/test/{}/{name}", std::process::id())
}

/// `imago robot-serve` for `robot` (its name, then any `--robot-config FILE`) at `key`,
/// listening on `port`; returns once it says it is serving.
fn robot_serve(robot: &[&str], key: &str, port: u16) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_imago"))
        .args(["robot-serve", "--robot"])
        .args(robot)
        .args(["--key", key, "--listen"])
        .arg(format!("tcp/127.0.0.1:{port}"))
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("robot-serve starts");
    let mut first = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("serving"), "robot-serve said: {first}");
    child
}

/// Stops a server with SIGINT and returns what it printed after its first line.
fn interrupt(mut child: Child) -> String {
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut rest);
    let status = child.wait().unwrap();
    assert!(status.success(), "the server exited with {status}: {rest}");
    rest
}

/// The number printed before `what` in a server's summary (`12 steps`).
fn count(summary: &str, what: &str) -> u64 {
    let words: Vec<&str> = summary.split([' ', ',']).collect();
    let at = words
        .iter()
        .position(|w| *w == what)
        .unwrap_or_else(|| panic!("no `{what}` in {summary}"));
    words[at - 1].parse().unwrap()
}

/// A daemon config for the remote robot at `key` on `port`; `learner` is the
/// `[learner]` table's text.
fn remote_config(dir: &Path, key: &str, port: u16, learner: &str) -> String {
    let path = dir.join("remote.toml");
    std::fs::write(
        &path,
        format!(
            "robot = \"remote\"\ndevice = \"cpu\"\n\
             [actor.robot]\nkey = \"{key}\"\nconnect_timeout_s = 60.0\n\
             [actor.robot.link]\nconnect = [\"tcp/127.0.0.1:{port}\"]\n\
             {learner}"
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

/// A small learner whose every version acts at once (`[promotion] enabled = false`):
/// these tests are about the link; a remote robot's live promotion test is the same
/// code as a simulated robot's (tests/daemon.rs).
const SMALL_LEARNER: &str = "[learner]\nmin_episodes = 2\n\
     [learner.finetune]\npolicy_steps = 5\nworld_model_steps = 3\ncritic_steps = 3\ncritic_batch = 16\n\
     [promotion]\nenabled = false\n";

/// Where a test's daemon runs (`DIR/run`) and reports (`DIR/status.json`).
struct DaemonRun {
    run: PathBuf,
    json: PathBuf,
}

impl DaemonRun {
    fn in_dir(dir: &Path) -> Self {
        Self {
            run: dir.join("run"),
            json: dir.join("status.json"),
        }
    }

    /// `imago daemon`'s arguments for `config`, run for `seconds`.
    fn args<'a>(&'a self, config: &'a str, seconds: &'a str) -> [&'a str; 9] {
        [
            "daemon",
            "--config",
            config,
            "--run-dir",
            self.run.to_str().unwrap(),
            "--duration",
            seconds,
            "--report",
            self.json.to_str().unwrap(),
        ]
    }

    /// The report it wrote.
    fn report(&self) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(&self.json).unwrap()).unwrap()
    }

    /// Its replay.
    fn replay(&self) -> ReplayContents {
        read_replay(&self.run.join("replay")).unwrap()
    }
}

#[test]
fn a_daemon_drives_robot_serve_exactly_as_the_local_robot() {
    let _one = ONE_DAEMON.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (key, port) = (unique_key("reacher"), free_port());
    let server = robot_serve(&["reacher2d"], &key, port);
    let daemon = DaemonRun::in_dir(dir.path());
    let config = remote_config(dir.path(), &key, port, SMALL_LEARNER);
    let output = imago(&daemon.args(&config, "20"));
    let served = interrupt(server);
    assert!(output.status.success(), "{}", stderr(&output));
    let status = daemon.report();
    // 20 Hz over the bridge while the learner trains: the daemon misses no deadline
    // of its own and loses nothing. `deadline_misses` also counts the robot's late
    // answers; the Python robot is another process on the same loaded 2-core machine,
    // so a rare late answer (one in 406 ticks in a CI run) is its scheduling, not the
    // daemon's: at most 1% are allowed, and each must be counted as late.
    let ticks = status["ticks"].as_u64().unwrap();
    let late = status["late_observations"].as_u64().unwrap();
    assert!(ticks >= 350, "{status}");
    assert_eq!(
        status["deadline_misses"].as_u64().unwrap(),
        late,
        "{status}"
    );
    assert!(late * 100 <= ticks, "{status}");
    assert_eq!(status["link_losses"], 0, "{status}");
    assert_eq!(status["transitions_written"], status["actor_transitions"]);
    // Every step the robot took is a transition the daemon recorded, and no other.
    assert_eq!(
        count(&served, "steps"),
        status["actor_transitions"].as_u64().unwrap(),
        "{served}"
    );
    assert_eq!(count(&served, "stale"), 0, "{served}");
    // Each recorded episode is what the local robot does from the same seed under
    // the same actions, bit for bit.
    let contents = daemon.replay();
    assert!(!contents.is_damaged(), "{:?}", contents.damage_lines());
    assert_eq!(contents.spec, Some(RobotConfig::default().spec()));
    assert!(contents.episodes.len() >= 3, "{}", contents.episodes.len());
    let mut local = RobotConfig::default().build().unwrap();
    for episode in &contents.episodes {
        let mut observation = local.reset(episode.start.seed);
        for t in &episode.transitions {
            assert_eq!(
                t.observation, observation,
                "episode {}",
                episode.start.episode
            );
            let step = local.step(&t.action);
            assert_eq!(
                (step.reward, step.done, step.success, &step.info.executed),
                (t.reward, t.done, t.success, &t.executed)
            );
            observation = step.observation;
        }
        assert_eq!(episode.end.final_observation, observation);
    }
    assert!(status["learning_steps"].as_u64().unwrap() >= 1, "{status}");
}

#[test]
fn a_lost_robot_is_held_counted_and_driven_again_when_it_returns() {
    let _one = ONE_DAEMON.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (key, port) = (unique_key("comeback"), free_port());
    let mut first = robot_serve(&["reacher2d"], &key, port);
    let run = DaemonRun::in_dir(dir.path());
    let config = remote_config(dir.path(), &key, port, "[learner]\nenabled = false\n");
    let daemon = spawn(&run.args(&config, "16"));
    wait_until(
        "an episode on the remote robot",
        Duration::from_secs(60),
        || episodes_in(&run.run.join("replay")) >= 1,
    );
    // The robot's process dies without a word, and stays away for 3 s.
    first.kill().unwrap();
    first.wait().unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let second = robot_serve(&["reacher2d"], &key, port);
    let output = daemon.wait_with_output().unwrap();
    let served = interrupt(second);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let status = run.report();
    assert!(status["link_losses"].as_u64().unwrap() >= 1, "{status}");
    assert!(
        status["episodes_abandoned"].as_u64().unwrap() >= 1,
        "{status}"
    );
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("lost the robot"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // It carried on with the robot that came back.
    assert!(count(&served, "steps") >= 20, "{served}");
    // The replay is intact: the abandoned episode is unfinished, not damaged, and
    // holds nothing for the ticks without the robot.
    let contents = run.replay();
    assert!(!contents.is_damaged(), "{:?}", contents.damage_lines());
    assert!(contents.unfinished_episodes >= 1);
    assert_eq!(contents.records, status["replay_records"].as_u64().unwrap());
    let whole: u64 = contents
        .episodes
        .iter()
        .map(|e| e.transitions.len() as u64)
        .sum();
    assert!(whole <= status["transitions_written"].as_u64().unwrap());
}

/// The Python that has `imago_bridge` and gymnasium, or why the test skips.
fn bridge_python() -> Option<String> {
    common::python_with(
        &["imago_bridge", "gymnasium", "pygame"],
        "pip install ./robots/bridge-python \"gymnasium[classic-control]\"",
    )
}

/// A Python example of `robots/bridge-python/examples` serving at `key` on `port`;
/// returns once it says it is serving.
fn python_serve(python: &str, example: &str, key: &str, port: u16, extra: &[&str]) -> Child {
    python_script_serve(
        python,
        &Path::new("robots/bridge-python/examples").join(example),
        key,
        port,
        extra,
    )
}

/// The Python script at `script` (relative to the repository) serving at `key` on
/// `port`; returns once it says it is serving.
fn python_script_serve(python: &str, script: &Path, key: &str, port: u16, extra: &[&str]) -> Child {
    let example = script.display().to_string();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
    let mut child = Command::new(python)
        .arg(script)
        .args(["--key", key, "--listen", &format!("tcp/127.0.0.1:{port}")])
        .args(extra)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .env("SDL_VIDEODRIVER", "dummy")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python starts");
    let started = Instant::now();
    let mut first = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(
        first.contains("serving"),
        "{example} said: {first} (after {:?})",
        started.elapsed()
    );
    child
}

#[test]
fn a_gymnasium_environment_served_from_python_is_trained_on_end_to_end() {
    let Some(python) = bridge_python() else {
        return;
    };
    let _one = ONE_DAEMON.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (key, port) = (unique_key("pendulum"), free_port());
    let server = python_serve(
        &python,
        "serve_pendulum.py",
        &key,
        port,
        &["--max-steps", "30"],
    );
    let daemon = DaemonRun::in_dir(dir.path());
    let config = remote_config(dir.path(), &key, port, SMALL_LEARNER);
    let output = imago(&daemon.args(&config, "25"));
    let served = interrupt(server);
    assert!(output.status.success(), "{}", stderr(&output));
    let status = daemon.report();
    assert_eq!(status["transitions_written"], status["actor_transitions"]);
    assert_eq!(status["link_losses"], 0, "{status}");
    let contents = daemon.replay();
    assert!(!contents.is_damaged(), "{:?}", contents.damage_lines());
    let spec = contents.spec.clone().unwrap();
    assert_eq!(
        (spec.name.as_str(), spec.action_limit.as_slice()),
        ("pendulum", &[2.0f32][..])
    );
    assert!(contents.episodes.len() >= 4, "{}", contents.episodes.len());
    for episode in &contents.episodes {
        assert_eq!(episode.transitions.len(), 30);
        let frame = episode.transitions[0].observation.image.as_ref().unwrap();
        assert_eq!((frame.width, frame.height), (32, 32));
        // Pendulum's reward is minus a cost: never positive, and not all zero.
        assert!(episode.transitions.iter().all(|t| t.reward <= 0.0));
        assert!(episode.transitions.iter().any(|t| t.reward < 0.0));
    }
    // It trained on what it recorded and acted with what it trained.
    assert!(status["learning_steps"].as_u64().unwrap() >= 1, "{status}");
    assert!(
        status["policy_versions"].as_array().unwrap().len() >= 2,
        "{status}"
    );
    // The Python server stepped once per recorded transition.
    let steps = served
        .split("'steps': ")
        .nth(1)
        .and_then(|rest| rest.split([',', '}']).next())
        .and_then(|n| n.trim().parse::<u64>().ok());
    assert_eq!(steps, status["actor_transitions"].as_u64(), "{served}");
}

#[test]
fn gym_pusht_itself_evaluates_an_imago_pusht_policy() {
    let Some(python) = common::python_with(
        &["imago_bridge", "gym_pusht"],
        "pip install ./robots/bridge-python gym-pusht==0.1.8",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).display().to_string();
    let (replay, ckpt, report, remote) = (
        path("replay"),
        path("ckpt"),
        path("eval.json"),
        path("remote.toml"),
    );
    for args in [
        &[
            "collect",
            "--robot",
            "pusht",
            "--episodes",
            "1",
            "--out",
            &replay,
        ][..],
        &[
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
        ],
    ] {
        let output = imago(args);
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
    }
    let (key, port) = (unique_key("gym-pusht"), free_port());
    std::fs::write(
        &remote,
        format!(
            "key = \"{key}\"\nmax_observation_age_ms = 100.0\n[link]\nconnect = [\"tcp/127.0.0.1:{port}\"]\n"
        ),
    )
    .unwrap();
    let server = python_script_serve(
        &python,
        Path::new("scripts/pusht_gym_serve.py"),
        &key,
        port,
        &[],
    );
    let output = imago(&[
        "--device",
        "cpu",
        "eval",
        "--remote",
        &remote,
        "--ckpt",
        &ckpt,
        "--episodes",
        "2",
        "--report",
        &report,
    ]);
    let served = interrupt(server);
    assert!(output.status.success(), "{}", stderr(&output));
    let row: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(row["episodes"], 2, "{row}");
    let coverage = row["mean_max_coverage"]
        .as_f64()
        .expect("gym-pusht's coverage");
    assert!((0.0..=1.0).contains(&coverage), "{row}");
    // gym-pusht stepped once per tick of the two episodes, and reset once for each.
    let count = |what: &str| {
        served
            .split(&format!("'{what}': "))
            .nth(1)
            .and_then(|rest| rest.split([',', '}']).next())
            .and_then(|n| n.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{served}"))
    };
    let mean_steps = row["mean_length"].as_f64().unwrap();
    assert_eq!(count("steps"), 2.0 * mean_steps, "{served} {row}");
    assert_eq!(count("resets"), 2.0, "{served}");
    assert_eq!(count("stale"), 0.0, "{served}");
}

#[test]
fn a_lerobot_style_arm_served_from_python_gets_exactly_the_recorded_commands() {
    let Some(python) = bridge_python() else {
        return;
    };
    let _one = ONE_DAEMON.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (key, port) = (unique_key("arm"), free_port());
    let log = dir.path().join("sent.jsonl");
    let server = python_serve(
        &python,
        "fake_lerobot_arm.py",
        &key,
        port,
        &["--log", log.to_str().unwrap(), "--max-steps", "20"],
    );
    let daemon = DaemonRun::in_dir(dir.path());
    let config = remote_config(dir.path(), &key, port, "[learner]\nenabled = false\n");
    let output = imago(&daemon.args(&config, "6"));
    interrupt(server);
    assert!(output.status.success(), "{}", stderr(&output));
    let status = daemon.report();
    let contents = daemon.replay();
    assert!(!contents.is_damaged(), "{:?}", contents.damage_lines());
    let spec = contents.spec.clone().unwrap();
    assert_eq!(spec.name, "fake_so101");
    assert_eq!(spec.proprio_dim(), 6);
    // Position actions are predicted relative to where each joint is.
    assert_eq!(spec.action_origin, Some((0..6).collect()));
    let sent: Vec<Vec<f32>> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(
        sent.len() as u64,
        status["actor_transitions"].as_u64().unwrap(),
        "one command reached the arm per recorded tick"
    );
    let recorded: Vec<&Vec<f32>> = contents
        .episodes
        .iter()
        .flat_map(|e| e.transitions.iter().map(|t| &t.executed.0))
        .collect();
    assert!(recorded.len() >= 40, "{}", recorded.len());
    for (arm, replay) in sent.iter().zip(&recorded) {
        assert_eq!(
            arm, *replay,
            "the arm got what the replay says was executed"
        );
    }
}

#[test]
fn mistakes_in_bridge_and_fleet_settings_are_one_clear_error_and_touch_no_run_directory() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let config = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    };
    let daemon = |config: &str, extra: &[&str]| {
        let mut args = vec![
            "daemon",
            "--config",
            config,
            "--run-dir",
            run.to_str().unwrap(),
            "--duration",
            "1",
        ];
        args.extend_from_slice(extra);
        imago(&args)
    };
    let cases = [
        (
            daemon(
                &config("nokey.toml", "robot = \"remote\"\ndevice = \"cpu\"\n"),
                &[],
            ),
            vec!["key", "is required"],
        ),
        (
            daemon(
                &config(
                    "typo.toml",
                    "robot = \"remote\"\n[actor.robot]\nkey = \"imago/robots/x\"\nconect_timeout_s = 1\n",
                ),
                &[],
            ),
            vec!["conect_timeout_s", "connect_timeout_s"],
        ),
        (
            daemon(
                &config(
                    "absent.toml",
                    &format!(
                        "robot = \"remote\"\n[actor.robot]\nkey = \"{}\"\nconnect_timeout_s = 1.0\n[actor.robot.link]\nconnect = [\"tcp/127.0.0.1:{}\"]\n",
                        unique_key("absent"),
                        free_port()
                    ),
                ),
                &[],
            ),
            vec!["no robot answered", "robot-serve"],
        ),
        (
            daemon(
                &config("fleet.toml", "robot = \"reacher2d\"\ndevice = \"cpu\"\n"),
                &["--learner", "127.0.0.1:7447"],
            ),
            vec!["--learner", "PROTOCOL/ADDRESS"],
        ),
        (
            imago(&["robot-serve", "--key", "imago/*"]),
            vec!["not a robot key", "wildcards"],
        ),
    ];
    for (output, words) in cases {
        let text = stderr(&output);
        assert!(!output.status.success(), "{text}");
        // One error line (a "waiting for the robot" note may come before it).
        assert_eq!(
            text.lines().filter(|l| l.starts_with("error:")).count(),
            1,
            "{text}"
        );
        for word in words {
            assert!(text.contains(word), "no `{word}` in: {text}");
        }
        assert!(!run.exists(), "a failed start created {}", run.display());
    }
}

/// A LeRobot policy (the ACT fixture, made by LeRobot) drives pusht served from
/// another process exactly as it drives the local pusht: the served robot reports
/// its settings, so the policy reads and writes it in gym-pusht's pixels there too,
/// and the same seed gives the same commands, tick for tick.
#[test]
fn a_lerobot_policy_drives_robot_serve_as_it_drives_the_local_robot() {
    let _one = ONE_DAEMON.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let act = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lerobot/act_policy");
    let settings = dir.path().join("pusht.toml");
    std::fs::write(&settings, "image_size = 48\nmax_steps = 20\n").unwrap();
    let (key, port) = (unique_key("pusht"), free_port());
    let server = robot_serve(
        &["pusht", "--robot-config", settings.to_str().unwrap()],
        &key,
        port,
    );
    let acting = format!(
        "policy = \"{}\"\n[actor.takeover]\nwindow = 100000\n[learner]\nenabled = false\n",
        act.display()
    );
    let remote_dir = dir.path().join("remote");
    std::fs::create_dir_all(&remote_dir).unwrap();
    let remote = DaemonRun::in_dir(&remote_dir);
    let config = remote_config(&remote_dir, &key, port, "");
    let text = std::fs::read_to_string(&config).unwrap();
    let (top, tables) = text.split_at(text.find('[').unwrap());
    std::fs::write(&config, format!("{top}{acting}{tables}")).unwrap();
    let output = imago(&remote.args(&config, "5"));
    interrupt(server);
    assert!(output.status.success(), "{}", stderr(&output));
    let local_dir = dir.path().join("local");
    std::fs::create_dir_all(&local_dir).unwrap();
    let local = DaemonRun::in_dir(&local_dir);
    let local_config = local_dir.join("local.toml");
    std::fs::write(
        &local_config,
        format!(
            "robot = \"pusht\"\ndevice = \"cpu\"\n{acting}[actor.robot]\nimage_size = 48\nmax_steps = 20\n"
        ),
    )
    .unwrap();
    let output = imago(&local.args(local_config.to_str().unwrap(), "5"));
    assert!(output.status.success(), "{}", stderr(&output));
    let (served, simulated) = (remote.replay(), local.replay());
    let (Some(served), Some(simulated)) = (served.episodes.first(), simulated.episodes.first())
    else {
        panic!("each run finished an episode");
    };
    let commands = |episode: &imago_runtime::store::replay::Episode| -> Vec<Vec<f32>> {
        episode
            .transitions
            .iter()
            .map(|t| t.action.0.clone())
            .collect()
    };
    assert_eq!(commands(served), commands(simulated));
    // In gym-pusht's pixels the random policy's targets fall inside the table, not on
    // the clamp at its edge (where robot units read as pixels would put every one).
    assert!(
        commands(served).iter().flatten().any(|a| a.abs() < 0.99),
        "{:?}",
        commands(served)
    );
}
