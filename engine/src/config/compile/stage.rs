//! `[stages.NAME]`: a stage's plan from its table, its retry policy and
//! its adaptive per-host limits.

use super::*;

/// A stage's plan, or (when it does not compile) what is known of the
/// limiters it takes and hands on; neither when its common keys (`limits`,
/// `carry`, `release`, ...) cannot be read.
pub(super) fn build_stage(
    path: &str,
    name: &str,
    table: Map<String, Value>,
    registry: &Registry,
    declared: &Declared<'_>,
    problems: &mut Vec<Problem>,
) -> (Option<StagePlan>, Option<Flowing>) {
    let (common, own) = split(table, STAGE_KEYS);
    let read = crate::lenient::read_all::<StageCommon>(path, Value::from(common), &[], problems);
    let common = match read.value {
        Some(common) if read.left_out < LeftOut::Keys => common,
        guess => {
            // The counts are checked alone, each on its own.
            let kind = guess.and_then(|c| {
                count(&join(path, "workers"), &c.workers, 1, problems);
                count(&join(path, "mailbox"), &c.mailbox, 1, problems);
                c.kind
            });
            own_keys(path, kind, own, registry, declared, problems);
            return (None, None);
        }
    };
    let workers = count(&join(path, "workers"), &common.workers, 1, problems);
    let mailbox = count(&join(path, "mailbox"), &common.mailbox, workers, problems);
    let acquire = resolve_limits(&join(path, "limits"), &common.limits, declared, problems);
    check_carry(path, &common.carry, &acquire, problems);
    let mut seen = Flowing {
        name: name.to_owned(),
        limits: acquire.clone(),
        carry: common.carry.clone(),
        release: common.release.clone(),
        charges: Vec::new(),
        // A limiter it names that is not there may be carried on too.
        sure: acquire.len() == common.limits.len(),
    };
    let Some((kind, factory)) = stage_kind(path, common.kind, registry, problems) else {
        seen.sure = false;
        return (None, Some(seen));
    };
    let settings = Settings::new(
        path.to_owned(),
        own,
        declared.limits.clone(),
        acquire.clone(),
        STAGE_KEYS,
    );
    let handler = factory(&settings);
    seen.charges = settings.charged();
    let handler = match handler {
        Ok(h) => h,
        Err(mut p) => {
            problems.append(&mut p);
            seen.sure = false;
            return (None, Some(seen));
        }
    };
    let retry = retry_policy(
        path,
        common.retry.as_ref(),
        handler.retry_default(),
        problems,
    );
    let adaptive = adaptive(path, common.adaptive.as_ref(), &handler, workers, problems);
    let plan = StagePlan {
        name: name.to_owned(),
        kind,
        workers,
        // The file's, unless the defaults say otherwise (`compile`).
        workers_from: crate::defaults::WorkersFrom::Declared,
        mailbox,
        retry,
        handler,
        limits: acquire,
        carry: common.carry,
        release: common.release,
        charges: seen.charges,
        adaptive,
    };
    (Some(plan), None)
}

/// When the engine's keys of a stage did not read (a wrong type, a key
/// unknown in its `retry`): the mistakes in the kind's own keys too, so
/// that every mistake of the table is said at once. The kind's factory
/// reads them; only what its read found is kept, as its other checks would
/// rest on engine keys that are not known (the limiters it holds).
fn own_keys(
    path: &str,
    kind: Option<String>,
    own: Map<String, Value>,
    registry: &Registry,
    declared: &Declared<'_>,
    problems: &mut Vec<Problem>,
) {
    let Some((_, factory)) = stage_kind(path, kind, registry, problems) else {
        return;
    };
    let settings = Settings::new(
        path.to_owned(),
        own,
        declared.limits.clone(),
        Vec::new(),
        STAGE_KEYS,
    );
    let _ = factory(&settings);
    problems.extend(settings.read_problems());
}

/// The stage's `kind`, and its factory when the registry knows it.
fn stage_kind<'r>(
    path: &str,
    kind: Option<String>,
    registry: &'r Registry,
    problems: &mut Vec<Problem>,
) -> Option<(String, &'r crate::registry::StageFactory)> {
    resolve_kind(
        join(path, "kind"),
        "stage",
        kind,
        |k| registry.stage(k),
        || registry.stage_kinds(),
        problems,
    )
}

/// A stage can carry only what it holds, and never a rate's token.
fn check_carry(path: &str, carry: &[String], holds: &[Limiter], problems: &mut Vec<Problem>) {
    for (i, name) in carry.iter().enumerate() {
        match holds.iter().find(|l| l.name() == name) {
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
}

/// The stage's adaptive per-host limits: on by default for a stage whose
/// tries are requests to a host, refused for any other.
fn adaptive(
    path: &str,
    value: Option<&AdaptiveValue>,
    handler: &Handler,
    workers: u32,
    problems: &mut Vec<Problem>,
) -> Option<Adaptive> {
    let path = join(path, "adaptive");
    let section = match value {
        Some(AdaptiveValue::Switch(false)) => return None,
        None if !handler.counts_requests() => return None,
        None | Some(AdaptiveValue::Switch(true)) => AdaptiveSection::default(),
        Some(AdaptiveValue::Settings(s)) => s.clone(),
    };
    if !handler.counts_requests() {
        problems.push(Problem::graph(
            path,
            "only a stage whose tries are requests to a host (fetch) adapts to it",
        ));
        return None;
    }
    Adaptive::resolve(&section, workers)
        .map_err(|found| {
            for (key, message) in found {
                problems.push(Problem::new(join(&path, &key), message));
            }
        })
        .ok()
}

pub(super) fn retry_policy(
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
    if let Some(d) = r.base_delay {
        policy.base_delay = d.0;
    }
    if let Some(d) = r.max_delay {
        policy.max_delay = d.0;
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
