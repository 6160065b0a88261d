//! Low-rank adaptation (LoRA, Hu et al. 2021) for fine-tuning a large policy on a
//! small device: the policy's weights are frozen and each adapted weight `W` learns
//! only a product `down · up` of rank `r`, scaled by `alpha / r`, so the optimiser
//! keeps state (and autodiff keeps weight gradients) for the adapters alone. `up`
//! starts at zero, so an adapted layer starts as the layer it adapts; after training
//! the product is folded into `W` ([`merge_into`]). Adapters sit beside the layers
//! they adapt (an `Option` field of the block), never inside them: the layers stay
//! burn's `Linear`, so LeRobot's checkpoints load and save through burn-store's
//! PyTorch adapter (which recognises `Linear` by its type) exactly as before.

use burn::module::Param;
use burn::nn::{Initializer, Linear};
use burn::prelude::*;
use burn::tensor::module::linear;
use imago_robots::bounds::{ConfigError, in_range};
use serde::{Deserialize, Serialize};

/// The adapters' shape: rank and scale.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoraConfig {
    /// Rank `r` of each adapter. Range: [1, 256].
    pub rank: usize,
    /// The adapters' output is scaled by `alpha / rank`. Range: (0, 10000].
    pub alpha: f64,
}

impl Default for LoraConfig {
    /// Rank 8 at alpha 16 (the `peft` library's common choice for transformers).
    fn default() -> Self {
        Self {
            rank: 8,
            alpha: 16.0,
        }
    }
}

impl LoraConfig {
    /// Checks every value against its documented range; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range("rank", self.rank, 1..=256)?;
        in_range("alpha", self.alpha, f64::MIN_POSITIVE..=10_000.0)
    }

    /// `alpha / rank`.
    pub fn scale(&self) -> f64 {
        self.alpha / self.rank as f64
    }
}

/// A rank-`r` update `down · up · scale` of a weight `[d_in, d_out]` (burn's layout:
/// applied as `x · W`).
#[derive(Module, Debug)]
pub struct LoraAdapter<B: Backend> {
    /// `[d_in, r]`, Kaiming-uniform initialised (as `peft` initialises it).
    pub down: Param<Tensor<B, 2>>,
    /// `[r, d_out]`, zero at first.
    pub up: Param<Tensor<B, 2>>,
    #[module(skip)]
    scale: f64,
}

impl<B: Backend> LoraAdapter<B> {
    /// An adapter of a `[d_in, d_out]` weight shaped by `config`, contributing
    /// nothing until trained.
    pub fn new([d_in, d_out]: [usize; 2], config: &LoraConfig, device: &B::Device) -> Self {
        let down = Initializer::KaimingUniform {
            gain: 1.0 / 3.0f64.sqrt(),
            fan_out_only: false,
        }
        .init_with([d_in, config.rank], Some(d_in), Some(config.rank), device);
        Self {
            down,
            up: Initializer::Zeros.init([config.rank, d_out], device),
            scale: config.scale(),
        }
    }

    /// The update of `x` (`x · down · up · scale`).
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        let low = linear(x, self.down.val(), None);
        linear(low, self.up.val(), None).mul_scalar(self.scale)
    }

    /// The update as a weight `[d_in, d_out]`.
    pub fn delta(&self) -> Tensor<B, 2> {
        self.down.val().matmul(self.up.val()).mul_scalar(self.scale)
    }
}

/// `W + delta` as a parameter of `W`'s id, holding no graph: what a merged adapter
/// leaves behind.
pub fn merged_weight<B: Backend, const D: usize>(
    weight: Param<Tensor<B, D>>,
    delta: Tensor<B, D>,
) -> Param<Tensor<B, D>> {
    let require_grad = weight.is_require_grad();
    let (id, tensor, _) = weight.consume();
    let merged = (tensor + delta).detach();
    Param::initialized(id, merged.set_require_grad(require_grad))
}

/// `layer(x)`, plus `adapter`'s update of it when there is one.
pub fn adapted_forward<B: Backend, const D: usize>(
    layer: &Linear<B>,
    adapter: Option<&LoraAdapter<B>>,
    x: Tensor<B, D>,
) -> Tensor<B, D> {
    match adapter {
        Some(adapter) => layer.forward(x.clone()) + adapter.forward(x),
        None => layer.forward(x),
    }
}

