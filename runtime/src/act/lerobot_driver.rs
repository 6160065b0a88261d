//! A LeRobot policy driving imago's robots: each observation read in the units of the
//! robot's LeRobot datasets (`Robot::lerobot_units`: pusht's pusher in gym-pusht's
//! pixels) with its camera frame as pixels in [0, 1], LeRobot's action turned back into
//! the robot's, and the policy's queues kept per episode. The features the policy
//! reads are checked against what the robot gives once, before the first episode.

use burn::prelude::*;
use imago_policies::act::ActEpisode;
use imago_policies::diffusion::{DiffusionEpisode, StandardNormal};
use imago_policies::lerobot::features::{ACTION_KEY, ENV_STATE_KEY, STATE_KEY};
use imago_policies::lerobot::{PolicyFeatures, TickObservation};
use imago_robots::{Action, EnvState, Image, LeRobotUnits, Observation, RobotSpec};

use crate::store::lerobot_policy::LeRobotPolicy;

/// What one episode keeps between ticks.
#[derive(Debug)]
pub enum LeRobotEpisode<B: Backend> {
    /// A Diffusion Policy's observation history and action queue.
    Diffusion(DiffusionEpisode<B>),
    /// ACT's action queue or ensembler.
    Act(ActEpisode<B>),
}

/// A LeRobot policy's features bound to a robot that gives them: how the robot's
/// observations and commands read in the policy's terms, on one device.
#[derive(Debug, Clone)]
pub struct LeRobotBinding<B: Backend> {
    units: LeRobotUnits,
    reads_state: bool,
    /// The environment state the policy reads, if it reads one (checked against the
    /// robot's).
    env_state: Option<EnvState>,
    /// Cameras the policy reads (0 or 1: checked against the robot's).
    cameras: usize,
    device: B::Device,
}

impl<B: Backend> LeRobotBinding<B> {
    /// `policy` bound to robots of `spec` read in `units`, on `device`; a policy that
    /// reads features the robot does not give (another state or action length, a
    /// second camera, another image size, an environment state the robot does not give)
    /// is one error naming both sides.
    pub fn new<P: Backend>(
        policy: &LeRobotPolicy<P>,
        (spec, units): (&RobotSpec, LeRobotUnits),
        device: &B::Device,
    ) -> anyhow::Result<Self> {
        let (inputs, outputs) = policy.features();
        check_features(policy.kind(), (inputs, outputs), spec, &units)?;
        Ok(Self {
            env_state: units
                .env_state
                .filter(|_| inputs.get(ENV_STATE_KEY).is_some()),
            units,
            reads_state: inputs.get(STATE_KEY).is_some(),
            cameras: inputs.camera_keys().len(),
            device: device.clone(),
        })
    }

    /// The device its tensors are made on.
    pub fn device(&self) -> &B::Device {
        &self.device
    }

    /// The robot's command `action` as the policy writes it (LeRobot's units): what a
    /// recorded command becomes as a training target.
    pub fn lerobot_action(&self, action: &Action) -> Vec<f32> {
        self.units.action_of(action)
    }

    /// `observation` as the policy reads it (one sample, raw: LeRobot's units, pixels
    /// in [0, 1]).
    pub fn tick_observation(
        &self,
        observation: &Observation,
    ) -> anyhow::Result<TickObservation<B>> {
        let state = self.units.state_of(&observation.proprio);
        let state_len = if self.reads_state { state.len() } else { 0 };
        let state = Tensor::from_data(
            TensorData::new(state[..state_len].to_vec(), [1, state_len]),
            &self.device,
        );
        let images = match (&observation.image, self.cameras) {
            (_, 0) => Vec::new(),
            (Some(image), _) => vec![pixels(image, &self.device)],
            (None, _) => {
                anyhow::bail!("the policy reads a camera but the observation has no frame")
            }
        };
        let env_state = match self.env_state {
            Some(kind) => {
                let values = kind.of(&observation.proprio).ok_or_else(|| {
                    anyhow::anyhow!(
                        "the observation's proprioception ({} values) holds no environment state",
                        observation.proprio.len()
                    )
                })?;
                let len = values.len();
                Some(Tensor::from_data(
                    TensorData::new(values, [1, len]),
                    &self.device,
                ))
            }
            None => None,
        };
        Ok(TickObservation {
            state,
            images,
            env_state,
        })
    }
}

/// A LeRobot policy acting on a robot whose features it reads.
#[derive(Debug)]
pub struct LeRobotDriver<B: Backend> {
    policy: LeRobotPolicy<B>,
    binding: LeRobotBinding<B>,
}

impl<B: Backend> LeRobotDriver<B> {
    /// `policy` driving robots of `spec` read in `units`, on `device`; see
    /// [`LeRobotBinding::new`] for the features checked.
    pub fn new(
        policy: LeRobotPolicy<B>,
        robot: (&RobotSpec, LeRobotUnits),
        device: &B::Device,
    ) -> anyhow::Result<Self> {
        let binding = LeRobotBinding::new(&policy, robot, device)?;
        Ok(Self { policy, binding })
    }

    /// The policy.
    pub fn policy(&self) -> &LeRobotPolicy<B> {
        &self.policy
    }

    /// The device the policy runs on.
    pub fn device(&self) -> &B::Device {
        self.binding.device()
    }

