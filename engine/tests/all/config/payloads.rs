//! A flow that hands a stage the wrong payload type: two tiny stages that
//! declare their payloads, one hands on a word, the other takes a number.

use warpline_engine::{
    async_trait, AsyncStage, BlockingStage, Handler, Item, Outcome, Payload, Pipeline, Registry,
    StageError,
};

struct Speaks;

impl warpline_engine::Stage for Speaks {
    fn hands_on(&self) -> Payload {
        Payload::of::<String>("a word")
    }
}

#[async_trait]
impl AsyncStage for Speaks {
    async fn process(&self, item: &mut Item) -> Result<Outcome, StageError> {
        item.set_payload(item.id.clone());
        Ok(Outcome::Continue)
    }
}

struct Counts;

impl warpline_engine::Stage for Counts {
    fn takes(&self) -> Payload {
        Payload::of::<u64>("a number")
    }
}

impl BlockingStage for Counts {
    fn process(&self, item: &mut Item) -> Result<Outcome, StageError> {
        item.take_payload::<u64>();
        Ok(Outcome::Continue)
    }
}

fn registry() -> Registry {
    let mut r = Registry::with_builtins();
    r.register_stage("speak", |_| Ok(Handler::from_async(Speaks)));
    r.register_stage("count", |_| Ok(Handler::from_blocking(Counts)));
    r
}

fn flow(stages: &[&str]) -> String {
    let mut toml =
        format!("[pipeline]\nflow = {stages:?}\n[source]\nkind = \"generate\"\ncount = 1\n");
    for s in stages {
        let kind = if *s == "wait" { "hold" } else { s };
        toml.push_str(&format!("[stages.{s}]\nkind = \"{kind}\"\n"));
    }
    toml
}

#[test]
fn a_flow_that_hands_a_stage_the_wrong_payload_type_fails_validation() {
    let e = match Pipeline::from_toml_str(&flow(&["speak", "count"]), &registry()) {
        Ok(_) => panic!("a word handed to a stage that takes a number"),
        Err(e) => e,
    };
    super::assert_problem(&e, "pipeline.flow[1]", "stage `count` takes a number (u64)");
    super::assert_problem(&e, "pipeline.flow[1]", "but `speak` hands on a word (");
    assert_eq!(e.problems.len(), 1, "{e}");
    // Each alone, the other way round, or with a stage between them that
    // declares nothing (any payload): nothing to say.
    for ok in [
        &["speak"][..],
        &["count"],
        &["count", "speak"],
        &["speak", "wait", "count"],
    ] {
        if let Err(e) = Pipeline::from_toml_str(&flow(ok), &registry()) {
            panic!("{ok:?}: {e}");
        }
    }
}
