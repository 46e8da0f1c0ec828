//! The defaults written into a pipeline's tables before it compiles, as a
//! file would say them, so the stages take them by the same code as what a
//! file declares: `workers = <cores>` for a kind that works on the CPU, and
//! the default memory budget (`[limits.memory]`, put in the `limits` and
//! `carry` of the kinds that charge it there, or named by their own
//! setting, fetch's `memory`). Nothing the file (or an override) says is
//! changed. The types that say what was put in, and why, are
//! [`crate::defaults`]'s.
//!
//! The budget goes into the one acquisition order after every limiter a
//! stage holds while it charges the budget by its own setting (fetch's
//! `connections`), and before the rest (`cpu`). Where that order cannot
//! hold (a stage waits for a limiter declared before the budget while its
//! items carry some), the compile fails with the budget; it is then
//! compiled again without, and the pipeline says its memory is not bounded
//! and why (see `Loader::load`): a default never makes a valid pipeline
//! invalid.

use std::collections::HashMap;

use config::{Map, Value, ValueKind};

use super::{join, Problem};
use crate::defaults::{budget_of, MemoryFrom, MemorySetting, WorkersFrom, MEMORY, TURNED_OFF};
use crate::limit::{LimiterKind, Limits};
use crate::machine::Machine;
use crate::registry::{DefaultCharge, KindDefaults, Registry};

/// Whether a compile may put the default memory budget in.
#[derive(Debug, Clone)]
pub(crate) enum MemoryDefault {
    /// Yes, where it applies.
    Try,
    /// No: a compile with it failed, for this reason.
    DoesNotFit(String),
}

/// What the defaults for a compile are taken from.
#[derive(Debug, Clone)]
pub(crate) struct Defaults<'a> {
    pub machine: &'a Machine,
    pub memory: MemoryDefault,
}

/// What was put in, and where each figure came from.
#[derive(Debug)]
pub(super) struct Applied {
    pub memory: MemoryFrom,
    /// Whether the default budget was put in.
    pub put_memory: bool,
    /// Each stage's workers, by stage name.
    pub workers: HashMap<String, WorkersFrom>,
}

/// A stage table's kind and the kind's defaults.
struct StageDefaults {
    name: String,
    defaults: KindDefaults,
}

/// Puts the defaults into `root` (the file with its overrides, without its
/// `[pipeline]` table, read already as `setting`).
pub(super) fn apply(
    root: &mut Map<String, Value>,
    setting: Option<MemorySetting>,
    registry: &Registry,
    shared: Option<&Limits>,
    defaults: &Defaults<'_>,
    problems: &mut Vec<Problem>,
) -> Applied {
    let mut workers = HashMap::new();
    let mut kinds = Vec::new();
    for (name, table) in stage_tables(root) {
        let kind = table
            .get("kind")
            .and_then(|k| k.clone().into_string().ok())
            .map(|k| registry.defaults(&k))
            .unwrap_or_default();
        let from = if table.contains_key("workers") {
            WorkersFrom::Declared
        } else if kind.workers_per_core {
            let cores = defaults.machine.cores;
            table.insert("workers".into(), Value::from(cores));
            WorkersFrom::Cores { cores }
        } else {
            WorkersFrom::One
        };
        workers.insert(name.clone(), from);
        kinds.push(StageDefaults {
            name: name.clone(),
            defaults: kind,
        });
    }
    let memory = match memory_bound(root, setting, &kinds, shared, defaults, problems) {
        Ok((budget, from)) => {
            put_budget(root, budget, &kinds);
            return Applied {
                memory: from,
                put_memory: true,
                workers,
            };
        }
        Err(from) => from,
    };
    Applied {
        memory,
        put_memory: false,
        workers,
    }
}

/// The stage tables of `root`, by name (those that are tables).
fn stage_tables(root: &mut Map<String, Value>) -> Vec<(&String, &mut Map<String, Value>)> {
    let Some(Value {
        kind: ValueKind::Table(stages),
        ..
    }) = root.get_mut("stages")
    else {
        return Vec::new();
    };
    stages
        .iter_mut()
        .filter_map(|(name, v)| match &mut v.kind {
            ValueKind::Table(t) => Some((name, t)),
            _ => None,
        })
        .collect()
}

