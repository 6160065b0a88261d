//! HABC's pieces that do not need a network: the state-adaptive gate between the
//! viability and efficiency advantages, and intervention-aware outcome credit.
//!
//! Viability asks "will the policy succeed from here?", efficiency "how fast?". While
//! success is unlikely or uncertain, the update should favour actions that make success
//! possible at all; once it is likely, actions that make it quicker. The gate reads the
//! viability head's success probability and mixes the two advantages accordingly.

use imago_robots::bounds::{ConfigError, in_range};
use serde::{Deserialize, Serialize};

/// The state-adaptive gate `g = sigmoid(sharpness * (p - threshold))`, with `p` the
/// viability head's success probability: `g -> 0` (viability) while success is unlikely,
/// `g -> 1` (efficiency) once it is likely.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HabcGate {
    /// Success probability at which both advantages count equally. Range: [0, 1].
    pub threshold: f32,
    /// How sharply the gate switches around the threshold. Range: [0, 1000].
    pub sharpness: f32,
}

impl Default for HabcGate {
    fn default() -> Self {
        Self {
            threshold: 0.5,
            sharpness: 10.0,
        }
    }
}

impl HabcGate {
    /// Checks both values against their documented ranges.
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range("threshold", self.threshold, 0.0..=1.0)?;
        in_range("sharpness", self.sharpness, 0.0..=1000.0)
    }

    /// The gate's value for success probability `p`.
    pub fn gate(&self, p: f32) -> f32 {
        1.0 / (1.0 + (-self.sharpness * (p - self.threshold)).exp())
    }

    /// The combined advantage `(1 - g) A_viability + g A_efficiency` at success
    /// probability `p`.
    pub fn combine(&self, p: f32, viability: f32, efficiency: f32) -> f32 {
        let g = self.gate(p);
        (1.0 - g) * viability + g * efficiency
    }
}

/// The outcome credit of one policy-executed transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentCredit {
    /// The policy reached the goal within this segment, with no intervention after the
    /// transition.
    pub success: bool,
    /// Transitions from this one to the segment's last, inclusive.
    pub steps_to_end: u32,
}

/// The credit of every transition of an episode. `interventions[t]` says whether an
/// intervention (a human, or the scripted takeover) chose step `t`'s command;
/// `success` whether the episode reached its goal.
///
/// Outcome credit never crosses an intervention boundary: intervened transitions get
/// none (`None`), and a policy-executed segment gets the episode's success only if it
/// is the episode's last segment, i.e. the policy itself got there. A segment that
/// ended in a takeover counts as a failure, however well the rescuer did afterwards.
pub fn segment_credit(interventions: &[bool], success: bool) -> Vec<Option<SegmentCredit>> {
    let n = interventions.len();
    let mut credit = vec![None; n];
    let mut end = n;
    for t in (0..n).rev() {
        if interventions[t] {
            end = t;
            continue;
        }
        credit[t] = Some(SegmentCredit {
            success: success && end == n,
            steps_to_end: (end - t) as u32,
        });
    }
    credit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_favours_viability_when_success_is_unlikely_and_efficiency_when_likely() {
        let gate = HabcGate::default();
        assert!(gate.gate(0.0) < 0.01);
        assert!(gate.gate(1.0) > 0.99);
        assert!((gate.gate(0.5) - 0.5).abs() < 1e-6);
        assert!((gate.combine(0.0, 2.0, -3.0) - 2.0).abs() < 0.05);
        assert!((gate.combine(1.0, 2.0, -3.0) + 3.0).abs() < 0.05);
        assert!((gate.combine(0.5, 2.0, -3.0) + 0.5).abs() < 1e-6);
        let step = HabcGate {
            threshold: 0.8,
            sharpness: 1e4,
        };
        assert_eq!(step.gate(0.79), 0.0);
        assert_eq!(step.gate(0.81), 1.0);
    }

    #[test]
    fn credit_stops_at_interventions() {
        // policy, policy, takeover, takeover, policy, policy; the episode succeeds.
        let flags = [false, false, true, true, false, false];
        let credit = segment_credit(&flags, true);
        let expect = |success, steps_to_end| {
            Some(SegmentCredit {
                success,
                steps_to_end,
            })
        };
        assert_eq!(
            credit,
            vec![
                expect(false, 2),
                expect(false, 1),
                None,
                None,
                expect(true, 2),
                expect(true, 1)
            ]
        );
        // A rescue that succeeds gives the policy's segment no success.
        let rescued = segment_credit(&[false, false, true, true], true);
        assert_eq!(rescued[0], expect(false, 2));
        assert_eq!(rescued[2], None);
        // Without interventions the whole episode is one segment.
        let clean = segment_credit(&[false; 3], false);
        assert_eq!(
            clean,
            vec![expect(false, 3), expect(false, 2), expect(false, 1)]
        );
    }
}
