//! Planar two-link arm kinematics: forward, Jacobian, analytic inverse and the
//! damped-least-squares differential inverse used by the low-level controller.

use nalgebra::{Matrix2, Vector2};

/// Link lengths of a planar two-link arm whose base sits at the origin.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TwoLinkArm {
    /// Shoulder-to-elbow length, metres.
    pub upper: f32,
    /// Elbow-to-end-effector length, metres.
    pub lower: f32,
}

impl TwoLinkArm {
    /// Elbow position for joint angles `q`.
    pub fn elbow(&self, q: [f32; 2]) -> Vector2<f32> {
        Vector2::new(self.upper * q[0].cos(), self.upper * q[0].sin())
    }

    /// End-effector position for joint angles `q`.
    pub fn end_effector(&self, q: [f32; 2]) -> Vector2<f32> {
        let a = q[0] + q[1];
        self.elbow(q) + Vector2::new(self.lower * a.cos(), self.lower * a.sin())
    }

    /// The 2x2 Jacobian d(end effector)/dq.
    pub fn jacobian(&self, q: [f32; 2]) -> Matrix2<f32> {
        let a = q[0] + q[1];
        let (s1, c1) = q[0].sin_cos();
        let (sa, ca) = a.sin_cos();
        Matrix2::new(
            -self.upper * s1 - self.lower * sa,
            -self.lower * sa,
            self.upper * c1 + self.lower * ca,
            self.lower * ca,
        )
    }

    /// Joint angles that put the end effector at `point`, choosing the elbow sign
    /// `elbow_sign` (+1 or -1); `None` if the point is out of reach.
    pub fn inverse(&self, point: Vector2<f32>, elbow_sign: f32) -> Option<[f32; 2]> {
        let r2 = point.norm_squared();
        let cos_q2 =
            (r2 - self.upper.powi(2) - self.lower.powi(2)) / (2.0 * self.upper * self.lower);
        if !(-1.0..=1.0).contains(&cos_q2) {
            return None;
        }
        let q2 = elbow_sign.signum() * cos_q2.acos();
        let q1 = point.y.atan2(point.x)
            - (self.lower * q2.sin()).atan2(self.upper + self.lower * q2.cos());
        Some([wrap_angle(q1), q2])
    }

    /// The closest reachable point to `point` (projected onto the reachable annulus).
    pub fn reachable(&self, point: Vector2<f32>) -> Vector2<f32> {
        let min_r = (self.upper - self.lower).abs() + 1e-3;
        let max_r = self.upper + self.lower - 1e-3;
        let r = point.norm();
        if r < 1e-6 {
            return Vector2::new(min_r, 0.0);
        }
        point * (r.clamp(min_r, max_r) / r)
    }

    /// Joint velocities that move the end effector with velocity `v`, by damped least
    /// squares (well behaved near singular configurations).
    pub fn joint_velocity_for(&self, q: [f32; 2], v: Vector2<f32>, damping: f32) -> Vector2<f32> {
        let j = self.jacobian(q);
        let jjt = j * j.transpose() + Matrix2::identity() * damping.powi(2);
        let solve = jjt.try_inverse().unwrap_or_else(Matrix2::identity);
        j.transpose() * (solve * v)
    }
}

/// Wraps an angle into `(-pi, pi]`.
pub fn wrap_angle(a: f32) -> f32 {
    let two_pi = std::f32::consts::TAU;
    let mut w = (a + std::f32::consts::PI).rem_euclid(two_pi) - std::f32::consts::PI;
    if w <= -std::f32::consts::PI {
        w += two_pi;
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARM: TwoLinkArm = TwoLinkArm {
        upper: 0.5,
        lower: 0.4,
    };

    #[test]
    fn forward_kinematics_of_known_poses() {
        let straight = ARM.end_effector([0.0, 0.0]);
        assert!((straight - Vector2::new(0.9, 0.0)).norm() < 1e-6);
        let bent = ARM.end_effector([std::f32::consts::FRAC_PI_2, -std::f32::consts::FRAC_PI_2]);
        assert!((bent - Vector2::new(0.4, 0.5)).norm() < 1e-6);
    }

    #[test]
    fn inverse_kinematics_round_trips_for_both_elbows() {
        for &(x, y) in &[(0.3, 0.4), (-0.6, 0.2), (0.1, -0.7), (-0.2, -0.25)] {
            let p = Vector2::new(x, y);
            for sign in [1.0, -1.0] {
                let q = ARM.inverse(p, sign).expect("reachable");
                assert!((ARM.end_effector(q) - p).norm() < 1e-4, "{p:?} {sign}");
                assert!(q[1] * sign >= 0.0);
            }
        }
        assert!(ARM.inverse(Vector2::new(1.2, 0.0), 1.0).is_none());
        assert!(ARM.inverse(Vector2::new(0.05, 0.0), 1.0).is_none());
    }

    #[test]
    fn jacobian_matches_finite_differences() {
        let q = [0.7, -1.1];
        let j = ARM.jacobian(q);
        let h = 1e-3;
        for k in 0..2 {
            let mut qp = q;
            let mut qm = q;
            qp[k] += h;
            qm[k] -= h;
            let d = (ARM.end_effector(qp) - ARM.end_effector(qm)) / (2.0 * h);
            assert!((d[0] - j[(0, k)]).abs() < 1e-3 && (d[1] - j[(1, k)]).abs() < 1e-3);
        }
    }

    #[test]
    fn differential_ik_moves_the_end_effector_as_asked() {
        let q = [0.4, 1.2];
        let v = Vector2::new(0.2, -0.1);
        let qd = ARM.joint_velocity_for(q, v, 1e-3);
        let realised = ARM.jacobian(q) * qd;
        assert!((realised - v).norm() < 1e-3);
    }

    #[test]
    fn wrap_angle_stays_in_range() {
        for a in [-10.0f32, -3.2, 0.0, 3.2, 7.0, std::f32::consts::PI] {
            let w = wrap_angle(a);
            assert!(w > -std::f32::consts::PI && w <= std::f32::consts::PI);
            assert!(
                ((w - a) / std::f32::consts::TAU).fract().abs() < 1e-4
                    || ((w - a) / std::f32::consts::TAU).fract().abs() > 1.0 - 1e-4
            );
        }
    }
}
