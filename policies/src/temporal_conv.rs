//! A 1D convolution as one matrix product: the input's windows laid out as columns
//! (`[channels_in * kernel, batch * length]`) and multiplied by the weight read as
//! `[channels_out, channels_in * kernel]`, which is its own memory as burn stores it.
//! The same arithmetic as burn's `Conv1d::forward`, in burn's ops (so it runs on every
//! backend and trains through autodiff), for the case where it matters: burn-flex runs
//! a padded conv1d as a conv3d that lays the whole weight out afresh on every call, so
//! for Diffusion Policy's U-Net (2048-wide kernels, sequences of 16) most of a
//! denoising step went to copying and zeroing weight-sized buffers rather than to the
//! product (measured in docs/performance.md). Convolutions with a stride, dilation or
//! groups go to burn's.

use burn::nn::PaddingConfig1d;
use burn::nn::conv::Conv1d;
use burn::prelude::*;

/// `conv` applied to `x` `[batch, channels_in, length]`, as one matrix product when
/// its stride, dilation and groups are 1; by burn's convolution otherwise.
pub fn conv1d_as_matmul<B: Backend>(conv: &Conv1d<B>, x: Tensor<B, 3>) -> Tensor<B, 3> {
    let (left, right) = match &conv.padding {
        PaddingConfig1d::Explicit(left, right) => (*left, *right),
        PaddingConfig1d::Valid => (0, 0),
        PaddingConfig1d::Same => return conv.forward(x),
    };
    if conv.stride != 1 || conv.dilation != 1 || conv.groups != 1 {
        return conv.forward(x);
    }
    let [c_out, c_in, kernel] = conv.weight.dims();
    let [batch, _, length] = x.dims();
    let device = x.device();
    // The input channels first (`[c_in, batch, length]`), padded: the concatenation
    // lays it out so, copying the input once, so that the windows below stack into
    // the columns' own layout instead of being permuted there (a copy `kernel` times
    // larger, element by element on burn-flex).
    let mut parts = Vec::with_capacity(3);
    if left > 0 {
        parts.push(Tensor::zeros([c_in, batch, left], &device));
    }
    parts.push(x.swap_dims(0, 1));
    if right > 0 {
        parts.push(Tensor::zeros([c_in, batch, right], &device));
    }
    let padded = Tensor::cat(parts, 2);
    let out_len = length + left + right + 1 - kernel;
    // Column (c, k) of output position (b, t) reads padded[c, b, t + k].
    let windows: Vec<Tensor<B, 3>> = (0..kernel)
        .map(|k| padded.clone().narrow(2, k, out_len))
        .collect();
    let columns = Tensor::stack::<4>(windows, 1).reshape([c_in * kernel, batch * out_len]);
    let product = conv
        .weight
        .val()
        .reshape([c_out, c_in * kernel])
        .matmul(columns)
        .reshape([c_out, batch, out_len])
        .swap_dims(0, 1);
    match &conv.bias {
        Some(bias) => product + bias.val().reshape([1, c_out, 1]),
        None => product,
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use burn::nn::conv::Conv1dConfig;
    use burn::tensor::Distribution;

    use super::*;

    type B = Autodiff<Flex>;

    /// Largest absolute difference of two tensors' values.
    fn gap<K: Backend, const D: usize>(a: Tensor<K, D>, b: Tensor<K, D>) -> f32 {
        (a - b).abs().max().into_scalar().elem()
    }

    #[test]
    fn the_matrix_product_is_burns_convolution_and_trains_the_same() {
        let _serial = crate::AUTODIFF_TESTS
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let device = Default::default();
        B::seed(&device, 3);
        for (c_in, c_out, kernel, pad, bias) in [
            (6, 5, 5, 2, true),
            (4, 3, 3, 1, false),
            (3, 2, 1, 0, true),
            (2, 4, 3, 0, true),
        ] {
            let conv: Conv1d<B> = Conv1dConfig::new(c_in, c_out, kernel)
                .with_padding(PaddingConfig1d::Explicit(pad, pad))
                .with_bias(bias)
                .init(&device);
            let x = Tensor::<B, 3>::random([3, c_in, 7], Distribution::Normal(0.0, 1.0), &device)
                .require_grad();
            let ours = conv1d_as_matmul(&conv, x.clone());
            let burns = conv.forward(x.clone());
            assert_eq!(ours.dims(), burns.dims());
            assert!(
                gap(ours.clone(), burns.clone()) < 1e-5,
                "{c_in} {c_out} {kernel} {pad}"
            );
            // The same gradients for the input and the weight.
            let (g_ours, g_burns) = (
                ours.powf_scalar(2.0).sum().backward(),
                burns.powf_scalar(2.0).sum().backward(),
            );
            let weight_grad = |g: &<B as burn::tensor::backend::AutodiffBackend>::Gradients| {
                conv.weight.val().grad(g).unwrap()
            };
            assert!(gap(x.grad(&g_ours).unwrap(), x.grad(&g_burns).unwrap()) < 1e-4);
            assert!(gap(weight_grad(&g_ours), weight_grad(&g_burns)) < 1e-4);
        }
        // A strided convolution is burn's own.
        let strided: Conv1d<B> = Conv1dConfig::new(2, 2, 3).with_stride(2).init(&device);
        let x = Tensor::<B, 3>::random([1, 2, 8], Distribution::Normal(0.0, 1.0), &device);
        assert_eq!(
            gap(conv1d_as_matmul(&strided, x.clone()), strided.forward(x)),
            0.0
        );
    }
}
