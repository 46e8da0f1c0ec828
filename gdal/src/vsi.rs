//! A GDAL virtual file system, `/vsiwarpline/`, whose reads are warpline's
//! own: each file is a [`RangeRead`] (fetch's HTTP client asking for byte
//! ranges), so GDAL reads only the blocks a warp needs from a large remote
//! COG, and never uses its own networking.
//!
//! A file is registered for as long as its [`RemoteFile`] lives (the
//! raster holds it, after its dataset), under `/vsiwarpline/N/NAME`: N is
//! a number of this process, NAME the input's safe file name (never a name
//! that reaches the file system or the network). Nothing else exists in it:
//! a sibling GDAL looks for (`.ovr`, `.msk`, `.aux.xml`) is not there.
//!
//! Each open file has its own block cache (`blocks.rs`: `BLOCK`-byte
//! blocks, [`CACHE_BYTES`] per open file), so GDAL's many small reads of a
//! TIFF's directories become few range requests; the cache is what the
//! item holds, and what fetch charges to the budget. The file system says
//! it reads many ranges at once (`read_multi_range`), so GDAL's TIFF reader
//! asks for all the tiles a read needs together, as it does on `/vsis3/`:
//! adjacent ones are one request.
//!
//! Soundness: every callback catches panics (none crosses into C), checks
//! its pointers, and reports failure the way GDAL's C API expects (-1,
//! NULL, or fewer items read). The handle GDAL passes back is the
//! `Box<Handle>` `open` made, freed once by `close`.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};

use gdal_sys as sys;

/// The prefix of the file system.
const PREFIX: &str = "/vsiwarpline/";

/// The cache's block (GDAL's `/vsicurl/` chunk): a read outside
/// `read_multi_range` asks for whole blocks, consecutive missing ones in
/// one request. Larger blocks read more than a window needs (on the 1 GB
/// COG of docs/performance.md, before `read_multi_range`: 64 KiB 2% more than
/// 16 KiB, 256 KiB 10% more).
const BLOCK: usize = 16 << 10;

/// What the cache keeps of one open file, in `BLOCK`s: what fetch
/// charges.
pub const CACHE_BYTES: u64 = 16 << 20;

pub use crate::range::RangeRead;

type Files = Mutex<HashMap<String, Arc<dyn RangeRead>>>;

/// The files registered, by the name after the prefix.
fn files() -> &'static Files {
    static FILES: std::sync::OnceLock<Files> = std::sync::OnceLock::new();
    FILES.get_or_init(Default::default)
}

fn lookup(name: &str) -> Option<Arc<dyn RangeRead>> {
    files()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(name)
        .cloned()
}

/// A file in `/vsiwarpline/`, there while this lives.
pub struct RemoteFile {
    name: String,
    path: String,
    file: Arc<dyn RangeRead>,
}

impl std::fmt::Debug for RemoteFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteFile")
            .field("path", &self.path)
            .finish()
    }
}

impl RemoteFile {
    /// Registers `file` under the (already safe) `file_name`.
    pub fn new(file_name: &str, file: Arc<dyn RangeRead>) -> Self {
        install();
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!("{}/{file_name}", NEXT.fetch_add(1, Ordering::Relaxed));
        let path = format!("{PREFIX}{name}");
        files()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.clone(), Arc::clone(&file));
        RemoteFile { name, path, file }
    }

    /// Why a read failed, if one did since the last call (a warp then
    /// fails with this, not with GDAL's "cannot read tile"); reads work
    /// again after it.
    pub fn take_failure(&self) -> Option<String> {
        self.file.take_failure()
    }

    /// The path GDAL opens.
    pub fn path(&self) -> &str {
        &self.path
    }
}

impl Drop for RemoteFile {
    fn drop(&mut self) {
        files()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.name);
    }
}

/// An open file: what `open` hands GDAL.
struct Handle {
    file: Arc<dyn RangeRead>,
    pos: u64,
    eof: bool,
    blocks: super::blocks::Blocks,
}

/// The name after the prefix, if `name` is a valid C string under it.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string alive for the call.
unsafe fn name_of<'a>(name: *const c_char) -> Option<&'a str> {
    if name.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated, by the caller's contract.
    let text = unsafe { CStr::from_ptr(name) }.to_str().ok()?;
    Some(text.strip_prefix(PREFIX).unwrap_or(text))
}

/// Runs a callback's body; a panic becomes `failed`.
fn guarded<T>(failed: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(failed)
}

