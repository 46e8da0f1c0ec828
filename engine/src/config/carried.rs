//! What items carry from stage to stage, checked along the flow: a release
//! must name something carried, and no stage may wait for a limiter ordered
//! before one its items already hold (that wait could close a cycle: a
//! deadlock).
//!
//! The check runs even when a stage's own settings are wrong (a bad
//! `timeout`), on what is known of it: its `limits`, `carry` and `release`,
//! and what its kind charged before it found the problem. It names only
//! problems that do not follow from that stage's: a limiter the failed stage
//! may have charged is not called "not carried" after it.

use super::{join, Problem};
use crate::limit::{Limiter, LimiterKind, Limits};
use crate::pipeline::{SourcePlan, StagePlan};

/// What a stage takes and hands on, as far as it is known.
#[derive(Debug, Clone)]
pub(super) struct Flowing {
    pub name: String,
    pub limits: Vec<Limiter>,
    pub carry: Vec<String>,
    pub release: Vec<String>,
    /// Charged by the stage's own code (as far as its kind got).
    pub charges: Vec<Limiter>,
    /// Whether the stage compiled: if not, it may charge more than
    /// `charges` says.
    pub sure: bool,
}

impl Flowing {
    pub(super) fn of(plan: &StagePlan) -> Self {
        Flowing {
            name: plan.name.clone(),
            limits: plan.limits.clone(),
            carry: plan.carry.clone(),
            release: plan.release.clone(),
            charges: plan.charges.clone(),
            sure: true,
        }
    }
}

/// See the module's documentation. Returns what could not be checked
/// because a stage did not compile, if anything.
pub(super) fn check_carried(
    source: &SourcePlan,
    stages: &[Flowing],
    limits: &Limits,
    problems: &mut Vec<Problem>,
) -> Option<String> {
    // (limiter, who carries it)
    let mut carried: Vec<(Limiter, String)> = source
        .limits
        .iter()
        .map(|l| (l.clone(), "source".to_owned()))
        .collect();
    // The first stage before this one that did not compile.
    let mut unsure: Option<&str> = None;
    for stage in stages {
        let path = join("stages", &stage.name);
        for (i, name) in stage.release.iter().enumerate() {
            // After a stage that did not compile, what is carried is not
            // known in full: a release is not called wrong then.
            if unsure.is_none() && !carried.iter().any(|(l, _)| l.name() == name) {
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
        check_waits(&path, stage, &carried, limits, problems);
        for name in &stage.carry {
            if let Some(l) = stage.limits.iter().find(|l| l.name() == name) {
                carried.push((l.clone(), format!("stage `{}`", stage.name)));
            }
        }
        for l in &stage.charges {
            carried.push((l.clone(), format!("stage `{}`", stage.name)));
        }
        if !stage.sure && unsure.is_none() {
            unsure = Some(&stage.name);
        }
    }
    let last = stages.last().map(|s| s.name.as_str());
    unsure.filter(|u| Some(*u) != last).map(|u| {
        format!(
            "what items carry after stage `{u}` (the releases and waits of the stages after \
             it): `{u}` did not compile, so what it charges is not known in full"
        )
    })
}

/// The stage's waits, given what its items arrive holding.
fn check_waits(
    path: &str,
    stage: &Flowing,
    carried: &[(Limiter, String)],
    limits: &Limits,
    problems: &mut Vec<Problem>,
) {
    let pos = |l: &Limiter| limits.position(l.name()).unwrap_or(usize::MAX);
    for want in &stage.limits {
        for (held, from) in carried {
            if held.name() == want.name() && want.kind() == LimiterKind::Bytes {
                // A byte budget the item holds is resized: the stage
                // waits only for the difference (see `limit`).
            } else if held.name() == want.name() {
                problems.push(Problem::graph(
                    join(path, "limits"),
                    format!(
                        "items arrive holding `{}` (carried from {from}); waiting for more of it while \
                         holding some can deadlock: add \"{}\" to this stage's `release`",
                        want.name(),
                        want.name()
                    ),
                ));
            } else if want.kind() != LimiterKind::Rate && pos(held) > pos(want) {
                problems.push(Problem::graph(
                    join(path, "limits"),
                    format!(
                        "waits for `{}` while items hold `{}` (carried from {from}), but `{}` is declared after `{}`; \
                         declare [limits.{}] before [limits.{}] so every acquisition follows one order",
                        want.name(), held.name(), held.name(), want.name(), held.name(), want.name()
                    ),
                ));
            }
        }
    }
}
