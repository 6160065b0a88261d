//! Every numeric key of the daemon config, for any value of its TOML type: a value in
//! the documented range (docs/configuration.md) loads, any other value is one clear
//! error naming the key, and nothing panics; a robot config that loads runs. The
//! ranges below are written out from the documentation, apart from the code that
//! checks them, so that a check that drifts from its documented range fails here.

use imago_robots::{Action, Robot};
use imago_worldmodel::{TransitionFamily, WorldModelConfig};
use proptest::prelude::*;

use crate::engine::daemon::DaemonConfig;

/// How a key is written in TOML, and the type it is read into.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Integer,
    /// An `f32` field: values round to `f32` before they are checked.
    Float,
    /// An `f64` field.
    Float64,
}

/// `(dotted key, kind, documented minimum, documented maximum)`.
const KEYS: &[(&str, Kind, f64, f64)] = &[
    ("checkpoint_every_seconds", Kind::Float64, 0.1, 1e6),
    ("status_every_seconds", Kind::Float64, 0.1, 86_400.0),
    ("actor.exploration", Kind::Float, 0.0, 10.0),
    ("actor.policy_delay_ms", Kind::Float, 0.0, 10_000.0),
    ("actor.chunking.blend_ticks", Kind::Integer, 0.0, 64.0),
    ("promotion.confidence", Kind::Float64, 0.5, 0.9999),
    ("promotion.max_episodes", Kind::Integer, 1.0, 100_000.0),
    ("promotion.min_improvement", Kind::Float64, 0.0, 0.45),
    ("promotion.guard_episodes", Kind::Integer, 1.0, 100_000.0),
    ("promotion.explore_fraction", Kind::Float64, 0.01, 1.0),
    ("actor.takeover.window", Kind::Integer, 1.0, 100_000.0),
    ("actor.takeover.min_progress", Kind::Float, 0.0, 100.0),
    ("actor.robot.image_size", Kind::Integer, 16.0, 256.0),
    ("actor.robot.view_half_extent", Kind::Float, 0.1, 100.0),
    ("actor.robot.control_hz", Kind::Float, 0.1, 1000.0),
    ("actor.robot.max_steps", Kind::Integer, 1.0, 100_000.0),
    ("actor.robot.max_speed", Kind::Float, 0.001, 100.0),
    ("actor.robot.max_joint_speed", Kind::Float, 0.001, 1000.0),
    ("actor.robot.actuator_response", Kind::Float, 0.001, 1.0),
    ("actor.robot.target_radius", Kind::Float, 0.001, 10.0),
    ("actor.robot.success_radius", Kind::Float, 0.001, 10.0),
    ("actor.robot.min_separation", Kind::Float, 0.0, 10.0),
    (
        "actor.robot.elbow_limit",
        Kind::Float,
        0.1,
        std::f64::consts::PI,
    ),
    ("actor.robot.safety.max_rate", Kind::Float, 0.001, 100.0),
    ("actor.robot.safety.trip_factor", Kind::Float, 1.0, 1000.0),
    // Up to `learner.window_episodes` (100 by default).
    ("learner.min_episodes", Kind::Integer, 1.0, 100.0),
    // From `learner.min_episodes` (8 by default) on.
    ("learner.window_episodes", Kind::Integer, 8.0, 100_000.0),
    ("learner.finetune.rounds", Kind::Integer, 1.0, 10_000.0),
    (
        "learner.finetune.episodes_per_round",
        Kind::Integer,
        1.0,
        10_000.0,
    ),
    ("learner.finetune.group_size", Kind::Integer, 1.0, 1024.0),
    (
        "learner.finetune.rollout.exploration",
        Kind::Float,
        0.0,
        10.0,
    ),
    (
        "learner.finetune.rollout.coaching.probability",
        Kind::Float,
        0.0,
        1.0,
    ),
    (
        "learner.finetune.rollout.coaching.ticks",
        Kind::Integer,
        1.0,
        10_000.0,
    ),
    ("learner.finetune.policy_steps", Kind::Integer, 0.0, 1e7),
    ("learner.finetune.batch_size", Kind::Integer, 1.0, 4096.0),
    ("learner.finetune.learning_rate", Kind::Float64, 1e-9, 1.0),
    (
        "learner.finetune.lerobot_learning_rate",
        Kind::Float64,
        1e-9,
        1.0,
    ),
    ("learner.finetune.beta", Kind::Float, 1e-6, 1e6),
    ("learner.finetune.max_weight", Kind::Float, 1.0, 1e9),
    ("learner.finetune.discount", Kind::Float, 0.0, 1.0),
    ("learner.finetune.lambda", Kind::Float, 0.0, 1.0),
    (
        "learner.finetune.world_model_steps",
        Kind::Integer,
        0.0,
        1e7,
    ),
    (
        "learner.finetune.initial_world_model_steps",
        Kind::Integer,
        1.0,
        1e7,
    ),
    ("learner.finetune.critic_steps", Kind::Integer, 0.0, 1e7),
    (
        "learner.finetune.critic_batch",
        Kind::Integer,
        1.0,
        65_536.0,
    ),
    (
        "learner.finetune.critic_learning_rate",
        Kind::Float64,
        1e-9,
        1.0,
    ),
    (
        "learner.finetune.imagination.horizon",
        Kind::Integer,
        1.0,
        64.0,
    ),
    (
        "learner.finetune.imagination.uncertainty_penalty",
        Kind::Float64,
        0.0,
        1000.0,
    ),
    ("learner.finetune.max_staleness", Kind::Integer, 0.0, 1e6),
    (
        "learner.finetune.max_importance_ratio",
        Kind::Float,
        1.0,
        1e6,
    ),
    (
        "learner.finetune.advantage_flow.regulariser",
        Kind::Float64,
        0.0,
        1000.0,
    ),
    (
        "learner.finetune.habc.gate.threshold",
        Kind::Float,
        0.0,
        1.0,
    ),
    (
        "learner.finetune.habc.gate.sharpness",
        Kind::Float,
        0.0,
        1000.0,
    ),
    (
        "replay.segment_bytes",
        Kind::Integer,
        4096.0,
        4_294_967_296.0,
    ),
    ("telemetry.queue", Kind::Integer, 1.0, 1_048_576.0),
    ("telemetry.frame_every", Kind::Integer, 1.0, 1e6),
    ("telemetry.frame_downsample", Kind::Integer, 1.0, 64.0),
    ("telemetry.imagined_episodes", Kind::Integer, 0.0, 1000.0),
    ("telemetry.imagine_every", Kind::Integer, 1.0, 1e6),
];

