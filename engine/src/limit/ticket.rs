//! A [`Ticket`]: a share of a count or bytes limiter that gives itself back
//! when dropped, and the engine's way of charging a byte budget
//! ([`Limiter::charge`]): grow or shrink what an item holds.

use std::fmt;
use std::sync::atomic::Ordering;

use tokio::sync::OwnedSemaphorePermit;

use super::budget::{Budget, Priority, Wait};
use super::{LimitError, Limiter, Oversize, State, KIB};

/// What a ticket holds on to.
enum Hold {
    /// Slots of a count limiter, given back when the permit drops.
    Permit { _permit: OwnedSemaphorePermit },
    /// Bytes of a byte budget; `Some(depth)` while the item holding them is
    /// parked in the mailbox of stage `depth`.
    Budget { parked: Option<u32> },
}

/// A share of a count or bytes limiter. Dropping it gives the share back.
pub struct Ticket {
    limiter: Limiter,
    amount: u64,
    // Dropped after `Drop::drop` has lowered the gauge, so the gauge never
    // shows more in use than the limiter has handed out.
    hold: Hold,
}

impl Ticket {
    pub(super) fn counted(limiter: Limiter, amount: u64, permit: OwnedSemaphorePermit) -> Self {
        Ticket {
            limiter,
            amount,
            hold: Hold::Permit { _permit: permit },
        }
    }

    /// The limiter this ticket belongs to.
    pub fn limiter(&self) -> &Limiter {
        &self.limiter
    }

    /// Slots (count) or bytes (bytes, rounded up to KiB) held.
    pub fn amount(&self) -> u64 {
        self.amount
    }

    fn budget(&self) -> Option<&Budget> {
        match &self.limiter.inner.state {
            State::Bytes { budget, .. } => Some(budget),
            _ => None,
        }
    }

    /// Marks the bytes as held by an item parked in the mailbox of stage
    /// `depth` (`Some`), or moving again (`None`). No effect on slots.
    pub(crate) fn set_parked(&mut self, depth: Option<u32>) {
        let amount = self.amount;
        let budget = match &self.limiter.inner.state {
            State::Bytes { budget, .. } => budget,
            _ => return,
        };
        if let Hold::Budget { parked } = &mut self.hold {
            budget.set_parked(amount, *parked, depth);
            *parked = depth;
        }
    }

    /// Gives back what is held beyond `amount` bytes.
    fn shrink_to(&mut self, amount: u64) {
        let excess = self.amount.saturating_sub(amount);
        if excess == 0 {
            return;
        }
        if let (Some(budget), Hold::Budget { parked }) = (self.budget(), &self.hold) {
            budget.give_back(excess, *parked);
        }
        self.amount -= excess;
        self.limiter.inner.gauge.sub(excess);
    }
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticket")
            .field("limiter", &self.limiter.name())
            .field("amount", &self.amount)
            .finish()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.limiter.inner.gauge.sub(self.amount);
        if let (Some(budget), Hold::Budget { parked }) = (self.budget(), &self.hold) {
            budget.give_back(self.amount, *parked);
        }
    }
}

/// How charging a byte budget ended.
#[derive(Debug)]
pub(crate) enum Charged {
    /// The item's share, now the size asked for.
    Held(Ticket),
    /// An item deeper in the flow was stuck behind this one: its share was
    /// given back, and the item must go back to the start of the flow.
    Evicted,
}

impl Limiter {
    /// Makes the item's share of this byte budget `amount` bytes (rounded up
    /// to KiB; over the whole budget, by the [`Oversize`] policy): gives back
    /// the excess at once, or waits for the difference only, served by
    /// `priority`. While this request is first and stuck, items parked in
    /// `mailbox` (the asking stage's own) are taken out and handed to
    /// `evict`, which must give back everything they hold.
    ///
    /// `carried` must be a ticket of this limiter, if any.
    pub(crate) async fn charge<T>(
        &self,
        carried: Option<Ticket>,
        amount: u64,
        priority: Priority,
        mailbox: Option<&async_channel::Receiver<T>>,
        mut evict: impl FnMut(T),
    ) -> Result<Charged, LimitError> {
        let (budget, oversize) = match &self.inner.state {
            State::Bytes { budget, oversize } => (budget, *oversize),
            _ => {
                return Err(LimitError::Backend {
                    limiter: self.inner.name.clone(),
                    message: "not a byte budget".to_owned(),
                })
            }
        };
        let capacity = budget.capacity();
        let mut want = amount.div_ceil(KIB).saturating_mul(KIB);
        if want > capacity {
            match oversize {
                Oversize::Fail => {
                    return Err(LimitError::OverBudget {
                        limiter: self.inner.name.clone(),
                        requested: amount,
                        budget: capacity,
                    })
                }
                Oversize::Alone => want = capacity,
            }
        }
        let mut ticket = carried.unwrap_or_else(|| Ticket {
            limiter: self.clone(),
            amount: 0,
            hold: Hold::Budget { parked: None },
        });
        let held = ticket.amount;
        if want <= held {
            ticket.shrink_to(want);
            return Ok(Charged::Held(ticket));
        }
        let more = want - held;
        if !budget.try_take(more) {
            let _waiting = self.inner.gauge.begin_wait();
            let mut request = budget.request(priority, held, more);
            loop {
                match request.wait().await {
                    Wait::Granted => break,
                    Wait::Evicted => return Ok(Charged::Evicted), // drops `ticket`
                    Wait::Stuck { version } => {
                        let pulled = match mailbox {
                            Some(rx) => tokio::select! {
                                biased;
                                r = rx.recv() => r.ok(),
                                _ = budget.changed_since(version) => None,
                            },
                            None => None,
                        };
                        match pulled {
                            Some(parked) => evict(parked),
                            None => budget.changed_since(version).await,
                        }
                    }
                }
            }
        } else {
            self.inner.gauge.immediate.fetch_add(1, Ordering::Relaxed);
        }
        ticket.amount = want;
        self.inner.gauge.add(more);
        Ok(Charged::Held(ticket))
    }

    /// Makes `held` (a ticket of this byte budget, or none) a share of
    /// `amount` bytes, rounded up to KiB: gives back the excess at once, or
    /// waits for the difference only, after every item the engine serves.
    /// For a stage whose own code charges as it learns more (a body of
    /// unknown length). Fails with [`LimitError::GaveBack`] when an item
    /// deeper in the flow needed the bytes `held` had (the share is then
    /// given back), and with [`LimitError::OverBudget`] when `amount` is
    /// more than the whole budget and the policy is to fail.
    pub async fn resize(&self, held: Option<Ticket>, amount: u64) -> Result<Ticket, LimitError> {
        let no_mailbox: Option<&async_channel::Receiver<()>> = None;
        match self
            .charge(held, amount, Priority::LOWEST, no_mailbox, drop)
            .await?
        {
            Charged::Held(ticket) => Ok(ticket),
            Charged::Evicted => Err(LimitError::GaveBack(self.inner.name.clone())),
        }
    }
}
