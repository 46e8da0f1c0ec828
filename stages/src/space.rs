//! Telling a full output device from other write failures: a leaf that
//! write and reproject's warp to disk both use. GDAL's last message on a full disk is often only libtiff's "Write
//! error at scanline N" or "IO error writing tag data"; the message that
//! says why ("_tiffWriteProc: No space left on device") came before it, and
//! the COG driver removes what it wrote before it returns. So a write
//! watches every GDAL message of its call, and looks at the free space
//! before its temporary file is removed.

use std::path::Path;

use warpline_engine::StageError;

use warpline_gdal::MessageWatch;

/// What the C library's `strerror` says for ENOSPC and EDQUOT (glibc and
/// musl alike), and GDAL's own free-space check when it creates a GTiff.
const FULL: &[&str] = &[
    "No space left on device",
    "Disk quota exceeded",
    "Free disk space available is",
];

/// Whether `message` says the device is full.
fn says_full(message: &str) -> bool {
    FULL.iter().any(|m| message.contains(m))
}

/// Whether an I/O error is the device being full (ENOSPC, EDQUOT).
pub(crate) fn io_full(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{QuotaExceeded, StorageFull};
    matches!(e.kind(), StorageFull | QuotaExceeded)
}

/// While it lives, GDAL's messages on this thread are watched for one that
/// says the device is full (and forwarded to `tracing` as the process-wide
/// handler does, see `warpline_gdal::init`). Not `Send`: GDAL's handler stack
/// is per thread.
#[derive(Debug)]
pub(crate) struct SpaceWatch(MessageWatch);

impl SpaceWatch {
    pub(crate) fn start() -> Self {
        SpaceWatch(MessageWatch::start(says_full))
    }

    /// Stops watching; whether a message said the device is full.
    pub(crate) fn said_full(self) -> bool {
        self.0.matched()
    }
}

/// The error of a write that failed with `what`. When the device holding
/// `dir` is full (`said_full`: an I/O error or GDAL said so; or less is
/// free than the output's `needed` bytes), the error says so and stops the
/// run, since every later write would fail the same way.
pub(crate) fn failed(
    id: &str,
    dir: &Path,
    needed: u64,
    what: String,
    said_full: bool,
) -> StageError {
    let free = free_bytes(dir);
    let full = said_full || free.is_some_and(|f| f < needed);
    if !full {
        return StageError::permanent(format!("{id}: {what}"));
    }
    let size = |b: u64| format!("{:.1} MiB", b as f64 / f64::from(1 << 20));
    let room = match free {
        Some(f) if said_full => format!("{} free after the write failed", size(f)),
        Some(f) => format!(
            "{} free, less than the output's {} of pixels",
            size(f),
            size(needed)
        ),
        None => "the free space cannot be read".to_owned(),
    };
    StageError::permanent(format!(
        "{id}: no space left on device ({}): {room}; {what}",
        dir.display()
    ))
    .stopping_the_run()
}

/// Bytes this process may still write on the device holding `dir`: the
/// blocks free to everyone, or for root all free blocks (root may use the
/// reserved ones).
fn free_bytes(dir: &Path) -> Option<u64> {
    let st = rustix::fs::statvfs(dir).ok()?;
    let blocks = if rustix::process::geteuid().is_root() {
        st.f_bfree
    } else {
        st.f_bavail
    };
    Some(blocks.saturating_mul(st.f_frsize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_hears_what_gdal_says_on_its_thread() {
        warpline_gdal::init();
        let said = |text: &str| {
            let watch = SpaceWatch::start();
            warpline_gdal::ffi::report_failure(text);
            watch.said_full()
        };
        assert!(said("_tiffWriteProc:No space left on device"));
        assert!(!said("TIFFAppendToStrip:Write error at scanline 0"));
        warpline_gdal::ffi::reset_error();
    }
}
