//! The one compile step: what the file says becomes a runnable pipeline, or
//! every problem found, each with its key path.

use std::collections::{BTreeSet, HashMap};
use std::num::NonZeroU32;
use std::sync::Arc;

use config::{Map, Value};

use super::file::{
    LimitSection, OnError, PipelineSection, RetrySection, SourceCommon, StageCommon, SOURCE_KEYS,
    STAGE_KEYS,
};
use super::{join, known, problem_from, Problem};
use crate::item::ErrorKind;
use crate::limit::{Limiter, LimiterKind, Limits, Oversize, RateBackendFactory, RateKey};
use crate::pipeline::RetryPolicy;
use crate::pipeline::{Pipeline, SourcePlan, StagePlan};
use crate::registry::{Registry, Settings};
use crate::units::{parse_duration, CountValue};

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
) -> Result<Pipeline, Vec<Problem>> {
    let mut problems = Vec::new();
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
            if let Some(plan) = build_stage(&path, &name, t, registry, &known_limits, &mut problems)
            {
                declared.push((name, plan));
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

    // What items carry is checked only along a whole flow: a stage that
    // failed to compile (reported already) would make the stages after it
    // look wrong (a `release` of something it charged).
    let whole_flow = section
        .flow
        .as_ref()
        .is_some_and(|f| f.len() == stages.len());
    if let (Some(source), true) = (&source, whole_flow) {
        check_carried(source, &stages, &limits, &mut problems);
    }
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
        _ => Err(problems),
    }
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

/// `[limits.NAME] shared = true`: the limiter of that name that the
/// embedding process shares between pipelines.
fn take_shared(
    path: &str,
    name: &str,
    s: &LimitSection,
    shared: Option<&Limits>,
    problems: &mut Vec<Problem>,
) -> Option<Limiter> {
    if s.permits.is_some()
        || s.budget.is_some()
        || s.per_second.is_some()
        || s.oversize.is_some()
        || s.burst.is_some()
        || s.per.is_some()
    {
        problems.push(Problem::new(
            path,
            "a shared limiter is sized by the process that shares it: give only `shared = true`",
        ));
        return None;
    }
    let found = shared.and_then(|l| l.get(name)).cloned();
    if found.is_none() {
        let offered = shared
            .map(|l| known(l.iter().map(|x| x.name())))
            .unwrap_or_else(|| {
                "none (this pipeline is not run by a process that shares limiters)".to_owned()
            });
        problems.push(Problem::graph(
            path,
            format!("no shared limiter `{name}`; shared limiters: {offered}"),
        ));
    }
    found
}

fn build_limiter(
    path: &str,
    name: &str,
    s: &LimitSection,
    global: Option<&RateBackendFactory>,
    problems: &mut Vec<Problem>,
) -> Option<Limiter> {
    let given = [
        s.permits.is_some(),
        s.budget.is_some(),
        s.per_second.is_some(),
    ]
    .iter()
    .filter(|x| **x)
    .count();
    if given != 1 {
        problems.push(Problem::new(
            path,
            "give exactly one of `permits` (a count), `budget` (bytes) or `per_second` (a rate)",
        ));
        return None;
    }
    let misplaced = |key: &str, set: bool, problems: &mut Vec<Problem>| {
        if set {
            problems.push(Problem::new(
                join(path, key),
                format!("`{key}` does not apply to this kind of limiter"),
            ));
        }
    };
    if let Some(p) = &s.permits {
        misplaced("oversize", s.oversize.is_some(), problems);
        misplaced("burst", s.burst.is_some(), problems);
        misplaced("per", s.per.is_some(), problems);
        let n = p
            .resolve()
            .map_err(|m| problems.push(Problem::new(join(path, "permits"), m)))
            .ok()?;
        return Some(Limiter::count(name, NonZeroU32::new(n)?));
    }
    if let Some(b) = &s.budget {
        misplaced("burst", s.burst.is_some(), problems);
        misplaced("per", s.per.is_some(), problems);
        let oversize = match s.oversize.as_deref() {
            None | Some("fail") => Oversize::Fail,
            Some("alone") => Oversize::Alone,
            Some(other) => {
                problems.push(Problem::new(
                    join(path, "oversize"),
                    format!("expected \"fail\" or \"alone\", got {other:?}"),
                ));
                Oversize::Fail
            }
        };
        let bytes = match b.bytes() {
            Ok(0) => {
                problems.push(Problem::new(
                    join(path, "budget"),
                    "must be more than 0 bytes",
                ));
                return None;
            }
            Ok(n) => n,
            Err(m) => {
                problems.push(Problem::new(join(path, "budget"), m));
                return None;
            }
        };
        return Some(Limiter::bytes(name, bytes, oversize));
    }
    let rate = s.per_second.unwrap_or_default();
    misplaced("oversize", s.oversize.is_some(), problems);
    let key = match s.per.as_deref() {
        None | Some("all") => RateKey::Global,
        Some("host") => RateKey::Host,
        Some(other) => {
            problems.push(Problem::new(
                join(path, "per"),
                format!("expected \"host\" (one bucket per remote host) or \"all\", got {other:?}"),
            ));
            RateKey::Global
        }
    };
    let burst = count(&join(path, "burst"), &s.burst, 1, problems);
    if !(rate.is_finite() && rate > 0.0) {
        problems.push(Problem::new(
            join(path, "per_second"),
            format!("must be a positive number of tokens per second, got {rate}"),
        ));
        return None;
    }
    let limiter = match s.scope.as_deref() {
        None | Some("local") => Limiter::rate(name, rate, NonZeroU32::new(burst)?, key),
        Some("global") => match global {
            Some(factory) => {
                let backend = factory(name, rate, burst);
                Limiter::rate_shared_by(name, rate, NonZeroU32::new(burst)?, key, backend)
            }
            None => {
                problems.push(Problem::environment(
                    join(path, "scope"),
                    "a global rate is kept by the coordinator: run with --coordinator redis://...",
                ));
                return None;
            }
        },
        Some(other) => {
            problems.push(Problem::new(
                join(path, "scope"),
                format!("expected \"local\" or \"global\", got {other:?}"),
            ));
            return None;
        }
    };
    if limiter.is_none() {
        problems.push(Problem::new(
            join(path, "per_second"),
            format!("{rate} per second is too small to schedule"),
        ));
    }
    limiter
}

/// The limiters declared in the file: those that compiled, and the names of
/// those that did not.
struct Declared<'a> {
    limits: &'a Limits,
    broken: &'a BTreeSet<String>,
}

