//! Outputs never destroy inputs: every command that writes checks its output path
//! against its inputs and against what the path holds now, before any work.
//!
//! Rules (docs/runtime.md, "What a command may write over"):
//! - an output that lies inside one of the command's inputs, or contains one, is
//!   refused: writing there would bury or replace the input;
//! - an output that *is* one of the inputs is refused, unless the input is of the same
//!   kind and `--force` is given (`train --init C --out C` updates `C` in place: the new
//!   checkpoint is written beside it and swapped in whole);
//! - an output path that holds something other than what the command writes (a
//!   checkpoint of another kind, a replay where a checkpoint goes, a plain file, a
//!   directory of other files) is refused unless `--force` is given; even then nothing
//!   is deleted before the new output is complete (write beside, then swap);
//! - an output that holds what the command writes is continued (a replay gets more
//!   episodes) or replaced whole (a previous demo run), and the command says so;
//! - a `--out` that already holds a checkpoint of the kind a command writes
//!   ([`OutputPath::check`]: train, fine-tune, export policy) is refused unless
//!   `--force` is given, as LeRobot refuses an existing output directory: a second
//!   run into the same path is more often a slip than a wish to discard the first.

use std::path::{Component, Path, PathBuf};

use crate::store::checkpoint::read_meta;

/// The marker file of a run directory (`imago demo --run-dir`, `imago daemon`).
pub const RUN_MARKER: &str = "imago-run.json";

/// What a path holds now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holding {
    /// Nothing: the path does not exist.
    Nothing,
    /// An empty directory.
    EmptyDirectory,
    /// A checkpoint of this kind (`vla-policy`, `world-model`) and version.
    Checkpoint {
        /// Its kind.
        kind: String,
        /// Its version.
        version: u64,
    },
    /// A checkpoint whose `meta.json` cannot be read.
    DamagedCheckpoint,
    /// A replay directory.
    Replay,
    /// A LeRobot dataset (a folder with `meta/info.json`).
    LeRobotDataset,
    /// A LeRobot policy directory (`config.json` and `model.safetensors`).
    LeRobotPolicy,
    /// A run directory of this kind (`demo`, `daemon`).
    RunDirectory(String),
    /// A plain file (or anything that is not a directory).
    File,
    /// A directory holding other things.
    OtherDirectory,
}

impl std::fmt::Display for Holding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Nothing => write!(f, "nothing"),
            Self::EmptyDirectory => write!(f, "an empty directory"),
            Self::Checkpoint { kind, version } => {
                write!(f, "a `{kind}` checkpoint (version {version})")
            }
            Self::DamagedCheckpoint => write!(f, "a checkpoint whose meta.json cannot be read"),
            Self::Replay => write!(f, "a replay"),
            Self::LeRobotDataset => write!(f, "a LeRobot dataset"),
            Self::LeRobotPolicy => write!(f, "a LeRobot policy"),
            Self::RunDirectory(kind) => write!(f, "an `imago {kind}` run directory"),
            Self::File => write!(f, "a file"),
            Self::OtherDirectory => write!(f, "a directory of other files"),
        }
    }
}

