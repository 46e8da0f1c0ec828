//! The one compile step: what the file says becomes a runnable pipeline, or
//! every problem found, each with its key path.

use std::collections::{BTreeSet, HashMap};
use std::num::NonZeroU32;
use std::sync::Arc;

use config::{Map, Value};

use super::carried::{check_carried, Flowing};
use super::file::{
    LimitSection, OnError, PipelineSection, RetrySection, SourceCommon, StageCommon, SOURCE_KEYS,
    STAGE_KEYS,
};
use super::{join, known, problem_from, Problem};
use crate::adapt::{Adaptive, AdaptiveSection, AdaptiveValue};
use crate::item::ErrorKind;
use crate::limit::{Limiter, LimiterKind, Limits, Oversize, RateBackendFactory, RateKey};
use crate::pipeline::RetryPolicy;
use crate::pipeline::{Pipeline, SourcePlan, StagePlan};
use crate::registry::{Registry, Settings};
use crate::stage::Handler;
use crate::units::{parse_duration, CountValue};

mod limiters;
mod stage;
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
const DEFAULT_DEADLINE: &str = "30s";

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

fn parse<T: serde::de::DeserializeOwned>(
    path: &str,
    value: Value,
    problems: &mut Vec<Problem>,
) -> Option<T> {
    match value.try_deserialize::<T>() {
        Ok(t) => Some(t),
        Err(e) => {
            problems.push(problem_from(path, e, &[]));
            None
        }
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
            problems.push(Problem::new(path, m));
            default
        }),
    }
}

