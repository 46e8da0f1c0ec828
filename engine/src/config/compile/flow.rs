//! The checks of the flow as a whole, once every section compiled as far
//! as it could: the flow names every declared stage once, what items
//! carry is consistent along it, and every declared limiter is taken.

use std::collections::{BTreeSet, HashMap};

use super::super::carried::{check_carried, Flowing};
use super::super::{join, known, Problem};
use crate::limit::{Limiter, LimiterKind, Limits};
use crate::pipeline::{SourcePlan, StagePlan};

/// The flow: every declared stage exactly once, in order. Returns the
/// compiled stages in flow order.
pub(super) fn order_by_flow(
    flow: Option<&[String]>,
    plans: Vec<(String, StagePlan)>,
    stage_names: &[String],
    problems: &mut Vec<Problem>,
) -> Vec<StagePlan> {
    let mut stages = Vec::new();
    match flow {
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
        Some([]) => problems.push(Problem::graph(
            "pipeline.flow",
            "must name at least one stage",
        )),
        Some(flow) => {
            let mut by_name: HashMap<String, StagePlan> = plans.into_iter().collect();
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
            for name in stage_names {
                if !seen.contains(name) {
                    problems.push(Problem::graph(
                        join("stages", name),
                        "declared but not in pipeline.flow: add it to the flow or remove it",
                    ));
                }
            }
        }
    }
    stages
}

/// [`check_carried`] along the flow, when the flow and every stage's
/// limits could be read; else what was not checked, and why.
pub(super) fn check_along_flow(
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

/// A declared limiter that no stage and not the source takes limits
/// nothing: most often a `[limits.memory]` whose stages were never told to
/// use it. Said as an error, as a stage left out of the flow is.
pub(super) fn check_used(
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

/// Each stage takes the payload the stage before it in the flow hands on
/// (see [`crate::payload`]): checked for every adjacent pair of stages that
/// both compiled. A stage that declares nothing takes and hands on any
/// payload. The first stage is not checked: what the source makes is an
/// input, not a payload.
pub(super) fn check_payloads(
    flow: Option<&[String]>,
    stages: &[StagePlan],
    problems: &mut Vec<Problem>,
) {
    let Some(flow) = flow else { return };
    let plan = |name: &str| stages.iter().find(|s| s.name == name);
    for (i, pair) in flow.windows(2).enumerate() {
        let (Some(before), Some(after)) = (plan(&pair[0]), plan(&pair[1])) else {
            continue;
        };
        if before.name == after.name {
            continue;
        }
        let (handed, takes) = (before.handler.hands_on(), after.handler.takes());
        if !takes.accepts(&handed) {
            problems.push(Problem::graph(
                format!("pipeline.flow[{}]", i + 1),
                format!(
                    "stage `{}` takes {takes} but `{}` hands on {handed}: put a stage that \
                     makes one from the other between them, or change the order",
                    after.name, before.name
                ),
            ));
        }
    }
}
