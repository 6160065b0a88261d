//! `imago replay check` and `imago replay repair`.

use std::path::PathBuf;

use clap::Subcommand;
use imago_runtime::store::replay::{check_replay, repair_replay};

/// What to do with a replay.
#[derive(Debug, Subcommand)]
pub enum ReplayCommand {
    /// Read every segment and print, per segment, its records and its whole and
    /// damaged episodes, then every damaged stretch and every episode left out with
    /// the reason. Exits non-zero when anything is damaged.
    Check {
        /// Replay directory.
        dir: PathBuf,
    },
    /// Write a clean copy of every whole episode of a damaged replay into a new replay.
    Repair {
        /// The damaged replay directory (only read).
        dir: PathBuf,
        /// The new replay directory.
        #[arg(long)]
        out: PathBuf,
        /// Replace what --out holds (it is kept until the copy is complete).
        #[arg(long)]
        force: bool,
    },
}

/// Checks or repairs the replay.
pub fn run(command: ReplayCommand) -> anyhow::Result<()> {
    match command {
        ReplayCommand::Check { dir } => {
            let (contents, table) = check_replay(&dir)?;
            print!("{table}");
            anyhow::ensure!(
                !contents.is_damaged(),
                "replay {} is damaged: {} episodes left out, {} damaged stretches; `imago replay repair {} --out NEW` writes a clean copy",
                dir.display(),
                contents.damaged.len(),
                contents.corruptions.len(),
                dir.display()
            );
        }
        ReplayCommand::Repair { dir, out, force } => {
            let report = repair_replay(&dir, &out, force)?;
            println!(
                "copied {} whole episodes into {}; left out {} damaged and {} unfinished",
                report.episodes,
                out.display(),
                report.damaged,
                report.unfinished
            );
        }
    }
    Ok(())
}
