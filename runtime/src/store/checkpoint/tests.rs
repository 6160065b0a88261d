//! Tests of policy and world-model checkpoints: round trips, old formats, damage.

use burn::{Dispatch, DispatchDevice, backend::flex::FlexDevice};
use imago_policies::{ActionHeadKind, PolicyBatch};
use imago_robots::Robot;

use super::*;
use crate::robot::RobotConfig;

/// The policy's deterministic action chunk for [`observation`].
fn outputs(
    policy: &Policy<Dispatch>,
    config: &PolicyConfig,
    device: &DispatchDevice,
) -> anyhow::Result<Vec<f32>> {
    let mut batch = PolicyBatch::new(&config.input_spec());
    batch.push(&observation())?;
    policy
        .act(batch.to_input(device), None)
        .into_data()
        .to_vec::<f32>()
        .map_err(|e| anyhow::anyhow!("{e:?}"))
}

fn config() -> PolicyConfig {
    vla(serde_json::json!({}))
}

/// A small VLA for the default reacher2d, with the keys of `changes` changed.
fn vla(changes: serde_json::Value) -> PolicyConfig {
    PolicyConfig::for_robot(Architecture::Vla, &RobotConfig::default().spec())
        .unwrap()
        .with_stored_changes(&serde_json::json!({ "d_model": 16, "d_ff": 32, "n_layers": 1 }))
        .and_then(|small| small.with_stored_changes(&changes))
        .expect("a VLA config")
}

/// Saves a fresh policy to `dir`; returns its actions on a fixed observation.
fn saved(dir: &Path) -> (Vec<f32>, DispatchDevice) {
    saved_with(dir, &config())
}

/// Saves a fresh policy of `config` to `dir`; returns its actions on a fixed
/// observation.
fn saved_with(dir: &Path, config: &PolicyConfig) -> (Vec<f32>, DispatchDevice) {
    let device = DispatchDevice::Flex(FlexDevice);
    let policy = config.init::<Dispatch>(&device);
    // burn initialises parameters lazily: use the policy before saving a clone of
    // it, or the clone and the original would draw different weights.
    let actions = outputs(&policy, config, &device).unwrap();
    save_policy(
        &policy,
        config,
        CheckpointMeta::new(&RobotConfig::default().spec(), 4, None),
        dir,
    )
    .unwrap();
    (actions, device)
}

fn observation() -> imago_robots::Observation {
    RobotConfig::default().build().unwrap().reset(3)
}

#[test]
fn round_trip_keeps_weights_config_and_meta() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("ckpt");
    let (before, device) = saved(&dir);
    let (loaded, loaded_config, meta) =
        load_policy::<Dispatch>(&dir, Some(&config()), &device).unwrap();
    assert_eq!(loaded_config, config());
    assert_eq!(meta.version, 4);
    assert_eq!(meta.kind, "vla-policy");
    let after = outputs(&loaded, &config(), &device).unwrap();
    assert_eq!(before, after);
}

#[test]
fn a_deeper_stems_layers_round_trip() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("ckpt");
    let deep = config().with_stem_layers(3);
    let (before, device) = saved_with(&dir, &deep);
    let (loaded, loaded_config, _) = load_policy::<Dispatch>(&dir, Some(&deep), &device).unwrap();
    assert_eq!(loaded_config.stem_layers(), Some(3));
    let after = outputs(&loaded, &deep, &device).unwrap();
    assert_eq!(
        before, after,
        "the mixing layers' weights are the saved ones"
    );
}

