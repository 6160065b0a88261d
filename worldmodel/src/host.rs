//! Imagination in plain Rust on the CPU: the same computation as [`crate::imagine`]
//! on slices, rows in parallel.
//!
//! Why: imagination is inference over a few hundred start states and a handful of
//! small MLPs per step; through burn-ndarray each step is dozens of tensor operations
//! with an allocation and a scalar `erf` pass each, 3.7-5x slower than PyTorch eager
//! (docs/performance.md). Every start state's rollout depends on no other (the
//! ensemble mean is taken per row), so [`HostWorldModel::imagine`] splits the rows into
//! blocks, one rayon task each, and runs each block's whole horizon with
//! the `gemm` crate's products and the vectorised GELU of the policy's host paths. The
//! weights are copied out of the [`WorldModel`] once ([`HostWorldModel::of`]); tests
//! hold the result to [`crate::imagine`]'s within 1e-5 for every family, closed and
//! open loop.

use burn::prelude::*;
use imago_policies::ComputePath;
use imago_policies::HostLinear;
use imago_policies::activation::gelu_in_place;
use imago_policies::readback::values;
use rayon::prelude::*;

use crate::config::TransitionFamily;
use crate::imagine::{ImaginationConfig, ImaginedRollout};
use crate::mlp::Mlp;
use crate::model::WorldModel;
use crate::transition::TransitionMember;

/// Most start states per parallel task: enough rows that each GEMM amortises
/// packing its weights.
const MAX_BLOCK: usize = 128;
/// Fewest start states per parallel task.
const MIN_BLOCK: usize = 8;

/// Start states per parallel task: two tasks per thread where the batch allows (the
/// critic's 128 starts make blocks of 32 on two threads; the bench's 512, of 128).
fn block_rows(batch: usize) -> usize {
    batch
        .div_ceil(2 * rayon::current_num_threads())
        .clamp(MIN_BLOCK, MAX_BLOCK)
}

/// An [`Mlp`]'s weights on the host.
struct HostMlp {
    hidden: Vec<HostLinear>,
    output: HostLinear,
}

impl HostMlp {
    fn of<B: Backend>(mlp: &Mlp<B>) -> Self {
        Self {
            hidden: mlp.hidden.iter().map(HostLinear::of).collect(),
            output: HostLinear::of(&mlp.output),
        }
    }

    fn outputs(&self) -> usize {
        self.output.outputs()
    }

    /// The MLP of the first `rows` rows of `x`, `[rows, outputs]`.
    fn forward(&self, rows: usize, x: &[f32]) -> Vec<f32> {
        let mut input: Option<Vec<f32>> = None;
        for layer in &self.hidden {
            let mut hidden = vec![0.0; rows * layer.outputs()];
            layer.forward(rows, input.as_deref().unwrap_or(x), &mut hidden);
            gelu_in_place(&mut hidden);
            input = Some(hidden);
        }
        let mut out = vec![0.0; rows * self.output.outputs()];
        self.output
            .forward(rows, input.as_deref().unwrap_or(x), &mut out);
        out
    }
}

/// The sizes of a block of rows: `rows` start states, latents of `d`, actions of `a`.
#[derive(Debug, Clone, Copy)]
struct RowShape {
    rows: usize,
    d: usize,
    a: usize,
}

/// One transition member's weights on the host.
enum HostMember {
    /// `z' = z + tanh(MLP([z, a]))`, the first `P` entries' change gated by
    /// `sigmoid(G([z, a]))` where there is a gate.
    ResidualMlp {
        delta: HostMlp,
        gate: Option<HostMlp>,
    },
    /// `z' = (I + M(a)) z + b(a)`, `[vec(M), b] = MLP(a)`.
    Salt(HostMlp),
    /// Latents after every prefix of up to `max_horizon` actions in one pass.
    ActionPrefix {
        action_embed: HostLinear,
        /// `[max_horizon, width]`.
        horizon_embed: Vec<f32>,
        predict: HostMlp,
        max_horizon: usize,
    },
}

