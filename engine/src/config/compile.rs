//! The one compile step: what the file says becomes a runnable pipeline, or
//! every problem found, each with its key path.

use std::collections::{BTreeSet, HashMap};
use std::num::NonZeroU32;
use std::sync::Arc;

use config::{Map, Value};

use super::carried::Flowing;
use super::defaults::{self, Defaults};
use super::file::{
    LimitSection, PipelineSection, RetrySection, SourceCommon, StageCommon, SOURCE_KEYS, STAGE_KEYS,
};
use super::{join, known, MachineChecks, Problem};
use crate::adapt::{Adaptive, AdaptiveSection, AdaptiveValue};
use crate::item::ErrorKind;
use crate::lenient::LeftOut;
use crate::limit::{Limiter, LimiterKind, Limits, RateBackendFactory, RateScope};
use crate::pipeline::{OnError, RetryPolicy};
use crate::pipeline::{Pipeline, SourcePlan, StagePlan};
use crate::registry::{Registry, Settings};
use crate::stage::Handler;
use crate::units::CountValue;

mod flow;
mod limiters;
mod stage;
use flow::{check_along_flow, check_payloads, check_used, order_by_flow};
use limiters::{build_limiter, resolve_limits, take_shared, Declared};
use stage::build_stage;

const SECTIONS: &[&str] = &["pipeline", "source", "limits", "stages"];

/// The unit budget's name.
pub(crate) const DESCRIPTORS: &str = "descriptors";

/// Items in flight the open-file limit allows: a quarter of the soft limit
/// (an item may hold a socket, a file and a temporary file at once), less 64
/// descriptors kept for the process itself.
pub(crate) fn default_descriptors() -> NonZeroU32 {
    let soft = rlimit::getrlimit(rlimit::Resource::NOFILE)
        .map(|(soft, _)| soft)
        .unwrap_or(1024)
        .min(1 << 24);
    let permits = (soft.saturating_sub(64) / 4).max(1);
    NonZeroU32::new(u32::try_from(permits).unwrap_or(u32::MAX)).unwrap_or(NonZeroU32::MIN)
}
/// How long a stopped run may drain, unless `shutdown_deadline` says.
const DEFAULT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);
/// How long no item may move before the run says so, unless
/// `stall_warning` says.
const DEFAULT_STALL_WARNING: std::time::Duration = std::time::Duration::from_secs(300);

/// Checks a name given to a limiter or a stage.
fn check_name(path: &str, name: &str, problems: &mut Vec<Problem>) -> bool {
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !ok {
        problems.push(Problem::new(
            path,
            format!(
                "invalid name {name:?}: use lowercase letters, digits and `_` only, so that \
                 WARPLINE__ environment overrides (which are lowercased) can address it"
            ),
        ));
    }
    ok
}

/// Splits a table into the keys the engine reads and the kind's own keys.
fn split(
    table: Map<String, Value>,
    engine_keys: &[&str],
) -> (Map<String, Value>, Map<String, Value>) {
    table
        .into_iter()
        .partition(|(k, _)| engine_keys.contains(&k.as_str()))
}

/// Reads a `[limits.NAME]` table, whose keys depend on each other (a
/// limiter is one of `permits`, `budget` or `per_second`): every unknown
/// key and bad value is said, but the table is returned only when it read
/// whole, as a value left out would make the checks that follow say more
/// than is wrong. Its counts are still checked alone (`permits = "two"`),
/// each on its own.
fn limit_section(path: &str, value: Value, problems: &mut Vec<Problem>) -> Option<LimitSection> {
    let read = crate::lenient::read_all::<LimitSection>(path, value, &[], problems);
    match read.value {
        Some(s) if read.left_out == LeftOut::Nothing => Some(s),
        Some(s) => {
            count(&join(path, "permits"), &s.permits, 1, problems);
            count(&join(path, "burst"), &s.burst, 1, problems);
            None
        }
        None => None,
    }
}

fn table(path: &str, value: Value, problems: &mut Vec<Problem>) -> Option<Map<String, Value>> {
    match value.into_table() {
        Ok(t) => Some(t),
        Err(e) => {
            problems.push(Problem::new(path, format!("expected a table: {e}")));
            None
        }
    }
}

fn count(path: &str, value: &Option<CountValue>, default: u32, problems: &mut Vec<Problem>) -> u32 {
    match value {
        None => default,
        Some(v) => v.resolve().unwrap_or_else(|m| {
            problems.push(Problem::new(path, m.to_string()));
            default
        }),
    }
}