unsafe extern "C" fn stat(
    _user: *mut c_void,
    name: *const c_char,
    buf: *mut sys::VSIStatBufL,
    _flags: c_int,
) -> c_int {
    guarded(-1, || {
        // SAFETY: GDAL passes a NUL-terminated file name.
        let Some(file) = unsafe { name_of(name) }.and_then(lookup) else {
            return -1;
        };
        if buf.is_null() {
            return -1;
        }
        // SAFETY: GDAL's VSIStatBufL is the C library's `struct stat64`
        // (opaque in the bindings): `buf` points to one, which we zero and
        // fill with a regular file's mode and size.
        unsafe {
            let st = buf.cast::<libc::stat64>();
            std::ptr::write_bytes(st, 0, 1);
            (*st).st_mode = libc::S_IFREG | 0o444;
            (*st).st_size = i64::try_from(file.size()).unwrap_or(i64::MAX);
        }
        0
    })
}

unsafe extern "C" fn open(
    _user: *mut c_void,
    name: *const c_char,
    access: *const c_char,
) -> *mut c_void {
    guarded(std::ptr::null_mut(), || {
        // SAFETY: GDAL passes NUL-terminated strings (or NULL).
        let reading = !access.is_null()
            && unsafe { CStr::from_ptr(access) }
                .to_bytes()
                .iter()
                .all(|b| matches!(b, b'r' | b'b'));
        // SAFETY: as above.
        let file = unsafe { name_of(name) }.and_then(lookup);
        match file {
            Some(file) if reading => Box::into_raw(Box::new(Handle {
                file,
                pos: 0,
                eof: false,
                blocks: super::blocks::Blocks::new(BLOCK, CACHE_BYTES),
            }))
            .cast(),
            _ => std::ptr::null_mut(),
        }
    })
}

/// The handle behind GDAL's pointer.
///
/// # Safety
/// `h` is NULL or a pointer `open` returned and `close` has not freed;
/// GDAL uses one handle from one thread at a time.
unsafe fn handle<'a>(h: *mut c_void) -> Option<&'a mut Handle> {
    // SAFETY: by the caller's contract, a live `Box<Handle>` or NULL.
    unsafe { h.cast::<Handle>().as_mut() }
}

unsafe extern "C" fn tell(h: *mut c_void) -> sys::vsi_l_offset {
    // SAFETY: GDAL passes the handle `open` made.
    guarded(0, || unsafe { handle(h) }.map_or(0, |h| h.pos))
}

unsafe extern "C" fn seek(h: *mut c_void, offset: sys::vsi_l_offset, whence: c_int) -> c_int {
    guarded(-1, || {
        // SAFETY: GDAL passes the handle `open` made.
        let Some(h) = (unsafe { handle(h) }) else {
            return -1;
        };
        let to = match whence {
            libc::SEEK_SET => Some(offset),
            libc::SEEK_CUR => h.pos.checked_add(offset),
            libc::SEEK_END => h.file.size().checked_add(offset),
            _ => None,
        };
        match to {
            Some(to) => {
                h.pos = to;
                h.eof = false;
                0
            }
            None => -1,
        }
    })
}

unsafe extern "C" fn read(h: *mut c_void, buf: *mut c_void, size: usize, count: usize) -> usize {
    guarded(0, || {
        // SAFETY: GDAL passes the handle `open` made.
        let Some(h) = (unsafe { handle(h) }) else {
            return 0;
        };
        let Some(want) = size.checked_mul(count).filter(|w| *w > 0) else {
            return 0;
        };
        if buf.is_null() {
            return 0;
        }
        // SAFETY: GDAL's buffer has room for `size * count` bytes.
        let out = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), want) };
        let left = h.file.size().saturating_sub(h.pos);
        let n = want.min(usize::try_from(left).unwrap_or(usize::MAX));
        let got = match h.blocks.read(&*h.file, h.pos, &mut out[..n]) {
            Ok(got) => got,
            Err(message) => {
                say_failure(&message);
                0
            }
        };
        h.pos += got as u64;
        if got < want {
            h.eof = true;
        }
        got / size
    })
}

