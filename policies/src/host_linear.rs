//! A linear layer's weights on the host and its product on plain slices: the building
//! block of the host forward passes (the policy's, [`crate::HostPolicy`], and the world
//! model's imagination).

use burn::nn::Linear;
use burn::prelude::*;

use crate::readback::values;

/// `y = x W + b` for a number of rows, `W` `[inputs, outputs]` row-major as burn
/// stores it, copied out of a [`Linear`] once.
#[derive(Debug, Clone)]
pub struct HostLinear {
    weight: Vec<f32>,
    bias: Vec<f32>,
    inputs: usize,
    outputs: usize,
}

impl HostLinear {
    /// The weights of `linear`, read back.
    pub fn of<B: Backend>(linear: &Linear<B>) -> Self {
        let [inputs, outputs] = linear.weight.dims();
        Self {
            weight: values(linear.weight.val()),
            bias: linear
                .bias
                .as_ref()
                .map_or_else(|| vec![0.0; outputs], |b| values(b.val())),
            inputs,
            outputs,
        }
    }

    /// Width of an input row.
    pub fn inputs(&self) -> usize {
        self.inputs
    }

    /// Width of an output row.
    pub fn outputs(&self) -> usize {
        self.outputs
    }

    /// Writes `x W + b` of the first `rows` rows of `x` into `y`.
    ///
    /// # Panics
    /// If `x` holds fewer than `rows * inputs` values or `y` fewer than
    /// `rows * outputs`.
    pub fn forward(&self, rows: usize, x: &[f32], y: &mut [f32]) {
        let (k, n) = (self.inputs, self.outputs);
        matmul(rows, k, n, &x[..rows * k], &self.weight, &mut y[..rows * n]);
        for row in y[..rows * n].chunks_exact_mut(n) {
            row.iter_mut().zip(&self.bias).for_each(|(v, b)| *v += b);
        }
    }
}

/// `c = a b` for row-major `a` `[m, k]`, `b` `[k, n]`, `c` `[m, n]`.
fn matmul(m: usize, k: usize, n: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
    // SAFETY: the assertion above keeps every access of the row-major strides below
    // inside the three slices, and `c` does not alias `a` or `b` (it is borrowed
    // mutably).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            b.as_ptr(),
            1,
            n as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}