/// Values worth trying for a key: its bounds and their neighbours, zero, negatives,
/// huge values, non-finite ones, and anything in between.
fn value(min: f64, max: f64) -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(min),
        Just(max),
        Just(min - 1.0),
        Just(max + 1.0),
        Just(max * 10.0 + 1.0),
        Just(0.0),
        Just(-1.0),
        Just(1e12),
        Just(1e30),
        Just(-1e30),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        min..=max,
        -1e6..1e6f64,
    ]
}

fn toml_value(kind: Kind, value: f64) -> String {
    match kind {
        Kind::Float | Kind::Float64 if value.is_nan() => "nan".into(),
        Kind::Float | Kind::Float64 if value.is_infinite() => {
            if value > 0.0 { "inf" } else { "-inf" }.into()
        }
        Kind::Float | Kind::Float64 => format!("{value:?}"),
        // An integer key given a value with a fraction or out of i64: TOML's own
        // type error must name the line.
        Kind::Integer if value.fract() != 0.0 || value.abs() > 9e18 || !value.is_finite() => {
            format!("{value:?}")
                .replace("inf", "1e999")
                .replace("NaN", "nan")
        }
        Kind::Integer => format!("{}", value as i64),
    }
}

/// Whether `value` of `kind` lies in `[min, max]` (integers must be whole; the camera
/// size must also be a multiple of 8, as documented).
fn in_documented_range(key: &str, kind: Kind, value: f64, min: f64, max: f64) -> bool {
    let (value, min, max) = match kind {
        Kind::Float => (value as f32 as f64, min as f32 as f64, max as f32 as f64),
        _ => (value, min, max),
    };
    let whole = !matches!(kind, Kind::Integer) || value.fract() == 0.0;
    let multiple = key != "actor.robot.image_size" || value % 8.0 == 0.0;
    whole && multiple && value >= min && value <= max
}