#[test]
fn checkpoints_written_before_pooling_action_origins_and_relu_still_load() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("ckpt");
    let old = vla(serde_json::json!({ "stem_activation": "gelu" }));
    let (before, device) = saved_with(&dir, &old);
    // The meta as a build before `frame_pool`, `action_origin` and
    // `stem_activation` wrote it.
    let path = dir.join(META);
    let mut meta: CheckpointMeta = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let fields = meta.config.as_object_mut().unwrap();
    assert!(fields.remove("frame_pool").is_some());
    assert!(fields.remove("action_origin").is_some());
    assert!(fields.remove("stem_activation").is_some());
    meta.checksum = None;
    std::fs::write(
        &path,
        sign_meta_json(serde_json::to_vec_pretty(&meta).unwrap()),
    )
    .unwrap();
    let (loaded, loaded_config, _) = load_policy::<Dispatch>(&dir, Some(&old), &device).unwrap();
    assert_eq!(loaded_config, old);
    assert_eq!(outputs(&loaded, &old, &device).unwrap(), before);
    // Today's default config differs from it in the activation alone: loading it
    // as that is refused, continuing it keeps its GELU.
    let err = load_policy::<Dispatch>(&dir, Some(&config()), &device).unwrap_err();
    assert!(err.to_string().contains("stem_activation"), "{err}");
    let (continued, continued_config, _) =
        load_policy_to_continue::<Dispatch>(&dir, &config(), &device).unwrap();
    assert_eq!(continued_config, old);
    assert_eq!(outputs(&continued, &old, &device).unwrap(), before);
    // So are its head, chunk length and size.
    let (_, continued_config, _) = load_policy_to_continue::<Dispatch>(
        &dir,
        &config()
            .with_chunk_len(7)
            .with_head(ActionHeadKind::Flow)
            .with_width(32)
            .with_layers(3),
        &device,
    )
    .unwrap();
    assert_eq!(continued_config, old);
    // Anything else that differs is still refused.
    let err = load_policy_to_continue::<Dispatch>(
        &dir,
        &vla(serde_json::json!({ "max_words": 8 })),
        &device,
    )
    .unwrap_err();
    assert!(err.to_string().contains("max_words"), "{err}");
}

#[test]
fn saving_again_replaces_atomically_and_leaves_no_temporaries() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("ckpt");
    saved(&dir);
    saved(&dir);
    let names: Vec<String> = std::fs::read_dir(root.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["ckpt".to_string()]);
}

#[test]
fn a_checkpoint_knows_its_robot_spec_and_refuses_another() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("ckpt");
    saved(&dir);
    let spec = RobotConfig::default().spec();
    assert_eq!(
        ensure_trained_for(&dir, &spec).unwrap().spec,
        Some(spec.clone())
    );
    let small = crate::robot::reacher2d_with("image_size = 32").spec();
    let error = ensure_trained_for(&dir, &small).unwrap_err().to_string();
    assert!(
        error.contains(&spec.summary())
            && error.contains(&small.summary())
            && error.contains("camera: 48x48 vs 32x32"),
        "{error}"
    );
}

#[test]
fn config_mismatch_names_every_differing_key() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("ckpt");
    let (_, device) = saved(&dir);
    let other = vla(serde_json::json!({ "d_model": 32, "chunk_len": 2 }));
    let err = load_policy::<Dispatch>(&dir, Some(&other), &device).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, CheckpointError::ConfigMismatch { .. }));
    assert!(
        message.contains("d_model: 16 vs 32") && message.contains("chunk_len: 4 vs 2"),
        "{message}"
    );
}

