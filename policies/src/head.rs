//! Action-chunk heads of the VLA: a Gaussian over the chunk, or a flow-matching
//! velocity field that turns noise into a chunk (pi0 family). Both read the
//! transformer's readout summary `[B, d]` and work in units of the action limit.

use std::fmt;
use std::str::FromStr;

use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::{gelu, sigmoid};
use serde::{Deserialize, Serialize};

use imago_robots::bounds::{ConfigError, in_range};

use crate::flow::{euler_sample, time_features};
use crate::precision::cast_to;
use crate::vision::ComputePath;

/// The most actions an imago policy's chunk holds (the VLA's and the linear policy's
/// `chunk_len`); what a receding horizon may execute of one plan is bounded by it too.
pub const MAX_CHUNK_LEN: usize = 64;

/// Which head a policy predicts its action chunk with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ActionHeadKind {
    /// A diagonal Gaussian per chunk step (mean and log std), trained by likelihood.
    #[default]
    Gaussian,
    /// A flow-matching velocity field, sampled with a few Euler steps; can represent
    /// several modes where a Gaussian averages them.
    Flow,
}

impl ActionHeadKind {
    /// Every head, in a fixed order.
    pub const ALL: [Self; 2] = [Self::Gaussian, Self::Flow];

    /// The name used in configs and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Gaussian => "gaussian",
            Self::Flow => "flow",
        }
    }
}

impl fmt::Display for ActionHeadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ActionHeadKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| format!("unknown action head `{s}`; use gaussian or flow"))
    }
}

/// A Gaussian over a chunk of `K` actions, in units of the action limit.
#[derive(Debug, Clone)]
pub struct GaussianChunk<B: Backend> {
    /// Means, `[batch, K, A]`.
    pub mean: Tensor<B, 3>,
    /// Log standard deviations, `[batch, K, A]`.
    pub log_std: Tensor<B, 3>,
}

impl<B: Backend> GaussianChunk<B> {
    /// Log-density of `actions` `[batch, K, A]` per chunk step, `[batch, K]`.
    pub fn log_prob(&self, actions: Tensor<B, 3>) -> Tensor<B, 2> {
        let z = (actions - self.mean.clone()) * self.log_std.clone().neg().exp();
        let per_element = (z.powf_scalar(2.0) * 0.5 + self.log_std.clone())
            .neg()
            .sub_scalar(0.5 * (2.0 * std::f64::consts::PI).ln());
        per_element.sum_dim(2).squeeze_dim(2)
    }
}

/// The Gaussian head: an MLP from the summary to means and bounded log stds.
#[derive(Module, Debug)]
pub struct GaussianHead<B: Backend> {
    pub(crate) hidden: Linear<B>,
    pub(crate) out: Linear<B>,
    chunk_len: usize,
    action_dim: usize,
    pub(crate) min_log_std: f64,
    pub(crate) max_log_std: f64,
}

impl<B: Backend> GaussianHead<B> {
    /// A head for chunks of `chunk_len` actions of `action_dim` from a `d`-wide summary.
    pub fn new(
        d: usize,
        chunk_len: usize,
        action_dim: usize,
        log_std_range: (f64, f64),
        device: &B::Device,
    ) -> Self {
        Self {
            hidden: LinearConfig::new(d, d).init(device),
            out: LinearConfig::new(d, 2 * chunk_len * action_dim).init(device),
            chunk_len,
            action_dim,
            min_log_std: log_std_range.0,
            max_log_std: log_std_range.1,
        }
    }

