//! The Gaussian head's imitation loss and its exact gradient with respect to every
//! parameter of a [`VlaPolicy`], computed on the host: the cloning and fine-tuning
//! steps of a Gaussian policy on a CPU.
//!
//! Why: through burn's autodiff a training step of the policy is several hundred
//! tensor operations, each with a dispatch, an allocation and a node of the autodiff
//! graph, over tensors of a few thousand values (44 tokens of 64 at batch 32). The
//! arithmetic is small and PyTorch's eager step took 2.4 times less time on the same
//! CPU (docs/performance.md). Here each observation's forward pass keeps its
//! activations, the backward pass is written out (layer norms, attention, GELU,
//! linear layers as `gemm` products), observations run in parallel and each thread
//! sums its own gradient. [`crate::loss::imitation_loss`] hands the gradient back to
//! burn as the surrogate `sum <G, theta>`, whose gradient is `G`: burn's optimiser,
//! gradient clipping and checkpoints see the step they always saw. The tests hold the
//! loss and every parameter's gradient to burn's autodiff.

mod gradient;
mod layers;

use burn::prelude::*;
use rayon::prelude::*;

use crate::activation::gelu_with_slope_to;
use crate::head::GaussianHead;
use crate::host::{HostPolicy, token_kind};
use crate::input::{BatchRow, PolicyInput};
use crate::model::VlaPolicy;
use crate::readback::values;
use crate::stem_tape::StemLayers;

use crate::host_linear::{HostLinear, LinearGradient};
use gradient::{PolicyGradient, surrogate};
use layers::LayerTape;

/// One observation of an imitation step: the policy's input, the recorded chunk and
/// how much each of its steps counts.
pub(crate) struct ImitationRow<'a> {
    pub input: BatchRow<'a>,
    /// The recorded chunk, `[K * A]` in units of the action limit.
    pub actions: &'a [f32],
    /// Each chunk step's weight, `[K]`, already divided by the batch's total weight
    /// magnitude:
    /// the loss is the sum over rows of these times the steps' negative
    /// log-likelihoods.
    pub weights: &'a [f32],
    /// The weight of the row's keypoint-target error: the policy's target weight over
    /// the batch's rows.
    pub target_weight: f32,
}