/// The fine-tuning method a method's own key needs (`learner.finetune.habc.*` is
/// read with `method = "habc"` only), as a line of TOML; empty for other keys.
fn method_of(key: &str) -> String {
    ["advantage_flow", "habc"]
        .into_iter()
        .find(|table| key.starts_with(&format!("learner.finetune.{table}.")))
        .map(|table| {
            format!(
                "learner.finetune.method = \"{}\"\n",
                table.replace('_', "-")
            )
        })
        .unwrap_or_default()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]

    #[test]
    fn every_key_accepts_its_range_and_names_itself_outside_it(
        (index, raw) in (0..KEYS.len()).prop_flat_map(|i| (Just(i), value(KEYS[i].2, KEYS[i].3)))
    ) {
        let (key, kind, min, max) = KEYS[index];
        let text = format!(
            "robot = \"reacher2d\"\n{}{key} = {}\n",
            method_of(key),
            toml_value(kind, raw)
        );
        let loaded = DaemonConfig::parse(&text).map_err(|e| format!("{e:#}"));
        let leaf = key.rsplit('.').next().unwrap();
        match loaded {
            Ok(config) => {
                prop_assert!(
                    in_documented_range(key, kind, raw, min, max),
                    "{text} was accepted outside [{min}, {max}]"
                );
                // A robot config that loads runs: construct, reset, step, render.
                let mut robot = config.actor.robot.build().unwrap();
                robot.reset(7);
                for tick in 0..20 {
                    let a = (tick as f32 * 0.7).sin() * 3.0;
                    robot.step(&Action(vec![a, -a]));
                }
            }
            Err(message) => {
                prop_assert!(
                    !in_documented_range(key, kind, raw, min, max),
                    "{text} was refused inside [{min}, {max}]: {message}"
                );
                prop_assert!(message.contains(leaf), "{text}: {message}");
            }
        }
    }

    #[test]
    fn model_configs_that_validate_stay_bounded(
        d_model in 0usize..5000,
        n_heads in 0usize..80,
        n_layers in 0usize..200,
        d_ff in 0usize..40_000,
        hidden in 0usize..10_000,
        latent in 0usize..2000,
        ensemble in 0usize..64,
    ) {
        let policy = imago_policies::PolicyConfig::for_robot(
            imago_policies::Architecture::Vla,
            &crate::robot::RobotConfig::default().spec(),
        )
        .unwrap()
        .with_stored_changes(&serde_json::json!({
            "d_model": d_model, "n_heads": n_heads, "n_layers": n_layers, "d_ff": d_ff,
        }))
        .unwrap();
        if policy.validate().is_ok() {
            prop_assert!(policy.parameter_count() <= imago_policies::MAX_PARAMETERS);
            prop_assert!(n_layers <= 64 && d_model <= 2048 && d_ff >= 1);
        }
        let model = WorldModelConfig::new(8, vec![1.0, 1.0])
            .with_hidden(hidden)
            .with_latent_dim(latent)
            .with_ensemble_size(ensemble)
            .with_family(TransitionFamily::Salt);
        if model.validate().is_ok() {
            prop_assert!(model.parameter_count() <= imago_policies::MAX_PARAMETERS);
            prop_assert!((1..=32).contains(&ensemble));
        }
    }
}

#[test]
fn the_retention_limit_depends_on_the_segment_size() {
    let text = "robot = \"reacher2d\"\n[replay]\nsegment_bytes = 65536\nretention_bytes = 1000\n";
    let error = format!("{:#}", DaemonConfig::parse(text).unwrap_err());
    assert!(error.contains("replay.retention_bytes"), "{error}");
}

#[test]
fn the_learner_window_holds_at_least_the_episodes_a_step_waits_for() {
    let text = "robot = \"reacher2d\"\n[learner]\nmin_episodes = 20\nwindow_episodes = 16\n";
    let error = format!("{:#}", DaemonConfig::parse(text).unwrap_err());
    assert!(error.contains("learner.window_episodes"), "{error}");
    assert!(error.contains("20"), "{error}");
    let fits = "robot = \"reacher2d\"\n[learner]\nmin_episodes = 16\nwindow_episodes = 16\n";
    assert_eq!(
        DaemonConfig::parse(fits).unwrap().learner.window_episodes,
        16
    );
}
