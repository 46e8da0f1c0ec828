//! The block cache of one open `/vsiwarpline/` file: GDAL's many small
//! reads (a TIFF's header, its directories, a tile at a time) become one
//! range request per run of consecutive missing blocks. Blocks are dropped
//! first in, first out past the cache's size; a read larger than half the
//! cache bypasses it.

use std::collections::{HashMap, VecDeque};

use crate::range::RangeRead;

/// The cached blocks of one open file.
pub(crate) struct Blocks {
    block: u64,
    capacity: usize,
    held: HashMap<u64, Vec<u8>>,
    order: VecDeque<u64>,
}

impl Blocks {
    /// A cache of `bytes` in blocks of `block` bytes.
    pub(crate) fn new(block: usize, bytes: u64) -> Self {
        let block = block.max(1) as u64;
        Blocks {
            block,
            capacity: usize::try_from(bytes / block).unwrap_or(usize::MAX).max(1),
            held: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Fills `out` from `offset` (fewer bytes only at the end of `file`).
    pub(crate) fn read(
        &mut self,
        file: &dyn RangeRead,
        offset: u64,
        out: &mut [u8],
    ) -> Result<usize, String> {
        let end = (offset + out.len() as u64).min(file.size());
        if offset >= end {
            return Ok(0);
        }
        let want = (end - offset) as usize;
        if want as u64 > self.block * self.capacity as u64 / 2 {
            return file.read_at(offset, &mut out[..want]);
        }
        let (first, last) = (offset / self.block, (end - 1) / self.block);
        // Run by run, each copied out as soon as it is there: loading a
        // run may drop old blocks, never one this read still needs.
        let mut b = first;
        while b <= last {
            let run = b;
            if self.held.contains_key(&b) {
                while b <= last && self.held.contains_key(&b) {
                    if let Some(data) = self.held.get(&b) {
                        self.copy(offset, out, b, data);
                    }
                    b += 1;
                }
                continue;
            }
            while b <= last && !self.held.contains_key(&b) {
                b += 1;
            }
            let bytes = self.load(file, run, b)?;
            for (i, chunk) in bytes.chunks(self.block as usize).enumerate() {
                self.copy(offset, out, run + i as u64, chunk);
            }
            self.keep(run, &bytes);
        }
        Ok(want)
    }

    /// Copies what block `index` (`data`) has of `out`, which starts at
    /// `offset`.
    fn copy(&self, offset: u64, out: &mut [u8], index: u64, data: &[u8]) {
        let start = index * self.block;
        let from = start.max(offset);
        let to = (start + data.len() as u64).min(offset + out.len() as u64);
        if from < to {
            let (a, b) = ((from - offset) as usize, (to - offset) as usize);
            out[a..b].copy_from_slice(&data[(from - start) as usize..(to - start) as usize]);
        }
    }

    /// Reads blocks `first..past` in one request.
    fn load(&self, file: &dyn RangeRead, first: u64, past: u64) -> Result<Vec<u8>, String> {
        let from = first * self.block;
        let to = (past * self.block).min(file.size());
        let mut buf = vec![0; (to - from) as usize];
        let got = file.read_at(from, &mut buf)?;
        if got < buf.len() {
            return Err(format!("{got} bytes of {} at {from}", buf.len()));
        }
        Ok(buf)
    }

    /// Keeps the blocks of `bytes` (from block `first`), dropping the
    /// oldest past the capacity.
    fn keep(&mut self, first: u64, bytes: &[u8]) {
        for (i, chunk) in bytes.chunks(self.block as usize).enumerate() {
            while self.order.len() >= self.capacity {
                if let Some(old) = self.order.pop_front() {
                    self.held.remove(&old);
                }
            }
            self.held.insert(first + i as u64, chunk.to_vec());
            self.order.push_back(first + i as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Bytes 0, 1, 2, ... read by range, each read noted.
    struct Counting {
        bytes: Vec<u8>,
        reads: Mutex<Vec<(u64, usize)>>,
    }

    impl RangeRead for Counting {
        fn size(&self) -> u64 {
            self.bytes.len() as u64
        }

        fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, String> {
            self.reads.lock().unwrap().push((offset, buf.len()));
            Ok(crate::range::read_slice_at(&self.bytes, offset, buf))
        }

        fn take_failure(&self) -> Option<String> {
            None
        }
    }

    #[test]
    fn reads_come_from_whole_blocks_each_missing_run_once() {
        let file = Counting {
            bytes: (0..1000u32).map(|i| i as u8).collect(),
            reads: Mutex::new(Vec::new()),
        };
        // Blocks of 100 bytes, 4 kept.
        let mut blocks = Blocks::new(100, 400);
        let mut out = [0u8; 150];
        assert_eq!(blocks.read(&file, 50, &mut out), Ok(150));
        assert_eq!(out.to_vec(), file.bytes[50..200].to_vec());
        // Blocks 0 and 1 in one request; again from the cache.
        assert_eq!(*file.reads.lock().unwrap(), vec![(0, 200)]);
        assert_eq!(blocks.read(&file, 120, &mut out[..60]), Ok(60));
        assert_eq!(file.reads.lock().unwrap().len(), 1);
        // Block 1 held, 2 and 3 missing: one request for them.
        let mut two = [0u8; 200];
        assert_eq!(blocks.read(&file, 150, &mut two), Ok(200));
        assert_eq!(two.to_vec(), file.bytes[150..350].to_vec());
        assert_eq!(file.reads.lock().unwrap()[1], (200, 200));
        // The end of the file: fewer bytes.
        assert_eq!(blocks.read(&file, 950, &mut out), Ok(50));
        assert_eq!(out[..50].to_vec(), file.bytes[950..].to_vec());
        // Five blocks seen, four kept: the first one is read again.
        file.reads.lock().unwrap().clear();
        assert_eq!(blocks.read(&file, 0, &mut out[..10]), Ok(10));
        assert_eq!(*file.reads.lock().unwrap(), vec![(0, 100)]);
        // More than half the cache: straight through.
        let mut big = [0u8; 300];
        assert_eq!(blocks.read(&file, 500, &mut big), Ok(300));
        assert_eq!(file.reads.lock().unwrap()[1], (500, 300));
    }

    /// A read whose own held block is the oldest: loading the blocks it
    /// misses drops that one from the cache, not from the read.
    #[test]
    fn a_read_keeps_its_own_blocks_while_loading_the_missing_ones() {
        let file = Counting {
            bytes: (0..1000u32).map(|i| i as u8).collect(),
            reads: Mutex::new(Vec::new()),
        };
        let mut blocks = Blocks::new(100, 400);
        let mut one = [0u8; 1];
        for at in [0, 500, 600, 700] {
            assert_eq!(blocks.read(&file, at, &mut one), Ok(1));
        }
        // Block 0 held (the oldest), 1 and 2 missing: full cache.
        let mut out = [0u8; 200];
        assert_eq!(blocks.read(&file, 50, &mut out), Ok(200));
        assert_eq!(out.to_vec(), file.bytes[50..250].to_vec());
        assert_eq!(file.reads.lock().unwrap().last(), Some(&(100, 200)));
    }
}