unsafe extern "C" fn read_multi_range(
    h: *mut c_void,
    count: c_int,
    data: *mut *mut c_void,
    offsets: *const sys::vsi_l_offset,
    sizes: *const usize,
) -> c_int {
    guarded(-1, || {
        // SAFETY: GDAL passes the handle `open` made.
        let Some(h) = (unsafe { handle(h) }) else {
            return -1;
        };
        let n = usize::try_from(count).unwrap_or(0);
        if n == 0 || data.is_null() || offsets.is_null() || sizes.is_null() {
            return -1;
        }
        // SAFETY: GDAL passes `count` buffers, offsets and sizes.
        let (data, offsets, sizes) = unsafe {
            (
                std::slice::from_raw_parts(data, n),
                std::slice::from_raw_parts(offsets, n),
                std::slice::from_raw_parts(sizes, n),
            )
        };
        // A range past the end (a corrupt file's tile offsets) fails here:
        // nothing is allocated or asked for it.
        let size = h.file.size();
        let ends: Option<Vec<u64>> = (0..n)
            .map(|i| {
                offsets[i]
                    .checked_add(sizes[i] as u64)
                    .filter(|e| *e <= size)
            })
            .collect();
        let Some(ends) = ends else {
            say_failure(&format!("a range past the end of the file ({size} bytes)"));
            return -1;
        };
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&i| offsets[i]);
        // Ranges that touch or overlap are one request.
        let mut groups: Vec<(u64, u64, Vec<usize>)> = Vec::new();
        for i in order {
            let (start, end) = (offsets[i], ends[i]);
            match groups.last_mut() {
                Some((_, last, members)) if start <= *last => {
                    *last = (*last).max(end);
                    members.push(i);
                }
                _ => groups.push((start, end, vec![i])),
            }
        }
        for (start, end, members) in groups {
            let mut buf = vec![0; (end - start) as usize];
            match h.file.read_at(start, &mut buf) {
                Ok(got) if got == buf.len() => {}
                Ok(got) => {
                    say_failure(&format!("{got} bytes of {} at {start}", buf.len()));
                    return -1;
                }
                Err(message) => {
                    say_failure(&message);
                    return -1;
                }
            }
            for i in members {
                if data[i].is_null() {
                    return -1;
                }
                let from = (offsets[i] - start) as usize;
                // SAFETY: GDAL's buffer `i` has room for `sizes[i]` bytes.
                let out = unsafe { std::slice::from_raw_parts_mut(data[i].cast::<u8>(), sizes[i]) };
                out.copy_from_slice(&buf[from..from + sizes[i]]);
            }
        }
        0
    })
}

/// Says `message` as a GDAL I/O failure on this thread (GDAL's own error
/// then follows it).
fn say_failure(message: &str) {
    let Ok(text) = std::ffi::CString::new(message.replace('\0', " ")) else {
        return;
    };
    // SAFETY: a constant format and one string argument, alive for the call.
    unsafe { sys::CPLError(sys::CPLErr::CE_Failure, 3, c"%s".as_ptr(), text.as_ptr()) };
}

unsafe extern "C" fn eof(h: *mut c_void) -> c_int {
    // SAFETY: GDAL passes the handle `open` made.
    guarded(1, || unsafe { handle(h) }.map_or(1, |h| c_int::from(h.eof)))
}

unsafe extern "C" fn close(h: *mut c_void) -> c_int {
    guarded(-1, || {
        if h.is_null() {
            return -1;
        }
        // SAFETY: the `Box<Handle>` `open` made; GDAL closes it once.
        drop(unsafe { Box::from_raw(h.cast::<Handle>()) });
        0
    })
}

