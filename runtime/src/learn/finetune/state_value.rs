//! A learned value of the measured state, `V(s) ~ E[G_t | s_t = s]` under the policy
//! that collected a round, for `ppo-returns`' generalised advantages
//! (`[ppo_returns] baseline = "state-value"`).
//!
//! Why: the table baseline of [`super::return_credit`] knows a state only by its
//! reward level and the clock, so on pusht two ticks at the same coverage, one with the
//! pusher behind the block and one with it on the wrong side, share a baseline, and
//! each sample's advantage carries the difference. A regression of the returns to go
//! on the proprioception (pusht's carries the block's pose in the pose setting) takes
//! that out, and generalised advantages over it (`lambda < 1`) shorten how far ahead a
//! sample's credit reaches, so it carries less of later chunks' sampling noise.
//!
//! Cross-fitted: a value fitted to the returns it is then subtracted from learns part
//! of their noise and shrinks the advantages toward zero, so the round's episodes are
//! split in two folds and each fold's values come from a value fitted on the other.
//! Each round fits afresh (the policy, and so its value, changed): two MLPs of
//! `value_steps` steps on the round's states (about 4 s a pusht round on a 2-core CPU).

use burn::Dispatch;
use burn::module::AutodiffModule;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use imago_worldmodel::mlp::{Mlp, MlpConfig};
use rand::RngExt;
use rand::rngs::StdRng;

use super::return_credit::{held_tail, returns_to_go};
use crate::device::ResolvedDevice;
use crate::store::replay::Episode;

/// Hidden width of the value's two hidden layers.
const HIDDEN: usize = 128;
/// States per training step.
const BATCH: usize = 256;
/// Adam's learning rate for the value.
const LEARNING_RATE: f64 = 1e-3;

/// Every round episode's values and how much of the returns they explain.
#[derive(Debug, Clone, PartialEq)]
pub struct StateValues {
    /// `values[i]` has `T + 1` entries for episode `i` of `T` transitions: the
    /// cross-fitted `V(s_t)`, then the exact value after the last transition (the
    /// held reward of a success's unused ticks, 0 otherwise).
    pub values: Vec<Vec<f32>>,
    /// `1 - sum (G - V)^2 / sum (G - mean G)^2` over every transition: the share of
    /// the returns' variance the (held-out) values explain.
    pub explained: f32,
}

/// Per-entry mean and spread of a set of rows, to standardise them.
struct Standardiser {
    mean: Vec<f32>,
    scale: Vec<f32>,
}

impl Standardiser {
    fn of<'a>(rows: impl Iterator<Item = &'a [f32]>, width: usize) -> Self {
        let (mut sum, mut square, mut n) = (vec![0.0f64; width], vec![0.0f64; width], 0usize);
        for row in rows {
            for (i, &x) in row.iter().enumerate() {
                sum[i] += x as f64;
                square[i] += (x as f64) * (x as f64);
            }
            n += 1;
        }
        let n = n.max(1) as f64;
        let mean: Vec<f32> = sum.iter().map(|s| (s / n) as f32).collect();
        let scale = square
            .iter()
            .zip(&mean)
            .map(|(q, &m)| ((q / n - (m as f64) * (m as f64)).max(0.0).sqrt() as f32).max(1e-3))
            .collect();
        Self { mean, scale }
    }

    fn apply(&self, row: &[f32], into: &mut Vec<f32>) {
        into.extend(
            row.iter()
                .zip(self.mean.iter().zip(&self.scale))
                .map(|(x, (m, s))| (x - m) / s),
        );
    }
}

/// One fold's training states and returns.
struct Fold<'a> {
    states: Vec<&'a [f32]>,
    returns: Vec<f32>,
}

/// A value fitted on `fold` for `steps` steps of [`BATCH`], with the standardisers
/// of its inputs and targets.
fn fit(
    fold: &Fold<'_>,
    width: usize,
    steps: usize,
    device: &ResolvedDevice,
    rng: &mut StdRng,
) -> (Mlp<Dispatch>, Standardiser, Standardiser) {
    let inputs = Standardiser::of(fold.states.iter().copied(), width);
    let targets = Standardiser::of(fold.returns.iter().map(std::slice::from_ref), 1);
    let mut value = MlpConfig::new(width, HIDDEN, 1).init::<Dispatch>(&device.training);
    let mut optimizer = AdamConfig::new().init();
    let mut x = Vec::with_capacity(BATCH * width);
    let mut y = Vec::with_capacity(BATCH);
    for _ in 0..steps {
        x.clear();
        y.clear();
        for _ in 0..BATCH {
            let i = rng.random_range(0..fold.returns.len());
            inputs.apply(fold.states[i], &mut x);
            targets.apply(&fold.returns[i..=i], &mut y);
        }
        let input = Tensor::<Dispatch, 2>::from_data(
            TensorData::new(x.clone(), [BATCH, width]),
            &device.training,
        );
        let target = Tensor::<Dispatch, 2>::from_data(
            TensorData::new(y.clone(), [BATCH, 1]),
            &device.training,
        );
        let loss = (value.forward(input) - target).powf_scalar(2.0).mean();
        let grads = GradientsParams::from_grads(loss.backward(), &value);
        value = optimizer.step(LEARNING_RATE, value, grads);
    }
    (value, inputs, targets)
}

