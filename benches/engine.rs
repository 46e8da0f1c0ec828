//! Engine overhead: items per second through 4 pass-through stages, against
//! a chain of plain bounded channels (async-channel, one tokio task per
//! stage) with the same capacities, in the same run.
//!
//!     cargo bench --bench engine
//!
//! Per item per stage, the engine's cost is `time / (ITEMS * STAGES)`; the
//! overhead over bare channels is the difference between the two figures.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const ITEMS: u64 = 20_000;
const STAGES: usize = 4;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn pipeline(workers: u32, mailbox: u32) -> warpline::Pipeline {
    let mut toml = format!(
        "[pipeline]\nflow = [{}]\n[source]\nkind = \"generate\"\ncount = {ITEMS}\n",
        (0..STAGES)
            .map(|i| format!("\"s{i}\""))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for i in 0..STAGES {
        toml +=
            &format!("[stages.s{i}]\nkind = \"hold\"\nworkers = {workers}\nmailbox = {mailbox}\n");
    }
    warpline::Pipeline::from_toml_str(&toml, &warpline::registry()).expect("valid")
}

/// The same shape with nothing but bounded channels and tasks.
async fn bare_chain(workers: usize, mailbox: usize) {
    struct Item {
        _id: String,
        _source: String,
    }
    let (first_tx, mut rx) = async_channel::bounded::<Item>(mailbox);
    let mut tasks = Vec::new();
    for _ in 0..STAGES {
        let (tx, next_rx) = async_channel::bounded::<Item>(mailbox);
        for _ in 0..workers {
            let (rx, tx) = (rx.clone(), tx.clone());
            tasks.push(tokio::spawn(async move {
                while let Ok(item) = rx.recv().await {
                    if tx.send(item).await.is_err() {
                        break;
                    }
                }
            }));
        }
        rx = next_rx;
    }
    let sink = tokio::spawn(async move { while rx.recv().await.is_ok() {} });
    for n in 0..ITEMS {
        let item = Item {
            _id: format!("item-{n:05}"),
            _source: format!("generate:{n}"),
        };
        first_tx.send(item).await.expect("chain open");
    }
    drop(first_tx);
    for t in tasks {
        t.await.expect("stage task");
    }
    sink.await.expect("sink");
}

fn overhead(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("four_pass_through_stages");
    group.throughput(Throughput::Elements(ITEMS));
    group.sample_size(20);
    for (workers, mailbox) in [(1usize, 64usize), (2, 16)] {
        let label = format!("w{workers}_q{mailbox}");
        let p = pipeline(workers as u32, mailbox as u32);
        group.bench_function(BenchmarkId::new("warpline", &label), |b| {
            b.to_async(&rt).iter(|| async {
                let report = p.run().await.expect("run");
                assert_eq!(report.items.done, ITEMS);
            })
        });
        group.bench_function(BenchmarkId::new("bare_channels", &label), |b| {
            b.to_async(&rt).iter(|| bare_chain(workers, mailbox))
        });
    }
    group.finish();
}

criterion_group!(benches, overhead);
criterion_main!(benches);
