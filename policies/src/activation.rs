//! The activations the models apply element by element, as tensor operations and on
//! host slices (the CPU paths of `stem_host`, `gelu` and `host`), with one exact GELU.

use burn::prelude::*;
use burn::tensor::activation::{gelu, relu};
use serde::{Deserialize, Serialize};

use crate::host_math;

/// The nonlinearity after the per-pixel stem, the one activation applied to every pixel
/// of every frame (batch x pixels x channels values), so the cheapest one pays most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StemActivation {
    /// `max(x, 0)`: one pass forward, a mask backward. The default since it cut the
    /// policy's cloning step by 31% on the CPU (docs/performance.md).
    #[default]
    Relu,
    /// The exact GELU, which checkpoints written before this choice existed use; burn's
    /// GELU backward is 15 tensor ops on the CPU backends.
    Gelu,
}

impl StemActivation {
    /// Applies the activation.
    pub fn apply<B: Backend, const D: usize>(self, x: Tensor<B, D>) -> Tensor<B, D> {
        match self {
            Self::Relu => relu(x),
            Self::Gelu => gelu(x),
        }
    }

    /// `out = activation(pre)`, element by element.
    pub(crate) fn apply_to(self, pre: &[f32], out: &mut [f32]) {
        match self {
            Self::Relu => out.iter_mut().zip(pre).for_each(|(o, p)| *o = p.max(0.0)),
            Self::Gelu => gelu_to(pre, out),
        }
    }

    /// `values = activation(values)`, element by element.
    pub(crate) fn apply_in_place(self, values: &mut [f32]) {
        match self {
            Self::Relu => values.iter_mut().for_each(|v| *v = v.max(0.0)),
            Self::Gelu => gelu_in_place(values),
        }
    }

    /// `out = activation(pre)` and `slope = activation'(pre)`, element by element.
    pub(crate) fn apply_with_slope(self, pre: &[f32], out: &mut [f32], slope: &mut [f32]) {
        match self {
            Self::Relu => {
                for ((o, s), &p) in out.iter_mut().zip(slope.iter_mut()).zip(pre) {
                    (*o, *s) = self.value_and_slope(p);
                }
            }
            Self::Gelu => gelu_with_slope_to(pre, out, slope),
        }
    }

    /// The activation's value and slope at `x`; GELU's exact (`x Phi(x)`, slope
    /// `Phi(x) + x phi(x)`) to within 1e-6 ([`crate::host_math`]).
    #[inline]
    pub(crate) fn value_and_slope(self, x: f32) -> (f32, f32) {
        match self {
            Self::Relu if x > 0.0 => (x, 1.0),
            Self::Relu => (0.0, 0.0),
            Self::Gelu => host_math::gelu_with_slope(x),
        }
    }
}

host_math::vectorised! {
    /// `values = GELU(values)`, element by element: the host paths' hidden activations.
    pub fn gelu_in_place(values: &mut [f32]) {
        values.iter_mut().for_each(|v| *v = host_math::gelu(*v));
    }
}

host_math::vectorised! {
    /// `out = GELU(pre)`, element by element.
    fn gelu_to(pre: &[f32], out: &mut [f32]) {
        out.iter_mut().zip(pre).for_each(|(o, &p)| *o = host_math::gelu(p));
    }
}

host_math::vectorised! {
    /// `out = GELU(pre)` and `slope = GELU'(pre)`, element by element.
    pub(crate) fn gelu_with_slope_to(pre: &[f32], out: &mut [f32], slope: &mut [f32]) {
        for ((o, s), &p) in out.iter_mut().zip(slope.iter_mut()).zip(pre) {
            (*o, *s) = host_math::gelu_with_slope(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::NdArray;

    use super::*;

    #[test]
    fn stem_activations_are_relu_and_exact_gelu() {
        let device = Default::default();
        let x = Tensor::<NdArray, 1>::from_floats([-2.0, -0.5, 0.0, 1.0], &device);
        let values = |a: StemActivation| -> Vec<f32> {
            a.apply(x.clone())
                .into_data()
                .convert::<f32>()
                .to_vec()
                .unwrap()
        };
        assert_eq!(values(StemActivation::Relu), [0.0, 0.0, 0.0, 1.0]);
        // x * Phi(x): Phi(-2) = 0.02275, Phi(-0.5) = 0.30854, Phi(1) = 0.84134.
        let expected = [-0.045_5, -0.154_27, 0.0, 0.841_34];
        for (g, e) in values(StemActivation::Gelu).iter().zip(expected) {
            assert!((g - e).abs() < 1e-4, "{g} vs {e}");
        }
        assert_eq!(StemActivation::default(), StemActivation::Relu);
    }

    #[test]
    fn host_values_and_slopes_match_the_tensor_activations() {
        let pre = [-2.0f32, -0.5, 0.0, 1.0];
        for activation in [StemActivation::Relu, StemActivation::Gelu] {
            let mut out = [0.0f32; 4];
            let (mut with_slope, mut slope) = ([0.0f32; 4], [0.0f32; 4]);
            activation.apply_to(&pre, &mut out);
            activation.apply_with_slope(&pre, &mut with_slope, &mut slope);
            assert_eq!(out, with_slope, "{activation:?}");
            let mut in_place = pre;
            activation.apply_in_place(&mut in_place);
            assert_eq!(out, in_place, "{activation:?}");
            let tensor: Vec<f32> = activation
                .apply(Tensor::<NdArray, 1>::from_floats(pre, &Default::default()))
                .into_data()
                .to_vec()
                .unwrap();
            for (h, t) in out.iter().zip(&tensor) {
                assert!(
                    (h - t).abs() < 1e-6,
                    "{activation:?}: {out:?} vs {tensor:?}"
                );
            }
        }
    }
}