/// `value`'s predictions for `states`, in the returns' units.
fn predict(
    value: &Mlp<Dispatch>,
    (inputs, targets): (&Standardiser, &Standardiser),
    states: &[&[f32]],
    device: &ResolvedDevice,
) -> anyhow::Result<Vec<f32>> {
    let width = inputs.mean.len();
    let mut x = Vec::with_capacity(states.len() * width);
    for state in states {
        inputs.apply(state, &mut x);
    }
    let input = Tensor::<Dispatch, 2>::from_data(
        TensorData::new(x, [states.len(), width]),
        &device.inference,
    );
    let out: Vec<f32> = value
        .valid()
        .forward(input)
        .into_data()
        .convert::<f32>()
        .to_vec()
        .map_err(|e| anyhow::anyhow!("cannot read the state value's output: {e:?}"))?;
    Ok(out
        .into_iter()
        .map(|v| v * targets.scale[0] + targets.mean[0])
        .collect())
}

/// Cross-fitted values of every state of `episodes` (a round's, at least one
/// transition among them) for returns discounted by `discount` to `max_steps` ticks:
/// episodes alternate between two folds, each fold's values predicted by a value
/// fitted for `steps` steps on the other fold's states and returns to go. A round of
/// one episode is fitted and predicted on itself.
pub fn cross_fitted_values(
    episodes: &[&Episode],
    (max_steps, discount): (u32, f32),
    steps: usize,
    device: &ResolvedDevice,
    rng: &mut StdRng,
) -> anyhow::Result<StateValues> {
    let width = episodes
        .iter()
        .flat_map(|e| e.transitions.first())
        .map(|t| t.observation.proprio.len())
        .next()
        .ok_or_else(|| anyhow::anyhow!("no transition to fit a state value on"))?;
    anyhow::ensure!(
        width > 0,
        "baseline = \"state-value\" needs a robot with proprioception; use baseline = \"table\""
    );
    let returns: Vec<Vec<f32>> = episodes
        .iter()
        .map(|e| returns_to_go(e, max_steps, discount))
        .collect();
    let folds = if episodes.len() > 1 { 2 } else { 1 };
    let mut values: Vec<Vec<f32>> = episodes
        .iter()
        .map(|e| vec![held_tail(e, max_steps, discount); e.transitions.len() + 1])
        .collect();
    for held_out in 0..folds {
        let in_fold = |i: usize| folds == 1 || i % folds != held_out;
        let mut training = Fold {
            states: Vec::new(),
            returns: Vec::new(),
        };
        for (i, episode) in episodes.iter().enumerate().filter(|(i, _)| in_fold(*i)) {
            training.states.extend(
                episode
                    .transitions
                    .iter()
                    .map(|t| t.observation.proprio.as_slice()),
            );
            training.returns.extend(&returns[i]);
        }
        if training.returns.is_empty() {
            continue;
        }
        let (value, inputs, targets) = fit(&training, width, steps, device, rng);
        for (i, episode) in episodes.iter().enumerate() {
            if folds > 1 && in_fold(i) {
                continue;
            }
            let states: Vec<&[f32]> = episode
                .transitions
                .iter()
                .map(|t| t.observation.proprio.as_slice())
                .collect();
            if states.is_empty() {
                continue;
            }
            let predicted = predict(&value, (&inputs, &targets), &states, device)?;
            values[i][..states.len()].copy_from_slice(&predicted);
        }
    }
    let explained = explained_variance(
        returns.iter().flatten().copied(),
        values
            .iter()
            .zip(&returns)
            .flat_map(|(v, g)| &v[..g.len()])
            .copied(),
    );
    Ok(StateValues { values, explained })
}

