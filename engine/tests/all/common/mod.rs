//! Test kinds: a source that counts what it produced, a stage that blocks
//! until a gate opens, and a stage that measures how many items (and bytes)
//! are inside it at once, independently of the limiters under test.

#![allow(dead_code, unreachable_pub)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{Notify, Semaphore};
use warpline_engine::{
    AsyncStage, BlockingStage, Handler, Input, Item, Outcome, Registry, Source, SourceError,
    SourceSpec, StageError,
};

/// Counts the inputs a source has produced.
#[derive(Clone, Default)]
pub struct Produced(pub Arc<AtomicU64>);

impl Produced {
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

struct Counted {
    count: u64,
    produced: Produced,
}

struct CountedRun {
    next: u64,
    count: u64,
    produced: Produced,
}

impl SourceSpec for Counted {
    fn open(&self) -> Result<Box<dyn Source>, warpline_engine::OpenError> {
        Ok(Box::new(CountedRun {
            next: 0,
            count: self.count,
            produced: self.produced.clone(),
        }))
    }
}

#[async_trait]
impl Source for CountedRun {
    async fn next(&mut self) -> Option<Result<Input, SourceError>> {
        if self.next == self.count {
            return None;
        }
        self.next += 1;
        self.produced.0.fetch_add(1, Ordering::SeqCst);
        Some(Ok(Input {
            id: format!("c{}", self.next),
            source: format!("counted:{}", self.next),
            size_hint: None,
            meta: Default::default(),
        }))
    }
}

/// A gate that handlers wait on until the test opens it.
#[derive(Clone)]
pub struct Gate {
    pub sem: Arc<Semaphore>,
    pub entered: Arc<AtomicU64>,
    pub notify: Arc<Notify>,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            sem: Arc::new(Semaphore::new(0)),
            entered: Arc::new(AtomicU64::new(0)),
            notify: Arc::new(Notify::new()),
        }
    }
}

impl Gate {
    pub fn open(&self) {
        self.sem.close();
    }
    pub fn entered(&self) -> u64 {
        self.entered.load(Ordering::SeqCst)
    }
    /// Waits until at least `n` handlers have entered (no sleeps: each entry
    /// notifies).
    pub async fn wait_entered(&self, n: u64) {
        loop {
            let notified = self.notify.notified();
            if self.entered() >= n {
                return;
            }
            notified.await;
        }
    }
    fn enter(&self) {
        self.entered.fetch_add(1, Ordering::SeqCst);
        self.notify.notify_waiters();
    }
}

struct AsyncGate(Gate);
struct BlockingGate(Gate);

impl warpline_engine::Stage for AsyncGate {}

#[async_trait]
impl AsyncStage for AsyncGate {
    async fn process(&self, _item: &mut Item) -> Result<Outcome, StageError> {
        self.0.enter();
        let _ = self.0.sem.acquire().await;
        Ok(Outcome::Continue)
    }
}

impl warpline_engine::Stage for BlockingGate {}

impl BlockingStage for BlockingGate {
    fn process(&self, _item: &mut Item) -> Result<Outcome, StageError> {
        self.0.enter();
        let _ = futures::executor::block_on(self.0.sem.acquire());
        Ok(Outcome::Continue)
    }
}

/// Measures concurrency inside the stages that share it.
#[derive(Clone, Default)]
pub struct Inside {
    state: Arc<Mutex<InsideState>>,
}

#[derive(Default, Debug, Clone, Copy)]
pub struct InsideState {
    pub items: u64,
    pub bytes: u64,
    pub peak_items: u64,
    pub peak_bytes: u64,
    /// Times an item larger than `alone_over` shared the stage.
    pub shared_while_oversize: u64,
    oversize_inside: u64,
}

impl Inside {
    pub fn snapshot(&self) -> InsideState {
        *self.state.lock().unwrap()
    }
    fn enter(&self, bytes: u64, alone_over: u64) {
        let mut s = self.state.lock().unwrap();
        s.items += 1;
        s.bytes += bytes;
        s.peak_items = s.peak_items.max(s.items);
        s.peak_bytes = s.peak_bytes.max(s.bytes);
        if bytes > alone_over {
            s.oversize_inside += 1;
        }
        if s.oversize_inside > 0 && s.items > 1 {
            s.shared_while_oversize += 1;
        }
    }
    fn leave(&self, bytes: u64, alone_over: u64) {
        let mut s = self.state.lock().unwrap();
        s.items -= 1;
        s.bytes -= bytes;
        if bytes > alone_over {
            s.oversize_inside -= 1;
        }
    }
}

struct Measure {
    inside: Inside,
    hold: Duration,
    alone_over: u64,
}

impl warpline_engine::Stage for Measure {}

#[async_trait]
impl AsyncStage for Measure {
    async fn process(&self, item: &mut Item) -> Result<Outcome, StageError> {
        let bytes = item.size_hint.unwrap_or(0);
        self.inside.enter(bytes, self.alone_over);
        tokio::time::sleep(self.hold).await;
        self.inside.leave(bytes, self.alone_over);
        Ok(Outcome::Continue)
    }
}

