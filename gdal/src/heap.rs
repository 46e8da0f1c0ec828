//! The C heap under GDAL: glibc's allocator tuned for tile work at
//! start-up, and its free pages given back after a large item. Here
//! because it is `unsafe` (FFI to glibc), and this is the one crate with
//! `unsafe`; `warpline::tune_allocator` re-exports it.

/// Tunes glibc's allocator for tile work. Call it first thing in `main`;
/// the `warpline` binary does (through `warpline::tune_allocator`).
///
/// - The mmap threshold is fixed at 1 MiB (glibc raises it after large
///   frees, up to 32 MiB, after which big buffers come from heaps that
///   fragment and are not returned): buffers of a megabyte and more go back
///   to the system when freed, so the resident size stays close to what the
///   memory budget accounts for.
/// - At most 4 arenas, for the same reason.
/// - The trim threshold is 8 MiB instead of 128 KiB: every tile allocates
///   and frees a few buffers just under 1 MiB, and with the default each
///   free at the top of a heap gave the pages back, to be faulted in and
///   zeroed again for the next tile (about 470 page faults per tile in the
///   raster bench's pipeline; 20 with this). An arena keeps at most 8 MiB
///   free at its top.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only sets glibc's allocator parameters; called
        // before the program allocates much, and it is thread-safe.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
            libc::mallopt(libc::M_ARENA_MAX, 4);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 8 << 20);
        }
    }
}

/// Items whose pixels take at least this many bytes give the C heap's free
/// pages back to the system when decode or reproject is done with them
/// ([`trim_heap_after`]): glibc's own trim threshold (8 MiB, set by
/// [`tune_allocator`]), ten times a normal tile (a 512 px RGB tile
/// is 768 KiB).
pub const TRIM_AFTER: u64 = 8 << 20;

/// Gives the free pages inside glibc's heaps (every arena) back to the
/// system after an item of `bytes` pixels, if it is at least
/// [`TRIM_AFTER`].
///
/// GDAL's blocks, libtiff's strips and the warp's row buffers come from
/// the heap of whichever arena the thread uses, and glibc gives a heap back
/// only from its top: after a large raster, tens of MiB stay resident as
/// free heap, outside any budget. `malloc_trim` walks the free lists and
/// `madvise`s whole free pages away: cheap beside a large item's work, but
/// not after every tile, whose next buffers would fault those pages in
/// again (why [`tune_allocator`] raised the trim threshold). No effect off
/// glibc.
pub fn trim_heap_after(bytes: u64) {
    if bytes < TRIM_AFTER {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> std::os::raw::c_int;
        }
        // SAFETY: glibc's malloc_trim takes each arena's lock and only
        // gives free pages back; it touches no memory in use.
        unsafe { malloc_trim(0) };
    }
}