/// A fresh adapter of `layer`'s weight, shaped by `config`.
pub fn adapter_of<B: Backend>(
    layer: &Linear<B>,
    config: &LoraConfig,
    device: &B::Device,
) -> LoraAdapter<B> {
    LoraAdapter::new(layer.weight.dims(), config, device)
}

/// `layer` with `adapter` folded into its weight.
pub fn merge_into<B: Backend>(layer: Linear<B>, adapter: Option<LoraAdapter<B>>) -> Linear<B> {
    match adapter {
        Some(adapter) => Linear {
            weight: merged_weight(layer.weight, adapter.delta()),
            bias: layer.bias,
        },
        None => layer,
    }
}

/// LoRA adapters of two linear layers (a feed-forward block's, an embedding's).
#[derive(Module, Debug)]
pub struct PairLora<B: Backend> {
    /// Of the first layer.
    pub first: LoraAdapter<B>,
    /// Of the second layer.
    pub second: LoraAdapter<B>,
}

impl<B: Backend> PairLora<B> {
    /// Fresh adapters of `first` and `second`.
    pub fn new(
        (first, second): (&Linear<B>, &Linear<B>),
        config: &LoraConfig,
        device: &B::Device,
    ) -> Self {
        Self {
            first: adapter_of(first, config, device),
            second: adapter_of(second, config, device),
        }
    }

    /// `first` and `second` with `lora`'s adapters folded into them.
    pub fn merge(
        (first, second): (Linear<B>, Linear<B>),
        lora: Option<Self>,
    ) -> (Linear<B>, Linear<B>) {
        match lora {
            Some(lora) => (
                merge_into(first, Some(lora.first)),
                merge_into(second, Some(lora.second)),
            ),
            None => (first, second),
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use burn::nn::LinearConfig;
    use burn::tensor::Distribution;

    use super::*;

    type B = Autodiff<Flex>;

    /// An adapter starts as nothing, trains alone while the weight it adapts is frozen,
    /// and once merged the plain layer computes what the adapted one did.
    #[test]
    fn an_adapter_trains_alone_and_merges_into_the_weight() {
        let device = Default::default();
        let layer = LinearConfig::new(6, 4).init::<B>(&device).no_grad();
        let x = Tensor::<B, 2>::random([5, 6], Distribution::Default, &device);
        let before = layer.forward(x.clone());
        let adapter = adapter_of(&layer, &LoraConfig::default(), &device);
        let start = adapted_forward(&layer, Some(&adapter), x.clone());
        assert!(start.clone().sub(before).abs().max().into_scalar() < 1e-6);

        let grads = start.sum().backward();
        assert!(layer.weight.grad(&grads).is_none(), "the weight is frozen");
        assert!(adapter.up.grad(&grads).is_some(), "the adapter learns");

        // A trained adapter: `up` no longer zero.
        let up = Tensor::<B, 2>::random(adapter.up.dims(), Distribution::Default, &device);
        let trained = LoraAdapter {
            up: Param::from_tensor(up),
            ..adapter
        };
        let adapted = adapted_forward(&layer, Some(&trained), x.clone());
        let merged = merge_into(layer, Some(trained));
        let gap = merged.forward(x).sub(adapted).abs().max().into_scalar();
        assert!(gap < 1e-5, "{gap}");
        assert!(!merged.weight.is_require_grad(), "still frozen");
    }

    #[test]
    fn ranks_and_scales_out_of_range_are_errors_naming_the_key() {
        let zero = LoraConfig {
            rank: 0,
            ..LoraConfig::default()
        };
        assert!(zero.validate().unwrap_err().to_string().contains("rank"));
        let negative = LoraConfig {
            alpha: -1.0,
            ..LoraConfig::default()
        };
        assert!(
            negative
                .validate()
                .unwrap_err()
                .to_string()
                .contains("alpha")
        );
        assert!(LoraConfig::default().validate().is_ok());
    }
}
