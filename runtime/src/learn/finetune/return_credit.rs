//! Per-tick credit from real returns: each transition's discounted return to go,
//! measured against what transitions from similar states went on to earn.
//!
//! An episode's return says whether the episode went well, not which of its ticks
//! made it go well: on pusht, a success's 300 ticks include the stalls, and a
//! failure's include the pushes that moved the block halfway. A return to go
//! `G_t = sum_k gamma^k r_{t+k}` credits a tick with what came after it; the baseline
//! `b(s_t)` takes out what any tick from a similar state earns, so that the advantage
//! `G_t - b(s_t)` is high where the robot progressed faster than usual from where it
//! was. Without a critic the baseline is a table: the mean return to go of all
//! transitions in the same cell of (the reward level the tick started from, the time
//! left). Both are functions of the state and the episode's clock, not of the action
//! taken, so the baseline adds no bias; the reward level summarises the state as far
//! as the return is concerned on tasks whose reward measures progress (pusht's
//! coverage, reacher2d's distance).

use std::borrow::Borrow;
use std::collections::HashMap;

use crate::store::replay::Episode;

/// Cells of the reward level the baseline averages over.
pub const LEVEL_BINS: usize = 20;
/// Cells of the episode's clock the baseline averages over.
pub const TIME_BINS: usize = 10;

/// `G_t` for every transition of `episode`, discounted by `discount`, to `max_steps`
/// ticks: a success ends the episode early, but the robot at its goal would go on
/// earning its last reward for the ticks it did not need (as `held_return` counts
/// them), so those ticks are added after its last transition.
pub fn returns_to_go(episode: &Episode, max_steps: u32, discount: f32) -> Vec<f32> {
    let transitions = &episode.transitions;
    let mut to_go = held_tail(episode, max_steps, discount);
    let mut returns = vec![0.0; transitions.len()];
    for (t, transition) in transitions.iter().enumerate().rev() {
        to_go = transition.reward + discount * to_go;
        returns[t] = to_go;
    }
    returns
}

/// What `episode` earns after its last transition, discounted from there: a success's
/// last reward held for the ticks to `max_steps` it did not need, 0 for any other end
/// (the episode's return stops where it stopped).
pub fn held_tail(episode: &Episode, max_steps: u32, discount: f32) -> f32 {
    match episode.transitions.last() {
        Some(last) if episode.end.success => {
            let unused = max_steps.saturating_sub(episode.transitions.len() as u32);
            (0..unused).fold(0.0f32, |held, _| last.reward + discount * held)
        }
        _ => 0.0,
    }
}

/// The baseline's cell of transition `t`: the reward level it started from (the
/// previous transition's reward; the first tick has a cell of its own, as no reward
/// precedes it) quantised over `[low, high]`, and its tick quantised over `max_steps`.
fn cell(episode: &Episode, t: usize, (low, high): (f32, f32), max_steps: u32) -> (usize, usize) {
    let level = match t.checked_sub(1) {
        None => LEVEL_BINS,
        Some(previous) => {
            let reward = episode.transitions[previous].reward;
            let span = (high - low).max(f32::EPSILON);
            (((reward - low) / span * LEVEL_BINS as f32) as usize).min(LEVEL_BINS - 1)
        }
    };
    let time = (t * TIME_BINS / max_steps.max(1) as usize).min(TIME_BINS - 1);
    (level, time)
}

/// Every transition's return to go and its raw advantage against the table, both
/// `[episode][step]`.
pub struct TableCredit {
    /// `G_t` ([`returns_to_go`]).
    pub returns: Vec<Vec<f32>>,
    /// `G_t - b(s_t)`.
    pub advantages: Vec<Vec<f32>>,
}

