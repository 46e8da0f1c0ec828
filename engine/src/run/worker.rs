//! A stage's worker: takes an item from its mailbox, acquires the stage's
//! limiters in the global order (resizing a byte budget's share), calls the
//! stage's code, retries, and hands the item on.

use super::*;
use crate::adapt::{self, Answer, Gates, InFlight};

/// What acquiring a stage's limiters came to.
enum Acquired {
    /// Everything the stage needs, to give back or carry after the call.
    Held(Vec<Ticket>),
    /// The item failed or the run was aborted; the item has been counted.
    Gone,
    /// A byte budget needed the item's share for an item deeper in the
    /// flow: the item goes back to the start.
    Evicted(Limiter),
}

pub(super) struct Worker {
    pub(super) index: usize,
    pub(super) plan: StagePlan,
    /// For the first stage's workers: every stage, asked whether an item's
    /// work is already done before anything is spent on it.
    pub(super) skip_checks: Option<Arc<[Handler]>>,
    pub(super) rx: Receiver<Item>,
    pub(super) tx: Option<Sender<Item>>,
    pub(super) shared: Arc<Shared>,
    /// The stage's adaptive per-host limits (a stage that makes requests).
    pub(super) gates: Option<Arc<Gates>>,
    /// Held until the worker ends: the run waits for every token.
    pub(super) _alive: TaskTrackerToken,
}

impl Worker {
    pub(super) async fn run(self) {
        let abort = self.shared.control.abort.clone();
        loop {
            // Work first: when an item is waiting, the abort token (a lock)
            // is not touched at all.
            let starved = self.rx.is_empty().then(Instant::now);
            let mut item = tokio::select! {
                biased;
                received = self.rx.recv() => match received {
                    Ok(item) => item,
                    Err(_) => break, // closed and empty: upstream has finished
                },
                _ = abort.cancelled() => break,
            };
            item.set_parked(None);
            let stats = &self.shared.stats[self.index];
            if let Some(since) = starved {
                add_ns(&stats.starved_ns, since);
            }
            if self.shared.aborted.load(Ordering::Acquire) {
                self.shared.interrupted(
                    item,
                    &self.plan.name,
                    "while the item waited in the mailbox",
                );
                break;
            }
            let working = stats.working.fetch_add(1, Ordering::Relaxed) + 1;
            stats.peak_working.fetch_max(working, Ordering::Relaxed);
            // At ERROR level so the span is kept whatever level the filter lets
            // through: every line inside an item's work carries its id and stage.
            let span = tracing::error_span!("item", id = %item.id, stage = %self.plan.name);
            self.handle(item, &abort).instrument(span).await;
            stats.working.fetch_sub(1, Ordering::Relaxed);
        }
    }

    async fn handle(&self, item: Item, abort: &CancellationToken) {
        let stage = self.plan.name.as_str();
        let shared = &self.shared;
        if let Some(checks) = &self.skip_checks {
            // A stage's code: a panic fails the item, not the worker.
            match guarded(|| checks.iter().find_map(|h| h.skip_check(&item))) {
                Ok(None) => {}
                Ok(Some(reason)) => {
                    shared.skipped(&item, stage, &reason);
                    return;
                }
                Err(text) => {
                    let error = panicked(&item.id, &text);
                    shared.failed(&item.id, &item.source, stage, 0, error);
                    return;
                }
            }
        }
        let Some((mut item, result, held)) = self.try_until_done(item, abort).await else {
            return; // failed, interrupted or sent back, and counted
        };

        // Tickets this stage carries travel on; the rest are given back now.
        for ticket in held {
            if self.plan.carry.iter().any(|c| c == ticket.limiter().name()) {
                item.keep(ticket);
            }
        }

        let stats = &shared.stats[self.index];
        if matches!(result, Ok(Outcome::Continue)) {
            stats.passed.fetch_add(1, Ordering::Relaxed);
            item.passed.push(self.plan.kind.clone());
        }
        match result {
            Ok(Outcome::Continue) => match &self.tx {
                None => shared.done(&item),
                Some(tx) => {
                    let next = u32::try_from(self.index + 1).unwrap_or(u32::MAX);
                    forward(tx, item, next, shared, abort, stage, Some(stats)).await
                }
            },
            Ok(Outcome::Skip(reason)) => shared.skipped(&item, stage, &reason),
            Err(error) => shared.fail(&item, stage, error),
        }
    }

