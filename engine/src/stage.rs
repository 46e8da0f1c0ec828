//! The traits a stage kind implements, and the [`Source`] trait for inputs.
//!
//! A stage is either async (its workers are tokio tasks: for I/O such as
//! HTTP) or blocking (its workers are OS threads the stage owns: for CPU work
//! and blocking C libraries such as GDAL, which must never run on the async
//! runtime). The engine does everything around the call: it takes the item
//! from the mailbox, acquires the stage's limiters in the global order,
//! catches panics, releases or carries the tickets, and hands the item on.

use std::sync::Arc;

use async_trait::async_trait;

use crate::item::{Input, Item, Outcome, StageError};
use crate::payload::Payload;
use crate::retry::RetryPolicy;

/// What every stage says of itself, async or blocking: what to charge
/// before it runs, its retry default, its payload types, what it checks
/// before a run. Every method has a default, so `impl Stage for X {}` is a
/// stage that says nothing more; its work is [`AsyncStage`] or
/// [`BlockingStage`].
pub trait Stage: Send + Sync + 'static {
    /// The stage's prepare step: sizes the item and may prepare it. It
    /// always runs, once per try, before `process` (so `process` may rely
    /// on what it left in the payload and need not do it again). Its answer
    /// is the bytes to charge on each byte limiter the stage lists:
    /// everything the stage will hold at its peak for this item. A stage
    /// that lists a byte limiter has it run before its limiters are
    /// acquired; any other, just before `process`. It may look at the item
    /// cheaply (for example read a header) and leave what it learnt in the
    /// payload for `process`. An error fails the try like an error from
    /// `process`. Defaults to the item's size hint.
    fn demand(&self, item: &mut Item) -> Result<u64, StageError> {
        Ok(item.size_hint.unwrap_or(0))
    }

    /// The retry policy when the pipeline file sets none.
    fn retry_default(&self) -> RetryPolicy {
        RetryPolicy::none()
    }

    /// Whether the item's work is already done (for example its output
    /// exists from an earlier run): `Some(reason)` skips the item as soon as
    /// it is admitted, before any stage works on it. Must be cheap.
    fn skip_check(&self, _item: &Item) -> Option<String> {
        None
    }

    /// Whether each try is a request to the item's host (a fetch): the
    /// report then counts requests, 429s and retries per host.
    fn counts_requests(&self) -> bool {
        false
    }

    /// Checks this machine before a run, without the network (for
    /// example: the output directory can be written): `warpline validate`.
    /// Each message is a problem; none by default.
    fn check_environment(&self) -> Vec<String> {
        Vec::new()
    }

    /// Checks what the stage will reach over the network (for example: the
    /// output bucket can be listed with the credentials at hand): only
    /// `warpline validate --online` asks, as a check must not surprise its
    /// user with network traffic. Each message is a problem; none by
    /// default.
    fn check_online(&self) -> Vec<String> {
        Vec::new()
    }

    /// What the stage says of how it will work on this machine, in a line
    /// each (reproject: which warp path, and why): shown by `plan` and in
    /// the run report. None by default.
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }

    /// Called once when a run of the pipeline starts, before any item is
    /// admitted (a blocking stage's on a blocking thread): e.g. to note the
    /// run's start. Nothing by default.
    fn run_starting(&self) {}

    /// Called once when a run's workers have all ended, before the report
    /// is made (a blocking stage's on a blocking thread), whatever the
    /// outcome: to finish what a stage keeps up to date across items (the
    /// write stage's STAC collection). Each message is logged as a warning
    /// and listed in the report's `stages[].notes`. None by default.
    fn run_finished(&self) -> Vec<String> {
        Vec::new()
    }

    /// Whether `warpline plan` may run this stage's `process` on one of
    /// the first inputs, to size what the stages after it hold
    /// ([`Pipeline::size_first`](crate::Pipeline::size_first)): only when
    /// that has no effect outside the process and reaches no network (a
    /// fetch of a local file; decode, whose work is reading a header).
    /// [`demand`](Self::demand) runs either way. No by default.
    fn dry_run(&self, _item: &Item) -> bool {
        false
    }

    /// The payload this stage takes from the stage before it: checked
    /// against what that stage [hands on](Self::hands_on) when the pipeline
    /// compiles. [`Payload::ANY`] by default.
    fn takes(&self) -> Payload {
        Payload::ANY
    }

    /// The payload this stage hands on to the next. [`Payload::ANY`] by
    /// default.
    fn hands_on(&self) -> Payload {
        Payload::ANY
    }
}

/// A stage whose work is asynchronous I/O. Runs on tokio tasks.
#[async_trait]
pub trait AsyncStage: Stage {
    /// Does this stage's work on `item`.
    async fn process(&self, item: &mut Item) -> Result<Outcome, StageError>;
}

/// A stage whose work blocks (CPU, GDAL, file I/O). Runs on OS threads the
/// stage owns, never on the async runtime.
pub trait BlockingStage: Stage {
    /// Does this stage's work on `item`.
    fn process(&self, item: &mut Item) -> Result<Outcome, StageError>;
}

/// A stage implementation, async or blocking.
#[derive(Clone)]
pub enum Handler {
    /// Runs on tokio tasks.
    Async(Arc<dyn AsyncStage>),
    /// Runs on OS threads.
    Blocking(Arc<dyn BlockingStage>),
}

impl std::fmt::Debug for Handler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Handler::Async(_) => "Handler::Async",
            Handler::Blocking(_) => "Handler::Blocking",
        })
    }
}