/// Every transition's raw advantage `G_t - b(s_t)`, `[episode][step]`, with `b` the
/// mean return to go of the transitions (of all `episodes`) in its cell, beside the
/// returns themselves. A transition alone in its cell gets 0: nothing to compare it
/// with.
pub fn return_to_go_advantages(
    episodes: &[impl Borrow<Episode>],
    max_steps: u32,
    discount: f32,
) -> TableCredit {
    let episodes: Vec<&Episode> = episodes.iter().map(Borrow::borrow).collect();
    let returns: Vec<Vec<f32>> = episodes
        .iter()
        .map(|episode| returns_to_go(episode, max_steps, discount))
        .collect();
    let rewards = episodes
        .iter()
        .flat_map(|e| &e.transitions)
        .map(|t| t.reward);
    let range = rewards.fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), r| {
        (lo.min(r), hi.max(r))
    });
    let keys: Vec<Vec<(usize, usize)>> = episodes
        .iter()
        .map(|episode| {
            (0..episode.transitions.len())
                .map(|t| cell(episode, t, range, max_steps))
                .collect()
        })
        .collect();
    let mut cells: HashMap<(usize, usize), (f64, usize)> = HashMap::new();
    for (key, &g) in keys.iter().flatten().zip(returns.iter().flatten()) {
        let entry = cells.entry(*key).or_default();
        entry.0 += g as f64;
        entry.1 += 1;
    }
    let advantages = keys
        .iter()
        .zip(&returns)
        .map(|(keys, returns)| {
            keys.iter()
                .zip(returns)
                .map(|(key, &g)| {
                    let (sum, count) = cells[key];
                    g - (sum / count as f64) as f32
                })
                .collect()
        })
        .collect();
    TableCredit {
        returns,
        advantages,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::learn::finetune::test_episodes::ended;

    #[test]
    fn returns_to_go_discount_what_follows_and_hold_a_success() {
        let failed = ended(1, 1, &[1.0, 2.0, 4.0], false);
        let g = returns_to_go(&failed, 10, 0.5);
        // By hand: G_2 = 4, G_1 = 2 + 0.5 * 4, G_0 = 1 + 0.5 * 4.
        assert_eq!(g, vec![3.0, 4.0, 4.0]);
        // A success after 2 of 4 ticks holds its last reward (1) for 2 more ticks:
        // G_1 = 1 + 0.5 (1 + 0.5 * 1) = 1.75, G_0 = 0.5 + 0.5 * 1.75.
        let reached = ended(2, 1, &[0.5, 1.0], true);
        let g = returns_to_go(&reached, 4, 0.5);
        assert!(
            (g[1] - 1.75).abs() < 1e-6 && (g[0] - 1.375).abs() < 1e-6,
            "{g:?}"
        );
        // Undiscounted, the first tick's return to go is `held_return`.
        assert!((returns_to_go(&reached, 4, 1.0)[0] - 3.5).abs() < 1e-6);
    }

    #[test]
    fn a_tick_followed_by_faster_progress_than_its_cell_gets_credit() {
        // Two episodes start alike and spend ticks 1 and 2 at level 0.2 (the same
        // cells); from there one progresses to 1, the other stays put.
        let progressed = ended(1, 1, &[0.2, 0.2, 0.6, 1.0], false);
        let stalled = ended(2, 1, &[0.2, 0.2, 0.2, 0.2], false);
        let a = return_to_go_advantages(&[progressed, stalled], 4, 0.9).advantages;
        // The shared cells split the credit by what followed, equal and opposite.
        for t in 0..3 {
            assert!(a[0][t] > 0.0 && (a[0][t] + a[1][t]).abs() < 1e-5, "{a:?}");
        }
        // The last ticks start from different levels (0.6 and 0.2): each alone in its
        // cell, nothing to compare with, no credit either way.
        assert_eq!((a[0][3], a[1][3]), (0.0, 0.0));
    }

    #[test]
    fn the_baseline_depends_on_the_clock() {
        // The same level at the start and the end of the limit: with the clock in the
        // cell, a late tick is not measured against an early one's longer future.
        let early = ended(
            1,
            1,
            &[0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5],
            false,
        );
        let a = return_to_go_advantages(&[early], 10, 1.0).advantages;
        assert!(a[0].iter().all(|&x| x == 0.0), "{a:?}");
    }
}
