//! What producers tell the logger: plain data, cheap to build on the control path.

use imago_robots::{Image, SceneMark};

/// An episode begins.
#[derive(Debug, Clone, PartialEq)]
pub struct EpisodeStartEvent {
    /// Episode id.
    pub episode: u64,
    /// The instruction in words.
    pub instruction: String,
    /// The scene's marks: targets, goals (empty when unknown).
    pub targets: Vec<SceneMark>,
}

/// Timing of a live control tick.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TickTiming {
    /// From the tick's deadline to the action being ready, milliseconds.
    pub latency_ms: f64,
    /// Deadline misses so far.
    pub deadline_misses: u64,
}

/// One control step of a logged episode.
#[derive(Debug, Clone, PartialEq)]
pub struct ControlStepEvent {
    /// Episode id.
    pub episode: u64,
    /// Step within the episode.
    pub step: u32,
    /// The robot's body as a polyline ending at its tracked point (reacher2d: base,
    /// elbow, end effector), before the step's action; empty when unknown.
    pub arm: Vec<[f32; 2]>,
    /// Where the intended chunk would take the tracked point (empty when unknown).
    pub intended_path: Vec<[f32; 2]>,
    /// The first intended action (robot units).
    pub intended: Vec<f32>,
    /// The executed action (robot units).
    pub executed: Vec<f32>,
    /// The camera frame, already downsampled (only on frame steps).
    pub frame: Option<Image>,
    /// The policy version that acted (0: a scripted expert).
    pub policy_version: u64,
    /// Whether the scripted expert had taken over.
    pub intervention: bool,
    /// The step's reward.
    pub reward: f32,
    /// Timing, for the live control loop.
    pub tick: Option<TickTiming>,
}

/// An episode ends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpisodeEndEvent {
    /// Episode id.
    pub episode: u64,
    /// Steps taken.
    pub steps: u32,
    /// Whether the instructed target was reached.
    pub success: bool,
    /// Sum of rewards.
    pub episode_return: f32,
}

/// An imagined rollout from a real state of a logged episode, decoded to the end
/// effector, with what really followed and how wrong it was.
#[derive(Debug, Clone, PartialEq)]
pub struct ImaginedWindowEvent {
    /// Episode id.
    pub episode: u64,
    /// The step the rollout starts from.
    pub start_step: u32,
    /// Per ensemble member, the decoded end-effector path (start point first).
    pub members: Vec<Vec<[f32; 2]>>,
    /// The real end-effector path over the same steps.
    pub real: Vec<[f32; 2]>,
    /// Per horizon `1..H`: norm of the ensemble mean's latent error.
    pub error: Vec<f32>,
    /// Per horizon: disagreement (member std, summed over dimensions in quadrature).
    pub disagreement: Vec<f32>,
    /// Per horizon: calibrated 2-sigma bound on the error norm.
    pub interval: Vec<f32>,
    /// The whole state at the rollout's end, drawn, for a model with a state decoder.
    pub bodies: Option<ImaginedBodies>,
}

/// The robot's drawing (as `world/arm`: pusht's block outline and pusher) of the
/// state at an imagined rollout's end and of the real one.
#[derive(Debug, Clone, PartialEq)]
pub struct ImaginedBodies {
    /// From the ensemble mean's latent, read out by the model's state decoder and
    /// anchored to the measured start (docs/worldmodel.md, `decoded`).
    pub imagined: Vec<[f32; 2]>,
    /// From the measured proprioception at the same step.
    pub real: Vec<[f32; 2]>,
}

/// Everything the logger understands.
#[derive(Debug, Clone, PartialEq)]
pub enum TelemetryEvent {
    /// A line of text in the event log (phases, outcomes).
    Note(String),
    /// An episode begins.
    EpisodeStart(Box<EpisodeStartEvent>),
    /// A control step.
    ControlStep(Box<ControlStepEvent>),
    /// An episode ends.
    EpisodeEnd(EpisodeEndEvent),
    /// Scalars of one learning step (`learner/<name>`), on the learner-step timeline.
    LearnerScalars {
        /// The policy version the step produced.
        version: u64,
        /// `(name, value)` pairs.
        values: Vec<(String, f64)>,
    },
    /// Advantages and weights of transitions, for one learning step.
    TransitionWeights {
        /// The policy version the step produced.
        version: u64,
        /// Normalised advantages.
        advantages: Vec<f32>,
        /// Their AWR weights.
        weights: Vec<f32>,
    },
    /// A training run's loss curve (`train/<run>/<term>`), one value per optimiser step.
    LossCurve {
        /// The run (`bc`, `world_model`).
        run: String,
        /// The loss term.
        term: String,
        /// Values from optimiser step 0.
        values: Vec<f32>,
    },
    /// A world-model evaluation: per-horizon bars.
    WorldModelEvaluation {
        /// Error per horizon (normalised by the latent variance).
        horizon_error: Vec<f64>,
        /// The copy-last baseline's error per horizon.
        copy_last_error: Vec<f64>,
        /// Calibrated 2-sigma coverage per horizon.
        coverage_2sigma: Vec<f64>,
    },
    /// The probe's fit error, metres.
    ProbeFit(f32),
    /// An imagined rollout beside the real one.
    Imagined(Box<ImaginedWindowEvent>),
    /// An evaluation's success rate (`eval/<name>`).
    EvalSuccess {
        /// The controller.
        name: String,
        /// Success rate.
        rate: f64,
    },
    /// The promotion gate weighed one more episode: its running statistics
    /// (`promotion/<name>`), on the `promotion_episode` timeline.
    PromotionStatistics(Vec<(String, f64)>),
    /// Stop after logging everything before this (sent by the session).
    Finish,
}