impl HostMember {
    fn of<B: Backend>(member: &TransitionMember<B>) -> Self {
        match member {
            TransitionMember::ResidualMlp(m) => Self::ResidualMlp {
                delta: HostMlp::of(&m.delta),
                gate: m.gate.as_ref().map(HostMlp::of),
            },
            TransitionMember::Salt(m) => Self::Salt(HostMlp::of(&m.affine)),
            TransitionMember::ActionPrefix(m) => Self::ActionPrefix {
                action_embed: HostLinear::of(&m.action_embed),
                horizon_embed: values(m.horizon_embed.weight.val()),
                predict: HostMlp::of(&m.predict),
                max_horizon: m.max_horizon(),
            },
        }
    }

    /// Latents `[rows, len, d]` after each of `actions` `[rows, len, a]` from `latent`
    /// `[rows, d]`, open loop on the member's own predictions, as
    /// [`TransitionMember::rollout`].
    fn rollout(&self, shape: RowShape, latent: &[f32], actions: &[f32]) -> Vec<f32> {
        let RowShape { rows, d, a } = shape;
        let len = actions.len() / (rows * a);
        let mut out = vec![0.0; rows * len * d];
        let mut start = latent.to_vec();
        let mut done = 0;
        while done < len {
            let part_len = match self {
                Self::ActionPrefix { max_horizon, .. } => (*max_horizon).min(len - done),
                _ => 1,
            };
            let part_actions: Vec<f32> = (0..rows)
                .flat_map(|r| {
                    let at = (r * len + done) * a;
                    actions[at..at + part_len * a].iter().copied()
                })
                .collect();
            let part = self.predict(shape, &start, &part_actions, part_len);
            for r in 0..rows {
                let from = r * part_len * d;
                let to = (r * len + done) * d;
                out[to..to + part_len * d].copy_from_slice(&part[from..from + part_len * d]);
                start[r * d..(r + 1) * d]
                    .copy_from_slice(&part[from + (part_len - 1) * d..from + part_len * d]);
            }
            done += part_len;
        }
        out
    }

    /// One pass: `len` latents `[rows, len, d]` from `start` `[rows, d]` under
    /// `actions` `[rows, len, a]`; `len` is 1 except for the action-prefix family.
    fn predict(&self, shape: RowShape, start: &[f32], actions: &[f32], len: usize) -> Vec<f32> {
        let RowShape { rows, d, a } = shape;
        match self {
            Self::ResidualMlp { delta, gate } => {
                let input: Vec<f32> = (0..rows)
                    .flat_map(|r| {
                        start[r * d..(r + 1) * d]
                            .iter()
                            .chain(&actions[r * a..(r + 1) * a])
                            .copied()
                    })
                    .collect();
                let mut next = delta.forward(rows, &input);
                next.iter_mut().for_each(|n| *n = n.tanh());
                if let Some(gate) = gate {
                    let p = gate.outputs();
                    let logits = gate.forward(rows, &input);
                    for (change, logits) in next.chunks_exact_mut(d).zip(logits.chunks_exact(p)) {
                        change
                            .iter_mut()
                            .zip(logits)
                            .for_each(|(c, l)| *c /= 1.0 + (-l).exp());
                    }
                }
                next.iter_mut().zip(start).for_each(|(n, z)| *n += z);
                next
            }
            Self::Salt(affine) => {
                let out = affine.forward(rows, actions);
                let width = affine.outputs();
                let mut next = vec![0.0; rows * d];
                for r in 0..rows {
                    let (matrix, offset) = out[r * width..(r + 1) * width].split_at(d * d);
                    let z = &start[r * d..(r + 1) * d];
                    for (i, n) in next[r * d..(r + 1) * d].iter_mut().enumerate() {
                        *n = z[i] + dot(&matrix[i * d..(i + 1) * d], z) + offset[i];
                    }
                }
                next
            }
            Self::ActionPrefix {
                action_embed,
                horizon_embed,
                predict,
                ..
            } => {
                let width = action_embed.outputs();
                let mut summary = vec![0.0; rows * len * width];
                action_embed.forward(rows * len, actions, &mut summary);
                for row in summary.chunks_exact_mut(len * width) {
                    for h in 1..len {
                        let (before, this) = row.split_at_mut(h * width);
                        let previous = &before[(h - 1) * width..];
                        this[..width]
                            .iter_mut()
                            .zip(previous)
                            .for_each(|(s, p)| *s += p);
                    }
                }
                let input: Vec<f32> = summary
                    .chunks_exact(width)
                    .enumerate()
                    .flat_map(|(i, sum)| {
                        let (r, h) = (i / len, i % len);
                        let embed = &horizon_embed[h * width..(h + 1) * width];
                        start[r * d..(r + 1) * d]
                            .iter()
                            .copied()
                            .chain(sum.iter().zip(embed).map(|(s, e)| s + e))
                    })
                    .collect();
                let mut next = predict.forward(rows * len, &input);
                for (i, n) in next.chunks_exact_mut(d).enumerate() {
                    let r = i / len;
                    n.iter_mut()
                        .zip(&start[r * d..(r + 1) * d])
                        .for_each(|(n, z)| *n += z);
                }
                next
            }
        }
    }
}

