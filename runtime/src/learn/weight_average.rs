//! An exponential moving average of a model's weights during training (Polyak
//! averaging; "EMA weights" as Diffusion Policy trains with): the average, not the last
//! step's weights, is what acts. Denoising policies trained with noisy single-batch
//! gradients act markedly better from the average (Chi et al. 2023 keep it for every
//! result). The decay warms up as diffusers' `EMAModel` does, `1 - (1 + step)^-power`
//! capped at `max_decay`, so the first steps' random weights are forgotten quickly.

use std::collections::HashMap;

use burn::module::{ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::prelude::*;
use imago_robots::bounds::ConfigError;
use serde::{Deserialize, Serialize};

/// How fast the average forgets.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WeightAverageConfig {
    /// The warm-up's power: the decay after `n` updates is `1 - (1 + n)^-power`.
    /// Range: (0, 1]. Diffusion Policy's 0.75.
    pub power: f64,
    /// The decay's ceiling. Range: [0, 1). Diffusion Policy's 0.9999.
    pub max_decay: f64,
}

impl Default for WeightAverageConfig {
    fn default() -> Self {
        Self {
            power: 0.75,
            max_decay: 0.9999,
        }
    }
}

impl WeightAverageConfig {
    /// Checks the ranges; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.power > 0.0 && self.power <= 1.0) {
            return Err(ConfigError::new("power", self.power, "in (0, 1]"));
        }
        if !(0.0..1.0).contains(&self.max_decay) {
            return Err(ConfigError::new("max_decay", self.max_decay, "in [0, 1)"));
        }
        Ok(())
    }

    /// The decay of update number `updates` (0 for the first: the average starts as
    /// the weights themselves).
    pub fn decay(&self, updates: usize) -> f64 {
        (1.0 - (1.0 + updates as f64).powf(-self.power)).clamp(0.0, self.max_decay)
    }
}

/// The running average of one model's float parameters, by parameter id.
#[derive(Debug)]
pub struct WeightAverage<B: Backend> {
    config: WeightAverageConfig,
    updates: usize,
    averages: HashMap<ParamId, Tensor<B, 1>>,
}

impl<B: Backend> WeightAverage<B> {
    /// An empty average: the first [`Self::update`] takes the weights as they are.
    pub fn new(config: WeightAverageConfig) -> Self {
        Self {
            config,
            updates: 0,
            averages: HashMap::new(),
        }
    }

    /// Folds `model`'s current weights into the average (detached: no gradient flows
    /// into it).
    pub fn update<M: Module<B>>(&mut self, model: &M) {
        let decay = self.config.decay(self.updates);
        model.visit(&mut Folder {
            averages: &mut self.averages,
            decay,
        });
        self.updates += 1;
    }

    /// `model` with every averaged parameter's value replaced by its average (same
    /// ids, same gradient requirement); parameters never averaged are left as they are.
    pub fn apply<M: Module<B>>(&self, model: M) -> M {
        model.map(&mut Writer {
            averages: &self.averages,
        })
    }
}

struct Folder<'a, B: Backend> {
    averages: &'a mut HashMap<ParamId, Tensor<B, 1>>,
    decay: f64,
}

impl<B: Backend> ModuleVisitor<B> for Folder<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let current = param.val().detach();
        let n = current.shape().num_elements();
        let current = current.reshape([n]);
        let averaged = match self.averages.remove(&param.id) {
            Some(average) => average.mul_scalar(self.decay) + current.mul_scalar(1.0 - self.decay),
            None => current,
        };
        // A leaf of its own: nothing links the average to any step's graph.
        let averaged = averaged.detach();
        self.averages.insert(param.id, averaged);
    }
}

struct Writer<'a, B: Backend> {
    averages: &'a HashMap<ParamId, Tensor<B, 1>>,
}

impl<B: Backend> ModuleMapper<B> for Writer<'_, B> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        let value = match self.averages.get(&id) {
            Some(average) => {
                let averaged = average.clone().reshape(tensor.shape()).detach();
                if tensor.is_require_grad() {
                    averaged.require_grad()
                } else {
                    averaged
                }
            }
            None => tensor,
        };
        Param::from_mapped_value(id, value, mapper)
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use burn::nn::{Linear, LinearConfig};

    use super::*;

    type B = Autodiff<Flex>;

    fn weights(linear: &Linear<B>) -> Vec<f32> {
        linear.weight.val().into_data().to_vec().unwrap()
    }

    fn with_weight(linear: Linear<B>, value: f32) -> Linear<B> {
        let mut linear = linear;
        let shape = linear.weight.val().shape();
        linear.weight = linear
            .weight
            .map(|w| Tensor::full(shape, value, &w.device()).require_grad());
        linear
    }

    #[test]
    fn the_decay_warms_up_and_is_capped() {
        let config = WeightAverageConfig::default();
        assert_eq!(config.decay(0), 0.0);
        assert!((config.decay(1) - (1.0 - 2f64.powf(-0.75))).abs() < 1e-12);
        assert!(config.decay(1000) > 0.99 && config.decay(1000) < config.decay(2000));
        assert_eq!(config.decay(usize::MAX / 2), 0.9999);
        assert!(
            WeightAverageConfig {
                power: 0.0,
                ..config
            }
            .validate()
            .is_err()
        );
        assert!(
            WeightAverageConfig {
                max_decay: 1.0,
                ..config
            }
            .validate()
            .is_err()
        );
        config.validate().unwrap();
    }

    #[test]
    fn the_average_follows_the_weights_by_the_decay_and_keeps_ids_and_gradients() {
        let device = Default::default();
        let linear: Linear<B> = LinearConfig::new(2, 3).init(&device);
        let config = WeightAverageConfig {
            power: 1.0,
            max_decay: 0.5,
        };
        let mut average = WeightAverage::new(config);
        let linear = with_weight(linear, 1.0);
        average.update(&linear); // decay 0: the average is 1
        let linear = with_weight(linear, 3.0);
        average.update(&linear); // decay 0.5: 0.5 * 1 + 0.5 * 3 = 2
        let linear = with_weight(linear, 4.0);
        average.update(&linear); // decay min(1 - 1/3, 0.5) = 0.5: 3
        let id = linear.weight.id;
        let averaged = average.apply(linear);
        assert!(weights(&averaged).iter().all(|w| (w - 3.0).abs() < 1e-6));
        assert_eq!(averaged.weight.id, id);
        // Still trainable: a loss through it has a gradient for the weight.
        let x = Tensor::<B, 2>::ones([1, 2], &device);
        let grads = averaged.forward(x).sum().backward();
        assert!(averaged.weight.grad(&grads).is_some());
    }
}
