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
        product(
            &mut y[..rows * n],
            false,
            Operand::rows(rows, k, x),
            Operand::rows(k, n, &self.weight),
        );
        for row in y[..rows * n].chunks_exact_mut(n) {
            row.iter_mut().zip(&self.bias).for_each(|(v, b)| *v += b);
        }
    }

    /// The backward pass of [`Self::forward`] over `rows` rows of input `x` and
    /// output gradient `dy`: adds `x^T dy` and the column sums of `dy` to `gradient`,
    /// and `dy W^T` to `dx` when given.
    pub(crate) fn backward(
        &self,
        rows: usize,
        x: &[f32],
        dy: &[f32],
        gradient: &mut LinearGradient,
        dx: Option<&mut [f32]>,
    ) {
        let (k, n) = (self.inputs, self.outputs);
        gradient.add(rows, k, n, x, dy);
        if let Some(dx) = dx {
            product(
                &mut dx[..rows * k],
                true,
                Operand::rows(rows, n, dy),
                Operand::transposed(n, k, &self.weight),
            );
        }
    }
}

/// The gradient of a [`HostLinear`]'s weight and bias, shaped as they are.
#[derive(Debug, Clone)]
pub(crate) struct LinearGradient {
    /// `[inputs, outputs]` row-major.
    pub weight: Vec<f32>,
    /// `[outputs]`.
    pub bias: Vec<f32>,
}

impl LinearGradient {
    /// Zeros for a layer of `inputs x outputs`.
    pub fn zeros(inputs: usize, outputs: usize) -> Self {
        Self {
            weight: vec![0.0; inputs * outputs],
            bias: vec![0.0; outputs],
        }
    }

    /// Zeros shaped as `linear`.
    pub fn like(linear: &HostLinear) -> Self {
        Self::zeros(linear.inputs, linear.outputs)
    }

    /// Adds the gradient of `y = x W + b` (`[rows, k] x [k, n]`) for output
    /// gradient `dy`: `x^T dy` to the weight, the column sums of `dy` to the bias.
    pub fn add(&mut self, rows: usize, k: usize, n: usize, x: &[f32], dy: &[f32]) {
        product(
            &mut self.weight,
            true,
            Operand::transposed(k, rows, x),
            Operand::rows(rows, n, dy),
        );
        for row in dy[..rows * n].chunks_exact(n) {
            self.bias.iter_mut().zip(row).for_each(|(b, d)| *b += d);
        }
    }
}

/// A matrix operand of [`product`]: `rows x cols` values read from `data` at
/// `data[r * row_stride + c * col_stride]`.
#[derive(Clone, Copy)]
struct Operand<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl<'a> Operand<'a> {
    /// `data` as a row-major `rows x cols` matrix.
    fn rows(rows: usize, cols: usize, data: &'a [f32]) -> Self {
        Self {
            data,
            rows,
            cols,
            row_stride: cols,
            col_stride: 1,
        }
    }

    /// The transpose of `data` read as a row-major `cols x rows` matrix.
    fn transposed(rows: usize, cols: usize, data: &'a [f32]) -> Self {
        Self {
            data,
            rows,
            cols,
            row_stride: 1,
            col_stride: rows,
        }
    }

    /// Whether every element the strides address lies inside `data`.
    fn fits(&self) -> bool {
        self.rows == 0
            || self.cols == 0
            || (self.rows - 1) * self.row_stride + (self.cols - 1) * self.col_stride
                < self.data.len()
    }
}

/// `c = a b`, or `c += a b` with `accumulate`, for row-major `c` `[m, n]`.
///
/// # Panics
/// If the shapes do not chain or an operand's strides leave its slice.
fn product(c: &mut [f32], accumulate: bool, a: Operand<'_>, b: Operand<'_>) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert!(b.rows == k && a.fits() && b.fits() && c.len() >= m * n);
    if m == 0 || n == 0 {
        return;
    }
    // SAFETY: the assertion above keeps every access of the strides below inside the
    // three slices, and `c` does not alias `a` or `b` (it is borrowed mutably).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            a.data.as_ptr(),
            a.col_stride as isize,
            a.row_stride as isize,
            b.data.as_ptr(),
            b.col_stride as isize,
            b.row_stride as isize,
            if accumulate { 1.0 } else { 0.0 },
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}
