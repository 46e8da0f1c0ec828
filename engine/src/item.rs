//! What travels through a pipeline: an [`Item`] (one input and what becomes
//! of it), the [`Outcome`] a stage gives it, and a [`StageError`] when a
//! stage fails it.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::limit::Ticket;
use crate::report::Footprint;

/// One input as a source produces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    /// A stable id, unique within the run (used for output names, resume and
    /// failure records).
    pub id: String,
    /// Where the input comes from: a URL, a path, or a synthetic name.
    pub source: String,
    /// A size in bytes known before any work, if the source knows one. Stages
    /// charge their byte limiters by it unless they know better.
    pub size_hint: Option<u64>,
    /// What the source knows of the input beyond where it is (a STAC
    /// item's `datetime`): the item starts with it in [`Item::meta`].
    pub meta: Meta,
}

/// Facts about an item that a source or a stage records for the stages
/// after it, by name (`"stac:datetime"`, `"input"`): what a payload,
/// replaced at each stage, cannot carry to the end (the write stage's
/// provenance record). Names are the recorder's to document.
pub type Meta = BTreeMap<String, serde_json::Value>;

impl Input {
    /// An input with no size hint and no meta.
    pub fn new(id: impl Into<String>, source: impl Into<String>) -> Self {
        Input {
            id: id.into(),
            source: source.into(),
            size_hint: None,
            meta: Meta::new(),
        }
    }
}

/// One unit of work travelling between stages, with the permits it still
/// holds.
pub struct Item {
    /// The input's id.
    pub id: String,
    /// The input's source.
    pub source: String,
    /// A size in bytes known before the current stage allocates.
    pub size_hint: Option<u64>,
    /// How many times the current stage has tried this item (1 on the first).
    pub attempts: u32,
    /// Bytes read for this item (a fetch adds what it read); summed in the
    /// report.
    pub bytes_in: u64,
    /// Bytes written for this item (a write adds the output's size).
    pub bytes_out: u64,
    /// What the source and the stages recorded of the item (see [`Meta`]);
    /// kept when the item starts the flow again.
    pub meta: Meta,
    /// The kinds of the stages the item has passed, in order (the current
    /// one is not in it until it finishes).
    pub(crate) passed: Vec<String>,
    /// Where the item's data lies, in EPSG:4326, when a stage knows: the
    /// input's (set by `decode`) until the output's replaces it (set by
    /// `write`). The report's map draws it with how the item ended
    /// ([`RunReport::footprints`](crate::RunReport::footprints)).
    pub footprint: Option<Footprint>,
    payload: Option<Box<dyn Any + Send>>,
    tickets: Vec<Ticket>,
    /// The admission number: earlier items are served first by byte budgets.
    pub(crate) seq: u64,
    /// Tries of the current stage that a throttling host refused (429,
    /// 503): counted apart from failed tries.
    pub(crate) throttled: u32,
    /// The way the current stage's code took with this item, if it said
    /// ([`Item::took`]): counted per stage in the report.
    pub(crate) path: Option<&'static str>,
}

impl fmt::Debug for Item {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Item")
            .field("id", &self.id)
            .field("source", &self.source)
            .field("size_hint", &self.size_hint)
            .field("meta", &self.meta)
            .field("has_payload", &self.payload.is_some())
            .field("tickets", &self.tickets)
            .finish()
    }
}

impl Item {
    /// A new item for `input`, holding no payload and no tickets.
    pub fn new(input: Input) -> Self {
        Item {
            id: input.id,
            source: input.source,
            size_hint: input.size_hint,
            attempts: 0,
            bytes_in: 0,
            bytes_out: 0,
            meta: input.meta,
            passed: Vec::new(),
            footprint: None,
            payload: None,
            tickets: Vec::new(),
            seq: 0,
            throttled: 0,
            path: None,
        }
    }

    /// Says which of its ways the current stage took with this item (for
    /// example reproject's `"memory"` or `"disk"`): the run counts each
    /// stage's ways, and the report shows them ([`StageReport::paths`]).
    /// The last call of one try counts.
    ///
    /// [`StageReport::paths`]: crate::report::StageReport::paths
    pub fn took(&mut self, path: &'static str) {
        self.path = Some(path);
    }

    /// The kinds of the stages this item has passed so far, in order
    /// (`["fetch", "decode", "reproject"]` in a write stage): a stage that
    /// records how its output was made can tell whether a stage it does not
    /// know had a hand in it.
    pub fn passed(&self) -> &[String] {
        &self.passed
    }

    /// Replaces the payload (what the previous stage made of the input).
    pub fn set_payload<T: Any + Send>(&mut self, value: T) {
        self.payload = Some(Box::new(value));
    }

    /// Takes the payload out if it is a `T`; leaves it in place otherwise.
    pub fn take_payload<T: Any + Send>(&mut self) -> Option<T> {
        match self.payload.take()?.downcast::<T>() {
            Ok(b) => Some(*b),
            Err(other) => {
                self.payload = Some(other);
                None
            }
        }
    }

    /// Borrows the payload if it is a `T`.
    pub fn payload<T: Any + Send>(&self) -> Option<&T> {
        self.payload.as_ref()?.downcast_ref::<T>()
    }

