//! Behaviour cloning of a VLA policy from recorded episodes.

use std::borrow::Cow;

use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use imago_policies::{ImitationTargets, Policy, PolicyBatch, PolicyConfig, imitation_loss};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::learn::frame_shift::FrameShifter;
use crate::learn::schedule::warmup_cosine;
use crate::learn::weight_average::{WeightAverage, WeightAverageConfig};
use crate::progress;
use crate::store::replay::{Episode, Transition, transition_indices};

/// Behaviour-cloning settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BcConfig {
    /// Optimiser steps.
    pub steps: usize,
    /// Transitions per step.
    pub batch_size: usize,
    /// Peak learning rate (Adam).
    pub learning_rate: f64,
    /// Steps of linear warm-up before the cosine decay.
    pub warmup_steps: usize,
    /// Gradient norm clip.
    pub grad_clip: f32,
    /// Seed of the batch sampler and the initial weights.
    pub seed: u64,
    /// Write the exponential moving average of the weights over the steps
    /// (`learn::weight_average`) instead of the last step's; `None`: the last step's.
    pub average: Option<WeightAverageConfig>,
    /// Largest random shift, in camera pixels, of each training frame
    /// ([`FrameShifter`]); 0: frames as recorded. Range: [0,
    /// [`crate::learn::frame_shift::MAX_FRAME_SHIFT`]].
    pub frame_shift: u32,
}

impl Default for BcConfig {
    fn default() -> Self {
        Self {
            steps: 1500,
            batch_size: 64,
            learning_rate: 1e-3,
            warmup_steps: 50,
            grad_clip: 1.0,
            seed: 0,
            average: None,
            frame_shift: 0,
        }
    }
}

impl BcConfig {
    /// Learning rate at `step`: linear warm-up, then cosine decay to a tenth.
    pub fn learning_rate_at(&self, step: usize) -> f64 {
        warmup_cosine(step, self.steps, self.warmup_steps, self.learning_rate)
    }
}

/// Transitions of recorded episodes, each paired with the chunk of `K` actions that
/// followed it (steps past the episode's end are masked out): what behaviour cloning
/// and advantage-weighted fine-tuning fit.
pub struct ImitationDataset<'a> {
    episodes: &'a [Episode],
    samples: Vec<(usize, usize)>,
    chunk_len: usize,
    action_limit: Vec<f32>,
}

impl<'a> ImitationDataset<'a> {
    /// Every transition of `episodes`, for a policy with `config`.
    pub fn new(episodes: &'a [Episode], config: &PolicyConfig) -> Self {
        Self {
            episodes,
            samples: transition_indices(episodes),
            chunk_len: config.chunk_len(),
            action_limit: config.action_limit().to_vec(),
        }
    }

    /// The same dataset with the transitions of the episodes `keep` accepts only
    /// (filtered behaviour cloning: a demonstrator's failures left out).
    pub fn of_episodes(mut self, keep: impl Fn(&Episode) -> bool) -> Self {
        let episodes = self.episodes;
        self.samples.retain(|&(e, _)| keep(&episodes[e]));
        self
    }

    /// Number of transitions.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether there is no transition.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The episode and step index of transition `i`.
    pub fn sample(&self, i: usize) -> (usize, usize) {
        self.samples[i]
    }

    /// Every transition's episode and step index, in replay order.
    pub fn samples(&self) -> &[(usize, usize)] {
        &self.samples
    }

    /// The episodes the transitions come from.
    pub fn episodes(&self) -> &'a [Episode] {
        self.episodes
    }

    /// Fills `batch` with the observations of `indices` (their frames shifted by
    /// `frames` if given) and returns their action-chunk targets on `device`, each
    /// transition weighted by `weights` if given.
    pub fn targets<B: Backend>(
        &self,
        indices: &[usize],
        weights: Option<Vec<f32>>,
        frames: Option<&mut FrameShifter>,
        batch: &mut PolicyBatch,
        device: &B::Device,
    ) -> anyhow::Result<ImitationTargets<B>> {
        let (actions, mask) = self.fill(indices, frames, batch)?;
        let (n, k, a) = (indices.len(), self.chunk_len, self.action_limit.len());
        Ok(ImitationTargets {
            actions: Tensor::from_data(TensorData::new(actions, [n, k, a]), device),
            mask: Tensor::from_data(TensorData::new(mask, [n, k]), device),
            weights: weights.map(|w| Tensor::from_data(TensorData::new(w, [n]), device)),
        })
    }

    /// Fills `batch` with the observations of `indices` and returns the normalised
    /// action chunks `[n, K, A]` and their validity mask `[n, K]`, flattened.
    fn fill(
        &self,
        indices: &[usize],
        mut frames: Option<&mut FrameShifter>,
        batch: &mut PolicyBatch,
    ) -> anyhow::Result<(Vec<f32>, Vec<f32>)> {
        batch.clear();
        let a = self.action_limit.len();
        let mut targets = Vec::with_capacity(indices.len() * self.chunk_len * a);
        let mut mask = Vec::with_capacity(indices.len() * self.chunk_len);
        for &i in indices {
            let (e, t) = self.samples[i];
            let episode = &self.episodes[e].transitions;
            let observation = match frames.as_deref_mut() {
                Some(shifter) => shifter.shift(&episode[t].observation),
                None => Cow::Borrowed(&episode[t].observation),
            };
            batch.push(&observation).map_err(|err| {
                anyhow::anyhow!("episode {} step {t}: {err}", self.episodes[e].start.episode)
            })?;
            let mut chunk = chunk_from(episode, t);
            for _ in 0..self.chunk_len {
                match chunk.next() {
                    Some(next) => {
                        mask.push(1.0);
                        targets.extend(
                            next.action
                                .0
                                .iter()
                                .zip(&self.action_limit)
                                .map(|(v, l)| (v / l).clamp(-1.0, 1.0)),
                        );
                    }
                    None => {
                        mask.push(0.0);
                        targets.extend(std::iter::repeat_n(0.0, a));
                    }
                }
            }
        }
        Ok((targets, mask))
    }
}

