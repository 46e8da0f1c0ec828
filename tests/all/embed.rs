//! Embedding warpline: custom kinds from a test used from TOML, pipelines
//! built in code, and many pipelines spawned at once on a multi-threaded
//! runtime drawing on shared limiters.

use crate::common;

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures::StreamExt;
use serde_json::json;
use warpline::{
    async_trait, AsyncStage, BlockingStage, EventKind, Handler, Input, Item, Limiter, Limits,
    Outcome, PipelineBuilder, RunOptions, Source, SourceError, SourceSpec, StageError,
};

/// A custom source: the words of a sentence.
struct Words(String);
struct WordsRun(std::vec::IntoIter<String>);

impl SourceSpec for Words {
    fn open(&self) -> Result<Box<dyn Source>, warpline::OpenError> {
        let words: Vec<String> = self.0.split_whitespace().map(str::to_owned).collect();
        Ok(Box::new(WordsRun(words.into_iter())))
    }
}

#[async_trait]
impl Source for WordsRun {
    async fn next(&mut self) -> Option<Result<Input, SourceError>> {
        let w = self.0.next()?;
        Some(Ok(Input {
            id: w.clone(),
            source: format!("word:{w}"),
            size_hint: None,
            meta: Default::default(),
        }))
    }
}

/// A custom async stage: puts the word in the payload, upper-cased.
struct Shout;

impl warpline::Stage for Shout {}

#[async_trait]
impl AsyncStage for Shout {
    async fn process(&self, item: &mut Item) -> Result<Outcome, StageError> {
        item.set_payload(item.id.to_uppercase());
        Ok(Outcome::Continue)
    }
}

/// A custom blocking stage: counts letters of the payload.
struct Count(Arc<AtomicU64>);

impl warpline::Stage for Count {}

impl BlockingStage for Count {
    fn process(&self, item: &mut Item) -> Result<Outcome, StageError> {
        let word = item
            .take_payload::<String>()
            .ok_or_else(|| StageError::permanent(format!("{}: no word", item.id)))?;
        self.0.fetch_add(word.len() as u64, Ordering::Relaxed);
        Ok(Outcome::Continue)
    }
}

#[tokio::test]
async fn custom_stages_and_sources_are_usable_from_toml() {
    let letters = Arc::new(AtomicU64::new(0));
    let mut registry = warpline::registry();
    registry.register_source("words", |s| {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct W {
            text: String,
        }
        let w: W = s.parse()?;
        Ok(Arc::new(Words(w.text)) as Arc<dyn SourceSpec>)
    });
    registry.register_stage("shout", |_| Ok(Handler::from_async(Shout)));
    let l = Arc::clone(&letters);
    registry.register_stage("count", move |_| {
        Ok(Handler::from_blocking(Count(Arc::clone(&l))))
    });
    let pipeline = warpline::Pipeline::from_toml_str(
        r#"
        [pipeline]
        flow = ["shout", "count"]
        [source]
        kind = "words"
        text = "a tile server far away"
        [stages.shout]
        kind = "shout"
        [stages.count]
        kind = "count"
        workers = 2
        "#,
        &registry,
    )
    .unwrap();
    let report = pipeline.run().await.unwrap();
    assert_eq!(report.items.done, 5);
    assert_eq!(letters.load(Ordering::Relaxed), 18);
    // A misspelt setting of a custom kind is still an error with its path.
    let e = warpline::Pipeline::from_toml_str(
        "[pipeline]\nflow=[\"s\"]\n[source]\nkind=\"words\"\ntxt=\"x\"\n[stages.s]\nkind=\"shout\"\n",
        &registry,
    )
    .unwrap_err();
    assert!(e.to_string().contains("unknown field `txt`"), "{e}");
}

#[tokio::test]
async fn a_builder_makes_the_same_pipeline_as_a_file() {
    let built = PipelineBuilder::new("built")
        .setting("on_error", "continue")
        .source("generate", json!({ "count": 30 }))
        .limit("cpu", json!({ "permits": 2 }))
        .stage(
            "work",
            "hold",
            json!({ "workers": 3, "limits": ["cpu"], "duration": "1ms" }),
        )
        .stage("sink", "discard", json!(null))
        .build(&warpline::registry())
        .unwrap();
    assert_eq!(built.name(), "built");
    let names: Vec<&str> = built.stages().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["work", "sink"]);
    let report = built.run().await.unwrap();
    assert_eq!(report.items.done, 30);
    // Errors from a builder name their key path, as from a file.
    let e = PipelineBuilder::new("bad")
        .source("generate", json!({ "count": 1 }))
        .stage("work", "hold", json!({ "workers": 0 }))
        .build(&warpline::registry())
        .unwrap_err();
    assert!(
        e.problems.iter().any(|p| p.path == "stages.work.workers"),
        "{e}"
    );
}

#[test]
fn many_pipelines_spawned_from_many_tasks_share_limiters() {
    let rt = common::runtime();
    let mut shared = Limits::new();
    shared
        .add(Limiter::count("slots", NonZeroU32::new(3).unwrap()))
        .unwrap();
    let shared = Arc::new(shared);
    let inside = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicU64::new(0));
    rt.block_on(async {
        let mut tasks = Vec::new();
        for n in 0..8 {
            let (shared, inside, peak) =
                (Arc::clone(&shared), Arc::clone(&inside), Arc::clone(&peak));
            tasks.push(tokio::spawn(async move {
                struct Measure(Arc<AtomicU64>, Arc<AtomicU64>);
                impl warpline::Stage for Measure {}

                impl BlockingStage for Measure {
                    fn process(&self, _: &mut Item) -> Result<Outcome, StageError> {
                        let now = self.0.fetch_add(1, Ordering::SeqCst) + 1;
                        self.1.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(std::time::Duration::from_micros(300));
                        self.0.fetch_sub(1, Ordering::SeqCst);
                        Ok(Outcome::Continue)
                    }
                }
                let mut registry = warpline::registry();
                registry.register_stage("measure", move |_| {
                    Ok(Handler::from_blocking(Measure(
                        Arc::clone(&inside),
                        Arc::clone(&peak),
                    )))
                });
                let pipeline = PipelineBuilder::new(&format!("p{n}"))
                    .source("generate", json!({ "count": 40 }))
                    .limit("slots", json!({ "shared": true }))
                    .stage(
                        "work",
                        "measure",
                        json!({ "workers": 3, "limits": ["slots"] }),
                    )
                    .with_limits(&shared)
                    .build(&registry)
                    .unwrap();
                let handle = pipeline.spawn(RunOptions::default());
                let mut events = handle.events();
                let first = events.next().await;
                let report = handle.report().await.unwrap();
                (report, first)
            }));
        }
        for t in tasks {
            let (report, first) = t.await.unwrap();
            assert_eq!(report.items.done, 40);
            assert!(first.is_some_and(|e| !matches!(e.kind, EventKind::RunFinished { .. })));
        }
    });
    assert!(
        peak.load(Ordering::SeqCst) <= 3,
        "{} holders over 3 shared slots",
        peak.load(Ordering::SeqCst)
    );
    assert!(
        peak.load(Ordering::SeqCst) >= 2,
        "the pipelines did overlap"
    );
    assert_eq!(shared.get("slots").unwrap().available(), 3);
}
