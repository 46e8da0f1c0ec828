//! An upload's parts: their size (S3 takes at most 10,000 parts of at
//! most 5 GiB), how many are in flight at once (within the item's share of
//! the byte budget), and their sending.

use futures::stream::FuturesUnordered;
use futures::StreamExt;
use object_store::multipart::PartId;
use object_store::path::Path as ObjectPath;
use object_store::PutPayload;
use tokio::io::AsyncReadExt;
use warpline_engine::StageError;

use super::{stage_error, Client};

/// The size of each uploaded part, for a file of at most
/// `PART * MAX_PARTS` bytes (78 GiB).
pub(super) const PART: u64 = 8 << 20;

/// S3's limits on a multipart upload: at most 10,000 parts, each at most
/// 5 GiB (and at least 5 MiB but for the last, which `PART` is over).
const MAX_PARTS: u64 = 10_000;
const MAX_PART: u64 = 5 << 30;

/// The bytes of parts in flight at once, per upload (at least one part).
const IN_FLIGHT_BYTES: u64 = 32 << 20;

/// The part size for a file of `len` bytes: `PART`, or for a larger file
/// the least whole number of MiB that makes it at most `MAX_PARTS` parts.
pub(super) fn part_size(len: u64) -> Result<u64, String> {
    let least = len.div_ceil(MAX_PARTS).div_ceil(1 << 20) << 20;
    let part = PART.max(least);
    if part > MAX_PART {
        return Err(format!(
            "{len} bytes is over S3's largest object in {MAX_PARTS} parts of 5 GiB"
        ));
    }
    Ok(part)
}

/// How many parts of `part` bytes are sent at once: `IN_FLIGHT_BYTES` of
/// them, or no more than `share` (the byte budget the item holds) when it
/// has one; at least one part.
fn parts_in_flight(part: u64, share: Option<u64>) -> usize {
    let room = share.map_or(IN_FLIGHT_BYTES, |s| s.min(IN_FLIGHT_BYTES));
    (room / part).max(1) as usize
}

/// Sends the file's parts of `part` bytes, [`parts_in_flight`] at a time;
/// their ids in order, and the bytes sent.
pub(super) async fn send(
    store: &dyn Client,
    path: &ObjectPath,
    id: &String,
    (f, part, len, share): (&mut tokio::fs::File, u64, u64, Option<u64>),
    shown: &str,
    local: &impl Fn(std::io::Error) -> StageError,
) -> Result<(Vec<PartId>, u64), StageError> {
    let mut in_flight = FuturesUnordered::new();
    let mut parts: Vec<Option<PartId>> = Vec::new();
    let mut sent = 0u64;
    let at_once = parts_in_flight(part, share);
    loop {
        // No more room than the part needs (a small file's one part is
        // small). A part is at most 5 GiB (`part_size`): it fits a usize on
        // the 64-bit targets warpline builds for; else `read_to_end` grows
        // the buffer all the same.
        let room = part.min(len.saturating_sub(sent));
        let mut chunk = Vec::with_capacity(usize::try_from(room).unwrap_or(0));
        (&mut *f)
            .take(part)
            .read_to_end(&mut chunk)
            .await
            .map_err(local)?;
        let last = (chunk.len() as u64) < part;
        // An empty file is one empty part; else no part is empty.
        if !chunk.is_empty() || parts.is_empty() {
            let idx = parts.len();
            parts.push(None);
            sent += chunk.len() as u64;
            let payload = PutPayload::from(chunk);
            in_flight.push(async move { (idx, store.put_part(path, id, idx, payload).await) });
        }
        while in_flight.len() >= at_once || (last && !in_flight.is_empty()) {
            let Some((idx, result)) = in_flight.next().await else {
                break;
            };
            parts[idx] = Some(result.map_err(|e| stage_error(shown, &e))?);
        }
        if last {
            return Ok((parts.into_iter().flatten().collect(), sent));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// S3 takes at most 10,000 parts of at least 5 MiB (but the last) and
    /// at most 5 GiB: with 8 MiB parts, a file over 78 GiB could not be
    /// sent.
    #[test]
    fn parts_are_sized_from_the_file_within_s3s_limits() {
        for len in [0, 1, PART, 78 << 30, 100 << 30, 1 << 40, 5 << 40] {
            let part = part_size(len).unwrap();
            assert!((5 << 20..=MAX_PART).contains(&part), "{len}: {part}");
            assert!(len.div_ceil(part) <= MAX_PARTS, "{len}: {part}");
            assert_eq!(part % (1 << 20), 0);
            assert!(parts_in_flight(part, None) as u64 * part <= IN_FLIGHT_BYTES.max(part));
        }
        assert_eq!(part_size(PART * MAX_PARTS).unwrap(), PART);
        assert_eq!(part_size(PART * MAX_PARTS + 1).unwrap(), PART + (1 << 20));
        assert_eq!(parts_in_flight(PART, None), 4);
        // Within the item's share of the budget, at least one part.
        assert_eq!(parts_in_flight(PART, Some(20 << 20)), 2);
        assert_eq!(parts_in_flight(PART, Some(1 << 20)), 1);
        assert_eq!(parts_in_flight(PART, Some(1 << 30)), 4);
        assert!(part_size(MAX_PART * MAX_PARTS + 1).is_err());
    }
}
