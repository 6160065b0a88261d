//! ACT's temporal ensembling (Zhao et al. 2023, Algorithm 2), computed online as
//! LeRobot's `ACTTemporalEnsembler` computes it: every tick a new chunk is predicted,
//! and the action executed for a time step is the average of every prediction made
//! for it so far, the `i`-th oldest weighted `exp(-coeff i)` (LeRobot's default coeff,
//! 0.01, weighs older predictions more). Plain arithmetic on the host, in `f32` as
//! LeRobot's tensors are.

/// The running averages of one batch of episodes.
#[derive(Debug, Clone)]
pub struct TemporalEnsembler {
    chunk: usize,
    action_dim: usize,
    weights: Vec<f32>,
    cumulative: Vec<f32>,
    /// Per episode, the averaged actions of the steps still ahead, oldest first.
    averages: Vec<Vec<f32>>,
    /// For each step ahead, how many predictions its average holds.
    counts: Vec<usize>,
}

impl TemporalEnsembler {
    /// An ensembler of chunks of `chunk` actions of `action_dim` values with the
    /// weight coefficient `coeff` (`temporal_ensemble_coeff`).
    pub fn new(coeff: f32, chunk: usize, action_dim: usize) -> Self {
        let weights: Vec<f32> = (0..chunk).map(|i| (-coeff * i as f32).exp()).collect();
        let cumulative = weights
            .iter()
            .scan(0.0f32, |sum, w| {
                *sum += w;
                Some(*sum)
            })
            .collect();
        Self {
            chunk,
            action_dim,
            weights,
            cumulative,
            averages: Vec::new(),
            counts: Vec::new(),
        }
    }

    /// Forgets every prediction (a new episode).
    pub fn reset(&mut self) {
        self.averages.clear();
        self.counts.clear();
    }

    /// Takes this tick's chunks (`chunks[b]`: `chunk x action_dim` values, row by row)
    /// into the averages and returns each episode's action for this tick. Chunks of
    /// another shape, or another batch than the episode's first tick, are an error.
    pub fn update(&mut self, chunks: &[Vec<f32>]) -> Result<Vec<Vec<f32>>, String> {
        let (k, a) = (self.chunk, self.action_dim);
        if let Some(bad) = chunks.iter().find(|c| c.len() != k * a) {
            return Err(format!("a chunk of {} values, not {k} x {a}", bad.len()));
        }
        if self.counts.is_empty() {
            self.averages = chunks.to_vec();
            self.counts = vec![1; k];
        } else {
            if chunks.len() != self.averages.len() {
                return Err(format!(
                    "{} chunks for {} episodes",
                    chunks.len(),
                    self.averages.len()
                ));
            }
            for (average, chunk) in self.averages.iter_mut().zip(chunks) {
                for (step, &count) in self.counts.iter().enumerate() {
                    let before = self.cumulative[count - 1];
                    let (weight, after) = (self.weights[count], self.cumulative[count]);
                    for j in 0..a {
                        let value = &mut average[step * a + j];
                        *value = (*value * before + chunk[step * a + j] * weight) / after;
                    }
                }
                average.extend_from_slice(&chunk[(k - 1) * a..]);
            }
            self.counts = self.counts.iter().map(|c| (c + 1).min(k)).collect();
            self.counts.push(1);
        }
        self.counts.remove(0);
        Ok(self
            .averages
            .iter_mut()
            .map(|average| average.drain(..a).collect())
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lerobot_fixtures::{Array, FIXTURES, read};

    #[derive(serde::Deserialize)]
    struct Fixture {
        coeff: f32,
        chunk: usize,
        action_dim: usize,
        chunks: Vec<Array>,
        actions: Vec<Array>,
    }

    /// LeRobot's own `ACTTemporalEnsembler(0.01, 5)` fed seven ticks of chunks for two
    /// episodes: the actions it returned, tick by tick.
    #[test]
    fn ensembled_actions_match_lerobots() {
        let f: Fixture = read(FIXTURES, "act_temporal_ensemble");
        let mut ensembler = TemporalEnsembler::new(f.coeff, f.chunk, f.action_dim);
        for (chunks, want) in f.chunks.iter().zip(&f.actions) {
            let per_episode: Vec<Vec<f32>> = chunks
                .values
                .chunks(f.chunk * f.action_dim)
                .map(<[f32]>::to_vec)
                .collect();
            let got: Vec<f32> = ensembler.update(&per_episode).unwrap().concat();
            assert_eq!(got.len(), want.values.len());
            for (g, w) in got.iter().zip(&want.values) {
                assert!((g - w).abs() < 1e-6, "{g} vs {w}");
            }
        }
        assert!(ensembler.update(&[vec![0.0; 3]]).is_err());
        ensembler.reset();
        let first = vec![(0..f.chunk * f.action_dim).map(|i| i as f32).collect()];
        assert_eq!(ensembler.update(&first).unwrap(), vec![vec![0.0, 1.0, 2.0]]);
    }
}
