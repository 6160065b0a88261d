//! `imago retarget`: a policy checkpoint rewritten for a robot that differs from the
//! one it was trained for only in its proprioception's entries, where every entry the
//! policy reads is there by name. What it is for: a policy trained where a simulator
//! gives more than the robot will (pusht's pose setting, its block pose a keypoint
//! target the policy never reads) acts on the robot that does not give it (the vision
//! setting). The weights are the same; the keypoint readout goes where its targets do.

use std::path::Path;

use burn::Dispatch;
use imago_robots::RobotSpec;

use crate::device::ResolvedDevice;
use crate::store::checkpoint::{CheckpointMeta, load_policy, save_policy};
use crate::store::outputs::{Input, OutputKind, OutputPath};

/// What a retargeting wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct Retargeted {
    /// The proprioception entries the policy reads, by name.
    pub reads: Vec<String>,
    /// Whether the keypoint readout was left out (the robot lacks its targets).
    pub dropped_keypoint_targets: bool,
    /// The checkpoint's version (unchanged: the weights are).
    pub version: u64,
}

/// Writes the policy of the checkpoint `from` to `out` for the robot of `spec`: its
/// config reading the same entries by name in `spec`'s proprioception, its meta
/// recording `spec` and `from` as its parent. Refused, naming what differs: a
/// checkpoint of another robot, action limits or camera, one without a recorded
/// spec, one already for `spec`, and a policy that reads an entry `spec` lacks.
pub fn retarget_policy(
    from: &Path,
    spec: &RobotSpec,
    out: OutputPath<'_>,
    device: &ResolvedDevice,
) -> anyhow::Result<Retargeted> {
    out.check(
        OutputKind::PolicyCheckpoint,
        &[Input {
            flag: "--ckpt",
            path: from,
        }],
    )?;
    let (policy, config, meta) = load_policy::<Dispatch>(from, None, &device.inference)?;
    let trained = meta.spec.as_ref().ok_or_else(|| {
        anyhow::anyhow!(
            "{}: its meta.json records no robot spec (written before specs were), so its entries cannot be named",
            from.display()
        )
    })?;
    // Everything but the proprioception's names must match.
    let same_names = RobotSpec {
        proprio_names: trained.proprio_names.clone(),
        ..spec.clone()
    };
    let differences = trained.data_differences(&same_names);
    anyhow::ensure!(
        differences.is_empty(),
        "{} was trained for {}, which differs from {} in more than its proprioception: {}",
        from.display(),
        trained.summary(),
        spec.summary(),
        differences.join(", ")
    );
    anyhow::ensure!(
        trained.proprio_names != spec.proprio_names,
        "{} is already a policy for {} (nothing to retarget)",
        from.display(),
        spec.summary()
    );
    let (config, dropped) = config
        .for_proprioception(&trained.proprio_names, &spec.proprio_names)
        .map_err(|why| {
            anyhow::anyhow!("{} cannot act on {}: {why}", from.display(), spec.summary())
        })?;
    config
        .validate()
        .map_err(|e| anyhow::anyhow!("the retargeted policy's config: {e}"))?;
    let policy = if dropped {
        policy.without_keypoint_readout()
    } else {
        policy
    };
    let mut new_meta = CheckpointMeta::new(spec, meta.version, Some(from.display().to_string()));
    new_meta.metrics = meta.metrics.clone();
    save_policy(&policy, &config, new_meta, out.path)?;
    Ok(Retargeted {
        reads: config
            .proprio_inputs()
            .iter()
            .map(|&i| spec.proprio_names[i].clone())
            .collect(),
        dropped_keypoint_targets: dropped,
        version: meta.version,
    })
}
