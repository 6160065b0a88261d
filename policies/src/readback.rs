//! Reading a tensor back to the host.

use burn::prelude::*;

/// The values of `tensor` as `f32`, row-major. burn-ndarray hands over the buffer of a
/// tensor no one else holds, but copies a shared one element by element through a
/// generic iterator (ten times slower than one vectorised pass): hot paths read back
/// tensors they own.
pub fn values<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> Vec<f32> {
    tensor
        .into_data()
        .convert::<f32>()
        .into_vec()
        .expect("a tensor converted to f32 reads as f32")
}