/// What imagination follows on the host.
#[derive(Debug, Clone, Copy)]
pub enum HostPlan<'a> {
    /// The world model's latent actor, one action per step (closed loop), as
    /// [`crate::LatentActor`].
    LatentActor,
    /// A fixed action sequence `[B, H, A]`, row-major, handed over whole (open loop),
    /// as [`crate::OpenLoopActions`].
    Actions(&'a [f32]),
}

/// A [`WorldModel`]'s transition members and heads on the host; see the module
/// documentation.
pub struct HostWorldModel {
    family: TransitionFamily,
    latent_dim: usize,
    action_dim: usize,
    members: Vec<HostMember>,
    reward: HostMlp,
    continuation: HostMlp,
    value: HostMlp,
    actor: HostMlp,
    /// The state decoder, for a model with one.
    state: Option<HostLinear>,
    /// Leading latent entries that are the proprioception (0: none).
    state_entries: usize,
}

/// An imagined rollout on the host, `B` start states and `H` steps, row-major with
/// the same shapes as [`ImaginedRollout`]'s tensors.
#[derive(Debug, Clone, PartialEq)]
pub struct HostImagination {
    /// Start states.
    pub batch: usize,
    /// Imagined steps.
    pub horizon: usize,
    /// Width of a latent.
    pub latent_dim: usize,
    /// Width of an action.
    pub action_dim: usize,
    /// `[B, H + 1, D]`.
    pub latents: Vec<f32>,
    /// `[B, H, A]`.
    pub actions: Vec<f32>,
    /// `[B, H]`.
    pub rewards: Vec<f32>,
    /// `[B, H]`.
    pub raw_rewards: Vec<f32>,
    /// `[B, H]`.
    pub continuation: Vec<f32>,
    /// `[B, H + 1]`.
    pub values: Vec<f32>,
    /// `[B, H]`.
    pub disagreement: Vec<f32>,
}

impl HostImagination {
    /// The rollout as tensors on `device`.
    pub fn into_rollout<B: Backend>(self, device: &B::Device) -> ImaginedRollout<B> {
        let (b, h, d, a) = (self.batch, self.horizon, self.latent_dim, self.action_dim);
        let tensor3 = |values: Vec<f32>, shape: [usize; 3]| {
            Tensor::<B, 3>::from_data(TensorData::new(values, shape), device)
        };
        let tensor2 = |values: Vec<f32>, shape: [usize; 2]| {
            Tensor::<B, 2>::from_data(TensorData::new(values, shape), device)
        };
        ImaginedRollout {
            latents: tensor3(self.latents, [b, h + 1, d]),
            actions: tensor3(self.actions, [b, h, a]),
            rewards: tensor2(self.rewards, [b, h]),
            raw_rewards: tensor2(self.raw_rewards, [b, h]),
            continuation: tensor2(self.continuation, [b, h]),
            values: tensor2(self.values, [b, h + 1]),
            disagreement: tensor2(self.disagreement, [b, h]),
        }
    }

    /// Joins blocks of consecutive start states, in order.
    fn concatenate(blocks: Vec<Self>, template: (usize, usize, usize)) -> Self {
        let (horizon, latent_dim, action_dim) = template;
        let mut joined = Self {
            batch: 0,
            horizon,
            latent_dim,
            action_dim,
            latents: vec![],
            actions: vec![],
            rewards: vec![],
            raw_rewards: vec![],
            continuation: vec![],
            values: vec![],
            disagreement: vec![],
        };
        for block in blocks {
            joined.batch += block.batch;
            joined.latents.extend(block.latents);
            joined.actions.extend(block.actions);
            joined.rewards.extend(block.rewards);
            joined.raw_rewards.extend(block.raw_rewards);
            joined.continuation.extend(block.continuation);
            joined.values.extend(block.values);
            joined.disagreement.extend(block.disagreement);
        }
        joined
    }
}

