//! The block cache of one open `/vsiwarpline/` file: GDAL's many small
//! reads (a TIFF's header, its directories, a tile at a time) become one
//! range request per run of consecutive missing blocks. Blocks are dropped
//! first in, first out past the cache's size; a read larger than half the
//! cache bypasses it.

use std::collections::{HashMap, VecDeque};

use super::vsi::RangeRead;

/// The cached blocks of one open file.
pub(super) struct Blocks {
    block: u64,
    capacity: usize,
    held: HashMap<u64, Vec<u8>>,
    order: VecDeque<u64>,
}

impl Blocks {
    /// A cache of `bytes` in blocks of `block` bytes.
    pub(super) fn new(block: usize, bytes: u64) -> Self {
        let block = block.max(1) as u64;
        Blocks {
            block,
            capacity: usize::try_from(bytes / block).unwrap_or(usize::MAX).max(1),
            held: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Fills `out` from `offset` (fewer bytes only at the end of `file`).
    pub(super) fn read(
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
        let mut b = first;
        while b <= last {
            if self.held.contains_key(&b) {
                b += 1;
                continue;
            }
            let run = b;
            while b <= last && !self.held.contains_key(&b) {
                b += 1;
            }
            self.load(file, run, b)?;
        }
        let mut at = offset;
        while at < end {
            let index = at / self.block;
            let Some(data) = self.held.get(&index) else {
                return Err(format!("block {index} was not kept"));
            };
            let from = (at - index * self.block) as usize;
            let n = (data.len() - from).min((end - at) as usize);
            let to = (at - offset) as usize;
            out[to..to + n].copy_from_slice(&data[from..from + n]);
            at += n as u64;
        }
        Ok(want)
    }

    /// Reads blocks `first..past` in one request, and keeps them.
    fn load(&mut self, file: &dyn RangeRead, first: u64, past: u64) -> Result<(), String> {
        let from = first * self.block;
        let to = (past * self.block).min(file.size());
        let mut buf = vec![0; (to - from) as usize];
        let got = file.read_at(from, &mut buf)?;
        if got < buf.len() {
            return Err(format!("{got} bytes of {} at {from}", buf.len()));
        }
        for (i, chunk) in buf.chunks(self.block as usize).enumerate() {
            while self.order.len() >= self.capacity {
                if let Some(old) = self.order.pop_front() {
                    self.held.remove(&old);
                }
            }
            self.held.insert(first + i as u64, chunk.to_vec());
            self.order.push_back(first + i as u64);
        }
        Ok(())
    }
}
