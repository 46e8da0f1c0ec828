//! `[limits.NAME]`: each limiter built from its table (or taken from those
//! the process shares), and lists of limiter names resolved against them.

use super::*;
use crate::limit::DEFAULT_MARGIN;

/// `[limits.NAME] shared = true`: the limiter of that name that the
/// embedding process shares between pipelines.
pub(super) fn take_shared(
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
        || s.margin.is_some()
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

/// `[limits.NAME]` with exactly one of `permits`, `budget` or
/// `per_second`: a count, bytes or rate limiter.
pub(super) fn build_limiter(
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
    if let Some(p) = &s.permits {
        return count_limiter(path, name, s, p, problems);
    }
    if s.budget.is_some() {
        return bytes_limiter(path, name, s, problems);
    }
    rate_limiter(path, name, s, global, problems)
}

/// A key given that the kind of limiter does not take.
fn misplaced(path: &str, key: &str, set: bool, problems: &mut Vec<Problem>) {
    if set {
        problems.push(Problem::new(
            join(path, key),
            format!("`{key}` does not apply to this kind of limiter"),
        ));
    }
}

/// `permits = N`.
fn count_limiter(
    path: &str,
    name: &str,
    s: &LimitSection,
    permits: &CountValue,
    problems: &mut Vec<Problem>,
) -> Option<Limiter> {
    misplaced(path, "oversize", s.oversize.is_some(), problems);
    misplaced(path, "burst", s.burst.is_some(), problems);
    misplaced(path, "per", s.per.is_some(), problems);
    misplaced(path, "margin", s.margin.is_some(), problems);
    let n = permits
        .resolve()
        .map_err(|m| problems.push(Problem::new(join(path, "permits"), m.to_string())))
        .ok()?;
    Some(Limiter::count(name, NonZeroU32::new(n)?))
}

/// `budget = SIZE`, with what an item larger than the budget does.
fn bytes_limiter(
    path: &str,
    name: &str,
    s: &LimitSection,
    problems: &mut Vec<Problem>,
) -> Option<Limiter> {
    let b = s.budget.as_ref()?;
    misplaced(path, "burst", s.burst.is_some(), problems);
    misplaced(path, "per", s.per.is_some(), problems);
    misplaced(path, "margin", s.margin.is_some(), problems);
    if b.0 == 0 {
        problems.push(Problem::new(
            join(path, "budget"),
            "must be more than 0 bytes",
        ));
        return None;
    }
    Some(Limiter::bytes(name, b.0, s.oversize.unwrap_or_default()))
}

/// The most a `margin` may be: a bucket paced at half its rate is not
/// keeping a margin, it is set wrong.
const MAX_MARGIN: f64 = 0.5;

/// `per_second = R`, one bucket for all or one per host, kept here or by
/// the coordinator (`scope = "global"`), paced `margin` under it.
fn rate_limiter(
    path: &str,
    name: &str,
    s: &LimitSection,
    global: Option<&RateBackendFactory>,
    problems: &mut Vec<Problem>,
) -> Option<Limiter> {
    let rate = s.per_second.unwrap_or_default();
    misplaced(path, "oversize", s.oversize.is_some(), problems);
    let key = s.per.unwrap_or_default();
    let burst = count(&join(path, "burst"), &s.burst, 1, problems);
    let margin = s.margin.unwrap_or(DEFAULT_MARGIN);
    if !(0.0..=MAX_MARGIN).contains(&margin) {
        problems.push(Problem::new(
            join(path, "margin"),
            format!(
                "must be a share of `per_second` from 0 to {MAX_MARGIN} (0.02 paces 2% under it), got {margin}"
            ),
        ));
        return None;
    }
    if !(rate.is_finite() && rate > 0.0) {
        problems.push(Problem::new(
            join(path, "per_second"),
            format!("must be a positive number of tokens per second, got {rate}"),
        ));
        return None;
    }
    let burst = NonZeroU32::new(burst)?;
    let limiter = match s.scope.unwrap_or_default() {
        RateScope::Local => Limiter::rate_with_margin(name, rate, burst, key, margin),
        RateScope::Global => match global {
            Some(factory) => Limiter::paced_per_second(rate, margin).and_then(|paced| {
                let backend = factory(name, paced, burst.get());
                Limiter::rate_shared_by(name, rate, burst, key, margin, backend)
            }),
            None => {
                problems.push(Problem::environment(
                    join(path, "scope"),
                    "a global rate is kept by the coordinator: run with --coordinator redis://...",
                ));
                return None;
            }
        },
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
pub(super) struct Declared<'a> {
    pub(super) limits: &'a Limits,
    pub(super) broken: &'a BTreeSet<String>,
}

/// Resolves a list of limiter names against the declared limiters.
pub(super) fn resolve_limits(
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
