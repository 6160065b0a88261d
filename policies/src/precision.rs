//! The float precision a policy computes in: `f32` (training, deployment) or a
//! narrower type for certified acceleration's precision variants.
//!
//! A narrower variant is the same policy with every float parameter cast
//! ([`cast_parameters`]); its forward pass casts the inputs to that type on entry and
//! builds its constants in it, so every product runs in the narrow type, and the
//! action chunks come back as `f32`. The host paths (stem, GELU) read any type back as
//! `f32`, compute there, and hand their results back in the type they were given.

use std::fmt;

use burn::module::{Module, ModuleMapper, Param};
use burn::prelude::*;
use burn::tensor::{DType, FloatDType};
use serde::{Deserialize, Serialize};

/// A policy's float precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// IEEE single precision: what imago trains and deploys in.
    #[default]
    F32,
    /// IEEE half precision (10-bit mantissa, range to 65504).
    F16,
    /// bfloat16 (8-bit mantissa, f32's range).
    Bf16,
}

impl Precision {
    /// The narrower precisions, in the order certified acceleration tries them.
    pub const NARROW: [Precision; 2] = [Precision::F16, Precision::Bf16];

    /// burn's float type of this precision.
    pub fn dtype(self) -> DType {
        match self {
            Self::F32 => DType::F32,
            Self::F16 => DType::F16,
            Self::Bf16 => DType::BF16,
        }
    }

    /// Whether tensors of this precision support every operation on `device`: burn-flex
    /// and the GPU backends' devices that have it say yes, burn-ndarray says no.
    pub fn supported_on<B: Backend>(self, device: &B::Device) -> bool {
        B::supports_dtype(device, self.dtype())
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Bf16 => "bf16",
        })
    }
}

/// `tensor` in the float type `dtype` (no work when it is already).
pub fn cast_to<B: Backend, const D: usize>(tensor: Tensor<B, D>, dtype: DType) -> Tensor<B, D> {
    tensor.cast(FloatDType::from(dtype))
}

/// `module` with every float parameter cast to `precision`.
pub fn cast_parameters<B: Backend, M: Module<B>>(module: M, precision: Precision) -> M {
    module.map(&mut CastFloats {
        dtype: precision.dtype(),
    })
}

/// A [`ModuleMapper`] casting each float parameter to one type.
struct CastFloats {
    dtype: DType,
}

impl<B: Backend> ModuleMapper<B> for CastFloats {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        Param::from_mapped_value(id, cast_to(tensor, self.dtype), mapper)
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::{Flex, NdArray};
    use burn::nn::LinearConfig;

    use super::*;

    #[test]
    fn parameters_are_cast_and_support_is_asked_of_the_backend() {
        let device = Default::default();
        let layer = LinearConfig::new(3, 2).init::<Flex>(&device);
        let half = cast_parameters(layer.clone(), Precision::F16);
        assert_eq!(half.weight.val().dtype(), DType::F16);
        assert_eq!(half.bias.as_ref().unwrap().val().dtype(), DType::F16);
        assert_eq!(layer.weight.val().dtype(), DType::F32);
        assert!(Precision::F16.supported_on::<Flex>(&device));
        assert!(!Precision::F16.supported_on::<NdArray>(&Default::default()));
        assert!(Precision::F32.supported_on::<NdArray>(&Default::default()));
        assert_eq!(Precision::Bf16.to_string(), "bf16");
        assert_eq!(serde_json::to_string(&Precision::Bf16).unwrap(), "\"bf16\"");
    }
}
