//! What a pipeline file says, section by section, as plain serde structs.
//! Every struct denies unknown keys, so a misspelt key is an error with its
//! path, not a silently ignored setting. The compile step turns these into a
//! runnable [`Pipeline`](crate::Pipeline).

use serde::Deserialize;

use crate::limit::{Oversize, RateKey, RateScope};
use crate::pipeline::OnError;
use crate::units::{CountValue, HumanDuration, Size};

/// `[pipeline]`: the run as a whole.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineSection {
    /// A name for logs and reports; defaults to the file's stem.
    pub name: Option<String>,
    /// The stages in the order items pass through them.
    pub flow: Option<Vec<String>>,
    /// What a failed item does to the run: `"continue"` (default) or `"abort"`.
    pub on_error: Option<OnError>,
    /// How long a stopped run may drain before what is left is aborted.
    pub shutdown_deadline: Option<HumanDuration>,
    /// How long no item may move before the run says what waits for what.
    pub stall_warning: Option<HumanDuration>,
    /// The default memory budget: `"auto"` (half of the machine's memory,
    /// the default), a size, or `"unbounded"` (none).
    pub memory: Option<crate::defaults::MemorySetting>,
}

/// `[source]`: the keys the engine reads; the rest belong to the kind.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SourceCommon {
    pub kind: Option<String>,
    #[serde(default)]
    pub limits: Vec<String>,
}

/// The keys of a `[source]` table the engine reads itself.
pub(crate) const SOURCE_KEYS: &[&str] = &["kind", "limits"];

/// `[stages.NAME]`: the keys the engine reads; the rest belong to the kind.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StageCommon {
    pub kind: Option<String>,
    pub workers: Option<CountValue>,
    pub mailbox: Option<CountValue>,
    #[serde(default)]
    pub limits: Vec<String>,
    #[serde(default)]
    pub carry: Vec<String>,
    #[serde(default)]
    pub release: Vec<String>,
    pub retry: Option<RetrySection>,
    pub adaptive: Option<crate::adapt::AdaptiveValue>,
}

/// `[stages.NAME.retry]`: how often, and after how long, a failed item is
/// tried again in this stage.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RetrySection {
    pub attempts: Option<CountValue>,
    pub base_delay: Option<HumanDuration>,
    pub max_delay: Option<HumanDuration>,
    pub on: Option<Vec<String>>,
}

/// The keys of a `[stages.NAME]` table the engine reads itself.
pub(crate) const STAGE_KEYS: &[&str] = &[
    "kind", "workers", "mailbox", "limits", "carry", "release", "retry", "adaptive",
];

/// `[limits.NAME]`: exactly one of `permits`, `budget` or `per_second`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitSection {
    /// A count limiter: a number of slots, or `"cores"`.
    pub permits: Option<CountValue>,
    /// A byte budget: `"512MiB"` or a number of bytes.
    pub budget: Option<Size>,
    /// For a byte budget: `"fail"` (default) or `"alone"`.
    pub oversize: Option<Oversize>,
    /// A rate limiter: tokens per second.
    pub per_second: Option<f64>,
    /// For a rate limiter: how many tokens may be taken at once (default 1).
    pub burst: Option<CountValue>,
    /// For a rate limiter: `"host"` for one bucket per remote host; by
    /// default one bucket for everything.
    pub per: Option<RateKey>,
    /// For a rate limiter: the share under `per_second` it paces at
    /// (default 0.02).
    pub margin: Option<f64>,
    /// `true`: the limiter of this name that the embedding process shares
    /// between pipelines (see `Loader::with_limits`).
    pub shared: Option<bool>,
    /// For a rate limiter: `"local"` (default: this process) or `"global"`
    /// (every worker of a run, kept by the coordinator).
    pub scope: Option<RateScope>,
}
