//! Crash-safe file and directory replacement: write beside, sync, rename.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// A sibling path of `target` that is hidden and unique to this process and call.
pub fn sibling_temp(target: &Path, tag: &str) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    target.with_file_name(format!(".{name}.{tag}-{}-{nanos}", std::process::id()))
}

/// Writes `bytes` to `path` atomically: readers see the old file or the new one, never a mix.
pub fn write_file(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let temp = sibling_temp(path, "tmp");
    let mut file =
        File::create(&temp).with_context(|| format!("cannot create {}", temp.display()))?;
    file.write_all(bytes)
        .and_then(|_| file.sync_all())
        .with_context(|| format!("cannot write {}", temp.display()))?;
    std::fs::rename(&temp, path)
        .with_context(|| format!("cannot move {} into place", path.display()))?;
    sync_parent(path);
    Ok(())
}

/// Moves the fully written directory `staged` to `target`, replacing whatever is there
/// (a directory or a file): the old one is moved aside first, and deleted only once the
/// new one is in place.
pub fn replace_dir(staged: &Path, target: &Path) -> anyhow::Result<()> {
    let old = sibling_temp(target, "old");
    let had_old = target.symlink_metadata().is_ok();
    if had_old {
        std::fs::rename(target, &old)
            .with_context(|| format!("cannot move aside {}", target.display()))?;
    }
    if let Err(e) = std::fs::rename(staged, target) {
        if had_old {
            let _ = std::fs::rename(&old, target);
        }
        return Err(e).with_context(|| format!("cannot move {} into place", target.display()));
    }
    sync_parent(target);
    if had_old {
        let removed = if old.is_dir() {
            std::fs::remove_dir_all(&old)
        } else {
            std::fs::remove_file(&old)
        };
        removed.with_context(|| format!("cannot remove the replaced {}", old.display()))?;
    }
    Ok(())
}

/// Best-effort fsync of a path's parent directory, so a rename survives power loss.
fn sync_parent(path: &Path) {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty())
        && let Ok(dir) = File::open(parent)
    {
        let _ = dir.sync_all();
    }
}