impl HostPolicy {
    /// The imitation loss over `rows` and its gradient with respect to every
    /// parameter; rows in parallel.
    pub(crate) fn imitation_gradient(&self, rows: &[ImitationRow<'_>]) -> (f32, PolicyGradient) {
        let per_thread = rows.len().div_ceil(rayon::current_num_threads()).max(1);
        let (loss, gradient) = rows
            .par_iter()
            .with_min_len(per_thread)
            .fold(
                || (0.0, PolicyGradient::zeros(self)),
                |(loss, mut gradient), row| {
                    let row_loss = self.row_gradient(row, &mut gradient);
                    (loss + row_loss, gradient)
                },
            )
            .reduce_with(|(a, ga), (b, gb)| (a + b, ga.add(gb)))
            .unwrap_or_else(|| (0.0, PolicyGradient::zeros(self)));
        (loss, gradient.finish(self.image_size / self.patch_size))
    }

    /// One row's loss; its gradient is added to `g`.
    fn row_gradient(&self, row: &ImitationRow<'_>, g: &mut PolicyGradient) -> f32 {
        let input = &row.input;
        let d = self.d;
        let words = input.words.len();
        let channels = self.keypoint_sharpness.len();
        let grid = self.image_size / self.patch_size;
        let patches = grid * grid;
        let seq = 2 + words + patches;
        let pad = input.token_padding(patches);

        // The instruction: word tokens and their weighted mean; FiLM's gain and shift.
        let mut word_tokens = vec![0.0; words * d];
        for (w, &id) in input.words.iter().enumerate() {
            let id = id as usize;
            for j in 0..d {
                word_tokens[w * d + j] =
                    self.word_embed[id * d + j] + self.word_position[w * d + j];
            }
        }
        let mut instruction = vec![0.0; d];
        for (w, &weight) in input.word_weights.iter().enumerate() {
            for j in 0..d {
                instruction[j] += word_tokens[w * d + j] * weight;
            }
        }
        let mut film = vec![0.0; 2 * channels];
        self.film.forward(1, &instruction, &mut film);
        let (gain_less_one, shift) = film.split_at(channels);
        let gain: Vec<f32> = gain_less_one.iter().map(|g| g + 1.0).collect();
        let scale: Vec<f32> = gain
            .iter()
            .zip(&self.keypoint_sharpness)
            .map(|(g, s)| g * s)
            .collect();

        // The stem's readings, its activations kept for the backward pass.
        let stem = self.stem_layers().forward_kept(input.images, &scale);
        let (keypoints, means) = (&stem.keypoints, &stem.patch_means);
        let mut pooled = vec![0.0; patches * channels];
        for n in 0..patches {
            for c in 0..channels {
                pooled[n * channels + c] = means[n * channels + c] * gain[c] + shift[c];
            }
        }

        // The token sequence: readout, proprioception, words, patches.
        let mut tokens = vec![0.0; seq * d];
        let patch_rows = &mut tokens[(2 + words) * d..];
        self.patch_embed.forward(patches, &pooled, patch_rows);
        patch_rows
            .iter_mut()
            .zip(&self.patch_position)
            .for_each(|(t, p)| *t += p);
        tokens[2 * d..(2 + words) * d].copy_from_slice(&word_tokens);
        let mut proprio = vec![0.0; d];
        self.proprio_embed.forward(1, input.proprio, &mut proprio);
        let mut embedded = vec![0.0; d];
        self.keypoint_embed.forward(1, keypoints, &mut embedded);
        for j in 0..d {
            tokens[j] = instruction[j] + proprio[j] + embedded[j];
            tokens[d + j] = proprio[j];
        }
        for t in 0..seq {
            let kind = token_kind(t, words);
            for j in 0..d {
                tokens[t * d + j] += self.token_type[kind * d + j];
            }
        }

        let last = self.layers.len().saturating_sub(1);
        let tapes: Vec<LayerTape> = self
            .layers
            .iter()
            .enumerate()
            .map(|(i, layer)| {
                let queries = if i == last { 1 } else { seq };
                layer.forward_kept(&mut tokens, queries, &pad, d)
            })
            .collect();

        // The head and the loss, and the head's backward pass.
        let readout = self.readout_norm.forward_kept(&tokens[..d]);
        let mut pre = vec![0.0; d];
        self.head_hidden.forward(1, &readout.output, &mut pre);
        let (mut hidden, mut slope) = (vec![0.0; d], vec![0.0; d]);
        gelu_with_slope_to(&pre, &mut hidden, &mut slope);
        let ka = self.chunk_len * self.action_dim;
        let mut out = vec![0.0; 2 * ka];
        self.head_out.forward(1, &hidden, &mut out);
        let (low, high) = self.log_std_range;
        let mut loss = 0.0;
        let mut d_out = vec![0.0; 2 * ka];
        for i in 0..ka {
            let weight = row.weights[i / self.action_dim];
            let mean = out[i] + input.action_origin[i % self.action_dim];
            let squashed = 1.0 / (1.0 + (-out[ka + i]).exp());
            let log_std = squashed * (high - low) + low;
            let inverse_std = (-log_std).exp();
            let z = (row.actions[i] - mean) * inverse_std;
            loss += weight * (0.5 * z * z + log_std);
            d_out[i] = -weight * z * inverse_std;
            d_out[ka + i] = weight * (1.0 - z * z) * (high - low) * squashed * (1.0 - squashed);
        }
        let mut d_hidden = vec![0.0; d];
        self.head_out
            .backward(1, &hidden, &d_out, &mut g.head_out, Some(&mut d_hidden));
        d_hidden.iter_mut().zip(&slope).for_each(|(g, s)| *g *= s);
        let mut d_readout = vec![0.0; d];
        self.head_hidden.backward(
            1,
            &readout.output,
            &d_hidden,
            &mut g.head_hidden,
            Some(&mut d_readout),
        );
        let mut d_tokens = vec![0.0; d];
        self.readout_norm
            .backward(&readout, &d_readout, &mut g.readout_norm, &mut d_tokens);

        // The encoder's backward pass.
        for ((layer, tape), gradient) in self.layers.iter().zip(&tapes).zip(&mut g.layers).rev() {
            d_tokens = layer.backward(tape, &d_tokens, d, gradient);
        }

        // The tokens' backward pass.
        for t in 0..seq {
            let kind = token_kind(t, words);
            for j in 0..d {
                g.token_type[kind * d + j] += d_tokens[t * d + j];
            }
        }
        let d_readout_token = &d_tokens[..d];
        let d_proprio: Vec<f32> = (0..d)
            .map(|j| d_readout_token[j] + d_tokens[d + j])
            .collect();
        self.proprio_embed
            .backward(1, input.proprio, &d_proprio, &mut g.proprio_embed, None);
        let mut d_keypoints = vec![0.0; 2 * channels];
        self.keypoint_embed.backward(
            1,
            keypoints,
            d_readout_token,
            &mut g.keypoint_embed,
            Some(&mut d_keypoints),
        );
        if let (Some(readout), Some(gradient)) = (&self.keypoint_readout, &mut g.keypoint_readout)
            && !input.targets.is_empty()
        {
            loss += self.keypoint_target_loss(
                readout,
                (keypoints, input.targets, row.target_weight),
                gradient,
                &mut d_keypoints,
            );
        }
        let d_patch_tokens = &d_tokens[(2 + words) * d..];
        g.patch_position
            .iter_mut()
            .zip(d_patch_tokens)
            .for_each(|(g, d)| *g += d);
        let mut d_pooled = vec![0.0; patches * channels];
        self.patch_embed.backward(
            patches,
            &pooled,
            d_patch_tokens,
            &mut g.patch_embed,
            Some(&mut d_pooled),
        );

        // pooled = means * gain + shift; then the stem, whose softmax's scale is
        // gain * sharpness.
        let mut d_film = vec![0.0; 2 * channels];
        let (d_gain, d_shift) = d_film.split_at_mut(channels);
        let mut d_means = vec![0.0; patches * channels];
        for n in 0..patches {
            for c in 0..channels {
                let d_p = d_pooled[n * channels + c];
                d_gain[c] += d_p * means[n * channels + c];
                d_shift[c] += d_p;
                d_means[n * channels + c] = d_p * gain[c];
            }
        }
        let d_scale = self.stem_layers().backward(
            &stem,
            &scale,
            &d_keypoints,
            &d_means,
            &mut g.stem,
            &mut g.stem_mixing,
        );
        for c in 0..channels {
            d_gain[c] += d_scale[c] * self.keypoint_sharpness[c];
            g.keypoint_sharpness[c] += d_scale[c] * gain[c];
        }

        // The instruction: FiLM, the readout token, the word tokens.
        let mut d_instruction = d_readout_token.to_vec();
        self.film.backward(
            1,
            &instruction,
            &d_film,
            &mut g.film,
            Some(&mut d_instruction),
        );
        for (w, &id) in input.words.iter().enumerate() {
            let id = id as usize;
            let weight = input.word_weights[w];
            for j in 0..d {
                let d_word = d_tokens[(2 + w) * d + j] + weight * d_instruction[j];
                g.word_embed[id * d + j] += d_word;
                g.word_position[w * d + j] += d_word;
            }
        }
        loss
    }
}

impl HostPolicy {
    /// One row's keypoint-target loss, `weight * |readout(keypoints) - targets|^2`;
    /// its gradient is added to the readout's and to `d_keypoints`.
    fn keypoint_target_loss(
        &self,
        readout: &HostLinear,
        (keypoints, targets, weight): (&[f32], &[f32], f32),
        gradient: &mut LinearGradient,
        d_keypoints: &mut [f32],
    ) -> f32 {
        let mut predicted = vec![0.0; targets.len()];
        readout.forward(1, keypoints, &mut predicted);
        let mut loss = 0.0;
        let mut d_predicted = vec![0.0; targets.len()];
        for ((p, t), d) in predicted.iter().zip(targets).zip(&mut d_predicted) {
            let error = p - t;
            loss += weight * error * error;
            *d = 2.0 * weight * error;
        }
        let mut d_from_targets = vec![0.0; d_keypoints.len()];
        readout.backward(
            1,
            keypoints,
            &d_predicted,
            gradient,
            Some(&mut d_from_targets),
        );
        d_keypoints
            .iter_mut()
            .zip(&d_from_targets)
            .for_each(|(d, e)| *d += e);
        loss
    }