#[test]
fn missing_malformed_wrong_kind_and_corrupt_weights_are_clear_errors() {
    let root = tempfile::tempdir().unwrap();
    let device = DispatchDevice::Flex(FlexDevice);
    let missing = root.path().join("absent");
    assert!(matches!(
        load_policy::<Dispatch>(&missing, None, &device),
        Err(CheckpointError::NotFound(_))
    ));

    let dir = root.path().join("ckpt");
    saved(&dir);
    let meta_path = dir.join(META);
    let good_meta = std::fs::read_to_string(&meta_path).unwrap();

    std::fs::write(&meta_path, "{ not json").unwrap();
    assert!(matches!(
        load_policy::<Dispatch>(&dir, None, &device),
        Err(CheckpointError::BadMeta { .. })
    ));

    // Edited by hand (its checksum recomputed): another kind is refused by name.
    let resigned = |edit: &dyn Fn(&mut CheckpointMeta)| {
        let mut meta: CheckpointMeta = serde_json::from_str(&good_meta).unwrap();
        edit(&mut meta);
        meta.checksum = None;
        String::from_utf8(sign_meta_json(serde_json::to_vec_pretty(&meta).unwrap())).unwrap()
    };
    std::fs::write(&meta_path, resigned(&|m| m.kind = "world-model".into())).unwrap();
    let err = load_policy::<Dispatch>(&dir, None, &device).unwrap_err();
    assert!(err.to_string().contains("`world-model`"), "{err}");
    // Edited without recomputing its checksum: refused as damaged.
    std::fs::write(
        &meta_path,
        good_meta.replace("\"version\": 4", "\"version\": 5"),
    )
    .unwrap();
    let err = load_policy::<Dispatch>(&dir, None, &device).unwrap_err();
    assert!(err.to_string().contains("own checksum"), "{err}");

    std::fs::write(&meta_path, &good_meta).unwrap();
    let model = dir.join(SAFETENSORS_FILE);
    let bytes = std::fs::read(&model).unwrap();
    std::fs::write(&model, &bytes[..bytes.len() / 2]).unwrap();
    let err = load_policy::<Dispatch>(&dir, None, &device).unwrap_err();
    assert!(matches!(err, CheckpointError::Damaged { .. }), "{err}");
    assert!(err.to_string().contains("model.safetensors has"), "{err}");

    // One flipped bit anywhere in the weights is caught by the checksum.
    let mut flipped = bytes.clone();
    flipped[bytes.len() * 2 / 3] ^= 0x10;
    std::fs::write(&model, &flipped).unwrap();
    let err = load_policy::<Dispatch>(&dir, None, &device).unwrap_err();
    assert!(err.to_string().contains("checksum"), "{err}");
    std::fs::write(&model, &bytes).unwrap();

    // A config whose sizes the stored tensors do not have: each tensor is named.
    std::fs::write(
        &meta_path,
        resigned(&|m| m.config["stem_channels"] = serde_json::json!(8)),
    )
    .unwrap();
    let message = shape_mismatch(&dir, &device);
    assert!(
        message.contains("tensor stem.weight: stored [3, 16], the config gives [3, 8]"),
        "{message}"
    );

    // A meta without the checksum of its weights.
    std::fs::write(&meta_path, resigned(&|m| m.files.clear())).unwrap();
    let err = load_policy::<Dispatch>(&dir, None, &device).unwrap_err();
    assert!(err.to_string().contains("no checksum"), "{err}");

    std::fs::remove_file(&meta_path).unwrap();
    assert!(matches!(
        load_policy::<Dispatch>(&dir, None, &device),
        Err(CheckpointError::MissingMeta { .. })
    ));
}

#[test]
fn damaged_checkpoints_never_load_other_weights_and_never_panic() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("ckpt");
    let (reference, device) = saved(&dir);
    let pristine: Vec<(String, Vec<u8>)> = [SAFETENSORS_FILE, META]
        .iter()
        .map(|f| (f.to_string(), std::fs::read(dir.join(f)).unwrap()))
        .collect();
    let mut cases = 0;
    let mut refused = 0;
    for (file, bytes) in &pristine {
        let len = bytes.len();
        let mut mutations: Vec<Vec<u8>> = Vec::new();
        for position in (0..len).step_by((len / 60).max(1)) {
            let mut flipped = bytes.clone();
            flipped[position] ^= 1 << (position % 8);
            mutations.push(flipped);
        }
        for cut in [0, 1, len / 3, len / 2, len - 1] {
            mutations.push(bytes[..cut].to_vec());
        }
        for start in (0..len).step_by((len / 8).max(1)) {
            let mut zeroed = bytes.clone();
            zeroed[start..(start + 64).min(len)].fill(0);
            mutations.push(zeroed);
        }
        for mutated in mutations {
            std::fs::write(dir.join(file), &mutated).unwrap();
            cases += 1;
            match load_policy::<Dispatch>(&dir, None, &device) {
                Ok((policy, config, _)) => {
                    let actions = outputs(&policy, &config, &device);
                    assert_eq!(
                        actions.ok(),
                        Some(reference.clone()),
                        "{file}: a damaged checkpoint loaded other weights"
                    );
                }
                Err(_) => refused += 1,
            }
        }
        std::fs::write(dir.join(file), bytes).unwrap();
    }
    // Every change to either file is refused.
    assert!(cases > 100, "{cases}");
    assert_eq!(refused, cases);
}

