//! Imagined rollouts drawn beside what really followed: a nearest-neighbour probe
//! decodes latents to the robot's tracked point (reacher2d's end effector, read from
//! proprioception through the robot's drawing hook), and each window's error,
//! disagreement and calibrated bound go to the rollout-error series.

use burn::prelude::*;
use imago_policies::{PolicyBatch, PolicyInput};
use imago_robots::Robot;
use imago_worldmodel::{LatentProbe, WorldModel, WorldModelConfig};

use super::decoded::LinearReadout;
use super::{host, observation_at, window_actions};
use crate::robot::{RobotConfig, SimRobot};
use crate::store::replay::Episode;
use crate::telemetry::{
    ImaginedBodies, ImaginedWindowEvent, Telemetry, TelemetryEvent, log_episode,
};

/// The tracked point of `robot` in a recorded observation's proprioception.
fn tracked_point(robot: &SimRobot, proprio: &[f32]) -> anyhow::Result<[f32; 2]> {
    robot
        .body_from_proprio(proprio)
        .last()
        .copied()
        .ok_or_else(|| anyhow::anyhow!("robot {} draws no tracked point", robot.spec().name))
}

/// Observations the probe is fitted on, at most.
const PROBE_SAMPLES: usize = 4096;
/// Neighbours the probe averages.
const PROBE_NEIGHBOURS: usize = 5;

/// What [`log_imagined_windows`] logged.
#[derive(Debug, Clone, PartialEq)]
pub struct ImaginedWindows {
    /// Episodes drawn with imagined rollouts.
    pub episodes: usize,
    /// Imagined rollouts drawn.
    pub windows: usize,
    /// The probe's fit error on its samples (metres, RMS over x and y).
    pub probe_rmse: f32,
}

/// The policy input of observations `0..=len` of `episode`, row by row.
fn episode_input<B: Backend>(
    batch: &mut PolicyBatch,
    episode: &Episode,
    device: &B::Device,
) -> anyhow::Result<PolicyInput<B>> {
    batch.clear();
    for k in 0..=episode.transitions.len() {
        batch
            .push(observation_at(episode, k))
            .map_err(|e| anyhow::anyhow!("episode {} step {k}: {e}", episode.start.episode))?;
    }
    Ok(batch.to_input::<B>(device))
}

/// Fits the tracked-point probe on target-encoder latents (the space the ensemble
/// predicts in) of up to [`PROBE_SAMPLES`] observations of `episodes`.
fn fit_probe<B: Backend>(
    robot: &SimRobot,
    model: &WorldModel<B>,
    batch: &mut PolicyBatch,
    episodes: &[Episode],
    device: &B::Device,
) -> anyhow::Result<LatentProbe> {
    let (mut latents, mut targets) = (Vec::new(), Vec::new());
    for episode in episodes {
        if latents.len() >= PROBE_SAMPLES {
            break;
        }
        let target = model.encode_target(&episode_input(batch, episode, device)?);
        let d = target.dims()[1];
        for (k, row) in host(target)?.chunks(d).enumerate() {
            latents.push(row.to_vec());
            targets.push(tracked_point(robot, &observation_at(episode, k).proprio)?.to_vec());
        }
    }
    LatentProbe::fit(&latents, &targets, PROBE_NEIGHBOURS)
        .map_err(|e| anyhow::anyhow!("tracked-point probe: {e}"))
}