/// What a command writes at its output path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputKind {
    /// A checkpoint of this kind.
    Checkpoint(&'static str),
    /// A policy checkpoint, of any architecture.
    PolicyCheckpoint,
    /// A replay (continued if one is there).
    Replay,
    /// A LeRobot dataset (`imago export lerobot`).
    LeRobotDataset,
    /// A LeRobot policy directory (`imago export policy`).
    LeRobotPolicy,
    /// A run directory of this kind.
    RunDirectory(&'static str),
}

impl OutputKind {
    fn matches(self, holding: &Holding) -> bool {
        match (self, holding) {
            (Self::Checkpoint(kind), Holding::Checkpoint { kind: found, .. }) => kind == found,
            (Self::PolicyCheckpoint, Holding::Checkpoint { kind: found, .. }) => {
                crate::store::checkpoint::is_policy_kind(found)
            }
            (Self::Replay, Holding::Replay) => true,
            (Self::LeRobotDataset, Holding::LeRobotDataset) => true,
            (Self::LeRobotPolicy, Holding::LeRobotPolicy) => true,
            (Self::RunDirectory(kind), Holding::RunDirectory(found)) => kind == found,
            _ => false,
        }
    }
}

/// What `path` holds now.
pub fn holding(path: &Path) -> Holding {
    let Ok(metadata) = std::fs::metadata(path) else {
        return Holding::Nothing;
    };
    if !metadata.is_dir() {
        return Holding::File;
    }
    match read_meta(path) {
        Ok(meta) => {
            return Holding::Checkpoint {
                kind: meta.kind,
                version: meta.version,
            };
        }
        Err(_) if path.join("meta.json").exists() => return Holding::DamagedCheckpoint,
        Err(_) => {}
    }
    if let Some(kind) = run_kind(path) {
        return Holding::RunDirectory(kind);
    }
    if path.join(crate::store::replay::SEGMENTS).is_dir()
        || path.join(crate::store::replay::MANIFEST).is_file()
    {
        return Holding::Replay;
    }
    if path.join("meta").join("info.json").is_file() {
        return Holding::LeRobotDataset;
    }
    if crate::store::lerobot_policy::is_lerobot_policy_dir(path) {
        return Holding::LeRobotPolicy;
    }
    // A lock file left by an earlier writer holds nothing of value.
    let only_a_lock = std::fs::read_dir(path).is_ok_and(|entries| {
        entries
            .into_iter()
            .all(|e| e.is_ok_and(|e| e.file_name() == crate::store::lock::LOCK_FILE))
    });
    if only_a_lock {
        Holding::EmptyDirectory
    } else {
        Holding::OtherDirectory
    }
}

/// The kind of run directory `path` is: its marker's, or, for run directories made
/// before the marker existed, what its contents show.
fn run_kind(path: &Path) -> Option<String> {
    if let Ok(text) = std::fs::read_to_string(path.join(RUN_MARKER)) {
        return serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v.get("kind")?.as_str().map(String::from))
            .or(Some("unknown".into()));
    }
    if path.join("checkpoints/policy/meta.json").is_file() {
        return Some("daemon".into());
    }
    if path.join("bc-policy/meta.json").is_file() && path.join("replay").is_dir() {
        return Some("demo".into());
    }
    None
}

/// Marks `dir` as a run directory of `kind`.
pub fn mark_run_directory(dir: &Path, kind: &str) -> anyhow::Result<()> {
    let json = serde_json::json!({ "kind": kind, "written_by": "imago" });
    crate::store::atomic::write_file(&dir.join(RUN_MARKER), &serde_json::to_vec_pretty(&json)?)
}

/// Where a command writes, and whether `--force` lets it replace something else.
#[derive(Debug, Clone, Copy)]
pub struct OutputPath<'a> {
    /// The path.
    pub path: &'a Path,
    /// Replace what the path holds even when it is not what the command writes.
    pub force: bool,
}

impl<'a> OutputPath<'a> {
    /// `path`, without `--force`.
    pub fn new(path: &'a Path) -> Self {
        Self { path, force: false }
    }

    /// Checks this output (given as `--out`) against `inputs` (see [`check_output`]);
    /// an output that already holds what the command writes is replaced only under
    /// `--force` ([`Self::announcing_replacement`] says so once it is).
    pub fn check(&self, kind: OutputKind, inputs: &[Input<'_>]) -> anyhow::Result<OutputPlan> {
        let plan = check_output("--out", self.path, kind, inputs, self.force)?;
        anyhow::ensure!(
            !plan.continues() || self.force,
            "--out {} already holds {}; choose another --out, or pass --force to replace it (it is kept until the new one is complete)",
            self.path.display(),
            plan.holding
        );
        Ok(plan)
    }

    /// Runs `write`, the command that writes this output, and once it has succeeded
    /// says on stderr what it replaced there (under `--force`); a command that fails
    /// says nothing of it, having replaced nothing.
    pub fn announcing_replacement<T>(
        &self,
        write: impl FnOnce() -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let before = holding(self.path);
        let written = write()?;
        if !matches!(before, Holding::Nothing | Holding::EmptyDirectory) {
            eprintln!("--out {}: replaced {before}", self.path.display());
        }
        Ok(written)
    }
}

/// An input of a command: its flag and its path.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// The flag or config key it came from (`--replay`).
    pub flag: &'a str,
    /// The path.
    pub path: &'a Path,
}

/// What the output check found, for the command to act on and report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputPlan {
    /// The output path.
    pub path: PathBuf,
    /// What it holds now.
    pub holding: Holding,
    /// It holds something else, replaced under `--force`: write beside, then swap.
    pub forced: bool,
}

