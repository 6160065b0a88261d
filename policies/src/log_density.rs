//! Log-densities of recorded actions under a Gaussian-head policy, computed without
//! gradients: what fine-tuning's importance ratios compare with the density the acting
//! policy recorded when it sampled the action.

use crate::input::PolicyBatch;
use crate::policy::Policy;
use crate::readback::values;
use burn::prelude::*;

/// The log-density, under a Gaussian-head policy, of each observation of `batch`'s
/// first recorded action (`actions`: `[batch, K, A]` row-major, of which each
/// row's first step is read): what fine-tuning's importance ratios compare with
/// the density the acting policy recorded. Computed without gradients, on the host
/// where the compute path says so (observations in parallel), else as a burn
/// forward pass. `None` for a flow head.
pub fn first_step_log_densities<B: Backend>(
    policy: &Policy<B>,
    batch: &PolicyBatch,
    actions: &[f32],
    device: &B::Device,
) -> Option<Vec<f32>> {
    let steps = vec![1; batch.len()];
    leading_log_densities(policy, batch, (actions, &steps), 1.0, device)
}

/// The joint log-density of each observation's leading recorded actions: row `r`'s
/// first `steps[r]` chunk steps of `actions` (`[batch, K, A]` row-major; a step count
/// past `K` reads all `K`), under the policy's Gaussian with its spread scaled by
/// `spread` (a rollout's exploration: the density of what a rollout at that noise
/// sampled). A chunk a rollout executed whole before planning again is one sampled
/// action, and this its density. Computed as [`first_step_log_densities`]; `None` for
/// a flow head.
pub fn leading_log_densities<B: Backend>(
    policy: &Policy<B>,
    batch: &PolicyBatch,
    (actions, steps): (&[f32], &[usize]),
    spread: f32,
    device: &B::Device,
) -> Option<Vec<f32>> {
    let (mean, log_std) = match policy.host_copy() {
        Some(host) => host.gaussian_rows(batch),
        None => {
            let chunk = policy.gaussian(batch.to_input(device))?;
            (values(chunk.mean.detach()), values(chunk.log_std.detach()))
        }
    };
    let (k, a) = policy.chunk_shape();
    let width = k * a;
    let offset = spread.max(f32::MIN_POSITIVE).ln();
    Some(
        (0..batch.len())
            .map(|row| {
                let leading = row * width..row * width + steps[row].min(k) * a;
                let scaled: Vec<f32> = log_std[leading.clone()]
                    .iter()
                    .map(|s| s + offset)
                    .collect();
                gaussian_log_density(&actions[leading.clone()], &mean[leading], &scaled)
            })
            .collect(),
    )
}

/// The log-density of `action` under a diagonal Gaussian of `mean` and `log_std`, as
/// [`crate::GaussianChunk::log_prob`] computes it for one chunk step.
fn gaussian_log_density(action: &[f32], mean: &[f32], log_std: &[f32]) -> f32 {
    let half_log_two_pi = 0.5 * (2.0 * std::f32::consts::PI).ln();
    action
        .iter()
        .zip(mean)
        .zip(log_std)
        .map(|((x, m), s)| {
            let z = (x - m) * (-s).exp();
            -(0.5 * z * z + s) - half_log_two_pi
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;
    use imago_robots::Robot;
    use imago_robots::reacher2d::Reacher2d;

    use super::*;
    use crate::head::ActionHeadKind;
    use crate::model::VlaPolicyConfig;
    use crate::vision::ComputePath;

    #[test]
    fn first_step_log_densities_agree_on_the_host_and_through_burn() {
        let device = Default::default();
        let mut robot = Reacher2d::default();
        let config = VlaPolicyConfig::for_robot(robot.spec()).unwrap();
        let mut batch = PolicyBatch::new(&config.input_spec());
        for seed in 0..5 {
            batch.push(&robot.reset(seed)).unwrap();
        }
        let (k, a) = (config.chunk_len, config.action_dim());
        let actions: Vec<f32> = (0..5 * k * a)
            .map(|i| ((i * 5) % 9) as f32 / 9.0 - 0.4)
            .collect();
        let policy = Policy::Vla(config.init::<Flex>(&device));
        assert!(
            policy.host_path().is_some(),
            "flex runs the VLA on the host"
        );
        let host = first_step_log_densities(&policy, &batch, &actions, &device).unwrap();
        let through_burn = policy.clone().with_compute_path(ComputePath::Tensors);
        assert!(through_burn.host_path().is_none());
        let tensors = first_step_log_densities(&through_burn, &batch, &actions, &device).unwrap();
        // burn's own log_prob of the same chunk, first step.
        let chunk = policy.gaussian(batch.to_input(&device)).unwrap();
        let target =
            Tensor::<Flex, 3>::from_data(TensorData::new(actions.clone(), [5, k, a]), &device);
        let reference = values(chunk.log_prob(target).narrow(1, 0, 1));
        assert_eq!(host.len(), 5);
        for ((h, t), r) in host.iter().zip(&tensors).zip(&reference) {
            assert!(
                (h - r).abs() <= 1e-4 * r.abs().max(1.0),
                "host {h}, burn {r}"
            );
            assert!(
                (t - r).abs() <= 1e-4 * r.abs().max(1.0),
                "tensors {t}, burn {r}"
            );
        }
        let flow = Policy::Vla(config.with_head(ActionHeadKind::Flow).init::<Flex>(&device));
        assert!(first_step_log_densities(&flow, &batch, &actions, &device).is_none());
    }

    /// The leading steps' joint density is the sum of burn's per-step densities, and a
    /// spread scaled by `s` is a Gaussian whose log-std is `ln s` higher.
    #[test]
    fn leading_log_densities_sum_the_leading_steps_at_the_scaled_spread() {
        let device = Default::default();
        let mut robot = Reacher2d::default();
        let config = VlaPolicyConfig::for_robot(robot.spec()).unwrap();
        let mut batch = PolicyBatch::new(&config.input_spec());
        for seed in 0..3 {
            batch.push(&robot.reset(seed)).unwrap();
        }
        let (k, a) = (config.chunk_len, config.action_dim());
        assert!(k >= 3, "the test reads 3 leading steps");
        let actions: Vec<f32> = (0..3 * k * a)
            .map(|i| ((i * 7) % 11) as f32 / 11.0 - 0.5)
            .collect();
        let policy = Policy::Vla(config.init::<Flex>(&device));
        let chunk = policy.gaussian(batch.to_input(&device)).unwrap();
        let (mean, log_std) = (values(chunk.mean), values(chunk.log_std));
        let steps = [1, 3, k + 5];
        for spread in [1.0f32, 2.0] {
            let densities =
                leading_log_densities(&policy, &batch, (&actions, &steps), spread, &device)
                    .unwrap();
            for (row, &n) in steps.iter().enumerate() {
                let expected: f32 = (row * k * a..row * k * a + n.min(k) * a)
                    .map(|i| {
                        let std = log_std[i].exp() * spread;
                        let z = (actions[i] - mean[i]) / std;
                        -0.5 * z * z - std.ln() - 0.5 * (2.0 * std::f32::consts::PI).ln()
                    })
                    .sum();
                let got = densities[row];
                assert!(
                    (got - expected).abs() <= 1e-4 * expected.abs().max(1.0),
                    "row {row}, spread {spread}: {got} against {expected}"
                );
            }
        }
    }
}
