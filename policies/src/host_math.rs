//! Elementwise functions for the host paths, in plain `f32` arithmetic without
//! branches or library calls, so that loops over slices of them vectorise.
//!
//! Why: libm's `erf` and `exp` are scalar calls, one element at a time; in the world
//! model's MLPs and the policy's feed-forward blocks the exact GELU's `erf` was the
//! largest cost after the GEMMs (docs/performance.md). The GELU here evaluates the
//! error function as PyTorch's vectorised CPU kernel does (Abramowitz and Stegun
//! 7.1.26, absolute error under 1.5e-7), so the host paths compute GELU to the same
//! accuracy as the framework they are compared with.

/// Defines `fn $name` over slices whose body runs compiled for AVX2 and FMA where the
/// CPU has them (detected at run time), else as compiled for the baseline target.
/// The loops in the body then vectorise 8 lanes wide instead of SSE2's 4. LLVM does not
/// fuse a multiplication and an addition into an FMA without fast-math flags, so both
/// versions give the same bits.
macro_rules! vectorised {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) {
            #[inline(always)]
            fn body($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                unsafe fn wide($($arg: $ty),*) {
                    body($($arg),*)
                }
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                    // SAFETY: the CPU has the features `wide` is compiled for.
                    return unsafe { wide($($arg),*) };
                }
            }
            body($($arg),*)
        }
    };
}
pub(crate) use vectorised;

/// `exp(x)` for `x <= 0`: `2^n e^r` with `n` the nearest integer to `x / ln 2` and a
/// degree-6 polynomial for `e^r` on `|r| <= ln 2 / 2` (Cephes' `expf` coefficients;
/// within 2 ulp of libm's). Below -87 it returns about 1e-38 instead of underflowing:
/// its callers use it as a weight next to a largest weight of 1, or as a factor of a
/// value that is already negligible.
#[inline]
pub(crate) fn exp_nonpositive(x: f32) -> f32 {
    const ROUNDING: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer.
    let x = x.max(-87.0);
    let shifted = x * std::f32::consts::LOG2_E + ROUNDING;
    let n = shifted - ROUNDING;
    // x - n ln 2, with ln 2 split in two so that the product is exact.
    let r = x - n * 0.693_359_4 + n * 2.121_944_4e-4;
    let p = 1.987_569_1e-4;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 5e-1;
    let e_r = p * r * r + r + 1.0;
    let exponent = (shifted.to_bits() as i32 - ROUNDING.to_bits() as i32 + 127) as u32;
    e_r * f32::from_bits(exponent << 23)
}

/// `1 / sqrt(2 pi)`, the standard normal density at 0.
const DENSITY_AT_ZERO: f32 = 0.398_942_3;

/// The standard normal distribution function `Phi(x)` and density `phi(x)`:
/// `Phi(x) = (1 + erf(x / sqrt 2)) / 2` with `erf(z) = 1 - t P(t) e^{-z^2}`,
/// `t = 1 / (1 + p z)` for `z >= 0` (Abramowitz and Stegun 7.1.26) and the odd
/// symmetry for `z < 0`.
#[inline]
fn normal_cdf_and_density(x: f32) -> (f32, f32) {
    let z = x.abs() * std::f32::consts::FRAC_1_SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * z);
    let poly = 1.061_405_4_f32;
    let poly = poly * t - 1.453_152_1;
    let poly = poly * t + 1.421_413_7;
    let poly = poly * t - 0.284_496_74;
    let poly = poly * t + 0.254_829_6;
    let gaussian = exp_nonpositive(-0.5 * x * x);
    let erf_abs = 1.0 - poly * t * gaussian;
    let cdf = 0.5 + 0.5 * erf_abs.copysign(x);
    (cdf, DENSITY_AT_ZERO * gaussian)
}

/// The exact GELU, `x Phi(x)`, to within 1e-6 for `|x| <= 10` (see the module
/// documentation).
#[inline]
pub(crate) fn gelu(x: f32) -> f32 {
    x * normal_cdf_and_density(x).0
}

/// GELU and its slope `Phi(x) + x phi(x)`, each to within 1e-6 for `|x| <= 10`.
#[inline]
pub(crate) fn gelu_with_slope(x: f32) -> (f32, f32) {
    let (cdf, density) = normal_cdf_and_density(x);
    (x * cdf, cdf + x * density)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_exponential_matches_the_library_within_two_ulp() {
        for i in 0..=200_000 {
            let x = -87.0 * i as f32 / 200_000.0;
            let (fast, exact) = (exp_nonpositive(x), x.exp());
            let ulp = f32::EPSILON * exact;
            assert!(
                (fast - exact).abs() <= 2.0 * ulp,
                "exp({x}): {fast} vs {exact}"
            );
        }
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert!(exp_nonpositive(-1e4) > 0.0 && exp_nonpositive(-1e4) < 1e-37);
    }

    /// GELU and its slope in double precision with libm's `erf`.
    fn exact(x: f64) -> (f64, f64) {
        let cdf = 0.5 * (1.0 + libm::erf(x / std::f64::consts::SQRT_2));
        let density = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
        (x * cdf, cdf + x * density)
    }

    #[test]
    fn gelu_and_its_slope_match_double_precision_within_1e_6() {
        let mut worst = (0.0f64, 0.0f64);
        for i in -200_000..=200_000 {
            let x = i as f32 * 5e-5;
            let (value, slope) = gelu_with_slope(x);
            assert_eq!(value, gelu(x));
            let (value_exact, slope_exact) = exact(x as f64);
            worst.0 = worst.0.max((value as f64 - value_exact).abs());
            worst.1 = worst.1.max((slope as f64 - slope_exact).abs());
        }
        assert!(worst.0 < 1e-6 && worst.1 < 1e-6, "worst errors {worst:?}");
        // Far tails: the identity and zero, without overflow or NaN.
        assert_eq!(gelu(40.0), 40.0);
        assert!(gelu(-40.0).abs() < 1e-30 && gelu_with_slope(-40.0).1.abs() < 1e-30);
        assert!(gelu(f32::NAN).is_nan());
    }
}
