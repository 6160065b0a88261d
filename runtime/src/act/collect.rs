//! Recording scripted demonstrations into a replay directory.

use std::path::Path;

use imago_robots::bounds::{ConfigError, in_range};
use imago_robots::{Action, ExpertConfig};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rand_distr::StandardNormal;
use serde::{Deserialize, Serialize};

use crate::act::camera::BatchCamera;
use crate::act::episode::TickCommand;
use crate::act::lock_step::LockStep;
use crate::progress;
use crate::robot::RobotConfig;
use crate::store::atomic;
use crate::store::outputs::{OutputKind, check_output};
use crate::store::replay::{Episode, ReplayWriter, ReplayWriterConfig};

/// What to collect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CollectConfig {
    /// The robot and its settings.
    pub robot: RobotConfig,
    /// How imperfect the demonstrations are.
    pub expert: ExpertConfig,
    /// Perturbations sent to the robot in place of the expert's commands, which stay
    /// the recorded labels (DART); none by default.
    pub perturbation: Perturbation,
    /// Number of episodes.
    pub episodes: usize,
    /// Seed of the first episode; episode `i` uses `first_seed + i`. `None`: each
    /// episode's seed is its episode id in the replay, so collecting into the same
    /// replay again records new scenes rather than repeating the recorded ones (ids
    /// are never reused; a new replay starts at 0).
    pub first_seed: Option<u64>,
}

impl Default for CollectConfig {
    fn default() -> Self {
        Self {
            robot: RobotConfig::default(),
            expert: ExpertConfig::default(),
            perturbation: Perturbation::default(),
            episodes: 100,
            first_seed: None,
        }
    }
}

/// Noise added to what the robot is sent during a demonstration, not to the recorded
/// command (DART, Laskey et al. 2017): the demonstrations then cover the states a
/// clone drifts into, each labelled with the expert's command there. The noise is
/// autoregressive (`n_t = rho n_(t-1) + sqrt(1 - rho^2) sigma e_t` per action entry,
/// `e_t` standard normal), so a push is knocked off its course for several ticks
/// rather than jittered about it, which a position controller would smooth away.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Perturbation {
    /// Standard deviation of the noise, as a fraction of the action limit; 0 sends
    /// the expert's commands as they are. Range: [0, 1].
    pub sigma: f32,
    /// Correlation of one tick's noise with the previous tick's (`rho`). Range:
    /// [0, 0.99].
    pub correlation: f32,
}

impl Default for Perturbation {
    fn default() -> Self {
        Self {
            sigma: 0.0,
            correlation: 0.8,
        }
    }
}

impl Perturbation {
    /// Checks every value against its documented range; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range("sigma", self.sigma, 0.0..=1.0)?;
        in_range("correlation", self.correlation, 0.0..=0.99)
    }
}

/// One episode's perturbation stream.
struct PerturbationStream {
    config: Perturbation,
    rng: StdRng,
    state: Vec<f32>,
}

impl PerturbationStream {
    /// The stream of episode `seed`, for actions of `action_dim` entries.
    fn new(config: Perturbation, seed: u64, action_dim: usize) -> Self {
        Self {
            config,
            rng: StdRng::seed_from_u64(seed ^ 0xda27_0000_0000_0001),
            state: vec![0.0; action_dim],
        }
    }

    /// What the robot is sent for the expert's `action` (within `limit`), or `None`
    /// when this stream perturbs nothing.
    fn perturb(&mut self, action: &Action, limit: &[f32]) -> Option<Action> {
        let Perturbation { sigma, correlation } = self.config;
        if sigma == 0.0 {
            return None;
        }
        let innovation = (1.0 - correlation * correlation).sqrt() * sigma;
        let sent = action
            .0
            .iter()
            .zip(limit)
            .zip(&mut self.state)
            .map(|((&a, &l), n)| {
                let e: f32 = self.rng.sample(StandardNormal);
                *n = correlation * *n + innovation * e;
                (a + *n * l).clamp(-l, l)
            })
            .collect();
        Some(Action(sent))
    }
}

/// What was collected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectSummary {
    /// Episodes recorded.
    pub episodes: usize,
    /// Transitions recorded.
    pub transitions: usize,
    /// Episodes that reached the instructed target.
    pub successes: usize,
    /// The seeds the episodes were reset with: `first..=last` (`None` if none was
    /// recorded).
    pub seeds: Option<(u64, u64)>,
}