/// Resolves a list of limiter names against the declared limiters.
fn resolve_limits(
    path: &str,
    names: &[String],
    declared: &Declared<'_>,
    problems: &mut Vec<Problem>,
) -> Vec<Limiter> {
    let limits = declared.limits;
    let mut out: Vec<Limiter> = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let p = format!("{path}[{i}]");
        match limits.get(name) {
            None if declared.broken.contains(name) => {}
            None => problems.push(Problem::graph(
                p,
                format!(
                    "unknown limiter `{name}`; declared limiters: {}",
                    known(limits.iter().map(|l| l.name()))
                ),
            )),
            Some(_) if out.iter().any(|l| l.name() == name) => {
                problems.push(Problem::graph(p, format!("duplicate limiter `{name}`")))
            }
            Some(l) => out.push(l.clone()),
        }
    }
    // One global order, whatever order the stage listed them in.
    out.sort_by_key(|l| limits.position(l.name()));
    out
}

fn build_stage(
    path: &str,
    name: &str,
    table: Map<String, Value>,
    registry: &Registry,
    declared: &Declared<'_>,
    problems: &mut Vec<Problem>,
) -> Option<StagePlan> {
    let (common, own) = split(table, STAGE_KEYS);
    let common: StageCommon = parse(path, Value::from(common), problems)?;
    let workers = count(&join(path, "workers"), &common.workers, 1, problems);
    let mailbox = count(&join(path, "mailbox"), &common.mailbox, workers, problems);
    let acquire = resolve_limits(&join(path, "limits"), &common.limits, declared, problems);
    for (i, name) in common.carry.iter().enumerate() {
        match acquire.iter().find(|l| l.name() == name) {
            None => problems.push(Problem::graph(
                format!("{path}.carry[{i}]"),
                format!("`{name}` is not in this stage's `limits`; a stage can only carry what it holds"),
            )),
            Some(l) if l.kind() == LimiterKind::Rate => problems.push(Problem::graph(
                format!("{path}.carry[{i}]"),
                format!("`{name}` is a rate limiter: a token is spent, not held, so it cannot be carried"),
            )),
            Some(_) => {}
        }
    }
    let Some(kind) = common.kind else {
        problems.push(Problem::graph(
            join(path, "kind"),
            format!(
                "missing; known stage kinds: {}",
                known(registry.stage_kinds().iter())
            ),
        ));
        return None;
    };
    let Some(factory) = registry.stage(&kind) else {
        problems.push(Problem::graph(
            join(path, "kind"),
            format!(
                "unknown stage kind {kind:?}; known stage kinds: {}",
                known(registry.stage_kinds().iter())
            ),
        ));
        return None;
    };
    let settings = Settings::new(
        path.to_owned(),
        own,
        declared.limits.clone(),
        acquire.clone(),
        STAGE_KEYS,
    );
    let handler = match factory(&settings) {
        Ok(h) => h,
        Err(mut p) => {
            problems.append(&mut p);
            return None;
        }
    };
    let retry = retry_policy(
        path,
        common.retry.as_ref(),
        handler.retry_default(),
        problems,
    );
    Some(StagePlan {
        name: name.to_owned(),
        kind,
        workers,
        mailbox,
        retry,
        handler,
        limits: acquire,
        carry: common.carry,
        release: common.release,
        charges: settings.charged(),
    })
}