impl HostWorldModel {
    /// `model` on the host where its tensors live on `device` and that is a CPU
    /// backend ([`ComputePath::Auto`]); `None` elsewhere (a GPU keeps burn's path).
    pub fn for_device<B: Backend>(model: &WorldModel<B>, device: &B::Device) -> Option<Self> {
        ComputePath::Auto
            .on_host::<B>(device)
            .then(|| Self::of(model))
    }

    /// The weights of `model`'s members and heads, read back once.
    pub fn of<B: Backend>(model: &WorldModel<B>) -> Self {
        let actor = HostMlp::of(&model.actor);
        let value = HostMlp::of(&model.value);
        Self {
            family: model.family(),
            latent_dim: value.hidden.first().map_or(0, HostLinear::inputs),
            action_dim: actor.outputs(),
            members: model.members().iter().map(HostMember::of).collect(),
            reward: HostMlp::of(&model.reward),
            continuation: HostMlp::of(&model.continuation),
            value,
            actor,
            state: model.state.as_ref().map(HostLinear::of),
            state_entries: model.state_entries(),
        }
    }

    /// The transition family of the members.
    pub fn family(&self) -> TransitionFamily {
        self.family
    }

    /// Width of a latent.
    pub fn latent_dim(&self) -> usize {
        self.latent_dim
    }

    /// Width of an action.
    pub fn action_dim(&self) -> usize {
        self.action_dim
    }

    /// The proprioception decoded from every latent of `latents` (`[rows * D]`),
    /// `[rows * P]`, as [`WorldModel::decode_state`] (the leading entries of a latent
    /// that holds the state); `None` for a model that reads out no state.
    pub fn decode_states(&self, latents: &[f32]) -> Option<Vec<f32>> {
        if self.state_entries > 0 {
            let d = self.latent_dim.max(1);
            return Some(
                latents
                    .chunks_exact(d)
                    .flat_map(|latent| latent[..self.state_entries].iter().copied())
                    .collect(),
            );
        }
        let head = self.state.as_ref()?;
        let rows = latents.len() / self.latent_dim.max(1);
        let mut out = vec![0.0; rows * head.outputs()];
        head.forward(rows, latents, &mut out);
        Some(out)
    }

    /// Every member rolled open loop on its own predictions from `start` `[B, D]`
    /// under `actions` `[B, H, A]`, as [`WorldModel::rollout_members`]: `[N, B, H, D]`,
    /// row-major.
    ///
    /// # Panics
    /// If `start` is not a whole number of latents or `actions` not `[B, H, A]`.
    pub fn rollout_members(&self, start: &[f32], actions: &[f32]) -> Vec<f32> {
        self.rollout_rows(start, actions, |shape, start, actions| {
            self.members
                .iter()
                .map(|m| m.rollout(shape, start, actions))
                .collect()
        })
    }

    /// The ensemble rolled as one model, as [`WorldModel::rollout_shared`]: at every
    /// step all members predict from the shared ensemble-mean latent; `[N, B, H, D]`,
    /// row-major. For the action-prefix family this equals [`Self::rollout_members`].
    ///
    /// # Panics
    /// As [`Self::rollout_members`].
    pub fn rollout_shared(&self, start: &[f32], actions: &[f32]) -> Vec<f32> {
        if self.family == TransitionFamily::ActionPrefix {
            return self.rollout_members(start, actions);
        }
        self.rollout_rows(start, actions, |shape, start, actions| {
            let RowShape { rows, d, a } = shape;
            let horizon = actions.len() / (rows * a);
            let mut members = vec![vec![0.0; rows * horizon * d]; self.members.len()];
            let mut shared = start.to_vec();
            for h in 0..horizon {
                let action: Vec<f32> = (0..rows)
                    .flat_map(|r| actions[(r * horizon + h) * a..][..a].iter().copied())
                    .collect();
                let predictions: Vec<Vec<f32>> = self
                    .members
                    .iter()
                    .map(|m| m.predict(shape, &shared, &action, 1))
                    .collect();
                shared.fill(0.0);
                for (out, prediction) in members.iter_mut().zip(&predictions) {
                    for r in 0..rows {
                        out[(r * horizon + h) * d..][..d]
                            .copy_from_slice(&prediction[r * d..(r + 1) * d]);
                    }
                    shared.iter_mut().zip(prediction).for_each(|(s, p)| *s += p);
                }
                let count = self.members.len() as f32;
                shared.iter_mut().for_each(|s| *s /= count);
            }
            members
        })
    }