impl OutputPlan {
    /// Whether the path already holds what the command writes (a replay to continue,
    /// a checkpoint or run to replace whole).
    pub fn continues(&self) -> bool {
        !self.forced && !matches!(self.holding, Holding::Nothing | Holding::EmptyDirectory)
    }
}

/// Checks that writing `kind` at `out` (given as `flag`) destroys none of `inputs` and
/// nothing it was not asked to replace; see the module documentation.
pub fn check_output(
    flag: &str,
    out: &Path,
    kind: OutputKind,
    inputs: &[Input<'_>],
    force: bool,
) -> anyhow::Result<OutputPlan> {
    let out_abs = resolved(out)?;
    let holding = holding(out);
    for input in inputs {
        let input_abs = resolved(input.path)?;
        let (flag_in, shown_in, shown_out) = (input.flag, input.path.display(), out.display());
        if input_abs == out_abs {
            // Only a checkpoint can be updated in place (written beside, swapped in).
            let in_place = matches!(
                kind,
                OutputKind::Checkpoint(_) | OutputKind::PolicyCheckpoint
            ) && kind.matches(&self::holding(input.path));
            if force && in_place {
                continue;
            }
            anyhow::bail!(
                "{flag} {shown_out} is also {flag_in}: writing it would replace the input{}",
                if in_place {
                    "; pass --force to update it in place (the old one is kept until the new one is complete)"
                } else {
                    ""
                }
            );
        }
        if input_abs.starts_with(&out_abs) {
            anyhow::bail!(
                "{flag} {shown_out} contains {flag_in} {shown_in}: writing there would replace the input; choose another {flag}"
            );
        }
        if out_abs.starts_with(&input_abs) {
            anyhow::bail!(
                "{flag} {shown_out} lies inside {flag_in} {shown_in}: choose an {flag} outside it"
            );
        }
    }
    let fits =
        matches!(holding, Holding::Nothing | Holding::EmptyDirectory) || kind.matches(&holding);
    if !fits && !force {
        let what = match kind {
            OutputKind::Checkpoint(k) => format!("a `{k}` checkpoint"),
            OutputKind::PolicyCheckpoint => "a policy checkpoint".into(),
            OutputKind::Replay => "a replay".into(),
            OutputKind::LeRobotDataset => "a LeRobot dataset".into(),
            OutputKind::LeRobotPolicy => "a LeRobot policy".into(),
            OutputKind::RunDirectory(k) => format!("an `imago {k}` run directory"),
        };
        anyhow::bail!(
            "{flag} {} holds {holding}, not {what}; choose another {flag}, or pass --force to replace it (it is kept until the new output is complete)",
            out.display()
        );
    }
    Ok(OutputPlan {
        path: out.to_path_buf(),
        holding,
        forced: !fits,
    })
}

/// Checks a file output (`--report`, `--rerun`, `--rrd`) before it is written: it must
/// not be a directory, lie inside one of `inputs`, or lie inside a replay, a checkpoint
/// or a run directory (whose files it would replace). An existing plain file elsewhere
/// is replaced, as reports and recordings are.
pub fn check_file_output(flag: &str, path: &Path, inputs: &[Input<'_>]) -> anyhow::Result<()> {
    anyhow::ensure!(
        !path.is_dir(),
        "{flag} {} is a directory; give a file path",
        path.display()
    );
    let target = resolved(path)?;
    for input in inputs {
        let input_abs = resolved(input.path)?;
        anyhow::ensure!(
            !(target == input_abs || target.starts_with(&input_abs)),
            "{flag} {} would overwrite {} {}; choose a path outside it",
            path.display(),
            input.flag,
            input.path.display()
        );
    }
    for ancestor in target.ancestors().skip(1) {
        let found = holding(ancestor);
        if matches!(
            found,
            Holding::Replay
                | Holding::Checkpoint { .. }
                | Holding::DamagedCheckpoint
                | Holding::RunDirectory(_)
        ) {
            anyhow::bail!(
                "{flag} {} lies inside {found} at {}; choose a path outside it",
                path.display(),
                ancestor.display()
            );
        }
    }
    Ok(())
}

/// `path` made absolute with symbolic links resolved as far as it exists, and `.`
/// and `..` folded in the part that does not.
fn resolved(path: &Path) -> anyhow::Result<PathBuf> {
    let absolute = std::path::absolute(path)
        .map_err(|e| anyhow::anyhow!("cannot resolve {}: {e}", path.display()))?;
    let mut existing = absolute.clone();
    let mut rest = Vec::new();
    while !existing.exists() {
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_os_string());
                existing = parent.to_path_buf();
            }
            _ => break,
        }
    }
    let mut out = existing.canonicalize().unwrap_or(existing);
    for part in rest.iter().rev() {
        out.push(part);
    }
    let mut folded = PathBuf::new();
    for component in out.components() {
        match component {
            Component::ParentDir => {
                folded.pop();
            }
            Component::CurDir => {}
            other => folded.push(other),
        }
    }
    Ok(folded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replay_at(dir: &Path) {
        std::fs::create_dir_all(dir.join("segments")).unwrap();
    }

    fn checkpoint_at(dir: &Path, kind: &str) {
        std::fs::create_dir_all(dir).unwrap();
        let meta = serde_json::json!({
            "format": 1, "kind": kind, "config": {}, "version": 3, "parent": null,
            "robot": "reacher2d", "metrics": {}
        });
        std::fs::write(dir.join("meta.json"), meta.to_string()).unwrap();
    }

    #[test]
    fn outputs_that_would_destroy_inputs_or_other_things_are_refused() {
        let root = tempfile::tempdir().unwrap();
        let replay = root.path().join("replay");
        replay_at(&replay);
        let policy = root.path().join("policy");
        checkpoint_at(&policy, "vla-policy");
        let world_model = root.path().join("wm");
        checkpoint_at(&world_model, "world-model");
        let file = root.path().join("notes.txt");
        std::fs::write(&file, "keep me").unwrap();
        let inputs = [
            Input {
                flag: "--replay",
                path: &replay,
            },
            Input {
                flag: "--init",
                path: &policy,
            },
        ];
        let policy_out = OutputKind::PolicyCheckpoint;
        let refused = |out: &Path, force: bool| {
            check_output("--out", out, policy_out, &inputs, force)
                .unwrap_err()
                .to_string()
        };
        // The replay itself, something inside it, and a directory containing it.
        assert!(refused(&replay, true).contains("is also --replay"));
        assert!(refused(&replay.join("segments/x"), true).contains("lies inside --replay"));
        assert!(refused(root.path(), true).contains("contains --replay"));
        // The same kind as an input: only with --force.
        assert!(refused(&policy, false).contains("pass --force"));
        assert!(check_output("--out", &policy, policy_out, &inputs, true).is_ok());
        // Things of another kind: only with --force, which then swaps.
        assert!(refused(&world_model, false).contains("holds a `world-model` checkpoint"));
        assert!(refused(&file, false).contains("holds a file"));
        let plan = check_output("--out", &file, policy_out, &inputs, true).unwrap();
        assert!(plan.forced);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
        // The same kind at --out, not an input: only with --force.
        let out = OutputPath::new(&world_model);
        let kind = OutputKind::Checkpoint("world-model");
        let message = out.check(kind, &[]).unwrap_err().to_string();
        assert!(message.contains("already holds a `world-model` checkpoint (version 3)"));
        assert!(message.contains("pass --force"));
        let plan = OutputPath { force: true, ..out }.check(kind, &[]).unwrap();
        assert!(plan.continues() && !plan.forced);
        // New paths, including ones spelled with `..`, are fine unless they resolve
        // into an input.
        let fresh = root.path().join("new/ckpt");
        let plan = check_output("--out", &fresh, policy_out, &inputs, false).unwrap();
        assert_eq!(plan.holding, Holding::Nothing);
        assert!(!plan.continues());
        let sneaky = root.path().join("new/../replay/segments/y");
        assert!(refused(&sneaky, true).contains("lies inside"));
    }

    #[test]
    fn holdings_are_recognised() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(holding(&root.path().join("absent")), Holding::Nothing);
        assert_eq!(holding(root.path()), Holding::EmptyDirectory);
        let run = root.path().join("run");
        std::fs::create_dir_all(&run).unwrap();
        mark_run_directory(&run, "daemon").unwrap();
        assert_eq!(holding(&run), Holding::RunDirectory("daemon".into()));
        let old_daemon = root.path().join("old");
        checkpoint_at(&old_daemon.join("checkpoints/policy"), "vla-policy");
        assert_eq!(holding(&old_daemon), Holding::RunDirectory("daemon".into()));
        std::fs::write(root.path().join("x"), "").unwrap();
        assert_eq!(holding(root.path()), Holding::OtherDirectory);
    }
}