#[test]
fn stored_configs_and_specs_are_checked_with_config_file_ranges_and_against_each_other() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("ckpt");
    let (reference, device) = saved(&dir);
    let refused = |dir: &Path| {
        let error = load_policy::<Dispatch>(dir, None, &device).unwrap_err();
        assert!(matches!(error, CheckpointError::BadMeta { .. }), "{error}");
        error.to_string()
    };
    // Out of the range a config file allows (checksums re-signed, as a hand edit).
    rewrite_meta(&dir, |m| {
        m.config["action_limit"] = serde_json::json!([1e30, 1e30])
    });
    let message = refused(&dir);
    assert!(message.contains("action_limit[0] = 1e30"), "{message}");
    // In range, but apart from the robot the checkpoint records.
    rewrite_meta(&dir, |m| {
        m.config["action_limit"] = serde_json::json!([2.0, 2.0])
    });
    let message = refused(&dir);
    assert!(
        message.contains("disagree with the robot it records"),
        "{message}"
    );
    // Both edited together: the spec's own ranges catch it, for every reader of
    // the meta (ensure_trained_for too).
    rewrite_meta(&dir, |m| {
        m.config["action_limit"] = serde_json::json!([1e30, 1e30]);
        m.spec.as_mut().unwrap().action_limit = vec![1e30; 2];
    });
    let message = refused(&dir);
    assert!(
        message.contains("the robot spec it records: action_limit[0] = 1e30"),
        "{message}"
    );
    assert!(ensure_trained_for(&dir, &RobotConfig::default().spec()).is_err());
    rewrite_meta(&dir, |m| {
        m.config["action_limit"] = serde_json::json!([1.0, 1.0]);
        let spec = m.spec.as_mut().unwrap();
        spec.action_limit = vec![1.0; 2];
        spec.control_hz = 0.0;
    });
    assert!(refused(&dir).contains("control_hz"));
    // Put back, it loads the same weights.
    rewrite_meta(&dir, |m| m.spec.as_mut().unwrap().control_hz = 20.0);
    let (policy, config, _) = load_policy::<Dispatch>(&dir, None, &device).unwrap();
    assert_eq!(outputs(&policy, &config, &device).unwrap(), reference);
}

/// Edits the `meta.json` of the checkpoint in `dir` and signs it again, as a hand
/// edit that keeps its checksum right would.
/// The error of loading the policy at `dir`, which must be a shape mismatch.
fn shape_mismatch(dir: &Path, device: &DispatchDevice) -> String {
    let err = load_policy::<Dispatch>(dir, None, device).unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(err, CheckpointError::ShapeMismatch { .. }),
        "{message}"
    );
    message
}

fn rewrite_meta(dir: &Path, edit: impl Fn(&mut CheckpointMeta)) {
    let path = dir.join(META);
    let mut meta: CheckpointMeta = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut meta);
    meta.checksum = None;
    std::fs::write(
        &path,
        sign_meta_json(serde_json::to_vec_pretty(&meta).unwrap()),
    )
    .unwrap();
}

/// The tensor names and shapes in a safetensors file's header.
fn safetensors_header(path: &Path) -> BTreeMap<String, Vec<usize>> {
    let bytes = std::fs::read(path).unwrap();
    let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + len]).unwrap();
    header
        .as_object()
        .unwrap()
        .iter()
        .filter(|(name, _)| *name != "__metadata__")
        .map(|(name, v)| {
            let shape = v["shape"].as_array().unwrap();
            (
                name.clone(),
                shape.iter().map(|d| d.as_u64().unwrap() as usize).collect(),
            )
        })
        .collect()
}

