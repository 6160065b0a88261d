//! The VLA's self-attention: burn's multi-head attention without dropout, with padded
//! keys masked by an additive bias.

use burn::nn::Linear;
use burn::nn::attention::MultiHeadAttention;
use burn::prelude::*;
use burn::tensor::DType;
use burn::tensor::activation::softmax;

/// The padding of the VLA's token sequence `[batch, 2 + words + patches]`: the readout
/// and proprioception tokens and the patches never pad; the words pad as
/// `word_padding` `[batch, words]` says.
pub(crate) fn token_padding<B: Backend>(
    word_padding: Tensor<B, 2, Bool>,
    patches: usize,
) -> Tensor<B, 2, Bool> {
    let device = word_padding.device();
    let [batch, _] = word_padding.dims();
    let never = |n: usize| {
        Tensor::<B, 2, Bool>::from_data(
            TensorData::new(vec![false; batch * n], [batch, n]),
            &device,
        )
    };
    Tensor::cat(vec![never(2), word_padding, never(patches)], 1)
}

/// burn's `MultiHeadAttention::forward` for self-attention without dropout (the
/// policy's layers have none), with the padded keys' scores lowered by adding `bias`
/// (`[B, H, T, T]`, [`padding_bias`]) instead of burn's `mask_fill` of a broadcast mask:
/// on burn-flex that fill, forward and backward, took its generic strided path, most
/// of the 10% of the cloning step spent there (docs/performance.md). A padded key's
/// weight is 0 either way (`exp(-1e4)` underflows), so the values are burn's.
pub(crate) fn self_attention<B: Backend>(
    mha: &MultiHeadAttention<B>,
    x: Tensor<B, 3>,
    bias: &Tensor<B, 4>,
) -> Tensor<B, 3> {
    let [batch, tokens, d_model] = x.dims();
    let heads = |linear: &Linear<B>| {
        linear
            .forward(x.clone())
            .reshape([batch, tokens, mha.n_heads, mha.d_k])
            .swap_dims(1, 2)
    };
    let (query, key, value) = (heads(&mha.query), heads(&mha.key), heads(&mha.value));
    let scores = query
        .matmul(key.transpose())
        .div_scalar((mha.d_k as f32).sqrt())
        + bias.clone();
    let context = softmax(scores, 3)
        .matmul(value)
        .swap_dims(1, 2)
        .reshape([batch, tokens, d_model]);
    mha.output.forward(context)
}

/// `min_float` where a key is padding and 0 elsewhere, `[B, heads, T, T]` and
/// contiguous (`repeat_dim` copies), so that adding it to the attention scores is one
/// elementwise pass. Built on the device from the `[B, T]` mask: no read back, which on
/// a GPU would wait for the device on every forward pass. `(device, dtype)` are the
/// tokens' (under burn's `Dispatch` a boolean tensor's device does not say whether the
/// model's tensors carry autodiff).
pub(crate) fn padding_bias<B: Backend>(
    pad_mask: Tensor<B, 2, Bool>,
    heads: usize,
    min_float: f64,
    (device, dtype): (&B::Device, DType),
) -> Tensor<B, 4> {
    let [batch, tokens] = pad_mask.dims();
    Tensor::<B, 2>::zeros([batch, tokens], (device, dtype))
        .mask_fill(pad_mask, min_float)
        .reshape([batch, 1, 1, tokens])
        .repeat_dim(1, heads)
        .repeat_dim(2, tokens)
}