/// Compiles a pipeline file: a short list of named checks, each adding what
/// it finds to one list of problems, in the order a reader meets the file
/// (sections, `[pipeline]`, `[limits]`, `[stages]`, `[source]`, the flow,
/// what items carry along it, unused limiters). The pipeline is built only
/// when the list stays empty. What the file does not say is first put in
/// from `defaults` (see `config::defaults`).
#[allow(clippy::too_many_arguments)]
pub(super) fn compile(
    mut root: Map<String, Value>,
    registry: &Registry,
    default_name: &str,
    shared: Option<&Limits>,
    global: Option<&RateBackendFactory>,
    machine: MachineChecks,
    defaults: &Defaults<'_>,
) -> Result<Pipeline, Failed> {
    let mut problems = Vec::new();
    check_sections(&root, &mut problems);
    let section = pipeline_section(root.shift_remove("pipeline"), &mut problems);
    let settings = RunSettings::of(&section);
    let applied = defaults::apply(
        &mut root,
        section.memory,
        registry,
        shared,
        defaults,
        &mut problems,
    );
    let declared_limits = compile_limits(&mut root, shared, global, &mut problems);
    check_shared_order(&declared_limits.limits, shared, &mut problems);
    let known_limits = Declared {
        limits: &declared_limits.limits,
        broken: &declared_limits.broken,
    };
    let declared = compile_stages(
        root.shift_remove("stages"),
        registry,
        &known_limits,
        machine,
        &mut problems,
    );
    let source = compile_source(
        root.shift_remove("source"),
        registry,
        &known_limits,
        machine,
        &mut problems,
    );
    let taken = declared.taken();
    let DeclaredStages {
        plans,
        flowing,
        names,
    } = declared;
    let mut stages = order_by_flow(section.flow.as_deref(), plans, &names, &mut problems);
    for s in &mut stages {
        if let Some(from) = applied.workers.get(&s.name) {
            s.workers_from = *from;
        }
    }
    check_payloads(section.flow.as_deref(), &stages, &mut problems);
    let DeclaredLimits {
        limits, implicit, ..
    } = declared_limits;

    // What items carry is checked along the whole flow, on what is known of
    // the stages that did not compile (see `carried`).
    let not_checked: Vec<String> = check_along_flow(
        section.flow.as_deref(),
        &flowing,
        source.as_ref(),
        &limits,
        &mut problems,
    )
    .into_iter()
    .collect();
    if let (Some(source), Some(taken)) = (&source, &taken) {
        check_used(source, taken, &limits, implicit.as_ref(), &mut problems);
    }

    let descriptors_default = implicit.is_some();
    let source = source.map(|mut s| {
        s.limits.extend(implicit);
        s
    });
    match source {
        Some(source) if problems.is_empty() => Ok(Pipeline {
            name: section.name.unwrap_or_else(|| default_name.to_owned()),
            on_error: settings.on_error,
            shutdown_deadline: settings.deadline,
            stall_warning: settings.stall_warning,
            source,
            stages,
            limits,
            memory: applied.memory,
            descriptors_default,
        }),
        _ => Err(Failed {
            problems,
            not_checked,
            put_memory: applied.put_memory,
        }),
    }
}

/// Every top-level key is one of the four sections.
fn check_sections(root: &Map<String, Value>, problems: &mut Vec<Problem>) {
    for key in root.keys() {
        if !SECTIONS.contains(&key.as_str()) {
            let guess = match super::nearest(key, SECTIONS.iter().copied()) {
                Some(s) => format!(" (did you mean `{s}`?)"),
                None => String::new(),
            };
            problems.push(Problem::new(
                key.clone(),
                format!(
                    "unknown section{guess}; expected one of {}",
                    known(SECTIONS.iter())
                ),
            ));
        }
    }
}

/// `[pipeline]`, read as it is (empty when missing or not a table): every
/// bad key is said, and the good ones are still read (a good `flow` is not
/// said to be missing because `on_error` is misspelt).
fn pipeline_section(value: Option<Value>, problems: &mut Vec<Problem>) -> PipelineSection {
    let Some(value) = value else {
        return PipelineSection::default();
    };
    crate::lenient::read_all("pipeline", value, &[], problems)
        .value
        .unwrap_or_default()
}

/// What `[pipeline]` says of the run as a whole.
struct RunSettings {
    on_error: OnError,
    deadline: std::time::Duration,
    stall_warning: std::time::Duration,
}

impl RunSettings {
    /// `on_error`, `shutdown_deadline` and `stall_warning`, or their
    /// defaults (a value that did not read is a problem already).
    fn of(section: &PipelineSection) -> Self {
        RunSettings {
            on_error: section.on_error.unwrap_or_default(),
            deadline: section.shutdown_deadline.map_or(DEFAULT_DEADLINE, |d| d.0),
            stall_warning: section.stall_warning.map_or(DEFAULT_STALL_WARNING, |d| d.0),
        }
    }
}