    /// The chunk distribution for summaries `[B, d]`: the head predicts displacements,
    /// and every step's mean is measured from `origin` `[B, A]` (the input's
    /// `PolicyInput::action_origin`; zeros for absolute actions).
    pub fn forward(&self, summary: Tensor<B, 2>, origin: Tensor<B, 2>) -> GaussianChunk<B> {
        let batch = summary.dims()[0];
        // The exact GELU with its exact slope on the CPU backends, as the encoder's
        // feed-forward blocks and the host training step compute it.
        let hidden = crate::gelu::gelu(self.hidden.forward(summary), ComputePath::Auto);
        let out = self.out.forward(hidden);
        let ka = self.chunk_len * self.action_dim;
        let shape = [batch, self.chunk_len, self.action_dim];
        let mean = out.clone().narrow(1, 0, ka).reshape(shape) + origin.unsqueeze_dim::<3>(1);
        let raw_log_std = out.narrow(1, ka, ka).reshape(shape);
        let log_std =
            sigmoid(raw_log_std) * (self.max_log_std - self.min_log_std) + self.min_log_std;
        GaussianChunk { mean, log_std }
    }
}

/// What a policy config says about its action head: every architecture builds,
/// counts and checks its head through this one description.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HeadShape {
    /// Gaussian or flow.
    pub kind: ActionHeadKind,
    /// Width of the summary the head reads.
    pub summary: usize,
    /// Actions per chunk (`K`).
    pub chunk_len: usize,
    /// Length of an action (`A`).
    pub action_dim: usize,
    /// The Gaussian head's bounds of log standard deviation.
    pub log_std_range: (f64, f64),
    /// The flow head's hidden width.
    pub flow_width: usize,
}

impl HeadShape {
    /// Parameters of the head (weights and biases), from the shape alone.
    pub fn parameter_count(&self) -> usize {
        let linear = |i: usize, o: usize| i * o + o;
        let (d, io, w) = (
            self.summary,
            self.chunk_len * self.action_dim,
            self.flow_width,
        );
        match self.kind {
            ActionHeadKind::Gaussian => linear(d, d) + linear(d, 2 * io),
            ActionHeadKind::Flow => {
                linear(d + io + 2 * TIME_OCTAVES + 1, w) + linear(w, w) + linear(w, io)
            }
        }
    }

    /// Checks the log-std bounds and the flow width against their documented ranges;
    /// the error names the config key. (Each config checks `chunk_len` where its
    /// other sizes are checked.)
    pub fn validate(&self) -> Result<(), ConfigError> {
        let (min, max) = self.log_std_range;
        in_range("min_log_std", min, -20.0..=5.0)?;
        in_range("max_log_std", max, min..=5.0)?;
        in_range("flow_width", self.flow_width, 1..=4096)
    }

    /// A freshly initialised head of this shape.
    pub fn init<B: Backend>(&self, device: &B::Device) -> ActionHead<B> {
        let (d, k, a) = (self.summary, self.chunk_len, self.action_dim);
        match self.kind {
            ActionHeadKind::Gaussian => {
                ActionHead::Gaussian(GaussianHead::new(d, k, a, self.log_std_range, device))
            }
            ActionHeadKind::Flow => {
                ActionHead::Flow(FlowHead::new(d, k, a, self.flow_width, device))
            }
        }
    }
}

/// Octaves of the flow head's time features.
pub(crate) const TIME_OCTAVES: usize = 4;

/// The flow-matching head: an MLP velocity field `v(x, tau | summary)` over the
/// flattened chunk `x` `[B, K * A]`.
#[derive(Module, Debug)]
pub struct FlowHead<B: Backend> {
    input: Linear<B>,
    hidden: Linear<B>,
    out: Linear<B>,
    chunk_len: usize,
    action_dim: usize,
}

impl<B: Backend> FlowHead<B> {
    /// A head for chunks of `chunk_len` actions of `action_dim` from a `d`-wide
    /// summary, with `width` hidden units.
    pub fn new(
        d: usize,
        chunk_len: usize,
        action_dim: usize,
        width: usize,
        device: &B::Device,
    ) -> Self {
        let ka = chunk_len * action_dim;
        Self {
            input: LinearConfig::new(d + ka + 2 * TIME_OCTAVES + 1, width).init(device),
            hidden: LinearConfig::new(width, width).init(device),
            out: LinearConfig::new(width, ka).init(device),
            chunk_len,
            action_dim,
        }
    }