impl Handler {
    /// Wraps an async stage.
    pub fn from_async(stage: impl AsyncStage) -> Self {
        Handler::Async(Arc::new(stage))
    }

    /// Wraps a blocking stage.
    pub fn from_blocking(stage: impl BlockingStage) -> Self {
        Handler::Blocking(Arc::new(stage))
    }

    /// Whether workers are OS threads.
    pub fn is_blocking(&self) -> bool {
        matches!(self, Handler::Blocking(_))
    }

    pub(crate) fn demand(&self, item: &mut Item) -> Result<u64, StageError> {
        match self {
            Handler::Async(s) => s.demand(item),
            Handler::Blocking(s) => s.demand(item),
        }
    }

    pub(crate) fn check_environment(&self) -> Vec<String> {
        match self {
            Handler::Async(s) => s.check_environment(),
            Handler::Blocking(s) => s.check_environment(),
        }
    }

    pub(crate) fn check_online(&self) -> Vec<String> {
        match self {
            Handler::Async(s) => s.check_online(),
            Handler::Blocking(s) => s.check_online(),
        }
    }

    /// What the stage says of how it will work ([`Stage::notes`]).
    pub fn notes(&self) -> Vec<String> {
        match self {
            Handler::Async(s) => s.notes(),
            Handler::Blocking(s) => s.notes(),
        }
    }

    /// Whether each try is a request to a remote host (a fetch): such a
    /// stage is counted per host and may adapt to it.
    pub fn counts_requests(&self) -> bool {
        match self {
            Handler::Async(s) => s.counts_requests(),
            Handler::Blocking(s) => s.counts_requests(),
        }
    }

    pub(crate) fn skip_check(&self, item: &Item) -> Option<String> {
        match self {
            Handler::Async(s) => s.skip_check(item),
            Handler::Blocking(s) => s.skip_check(item),
        }
    }

    /// The payload the stage takes (see [`Stage::takes`]).
    pub fn takes(&self) -> Payload {
        match self {
            Handler::Async(s) => s.takes(),
            Handler::Blocking(s) => s.takes(),
        }
    }

    /// The payload the stage hands on (see [`Stage::hands_on`]).
    pub fn hands_on(&self) -> Payload {
        match self {
            Handler::Async(s) => s.hands_on(),
            Handler::Blocking(s) => s.hands_on(),
        }
    }

    /// Runs [`Stage::run_starting`], a blocking stage's on a blocking
    /// thread; a panic is logged, not raised.
    pub(crate) async fn run_starting(&self) {
        let outcome = match self {
            Handler::Async(s) => guard(|| s.run_starting()),
            Handler::Blocking(s) => {
                let s = Arc::clone(s);
                tokio::task::spawn_blocking(move || guard(|| s.run_starting()))
                    .await
                    .unwrap_or(Err(()))
            }
        };
        if outcome.is_err() {
            tracing::error!("a stage panicked as the run started");
        }
    }

    /// Runs [`Stage::run_finished`] as [`run_starting`](Self::run_starting)
    /// runs its hook; a panic is one message.
    pub(crate) async fn run_finished(&self) -> Vec<String> {
        let outcome = match self {
            Handler::Async(s) => guard(|| s.run_finished()),
            Handler::Blocking(s) => {
                let s = Arc::clone(s);
                tokio::task::spawn_blocking(move || guard(|| s.run_finished()))
                    .await
                    .unwrap_or(Err(()))
            }
        };
        outcome.unwrap_or_else(|()| vec!["the stage panicked as the run finished".to_owned()])
    }

    pub(crate) fn retry_default(&self) -> RetryPolicy {
        match self {
            Handler::Async(s) => s.retry_default(),
            Handler::Blocking(s) => s.retry_default(),
        }
    }
}

/// `f`'s answer, or `Err` if it panicked (the panic's message is printed
/// by the panic hook).
fn guard<T>(f: impl FnOnce() -> T) -> Result<T, ()> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|_| ())
}

/// An input the source could not turn into an item (a malformed line, an
/// unreadable list). It is counted as a failed item, not dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{id}: {message}")]
pub struct SourceError {
    /// What names the bad input (for a list file, `path:line`).
    pub id: String,
    /// What is wrong with it.
    pub message: String,
}

/// Produces inputs lazily, one at a time: the engine asks for the next only
/// when the first mailbox can take it.
#[async_trait]
pub trait Source: Send + 'static {
    /// The next input, `None` when there are no more.
    async fn next(&mut self) -> Option<Result<Input, SourceError>>;

    /// How many inputs there will be, if known (for progress).
    fn len_hint(&self) -> Option<u64> {
        None
    }
}

/// A validated source setting, opened once per run.
pub trait SourceSpec: Send + Sync + 'static {
    /// Opens the source for a run. An error here fails the whole run (for
    /// example: the list file does not exist).
    fn open(&self) -> Result<Box<dyn Source>, OpenError>;

    /// Whether opening it and reading its first inputs reaches nothing
    /// over the network (a list file, inputs in the pipeline, a local
    /// glob): only such a source is opened by `plan`, to size the first
    /// inputs ([`Pipeline::size_first`](crate::Pipeline::size_first)). No
    /// by default.
    fn opens_offline(&self) -> bool {
        false
    }

    /// Checks what the source will reach over the network (for example: a
    /// STAC API answers), as [`Stage::check_online`]: only `warpline
    /// validate --online` asks. None by default.
    fn check_online(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Why a source could not be opened for a run, said by the source kind
/// (`?` turns the kind's own message into one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct OpenError(pub String);

impl From<String> for OpenError {
    fn from(message: String) -> Self {
        OpenError(message)
    }
}