    /// Runs `rollout` (each member's `[rows, H, D]` for a block of rows) over blocks
    /// of rows in parallel and lays the result out as `[N, B, H, D]`.
    fn rollout_rows(
        &self,
        start: &[f32],
        actions: &[f32],
        rollout: impl Fn(RowShape, &[f32], &[f32]) -> Vec<Vec<f32>> + Sync,
    ) -> Vec<f32> {
        let (d, a) = (self.latent_dim, self.action_dim);
        let batch = self.batch_of(start);
        if batch == 0 {
            return vec![];
        }
        assert_eq!(actions.len() % (batch * a), 0, "actions are not [B, H, A]");
        let horizon = actions.len() / (batch * a);
        let blocks = self.map_row_blocks(start, Some((actions, horizon * a)), |start, actions| {
            let rows = start.len() / d;
            rollout(RowShape { rows, d, a }, start, actions.unwrap_or_default())
        });
        let mut out = Vec::with_capacity(self.members.len() * batch * horizon * d);
        for m in 0..self.members.len() {
            for block in &blocks {
                out.extend_from_slice(&block[m]);
            }
        }
        out
    }

    /// Rolls `plan` for `config.horizon` steps from `start` `[B, D]` (row-major), as
    /// [`crate::imagine`] does with the matching latent policy.
    ///
    /// # Panics
    /// If `start` is not a whole number of latents, or `plan`'s actions are not
    /// `[B, horizon, A]`.
    pub fn imagine(
        &self,
        start: &[f32],
        plan: HostPlan<'_>,
        config: &ImaginationConfig,
    ) -> HostImagination {
        let (d, a, horizon) = (self.latent_dim, self.action_dim, config.horizon);
        let per_row = match plan {
            HostPlan::Actions(actions) => Some((actions, horizon * a)),
            HostPlan::LatentActor => None,
        };
        let blocks = self.map_row_blocks(start, per_row, |start, actions| {
            let plan = actions.map_or(HostPlan::LatentActor, HostPlan::Actions);
            self.imagine_block(start, plan, config)
        });
        HostImagination::concatenate(blocks, (horizon, d, a))
    }

    /// Start states in `start` `[B, D]`.
    ///
    /// # Panics
    /// If `start` is not a whole number of latents.
    fn batch_of(&self, start: &[f32]) -> usize {
        let d = self.latent_dim;
        assert_eq!(start.len() % d, 0, "start states are not [B, {d}]");
        start.len() / d
    }

    /// Runs `f` on blocks of consecutive start states ([`block_rows`]) in parallel,
    /// in order: each block's rows of `start` `[B, D]` and, where given, of the
    /// per-row data `[B, width]` (the actions).
    ///
    /// # Panics
    /// If `start` is not a whole number of latents, or the per-row data is not `B`
    /// rows of `width`.
    fn map_row_blocks<T: Send>(
        &self,
        start: &[f32],
        per_row: Option<(&[f32], usize)>,
        f: impl Fn(&[f32], Option<&[f32]>) -> T + Sync,
    ) -> Vec<T> {
        let d = self.latent_dim;
        let batch = self.batch_of(start);
        let block = block_rows(batch);
        let starts = start.par_chunks(block * d);
        match per_row {
            Some((data, width)) => {
                assert_eq!(data.len(), batch * width, "actions are not [B, H, A]");
                starts
                    .zip(data.par_chunks((block * width).max(1)))
                    .map(|(start, data)| f(start, Some(data)))
                    .collect()
            }
            None => starts.map(|start| f(start, None)).collect(),
        }
    }

