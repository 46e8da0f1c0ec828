//! Temporary outputs: names that say which process writes them, and the
//! removal of those whose process died (a `kill -9`, the OOM killer, a
//! crash) before it could remove them itself.
//!
//! A temporary output is `.NAME.OWNER-PID-RANDOM.tmp` beside its final
//! path, where OWNER is a hash of this machine's boot id and this process's
//! PID namespace: two processes with the same OWNER see the same PIDs, so
//! one can tell whether the other is still alive. The first time a process
//! writes into a directory it removes the temporary files there that carry
//! its OWNER and the PID of a process that no longer exists. Files of a
//! live process, of another machine or container sharing the directory,
//! or from before a reboot are never touched: their writer cannot be known
//! to be dead.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use warpline_engine::shard::stable_hash;

/// Directories remembered as swept; beyond this, new directories are not
/// swept (a tree of millions of directories must not grow memory).
const REMEMBERED: usize = 1 << 20;

/// This machine's boot and this process's PID namespace, as 16 hex digits;
/// `None` where either cannot be read (then nothing is ever swept).
fn owner() -> Option<&'static str> {
    static OWNER: OnceLock<Option<String>> = OnceLock::new();
    OWNER
        .get_or_init(|| {
            let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
            let namespace = std::fs::read_link("/proc/self/ns/pid").ok()?;
            // The shards' hash: stable across builds and Rust versions
            // (std's hasher is not), so every warpline version names its
            // files alike.
            let text = format!("{}\n{}", boot.trim(), namespace.display());
            Some(format!("{:016x}", stable_hash(&text)))
        })
        .as_deref()
}

/// The temporary name a process `pid` writes `path` under, in the same
/// directory.
pub fn temporary_name(path: &Path, pid: u32) -> PathBuf {
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(
        ".{file_name}.{}-{pid}-{:08x}.tmp",
        owner().unwrap_or("unknown"),
        fastrand::u32(..)
    ))
}

/// The PID in a temporary name this machine and namespace made, or `None`
/// for any other file (GDAL's side files such as `.tmp.ovr.tmp` included).
fn writer(name: &str, owner: &str) -> Option<u32> {
    let marker = format!(".{owner}-");
    let rest = &name[name.rfind(&marker)? + marker.len()..];
    let (pid, rest) = rest.split_once('-')?;
    let (random, suffix) = rest.split_at_checked(8)?;
    let wellformed = name.starts_with('.')
        && random.bytes().all(|b| b.is_ascii_hexdigit())
        // `.tmp`, a side file after it (`.tmp.aux.xml`), or a world file
        // GDAL named after the temporary stem.
        && (suffix.starts_with(".tmp") || matches!(suffix, ".tfw" | ".wld"));
    wellformed.then(|| pid.parse().ok()).flatten()
}

/// Whether a process with this PID exists (in this namespace); a PID that
/// cannot be asked about counts as alive.
fn alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return true;
    };
    !matches!(
        rustix::process::test_kill_process(pid),
        Err(rustix::io::Errno::SRCH)
    )
}

/// Whether `name` is a temporary name (or a name that starts with one)
/// that a process of this machine and namespace made, and that process has
/// died.
pub(crate) fn left_by_the_dead(name: &str) -> bool {
    let Some(owner) = owner() else {
        return false;
    };
    writer(name, owner).is_some_and(|pid| pid != std::process::id() && !alive(pid))
}

/// Removes, once per directory and process, the temporary outputs of
/// processes that died.
#[derive(Default)]
pub(crate) struct Sweeper {
    swept: Mutex<HashSet<u64>>,
}

impl std::fmt::Debug for Sweeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let swept = self.swept.lock().map(|s| s.len()).unwrap_or(0);
        write!(f, "Sweeper {{ directories swept: {swept} }}")
    }
}

impl Sweeper {
    /// Sweeps `dir` unless this sweeper has done so already.
    pub(crate) fn once(&self, dir: &Path) {
        let Some(owner) = owner() else { return };
        let mut key = std::hash::DefaultHasher::new();
        dir.hash(&mut key);
        {
            // A poisoned set only means a sweep panicked; its data is a set.
            let mut swept = self.swept.lock().unwrap_or_else(|e| e.into_inner());
            if swept.len() >= REMEMBERED || !swept.insert(key.finish()) {
                return;
            }
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let me = std::process::id();
        let mut removed = 0usize;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|n| writer(n, owner)) else {
                continue;
            };
            if pid == me || alive(pid) {
                continue;
            }
            match std::fs::remove_file(entry.path()) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!(
                    "cannot remove {}, left by process {pid} that died: {e}",
                    entry.path().display()
                ),
            }
        }
        if removed > 0 {
            tracing::info!(
                "removed {removed} temporary file(s) in {} left by processes that died",
                dir.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_machine_s_temporary_names_are_read() {
        let owner = "0123456789abcdef";
        let made = format!(".a.tif.{owner}-4242-00c0ffee.tmp");
        assert_eq!(writer(&made, owner), Some(4242));
        // GDAL's side file of that temporary output.
        assert_eq!(writer(&format!("{made}.ovr.tmp"), owner), Some(4242));
        // Another machine or namespace; the old format; not temporary.
        let not_ours = [
            ".a.tif.fedcba9876543210-4242-00c0ffee.tmp".to_owned(),
            ".a.tif.4242-00c0ffee.tmp".to_owned(),
            format!("a.tif.{owner}-4242-00c0ffee.tmp"),
            format!(".a.tif.{owner}-4242-00c0ffee.tif"),
            format!(".a.tif.{owner}-x-00c0ffee.tmp"),
            format!(".a.tif.{owner}-4242-00c0ffzz.tmp"),
            format!(".a.tif.{owner}-4242-00c0.tmp"),
        ];
        for name in not_ours {
            assert_eq!(writer(&name, owner), None, "{name}");
        }
    }

    #[test]
    fn a_temporary_name_is_hidden_beside_its_output_and_read_back() {
        let name = temporary_name(Path::new("/out/tiles/a.tif"), 4242);
        assert_eq!(name.parent(), Some(Path::new("/out/tiles")));
        let file = name.file_name().and_then(|n| n.to_str()).unwrap_or("");
        assert!(file.starts_with(".a.tif."), "{file}");
        #[cfg(target_os = "linux")]
        assert_eq!(writer(file, owner().unwrap()), Some(4242));
    }

    #[test]
    fn this_process_is_alive_and_a_reaped_child_is_not() {
        assert!(alive(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!alive(pid));
    }
}