/// The `[limits]` that compiled, and what else is known of them.
struct DeclaredLimits {
    /// In declaration order: that order is the global acquisition order.
    limits: Limits,
    /// Declared but invalid: already reported, so not "unknown" where used.
    broken: BTreeSet<String>,
    /// The implicit `descriptors` budget, when the file has none.
    implicit: Option<Limiter>,
}

/// `[limits.NAME]`, in declaration order.
///
/// Without a unit budget of its own, the source holds one slot of an
/// implicit `descriptors` limiter per item, sized from the open-file limit:
/// no run dies of "too many open files". First in the order, as it is
/// taken first (at admission).
fn compile_limits(
    root: &mut Map<String, Value>,
    shared: Option<&Limits>,
    global: Option<&RateBackendFactory>,
    problems: &mut Vec<Problem>,
) -> DeclaredLimits {
    let mut limits = Limits::default();
    let mut broken = BTreeSet::new();
    let declares_descriptors = root
        .get("limits")
        .and_then(|v| v.clone().into_table().ok())
        .is_some_and(|t| t.contains_key(DESCRIPTORS));
    let source_has_limits = root
        .get("source")
        .and_then(|v| v.clone().into_table().ok())
        .is_some_and(|t| t.contains_key("limits"));
    let implicit = (!declares_descriptors && !source_has_limits).then(|| {
        let l = Limiter::count(DESCRIPTORS, default_descriptors());
        limits.push(l.clone());
        l
    });
    if let Some(v) = root.shift_remove("limits") {
        for (name, value) in table("limits", v, problems).unwrap_or_default() {
            let path = join("limits", &name);
            let built = check_name(&path, &name, problems)
                .then(|| limit_section(&path, value, problems))
                .flatten()
                .and_then(|s| match s.shared {
                    Some(true) => take_shared(&path, &name, &s, shared, problems),
                    _ => build_limiter(&path, &name, &s, global, problems),
                });
            match built {
                Some(l) => limits.push(l),
                None => {
                    broken.insert(name);
                }
            }
        }
    }
    DeclaredLimits {
        limits,
        broken,
        implicit,
    }
}

/// Shared limiters keep the sharing process's order, so that no two
/// pipelines can take them in opposite orders.
fn check_shared_order(limits: &Limits, shared: Option<&Limits>, problems: &mut Vec<Problem>) {
    let Some(shared) = shared else {
        return;
    };
    let mine: Vec<&Limiter> = limits.iter().filter(|l| shared.holds(l)).collect();
    for pair in mine.windows(2) {
        if shared.position(pair[0].name()) > shared.position(pair[1].name()) {
            problems.push(Problem::graph(
                join("limits", pair[1].name()),
                format!(
                    "shared limiters must be declared in the order the process shares them: `{}` before `{}`",
                    pair[1].name(),
                    pair[0].name()
                ),
            ));
        }
    }
}

/// The `[stages]` as declared, compiled or not.
struct DeclaredStages {
    /// The stages that compiled, in declaration order.
    plans: Vec<(String, StagePlan)>,
    /// What is known of each stage's limits, compiled or not.
    flowing: HashMap<String, Flowing>,
    /// Every declared name.
    names: Vec<String>,
}

impl DeclaredStages {
    /// The limiters the declared stages take (in the flow or not), when
    /// every stage compiled: one that did not may take any of them.
    fn taken(&self) -> Option<BTreeSet<String>> {
        (self.plans.len() == self.names.len()).then(|| {
            self.plans
                .iter()
                .flat_map(|(_, s)| s.limits.iter().chain(&s.charges))
                .map(|l| l.name().to_owned())
                .collect()
        })
    }
}

/// `[stages.NAME]`, each through its kind's factory; with `machine`, the
/// checks of this machine (an output directory is writable) and, online,
/// of what the stage reaches (its bucket) for every stage that compiled,
/// in the same pass.
fn compile_stages(
    value: Option<Value>,
    registry: &Registry,
    known_limits: &Declared<'_>,
    machine: MachineChecks,
    problems: &mut Vec<Problem>,
) -> DeclaredStages {
    let mut declared = DeclaredStages {
        plans: Vec::new(),
        flowing: HashMap::new(),
        names: Vec::new(),
    };
    let Some(v) = value else {
        return declared;
    };
    for (name, value) in table("stages", v, problems).unwrap_or_default() {
        let path = join("stages", &name);
        declared.names.push(name.clone());
        if !check_name(&path, &name, problems) {
            continue;
        }
        let Some(t) = table(&path, value, problems) else {
            continue;
        };
        let (plan, known) = build_stage(&path, &name, t, registry, known_limits, problems);
        if let Some(plan) = plan {
            let local = (machine >= MachineChecks::Local).then(|| plan.handler.check_environment());
            let online = (machine == MachineChecks::Online).then(|| plan.handler.check_online());
            for m in local.into_iter().chain(online).flatten() {
                problems.push(Problem::environment(path.clone(), m));
            }
            declared.flowing.insert(name.clone(), Flowing::of(&plan));
            declared.plans.push((name, plan));
        } else if let Some(known) = known {
            declared.flowing.insert(name, known);
        }
    }
    declared
}