    /// [`Self::imagine`] for one block of start states.
    fn imagine_block(
        &self,
        start: &[f32],
        plan: HostPlan<'_>,
        config: &ImaginationConfig,
    ) -> HostImagination {
        let (d, a, horizon) = (self.latent_dim, self.action_dim, config.horizon);
        let rows = start.len() / d;
        let mut latents = vec![0.0; rows * (horizon + 1) * d];
        let mut actions = vec![0.0; rows * horizon * a];
        let mut disagreement = vec![0.0; rows * horizon];
        for r in 0..rows {
            latents[r * (horizon + 1) * d..][..d].copy_from_slice(&start[r * d..(r + 1) * d]);
        }
        let mut latent = start.to_vec();
        let mut step = 0;
        while step < horizon {
            let (chunk, len) = match plan {
                HostPlan::LatentActor => {
                    let mut act = self.actor.forward(rows, &latent);
                    act.iter_mut().for_each(|v| *v = v.tanh());
                    (act, 1)
                }
                HostPlan::Actions(all) => {
                    let len = horizon - step;
                    let chunk = (0..rows)
                        .flat_map(|r| all[(r * horizon + step) * a..][..len * a].iter().copied())
                        .collect();
                    (chunk, len)
                }
            };
            let predictions: Vec<Vec<f32>> = self
                .members
                .iter()
                .map(|m| m.rollout(RowShape { rows, d, a }, &latent, &chunk))
                .collect();
            let members = predictions.len();
            let divisor = (members.max(2) - 1) as f32;
            for r in 0..rows {
                for h in 0..len {
                    let at = (r * len + h) * d;
                    let mean_at = (r * (horizon + 1) + step + h + 1) * d;
                    let mut spread = 0.0;
                    for j in 0..d {
                        let mean =
                            predictions.iter().map(|p| p[at + j]).sum::<f32>() / members as f32;
                        let variance = predictions
                            .iter()
                            .map(|p| (p[at + j] - mean) * (p[at + j] - mean))
                            .sum::<f32>()
                            / divisor;
                        latents[mean_at + j] = mean;
                        spread += variance.sqrt();
                    }
                    disagreement[r * horizon + step + h] = spread / d as f32;
                }
                let last = (r * (horizon + 1) + step + len) * d;
                latent[r * d..(r + 1) * d].copy_from_slice(&latents[last..last + d]);
                actions[(r * horizon + step) * a..][..len * a]
                    .copy_from_slice(&chunk[r * len * a..(r + 1) * len * a]);
            }
            step += len;
        }
        let before: Vec<f32> = (0..rows * horizon)
            .flat_map(|i| {
                let (r, h) = (i / horizon, i % horizon);
                latents[(r * (horizon + 1) + h) * d..][..d]
                    .iter()
                    .chain(&actions[i * a..(i + 1) * a])
                    .copied()
            })
            .collect();
        let after: Vec<f32> = (0..rows * horizon)
            .flat_map(|i| {
                let (r, h) = (i / horizon, i % horizon);
                latents[(r * (horizon + 1) + h + 1) * d..][..d]
                    .iter()
                    .copied()
            })
            .collect();
        let raw_rewards = self.reward.forward(rows * horizon, &before);
        let mut continuation = self.continuation.forward(rows * horizon, &after);
        continuation
            .iter_mut()
            .for_each(|v| *v = 1.0 / (1.0 + (-*v).exp()));
        let values = self.value.forward(rows * (horizon + 1), &latents);
        let penalty = config.uncertainty_penalty as f32;
        let rewards = raw_rewards
            .iter()
            .zip(&disagreement)
            .map(|(r, u)| r - u * penalty)
            .collect();
        HostImagination {
            batch: rows,
            horizon,
            latent_dim: d,
            action_dim: a,
            latents,
            actions,
            rewards,
            raw_rewards,
            continuation,
            values,
            disagreement,
        }
    }
}

/// `x . y` with eight running sums, so that the loop vectorises (one running sum is
/// a chain of dependent additions).
fn dot(x: &[f32], y: &[f32]) -> f32 {
    let mut sums = [0.0f32; 8];
    let (x8, y8) = (x.chunks_exact(8), y.chunks_exact(8));
    let tail: f32 = x8
        .remainder()
        .iter()
        .zip(y8.remainder())
        .map(|(a, b)| a * b)
        .sum();
    for (x, y) in x8.zip(y8) {
        for k in 0..8 {
            sums[k] += x[k] * y[k];
        }
    }
    sums.iter().sum::<f32>() + tail
}