/// `1 - sum (g - b)^2 / sum (g - mean g)^2`: the share of the returns' `g` variance
/// that the baseline `b` explains (1 for a perfect baseline, 0 for the mean, below 0
/// for one worse than the mean); 0 when the returns do not vary.
pub fn explained_variance(
    returns: impl Iterator<Item = f32> + Clone,
    baseline: impl Iterator<Item = f32>,
) -> f32 {
    let (sum, n) = returns
        .clone()
        .fold((0.0f64, 0usize), |(s, n), g| (s + g as f64, n + 1));
    let mean = sum / n.max(1) as f64;
    let (residual, total) = returns
        .zip(baseline)
        .fold((0.0f64, 0.0f64), |(r, t), (g, b)| {
            let (g, b) = (g as f64, b as f64);
            (r + (g - b) * (g - b), t + (g - mean) * (g - mean))
        });
    if total <= 0.0 {
        return 0.0;
    }
    (1.0 - residual / total) as f32
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;
    use crate::device::{CpuBackend, DeviceSpec, resolve};
    use crate::learn::finetune::test_episodes::ended;

    /// An episode whose proprioception is a position `x` moving at a fixed speed and
    /// the ticks left, and whose reward is `x^2`: its returns to go are a function of
    /// the state the value can learn.
    fn smooth(seed: u64, start: f32, len: usize) -> Episode {
        let mut episode = ended(seed, 1, &vec![0.0; len], false);
        for (k, t) in episode.transitions.iter_mut().enumerate() {
            let x = start + 0.05 * k as f32;
            t.observation.proprio = vec![x, (len - k) as f32 / len as f32];
            t.reward = x * x;
        }
        episode
    }

    #[test]
    fn explained_variance_by_hand() {
        let g = [1.0f32, 2.0, 3.0];
        assert_eq!(
            explained_variance(g.iter().copied(), g.iter().copied()),
            1.0
        );
        assert_eq!(
            explained_variance(g.iter().copied(), [2.0f32; 3].into_iter()),
            0.0
        );
        // Residuals 1, 0, -1 against total 2: 1 - 2/2 = 0.
        let shifted = [0.0f32, 2.0, 4.0];
        assert_eq!(
            explained_variance(g.iter().copied(), shifted.into_iter()),
            0.0
        );
        assert_eq!(
            explained_variance([5.0f32; 3].into_iter(), g.into_iter()),
            0.0
        );
    }

    #[test]
    fn held_out_values_explain_returns_that_depend_on_the_state() {
        let device = resolve(DeviceSpec::Cpu(CpuBackend::Flex)).expect("cpu");
        let episodes: Vec<Episode> = (0..8)
            .map(|i| smooth(i, -1.0 + 0.1 * i as f32, 20))
            .collect();
        let refs: Vec<&Episode> = episodes.iter().collect();
        let mut rng = StdRng::seed_from_u64(7);
        let fitted = cross_fitted_values(&refs, (20, 0.8), 400, &device, &mut rng).expect("fit");
        assert!(fitted.explained > 0.9, "explained {}", fitted.explained);
        for (values, episode) in fitted.values.iter().zip(&episodes) {
            assert_eq!(values.len(), episode.transitions.len() + 1);
            // A failed episode's value after its last tick is exactly 0.
            assert_eq!(values[episode.transitions.len()], 0.0);
        }
        // Held out: the same states in an episode the other fold never saw are
        // valued as the fitted function says, not as their own returns.
        let g = returns_to_go(&episodes[3], 20, 0.8);
        let error: f32 = g
            .iter()
            .zip(&fitted.values[3])
            .map(|(g, v)| (g - v).abs())
            .sum::<f32>()
            / g.len() as f32;
        assert!(
            error < 0.1 * g.iter().sum::<f32>() / g.len() as f32,
            "{error}"
        );
    }

    #[test]
    fn a_success_keeps_its_held_tail_and_no_proprioception_is_one_error() {
        let device = resolve(DeviceSpec::Cpu(CpuBackend::Flex)).expect("cpu");
        let reached = ended(1, 1, &[0.5, 1.0], true);
        let mut rng = StdRng::seed_from_u64(1);
        let fitted = cross_fitted_values(&[&reached], (4, 0.5), 5, &device, &mut rng).expect("fit");
        // Held for 2 unused ticks: 1 + 0.5 * 1.
        assert_eq!(fitted.values[0][2], 1.5);
        let mut blind = reached.clone();
        blind
            .transitions
            .iter_mut()
            .for_each(|t| t.observation.proprio.clear());
        let error = cross_fitted_values(&[&blind], (4, 0.5), 5, &device, &mut rng)
            .expect_err("no proprioception");
        assert!(
            error.to_string().contains("baseline = \"table\""),
            "{error}"
        );
    }
}