pub(super) fn compile(
    mut root: Map<String, Value>,
    registry: &Registry,
    default_name: &str,
    shared: Option<&Limits>,
    global: Option<&RateBackendFactory>,
    environment: bool,
) -> Result<Pipeline, Failed> {
    let mut problems = Vec::new();
    let mut not_checked = Vec::new();
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

    // [pipeline]
    let section: PipelineSection = match root.shift_remove("pipeline") {
        Some(v) => parse("pipeline", v, &mut problems),
        None => None,
    }
    .unwrap_or(PipelineSection {
        name: None,
        flow: None,
        on_error: None,
        shutdown_deadline: None,
        stall_warning: None,
    });
    let on_error = match section.on_error.as_deref() {
        None | Some("continue") => OnError::Continue,
        Some("abort") => OnError::Abort,
        Some(other) => {
            problems.push(Problem::new(
                "pipeline.on_error",
                format!("expected \"continue\" or \"abort\", got {other:?}"),
            ));
            OnError::Continue
        }
    };
    let deadline = parse_duration(
        section
            .shutdown_deadline
            .as_deref()
            .unwrap_or(DEFAULT_DEADLINE),
    )
    .unwrap_or_else(|m| {
        problems.push(Problem::new("pipeline.shutdown_deadline", m));
        std::time::Duration::from_secs(30)
    });
    let stall_warning = parse_duration(section.stall_warning.as_deref().unwrap_or("5m"))
        .unwrap_or_else(|m| {
            problems.push(Problem::new("pipeline.stall_warning", m));
            std::time::Duration::from_secs(300)
        });

    // [limits.NAME], in declaration order: that order is the global
    // acquisition order.
    let mut limits = Limits::default();
    // Declared but invalid: already reported, so not "unknown" where used.
    let mut broken = BTreeSet::new();
    // Without a unit budget of its own, the source holds one slot of an
    // implicit `descriptors` limiter per item, sized from the open-file
    // limit: no run dies of "too many open files". First in the order, as
    // it is taken first (at admission).
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
        for (name, value) in table("limits", v, &mut problems).unwrap_or_default() {
            let path = join("limits", &name);
            let built = check_name(&path, &name, &mut problems)
                .then(|| parse::<LimitSection>(&path, value, &mut problems))
                .flatten()
                .and_then(|s| match s.shared {
                    Some(true) => take_shared(&path, &name, &s, shared, &mut problems),
                    _ => build_limiter(&path, &name, &s, global, &mut problems),
                });
            match built {
                Some(l) => limits.push(l),
                None => {
                    broken.insert(name);
                }
            }
        }
    }
    // Shared limiters keep the sharing process's order, so that no two
    // pipelines can take them in opposite orders.
    if let Some(shared) = shared {
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
    let known_limits = Declared {
        limits: &limits,
        broken: &broken,
    };

    // [stages.NAME]
    let mut declared: Vec<(String, StagePlan)> = Vec::new();
    // What is known of each stage's limits, compiled or not.
    let mut flowing: HashMap<String, Flowing> = HashMap::new();
    let mut stage_names: Vec<String> = Vec::new();
    if let Some(v) = root.shift_remove("stages") {
        for (name, value) in table("stages", v, &mut problems).unwrap_or_default() {
            let path = join("stages", &name);
            stage_names.push(name.clone());
            if !check_name(&path, &name, &mut problems) {
                continue;
            }
            let Some(t) = table(&path, value, &mut problems) else {
                continue;
            };
            let (plan, known) =
                build_stage(&path, &name, t, registry, &known_limits, &mut problems);
            if let Some(plan) = plan {
                // Checks of this machine (an output directory is writable)
                // for every stage that compiled, in the same pass.
                if environment {
                    for m in plan.handler.check_environment() {
                        problems.push(Problem::environment(path.clone(), m));
                    }
                }
                flowing.insert(name.clone(), Flowing::of(&plan));
                declared.push((name, plan));
            } else if let Some(known) = known {
                flowing.insert(name, known);
            }
        }
    }

    // [source]
    let source = match root.shift_remove("source") {
        None => {
            problems.push(Problem::new(
                "source",
                "missing: a pipeline needs a [source] table with a `kind`",
            ));
            None
        }
        Some(v) => table("source", v, &mut problems)
            .and_then(|t| build_source(t, registry, &known_limits, &mut problems)),
    };

    // The limiters the declared stages take (in the flow or not), when every
    // stage compiled: one that did not may take any of them.
    let taken: Option<BTreeSet<String>> = (declared.len() == stage_names.len()).then(|| {
        declared
            .iter()
            .flat_map(|(_, s)| s.limits.iter().chain(&s.charges))
            .map(|l| l.name().to_owned())
            .collect()
    });

    // The flow: every declared stage exactly once, in order.
    let mut stages = Vec::new();
    match &section.flow {
        // Given but unreadable: its schema problem says so already.
        None if problems.iter().any(|p| p.path == "pipeline.flow") => {}
        None if stage_names.is_empty() => problems.push(Problem::graph(
            "pipeline.flow",
            "missing: declare the stages ([stages.NAME] with a `kind`) and list them in the \
             order items pass through them, e.g. flow = [\"fetch\", \"decode\", \"write\"]",
        )),
        None => problems.push(Problem::graph(
            "pipeline.flow",
            format!(
                "missing: list the stages in the order items pass through them, e.g. flow = [{}]",
                stage_names
                    .iter()
                    .map(|n| format!("{n:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
        Some(flow) if flow.is_empty() => problems.push(Problem::graph(
            "pipeline.flow",
            "must name at least one stage",
        )),
        Some(flow) => {
            let mut by_name: HashMap<String, StagePlan> = declared.into_iter().collect();
            let mut seen = BTreeSet::new();
            for (i, name) in flow.iter().enumerate() {
                let path = format!("pipeline.flow[{i}]");
                if !seen.insert(name.clone()) {
                    problems.push(Problem::graph(
                        path,
                        format!("duplicate stage `{name}`: a stage appears in the flow once"),
                    ));
                } else if let Some(plan) = by_name.remove(name) {
                    stages.push(plan);
                } else if !stage_names.contains(name) {
                    problems.push(Problem::graph(
                        path,
                        format!(
                            "unknown stage `{name}`; declared stages: {}",
                            known(stage_names.iter())
                        ),
                    ));
                }
            }
            for name in &stage_names {
                if !seen.contains(name) {
                    problems.push(Problem::graph(
                        join("stages", name),
                        "declared but not in pipeline.flow: add it to the flow or remove it",
                    ));
                }
            }
        }
    }

    // What items carry is checked along the whole flow, on what is known of
    // the stages that did not compile (see `carried`).
    not_checked.extend(check_along_flow(
        section.flow.as_deref(),
        &flowing,
        source.as_ref(),
        &limits,
        &mut problems,
    ));
    if let Some(source) = &source {
        if let Some(taken) = &taken {
            check_used(source, taken, &limits, implicit.as_ref(), &mut problems);
        }
    }

    let source = source.map(|mut s| {
        if let Some(l) = implicit {
            s.limits.push(l);
        }
        s
    });
    match source {
        Some(source) if problems.is_empty() => Ok(Pipeline {
            name: section.name.unwrap_or_else(|| default_name.to_owned()),
            on_error,
            shutdown_deadline: deadline,
            stall_warning,
            source,
            stages,
            limits,
        }),
        _ => Err(Failed {
            problems,
            not_checked,
        }),
    }
}

/// [`check_carried`] along the flow, when the flow and every stage's
/// limits could be read; else what was not checked, and why.
fn check_along_flow(
    flow: Option<&[String]>,
    flowing: &HashMap<String, Flowing>,
    source: Option<&SourcePlan>,
    limits: &Limits,
    problems: &mut Vec<Problem>,
) -> Option<String> {
    let along: Vec<Flowing> = flow
        .into_iter()
        .flatten()
        .filter_map(|name| flowing.get(name).cloned())
        .collect();
    let whole_flow = flow.is_some_and(|f| {
        f.len() == along.len() && f.iter().collect::<BTreeSet<_>>().len() == f.len()
    });
    match (source, whole_flow) {
        (Some(source), true) => check_carried(source, &along, limits, problems),
        (None, _) => Some(
            "what items carry from stage to stage, and whether every limiter is taken: \
             [source] did not compile"
                .to_owned(),
        ),
        (Some(_), false) => Some(
            "what items carry from stage to stage: pipeline.flow, or a stage's `limits`, \
             `carry` or `release`, could not be read"
                .to_owned(),
        ),
    }
}

/// Why a pipeline did not compile: every problem, and the checks that could
/// not be made because of them.
#[derive(Debug)]
pub(super) struct Failed {
    pub problems: Vec<Problem>,
    pub not_checked: Vec<String>,
}

/// A declared limiter that no stage and not the source takes limits
/// nothing: most often a `[limits.memory]` whose stages were never told to
/// use it. Said as an error, as a stage left out of the flow is.
fn check_used(
    source: &SourcePlan,
    taken: &BTreeSet<String>,
    limits: &Limits,
    implicit: Option<&Limiter>,
    problems: &mut Vec<Problem>,
) {
    for l in limits.iter() {
        let implicit = implicit.is_some_and(|i| i.name() == l.name());
        let used = taken.contains(l.name()) || source.limits.iter().any(|s| s.name() == l.name());
        if !implicit && !used {
            problems.push(Problem::graph(
                join("limits", l.name()),
                format!(
                    "declared but nothing takes it, so it limits nothing: name it in the `limits` \
                     of the stages (or the source) it should bound{}, or remove it",
                    if l.kind() == LimiterKind::Bytes {
                        " (a fetch stage charges it with `memory = \"NAME\"`)"
                    } else {
                        ""
                    }
                ),
            ));
        }
    }
}

fn build_source(
    table: Map<String, Value>,
    registry: &Registry,
    declared: &Declared<'_>,
    problems: &mut Vec<Problem>,
) -> Option<SourcePlan> {
    let (common, own) = split(table, SOURCE_KEYS);
    let common: SourceCommon = parse("source", Value::from(common), problems)?;
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
    let Some(kind) = common.kind else {
        problems.push(Problem::graph(
            "source.kind",
            format!(
                "missing; known source kinds: {}",
                known(registry.source_kinds().iter())
            ),
        ));
        return None;
    };
    let Some(factory) = registry.source(&kind) else {
        problems.push(Problem::graph(
            "source.kind",
            format!(
                "unknown source kind {kind:?}; known source kinds: {}",
                known(registry.source_kinds().iter())
            ),
        ));
        return None;
    };
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
