//! Closed-loop evaluation of a robot in another process (`imago eval --remote`): the
//! policy runs here, the robot (gym-pusht through the Python adapter, or any robot
//! behind the bridge) steps there, one episode after another.
//!
//! Unlike the daemon's actor, evaluation keeps no control rate: each command goes out
//! as soon as the policy has chosen it, and the robot steps when it arrives, so a
//! simulated robot runs as fast as both sides can, and each answer is awaited up to
//! [`ANSWER_WAIT`], not the robot's period, so that a loaded machine slows the
//! evaluation down instead of ending it. Every tick needs its answer: one that does not
//! come in that time, or a lost robot, ends the evaluation with an error (an episode
//! with a hole in it has no outcome to count).

use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use burn::prelude::Backend;
use imago_policies::HostPolicy;
use imago_robots::Action;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::act::episode::{EpisodeInProgress, TickCommand};
use crate::act::evaluate::{Controller, EvalOutcome};
use crate::bridge::{Interruption, RemoteRobot, RemoteRobotConfig};
use crate::progress;
use crate::store::replay::EpisodeStart;

/// Longest wait for the robot's answer to one command during evaluation (a served
/// gym-pusht answers in about 5 ms; beside a build on 2 cores a tick took over 100 ms).
pub const ANSWER_WAIT: Duration = Duration::from_secs(2);