/// `[source]`, which every pipeline needs; online, with the checks of
/// what it reaches (a STAC API, a bucket).
fn compile_source(
    value: Option<Value>,
    registry: &Registry,
    known_limits: &Declared<'_>,
    machine: MachineChecks,
    problems: &mut Vec<Problem>,
) -> Option<SourcePlan> {
    let Some(v) = value else {
        problems.push(Problem::new(
            "source",
            "missing: a pipeline needs a [source] table with a `kind`",
        ));
        return None;
    };
    let source = table("source", v, problems)
        .and_then(|t| build_source(t, registry, known_limits, problems));
    if let (Some(s), MachineChecks::Online) = (&source, machine) {
        for m in s.spec.check_online() {
            problems.push(Problem::environment("source", m));
        }
    }
    source
}

/// A `kind` key at `path` and what `lookup` finds for it: or a problem
/// (missing, or unknown) that lists the `what` kinds known.
fn resolve_kind<'r, F: ?Sized>(
    path: String,
    what: &str,
    kind: Option<String>,
    lookup: impl FnOnce(&str) -> Option<&'r F>,
    kinds: impl FnOnce() -> Vec<&'r str>,
    problems: &mut Vec<Problem>,
) -> Option<(String, &'r F)> {
    let found = kind.as_deref().and_then(lookup);
    match (kind, found) {
        (Some(kind), Some(found)) => Some((kind, found)),
        (kind, _) => {
            let said = match kind {
                None => "missing".to_owned(),
                Some(kind) => format!("unknown {what} kind {kind:?}"),
            };
            let known_kinds = known(kinds().iter());
            problems.push(Problem::graph(
                path,
                format!("{said}; known {what} kinds: {known_kinds}"),
            ));
            None
        }
    }
}

/// Why a pipeline did not compile: every problem, and the checks that could
/// not be made because of them.
#[derive(Debug)]
pub(super) struct Failed {
    pub problems: Vec<Problem>,
    pub not_checked: Vec<String>,
    /// Whether the default memory budget was put in.
    pub put_memory: bool,
}

fn build_source(
    table: Map<String, Value>,
    registry: &Registry,
    declared: &Declared<'_>,
    problems: &mut Vec<Problem>,
) -> Option<SourcePlan> {
    let (common, own) = split(table, SOURCE_KEYS);
    let read =
        crate::lenient::read_all::<SourceCommon>("source", Value::from(common), &[], problems);
    let common = match read.value {
        Some(common) if read.left_out < LeftOut::Keys => common,
        guess => {
            // The kind's own keys are still read, for their mistakes only
            // (as a stage's, see `stage::own_keys`).
            let kind = guess.and_then(|c| c.kind);
            let (_, factory) = source_kind(kind, registry, problems)?;
            let settings = Settings::new(
                "source".to_owned(),
                own,
                declared.limits.clone(),
                Vec::new(),
                SOURCE_KEYS,
            );
            let _ = factory(&settings);
            problems.extend(settings.read_problems());
            return None;
        }
    };
    let held = resolve_limits("source.limits", &common.limits, declared, problems);
    for (i, l) in held.iter().enumerate() {
        if l.kind() != LimiterKind::Count {
            problems.push(Problem::graph(
                format!("source.limits[{i}]"),
                format!(
                    "`{}` is a {} limiter; the source holds one slot of a count limiter (a unit \
                     budget such as `descriptors`) from admission until the item ends",
                    l.name(),
                    l.kind()
                ),
            ));
        }
    }
    let (kind, factory) = source_kind(common.kind, registry, problems)?;
    match factory(&Settings::new(
        "source".to_owned(),
        own,
        declared.limits.clone(),
        held.clone(),
        SOURCE_KEYS,
    )) {
        Ok(spec) => Some(SourcePlan {
            kind,
            spec: Arc::clone(&spec),
            limits: held,
        }),
        Err(mut p) => {
            problems.append(&mut p);
            None
        }
    }
}

/// The source's `kind`, and its factory when the registry knows it.
fn source_kind<'r>(
    kind: Option<String>,
    registry: &'r Registry,
    problems: &mut Vec<Problem>,
) -> Option<(String, &'r crate::registry::SourceFactory)> {
    resolve_kind(
        "source.kind".to_owned(),
        "source",
        kind,
        |k| registry.source(k),
        || registry.source_kinds(),
        problems,
    )
}
