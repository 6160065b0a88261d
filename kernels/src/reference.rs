//! Plain Rust references of the kernels: what the CPU backends run, and what the GPU
//! kernels are tested against. Layouts are row-major and match the kernels' exactly.

/// Lambda-returns of one trajectory: `G_t = r_t + gamma c_t ((1 - lambda) V_{t+1} +
/// lambda G_{t+1})`, with `G_H = V_H` (bootstrap). `rewards` and `continues` have `H`
/// entries, `values` `H + 1`; `continues[t]` is 0 where the episode ends after step `t`.
pub fn lambda_returns(
    rewards: &[f32],
    continues: &[f32],
    values: &[f32],
    gamma: f32,
    lambda: f32,
) -> Vec<f32> {
    let h = rewards.len();
    assert_eq!(continues.len(), h, "one continuation flag per reward");
    assert_eq!(
        values.len(),
        h + 1,
        "one value per state, the last one bootstraps"
    );
    let mut returns = vec![0.0; h];
    let mut next = values[h];
    for t in (0..h).rev() {
        next = rewards[t] + gamma * continues[t] * ((1.0 - lambda) * values[t + 1] + lambda * next);
        returns[t] = next;
    }
    returns
}

/// The probability that a trajectory is still running at each step:
/// `w_t = prod_{i < t} c_i` (so `w_0 = 1`).
pub fn survival(continues: &[f32]) -> Vec<f32> {
    continues
        .iter()
        .scan(1.0f32, |alive, c| {
            let now = *alive;
            *alive *= c;
            Some(now)
        })
        .collect()
}

/// Lambda-returns and survival weights of `rows` trajectories of length `horizon`,
/// stored row after row (`rewards`, `continues`: `rows x horizon`; `values`:
/// `rows x (horizon + 1)`). Returns `(returns, weights)`, both `rows x horizon`.
pub fn lambda_returns_batch(
    rewards: &[f32],
    continues: &[f32],
    values: &[f32],
    horizon: usize,
    gamma: f32,
    lambda: f32,
) -> (Vec<f32>, Vec<f32>) {
    let mut returns = Vec::with_capacity(rewards.len());
    let mut weights = Vec::with_capacity(rewards.len());
    if horizon == 0 {
        return (returns, weights);
    }
    for ((r, c), v) in rewards
        .chunks(horizon)
        .zip(continues.chunks(horizon))
        .zip(values.chunks(horizon + 1))
    {
        returns.extend(lambda_returns(r, c, v, gamma, lambda));
        weights.extend(survival(c));
    }
    (returns, weights)
}

/// Mean, variance and disagreement of an ensemble of `members` predictions, stored
/// member after member, each `rows x width`. Returns `(mean, variance, disagreement)`:
/// mean and unbiased variance (divided by `max(N, 2) - 1`, so one member has variance
/// 0) per element (`rows x width`), and per row the mean over `width` of the standard
/// deviation (`rows`), the disagreement imagination penalises.
pub fn ensemble_statistics(
    predictions: &[f32],
    members: usize,
    width: usize,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let elements = predictions.len() / members.max(1);
    let rows = elements / width.max(1);
    let mut mean = vec![0.0f32; elements];
    let mut variance = vec![0.0f32; elements];
    for member in predictions.chunks(elements.max(1)).take(members) {
        for (m, x) in mean.iter_mut().zip(member) {
            *m += x;
        }
    }
    for m in &mut mean {
        *m /= members as f32;
    }
    for member in predictions.chunks(elements.max(1)).take(members) {
        for ((v, m), x) in variance.iter_mut().zip(&mean).zip(member) {
            *v += (x - m) * (x - m);
        }
    }
    let dof = (members.max(2) - 1) as f32;
    for v in &mut variance {
        *v /= dof;
    }
    let disagreement = (0..rows)
        .map(|row| {
            variance[row * width..(row + 1) * width]
                .iter()
                .map(|v| v.sqrt())
                .sum::<f32>()
                / width as f32
        })
        .collect();
    (mean, variance, disagreement)
}

/// One SALT transition for a batch: `z'_b = A_b z_b + o_b`, with `matrices`
/// `batch x dim x dim` (row-major, `A[i][j]` multiplies `z[j]` into `z'[i]`),
/// `latents` and `offsets` `batch x dim`.
pub fn salt_step(matrices: &[f32], latents: &[f32], offsets: &[f32], dim: usize) -> Vec<f32> {
    latents
        .chunks(dim)
        .zip(offsets.chunks(dim))
        .zip(matrices.chunks(dim * dim))
        .flat_map(|((z, o), a)| {
            a.chunks(dim)
                .zip(o)
                .map(|(row, offset)| offset + row.iter().zip(z).map(|(x, y)| x * y).sum::<f32>())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-5, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn lambda_returns_by_hand() {
        let (r, c, v) = ([1.0, 2.0], [1.0, 1.0], [0.5, 1.0, 4.0]);
        // lambda = 1: discounted return with the bootstrap; lambda = 0: one-step TD.
        close(&lambda_returns(&r, &c, &v, 0.5, 1.0), &[3.0, 4.0]);
        close(&lambda_returns(&r, &c, &v, 0.5, 0.0), &[1.5, 4.0]);
        close(&lambda_returns(&r, &c, &v, 0.5, 0.5), &[2.25, 4.0]);
        // An episode end after step 0 cuts the bootstrap.
        close(&lambda_returns(&r, &[0.0, 1.0], &v, 0.5, 0.5), &[1.0, 4.0]);
    }

    #[test]
    fn survival_is_the_product_of_earlier_continuations() {
        close(&survival(&[0.5, 0.5, 0.0, 1.0]), &[1.0, 0.5, 0.25, 0.0]);
    }

    #[test]
    fn batched_returns_are_rows_of_single_returns() {
        let rewards = [1.0, 2.0, 0.5, -1.0];
        let continues = [1.0, 0.5, 0.0, 1.0];
        let values = [0.0, 2.0, 4.0, 1.0, 1.0, 3.0];
        let (returns, weights) = lambda_returns_batch(&rewards, &continues, &values, 2, 0.9, 0.7);
        let first = lambda_returns(&rewards[..2], &continues[..2], &values[..3], 0.9, 0.7);
        let second = lambda_returns(&rewards[2..], &continues[2..], &values[3..], 0.9, 0.7);
        close(&returns, &[first, second].concat());
        close(&weights, &[1.0, 1.0, 1.0, 0.0]);
    }

    #[test]
    fn ensemble_statistics_by_hand() {
        // Two members, two rows of width 2.
        let predictions = [1.0, 2.0, 0.0, 0.0, 3.0, 2.0, 0.0, 4.0];
        let (mean, variance, disagreement) = ensemble_statistics(&predictions, 2, 2);
        close(&mean, &[2.0, 2.0, 0.0, 2.0]);
        close(&variance, &[2.0, 0.0, 0.0, 8.0]);
        close(&disagreement, &[2f32.sqrt() / 2.0, 8f32.sqrt() / 2.0]);
        let (_, single, spread) = ensemble_statistics(&predictions[..4], 1, 2);
        close(&single, &[0.0; 4]);
        close(&spread, &[0.0; 2]);
    }

    #[test]
    fn salt_step_by_hand() {
        // A = [[1, 2], [0, 1]], z = [1, 1], o = [0.5, -1]; identity for the second.
        let matrices = [1.0, 2.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0];
        let next = salt_step(&matrices, &[1.0, 1.0, 3.0, 4.0], &[0.5, -1.0, 0.0, 0.0], 2);
        close(&next, &[3.5, 0.0, 3.0, 4.0]);
    }
}