/// Runs one episode per seed on the remote robot of `config` with `controller` (a
/// policy of either kind, or random actions; a remote robot's scripted expert is not
/// reachable) and reports the outcomes, as [`crate::act::evaluate::evaluate`] does for
/// a simulated robot. Random actions are drawn as there, so that a robot served by
/// `imago robot-serve` gives the very outcomes of the local one.
pub fn evaluate_remote<B: Backend>(
    controller: &Controller<'_, B>,
    config: &RemoteRobotConfig,
    seeds: &[u64],
    label: &str,
) -> anyhow::Result<EvalOutcome> {
    if let Controller::Expert(_) = controller {
        anyhow::bail!(
            "robot {} at {} is in another process: its scripted expert cannot be run from here",
            config.spec.name,
            config.settings.key
        );
    }
    if let (Controller::LeRobot(driver), Some(&first)) = (controller, seeds.first()) {
        B::seed(driver.device(), first);
    }
    let mut robot = RemoteRobot::open(config)?;
    robot.wait_for_answers(ANSWER_WAIT.max(config.observation_wait()));
    wait_until_alive(&robot, config)?;
    let host = match controller {
        Controller::Policy { policy, .. } | Controller::Planned { policy, .. } => {
            policy.host_copy()
        }
        _ => None,
    };
    let bar = progress::bar(label, seeds.len() as u64);
    let mut outcome = EvalOutcome::default();
    for (episode_id, &seed) in seeds.iter().enumerate() {
        let episode = run_episode(
            &mut robot,
            controller,
            host.as_ref(),
            seed,
            episode_id as u64,
        )?;
        outcome.success.push(episode.succeeded());
        outcome.length.push(episode.steps());
        if let Some(coverage) = episode.max_coverage() {
            outcome.max_coverage.push(coverage);
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    anyhow::ensure!(
        outcome.max_coverage.is_empty() || outcome.max_coverage.len() == seeds.len(),
        "the robot at {} reported its coverage in some episodes and not in others",
        config.settings.key
    );
    Ok(outcome)
}

/// Waits up to the connect timeout for the robot's liveliness token (the session
/// sees it shortly after opening).
fn wait_until_alive(robot: &RemoteRobot, config: &RemoteRobotConfig) -> anyhow::Result<()> {
    let patience = Duration::from_secs_f32(config.settings.connect_timeout_s);
    let started = Instant::now();
    while !robot.is_alive() {
        anyhow::ensure!(
            started.elapsed() < patience,
            "the robot at {} answered its spec but is not alive (no liveliness token within {:.0} s)",
            config.settings.key,
            patience.as_secs_f32()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// One episode from `seed`, to its end.
fn run_episode<B: Backend>(
    robot: &mut RemoteRobot,
    controller: &Controller<'_, B>,
    host: Option<&HostPolicy>,
    seed: u64,
    episode_id: u64,
) -> anyhow::Result<EpisodeInProgress> {
    let key = robot.key().to_string();
    let never = AtomicBool::new(false);
    let first = robot
        .reset(seed, episode_id, &never)?
        .ok_or_else(|| anyhow::anyhow!("the robot at {key} did not reset"))?;
    let start = EpisodeStart {
        episode: episode_id,
        robot: robot.spec().name.clone(),
        seed,
        instruction: first.instruction.clone(),
    };
    let mut episode = EpisodeInProgress::new(start, first);
    let mut queue: VecDeque<Action> = VecDeque::new();
    let mut lerobot = match controller {
        Controller::LeRobot(driver) => Some(driver.new_episode()),
        _ => None,
    };
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    let limits = robot.spec().action_limit.clone();
    while !episode.is_done() {
        let action = match controller {
            Controller::Policy { .. } | Controller::Planned { .. } => {
                if queue.is_empty() {
                    let actions = controller.leading_actions(
                        host,
                        (&[episode.observation()], None),
                        (std::slice::from_mut(&mut rng), &[0]),
                    )?;
                    queue.extend(actions.into_iter().flatten().flatten());
                }
                queue
                    .pop_front()
                    .ok_or_else(|| anyhow::anyhow!("the policy planned no action"))?
            }
            Controller::LeRobot(driver) => {
                let lane = lerobot
                    .as_mut()
                    .expect("a LeRobot controller has its episode");
                driver
                    .act(vec![(lane, episode.observation())])?
                    .pop()
                    .ok_or_else(|| anyhow::anyhow!("the LeRobot policy gave no action"))?
            }
            Controller::Random => Action(
                limits
                    .iter()
                    .map(|&limit| rng.random_range(-limit..=limit))
                    .collect(),
            ),
            Controller::Expert(_) => unreachable!("refused before the first episode"),
        };
        let chunk: Vec<f32> = std::iter::once(&action)
            .chain(&queue)
            .flat_map(|a| a.0.iter().copied())
            .collect();
        match robot.step(episode_id, 0, &action.0, &chunk)? {
            Ok(step) => {
                episode.advance(TickCommand::demonstration(action), step);
            }
            Err(Interruption::Late) => anyhow::bail!(
                "the robot at {key} did not answer tick {} of episode {episode_id} (seed {seed}) within {} s: is it still stepping?",
                episode.steps() + 1,
                robot.answer_wait().as_secs_f32()
            ),
            Err(Interruption::LinkLost) => anyhow::bail!(
                "the robot at {key} went away during episode {episode_id} (seed {seed})"
            ),
        }
    }
    Ok(episode)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use burn::backend::ndarray::NdArrayDevice;
    use burn::{Dispatch, DispatchDevice};
    use imago_policies::{Architecture, PolicyConfig};

    use super::*;
    use crate::act::evaluate::evaluate;
    use crate::bridge::{
        FrameEncoding, LinkConfig, RemoteRobotSettings, ServeOptions, serve_robot,
    };
    use crate::robot::RobotConfig;

    /// Serves `robot` with `imago robot-serve`'s server on a thread and evaluates
    /// `controller` on it over loopback TCP.
    fn evaluate_served(
        robot: &RobotConfig,
        controller: &Controller<'_, Dispatch>,
        seeds: &[u64],
    ) -> anyhow::Result<EvalOutcome> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let key = format!("imago/test/{}/remote-eval-{port}", std::process::id());
        let options = ServeOptions {
            key: key.clone(),
            link: LinkConfig::explicit(vec![format!("tcp/127.0.0.1:{port}")], vec![]),
            frames: FrameEncoding::Raw,
        };
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let server = scope.spawn(|| serve_robot(robot, &options, &stop, || {}));
            let evaluated = (|| {
                let settings = RemoteRobotSettings {
                    key,
                    link: LinkConfig::explicit(vec![], vec![format!("tcp/127.0.0.1:{port}")]),
                    connect_timeout_s: 10.0,
                    // A loaded test machine may take a while per tick; none is cut short.
                    max_observation_age_ms: Some(1000.0 / robot.spec().control_hz),
                    ..RemoteRobotSettings::default()
                };
                evaluate_remote(controller, &settings.connect()?, seeds, "remote")
            })();
            stop.store(true, Ordering::Relaxed);
            server.join().expect("the server thread")?;
            evaluated
        })
    }

    #[test]
    fn a_served_robot_evaluates_as_the_local_one() {
        let seeds = [11, 12, 13];
        // pusht: random actions, outcomes with coverage.
        let table = toml::from_str("max_steps = 25").unwrap();
        let pusht = RobotConfig::from_table("pusht", &table).unwrap();
        let random = Controller::<Dispatch>::Random;
        let local = evaluate(&random, &pusht, &seeds, "local").unwrap();
        assert_eq!(local.max_coverage.len(), 3);
        assert_eq!(evaluate_served(&pusht, &random, &seeds).unwrap(), local);
        // reacher2d: a policy planning chunks of which it executes two.
        let device = DispatchDevice::NdArray(NdArrayDevice::Cpu);
        Dispatch::seed(&device, 5);
        let reacher = crate::robot::reacher2d_with("max_steps = 7");
        let config = PolicyConfig::for_robot(Architecture::Vla, &reacher.spec())
            .unwrap()
            .compact();
        let policy = config.init::<Dispatch>(&device);
        let controller = Controller::Policy {
            policy: &policy,
            config: &config,
            device: &device,
            wrong_instruction: false,
            execute_steps: 2,
            sampling_noise: 0.0,
        };
        let local = evaluate(&controller, &reacher, &seeds, "local").unwrap();
        assert_eq!(local.length, [7, 7, 7]);
        assert_eq!(
            evaluate_served(&reacher, &controller, &seeds).unwrap(),
            local
        );
        // The expert of a robot in another process is not reachable.
        let expert = Controller::<Dispatch>::Expert(Default::default());
        let error = evaluate_served(&reacher, &expert, &seeds).unwrap_err();
        assert!(
            format!("{error:#}").contains("scripted expert"),
            "{error:#}"
        );
    }
}