impl CollectSummary {
    /// Fraction of successful episodes.
    pub fn success_rate(&self) -> f64 {
        self.successes as f64 / self.episodes.max(1) as f64
    }
}

impl CollectConfig {
    /// Checks every value against its documented range; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.robot.validate().map_err(|e| e.within("robot"))?;
        self.expert.validate().map_err(|e| e.within("expert"))?;
        self.perturbation
            .validate()
            .map_err(|e| e.within("perturbation"))?;
        in_range("episodes", self.episodes, 1..=MAX_EPISODES)
    }
}

/// Largest number of episodes one command may collect or evaluate.
pub const MAX_EPISODES: usize = 100_000;

/// Runs the scripted expert for `config.episodes` episodes and appends them to the
/// replay at `out` (created if needed; a replay of another robot spec is an error).
/// Each episode is flushed to disk when it ends. `out` holding something other than a
/// replay is refused unless `force`, and then replaced only once the new replay is
/// complete.
pub fn collect_demonstrations(
    config: &CollectConfig,
    out: &Path,
    force: bool,
) -> anyhow::Result<CollectSummary> {
    config.validate()?;
    anyhow::ensure!(
        config.robot.has_expert(),
        "robot {} has no scripted expert to collect demonstrations with",
        config.robot.name()
    );
    let plan = check_output("--out", out, OutputKind::Replay, &[], force)?;
    if !plan.forced {
        return collect_into(config, out);
    }
    let staged = atomic::sibling_temp(out, "staged");
    let summary = collect_into(config, &staged)
        .and_then(|summary| atomic::replace_dir(&staged, out).map(|()| summary));
    if summary.is_err() {
        let _ = std::fs::remove_dir_all(&staged);
    }
    summary
}

fn collect_into(config: &CollectConfig, out: &Path) -> anyhow::Result<CollectSummary> {
    let (mut writer, repaired) = ReplayWriter::open(
        out,
        ReplayWriterConfig::default(),
        &config.robot,
        "imago collect",
    )?;
    repaired.warn();
    writer.ensure_episode_ids_for(config.episodes as u64)?;
    let mut summary = CollectSummary {
        episodes: 0,
        transitions: 0,
        successes: 0,
        seeds: None,
    };
    let bar = progress::bar("collect", config.episodes as u64);
    for i in 0..config.episodes {
        let id = writer.next_episode_id()?;
        let seed = config
            .first_seed
            .map_or(id, |first| first.wrapping_add(i as u64));
        let episode = demonstration(config, seed, id)?;
        writer.append_episode(&episode)?;
        summary.transitions += episode.transitions.len();
        summary.successes += episode.end.success as usize;
        summary.episodes += 1;
        summary.seeds = Some((summary.seeds.map_or(seed, |(first, _)| first), seed));
        bar.inc(1);
    }
    bar.finish_and_clear();
    writer.close()?;
    Ok(summary)
}