/// The `[limits]` table's entries, by name (empty when there is none).
fn limit_tables(root: &Map<String, Value>) -> Vec<(String, Map<String, Value>)> {
    match root.get("limits").map(|v| &v.kind) {
        Some(ValueKind::Table(t)) => t
            .iter()
            .map(|(name, v)| match &v.kind {
                ValueKind::Table(t) => (name.clone(), t.clone()),
                _ => (name.clone(), Map::new()),
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The default budget to put in and where it comes from, or what bounds
/// the memory instead (declared budgets, or nothing, and why).
fn memory_bound(
    root: &mut Map<String, Value>,
    setting: Option<MemorySetting>,
    kinds: &[StageDefaults],
    shared: Option<&Limits>,
    defaults: &Defaults<'_>,
    problems: &mut Vec<Problem>,
) -> Result<(u64, MemoryFrom), MemoryFrom> {
    let limits = limit_tables(root);
    let is_budget = |name: &str, t: &Map<String, Value>| {
        t.contains_key("budget")
            || (t
                .get("shared")
                .is_some_and(|s| s.clone().into_bool().unwrap_or(false))
                && shared
                    .and_then(|s| s.get(name))
                    .is_some_and(|l| l.kind() == LimiterKind::Bytes))
    };
    let declared: Vec<String> = limits
        .iter()
        .filter(|(name, t)| is_budget(name, t))
        .map(|(name, _)| name.clone())
        .collect();
    let unbounded = |why: &str| MemoryFrom::Unbounded {
        why: why.to_owned(),
    };
    if !declared.is_empty() {
        if matches!(
            setting,
            Some(MemorySetting::Size(_) | MemorySetting::Unbounded)
        ) {
            problems.push(Problem::new(
                join("pipeline", "memory"),
                format!(
                    "sizes the default memory budget, which a pipeline that declares its own \
                     ([limits.{}]) does not get: remove one of them",
                    declared[0]
                ),
            ));
        }
        return Err(MemoryFrom::Declared { limiters: declared });
    }
    if limits.iter().any(|(name, _)| name == MEMORY) {
        return Err(unbounded(
            "[limits.memory] is not a byte budget, and the default budget would take its name; \
             give it a `budget` (docs/pipeline.md, \"Memory in a raster pipeline\")",
        ));
    }
    if setting == Some(MemorySetting::Unbounded) {
        return Err(unbounded(TURNED_OFF));
    }
    if let MemoryDefault::DoesNotFit(why) = &defaults.memory {
        return Err(unbounded(why));
    }
    if names_memory(root, kinds) {
        // Stages name a `memory` limiter the file does not declare: the
        // compile says so; the default does not answer for it.
        return Err(unbounded(
            "stages name a `memory` limiter that is not declared",
        ));
    }
    if !kinds
        .iter()
        .any(|k| k.defaults.memory != DefaultCharge::None)
    {
        return Err(unbounded(
            "no stage of this pipeline charges the default budget (fetch, decode and reproject \
             do); declare a byte budget ([limits.memory] budget = \"2GiB\") and name it in the \
             `limits` of the stages it should bound",
        ));
    }
    match setting.unwrap_or_default() {
        MemorySetting::Size(budget) => Ok((budget, MemoryFrom::Setting { budget })),
        MemorySetting::Unbounded => Err(unbounded(TURNED_OFF)),
        MemorySetting::Auto => match defaults.machine.memory() {
            Some(memory) => Ok((
                budget_of(memory.bytes()),
                MemoryFrom::Machine {
                    budget: budget_of(memory.bytes()),
                    memory,
                },
            )),
            None => Err(unbounded(
                "this machine's memory could not be read (no /proc/meminfo); give the default \
                 budget a size: [pipeline] memory = \"2GiB\"",
            )),
        },
    }
}

/// Whether a stage names `memory` itself: in its `limits`, `carry` or
/// `release`, or in the setting its kind charges the budget by.
fn names_memory(root: &mut Map<String, Value>, kinds: &[StageDefaults]) -> bool {
    stage_tables(root).into_iter().any(|(name, table)| {
        let setting =
            kinds
                .iter()
                .find(|k| &k.name == name)
                .and_then(|k| match k.defaults.memory {
                    DefaultCharge::Setting(key) => Some(key),
                    _ => None,
                });
        ["limits", "carry", "release"].iter().any(|key| {
            table
                .get(*key)
                .and_then(|v| v.clone().into_array().ok())
                .is_some_and(|a| {
                    a.into_iter()
                        .any(|v| v.into_string().is_ok_and(|s| s == MEMORY))
                })
        }) || setting.is_some_and(|key| table.contains_key(key))
    })
}

/// Declares `[limits.memory] budget = budget` in its place in the order
/// (after every limiter a stage charging it by its own setting holds) and
/// names it in each stage whose kind charges it.
fn put_budget(root: &mut Map<String, Value>, budget: u64, kinds: &[StageDefaults]) {
    let held_while_charging: Vec<String> = stage_tables(root)
        .into_iter()
        .filter(|(name, _)| {
            kinds
                .iter()
                .any(|k| &k.name == *name && matches!(k.defaults.memory, DefaultCharge::Setting(_)))
        })
        .flat_map(|(_, t)| {
            t.get("limits")
                .and_then(|v| v.clone().into_array().ok())
                .unwrap_or_default()
        })
        .filter_map(|v| v.into_string().ok())
        .collect();
    let limits = root
        .entry("limits".to_owned())
        .or_insert_with(|| Value::from(Map::<String, Value>::new()));
    if let ValueKind::Table(t) = &mut limits.kind {
        let at = t
            .keys()
            .rposition(|name| held_while_charging.contains(name))
            .map_or(0, |i| i + 1);
        let mut table = Map::new();
        table.insert("budget".to_owned(), Value::from(budget));
        t.shift_insert(at, MEMORY.to_owned(), Value::from(table));
    }
    for (name, table) in stage_tables(root) {
        let Some(kind) = kinds.iter().find(|k| &k.name == name) else {
            continue;
        };
        match kind.defaults.memory {
            DefaultCharge::None => {}
            DefaultCharge::Setting(key) => {
                table.insert(key.to_owned(), Value::from(MEMORY));
            }
            DefaultCharge::Limits => {
                for key in ["limits", "carry"] {
                    push_name(table, key);
                }
            }
        }
    }
}

/// Adds `memory` to the list at `key` (made when missing; left as it is
/// when it is not a list, which the compile then says).
fn push_name(table: &mut Map<String, Value>, key: &str) {
    let list = table
        .entry(key.to_owned())
        .or_insert_with(|| Value::from(Vec::<Value>::new()));
    if let ValueKind::Array(a) = &mut list.kind {
        a.push(Value::from(MEMORY));
    }
}
