//! One writer per directory: an advisory lock (`flock`) on `imago.lock` inside a replay
//! or run directory, held for the life of the process that writes there.
//!
//! The kernel releases the lock when its holder exits, however it exits (a SIGKILL
//! included), so a crash never leaves a directory locked; the file itself stays and
//! says who held it last. Readers take no lock: the replay format is append-only and
//! its manifest is replaced atomically, so reading beside a writer is safe.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// The lock file's name inside a locked directory.
pub const LOCK_FILE: &str = "imago.lock";

/// Who holds (or last held) a directory's lock, as written in its lock file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockHolder {
    /// Process id.
    pub pid: u32,
    /// Host name.
    pub host: String,
    /// What the holder is doing there (`imago daemon`, `imago collect`, ...).
    pub purpose: String,
    /// Seconds since the Unix epoch when the lock was taken.
    pub since_unix: u64,
}

impl std::fmt::Display for LockHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "process {} on host {} ({}, since Unix time {})",
            self.pid, self.host, self.purpose, self.since_unix
        )
    }
}

/// An exclusive lock on a directory, released when dropped or when the process ends.
#[derive(Debug)]
pub struct DirLock {
    // The open file holds the lock; it is never read after acquisition.
    _file: File,
    dir: PathBuf,
}

impl DirLock {
    /// Takes the lock of `dir` (created if needed) for `purpose`, without waiting: a
    /// directory another process (or another writer in this one) holds is an error
    /// naming the holder.
    pub fn acquire(dir: &Path, purpose: &str) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create directory {}", dir.display()))?;
        let path = dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("cannot open the lock file {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let holder = read_holder(&mut file)
                    .map(|h| h.to_string())
                    .unwrap_or_else(|| "another process (its lock file is unreadable)".into());
                anyhow::bail!(
                    "{} is in use by {holder}; one writer at a time: stop that process or choose another directory",
                    dir.display()
                );
            }
            Err(TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("cannot lock {}", path.display()));
            }
        }
        let holder = LockHolder {
            pid: std::process::id(),
            host: host_name(),
            purpose: purpose.to_string(),
            since_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        };
        let json = serde_json::to_vec(&holder)?;
        file.set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)).map(|_| ()))
            .and_then(|()| file.write_all(&json))
            .with_context(|| format!("cannot write the lock file {}", path.display()))?;
        Ok(Self {
            _file: file,
            dir: dir.to_path_buf(),
        })
    }

    /// The locked directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Who last held the lock of `dir`, if its lock file says.
pub fn last_holder(dir: &Path) -> Option<LockHolder> {
    let mut file = File::open(dir.join(LOCK_FILE)).ok()?;
    read_holder(&mut file)
}

fn read_holder(file: &mut File) -> Option<LockHolder> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.read_to_string(&mut text).ok()?;
    serde_json::from_str(&text).ok()
}

/// This machine's host name (Linux's `/proc`, else the `HOSTNAME` variable).
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_writer_is_refused_with_the_holder_and_admitted_after_release() {
        let dir = tempfile::tempdir().unwrap();
        let first = DirLock::acquire(dir.path(), "imago daemon").unwrap();
        let error = DirLock::acquire(dir.path(), "imago collect")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(&format!("process {}", std::process::id()))
                && error.contains("imago daemon")
                && error.contains("one writer at a time"),
            "{error}"
        );
        assert_eq!(last_holder(dir.path()).unwrap().purpose, "imago daemon");
        drop(first);
        let second = DirLock::acquire(dir.path(), "imago collect").unwrap();
        assert_eq!(second.dir(), dir.path());
        assert_eq!(last_holder(dir.path()).unwrap().purpose, "imago collect");
    }
}