/// One episode of the scripted expert from `seed`, recorded as episode `id`.
fn demonstration(config: &CollectConfig, seed: u64, id: u64) -> anyhow::Result<Episode> {
    let camera = BatchCamera::PerRobot;
    let mut run = LockStep::start(&config.robot, &[seed], &camera, None)?;
    let lane = &mut run.lanes_mut()[0];
    anyhow::ensure!(
        lane.robot.start_expert(&config.expert, seed),
        "robot {} has no scripted expert",
        config.robot.name()
    );
    let limit = config.robot.spec().action_limit;
    let mut perturbation = PerturbationStream::new(config.perturbation, seed, limit.len());
    let mut transitions = Vec::new();
    while run.any_running() {
        let action = run.lanes_mut()[0].expert_action()?;
        let command = match perturbation.perturb(&action, &limit) {
            Some(sent) => TickCommand::perturbed_demonstration(action, sent),
            None => TickCommand::demonstration(action),
        };
        let tick = run.step(vec![Some(command)])?;
        transitions.extend(tick.into_iter().map(|(_, transition)| transition));
    }
    run.lanes()[0]
        .episode
        .finished(id, transitions)
        .ok_or_else(|| anyhow::anyhow!("episode {id} ended without an end"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::replay::read_replay;

    fn seeds(dir: &Path) -> Vec<u64> {
        read_replay(dir)
            .unwrap()
            .episodes
            .iter()
            .map(|e| e.start.seed)
            .collect()
    }

    #[test]
    fn collecting_into_a_replay_again_records_new_scenes_unless_seeds_are_given() {
        let dir = tempfile::tempdir().unwrap();
        let config = CollectConfig {
            episodes: 3,
            ..CollectConfig::default()
        };
        let first = collect_demonstrations(&config, dir.path(), false).unwrap();
        assert_eq!(first.seeds, Some((0, 2)));
        let second = collect_demonstrations(&config, dir.path(), false).unwrap();
        assert_eq!(second.seeds, Some((3, 5)));
        assert_eq!(seeds(dir.path()), [0, 1, 2, 3, 4, 5]);
        let given = CollectConfig {
            first_seed: Some(1),
            episodes: 2,
            ..config
        };
        let repeated = collect_demonstrations(&given, dir.path(), false).unwrap();
        assert_eq!(repeated.seeds, Some((1, 2)));
        let episodes = read_replay(dir.path()).unwrap().episodes;
        assert_eq!(episodes.len(), 8);
        let actions = |e: &Episode| -> Vec<Vec<f32>> {
            e.transitions.iter().map(|t| t.action.0.clone()).collect()
        };
        assert_eq!(
            actions(&episodes[1]),
            actions(&episodes[6]),
            "the same seed records the same demonstration"
        );
        assert_ne!(actions(&episodes[1]), actions(&episodes[4]));
    }

    #[test]
    fn perturbed_demonstrations_record_the_experts_command_and_send_a_correlated_perturbation() {
        // The safety envelope opened, so that what ran is what was sent.
        let robot = crate::robot::reacher2d_with(
            "max_steps = 200\n[safety]\nmax_rate = 100.0\ntrip_factor = 1000.0",
        );
        let limit = robot.spec().action_limit;
        let collect = |sigma: f32, out: &Path| {
            let config = CollectConfig {
                robot: robot.clone(),
                expert: ExpertConfig::noiseless(),
                perturbation: Perturbation {
                    sigma,
                    correlation: 0.8,
                },
                episodes: 12,
                first_seed: Some(7),
            };
            collect_demonstrations(&config, out, false).unwrap();
            read_replay(out).unwrap().episodes
        };
        let (plain, perturbed) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let plain = collect(0.0, plain.path());
        let perturbed = collect(0.2, perturbed.path());
        // Without a perturbation the robot runs the expert's commands.
        for t in plain.iter().flat_map(|e| &e.transitions) {
            assert_eq!(t.action, t.executed);
        }
        // With one, the robot leaves the expert's path, and what ran differs from the
        // recorded label (the expert's command) by noise of about the asked spread,
        // correlated from tick to tick.
        assert_ne!(
            plain[0].transitions[5..]
                .iter()
                .map(|t| &t.observation.proprio)
                .collect::<Vec<_>>(),
            perturbed[0].transitions[5..]
                .iter()
                .map(|t| &t.observation.proprio)
                .collect::<Vec<_>>(),
            "the perturbation moves the robot off the expert's path"
        );
        let noise: Vec<Vec<f32>> = perturbed
            .iter()
            .map(|e| {
                e.transitions
                    .iter()
                    .filter(|t| {
                        t.executed
                            .0
                            .iter()
                            .zip(&limit)
                            .all(|(v, l)| v.abs() < 0.99 * l)
                    })
                    .map(|t| (t.executed.0[0] - t.action.0[0]) / limit[0])
                    .collect()
            })
            .collect();
        let all: Vec<f32> = noise.iter().flatten().copied().collect();
        assert!(all.len() > 100, "{} unclamped ticks", all.len());
        let spread = (all.iter().map(|n| n * n).sum::<f32>() / all.len() as f32).sqrt();
        assert!((0.1..0.3).contains(&spread), "spread {spread}");
        let (mut lagged, mut energy) = (0.0, 0.0);
        for n in &noise {
            for pair in n.windows(2) {
                lagged += pair[0] * pair[1];
                energy += pair[0] * pair[0];
            }
        }
        let correlation = lagged / energy;
        assert!(
            (0.5..0.95).contains(&correlation),
            "lag-1 correlation {correlation}"
        );
        let bad = CollectConfig {
            perturbation: Perturbation {
                sigma: 2.0,
                correlation: 0.8,
            },
            ..CollectConfig::default()
        };
        let err = bad.validate().unwrap_err().to_string();
        assert!(
            err.contains("perturbation") && err.contains("sigma"),
            "{err}"
        );
    }
}
