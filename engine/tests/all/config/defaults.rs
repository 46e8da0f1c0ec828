//! What a pipeline gets where it says nothing (issue 37): workers per core
//! for kinds that work on the CPU, a memory budget of half the machine's
//! memory (or of its cgroup's limit), put where the stages charge it as
//! they charge a declared one; what the file declares wins, and a default
//! never makes a valid file invalid. The machine is given to each test.

use async_trait::async_trait;
use serde::Deserialize;
use warpline_engine::defaults::{MemoryFrom, WorkersFrom};
use warpline_engine::limit::LimiterKind;
use warpline_engine::machine::{Machine, MachineMemory};
use warpline_engine::registry::{DefaultCharge, KindDefaults};
use warpline_engine::{AsyncStage, Handler, Item, Loader, Outcome, Pipeline, Registry, StageError};

const GIB: u64 = 1 << 30;

/// A machine with `cores` and `ram_gib` GiB of RAM, no cgroup limit.
fn machine(cores: u32, ram_gib: u64) -> Machine {
    Machine {
        cores,
        ram: Some(ram_gib * GIB),
        cgroup_limit: None,
    }
}

/// A stage that charges a byte budget by its own setting `memory`, as
/// fetch does (here by the item's size hint).
struct Reader(Option<warpline_engine::Limiter>);

impl warpline_engine::Stage for Reader {}

