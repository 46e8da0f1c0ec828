//! [`RangeRead`]: a file whose bytes are read by range (fetch's range
//! requests), the leaf that the `/vsiwarpline/` file system (`vsi.rs`)
//! and its block cache (`blocks.rs`) both read through.

/// A file whose bytes are read by range.
pub trait RangeRead: Send + Sync {
    /// Its size in bytes.
    fn size(&self) -> u64;
    /// Fills `buf` from `offset` (fewer bytes only at the end of the file);
    /// the error says what failed, naming the input (credentials hidden).
    /// Called on GDAL's thread (a blocking stage's), never an async one.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, String>;
    /// The first failure of a read since this was last called, if any
    /// (after one, every read fails at once until it is taken).
    fn take_failure(&self) -> Option<String>;
}

/// For the tests' in-memory readers: copies the bytes of `bytes` from
/// `offset` into `buf`, as many as fit and are there; how many.
#[cfg(test)]
pub(crate) fn read_slice_at(bytes: &[u8], offset: u64, buf: &mut [u8]) -> usize {
    let from = offset as usize;
    let n = buf.len().min(bytes.len() - from);
    buf[..n].copy_from_slice(&bytes[from..from + n]);
    n
}
