//! A compiled pipeline: the source, the stages in flow order and the named
//! limiters, all validated and ready to run.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::limit::{Limiter, Limits};
use crate::stage::{Handler, SourceSpec};

pub use crate::retry::RetryPolicy;

/// The source as it will run.
#[derive(Clone)]
pub struct SourcePlan {
    /// The source kind (`generate`, `list`, ...).
    pub kind: String,
    pub(crate) spec: Arc<dyn SourceSpec>,
    /// Limiters held from admission until the item ends, in acquisition order.
    pub limits: Vec<Limiter>,
}

impl SourcePlan {
    /// Opens the source on its own (to list or enqueue its inputs).
    pub fn open(&self) -> Result<Box<dyn crate::stage::Source>, crate::stage::OpenError> {
        self.spec.open()
    }
}

impl fmt::Debug for SourcePlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourcePlan")
            .field("kind", &self.kind)
            .field("limits", &self.limits)
            .finish()
    }
}

/// One stage as it will run.
#[derive(Debug, Clone)]
pub struct StagePlan {
    /// The stage's name in the pipeline file.
    pub name: String,
    /// The stage kind.
    pub kind: String,
    /// How many workers take from the mailbox.
    pub workers: u32,
    /// Where `workers` came from: the file, or the kind's default.
    pub workers_from: crate::defaults::WorkersFrom,
    /// How many items may wait in the mailbox.
    pub mailbox: u32,
    /// When and how often a failed item is tried again.
    pub retry: RetryPolicy,
    /// The implementation; blocking stages run on OS threads.
    pub handler: Handler,
    /// Limiters acquired for each item, in the global order.
    pub limits: Vec<Limiter>,
    /// Limiters whose tickets travel on with the item after this stage.
    pub carry: Vec<String>,
    /// Carried limiters given back when an item enters this stage.
    pub release: Vec<String>,
    /// Limiters the stage's own code charges and keeps with the item.
    pub charges: Vec<Limiter>,
    /// Adaptive per-host concurrency and rate, for a stage whose tries are
    /// requests to a host.
    pub adaptive: Option<crate::adapt::Adaptive>,
}

/// What a failed item does to the run: `on_error = "continue"` (the
/// default) or `"abort"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum OnError {
    /// Record the failure and go on with the other items.
    #[default]
    Continue,
    /// Record the failure and abort the run.
    Abort,
}

crate::word_setting!(OnError, "\"continue\" or \"abort\"", {
    "continue" => OnError::Continue,
    "abort" => OnError::Abort,
});

/// A validated pipeline, ready to run.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use warpline_engine::{Pipeline, Registry};
///
/// let pipeline = Pipeline::from_toml_str(r#"
///     [pipeline]
///     flow = ["work", "sink"]
///     [source]
///     kind = "generate"
///     count = 100
///     [limits.cpu]
///     permits = 2
///     [stages.work]
///     kind = "hold"
///     workers = 4
///     limits = ["cpu"]
///     [stages.sink]
///     kind = "discard"
/// "#, &Registry::with_builtins()).unwrap();
/// let report = pipeline.run().await.unwrap();
/// assert_eq!(report.items.done, 100);
/// assert!(report.limiter("cpu").unwrap().peak_in_use.unwrap() <= 2);
/// # }
/// ```
pub struct Pipeline {
    pub(crate) name: String,
    pub(crate) on_error: OnError,
    pub(crate) shutdown_deadline: Duration,
    pub(crate) stall_warning: Duration,
    pub(crate) source: SourcePlan,
    pub(crate) stages: Vec<StagePlan>,
    pub(crate) limits: Limits,
    pub(crate) memory: crate::defaults::MemoryFrom,
    /// Whether `descriptors` is the implicit unit budget.
    pub(crate) descriptors_default: bool,
}

impl fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pipeline")
            .field("name", &self.name)
            .field("source", &self.source)
            .field("stages", &self.stages)
            .field("limits", &self.limits)
            .finish()
    }
}

impl Pipeline {
    /// The same pipeline reading its inputs from `spec` instead (a work
    /// queue, for example); the source's unit budget stays.
    pub fn with_source(mut self, kind: &str, spec: Arc<dyn SourceSpec>) -> Self {
        self.source.kind = kind.to_owned();
        self.source.spec = spec;
        self
    }

    /// The pipeline's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The source as it will run.
    pub fn source(&self) -> &SourcePlan {
        &self.source
    }

    /// The stages in flow order.
    pub fn stages(&self) -> &[StagePlan] {
        &self.stages
    }

    /// The named limiters, in acquisition order.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// What bounds the pipeline's memory (byte budgets it declares, the
    /// default budget and what it is a share of, or nothing, and why).
    pub fn memory(&self) -> &crate::defaults::MemoryFrom {
        &self.memory
    }

    /// Whether the limiter of this name is one the pipeline did not
    /// declare: the default memory budget, or the implicit `descriptors`
    /// unit budget.
    pub fn is_default_limiter(&self, name: &str) -> bool {
        (name == crate::defaults::MEMORY && self.memory.default_budget().is_some())
            || (name == "descriptors" && self.descriptors_default)
    }

    /// What a failed item does to the run.
    pub fn on_error(&self) -> OnError {
        self.on_error
    }

    /// How long a stopped run may drain before it is aborted.
    pub fn shutdown_deadline(&self) -> Duration {
        self.shutdown_deadline
    }

    /// The most items that can exist in the pipeline at once, whatever the
    /// input size: `1 + sum over stages of (workers + mailbox)`. Each stage
    /// holds at most W items in its workers (working, or waiting to hand on)
    /// and Q in its mailbox; the one more is the item the source has made and
    /// is waiting to send.
    pub fn admission_bound(&self) -> u64 {
        1 + self
            .stages
            .iter()
            .map(|s| u64::from(s.workers) + u64::from(s.mailbox))
            .sum::<u64>()
    }

    /// Checks this machine for every stage, without the network (output
    /// directories writable, ...): the environment tier of `warpline
    /// validate`.
    pub fn check_environment(&self) -> Vec<crate::problem::Problem> {
        self.stages
            .iter()
            .flat_map(|s| {
                s.handler.check_environment().into_iter().map(move |m| {
                    crate::problem::Problem::environment(format!("stages.{}", s.name), m)
                })
            })
            .collect()
    }

    /// Checks what the source and the stages will reach over the network
    /// (an output bucket can be listed, ...): what `warpline validate
    /// --online` adds to the environment tier.
    pub fn check_online(&self) -> Vec<crate::problem::Problem> {
        let source = self
            .source
            .spec
            .check_online()
            .into_iter()
            .map(|m| crate::problem::Problem::environment("source", m));
        let stages = self.stages.iter().flat_map(|s| {
            s.handler
                .check_online()
                .into_iter()
                .map(move |m| crate::problem::Problem::environment(format!("stages.{}", s.name), m))
        });
        source.chain(stages).collect()
    }
}
