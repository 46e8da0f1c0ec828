//! Synthetic kinds, so the engine can be exercised and benchmarked without
//! GDAL or a network (as Vector has demo sources and a blackhole sink):
//!
//! - source `generate`: `count` items named `item-000001`..., each with an
//!   optional size (`size`, or `sizes` taken in turn);
//! - stage `hold`: holds each item for `duration`, asleep on an async worker
//!   (`mode = "sleep"`) or busy on a CPU core on a blocking worker
//!   (`mode = "spin"`); `fail_every = N` fails every Nth item, for trying
//!   failure handling;
//! - stage `discard`: drops the item's payload (a blackhole sink).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::Deserialize;

use crate::item::{Input, Item, Outcome, StageError};
use crate::problem::Problem;
use crate::registry::{Registry, Settings};
use crate::stage::{
    AsyncStage, BlockingStage, Handler, OpenError, Source, SourceError, SourceSpec, Stage,
};
use crate::units::{HumanDuration, Size};

impl Registry {
    /// A registry with the engine's synthetic kinds: source `generate`,
    /// stages `hold` and `discard`.
    pub fn with_builtins() -> Self {
        let mut r = Registry::empty();
        register(&mut r);
        r
    }
}

/// Registers the synthetic kinds.
pub(crate) fn register(r: &mut Registry) {
    r.register_source("generate", generate);
    r.register_stage("hold", hold);
    r.register_stage("discard", |s: &Settings| {
        s.parse::<DiscardSettings>()?;
        Ok(Handler::from_async(Discard))
    });
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GenerateSettings {
    count: Option<u64>,
    size: Option<Size>,
    sizes: Option<Vec<Size>>,
    prefix: Option<String>,
}

#[derive(Debug)]
struct Generate {
    count: u64,
    sizes: Vec<u64>,
    prefix: String,
}

fn generate(s: &Settings) -> Result<Arc<dyn SourceSpec>, Vec<Problem>> {
    let g: GenerateSettings = s.parse()?;
    let mut problems = Vec::new();
    let count = g.count.unwrap_or_else(|| {
        problems.push(s.problem("count", "missing: how many items to generate"));
        0
    });
    if g.size.is_some() && g.sizes.is_some() {
        problems.push(s.problem("sizes", "give `size` or `sizes`, not both"));
    }
    let sizes = g.size.into_iter().chain(g.sizes.into_iter().flatten());
    let sizes = sizes.map(|b| b.0).collect();
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(Arc::new(Generate {
        count,
        sizes,
        prefix: g.prefix.unwrap_or_else(|| "item".to_owned()),
    }))
}

impl SourceSpec for Generate {
    fn opens_offline(&self) -> bool {
        true
    }

    fn open(&self) -> Result<Box<dyn Source>, OpenError> {
        Ok(Box::new(GenerateRun {
            next: 0,
            count: self.count,
            sizes: self.sizes.clone(),
            prefix: self.prefix.clone(),
            width: self.count.max(1).ilog10() as usize + 1,
        }))
    }
}

struct GenerateRun {
    next: u64,
    count: u64,
    sizes: Vec<u64>,
    prefix: String,
    width: usize,
}

#[async_trait]
impl Source for GenerateRun {
    async fn next(&mut self) -> Option<Result<Input, SourceError>> {
        if self.next >= self.count {
            return None;
        }
        let n = self.next;
        self.next += 1;
        let size_hint = match self.sizes.len() {
            0 => None,
            len => Some(self.sizes[(n % len as u64) as usize]),
        };
        Some(Ok(Input {
            id: format!("{}-{:0w$}", self.prefix, n + 1, w = self.width),
            source: format!("generate:{}", n + 1),
            size_hint,
            meta: Default::default(),
        }))
    }

    fn len_hint(&self) -> Option<u64> {
        Some(self.count)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HoldSettings {
    duration: Option<HumanDuration>,
    mode: Option<HoldMode>,
    fail_every: Option<u64>,
}

/// How `hold` spends its time: `"sleep"` (an async wait, the default) or
/// `"spin"` (a busy CPU on a blocking worker).
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(try_from = "String")]
enum HoldMode {
    #[default]
    Sleep,
    Spin,
}

crate::word_setting!(HoldMode, "\"sleep\" (async wait) or \"spin\" (busy CPU on a blocking worker)", {
    "sleep" => HoldMode::Sleep,
    "spin" => HoldMode::Spin,
});

#[derive(Debug)]
struct Hold {
    duration: Duration,
    fail_every: Option<u64>,
    seen: AtomicU64,
}

impl Hold {
    fn should_fail(&self) -> Result<(), StageError> {
        let Some(n) = self.fail_every else {
            return Ok(());
        };
        let seen = self.seen.fetch_add(1, Ordering::Relaxed) + 1;
        if seen % n == 0 {
            // The log line and the report name the item already.
            Err(StageError::permanent(format!(
                "synthetic failure (fail_every = {n})"
            )))
        } else {
            Ok(())
        }
    }
}

fn hold(s: &Settings) -> Result<Handler, Vec<Problem>> {
    let mut problems = Vec::new();
    let Some(h) = s.read::<HoldSettings>(&mut problems) else {
        return Err(problems);
    };
    let duration = h.duration.map_or(Duration::ZERO, |d| d.0);
    if h.fail_every == Some(0) {
        problems.push(s.problem("fail_every", "must be at least 1"));
    }
    let stage = Hold {
        duration,
        fail_every: h.fail_every,
        seen: AtomicU64::new(0),
    };
    let handler = match h.mode.unwrap_or_default() {
        HoldMode::Sleep => Handler::from_async(stage),
        HoldMode::Spin => Handler::from_blocking(stage),
    };
    if problems.is_empty() {
        Ok(handler)
    } else {
        Err(problems)
    }
}

impl Stage for Hold {}

#[async_trait]
impl AsyncStage for Hold {
    async fn process(&self, _: &mut Item) -> Result<Outcome, StageError> {
        if !self.duration.is_zero() {
            tokio::time::sleep(self.duration).await;
        }
        self.should_fail()?;
        Ok(Outcome::Continue)
    }
}

impl BlockingStage for Hold {
    fn process(&self, _: &mut Item) -> Result<Outcome, StageError> {
        let start = Instant::now();
        while start.elapsed() < self.duration {
            std::hint::spin_loop();
        }
        self.should_fail()?;
        Ok(Outcome::Continue)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DiscardSettings {}

#[derive(Debug)]
struct Discard;

impl Stage for Discard {}

#[async_trait]
impl AsyncStage for Discard {
    async fn process(&self, item: &mut Item) -> Result<Outcome, StageError> {
        item.clear_payload();
        Ok(Outcome::Continue)
    }
}
