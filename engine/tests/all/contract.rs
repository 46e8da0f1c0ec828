//! The stage contract: `demand`, the prepare step, always runs, once per
//! try and before `process`, for async and blocking stages, whether or not
//! the stage lists a byte budget (issue 17: `process` need not redo it).

use crate::common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use warpline_engine::{
    AsyncStage, BlockingStage, Handler, Item, Outcome, Pipeline, Registry, StageError,
};

/// What `demand` leaves for `process`.
struct Prepared;

/// Prepares every item in `demand`; `process` fails a try it finds
/// unprepared (and takes what `demand` left, so each try needs its own),
/// and fails the first try of every item transiently to be retried.
#[derive(Default)]
struct Prepares {
    demands: AtomicU32,
    tries: AtomicU32,
    unprepared: AtomicU32,
}

impl Prepares {
    fn demand(&self, item: &mut Item) -> Result<u64, StageError> {
        self.demands.fetch_add(1, Ordering::Relaxed);
        item.set_payload(Prepared);
        Ok(1)
    }

    fn process(&self, item: &mut Item) -> Result<Outcome, StageError> {
        self.tries.fetch_add(1, Ordering::Relaxed);
        if item.take_payload::<Prepared>().is_none() {
            self.unprepared.fetch_add(1, Ordering::Relaxed);
            return Err(StageError::permanent(format!("{}: not prepared", item.id)));
        }
        if item.attempts == 1 {
            return Err(StageError::transient(format!("{}: once more", item.id)));
        }
        Ok(Outcome::Continue)
    }
}

struct Async(Arc<Prepares>);
struct Blocking(Arc<Prepares>);

impl warpline_engine::Stage for Async {
    fn demand(&self, item: &mut Item) -> Result<u64, StageError> {
        self.0.demand(item)
    }
}

#[async_trait]
impl AsyncStage for Async {
    async fn process(&self, item: &mut Item) -> Result<Outcome, StageError> {
        self.0.process(item)
    }
}

impl warpline_engine::Stage for Blocking {
    fn demand(&self, item: &mut Item) -> Result<u64, StageError> {
        self.0.demand(item)
    }
}

impl BlockingStage for Blocking {
    fn process(&self, item: &mut Item) -> Result<Outcome, StageError> {
        self.0.process(item)
    }
}

#[tokio::test]
async fn demand_runs_once_before_every_try_with_or_without_a_byte_budget() {
    for blocking in [false, true] {
        let budget = "[limits.memory]\nbudget = \"1KiB\"\n";
        for (declared, limits) in [("", ""), (budget, "limits = [\"memory\"]")] {
            let prepares = Arc::new(Prepares::default());
            let mut registry = Registry::with_builtins();
            let p = Arc::clone(&prepares);
            registry.register_stage("prepares", move |_| {
                let p = Arc::clone(&p);
                Ok(match blocking {
                    true => Handler::from_blocking(Blocking(p)),
                    false => Handler::from_async(Async(p)),
                })
            });
            let stages = format!(
                "{declared}[stages.work]\nkind = \"prepares\"\nworkers = 2\n{limits}\n\
                 retry = {{ attempts = 2, base_delay = \"1ms\" }}\n"
            );
            let toml = common::generated(&["work"], 20, &stages);
            let report = Pipeline::from_toml_str(&toml, &registry)
                .unwrap()
                .run()
                .await
                .unwrap();
            let case = format!("blocking: {blocking}, {limits:?}");
            assert_eq!(report.items.done, 20, "{case}: {report}");
            assert_eq!(prepares.unprepared.load(Ordering::Relaxed), 0, "{case}");
            assert_eq!(prepares.tries.load(Ordering::Relaxed), 40, "{case}");
            assert_eq!(prepares.demands.load(Ordering::Relaxed), 40, "{case}");
        }
    }
}
