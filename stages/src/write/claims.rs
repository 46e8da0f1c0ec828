//! Which input each output path is the output of, so that two inputs of
//! one run never share one output (issue 16, item 5: the second was skipped
//! as "exists", or overwrote the first's).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::Mutex;

use warpline_engine::redact::redact;
use warpline_engine::{Item, StageError};

/// The input that wrote each output path, or that was skipped because the
/// path was there. Kept for the write stage's lifetime: one run of
/// `warpline run` (an embedding program that runs one loaded pipeline
/// several times keeps it across them). Compact for long runs: per path a
/// hash of the path, a hash of the input's id and source, and its id.
#[derive(Debug, Default)]
pub(super) struct Claims(Mutex<HashMap<u64, Claim>>);

#[derive(Debug)]
struct Claim {
    input: u64,
    id: Box<str>,
}

/// A hash of `parts`, stable within this process.
fn hash_of(parts: &[&[u8]]) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    for p in parts {
        p.hash(&mut h);
    }
    h.finish()
}

impl Claims {
    /// Records `item` as the input whose output `path` is: an error that
    /// names both inputs when `path` is already another input's. The same
    /// input (same id and source) may claim its path again (a try again, an
    /// item sent back to the start of the flow).
    pub(super) fn claim(&self, path: &Path, item: &Item) -> Result<(), StageError> {
        let key = hash_of(&[path.as_os_str().as_encoded_bytes()]);
        let input = hash_of(&[item.id.as_bytes(), item.source.as_bytes()]);
        let mut claims = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let claim = claims.entry(key).or_insert_with(|| Claim {
            input,
            id: item.id.as_str().into(),
        });
        if claim.input == input {
            return Ok(());
        }
        let other = if *claim.id == *item.id {
            format!("another input with the same id {:?}", item.id)
        } else {
            format!("the input {:?}", claim.id)
        };
        Err(StageError::permanent(format!(
            "{}: its output {} is already the output of {other} in this run; \
             two inputs cannot share one output ({} is not written)",
            item.id,
            path.display(),
            redact(&item.source),
        )))
    }
}
