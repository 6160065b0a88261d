//! A plain multi-layer perceptron, the building block of heads and transitions.

use burn::nn::{Initializer, Linear, LinearConfig};
use burn::prelude::*;
use imago_policies::gelu::gelu;
use imago_policies::{ComputePath, on_rows};

/// Layer sizes of an [`Mlp`].
#[derive(Config, Debug)]
pub struct MlpConfig {
    /// Input width.
    pub input: usize,
    /// Width of every hidden layer.
    pub hidden: usize,
    /// Output width.
    pub output: usize,
    /// Number of hidden layers.
    #[config(default = 2)]
    pub hidden_layers: usize,
    /// Standard deviation of the output layer's initial weights; `None` keeps burn's
    /// default. A small value starts a residual branch near zero.
    #[config(default = "None")]
    pub output_init_std: Option<f64>,
}

impl MlpConfig {
    /// A freshly initialised MLP.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Mlp<B> {
        let mut hidden = Vec::with_capacity(self.hidden_layers);
        let mut width = self.input;
        for _ in 0..self.hidden_layers {
            hidden.push(LinearConfig::new(width, self.hidden).init(device));
            width = self.hidden;
        }
        let mut output = LinearConfig::new(width, self.output);
        if let Some(std) = self.output_init_std {
            output = output.with_initializer(Initializer::Normal { mean: 0.0, std });
        }
        Mlp {
            hidden,
            output: output.init(device),
            compute_path: ComputePath::Auto,
        }
    }
}

/// Linear layers with GELU between them; the output layer is linear.
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    pub(crate) hidden: Vec<Linear<B>>,
    pub(crate) output: Linear<B>,
    /// Where the activations run (on the host for the CPU backends).
    #[module(skip)]
    compute_path: ComputePath,
}

impl<B: Backend> Mlp<B> {
    /// Applies the MLP to the last dimension of `input`, every leading dimension folded
    /// into rows first so that each layer is one GEMM ([`on_rows`]).
    pub fn forward<const D: usize>(&self, input: Tensor<B, D>) -> Tensor<B, D> {
        on_rows(input, |rows| {
            let x = self
                .hidden
                .iter()
                .fold(rows, |x, layer| gelu(layer.forward(x), self.compute_path));
            self.output.forward(x)
        })
    }
}