#[async_trait]
impl AsyncStage for Reader {
    async fn process(&self, item: &mut Item) -> Result<Outcome, StageError> {
        if let Some(m) = &self.0 {
            let t = m
                .resize(None, item.size_hint.unwrap_or(0))
                .await
                .map_err(|e| StageError::permanent(e.to_string()))?;
            item.keep(t);
        }
        Ok(Outcome::Continue)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReaderSettings {
    memory: Option<String>,
}

/// The synthetic kinds, with `hold` a kind that works on the CPU and
/// charges the default budget in its `limits` (as decode and reproject
/// do), and `reader` one that charges it by its own setting (as fetch).
fn registry() -> Registry {
    let mut r = Registry::with_builtins();
    r.register_stage("reader", |s| {
        let c: ReaderSettings = s.parse()?;
        let m = match c.memory {
            Some(name) => Some(
                s.limiter("memory", &name, LimiterKind::Bytes)
                    .map_err(|p| vec![p])?,
            ),
            None => None,
        };
        Ok(Handler::from_async(Reader(m)))
    });
    r.set_defaults(
        "hold",
        KindDefaults {
            workers_per_core: true,
            memory: DefaultCharge::Limits,
        },
    );
    r.set_defaults(
        "reader",
        KindDefaults {
            workers_per_core: false,
            memory: DefaultCharge::Setting("memory"),
        },
    );
    r
}

/// The smallest pipeline of these kinds, with `extra` lines at the end of
/// the file (tables of their own, or keys of `[stages.work]`).
fn smallest(extra: &str) -> String {
    format!(
        "[pipeline]\nflow = [\"read\", \"work\"]\n[source]\nkind = \"generate\"\ncount = 20\n\
         size = \"64KiB\"\n[stages.read]\nkind = \"reader\"\n[stages.work]\nkind = \"hold\"\n\
         duration = \"1ms\"\n{extra}"
    )
}

fn load(toml: &str, m: Machine) -> Pipeline {
    Loader::from_toml_str(toml)
        .with_machine(m)
        .load(&registry())
        .unwrap_or_else(|e| panic!("{e}"))
}

fn names(p: &Pipeline) -> Vec<&str> {
    p.limits().iter().map(|l| l.name()).collect()
}

#[test]
fn defaults_resolve_from_the_core_count_and_the_ram() {
    let p = load(&smallest(""), machine(3, 8));
    let work = &p.stages()[1];
    assert_eq!((work.workers, work.mailbox), (3, 3));
    assert_eq!(work.workers_from, WorkersFrom::Cores { cores: 3 });
    // A kind without the per-core default keeps one worker.
    assert_eq!(p.stages()[0].workers, 1);
    assert_eq!(p.stages()[0].workers_from, WorkersFrom::One);
    let memory = p.limits().get("memory").expect("the default budget");
    assert_eq!(memory.kind(), LimiterKind::Bytes);
    assert_eq!(memory.capacity(), 4 * GIB);
    assert_eq!(
        p.memory(),
        &MemoryFrom::Machine {
            budget: 4 * GIB,
            memory: MachineMemory::Ram { bytes: 8 * GIB }
        }
    );
    assert!(p.is_default_limiter("memory"));
    // Charged where a declared one would be: in the work stage's limits,
    // carried on, and by the reader's own setting.
    assert_eq!(
        work.limits.iter().map(|l| l.name()).collect::<Vec<_>>(),
        ["memory"]
    );
    assert_eq!(work.carry, ["memory"]);
    assert_eq!(p.stages()[0].charges[0].name(), "memory");
}

#[test]
fn a_cgroup_limit_below_the_ram_sizes_the_budget() {
    let root = tempfile::tempdir().unwrap();
    let put = |path: &str, text: &str| {
        let p = root.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    put("proc/meminfo", "MemTotal:       16777216 kB\n");
    put("proc/self/cgroup", "0::/\n");
    put("sys/fs/cgroup/memory.max", "1073741824\n");
    let p = load(&smallest(""), Machine::read(root.path(), 2));
    assert_eq!(p.limits().get("memory").unwrap().capacity(), 512 << 20);
    assert_eq!(
        p.memory(),
        &MemoryFrom::Machine {
            budget: 512 << 20,
            memory: MachineMemory::Cgroup {
                bytes: GIB,
                file: "/sys/fs/cgroup/memory.max".into()
            }
        }
    );
    assert_eq!(p.stages()[1].workers, 2);
}

#[test]
fn what_the_file_declares_wins() {
    let declared = smallest("workers = 2\nlimits = [\"mem\"]\n[limits.mem]\nbudget = \"1MiB\"\n");
    let p = load(&declared, machine(8, 8));
    assert_eq!(p.stages()[1].workers, 2);
    assert_eq!(p.stages()[1].workers_from, WorkersFrom::Declared);
    assert_eq!(names(&p), ["descriptors", "mem"]);
    assert_eq!(
        p.memory(),
        &MemoryFrom::Declared {
            limiters: vec!["mem".into()]
        }
    );
    assert!(!p.is_default_limiter("mem"));
    // An override declares as the file does.
    let p = Loader::from_toml_str(&smallest(""))
        .with_machine(machine(8, 8))
        .set("stages.work.workers", "1")
        .load(&registry())
        .unwrap();
    assert_eq!(p.stages()[1].workers, 1);
    assert_eq!(p.stages()[1].workers_from, WorkersFrom::Declared);
}

#[test]
fn pipeline_memory_sizes_the_default_budget_or_turns_it_off() {
    let sized = load(
        &smallest("").replace("[pipeline]\n", "[pipeline]\nmemory = \"64MiB\"\n"),
        machine(2, 8),
    );
    assert_eq!(sized.limits().get("memory").unwrap().capacity(), 64 << 20);
    assert_eq!(sized.memory(), &MemoryFrom::Setting { budget: 64 << 20 });
    let off = load(
        &smallest("").replace("[pipeline]\n", "[pipeline]\nmemory = \"unbounded\"\n"),
        machine(2, 8),
    );
    assert!(off.limits().get("memory").is_none());
    assert!(off.stages()[1].limits.is_empty());
    match off.memory() {
        MemoryFrom::Unbounded { why } => assert!(why.contains("memory = \"unbounded\""), "{why}"),
        other => panic!("{other:?}"),
    }
    // Still a worker per core: only the budget is off.
    assert_eq!(off.stages()[1].workers, 2);
}

#[test]
fn pipeline_memory_beside_a_declared_budget_is_a_problem() {
    let toml = smallest("limits = [\"mem\"]\n[limits.mem]\nbudget = \"1MiB\"\n")
        .replace("[pipeline]\n", "[pipeline]\nmemory = \"2GiB\"\n");
    let e = Loader::from_toml_str(&toml)
        .with_machine(machine(2, 8))
        .load(&registry())
        .unwrap_err();
    assert_eq!(e.problems.len(), 1, "{e}");
    assert_eq!(e.problems[0].path, "pipeline.memory");
    assert!(e.problems[0].message.contains("[limits.mem]"), "{e}");
}

#[test]
fn a_bad_pipeline_memory_names_its_key() {
    let toml = smallest("").replace("[pipeline]\n", "[pipeline]\nmemory = \"lots\"\n");
    let e = Loader::from_toml_str(&toml)
        .with_machine(machine(2, 8))
        .load(&registry())
        .unwrap_err();
    assert!(
        e.problems.iter().any(|p| p.path == "pipeline.memory"
            && p.message.contains("\"auto\", \"unbounded\" or a size")),
        "{e}"
    );
}

#[test]
fn the_default_budget_takes_its_place_in_the_acquisition_order() {
    // The reader holds `connections` while it charges the budget, and
    // `work` takes `cpu` while its items carry it: connections, memory,
    // cpu.
    let toml = smallest(
        "limits = [\"cpu\"]\n[limits.connections]\npermits = 4\n[limits.cpu]\npermits = 2\n",
    )
    .replace(
        "kind = \"reader\"\n",
        "kind = \"reader\"\nlimits = [\"connections\"]\n",
    );
    let p = load(&toml, machine(2, 8));
    assert_eq!(names(&p), ["descriptors", "connections", "memory", "cpu"]);
    assert!(p.memory().default_budget().is_some());
}

#[test]
fn a_default_budget_that_cannot_fit_the_order_is_left_out_and_said() {
    // The reader holds `cpu` while it charges the budget, so the budget
    // goes after `cpu`; but `work` waits for `cpu` while its items carry
    // the budget. The file is valid without the default: it compiles,
    // unbounded, and says why.
    let toml = smallest("limits = [\"cpu\"]\n[limits.cpu]\npermits = 2\n").replace(
        "kind = \"reader\"\n",
        "kind = \"reader\"\nlimits = [\"cpu\"]\n",
    );
    let p = load(&toml, machine(2, 8));
    assert!(p.limits().get("memory").is_none());
    match p.memory() {
        MemoryFrom::Unbounded { why } => {
            assert!(why.contains("does not fit"), "{why}");
            assert!(why.contains("[limits.memory]"), "{why}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_pipeline_whose_stages_charge_nothing_is_unbounded_and_says_how_to_bound_it() {
    let toml = "[pipeline]\nflow = [\"sink\"]\n[source]\nkind = \"generate\"\ncount = 1\n\
                [stages.sink]\nkind = \"discard\"\n";
    let p = load(toml, machine(2, 8));
    match p.memory() {
        MemoryFrom::Unbounded { why } => assert!(why.contains("[limits.memory]"), "{why}"),
        other => panic!("{other:?}"),
    }
    // Without the registry's defaults (the engine's own kinds), nothing
    // changes: one worker.
    let p = Loader::from_toml_str(&smallest("").replace("reader", "hold"))
        .with_machine(machine(4, 8))
        .load(&Registry::with_builtins())
        .unwrap();
    assert_eq!(p.stages()[1].workers, 1);
    assert!(p.memory().is_unbounded());
}

#[test]
fn a_machine_whose_memory_is_unknown_gets_no_default_budget() {
    let m = Machine {
        cores: 2,
        ram: None,
        cgroup_limit: None,
    };
    let p = load(&smallest(""), m);
    match p.memory() {
        MemoryFrom::Unbounded { why } => assert!(why.contains("memory = \"2GiB\""), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn the_stages_charge_the_default_budget_as_a_declared_one() {
    // 20 items of 64 KiB, the budget half of a 1 MiB "machine": 512 KiB,
    // so at most 8 items hold their share at once, and some do.
    let m = Machine {
        cores: 2,
        ram: Some(1 << 20),
        cgroup_limit: None,
    };
    let p = load(&smallest(""), m);
    let report = p.run().await.unwrap();
    assert_eq!(report.items.done, 20);
    let memory = report.limiter("memory").expect("the default budget");
    let peak = memory.peak_in_use.unwrap();
    assert!((64 << 10..=512 << 10).contains(&peak), "{peak}");
}