/// Fits the probe on `probe_episodes`, then for the first `imagined_episodes` (of
/// the session's config) of `episodes` long enough for `horizon`: logs the episode
/// step by step, and from every `imagine_every`-th step rolls every ensemble member
/// open loop under the recorded actions, decodes the imagined latents to the end
/// effector and logs them beside the real path, with the error, disagreement and
/// calibrated bound meant to hold 95.4% (`wide_scale[h] * mean member std * sqrt(D)`,
/// `wide_scale` [`super::WorldModelEvalReport::wide_interval_scale`])
/// per horizon; for a model with a state decoder, also the robot's drawing of the
/// decoded state at the horizon beside the real one (pusht: the block and pusher).
/// Waits for room in the queue. Without the recorded robot's settings
/// (`robot`: nothing to decode latents to) nothing is drawn.
pub fn log_imagined_windows<B: Backend>(
    telemetry: &Telemetry,
    model: &WorldModel<B>,
    config: &WorldModelConfig,
    (episodes, probe_episodes): (&[Episode], &[Episode]),
    wide_scale: &[f64],
    robot: Option<&RobotConfig>,
    device: &B::Device,
) -> anyhow::Result<ImaginedWindows> {
    let horizon = wide_scale.len();
    let settings = telemetry.config();
    // Drawn only for a robot imago simulates (a remote robot's replay is not).
    let Some(mut robot) = robot.and_then(|robot| robot.build().ok()) else {
        return Ok(ImaginedWindows {
            episodes: 0,
            windows: 0,
            probe_rmse: f32::NAN,
        });
    };
    if !telemetry.is_on() || horizon == 0 {
        return Ok(ImaginedWindows {
            episodes: 0,
            windows: 0,
            probe_rmse: f32::NAN,
        });
    }
    let mut batch = PolicyBatch::new(&config.input_spec());
    let probe = fit_probe(&robot, model, &mut batch, probe_episodes, device)?;
    let rmse = probe.fit_rmse();
    let probe_rmse = (rmse.iter().map(|e| e * e).sum::<f32>() / rmse.len() as f32).sqrt();
    telemetry.send(TelemetryEvent::ProbeFit(probe_rmse));
    let (d, a, n) = (config.latent_dim, config.action_dim(), config.ensemble_size);
    let decoder = model
        .state_decoder_weights()
        .map(|weights| LinearReadout::of_decoder(weights, d))
        .transpose()?;
    let (mut drawn, mut windows) = (0, 0);
    for episode in episodes
        .iter()
        .filter(|e| e.transitions.len() >= horizon)
        .take(settings.imagined_episodes)
    {
        log_episode(telemetry, episode, Some(&mut robot));
        let starts: Vec<usize> = (0..=episode.transitions.len() - horizon)
            .step_by(settings.imagine_every as usize)
            .collect();
        let w = starts.len();
        let input = episode_input(&mut batch, episode, device)?;
        let (online, target) = (model.encode(&input), model.encode_target(&input));
        let ids = |rows: Vec<i64>| {
            let count = rows.len();
            Tensor::<B, 1, Int>::from_data(TensorData::new(rows, [count]), device)
        };
        let start_latents = online.select(0, ids(starts.iter().map(|&t| t as i64).collect()));
        let actions = window_actions(
            episode,
            starts.iter().copied(),
            horizon,
            &config.action_limit,
        );
        let actions = Tensor::<B, 3>::from_data(TensorData::new(actions, [w, horizon, a]), device);
        let members = host(model.rollout_members(start_latents, actions).members)?;
        let target = host(target)?;
        let at = |m: usize, win: usize, k: usize| {
            let i = ((m * w + win) * horizon + k) * d;
            &members[i..i + d]
        };
        for (win, &t) in starts.iter().enumerate() {
            let origin = probe.predict(&target[t * d..(t + 1) * d]);
            let paths = (0..n)
                .map(|m| {
                    std::iter::once([origin[0], origin[1]])
                        .chain((0..horizon).map(|k| {
                            let p = probe.predict(at(m, win, k));
                            [p[0], p[1]]
                        }))
                        .collect()
                })
                .collect();
            let real = (t..=t + horizon)
                .map(|k| tracked_point(&robot, &observation_at(episode, k).proprio))
                .collect::<anyhow::Result<_>>()?;
            let (mut error, mut disagreement, mut interval) = (Vec::new(), Vec::new(), Vec::new());
            for k in 0..horizon {
                let truth = &target[(t + k + 1) * d..(t + k + 2) * d];
                let (mut sq, mut var_sum, mut std_sum) = (0.0f32, 0.0f32, 0.0f32);
                for (j, &true_value) in truth.iter().enumerate() {
                    let values: Vec<f32> = (0..n).map(|m| at(m, win, k)[j]).collect();
                    let mean = values.iter().sum::<f32>() / n as f32;
                    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f32>()
                        / (n.max(2) - 1) as f32;
                    sq += (mean - true_value).powi(2);
                    var_sum += var;
                    std_sum += var.sqrt();
                }
                error.push(sq.sqrt());
                disagreement.push(var_sum.sqrt());
                interval.push(wide_scale[k] as f32 * (std_sum / d as f32) * (d as f32).sqrt());
            }
            let bodies = decoder.as_ref().map(|readout| {
                // The ensemble mean at the horizon, anchored to the measured start.
                let mean: Vec<f32> = (0..d)
                    .map(|j| (0..n).map(|m| at(m, win, horizon - 1)[j]).sum::<f32>() / n as f32)
                    .collect();
                let start = &target[t * d..(t + 1) * d];
                let imagined_state: Vec<f32> = readout
                    .anchored(
                        &observation_at(episode, t).proprio,
                        &readout.apply(start),
                        &mean,
                    )
                    .into_iter()
                    .map(|v| v as f32)
                    .collect();
                ImaginedBodies {
                    imagined: robot.body_from_proprio(&imagined_state),
                    real: robot.body_from_proprio(&observation_at(episode, t + horizon).proprio),
                }
            });
            telemetry.send(TelemetryEvent::Imagined(Box::new(ImaginedWindowEvent {
                episode: episode.start.episode,
                start_step: t as u32,
                members: paths,
                real,
                error,
                disagreement,
                interval,
                bodies,
            })));
            windows += 1;
        }
        drawn += 1;
    }
    Ok(ImaginedWindows {
        episodes: drawn,
        windows,
        probe_rmse,
    })
}