    /// The state of a new episode.
    pub fn new_episode(&self) -> LeRobotEpisode<B> {
        match &self.policy {
            LeRobotPolicy::Diffusion(_) => LeRobotEpisode::Diffusion(DiffusionEpisode::default()),
            LeRobotPolicy::Act(p) => LeRobotEpisode::Act(p.new_episode()),
        }
    }

    /// The action for this tick of each episode, given its observation; the episodes
    /// that need a new chunk predict it together, as one batch.
    pub fn act(
        &self,
        lanes: Vec<(&mut LeRobotEpisode<B>, &Observation)>,
    ) -> anyhow::Result<Vec<Action>> {
        let mut ticks = Vec::with_capacity(lanes.len());
        for (_, observation) in &lanes {
            ticks.push(self.binding.tick_observation(observation)?);
        }
        let actions = match &self.policy {
            LeRobotPolicy::Diffusion(p) => {
                let lanes = paired(lanes, ticks, |episode| match episode {
                    LeRobotEpisode::Diffusion(e) => Some(e),
                    LeRobotEpisode::Act(_) => None,
                })?;
                p.select_actions(lanes, &mut StandardNormal)
            }
            LeRobotPolicy::Act(p) => {
                p.select_actions(paired(lanes, ticks, |episode| match episode {
                    LeRobotEpisode::Act(e) => Some(e),
                    LeRobotEpisode::Diffusion(_) => None,
                })?)
            }
        };
        actions
            .into_iter()
            .map(|action| {
                let values: Vec<f32> = action
                    .into_data()
                    .convert::<f32>()
                    .to_vec()
                    .map_err(|e| anyhow::anyhow!("the policy's action: {e:?}"))?;
                anyhow::ensure!(
                    values.iter().all(|v| v.is_finite()),
                    "the policy's action is not finite: {values:?}"
                );
                Ok(self.binding.units.action_from(&values))
            })
            .collect()
    }
}

/// Each lane's episode state of the kind `pick` takes, with its tick's observation; an
/// episode of another policy is an error.
fn paired<'e, B: Backend, E>(
    lanes: Vec<(&'e mut LeRobotEpisode<B>, &Observation)>,
    ticks: Vec<TickObservation<B>>,
    pick: impl Fn(&'e mut LeRobotEpisode<B>) -> Option<&'e mut E>,
) -> anyhow::Result<Vec<(&'e mut E, TickObservation<B>)>> {
    lanes
        .into_iter()
        .zip(ticks)
        .map(|((episode, _), tick)| {
            let episode =
                pick(episode).ok_or_else(|| anyhow::anyhow!("an episode of another policy"))?;
            Ok((episode, tick))
        })
        .collect()
}

/// A camera frame as LeRobot's policies read it: `[1, 3, height, width]`, in [0, 1].
fn pixels<B: Backend>(image: &Image, device: &B::Device) -> Tensor<B, 4> {
    let (h, w) = (image.height as usize, image.width as usize);
    let mut planar = vec![0.0f32; 3 * h * w];
    for (p, rgb) in image.rgb.chunks_exact(3).enumerate() {
        for c in 0..3 {
            planar[c * h * w + p] = rgb[c] as f32 / 255.0;
        }
    }
    Tensor::from_data(TensorData::new(planar, [1, 3, h, w]), device)
}

/// Checks that a `kind` policy's features are what a robot of `spec` gives in `units`.
fn check_features(
    kind: &str,
    (inputs, outputs): (&PolicyFeatures, &PolicyFeatures),
    spec: &RobotSpec,
    units: &LeRobotUnits,
) -> anyhow::Result<()> {
    let robot = &spec.name;
    let policy = format!("the LeRobot {kind} policy");
    if let Some(len) = inputs.vector_len(ENV_STATE_KEY, "input_features")? {
        match units.env_state {
            None => anyhow::bail!(
                "{policy} reads `{ENV_STATE_KEY}`, which {robot} does not give (it gives `{STATE_KEY}` and a camera)"
            ),
            Some(given) => anyhow::ensure!(
                len == given.len(),
                "{policy} reads `{ENV_STATE_KEY}` of {len} values; {robot} gives {} ({given:?})",
                given.len()
            ),
        }
    }
    let state_names: Vec<&str> = units
        .state
        .iter()
        .map(|&(i, _)| spec.proprio_names.get(i).map_or("?", String::as_str))
        .collect();
    if let Some(len) = inputs.vector_len(STATE_KEY, "input_features")? {
        anyhow::ensure!(
            len == units.state.len(),
            "{policy} reads `{STATE_KEY}` of {len} values; {robot} gives {} ({})",
            units.state.len(),
            state_names.join(", ")
        );
    }
    let action = outputs.required_len(ACTION_KEY, "output_features")?;
    anyhow::ensure!(
        action == units.action.len(),
        "{policy} writes actions of {action} values; {robot} takes {}",
        units.action.len()
    );
    let cameras = inputs.camera_keys();
    anyhow::ensure!(
        cameras.len() <= 1,
        "{policy} reads {} cameras ({}); {robot} has one",
        cameras.len(),
        cameras.join(", ")
    );
    if let Some([_, height, width]) = inputs.camera_shape()? {
        let Some(camera) = &spec.camera else {
            anyhow::bail!("{policy} reads a camera ({}); {robot} has none", cameras[0]);
        };
        anyhow::ensure!(
            (camera.height as usize, camera.width as usize) == (height, width),
            "{policy} reads {} images of {height}x{width} (height x width); {robot}'s camera gives {}x{} (set its image size in --robot-config)",
            cameras[0],
            camera.height,
            camera.width
        );
    }
    Ok(())
}
