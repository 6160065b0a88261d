//! Exponential moving average of one module's parameters into another's.

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::prelude::*;

/// Moves every float parameter of `target` towards the matching parameter of `online`:
/// `target = decay * target + (1 - decay) * online`. Parameters are matched by their
/// position in the module tree, so the two modules must have the same structure (they
/// have different parameter ids on purpose: the optimiser must never confuse them).
/// The result does not require gradients. `decay = 0` copies `online`.
pub fn ema_update<B: Backend, M: Module<B>>(target: M, online: &M, decay: f64) -> M {
    let mut collector = ParamCollector { values: Vec::new() };
    online.visit(&mut collector);
    let mut mapper = EmaMapper {
        online: collector.values.into_iter(),
        decay,
    };
    target.map(&mut mapper)
}

struct ParamCollector<B: Backend> {
    values: Vec<Tensor<B, 1>>,
}

impl<B: Backend> ModuleVisitor<B> for ParamCollector<B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let value = param.val().detach();
        let count = value.shape().num_elements();
        self.values.push(value.reshape([count]));
    }
}

struct EmaMapper<B: Backend> {
    online: std::vec::IntoIter<Tensor<B, 1>>,
    decay: f64,
}

impl<B: Backend> ModuleMapper<B> for EmaMapper<B> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let online = self
            .online
            .next()
            .expect("EMA target and online modules have the same structure");
        let decay = self.decay;
        param
            .map(|target| {
                let dims = target.dims();
                let mixed = target.detach() * decay + online.reshape(dims) * (1.0 - decay);
                mixed.set_require_grad(false)
            })
            .set_require_grad(false)
    }
}
