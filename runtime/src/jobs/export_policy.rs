//! `imago export policy --format lerobot`: a LeRobot policy directory written back as
//! LeRobot reads it: `model.safetensors` from imago's burn model (PyTorch's layouts by
//! burn-store's adapter, each tensor under the name LeRobot gave it), and the config
//! and processors (with their statistics) as they were. Built beside the output and
//! moved into place when complete; what the output holds is checked first.

use std::path::{Path, PathBuf};

use burn::backend::flex::FlexDevice;
use burn::{Dispatch, DispatchDevice};

use crate::store::lerobot_policy::{load_lerobot_policy, write_lerobot_policy};
use crate::store::outputs::{Input, OutputKind, OutputPath};

/// What an export wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyExport {
    /// The directory.
    pub path: PathBuf,
    /// LeRobot's architecture name.
    pub kind: &'static str,
    /// Tensors in its `model.safetensors`.
    pub tensors: usize,
}

/// Writes the LeRobot policy of `source` to `out` in LeRobot's layout.
pub fn export_lerobot_policy(source: &Path, out: &OutputPath<'_>) -> anyhow::Result<PolicyExport> {
    let plan = out.check(
        OutputKind::LeRobotPolicy,
        &[Input {
            flag: "--policy",
            path: source,
        }],
    )?;
    let device = DispatchDevice::Flex(FlexDevice);
    let policy = load_lerobot_policy::<Dispatch>(source, &device)?;
    let tensors = write_lerobot_policy(&policy, source, &plan.path)?;
    Ok(PolicyExport {
        path: plan.path,
        kind: policy.kind(),
        tensors,
    })
}