    /// The stem's layers, as [`StemLayers`] runs them.
    fn stem_layers(&self) -> StemLayers<'_> {
        StemLayers {
            first: &self.stem,
            mixing: &self.stem_mixing,
            activation: self.stem_activation,
            size: self.image_size,
            patch: self.patch_size,
        }
    }
}

/// The Gaussian imitation loss of `policy` (whose head is `head`) on `input`, the
/// recorded chunks `actions` `[B, K, A]` and per-step weights `step_weights` `[B, K]`
/// (the weighted mean is self-normalised, as in [`crate::loss::gaussian_nll`]),
/// computed on the host: its value, plus a term that is zero in value and whose
/// gradient is the loss's gradient with respect to every parameter.
pub(crate) fn host_imitation_loss<B: Backend>(
    policy: &VlaPolicy<B>,
    head: &GaussianHead<B>,
    input: PolicyInput<B>,
    actions: Tensor<B, 3>,
    step_weights: Tensor<B, 2>,
) -> Tensor<B, 1> {
    let device = actions.device();
    let host = HostPolicy::of(policy).expect("a Gaussian head has a host copy");
    let [batch, k, a] = actions.dims();
    let ints = |t: Tensor<B, 2, Int>| -> Vec<i64> {
        t.into_data()
            .convert::<i64>()
            .into_vec()
            .expect("an int tensor converted to i64 reads as i64")
    };
    // Taken apart by value: a tensor read back while another handle still holds it
    // is copied first.
    let PolicyInput {
        images,
        instruction,
        proprio,
        action_origin,
        targets,
    } = input;
    let images = values(images.expect("a VLA's spec reads a camera"));
    let instruction = instruction.expect("a VLA's spec reads the instruction");
    let words = ints(instruction.words);
    let word_weights = values(instruction.weights);
    let pad: Vec<bool> = ints(instruction.padding.int())
        .iter()
        .map(|&p| p != 0)
        .collect();
    let proprio = values(proprio);
    let origin = values(action_origin);
    let actions = values(actions);
    let mut weights = values(step_weights);
    let total = weights.iter().map(|w| w.abs()).sum::<f32>().max(1e-6);
    weights.iter_mut().for_each(|w| *w /= total);
    let targets = targets.map(values).unwrap_or_default();
    let target_weight = host.keypoint_target_weight / batch as f32;
    let share = |values: &[f32]| values.len() / batch;
    let (pixels, max_words, inputs) = (share(&images), words.len() / batch, share(&proprio));
    let rows: Vec<ImitationRow<'_>> = (0..batch)
        .map(|b| ImitationRow {
            input: BatchRow {
                images: &images[b * pixels..][..pixels],
                words: &words[b * max_words..][..max_words],
                word_weights: &word_weights[b * max_words..][..max_words],
                word_pad: &pad[b * max_words..][..max_words],
                proprio: &proprio[b * inputs..][..inputs],
                action_origin: &origin[b * a..][..a],
                targets: &targets[b * share(&targets)..][..share(&targets)],
            },
            actions: &actions[b * k * a..][..k * a],
            weights: &weights[b * k..][..k],
            target_weight,
        })
        .collect();
    let (loss, gradient) = host.imitation_gradient(&rows);
    let surrogate = surrogate(policy, head, &gradient);
    Tensor::<B, 1>::from_floats([loss], &device) + (surrogate.clone() - surrogate.detach())
}

