//! Real-time chunking's action queue: the actions the robot executes next, taken one
//! per control tick, into which each newly planned chunk is merged while the previous
//! one is still executing (docs/runtime.md, "Real-time chunking").
//!
//! A chunk planned from the observation of tick `s` and ready at tick `s + d` starts
//! `d` ticks in the past: its first `d` actions were due while it was computed, so they
//! are skipped. The rest replaces what the queue held, cross-faded over the first
//! `blend` ticks from the old plan into the new one (the old plan's weight falls
//! linearly, `(blend - i) / (blend + 1)` at the `i`-th overlapping tick), so a new
//! plan never makes the command jump.

use std::collections::VecDeque;

/// One queued action (normalised units, `[-1, 1]` per dimension) and the policy
/// version that planned it.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuedAction {
    /// The action.
    pub action: Vec<f32>,
    /// The version whose chunk it came from (the newer one where two were blended).
    pub version: u64,
}

/// What [`ChunkQueue::merge`] did with a planned chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merged {
    /// The chunk's usable actions replaced the queue; `blended` of them were mixed
    /// with the old plan.
    Replaced {
        /// Actions the queue holds now.
        queued: usize,
        /// Of those, how many were cross-faded with the old plan.
        blended: usize,
    },
    /// The chunk was planned so long ago that all of it is past: the queue is unchanged.
    Stale,
}

/// The actions to execute next, one per control tick.
#[derive(Debug, Clone)]
pub struct ChunkQueue {
    action_dim: usize,
    queue: VecDeque<QueuedAction>,
}

impl ChunkQueue {
    /// An empty queue of actions `action_dim` wide.
    pub fn new(action_dim: usize) -> Self {
        assert!(action_dim > 0, "actions have at least one dimension");
        Self {
            action_dim,
            queue: VecDeque::new(),
        }
    }

    /// Forgets every queued action (a new episode, or the expert took over).
    pub fn clear(&mut self) {
        self.queue.clear();
    }

    /// Actions queued.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether no action is queued.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The next action, removed from the queue; `None` when the queue ran dry.
    pub fn pop(&mut self) -> Option<QueuedAction> {
        self.queue.pop_front()
    }

    /// The queued actions one after another, `[len * action_dim]` (the plan the robot
    /// is following, as drawn and sent to a remote robot).
    pub fn planned(&self) -> Vec<f32> {
        self.queue
            .iter()
            .flat_map(|q| q.action.iter().copied())
            .collect()
    }

    /// Merges `chunk` (`[k * action_dim]`, planned by `version` `delay` ticks ago):
    /// its first `delay` actions are skipped, the rest replaces the queue, the first
    /// `blend` of them cross-faded with what the queue held at the same ticks.
    pub fn merge(&mut self, chunk: &[f32], delay: usize, blend: usize, version: u64) -> Merged {
        assert_eq!(chunk.len() % self.action_dim, 0, "a chunk is whole actions");
        let fresh: Vec<&[f32]> = chunk.chunks(self.action_dim).skip(delay).collect();
        if fresh.is_empty() {
            return Merged::Stale;
        }
        let old = std::mem::take(&mut self.queue);
        let mut blended = 0;
        for (i, action) in fresh.into_iter().enumerate() {
            let action = match old.get(i).filter(|_| i < blend) {
                Some(before) => {
                    blended += 1;
                    let keep = (blend - i) as f32 / (blend + 1) as f32;
                    before
                        .action
                        .iter()
                        .zip(action)
                        .map(|(b, n)| keep * b + (1.0 - keep) * n)
                        .collect()
                }
                None => action.to_vec(),
            };
            self.queue.push_back(QueuedAction { action, version });
        }
        Merged::Replaced {
            queued: self.queue.len(),
            blended,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actions(queue: &mut ChunkQueue) -> Vec<f32> {
        std::iter::from_fn(|| queue.pop())
            .map(|q| q.action[0])
            .collect()
    }

    #[test]
    fn the_first_chunk_is_queued_whole_and_popped_in_order() {
        let mut queue = ChunkQueue::new(2);
        let merged = queue.merge(&[1.0, -1.0, 2.0, -2.0, 3.0, -3.0], 0, 2, 7);
        assert_eq!(
            merged,
            Merged::Replaced {
                queued: 3,
                blended: 0
            }
        );
        assert_eq!(queue.planned(), vec![1.0, -1.0, 2.0, -2.0, 3.0, -3.0]);
        let first = queue.pop().unwrap();
        assert_eq!((first.action, first.version), (vec![1.0, -1.0], 7));
        assert_eq!(queue.len(), 2);
    }

    #[test]
    fn a_late_chunk_skips_the_actions_that_were_due_while_it_was_planned() {
        let mut queue = ChunkQueue::new(1);
        queue.merge(&[0.0, 1.0, 2.0, 3.0], 2, 0, 1);
        assert_eq!(actions(&mut queue), vec![2.0, 3.0]);
        queue.merge(&[5.0, 6.0], 1, 0, 1);
        queue.merge(&[9.0, 9.0], 2, 0, 2);
        assert_eq!(
            actions(&mut queue),
            vec![6.0],
            "a stale chunk changes nothing"
        );
        assert_eq!(queue.merge(&[1.0, 1.0], 2, 3, 2), Merged::Stale);
    }

    #[test]
    fn a_new_plan_is_cross_faded_in_over_the_blend_ticks() {
        let mut queue = ChunkQueue::new(1);
        queue.merge(&[0.0; 6], 0, 2, 1);
        let merged = queue.merge(&[3.0; 6], 1, 2, 2);
        assert_eq!(
            merged,
            Merged::Replaced {
                queued: 5,
                blended: 2
            }
        );
        // Old weights 2/3 then 1/3, then the new plan alone.
        let got = actions(&mut queue);
        let want = [1.0, 2.0, 3.0, 3.0, 3.0];
        assert!(
            got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-6),
            "{got:?}"
        );
    }

    #[test]
    fn blending_stops_where_the_old_plan_ends() {
        let mut queue = ChunkQueue::new(1);
        queue.merge(&[0.0, 0.0], 0, 4, 1);
        queue.pop();
        let merged = queue.merge(&[4.0; 4], 1, 4, 2);
        assert_eq!(
            merged,
            Merged::Replaced {
                queued: 3,
                blended: 1
            }
        );
        let got = actions(&mut queue);
        assert!(
            (got[0] - 0.8).abs() < 1e-6 && got[1] == 4.0 && got[2] == 4.0,
            "{got:?}"
        );
        assert!(queue.is_empty());
        queue.merge(&[1.0], 0, 4, 3);
        queue.clear();
        assert!(queue.pop().is_none());
    }
}
