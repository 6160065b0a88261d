//! Diffusion Policy's training loss (LeRobot's `DiffusionModel.compute_loss`): noise
//! the demonstrated chunk to a random timestep, ask the U-Net for the noise (or the
//! clean chunk), and take the squared error, with padded actions (copies past an
//! episode's end) masked out where LeRobot's `do_mask_loss_for_padding` says so. Per
//! sample, so that fine-tuning can weight each demonstration.

use burn::prelude::*;

use super::scheduler::{NoiseSchedule, Prediction};
use super::unet::DiffusionUnet;

/// The loss of each chunk of `actions` `[batch, horizon, action_dim]`, noised with
/// `noise` (its shape) to `timesteps` (one per chunk) and denoised conditioned on
/// `global_cond`: the mean over the chunk of the squared error, the entries where
/// `action_is_pad` `[batch, horizon]` is true counted as zero (LeRobot's mean over
/// the whole batch is the mean of these).
pub fn noise_prediction_losses<B: Backend>(
    (unet, schedule): (&DiffusionUnet<B>, &NoiseSchedule),
    actions: Tensor<B, 3>,
    (noise, timesteps): (Tensor<B, 3>, &[usize]),
    global_cond: Option<Tensor<B, 2>>,
    action_is_pad: Option<Tensor<B, 2, Bool>>,
) -> Tensor<B, 1> {
    let [batch, horizon, action_dim] = actions.dims();
    let noisy = schedule.add_noise(actions.clone(), noise.clone(), timesteps);
    let predicted = unet.forward(noisy, timesteps, global_cond);
    let target = match schedule.config().prediction_type {
        Prediction::Epsilon => noise,
        Prediction::Sample => actions,
    };
    let mut error = (predicted - target).powf_scalar(2.0);
    if let Some(pad) = action_is_pad {
        // A masked fill, not a product with the mask as floats: a boolean tensor turned
        // to floats is not tracked by an autodiff backend and cannot meet one that is.
        let padded = pad
            .reshape([batch, horizon, 1])
            .expand([batch, horizon, action_dim]);
        error = error.mask_fill(padded, 0.0);
    }
    error
        .reshape([batch, horizon * action_dim])
        .mean_dim(1)
        .reshape([batch])
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;

    use super::*;
    use crate::diffusion::scheduler::NoiseScheduleConfig;
    use crate::diffusion::unet::DiffusionUnetConfig;
    use crate::lerobot_fixtures::{Array, FIXTURES, lerobot_unet, read};

    type B = Flex;

    #[derive(serde::Deserialize)]
    struct Fixture {
        unet: DiffusionUnetConfig,
        schedule: NoiseScheduleConfig,
        state: Array,
        environment_state: Array,
        action: Array,
        action_is_pad: Vec<Vec<bool>>,
        noise: Array,
        timesteps: Vec<usize>,
        loss: f32,
    }

    /// LeRobot's own `DiffusionModel.compute_loss` on one batch (state-only inputs,
    /// padded actions masked), with the noise and timesteps it drew replayed.
    #[test]
    fn the_loss_of_a_batch_matches_lerobots_compute_loss() {
        let f: Fixture = read(FIXTURES, "diffusion_loss");
        let device = Default::default();
        let unet = lerobot_unet(&f.unet, "diffusion_sampling_unet.safetensors");
        let schedule = NoiseSchedule::new(f.schedule).unwrap();
        // LeRobot's global conditioning without images: the states side by side,
        // observation steps flattened.
        let states: Tensor<B, 3> =
            Tensor::cat(vec![f.state.tensor(), f.environment_state.tensor()], 2);
        let batch = states.dims()[0];
        let global_cond = states.reshape([batch, f.unet.global_cond_dim]);
        let horizon = f.action.shape[1];
        let pad = Tensor::<B, 2, Bool>::from_data(
            TensorData::new(f.action_is_pad.concat(), [batch, horizon]),
            &device,
        );
        let losses = noise_prediction_losses(
            (&unet, &schedule),
            f.action.tensor(),
            (f.noise.tensor(), &f.timesteps),
            Some(global_cond),
            Some(pad),
        );
        let loss: f32 = losses.mean().into_scalar();
        let relative = (loss - f.loss).abs() / f.loss.abs();
        println!(
            "loss {loss} against LeRobot's {}: relative gap {relative:e}",
            f.loss
        );
        assert!(relative < 1e-4, "loss {loss} vs {}", f.loss);
    }
}