    /// Tries the item until the stage succeeds, fails it for good, or it is
    /// gone (`None`: failed, interrupted or sent back, and counted). A
    /// refusal from a throttling host (429, 503) is not a failed try: the
    /// host's gate pauses every try to it, and the item tries again, up to
    /// `max_throttled` refusals.
    async fn try_until_done(
        &self,
        mut item: Item,
        abort: &CancellationToken,
    ) -> Option<(Item, Result<Outcome, StageError>, Vec<Ticket>)> {
        let (stage, shared) = (self.plan.name.as_str(), &self.shared);
        let requests = self.plan.handler.counts_requests();
        // Only a stage that adapts parses the item's host, once per stage.
        let gate = self
            .gates
            .as_ref()
            .and_then(|g| host_of(&item.source).map(|h| (g.host(&h), h)));
        (item.attempts, item.throttled) = (0, 0);
        loop {
            item.attempts += 1;
            let mut entered = match &gate {
                None => None,
                Some((g, _)) => tokio::select! {
                    biased;
                    _ = abort.cancelled() => {
                        shared.interrupted(item, stage, "while waiting for its host");
                        return None;
                    }
                    t = g.enter() => Some(t),
                },
            };
            let (mut result, held) = match self.acquire(&mut item, abort).await {
                Ok(Acquired::Gone) => return None,
                Ok(Acquired::Evicted(limiter)) => {
                    shared.requeue(item, stage, &limiter);
                    return None;
                }
                Ok(Acquired::Held(held)) => {
                    // The host's answer is timed from here: a wait for a
                    // limiter (a rate bucket's token) is not the host's.
                    if let Some(t) = &mut entered {
                        t.starts_now();
                    }
                    (self.call(&mut item, abort).await, held)
                }
                Err(error) => (Err(error), Vec::new()),
            };
            let refused = matches!(&result, Err(e) if adapt::refusal(e));
            let at_rate = match &result {
                Err(e) if refused => self.tell_limits(&item, e),
                _ => false,
            };
            if let (Some(t), Some((_, host))) = (entered, &gate) {
                self.tell_gate(t, host, &result, at_rate);
            }
            let max_throttled = self
                .gates
                .as_ref()
                .map_or(0, |g| g.settings().max_throttled);
            let throttled =
                adapt::throttled(refused, gate.is_some(), item.throttled, max_throttled);
            if let (true, Err(e)) = (refused && gate.is_some() && !throttled, &mut result) {
                e.message.push_str(&format!(
                    " (the host refused this item {} times: adaptive `max_throttled`)",
                    item.throttled + 1
                ));
            }
            let retrying =
                throttled || matches!(&result, Err(e) if self.plan.retry.retries(e, item.attempts));
            if requests {
                self.count_request(&item, &result, retrying);
            }
            let error = match result {
                Err(error) if retrying => error,
                result => return Some((item, result, held)),
            };
            drop(held); // nothing is held while waiting
            let delay = self.before_retry(&mut item, &error, throttled, refused);
            tracing::debug!(item = %item.id, stage, attempt = item.attempts, ?delay, "retrying: {}", redact_text(&error.message));
            tokio::select! {
                biased;
                _ = abort.cancelled() => {
                    shared.interrupted(item, stage, "while waiting to retry");
                    return None;
                }
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// Tells the stage's rate limiters that the item's request was refused
    /// (429, 503): they pause for its `Retry-After` and, if the request was
    /// at a bucket's own rate, widen its margin. Whether it was.
    fn tell_limits(&self, item: &Item, error: &StageError) -> bool {
        let key = self.rate_key(item);
        let mut at_rate = false;
        for l in &self.plan.limits {
            at_rate |= l.refused(key.as_deref(), error.retry_after);
        }
        at_rate
    }

    /// Tells the host's gate how a try to it ended. An unreachable host
    /// pauses like a 503 (`refused`), but each try still counts: a host
    /// that stays down fails its items. A refusal at a configured bucket's
    /// rate (`at_rate`) is the bucket's to learn from, not the gate's.
    fn tell_gate(
        &self,
        entered: InFlight,
        host: &str,
        result: &Result<Outcome, StageError>,
        at_rate: bool,
    ) {
        if let Some(limits) = entered.finish(Answer::of(result.as_ref().err(), at_rate)) {
            self.shared.host_limits_lowered(host, &limits);
        }
    }

    /// Before the item is tried again: the rate limiters pause for the
    /// server's `Retry-After` (a refusal's was told them already), and the
    /// wait before the next try. A throttled try is not a failed one: it
    /// does not count, and the host's gate holds the next one until its
    /// pause is over.
    fn before_retry(
        &self,
        item: &mut Item,
        error: &StageError,
        throttled: bool,
        refused: bool,
    ) -> Duration {
        let key = self.rate_key(item);
        if let (Some(delay), false) = (error.retry_after, refused) {
            for l in &self.plan.limits {
                l.pause_key(key.as_deref(), delay);
            }
        }
        if throttled {
            item.attempts -= 1;
            item.throttled += 1;
            Duration::ZERO
        } else {
            self.plan
                .retry
                .backoff(item.attempts)
                .max(error.retry_after.unwrap_or_default())
        }
    }

    /// Counts one try of a request-making stage against the item's host.
    fn count_request(&self, item: &Item, result: &Result<Outcome, StageError>, retrying: bool) {
        let host = host_of(&item.source).unwrap_or_else(|| "(local)".to_owned());
        let now = Instant::now();
        let mut hosts = self.shared.hosts.lock().unwrap_or_else(|p| p.into_inner());
        let h = hosts.entry(host).or_default();
        h.requests += 1;
        h.first.get_or_insert(now);
        h.last = Some(now);
        if matches!(result, Err(e) if e.status == Some(429)) {
            h.throttled += 1;
        }
        if retrying {
            h.retries += 1;
        }
    }

    /// The bucket key of the item for this stage's keyed rate limiters.
    fn rate_key(&self, item: &Item) -> Option<String> {
        self.plan
            .limits
            .iter()
            .any(|l| l.rate_key() == Some(RateKey::Host))
            .then(|| host_of(&item.source))
            .flatten()
    }

    /// Acquires the stage's limiters in the global order (the plan's limits
    /// are sorted). A byte budget the item already holds is resized: the
    /// stage waits only for the difference.
    async fn acquire(
        &self,
        item: &mut Item,
        abort: &CancellationToken,
    ) -> Result<Acquired, StageError> {
        // What the item carries of a limiter this stage takes again is given
        // back first (a count: nothing waits for a slot while holding one),
        // except a byte budget, whose share the stage resizes.
        for name in &self.plan.release {
            if !self.recharges(name) {
                item.release(name);
            }
        }
        // `demand` runs once per try, before `process`: here when its answer
        // is a charge, else in `call`, just before `process`.
        let bytes = if self.charges_bytes() {
            let demand = || {
                guarded(|| self.plan.handler.demand(item))
                    .unwrap_or_else(|text| Err(panicked(&item.id, &text)))
            };
            self.on_stage_cpu(demand)?
        } else {
            0
        };
        let mut held = Vec::with_capacity(self.plan.limits.len());
        let key = self.rate_key(item);
        let mut waits = Vec::new();
        for limiter in &self.plan.limits {
            let started = self.shared.events.on().then(Instant::now);
            let acquired = tokio::select! {
                biased;
                r = self.take(limiter, item, bytes, key.as_deref()) => r,
                _ = abort.cancelled() => Err(LimitError::Closed(limiter.name().to_owned())),
            };
            if let Some(t) = started {
                waits.push((limiter.name().to_owned(), t.elapsed().as_secs_f64()));
            }
            match acquired {
                Ok(Some(Charged::Held(ticket))) => held.push(ticket),
                Ok(Some(Charged::Evicted)) => return Ok(Acquired::Evicted(limiter.clone())),
                Ok(None) => {}
                Err(e) => return self.limit_failed(item, e),
            }
        }
        self.shared.events.emit(|| EventKind::StageStarted {
            item: item.id.clone(),
            stage: self.plan.name.clone(),
            attempt: item.attempts,
            waits,
        });
        Ok(Acquired::Held(held))
    }

    /// Whether this stage lists a byte budget, so that its `demand` is a
    /// charge and runs before the limiters are taken.
    fn charges_bytes(&self) -> bool {
        self.plan
            .limits
            .iter()
            .any(|l| l.kind() == LimiterKind::Bytes)
    }

    /// Whether this stage charges the byte budget `name` again.
    fn recharges(&self, name: &str) -> bool {
        self.plan
            .limits
            .iter()
            .any(|l| l.name() == name && l.kind() == LimiterKind::Bytes)
    }

    /// Takes one limiter for `item`: a slot, a token, or its share of a
    /// byte budget resized to `bytes`. While this stage's request is first
    /// and stuck, the items parked in its mailbox go back to the start.
    async fn take(
        &self,
        limiter: &Limiter,
        item: &mut Item,
        bytes: u64,
        key: Option<&str>,
    ) -> Result<Option<Charged>, LimitError> {
        if limiter.kind() != LimiterKind::Bytes {
            return Ok(limiter.acquire(1, key).await?.map(Charged::Held));
        }
        let carried = item.take_ticket(limiter.name());
        let priority = Priority {
            depth: u32::try_from(self.index).unwrap_or(u32::MAX),
            seq: item.seq,
        };
        let evict = |parked: Item| self.shared.requeue(parked, &self.plan.name, limiter);
        let charged = limiter
            .charge(carried, bytes, priority, Some(&self.rx), evict)
            .await?;
        Ok(Some(charged))
    }

    /// Counts the item failed (over budget, or the run was aborted while it
    /// waited), or asks for another try (a global rate's backend failed).
    fn limit_failed(&self, item: &Item, e: LimitError) -> Result<Acquired, StageError> {
        let kind = match e {
            LimitError::OverBudget { .. } => ErrorKind::OverBudget,
            LimitError::Closed(_) => ErrorKind::Interrupted,
            // The engine's own requests are sent back, not failed; a
            // stage's code that sees this fails its try.
            LimitError::GaveBack(_) => ErrorKind::Transient,
            // Try again like any transient failure.
            LimitError::Backend { .. } => {
                return Err(StageError::transient(format!("{}: {e}", item.id)))
            }
        };
        let message = match kind {
            ErrorKind::Interrupted => "run aborted while waiting for a limiter".to_owned(),
            _ => format!("{}: {e}", item.id),
        };
        let error = StageError::new(kind, message);
        self.shared.fail(item, &self.plan.name, error);
        Ok(Acquired::Gone)
    }

    /// Runs `f`, the stage's own code, adding the CPU time it used to the
    /// stage's when the stage is blocking (its threads are its own, so
    /// their CPU time is the stage's).
    fn on_stage_cpu<T>(&self, f: impl FnOnce() -> T) -> T {
        if !self.plan.handler.is_blocking() {
            return f();
        }
        let before = crate::report::thread_cpu();
        let r = f();
        let used = crate::report::thread_cpu().saturating_sub(before);
        self.shared.stats[self.index].cpu_ns.fetch_add(
            u64::try_from(used.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        r
    }

    /// Runs the stage's code once, timing it and turning a panic into an
    /// error: its `demand` (unless `acquire` ran it for a charge), then its
    /// `process`.
    async fn call(
        &self,
        item: &mut Item,
        abort: &CancellationToken,
    ) -> Result<Outcome, StageError> {
        let started = Instant::now();
        let prepare = !self.charges_bytes();
        let result = match &self.plan.handler {
            Handler::Async(h) => {
                let id = item.id.clone();
                let prepared = if prepare {
                    guarded(|| h.demand(item).map(drop))
                        .unwrap_or_else(|text| Err(panicked(&id, &text)))
                } else {
                    Ok(())
                };
                match prepared {
                    Err(e) => Err(e),
                    Ok(()) => tokio::select! {
                        biased;
                        r = guarded_async(h.process(item)) => r.unwrap_or_else(|text| Err(panicked(&id, &text))),
                        _ = abort.cancelled() => Err(StageError::new(ErrorKind::Interrupted, "run aborted while the stage was working")),
                    },
                }
            }
            Handler::Blocking(h) => {
                // This is an OS thread of the stage's own, not a runtime
                // thread: blocking here blocks no other work. One reading
                // of the CPU clock covers `demand` and `process`.
                self.on_stage_cpu(|| {
                    guarded(|| {
                        if prepare {
                            h.demand(item)?;
                        }
                        h.process(item)
                    })
                    .unwrap_or_else(|text| Err(panicked(&item.id, &text)))
                })
            }
        };
        let stats = &self.shared.stats[self.index];
        stats.processed.fetch_add(1, Ordering::Relaxed);
        if let Some(path) = item.path.take() {
            stats.took(path);
        }
        let busy = started.elapsed();
        stats.busy_ns.fetch_add(
            u64::try_from(busy.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        self.shared.events.emit(|| EventKind::StageFinished {
            item: item.id.clone(),
            stage: self.plan.name.clone(),
            busy_s: busy.as_secs_f64(),
            outcome: match &result {
                Ok(Outcome::Continue) => TryOutcome::Ok,
                Ok(Outcome::Skip(_)) => TryOutcome::Skip,
                Err(e) => TryOutcome::Failed(e.kind),
            },
        });
        result
    }
}