#[cfg(test)]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use burn::module::{Module, ModuleVisitor, Param};
    use burn::tensor::backend::AutodiffBackend;
    use imago_robots::pusht::PushT;
    use imago_robots::reacher2d::Reacher2d;
    use imago_robots::{Observation, Robot};

    use super::*;
    use crate::activation::StemActivation;
    use crate::head::ActionHead;
    use crate::host::tests::reacher_observations;
    use crate::input::PolicyBatch;
    use crate::loss::{ImitationTargets, tensor_imitation_loss};
    use crate::model::VlaPolicyConfig;
    use crate::policy::Policy;
    use crate::vision::StemInputs;

    type A = Autodiff<Flex>;

    /// Every float parameter's gradient, in the module's visiting order.
    struct GradientReader<'a> {
        gradients: &'a <A as AutodiffBackend>::Gradients,
        read: Vec<Option<Vec<f32>>>,
    }

    impl ModuleVisitor<A> for GradientReader<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<A, D>>) {
            self.read.push(param.val().grad(self.gradients).map(values));
        }
    }

    /// The loss and every parameter's gradient, on the host or through burn's autodiff.
    fn loss_and_gradients(
        policy: &VlaPolicy<A>,
        batch: &PolicyBatch,
        targets: &ImitationTargets<A>,
        host: bool,
    ) -> (f32, Vec<Option<Vec<f32>>>) {
        let input = batch.to_input(&Default::default());
        let loss = if host {
            let ActionHead::Gaussian(head) = policy.head() else {
                panic!("a Gaussian head");
            };
            let weights = targets.step_weights();
            host_imitation_loss(policy, head, input, targets.actions.clone(), weights)
        } else {
            tensor_imitation_loss(&Policy::Vla(policy.clone()), input, targets, None)
        };
        let value = loss.clone().into_scalar();
        let gradients = loss.backward();
        let mut reader = GradientReader {
            gradients: &gradients,
            read: Vec::new(),
        };
        policy.visit(&mut reader);
        (value, reader.read)
    }

    /// Holds the host loss and gradients to burn's: the loss within 1e-5 relative, each
    /// parameter's gradient within 1e-4 of its largest magnitude (or of 0.1 for
    /// gradients smaller than that: the key layers' biases, whose gradient is zero up
    /// to rounding because a softmax ignores what it adds to every score of a row).
    /// Measured: at most 2e-5 apart, 8e-5 of the largest magnitude.
    fn assert_matches_burn(
        config: &VlaPolicyConfig,
        observations: &[Observation],
        mask: Vec<f32>,
        weights: Option<Vec<f32>>,
    ) {
        let _serial = crate::AUTODIFF_TESTS
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let device = Default::default();
        <A as Backend>::seed(&device, 7);
        let policy = config.init::<A>(&device);
        let mut batch = PolicyBatch::new(&config.input_spec());
        for observation in observations {
            batch.push(observation).unwrap();
        }
        let (b, k, a) = (observations.len(), config.chunk_len, config.action_dim());
        let actions: Vec<f32> = (0..b * k * a)
            .map(|i| ((i * 7) % 11) as f32 / 11.0 - 0.5)
            .collect();
        let targets = ImitationTargets {
            actions: Tensor::from_data(TensorData::new(actions, [b, k, a]), &device),
            mask: Tensor::from_data(TensorData::new(mask, [b, k]), &device),
            weights: weights.map(|w| Tensor::from_data(TensorData::new(w, [b]), &device)),
        };
        let (host_loss, host) = loss_and_gradients(&policy, &batch, &targets, true);
        let (burn_loss, burn) = loss_and_gradients(&policy, &batch, &targets, false);
        assert!(
            (host_loss - burn_loss).abs() <= 1e-5 * burn_loss.abs().max(1.0),
            "loss {host_loss} against burn's {burn_loss}"
        );
        assert_eq!(host.len(), burn.len());
        for (i, (host, burn)) in host.iter().zip(&burn).enumerate() {
            let (Some(host), Some(burn)) = (host, burn) else {
                panic!(
                    "parameter {i}: gradient {:?} against burn's {:?}",
                    host.is_some(),
                    burn.is_some()
                );
            };
            let largest = burn.iter().fold(0.0f32, |m, g| m.max(g.abs()));
            let gap = host
                .iter()
                .zip(burn)
                .fold(0.0f32, |m, (h, b)| m.max((h - b).abs()));
            assert!(
                gap <= 1e-4 * largest.max(0.1),
                "parameter {i}: gradient gap {gap}, largest {largest}"
            );
        }
    }

    #[test]
    fn host_gradients_match_burns_for_behaviour_cloning() {
        let config = VlaPolicyConfig::for_robot(Reacher2d::default().spec()).unwrap();
        let observations = reacher_observations();
        let ones = vec![1.0; observations.len() * config.chunk_len];
        assert_matches_burn(&config, &observations, ones, None);
    }

    #[test]
    fn host_gradients_match_burns_with_weights_a_gelu_neighbourhood_stem_and_three_layers() {
        let config = VlaPolicyConfig::for_robot(Reacher2d::default().spec())
            .unwrap()
            .with_stem_activation(StemActivation::Gelu)
            .with_stem_inputs(StemInputs::NeighbourhoodAndPosition)
            .with_n_layers(3);
        let observations = reacher_observations();
        // Episodes ending inside two chunks, and advantage weights.
        let mask = vec![
            1., 1., 1., 1., 1., 1., 0., 0., 1., 1., 1., 1., 1., 0., 0., 0.,
        ];
        let weights = vec![0.5, 2.0, 1.25, 0.1];
        assert_matches_burn(&config, &observations, mask, Some(weights));
    }

    /// Stems of more than one layer run their own backward pass (`crate::stem_tape`);
    /// burn's autodiff runs them as tensor operations.
    #[test]
    fn host_gradients_match_burns_with_stems_of_two_and_three_layers() {
        for (layers, activation) in [(2, StemActivation::Relu), (3, StemActivation::Gelu)] {
            let config = VlaPolicyConfig::for_robot(Reacher2d::default().spec())
                .unwrap()
                .with_stem_activation(activation)
                .with_stem_inputs(StemInputs::NeighbourhoodAndPosition)
                .with_stem_layers(layers);
            let observations = reacher_observations();
            let mask = vec![
                1., 1., 1., 1., 1., 1., 0., 0., 1., 1., 1., 1., 1., 0., 0., 0.,
            ];
            let weights = vec![0.5, 2.0, 1.25, 0.1];
            assert_matches_burn(&config, &observations, mask, Some(weights));
        }
    }

    /// A policy gradient's signed weights (`ppo-returns`), normalised by their
    /// magnitudes on both paths.
    #[test]
    fn host_gradients_match_burns_with_signed_weights() {
        let config = VlaPolicyConfig::for_robot(Reacher2d::default().spec()).unwrap();
        let observations = reacher_observations();
        let ones = vec![1.0; observations.len() * config.chunk_len];
        let weights = vec![0.5, -2.0, 1.25, -0.1];
        assert_matches_burn(&config, &observations, ones, Some(weights));
    }

    #[test]
    fn host_gradients_match_burns_on_pusht_pooled_frames_and_action_origins() {
        let mut robot = PushT::default();
        let config = VlaPolicyConfig::for_robot(robot.spec()).unwrap();
        assert!(config.frame_pool > 1 && config.action_origin.is_some());
        let observations: Vec<Observation> = (0..3).map(|seed| robot.reset(seed)).collect();
        let ones = vec![1.0; observations.len() * config.chunk_len];
        assert_matches_burn(&config, &observations, ones.clone(), None);
        let deep = config
            .with_stem_inputs(StemInputs::NeighbourhoodAndPosition)
            .with_stem_channels(24)
            .with_stem_layers(2);
        assert_matches_burn(&deep, &observations, ones, None);
    }

    /// Keypoint targets: the readout's squared error joins the loss on both paths, and
    /// its gradient reaches the stem through the keypoints.
    #[test]
    fn host_gradients_match_burns_with_keypoint_targets() {
        let mut robot = PushT::default();
        let config = VlaPolicyConfig::for_robot(robot.spec())
            .unwrap()
            .with_stem_inputs(StemInputs::NeighbourhoodAndPosition)
            .with_keypoint_targets(vec![2, 3, 5, 6])
            .with_keypoint_target_weight(3.0);
        let config = VlaPolicyConfig {
            proprio_inputs: vec![0, 1],
            ..config
        };
        config.validate().unwrap();
        assert_eq!(config.input_spec().targets, vec![2, 3, 5, 6]);
        let observations: Vec<Observation> = (0..3).map(|seed| robot.reset(seed)).collect();
        let ones = vec![1.0; observations.len() * config.chunk_len];
        assert_matches_burn(
            &config,
            &observations,
            ones.clone(),
            Some(vec![0.5, 2.0, 1.0]),
        );
        let deep = config.with_stem_layers(2);
        assert_matches_burn(&deep, &observations, ones, None);
    }
}