    /// Flattened chunk width `K * A`.
    pub fn width(&self) -> usize {
        self.chunk_len * self.action_dim
    }

    /// The velocity `[B, K * A]` at points `x` `[B, K * A]` and times `tau` `[B]`.
    pub fn velocity(
        &self,
        summary: Tensor<B, 2>,
        x: Tensor<B, 2>,
        tau: Tensor<B, 1>,
    ) -> Tensor<B, 2> {
        let features = Tensor::cat(vec![summary, x, time_features(tau, TIME_OCTAVES)], 1);
        let h = gelu(self.input.forward(features));
        let h = gelu(self.hidden.forward(h));
        self.out.forward(h)
    }

    /// Chunks `[B, K, A]` integrated from `noise` `[B, K * A]` in `steps` Euler steps.
    pub fn sample(&self, summary: Tensor<B, 2>, noise: Tensor<B, 2>, steps: usize) -> Tensor<B, 3> {
        let batch = summary.dims()[0];
        let x = euler_sample(
            |x, tau| self.velocity(summary.clone(), x, tau),
            noise,
            steps,
        );
        x.reshape([batch, self.chunk_len, self.action_dim])
    }
}

/// The head of a [`crate::VlaPolicy`]. A policy holds exactly one, so the variants'
/// size difference costs nothing worth a box (which burn's module derive does not take).
#[derive(Module, Debug)]
#[allow(clippy::large_enum_variant)]
pub enum ActionHead<B: Backend> {
    /// See [`GaussianHead`].
    Gaussian(GaussianHead<B>),
    /// See [`FlowHead`].
    Flow(FlowHead<B>),
}

impl<B: Backend> ActionHead<B> {
    /// The chunk distribution of a Gaussian head reading `summary` `[batch, d]`, its
    /// means measured from `origin` `[batch, A]`; `None` for a flow head.
    pub fn gaussian(
        &self,
        summary: Tensor<B, 2>,
        origin: Tensor<B, 2>,
    ) -> Option<GaussianChunk<B>> {
        match self {
            Self::Gaussian(head) => Some(head.forward(summary, origin)),
            Self::Flow(_) => None,
        }
    }

