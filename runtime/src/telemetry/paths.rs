//! Entity paths and timelines of imago's recordings: the contract between the
//! logger, the default blueprint, `docs/telemetry.md` and anyone reading a recording.

/// Timeline: control ticks, counted across every logged episode in logging order.
pub const CONTROL_STEP: &str = "control_step";
/// Timeline: the episode id of the logged data (replay id, or evaluation index).
pub const EPISODE: &str = "episode";
/// Timeline: learning steps that produced a policy version (fine-tuning rounds,
/// daemon learning steps); its value is the new version.
pub const LEARNER_STEP: &str = "learner_step";
/// Timeline: optimiser steps within one training run (behaviour cloning, world model).
pub const OPTIMIZER_STEP: &str = "optimizer_step";
/// Timeline: seconds since the session started.
pub const WALL_TIME: &str = "wall_time";
/// Timeline: episodes the promotion gate has weighed (paired episodes of its tests,
/// live episodes its guard watched), counted across the run.
pub const PROMOTION_EPISODE: &str = "promotion_episode";

/// The arm's links as a line strip from the base through each joint to the end
/// effector (world frame, metres, y flipped so the view matches the camera).
pub const ARM: &str = "world/arm";
/// The end effector's position.
pub const END_EFFECTOR: &str = "world/end_effector";
/// The end effector's path so far in the current episode.
pub const EE_PATH: &str = "world/ee_path";
/// Where the intended action chunk would take the end effector (commands
/// integrated over the chunk; live control loop only).
pub const INTENDED_PATH: &str = "world/intended_path";
/// The targets, coloured and labelled; the instructed one drawn larger.
pub const TARGETS: &str = "world/targets";
/// Imagined end-effector paths, one strip per ensemble member (latents decoded by
/// the nearest-neighbour probe), from a real start state under the recorded actions.
pub const IMAGINED: &str = "world/imagined";
/// The real end-effector path that followed the same start, for comparison.
pub const IMAGINED_REAL: &str = "world/imagined_real";
/// The robot's drawing of the state at an imagined rollout's end, read out by the
/// model's state decoder (models with one: pusht's block and pusher).
pub const IMAGINED_BODY: &str = "world/imagined_body";
/// The robot's drawing of the real state at the same step.
pub const IMAGINED_BODY_REAL: &str = "world/imagined_body_real";
/// The camera frame (downsampled).
pub const CAMERA: &str = "camera/rgb";
/// The current instruction.
pub const INSTRUCTION: &str = "instruction";
/// Notes: phases, episode outcomes, learning steps.
pub const EVENTS: &str = "events";
/// The first action of the chunk the policy intended, per action dimension
/// (`action/intended/0`, ...; robot units).
pub const ACTION_INTENDED: &str = "action/intended";
/// The action the robot executed after its safety envelope, per dimension.
pub const ACTION_EXECUTED: &str = "action/executed";
/// Reward of each control step.
pub const REWARD: &str = "control/reward";
/// Policy version that acted at each control step.
pub const POLICY_VERSION: &str = "control/policy_version";
/// 1 where the scripted expert had taken over.
pub const INTERVENTION: &str = "control/intervention";
/// Tick latency of the live control loop, milliseconds.
pub const TICK_LATENCY: &str = "control/tick_latency_ms";
/// Deadline misses of the live control loop so far.
pub const DEADLINE_MISSES: &str = "control/deadline_misses";
/// Telemetry events dropped so far because the queue was full.
pub const DROPPED: &str = "control/telemetry_dropped";
/// 1 for a successful episode, 0 otherwise (on the episode timeline).
pub const EPISODE_SUCCESS: &str = "episode/success";
/// The episode's return.
pub const EPISODE_RETURN: &str = "episode/return";
/// Rollout error of the ensemble mean at each horizon (`.../h1`, ...): norm of the
/// latent error, on the control step where the imagined rollout started.
pub const ROLLOUT_ERROR: &str = "worldmodel/rollout_error";
/// Ensemble disagreement at each horizon (member std, summed over latent
/// dimensions in quadrature), same steps.
pub const DISAGREEMENT: &str = "worldmodel/disagreement";
/// The calibrated 2-sigma bound on the error norm at each horizon, same steps.
pub const INTERVAL: &str = "worldmodel/calibrated_interval";
/// Rollout error per horizon over a whole evaluation (bar chart over horizons).
pub const EVAL_HORIZON_ERROR: &str = "worldmodel/eval/horizon_error";
/// The copy-last-latent baseline's error per horizon (bar chart).
pub const EVAL_COPY_LAST_ERROR: &str = "worldmodel/eval/copy_last_error";
/// Calibrated 2-sigma coverage per horizon (bar chart; 0.954 is ideal).
pub const EVAL_COVERAGE: &str = "worldmodel/eval/calibrated_coverage_2sigma";
/// The probe's fit error (metres, root-mean-square over its samples).
pub const PROBE_RMSE: &str = "worldmodel/probe_rmse";
/// Normalised advantages of the newest episodes' transitions (bar chart per
/// learning step; transitions that keep weight 1 are left out).
pub const ADVANTAGES: &str = "learner/advantages";
/// AWR weights of the same transitions (bar chart).
pub const WEIGHTS: &str = "learner/weights";
/// Scalar learner series live under here: `learner/<name>`.
pub const LEARNER: &str = "learner";
/// Optimiser-step loss series live under here: `train/<run>/<term>`.
pub const TRAIN: &str = "train";
/// Success rates of evaluations: `eval/<controller>`.
pub const EVAL: &str = "eval";
/// Scalars: the promotion gate's running statistics, log10 of its e-values
/// (`log10_evidence_better`, `log10_evidence_worse`, `log10_guard_evidence`) and of the
/// thresholds they are compared with (`log10_threshold`, `log10_guard_threshold`).
pub const PROMOTION: &str = "promotion";

/// Every timeline above.
pub const TIMELINES: [&str; 6] = [
    CONTROL_STEP,
    EPISODE,
    LEARNER_STEP,
    OPTIMIZER_STEP,
    WALL_TIME,
    PROMOTION_EPISODE,
];

/// Every entity path above (series families like `action/intended/<j>` by their
/// prefix).
pub const ENTITIES: [&str; 35] = [
    ARM,
    END_EFFECTOR,
    EE_PATH,
    INTENDED_PATH,
    TARGETS,
    IMAGINED,
    IMAGINED_REAL,
    IMAGINED_BODY,
    IMAGINED_BODY_REAL,
    CAMERA,
    INSTRUCTION,
    EVENTS,
    ACTION_INTENDED,
    ACTION_EXECUTED,
    REWARD,
    POLICY_VERSION,
    INTERVENTION,
    TICK_LATENCY,
    DEADLINE_MISSES,
    DROPPED,
    EPISODE_SUCCESS,
    EPISODE_RETURN,
    ROLLOUT_ERROR,
    DISAGREEMENT,
    INTERVAL,
    EVAL_HORIZON_ERROR,
    EVAL_COPY_LAST_ERROR,
    EVAL_COVERAGE,
    PROBE_RMSE,
    ADVANTAGES,
    WEIGHTS,
    LEARNER,
    TRAIN,
    EVAL,
    PROMOTION,
];

/// Entity paths only the live control loop and its promotion gate log
/// (`imago daemon`).
pub const LIVE_ONLY: [&str; 4] = [INTENDED_PATH, TICK_LATENCY, DEADLINE_MISSES, PROMOTION];

/// Timelines only the daemon's promotion gate uses.
pub const LIVE_ONLY_TIMELINES: [&str; 1] = [PROMOTION_EPISODE];