/// Installs the file system in GDAL, once per process. The fetch stage
/// calls it when the pipeline compiles (`read = "window"`), so that no GDAL
/// call is made later on the async runtime: [`RemoteFile::new`], which
/// fetch calls on a tokio worker, then finds it done (an atomic check).
pub fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        super::init();
        // GDAL allocates a zeroed struct (every callback NULL, so
        // unsupported operations fail); we fill ours and hand it to
        // VSIInstallPluginHandler, which keeps its own copy. Ours is never
        // freed (once per process), so it outlives GDAL's use either way.
        // SAFETY: `cb` is checked non-null before it is written through.
        unsafe {
            let cb = sys::VSIAllocFilesystemPluginCallbacksStruct();
            if cb.is_null() {
                tracing::error!("GDAL could not allocate the /vsiwarpline/ callbacks");
                return;
            }
            (*cb).stat = Some(stat);
            (*cb).open = Some(open);
            (*cb).tell = Some(tell);
            (*cb).seek = Some(seek);
            (*cb).read = Some(read);
            (*cb).read_multi_range = Some(read_multi_range);
            (*cb).eof = Some(eof);
            (*cb).close = Some(close);
            // Our own cache (`Handle::blocks`): GDAL's would hide
            // `read_multi_range` behind reads of one block run at a time.
            (*cb).nBufferSize = 0;
            (*cb).nCacheSize = 0;
            let prefix = c"/vsiwarpline/";
            if sys::VSIInstallPluginHandler(prefix.as_ptr(), cb) != 0 {
                tracing::error!("GDAL refused the /vsiwarpline/ file system");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes in memory, read by range; counts its reads; panics when told.
    struct Memory {
        bytes: Vec<u8>,
        reads: AtomicU64,
        panics: bool,
    }

    impl RangeRead for Memory {
        fn size(&self) -> u64 {
            self.bytes.len() as u64
        }

        fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, String> {
            assert!(!self.panics, "a reader that panics");
            self.reads.fetch_add(1, Ordering::Relaxed);
            Ok(crate::range::read_slice_at(&self.bytes, offset, buf))
        }

        fn take_failure(&self) -> Option<String> {
            None
        }
    }

    /// A small GTiff's bytes.
    fn tiff() -> Vec<u8> {
        crate::samples::sample_tiles(1, 64).unwrap().remove(0).bytes
    }

    fn open(path: &str) -> gdal::errors::Result<gdal::Dataset> {
        gdal::Dataset::open_ex(
            path,
            gdal::DatasetOptions {
                allowed_drivers: Some(&["GTiff"]),
                ..Default::default()
            },
        )
    }

    #[test]
    fn gdal_reads_a_registered_file_by_ranges_and_nothing_else_is_there() {
        let bytes = tiff();
        let file = Arc::new(Memory {
            bytes: bytes.clone(),
            reads: AtomicU64::new(0),
            panics: false,
        });
        let remote = RemoteFile::new("tile.tif", Arc::clone(&file) as Arc<dyn RangeRead>);
        let ds = open(remote.path()).unwrap();
        let band = ds.rasterband(1).unwrap();
        let (w, h) = ds.raster_size();
        let ours = band.read_as::<u8>((0, 0), (w, h), (w, h), None).unwrap();
        assert!(file.reads.load(Ordering::Relaxed) > 0);
        let mut mem = crate::files::MemDir::new();
        let same = open(&mem.add("tile.tif", bytes).unwrap()).unwrap();
        let theirs = same.rasterband(1).unwrap();
        let theirs = theirs.read_as::<u8>((0, 0), (w, h), (w, h), None).unwrap();
        assert_eq!(ours.data(), theirs.data());
        // A sibling, another name, or the file once dropped: not there.
        let path = remote.path().to_owned();
        assert!(open(&format!("{path}.ovr")).is_err());
        assert!(open("/vsiwarpline/999999/tile.tif").is_err());
        drop(ds);
        drop(remote);
        assert!(open(&path).is_err());
    }

    #[test]
    fn a_reader_that_panics_is_a_failed_read_not_an_abort() {
        let file = Arc::new(Memory {
            bytes: tiff(),
            reads: AtomicU64::new(0),
            panics: true,
        });
        let remote = RemoteFile::new("tile.tif", file);
        assert!(open(remote.path()).is_err());
    }

    /// A multi-range read with a range past the end of the file fails
    /// without asking the reader for anything; one within it is read.
    #[test]
    fn a_multi_range_read_past_the_end_fails_before_reading() {
        let file = Arc::new(Memory {
            bytes: (0..100u8).collect(),
            reads: AtomicU64::new(0),
            panics: false,
        });
        let remote = RemoteFile::new("r.bin", Arc::clone(&file) as Arc<dyn RangeRead>);
        let path = std::ffi::CString::new(remote.path()).unwrap();
        // SAFETY: a valid path and mode; the handle is closed below.
        let fp = unsafe { sys::VSIFOpenL(path.as_ptr(), c"rb".as_ptr()) };
        assert!(!fp.is_null());
        let mut a = [0u8; 10];
        let mut b = [0u8; 10];
        let mut data = [a.as_mut_ptr().cast::<c_void>(), b.as_mut_ptr().cast()];
        let sizes = [10usize, 10];
        let read = |offsets: [sys::vsi_l_offset; 2], data: &mut [*mut c_void; 2]| {
            // SAFETY: two buffers of the two sizes, alive for the call.
            unsafe {
                sys::VSIFReadMultiRangeL(2, data.as_mut_ptr(), offsets.as_ptr(), sizes.as_ptr(), fp)
            }
        };
        assert_eq!(read([0, 95], &mut data), -1);
        assert_eq!(file.reads.load(Ordering::Relaxed), 0, "nothing asked for");
        assert_eq!(read([0, 90], &mut data), 0);
        assert_eq!((a[9], b[0], b[9]), (9, 90, 99));
        // SAFETY: the handle opened above, closed once.
        unsafe { sys::VSIFCloseL(fp) };
    }
}
