//! What the first inputs of a pipeline would hold, stage by stage, sized
//! by the stages' own code before any run: what `warpline plan` estimates
//! peak memory from.
//!
//! Each input goes through the stages in flow order: a stage's
//! [`demand`](crate::Stage::demand) (what it holds at its peak, as a stage
//! listing a byte budget is charged) and, where the stage allows it
//! ([`dry_run`](crate::Stage::dry_run): a fetch of a local file, a decode),
//! its `process`, which makes the payload the next stage sizes from. At
//! the first stage that may not run in a plan (a warp, a write, a fetch
//! over the network) the sizing stops, and the stages after it are taken
//! to hold what the item held there: what an item carries through a stage
//! that charges nothing. No limiter is waited for on the way: a stage that
//! charges a budget by its own code (fetch's `memory`) charges it for the
//! moment and gives it back with the item.

use crate::item::{Item, Outcome, StageError};
use crate::pipeline::Pipeline;
use crate::stage::{Handler, OpenError};

/// The first inputs of a pipeline, sized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sizing {
    /// How many inputs were sized.
    pub inputs: usize,
    /// How many inputs the source holds, when it says.
    pub total: Option<u64>,
    /// Per stage, in flow order: the most bytes an item held there, over
    /// the inputs sized.
    pub held: Vec<u64>,
    /// Per stage: whether its stage's own code sized it (else it is what
    /// the item held at the stage before, as the stage could not run in a
    /// plan).
    pub sized: Vec<bool>,
    /// The inputs that could not be sized, and why (`id: message`).
    pub failed: Vec<String>,
}

impl Pipeline {
    /// Sizes the first `n` inputs as the stages would charge them (see
    /// the module's documentation). Fails when the source would be read
    /// over the network ([`SourceSpec::opens_offline`]) or cannot be
    /// opened; an input that cannot be sized is counted in
    /// [`Sizing::failed`].
    ///
    /// [`SourceSpec::opens_offline`]: crate::SourceSpec::opens_offline
    pub async fn size_first(&self, n: usize) -> Result<Sizing, OpenError> {
        if !self.source.spec.opens_offline() {
            return Err(OpenError(format!(
                "the {} source is not opened by a plan: it would read over the network",
                self.source.kind
            )));
        }
        let mut source = self
            .source
            .open()
            .map_err(|e| OpenError(format!("the source cannot be opened: {e}")))?;
        let total = source.len_hint();
        let stages = self.stages.len();
        let mut sizing = Sizing {
            inputs: 0,
            total,
            held: vec![0; stages],
            sized: vec![false; stages],
            failed: Vec::new(),
        };
        while sizing.inputs < n {
            let input = match source.next().await {
                None => break,
                Some(Ok(input)) => input,
                Some(Err(e)) => {
                    sizing.failed.push(e.to_string());
                    continue;
                }
            };
            sizing.inputs += 1;
            self.size_one(Item::new(input), &mut sizing).await;
        }
        Ok(sizing)
    }

    /// One item through the stages, as far as they may run in a plan.
    async fn size_one(&self, mut item: Item, sizing: &mut Sizing) {
        let mut held = 0;
        let mut going = true;
        for (i, stage) in self.stages.iter().enumerate() {
            if going {
                let step = match &stage.handler {
                    Handler::Async(s) => {
                        let step = s.demand(&mut item).map(|d| (d, s.dry_run(&item)));
                        match step {
                            Ok((d, true)) => s.process(&mut item).await.map(|o| (d, Some(o))),
                            Ok((d, false)) => Ok((d, None)),
                            Err(e) => Err(e),
                        }
                    }
                    Handler::Blocking(s) => {
                        let s = s.clone();
                        let ran = tokio::task::spawn_blocking(move || {
                            let step = s.demand(&mut item).and_then(|d| {
                                if s.dry_run(&item) {
                                    s.process(&mut item).map(|o| (d, Some(o)))
                                } else {
                                    Ok((d, None))
                                }
                            });
                            (item, step)
                        })
                        .await;
                        match ran {
                            Ok((back, step)) => {
                                item = back;
                                step
                            }
                            Err(_) => {
                                sizing
                                    .failed
                                    .push(format!("stage `{}` panicked sizing it", stage.name));
                                return;
                            }
                        }
                    }
                };
                match step {
                    Ok((demand, ran)) => {
                        held = demand.max(item.bytes_in);
                        sizing.sized[i] = true;
                        going = matches!(ran, Some(Outcome::Continue));
                    }
                    Err(StageError { message, .. }) => {
                        sizing
                            .failed
                            .push(format!("stage `{}`: {message}", stage.name));
                        return;
                    }
                }
            }
            sizing.held[i] = sizing.held[i].max(held);
        }
    }
}