/// The transitions whose commands form the target chunk of `episode[t]`: the
/// episode from `t` on, except that an intervention's chunk ends where the
/// intervention does (the commands after it are the policy's, not what the expert
/// meant to do next).
pub fn chunk_from(episode: &[Transition], t: usize) -> impl Iterator<Item = &Transition> {
    let intervention = episode[t].intervention;
    episode[t..]
        .iter()
        .take_while(move |next| !intervention || next.intervention)
}

/// Trains `policy` by behaviour cloning on `data`; returns it with the loss of every step.
pub fn train_bc<B: AutodiffBackend>(
    mut policy: Policy<B>,
    policy_config: &PolicyConfig,
    data: &ImitationDataset,
    config: &BcConfig,
    device: &B::Device,
) -> anyhow::Result<(Policy<B>, Vec<f32>)> {
    anyhow::ensure!(!data.is_empty(), "no transitions to train on");
    let mut optimizer = AdamConfig::new()
        .with_grad_clipping(Some(burn::grad_clipping::GradientClippingConfig::Norm(
            config.grad_clip,
        )))
        .init();
    let mut rng = StdRng::seed_from_u64(config.seed);
    let mut batch = PolicyBatch::new(&policy_config.input_spec());
    let mut losses = Vec::with_capacity(config.steps);
    let mut averaged = config.average.map(WeightAverage::new);
    let mut frames =
        (config.frame_shift > 0).then(|| FrameShifter::new(config.frame_shift, config.seed));
    let bar = progress::bar("train bc", config.steps as u64);
    for step in 0..config.steps {
        let indices: Vec<usize> = (0..config.batch_size)
            .map(|_| rng.random_range(0..data.len()))
            .collect();
        let targets = data.targets::<B>(&indices, None, frames.as_mut(), &mut batch, device)?;
        let loss = imitation_loss(&policy, batch.to_input(device), &targets, None);
        let value: f32 = loss.clone().into_scalar().elem();
        anyhow::ensure!(
            value.is_finite(),
            "behaviour-cloning loss became {value} at step {step}"
        );
        losses.push(value);
        let grads = GradientsParams::from_grads(loss.backward(), &policy);
        policy = optimizer.step(config.learning_rate_at(step), policy, grads);
        if let Some(average) = &mut averaged {
            average.update(&policy);
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    if let Some(average) = &averaged {
        policy = average.apply(policy);
    }
    Ok((policy, losses))
}

#[cfg(test)]
mod tests {
    use super::*;

    use imago_robots::{Action, Observation};

    /// Transition `step` of episode `episode`, commanded by the expert if `intervention`.
    fn transition(episode: u64, step: usize, intervention: bool) -> Transition {
        Transition {
            episode,
            step: step as u32,
            observation: Observation {
                image: None,
                proprio: vec![],
                instruction: String::new(),
            },
            action: Action(vec![step as f32]),
            executed: Action(vec![step as f32]),
            reward: 0.0,
            done: false,
            success: false,
            policy_version: 1,
            intervention,
            behaviour_log_prob: None,
        }
    }

    #[test]
    fn a_dataset_of_selected_episodes_samples_only_their_transitions() {
        use crate::store::replay::{EpisodeEnd, EpisodeStart};
        let episode = |id: u64, steps: usize, success: bool| Episode {
            start: EpisodeStart {
                episode: id,
                robot: "reacher2d".into(),
                seed: id,
                instruction: String::new(),
            },
            transitions: (0..steps).map(|t| transition(id, t, false)).collect(),
            end: EpisodeEnd {
                episode: id,
                steps: steps as u32,
                success,
                final_observation: transition(id, steps, false).observation,
            },
        };
        let episodes = [
            episode(0, 3, false),
            episode(1, 2, true),
            episode(2, 4, true),
        ];
        let config = PolicyConfig::for_robot(
            imago_policies::Architecture::Linear,
            &crate::robot::reacher2d_with("").spec(),
        )
        .unwrap();
        let all = ImitationDataset::new(&episodes, &config);
        assert_eq!(all.len(), 9);
        let successful = ImitationDataset::new(&episodes, &config).of_episodes(|e| e.end.success);
        assert_eq!(
            successful.samples(),
            [(1, 0), (1, 1), (2, 0), (2, 1), (2, 2), (2, 3)]
        );
        assert!(
            ImitationDataset::new(&episodes, &config)
                .of_episodes(|_| false)
                .is_empty()
        );
    }

    #[test]
    fn shifted_frames_change_the_batchs_pixels_not_its_targets() {
        use burn::backend::ndarray::NdArrayDevice;
        use burn::{Dispatch, DispatchDevice};
        use imago_robots::Image;

        use crate::store::replay::{EpisodeEnd, EpisodeStart};
        let spec = crate::robot::reacher2d_with("image_size = 32").spec();
        let config = PolicyConfig::for_robot(imago_policies::Architecture::Vla, &spec).unwrap();
        // A frame with a vertical edge (left half dark, right half light) at each step.
        let frame = |step: usize| {
            let mut image = Image::filled(32, 32, [20, 20, 20]);
            for y in 0..32 {
                for x in 16..32 {
                    let i = (y * 32 + x) * 3;
                    image.rgb[i..i + 3].copy_from_slice(&[200, 180, 160 + step as u8]);
                }
            }
            image
        };
        let transitions = (0..6)
            .map(|t| {
                let mut transition = transition(0, t, false);
                transition.observation.image = Some(frame(t));
                transition.observation.proprio = vec![0.1; spec.proprio_dim()];
                transition.observation.instruction = "reach the target".into();
                transition.action = Action(vec![0.01 * t as f32; spec.action_dim()]);
                transition
            })
            .collect();
        let episodes = [Episode {
            start: EpisodeStart {
                episode: 0,
                robot: "reacher2d".into(),
                seed: 0,
                instruction: String::new(),
            },
            transitions,
            end: EpisodeEnd {
                episode: 0,
                steps: 6,
                success: false,
                final_observation: transition(0, 6, false).observation,
            },
        }];
        let data = ImitationDataset::new(&episodes, &config);
        let device = DispatchDevice::NdArray(NdArrayDevice::Cpu);
        let indices = [0, 1, 2, 3, 4, 5, 0, 1];
        let read = |frames: Option<&mut FrameShifter>| {
            let mut batch = PolicyBatch::new(&config.input_spec());
            let targets = data
                .targets::<Dispatch>(&indices, None, frames, &mut batch, &device)
                .unwrap();
            let pixels: Vec<f32> = batch
                .to_input::<Dispatch>(&device)
                .frames()
                .into_data()
                .to_vec()
                .unwrap();
            let actions: Vec<f32> = targets.actions.into_data().to_vec().unwrap();
            (pixels, actions)
        };
        let (plain, plain_actions) = read(None);
        let (shifted, shifted_actions) = read(Some(&mut FrameShifter::new(4, 3)));
        let (again, _) = read(Some(&mut FrameShifter::new(4, 3)));
        assert_eq!(shifted_actions, plain_actions);
        assert_eq!(shifted.len(), plain.len());
        assert_ne!(shifted, plain, "a shift of up to 4 pixels moved no edge");
        assert_eq!(shifted, again, "the same seed shifts the same way");
        // The edge moved, no colour was made up: every pixel is one of the frame's.
        let dark = 20.0 / 255.0;
        assert!(
            shifted
                .iter()
                .all(|&v| (v - dark).abs() < 1e-6 || v > 150.0 / 255.0)
        );
    }

    #[test]
    fn an_interventions_chunk_ends_with_the_intervention() {
        // Policy, expert, expert, policy, expert.
        let flags = [false, true, true, false, true];
        let episode: Vec<Transition> = flags
            .iter()
            .enumerate()
            .map(|(step, &intervention)| transition(0, step, intervention))
            .collect();
        let steps = |t: usize| -> Vec<u32> { chunk_from(&episode, t).map(|x| x.step).collect() };
        // The policy's chunks run on through the expert's commands (what followed).
        assert_eq!(steps(0), vec![0, 1, 2, 3, 4]);
        assert_eq!(steps(3), vec![3, 4]);
        // The expert's stop where the policy took back over.
        assert_eq!(steps(1), vec![1, 2]);
        assert_eq!(steps(2), vec![2]);
        assert_eq!(steps(4), vec![4]);
    }

    #[test]
    fn learning_rate_warms_up_then_decays_to_a_tenth() {
        let config = BcConfig {
            steps: 100,
            warmup_steps: 10,
            learning_rate: 1.0,
            ..BcConfig::default()
        };
        assert!((config.learning_rate_at(0) - 0.1).abs() < 1e-9);
        assert!((config.learning_rate_at(9) - 1.0).abs() < 1e-9);
        assert!((config.learning_rate_at(10) - 1.0).abs() < 1e-9);
        assert!((config.learning_rate_at(100) - 0.1).abs() < 1e-9);
        assert!(config.learning_rate_at(50) < config.learning_rate_at(20));
    }
}
