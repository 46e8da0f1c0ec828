//! The source side: admission tickets, the source loop, items a byte budget
//! sent back admitted again, and the hand-off into a mailbox.

use super::*;

/// Hands an item to the next mailbox, waiting while it is full (unless the
/// run is aborted).
pub(super) async fn forward(
    tx: &Sender<Item>,
    mut item: Item,
    next: u32,
    shared: &Shared,
    abort: &CancellationToken,
    stage: &str,
    stats: Option<&StageStats>,
) {
    // From here until a worker of the next stage takes it, the item cannot
    // move on its own: a byte budget counts its share as parked there.
    item.set_parked(Some(next));
    // The most items the next mailbox held, for the timeline's peaks.
    let peak = |shared: &Shared| {
        if let Some(s) = usize::try_from(next).ok().and_then(|i| shared.stats.get(i)) {
            s.peak_queued.fetch_max(tx.len() as u64, Ordering::Relaxed);
        }
    };
    let item = match tx.try_send(item) {
        Ok(()) => return peak(shared),
        Err(TrySendError::Full(item)) => item,
        Err(TrySendError::Closed(item)) => {
            shared.interrupted(item, stage, "before the next stage could take the item");
            return;
        }
    };
    // The slow path keeps the names, as the send future owns the item.
    let (id, source, attempts) = (item.id.clone(), item.source.clone(), item.attempts);
    let footprint = item.footprint;
    let blocked = Instant::now();
    tokio::select! {
        biased;
        _ = abort.cancelled() => {
            shared.ledger.place(&id, crate::report::Ended::Failed, footprint);
            shared.failed(
                &id, &source, stage, attempts,
                StageError::new(ErrorKind::Interrupted, "run aborted while handing the item on"),
            )
        }
        sent = tx.send(item) => match sent {
            Ok(()) => peak(shared),
            Err(e) => shared.interrupted(e.into_inner(), stage, "before the next stage could take the item"),
        },
    }
    if let Some(s) = stats {
        add_ns(&s.blocked_ns, blocked);
    }
}

pub(super) async fn drive_source(
    pipeline: &Pipeline,
    mut source: Box<dyn Source>,
    tx: Sender<Item>,
    shared: &Shared,
    only: Option<&HashSet<String>>,
    shard: Option<crate::shard::Shard>,
) -> Option<String> {
    let stop = shared.control.stop.clone();
    let abort = shared.control.abort.clone();
    'inputs: loop {
        // Admission tickets first: nothing is made for an input before its
        // unit of the admission budget is free.
        let Some(tickets) = admission_tickets(pipeline, &stop).await else {
            break 'inputs;
        };
        // An item sent back by a byte budget comes before any new input.
        if let Some(item) = shared.take_requeued() {
            admit(item, tickets, &tx, shared, &abort).await;
            continue;
        }
        let next = loop {
            let next = tokio::select! {
                biased;
                _ = stop.cancelled() => break 'inputs,
                // A source's code: a panic ends admission, not the run.
                next = guarded_async(source.next()) => match next {
                    Ok(next) => next,
                    Err(message) => {
                        tracing::error!("the source panicked; no more inputs are read: {message}");
                        return Some(message);
                    }
                },
            };
            if next.is_some() {
                shared.ledger.read.fetch_add(1, Ordering::AcqRel);
            }
            let id = match &next {
                None => None,
                Some(Ok(input)) => Some(input.id.as_str()),
                Some(Err(e)) => Some(e.id.as_str()),
            };
            let wanted = match id {
                None => true,
                Some(id) => {
                    only.is_none_or(|ids| ids.contains(id)) && shard.is_none_or(|s| s.takes(id))
                }
            };
            if wanted {
                break next;
            }
        };
        let seq = shared.ledger.total.fetch_add(1, Ordering::AcqRel);
        let input = match next {
            None => {
                shared.ledger.total.fetch_sub(1, Ordering::AcqRel);
                shared.ledger.exhausted.store(true, Ordering::Release);
                break;
            }
            Some(Err(SourceError { id, message })) => {
                shared.failed(&id, &id, "source", 0, StageError::permanent(message));
                continue;
            }
            Some(Ok(input)) => input,
        };
        let mut item = Item::new(input);
        item.seq = seq;
        if abort.is_cancelled() {
            shared.interrupted(item, "source", "before the item was admitted");
            break;
        }
        shared.events.emit(|| EventKind::Admitted {
            item: item.id.clone(),
        });
        admit(item, tickets, &tx, shared, &abort).await;
    }
    readmit_until_settled(pipeline, &tx, shared).await;
    None
}

/// One ticket of each of the source's limiters (the admission budget);
/// `None` once the run is stopped.
async fn admission_tickets(pipeline: &Pipeline, stop: &CancellationToken) -> Option<Vec<Ticket>> {
    let mut tickets = Vec::with_capacity(pipeline.source.limits.len());
    for limiter in &pipeline.source.limits {
        tokio::select! {
            biased;
            _ = stop.cancelled() => return None,
            r = limiter.acquire(1, None) => match r {
                Ok(Some(t)) => tickets.push(t),
                Ok(None) => {}
                Err(_) => return None,
            },
        }
    }
    Some(tickets)
}

/// Hands an admitted item, with its admission tickets, to the first stage.
async fn admit(
    mut item: Item,
    tickets: Vec<Ticket>,
    tx: &Sender<Item>,
    shared: &Shared,
    abort: &CancellationToken,
) {
    for t in tickets {
        item.keep(t);
    }
    forward(tx, item, 0, shared, abort, "source", None).await;
}

/// After the last input (or a stop): admits again the items a byte budget
/// sends back, until every admitted item has ended (or the run is
/// aborted). Until then the first mailbox stays open.
async fn readmit_until_settled(pipeline: &Pipeline, tx: &Sender<Item>, shared: &Shared) {
    let abort = shared.control.abort.clone();
    // A stop ends admission of new inputs, not of items already admitted.
    let never_stop = CancellationToken::new();
    loop {
        let moved = shared.moved.notified();
        tokio::pin!(moved);
        moved.as_mut().enable();
        if let Some(item) = shared.take_requeued() {
            let tickets = tokio::select! {
                biased;
                _ = abort.cancelled() => None,
                t = admission_tickets(pipeline, &never_stop) => t,
            };
            match tickets {
                Some(tickets) if !abort.is_cancelled() => {
                    admit(item, tickets, tx, shared, &abort).await
                }
                _ => {
                    shared.interrupted(item, "source", "before the item was admitted again");
                    return;
                }
            }
            continue;
        }
        if shared.ledger.in_flight() == 0 {
            return;
        }
        tokio::select! {
            biased;
            _ = abort.cancelled() => return,
            _ = &mut moved => {}
        }
    }
}