struct MeasureBlocking {
    inside: Inside,
    hold: Duration,
}

impl warpline_engine::Stage for MeasureBlocking {}

impl BlockingStage for MeasureBlocking {
    fn process(&self, item: &mut Item) -> Result<Outcome, StageError> {
        let bytes = item.size_hint.unwrap_or(0);
        self.inside.enter(bytes, u64::MAX);
        std::thread::sleep(self.hold);
        self.inside.leave(bytes, u64::MAX);
        Ok(Outcome::Continue)
    }
}

/// A registry with the built-ins plus `counted` (source, `count`), `gate`
/// and `gate_blocking` (stages), `measure` (async, holds 1 ms of tokio time)
/// and `measure_blocking` (holds 100 µs of real time).
pub fn registry(produced: &Produced, gate: &Gate, inside: &Inside, alone_over: u64) -> Registry {
    let mut r = Registry::with_builtins();
    let p = produced.clone();
    r.register_source("counted", move |s| {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct C {
            count: u64,
        }
        let c: C = s.parse()?;
        Ok(Arc::new(Counted {
            count: c.count,
            produced: p.clone(),
        }) as Arc<dyn SourceSpec>)
    });
    let g = gate.clone();
    r.register_stage("gate", move |_| {
        Ok(Handler::from_async(AsyncGate(g.clone())))
    });
    let g = gate.clone();
    r.register_stage("gate_blocking", move |_| {
        Ok(Handler::from_blocking(BlockingGate(g.clone())))
    });
    let i = inside.clone();
    r.register_stage("measure", move |_| {
        Ok(Handler::from_async(Measure {
            inside: i.clone(),
            hold: Duration::from_millis(1),
            alone_over,
        }))
    });
    let i = inside.clone();
    r.register_stage("measure_blocking", move |_| {
        Ok(Handler::from_blocking(MeasureBlocking {
            inside: i.clone(),
            hold: Duration::from_micros(100),
        }))
    });
    r
}

pub use warpline_testkit::pipelines::generated;

/// The errors the built-in kinds find in `toml` (panics when it is valid).
pub fn errors(toml: &str) -> warpline_engine::ConfigErrors {
    match warpline_engine::Pipeline::from_toml_str(toml, &Registry::with_builtins()) {
        Ok(_) => panic!("expected errors for:\n{toml}"),
        Err(e) => e,
    }
}

/// Asserts one problem is at `path` and its message contains `words`.
pub fn assert_problem(e: &warpline_engine::ConfigErrors, path: &str, words: &str) {
    assert!(
        e.problems
            .iter()
            .any(|p| p.path == path && p.message.contains(words)),
        "no problem at `{path}` containing {words:?} in:\n{e}"
    );
}

/// The three test kinds, fresh (a produced count, a closed gate and an
/// empty concurrency measure), and the [`registry`] that uses them.
pub fn kinds(alone_over: u64) -> (Produced, Gate, Inside, Registry) {
    let (p, g, i) = (Produced::default(), Gate::default(), Inside::default());
    let r = registry(&p, &g, &i, alone_over);
    (p, g, i, r)
}

/// `count` generated items through a `held` (the gate kind) -> `sink` flow
/// whose stage and limiter tables are `stages`, spawned with the default
/// options: the closed gate and the run's handle.
pub fn spawn_held_then_sink(count: u64, stages: &str) -> (Gate, warpline_engine::RunHandle) {
    let (_, gate, _, registry) = kinds(u64::MAX);
    let pipeline =
        warpline_engine::Loader::from_toml_str(&generated(&["held", "sink"], count, stages))
            .load(&registry)
            .unwrap();
    (gate, pipeline.spawn(warpline_engine::RunOptions::default()))
}

pub use warpline_testkit::runtime;

/// Starts `pipeline` in a task of its own under a fresh control: the
/// control (to stop or abort it) and the task (its report).
pub fn spawn_run(
    pipeline: &Arc<warpline_engine::Pipeline>,
) -> (
    warpline_engine::RunControl,
    tokio::task::JoinHandle<Result<warpline_engine::RunReport, warpline_engine::RunError>>,
) {
    let control = warpline_engine::RunControl::new();
    let run = {
        let (pipeline, control) = (Arc::clone(pipeline), control.clone());
        tokio::spawn(async move { pipeline.run_with(&control).await })
    };
    (control, run)
}

/// `count` inputs, all URLs on one host (for rate and adaptive tests).
pub struct Urls(pub u64);

struct UrlsRun(u64, u64);

impl SourceSpec for Urls {
    fn open(&self) -> Result<Box<dyn Source>, warpline_engine::OpenError> {
        Ok(Box::new(UrlsRun(0, self.0)))
    }
}

#[async_trait]
impl Source for UrlsRun {
    async fn next(&mut self) -> Option<Result<Input, SourceError>> {
        if self.0 == self.1 {
            return None;
        }
        self.0 += 1;
        Some(Ok(Input {
            id: format!("t{}", self.0),
            source: format!("http://127.0.0.1:8931/t{}.tif", self.0),
            size_hint: None,
            meta: Default::default(),
        }))
    }
}