#[test]
fn safetensors_tensors_are_named_by_the_module_tree_and_mismatches_name_each_tensor() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("ckpt");
    let (_, device) = saved(&dir);
    let meta = read_meta(&dir).unwrap();
    assert_eq!(meta.format, 3);
    assert!(meta.files.contains_key(SAFETENSORS_FILE));
    let stored = safetensors_header(&dir.join(SAFETENSORS_FILE));
    // Named by their path in the architecture's own module: no enum prefix.
    let Policy::Vla(policy) = config().init::<Dispatch>(&device) else {
        unreachable!("config() is a VLA")
    };
    assert_eq!(stored, parameter_shapes(&policy));
    assert!(
        stored.contains_key("encoder.layers.0.mha.query.weight"),
        "{stored:?}"
    );

    // A config with a second layer: every tensor of it is named missing.
    rewrite_meta(&dir, |m| m.config["n_layers"] = serde_json::json!(2));
    let message = shape_mismatch(&dir, &device);
    assert!(
        message.contains("tensor encoder.layers.1.mha.query.weight: missing"),
        "{message}"
    );

    // Saved with two layers, loaded with a config of one: the extra ones are named.
    saved_with(&dir, &vla(serde_json::json!({ "n_layers": 2 })));
    rewrite_meta(&dir, |m| m.config["n_layers"] = serde_json::json!(1));
    let message = shape_mismatch(&dir, &device);
    assert!(
        message.contains("tensor encoder.layers.1.mha.query.weight: not in the model"),
        "{message}"
    );
}

#[test]
fn checkpoints_with_burn_mpk_weights_still_load() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("ckpt");
    std::fs::create_dir_all(&dir).unwrap();
    let device = DispatchDevice::Flex(FlexDevice);
    let policy = config().init::<Dispatch>(&device);
    let before = outputs(&policy, &config(), &device).unwrap();
    // A format-2 checkpoint as builds before safetensors (and before the policy
    // seam) wrote it: the VLA's own record, its own config.
    let Policy::Vla(vla) = &policy else {
        unreachable!("config() is a VLA")
    };
    vla.clone()
        .save_file(dir.join(MODEL_STEM), &recorder())
        .unwrap();
    let mut meta = CheckpointMeta::new(&RobotConfig::default().spec(), 7, None);
    meta.format = 2;
    meta.config = config().to_stored();
    meta.files = BTreeMap::from([(
        MPK_FILE.to_string(),
        FileDigest::of(&dir.join(MPK_FILE)).unwrap(),
    )]);
    std::fs::write(
        dir.join(META),
        sign_meta_json(serde_json::to_vec_pretty(&meta).unwrap()),
    )
    .unwrap();
    let (loaded, _, meta) = load_policy::<Dispatch>(&dir, Some(&config()), &device).unwrap();
    assert_eq!(meta.version, 7);
    assert_eq!(outputs(&loaded, &config(), &device).unwrap(), before);
    // Saving it again writes safetensors, with the same weights.
    save_policy(&loaded, &config(), meta, &dir).unwrap();
    assert!(dir.join(SAFETENSORS_FILE).exists() && !dir.join(MPK_FILE).exists());
    let (again, _, _) = load_policy::<Dispatch>(&dir, Some(&config()), &device).unwrap();
    assert_eq!(outputs(&again, &config(), &device).unwrap(), before);
}

#[test]
fn world_models_written_before_the_state_decoder_load_and_continue_without_one() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("world-model");
    let device = DispatchDevice::Flex(FlexDevice);
    let spec = RobotConfig::named("reacher2d").unwrap().spec();
    let today = imago_worldmodel::WorldModelConfig::for_robot(
        &spec,
        imago_worldmodel::TransitionFamily::ResidualMlp,
    )
    .unwrap()
    .with_hidden(16)
    .with_ensemble_size(2)
    .with_state_decoder(true);
    let old = today.clone().with_state_decoder(false);
    save_world_model(
        &old.init::<Dispatch>(&device),
        &old,
        CheckpointMeta::new(&spec, 1, None),
        &dir,
    )
    .unwrap();
    // The meta as a build before the decoder wrote it.
    rewrite_meta(&dir, |meta| {
        let fields = meta.config.as_object_mut().unwrap();
        assert!(fields.remove("state_decoder").is_some());
    });
    // Asked for a shape with a decoder (as `imago train --init` with a state weight
    // asks), it continues as it was.
    let (model, config, _) = load_world_model::<Dispatch>(&dir, Some(&today), &device).unwrap();
    assert_eq!(config, old);
    assert!(model.state_decoder_weights().is_none());
    // Any other difference is still refused.
    let err = load_world_model::<Dispatch>(&dir, Some(&today.clone().with_hidden(32)), &device)
        .unwrap_err()
        .to_string();
    assert!(err.contains("hidden"), "{err}");
}
