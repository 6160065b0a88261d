//! GELU whose backward pass is one multiplication on the CPU backends.
//!
//! burn 0.21 computes GELU's forward in five tensor passes and its backward (the
//! derivative of the tanh approximation, which burn's CPU backends do not override) in
//! fifteen, two of them `powf` and one `tanh`: 8% of the policy's cloning step in the
//! transformer's feed-forward blocks alone, and most of the world model's activation
//! cost (docs/performance.md). On the host path one parallel pass computes the exact
//! GELU and its exact slope; autodiff then sees `y + slope * (x - x.detach())`, zero
//! added in value, `slope * grad` in the backward pass. Without autodiff one parallel
//! pass computes the values, reading back the input it owns.

use burn::prelude::*;
use burn::tensor::activation;
use rayon::prelude::*;

use crate::activation::StemActivation;
use crate::readback::values;
use crate::vision::ComputePath;

/// Elements per parallel task: enough that a task outweighs its scheduling.
const CHUNK: usize = 4096;

/// The exact GELU, `x Phi(x)`, of `x`. Where `path` says host, one parallel host pass
/// computes it: values and slopes on a device with autodiff (whether or not `x` is in
/// a graph: `Tensor::is_require_grad` is true only for leaves, so it cannot tell an
/// intermediate activation from a constant), the values alone on a device without
/// (imagination, inference). Elsewhere it is burn's GELU.
pub fn gelu<B: Backend, const D: usize>(x: Tensor<B, D>, path: ComputePath) -> Tensor<B, D> {
    let device = x.device();
    if !path.on_host::<B>(&device) {
        return activation::gelu(x);
    }
    let shape = x.shape();
    // Computed in f32 on the host, handed back in the type it came in.
    let dtype = x.dtype();
    if !B::ad_enabled(&device) {
        let mut values = values(x);
        values
            .par_chunks_mut(CHUNK)
            .for_each(|chunk| StemActivation::Gelu.apply_in_place(chunk));
        return Tensor::from_data(TensorData::new(values, shape), (&device, dtype));
    }
    // `x` itself is still needed, so its values are read back from a copy no one else
    // holds (see `readback::values`).
    let input = values(x.clone().detach() * 1.0);
    let mut values = vec![0.0f32; input.len()];
    let mut slopes = vec![0.0f32; input.len()];
    values
        .par_chunks_mut(CHUNK)
        .zip(slopes.par_chunks_mut(CHUNK))
        .zip(input.par_chunks(CHUNK))
        .for_each(|((values, slopes), input)| {
            StemActivation::Gelu.apply_with_slope(input, values, slopes)
        });
    let y = Tensor::<B, D>::from_data(TensorData::new(values, shape.clone()), (&device, dtype));
    let slope = Tensor::<B, D>::from_data(TensorData::new(slopes, shape), (&device, dtype));
    y + slope * (x.clone() - x.detach())
}

#[cfg(test)]
mod tests {
    use burn::backend::{Autodiff, NdArray};
    use burn::tensor::Distribution;

    use super::*;

    type A = Autodiff<NdArray>;

    fn value_and_gradient(path: ComputePath) -> (Vec<f32>, Vec<f32>) {
        let _serial = crate::AUTODIFF_TESTS
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let device = Default::default();
        // Inputs from a fixed sequence, not the backend's generator: another test
        // drawing from that global generator between two calls would make them differ.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut uniform = |n: usize, lo: f32, hi: f32| -> Vec<f32> {
            (0..n)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    lo + (hi - lo) * (state >> 40) as f32 / (1u64 << 24) as f32
                })
                .collect()
        };
        let x = Tensor::<A, 2>::from_data(
            TensorData::new(uniform(40 * 300, -5.0, 5.0), [40, 300]),
            &device,
        )
        .require_grad();
        let weights = Tensor::<A, 2>::from_data(
            TensorData::new(uniform(40 * 300, 0.0, 1.0), [40, 300]),
            &device,
        );
        let y = gelu(x.clone(), path);
        let gradients = (y.clone() * weights).sum().backward();
        (
            y.into_data().to_vec().unwrap(),
            x.grad(&gradients).unwrap().into_data().to_vec().unwrap(),
        )
    }

    #[test]
    fn host_gelu_matches_burn_in_value_and_the_exact_derivative() {
        let (host, host_grad) = value_and_gradient(ComputePath::Host);
        let (burn, burn_grad) = value_and_gradient(ComputePath::Tensors);
        for (h, b) in host.iter().zip(&burn) {
            assert!((h - b).abs() <= 1e-6 * (1.0 + b.abs()), "{h} vs {b}");
        }
        // burn's backward differentiates GELU's tanh approximation: it differs from
        // the exact slope by up to about 2e-3 of the upstream gradient.
        let gap = host_grad
            .iter()
            .zip(&burn_grad)
            .map(|(h, b)| (h - b).abs())
            .fold(0.0f32, f32::max);
        assert!(gap < 1e-2, "{gap}");
        // The exact slope at a few points, times the upstream weights, recovered.
        let (x, slope) = (
            1.0f64,
            0.5 * (1.0 + libm::erf(1.0 / 2f64.sqrt()))
                + (-0.5f64).exp() / (2.0 * std::f64::consts::PI).sqrt(),
        );
        assert!((StemActivation::Gelu.value_and_slope(x as f32).1 as f64 - slope).abs() < 1e-6);
    }

    #[test]
    fn an_intermediate_activation_gets_the_exact_slope() {
        let _serial = crate::AUTODIFF_TESTS
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        // `x` computed from a leaf is in the graph but not `is_require_grad`: the host
        // path must still carry its gradient, and with the exact slope.
        let device = Default::default();
        let leaf = Tensor::<A, 1>::from_floats([-2.0, -0.5, 0.3, 1.0, 3.0], &device).require_grad();
        let x = leaf.clone() * 2.0;
        assert!(!x.is_require_grad());
        let gradients = gelu(x, ComputePath::Host).sum().backward();
        let grad: Vec<f32> = leaf.grad(&gradients).unwrap().into_data().to_vec().unwrap();
        for (g, l) in grad.iter().zip([-2.0f32, -0.5, 0.3, 1.0, 3.0]) {
            let exact = 2.0 * StemActivation::Gelu.value_and_slope(2.0 * l).1;
            assert!((g - exact).abs() < 1e-6, "{g} vs {exact}");
        }
    }

    #[test]
    fn gelu_without_autodiff_matches_burns() {
        let device = Default::default();
        <NdArray as Backend>::seed(&device, 5);
        let x = Tensor::<NdArray, 2>::random([70, 300], Distribution::Uniform(-8.0, 8.0), &device);
        let host: Vec<f32> = gelu(x.clone(), ComputePath::Host)
            .into_data()
            .to_vec()
            .unwrap();
        let burn: Vec<f32> = activation::gelu(x).into_data().to_vec().unwrap();
        assert_eq!(host.len(), burn.len());
        for (h, b) in host.iter().zip(&burn) {
            assert!((h - b).abs() <= 1e-6 * (1.0 + b.abs()), "{h} vs {b}");
        }
    }
}