    /// Drops the payload (a sink's job).
    pub fn clear_payload(&mut self) {
        self.payload = None;
    }

    /// Keeps a ticket with the item until it ends or a stage releases it.
    pub fn keep(&mut self, ticket: Ticket) {
        self.tickets.push(ticket);
    }

    /// Gives back every ticket this item holds on the limiter `name`.
    pub fn release(&mut self, name: &str) {
        self.tickets.retain(|t| t.limiter().name() != name);
    }

    /// The tickets this item carries.
    pub fn tickets(&self) -> &[Ticket] {
        &self.tickets
    }

    /// Takes out the ticket this item holds on the limiter `name`, if any.
    pub(crate) fn take_ticket(&mut self, name: &str) -> Option<Ticket> {
        let at = self
            .tickets
            .iter()
            .position(|t| t.limiter().name() == name)?;
        Some(self.tickets.swap_remove(at))
    }

    /// Marks the bytes this item holds as parked in the mailbox of stage
    /// `depth` (`Some`), or moving again (`None`).
    pub(crate) fn set_parked(&mut self, depth: Option<u32>) {
        for t in &mut self.tickets {
            t.set_parked(depth);
        }
    }

    /// Gives back everything the item holds and forgets what stages made of
    /// it, so that it can start the flow again.
    pub(crate) fn reset(&mut self) {
        self.payload = None;
        self.tickets.clear();
        self.passed.clear();
        self.attempts = 0;
        self.bytes_in = 0;
        self.bytes_out = 0;
        self.footprint = None;
    }
}

/// What a stage did with an item that did not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Hand the item to the next stage (or, after the last, count it done).
    Continue,
    /// Stop here and count the item skipped (for example: its output is
    /// already complete from an earlier run).
    Skip(String),
}

/// How an error should be treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// May succeed if tried again (timeouts, resets, 5xx, 429).
    Transient,
    /// Will fail again (bad input, 4xx, decode errors).
    Permanent,
    /// The item asked for more than a whole budget allows.
    OverBudget,
    /// The stage's code panicked.
    Panicked,
    /// The run was aborted before the item finished.
    Interrupted,
}

impl ErrorKind {
    /// The kind with this snake_case name (as in pipeline files and reports).
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "transient" => ErrorKind::Transient,
            "permanent" => ErrorKind::Permanent,
            "over_budget" => ErrorKind::OverBudget,
            "panicked" => ErrorKind::Panicked,
            "interrupted" => ErrorKind::Interrupted,
            _ => return None,
        })
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::Transient => "transient",
            ErrorKind::Permanent => "permanent",
            ErrorKind::OverBudget => "over_budget",
            ErrorKind::Panicked => "panicked",
            ErrorKind::Interrupted => "interrupted",
        })
    }
}

/// Why a stage failed an item.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct StageError {
    /// How the error should be treated.
    pub kind: ErrorKind,
    /// What went wrong, naming the input where it helps.
    pub message: String,
    /// The HTTP status, when the error is a server's answer.
    pub status: Option<u16>,
    /// How long the server asked us to wait before trying again
    /// (`Retry-After`); the engine pauses the item's rate-limit bucket for
    /// that long, for every item that draws on it.
    pub retry_after: Option<Duration>,
    /// Whether the run cannot usefully go on (for example: the output
    /// device is full, so every later item would fail the same way): the
    /// engine then stops admitting and aborts the run as `on_error =
    /// "abort"` does, whatever `on_error` says.
    pub stops_run: bool,
    /// Whether the host could not be reached at all (a refused connection,
    /// no route): with adaptive per-host limits, every try to the host then
    /// pauses, as after a 503, instead of each item burning its tries.
    pub host_down: bool,
}

impl StageError {
    /// An error that will not go away if tried again.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Permanent, message)
    }

    /// An error that may go away if tried again.
    pub fn transient(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Transient, message)
    }

    /// An error of the given kind.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        StageError {
            kind,
            message: message.into(),
            status: None,
            retry_after: None,
            stops_run: false,
            host_down: false,
        }
    }

    /// Marks the error as the host's being unreachable (see
    /// [`host_down`](Self::host_down)).
    pub fn host_is_down(mut self) -> Self {
        self.host_down = true;
        self
    }

    /// Marks the error as one that stops the run (see
    /// [`stops_run`](Self::stops_run)).
    pub fn stopping_the_run(mut self) -> Self {
        self.stops_run = true;
        self
    }

    /// Records the HTTP status the error came with.
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }

    /// Records a server's `Retry-After`.
    pub fn with_retry_after(mut self, delay: Option<Duration>) -> Self {
        self.retry_after = delay;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_of_the_wrong_type_stays_in_place() {
        let mut item = Item::new(Input::new("a", "s"));
        item.set_payload(5u32);
        assert_eq!(item.take_payload::<String>(), None);
        assert_eq!(item.payload::<u32>(), Some(&5));
        assert_eq!(item.take_payload::<u32>(), Some(5));
        assert_eq!(item.take_payload::<u32>(), None);
    }
}