    /// Action chunks `[batch, K, A]` read from `summary` `[batch, d]`, measured from
    /// `origin` `[batch, A]`, in `summary`'s float type. Without noise: the Gaussian's
    /// mean, or the flow integrated from zero noise in `flow_steps` Euler steps
    /// (deterministic). With `noise` `[batch, K, A]` (standard normal): a sample,
    /// `mean + std * noise` or the flow integrated from it.
    pub fn act(
        &self,
        summary: Tensor<B, 2>,
        origin: Tensor<B, 2>,
        noise: Option<Tensor<B, 3>>,
        flow_steps: usize,
    ) -> Tensor<B, 3> {
        let dtype = summary.dtype();
        match self {
            Self::Gaussian(head) => {
                let chunk = head.forward(summary, origin);
                match noise {
                    Some(noise) => chunk.mean + chunk.log_std.exp() * cast_to(noise, dtype),
                    None => chunk.mean,
                }
            }
            Self::Flow(head) => {
                let [batch, _] = summary.dims();
                let device = summary.device();
                let start = noise
                    .map(|n| cast_to(n.reshape([batch, head.width()]), dtype))
                    .unwrap_or_else(|| Tensor::zeros([batch, head.width()], (&device, dtype)));
                head.sample(summary, start, flow_steps) + origin.unsqueeze_dim::<3>(1)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};
    use burn::optim::{AdamConfig, GradientsParams, Optimizer};
    use burn::tensor::Distribution;

    use crate::flow::flow_path;

    type B = Autodiff<Flex>;

    /// Samples of the 1-D mixture `0.5 N(-2, 0.3^2) + 0.5 N(2, 0.3^2)`.
    fn mixture(n: usize, device: &burn::tensor::Device<B>) -> Tensor<B, 2> {
        let modes =
            Tensor::<B, 2>::random([n, 1], Distribution::Bernoulli(0.5), device) * 4.0 - 2.0;
        modes + Tensor::random([n, 1], Distribution::Normal(0.0, 0.3), device)
    }

    #[test]
    fn flow_sampler_reproduces_a_bimodal_distribution() {
        let _serial = crate::AUTODIFF_TESTS
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let device = Default::default();
        B::seed(&device, 7);
        // An unconditional head: a zero-width summary, chunks of one 1-D action.
        let mut head = FlowHead::<B>::new(0, 1, 1, 64, &device);
        let mut optim = AdamConfig::new().init();
        for step in 0..1500 {
            let data = mixture(256, &device);
            let noise = Tensor::random([256, 1], Distribution::Normal(0.0, 1.0), &device);
            let tau = Tensor::random([256], Distribution::Uniform(0.0, 1.0), &device);
            let (x, target) = flow_path(noise, data, tau.clone());
            let summary = Tensor::zeros([256, 0], &device);
            let loss = (head.velocity(summary, x, tau) - target)
                .powf_scalar(2.0)
                .mean();
            let grads = GradientsParams::from_grads(loss.backward(), &head);
            let lr = if step < 1000 { 3e-3 } else { 1e-3 };
            head = optim.step(lr, head, grads);
        }
        let n = 4000;
        let noise = Tensor::random([n, 1], Distribution::Normal(0.0, 1.0), &device);
        let samples: Vec<f32> = head
            .sample(Tensor::zeros([n, 0], &device), noise, 20)
            .into_data()
            .to_vec()
            .unwrap();
        let right = samples.iter().filter(|&&x| x > 0.0).count() as f32 / n as f32;
        let between = samples.iter().filter(|&&x| x.abs() < 1.0).count() as f32 / n as f32;
        let mean_abs = samples.iter().map(|x| x.abs()).sum::<f32>() / n as f32;
        let spread = (samples
            .iter()
            .map(|x| (x.abs() - mean_abs).powi(2))
            .sum::<f32>()
            / n as f32)
            .sqrt();
        // Half the mass in each mode, little between them (a Gaussian fit would put
        // 38% of its mass in |x| < 1), each mode where and as wide as it should be.
        assert!((0.42..=0.58).contains(&right), "mass right of 0: {right}");
        assert!(between < 0.08, "mass in |x| < 1: {between}");
        assert!((mean_abs - 2.0).abs() < 0.25, "mean |x|: {mean_abs}");
        assert!((0.15..=0.5).contains(&spread), "spread of |x|: {spread}");
    }

    #[test]
    fn gaussian_log_prob_by_hand() {
        let device = Default::default();
        let chunk = GaussianChunk::<B> {
            mean: Tensor::from_data([[[0.0, 1.0]]], &device),
            log_std: Tensor::from_data([[[0.0, 2f32.ln()]]], &device),
        };
        let lp: f32 = chunk
            .log_prob(Tensor::from_data([[[1.0, 1.0]]], &device))
            .into_scalar();
        // N(1; 0, 1) and N(1; 1, 2): -0.5 - ln sqrt(2 pi) and -ln 2 - ln sqrt(2 pi)
        let half_log_2pi = 0.5 * (2.0 * std::f32::consts::PI).ln();
        let expect = -0.5 - half_log_2pi - 2f32.ln() - half_log_2pi;
        assert!((lp - expect).abs() < 1e-5, "{lp} vs {expect}");
    }

    #[test]
    fn head_names_round_trip() {
        for kind in ActionHeadKind::ALL {
            assert_eq!(kind.name().parse::<ActionHeadKind>(), Ok(kind));
        }
        assert!(
            "beta"
                .parse::<ActionHeadKind>()
                .unwrap_err()
                .contains("gaussian")
        );
    }
}
