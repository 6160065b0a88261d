//! Linear layers over many rows as one matrix product.
//!
//! burn-ndarray multiplies a `[B, H, K]` input by a `[K, N]` weight as `B` separate
//! products: it broadcasts the weight and loops over the batch, so a layer applied to
//! `[512, 1, K]` (one step of closed-loop imagination) is 512 matrix-vector products.
//! Folding every leading dimension into rows makes it one GEMM, which the GEMM's own
//! threads then split (docs/performance.md).

use burn::nn::Linear;
use burn::prelude::*;

/// `f`, a map from rows `[R, K]` to rows `[R, N]`, applied to the last dimension of
/// `input`: every leading dimension is folded into the rows first and unfolded after.
pub fn on_rows<B: Backend, const D: usize>(
    input: Tensor<B, D>,
    f: impl FnOnce(Tensor<B, 2>) -> Tensor<B, 2>,
) -> Tensor<B, D> {
    let mut dims = input.dims();
    let rows = dims[..D - 1].iter().product();
    let out = f(input.reshape([rows, dims[D - 1]]));
    dims[D - 1] = out.dims()[1];
    out.reshape(dims)
}

/// `layer` applied to the last dimension of `input`, all leading dimensions folded
/// into the rows of one product; the same values as `layer.forward(input)`.
pub fn linear_rows<B: Backend, const D: usize>(
    layer: &Linear<B>,
    input: Tensor<B, D>,
) -> Tensor<B, D> {
    on_rows(input, |rows| layer.forward(rows))
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;
    use burn::nn::LinearConfig;
    use burn::tensor::Distribution;

    use super::*;

    #[test]
    fn folded_rows_match_the_broadcast_product() {
        let device = Default::default();
        let layer = LinearConfig::new(5, 3).init::<Flex>(&device);
        let input = Tensor::<Flex, 3>::random([4, 2, 5], Distribution::Default, &device);
        let folded = linear_rows(&layer, input.clone());
        assert_eq!(folded.dims(), [4, 2, 3]);
        let gap = (folded - layer.forward(input)).abs().max().into_scalar();
        assert!(gap < 1e-6, "{gap}");
    }
}