fn retry_policy(
    path: &str,
    section: Option<&RetrySection>,
    default: RetryPolicy,
    problems: &mut Vec<Problem>,
) -> RetryPolicy {
    let Some(r) = section else {
        return default;
    };
    let path = join(path, "retry");
    let mut policy = default;
    policy.attempts = count(
        &join(&path, "attempts"),
        &r.attempts,
        policy.attempts,
        problems,
    );
    for (key, value, slot) in [
        ("base_delay", &r.base_delay, &mut policy.base_delay),
        ("max_delay", &r.max_delay, &mut policy.max_delay),
    ] {
        if let Some(text) = value {
            match parse_duration(text) {
                Ok(d) => *slot = d,
                Err(m) => problems.push(Problem::new(join(&path, key), m)),
            }
        }
    }
    if let Some(on) = &r.on {
        policy.on.clear();
        for (i, kind) in on.iter().enumerate() {
            match ErrorKind::from_name(kind) {
                Some(k) => policy.on.push(k),
                None => problems.push(Problem::new(
                    format!("{path}.on[{i}]"),
                    format!("unknown error kind {kind:?}; expected \"transient\", \"permanent\", \"panicked\" or \"over_budget\""),
                )),
            }
        }
    }
    policy
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

/// Checks what items carry from stage to stage: a release must name something
/// carried, and no stage may wait for a limiter ordered before one its items
/// already hold (that wait could close a cycle: a deadlock).
fn check_carried(
    source: &SourcePlan,
    stages: &[StagePlan],
    limits: &Limits,
    problems: &mut Vec<Problem>,
) {
    let pos = |l: &Limiter| limits.position(l.name()).unwrap_or(usize::MAX);
    // limiter name -> (order, kind, who carries it)
    let mut carried: Vec<(Limiter, String)> = source
        .limits
        .iter()
        .map(|l| (l.clone(), "source".to_owned()))
        .collect();
    for stage in stages {
        let path = join("stages", &stage.name);
        for (i, name) in stage.release.iter().enumerate() {
            if !carried.iter().any(|(l, _)| l.name() == name) {
                problems.push(Problem::graph(
                    format!("{path}.release[{i}]"),
                    format!("items reaching this stage carry no `{name}`: only a limiter carried by the source or an earlier stage can be released"),
                ));
            }
        }
        // Released on entry, before the stage waits for anything; except a
        // byte budget the stage charges again, whose share the item keeps
        // (resized) while the stage waits for its other limiters.
        let recharged = |l: &Limiter| {
            l.kind() == LimiterKind::Bytes && stage.limits.iter().any(|w| w.name() == l.name())
        };
        carried.retain(|(l, _)| !stage.release.iter().any(|r| r == l.name()) || recharged(l));
        for want in &stage.limits {
            for (held, from) in &carried {
                if held.name() == want.name() && want.kind() == LimiterKind::Bytes {
                    // A byte budget the item holds is resized: the stage
                    // waits only for the difference (see `limit`).
                } else if held.name() == want.name() {
                    problems.push(Problem::graph(
                        join(&path, "limits"),
                        format!(
                            "items arrive holding `{}` (carried from {from}); waiting for more of it while \
                             holding some can deadlock: add \"{}\" to this stage's `release`",
                            want.name(),
                            want.name()
                        ),
                    ));
                } else if want.kind() != LimiterKind::Rate && pos(held) > pos(want) {
                    problems.push(Problem::graph(
                        join(&path, "limits"),
                        format!(
                            "waits for `{}` while items hold `{}` (carried from {from}), but `{}` is declared after `{}`; \
                             declare [limits.{}] before [limits.{}] so every acquisition follows one order",
                            want.name(), held.name(), held.name(), want.name(), held.name(), want.name()
                        ),
                    ));
                }
            }
        }
        for name in &stage.carry {
            if let Some(l) = stage.limits.iter().find(|l| l.name() == name) {
                carried.push((l.clone(), format!("stage `{}`", stage.name)));
            }
        }
        for l in &stage.charges {
            carried.push((l.clone(), format!("stage `{}`", stage.name)));
        }
    }
}
