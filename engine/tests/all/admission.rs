//! The admission bound: with every handler blocked, the source produces
//! exactly `1 + sum(W + Q)` items and not one more, whatever the input size.
//! Quiescence is detected with paused tokio time: time only jumps forward
//! when no task can make progress, so after the long sleep below nothing in
//! the pipeline can move any more.

use crate::common;

use std::time::Duration;

use warpline_engine::Pipeline;

const INPUTS: u64 = 100_000;

async fn measure(stages: &[(u32, u32)]) -> (u64, u64) {
    let (produced, gate, _, registry) = common::kinds(u64::MAX);
    let mut toml = format!(
        "[pipeline]\nflow = [{}]\n[source]\nkind = \"counted\"\ncount = {INPUTS}\n",
        (0..stages.len())
            .map(|i| format!("\"s{i}\""))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (i, (w, q)) in stages.iter().enumerate() {
        // Every stage but the last passes items straight on; the last blocks.
        let kind = if i + 1 == stages.len() {
            "gate"
        } else {
            "hold"
        };
        toml += &format!("[stages.s{i}]\nkind = \"{kind}\"\nworkers = {w}\nmailbox = {q}\n");
    }
    let pipeline = Pipeline::from_toml_str(&toml, &registry).unwrap();
    let bound = pipeline.admission_bound();
    let last_workers = u64::from(stages.last().unwrap().0);

    let run = tokio::spawn(async move { pipeline.run().await });
    gate.wait_entered(last_workers).await;
    tokio::time::sleep(Duration::from_secs(3600)).await;
    let held = produced.get();
    assert_eq!(
        gate.entered(),
        last_workers,
        "only W handlers can be inside the last stage"
    );

    gate.open();
    let report = run.await.unwrap().unwrap();
    assert_eq!(
        report.items.done, INPUTS,
        "every item finishes once the gate opens"
    );
    (held, bound)
}

#[tokio::test(start_paused = true)]
async fn admission_bound_is_w_plus_q_plus_one_for_one_stage() {
    for (w, q) in [(1, 1), (1, 5), (3, 1), (4, 8), (8, 2)] {
        let (held, bound) = measure(&[(w, q)]).await;
        assert_eq!(bound, u64::from(w + q + 1));
        assert_eq!(
            held, bound,
            "W={w} Q={q}: source produced {held}, bound {bound}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn admission_bound_of_three_stages_is_the_sum_of_the_stages_plus_one() {
    for stages in [[(1, 1), (1, 1), (1, 1)], [(2, 3), (4, 1), (3, 5)]] {
        let (held, bound) = measure(&stages).await;
        let expected = 1 + stages.iter().map(|(w, q)| u64::from(w + q)).sum::<u64>();
        assert_eq!(bound, expected);
        assert_eq!(
            held, bound,
            "{stages:?}: source produced {held}, bound {bound}"
        );
    }
}
