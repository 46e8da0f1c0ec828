//! The state of a byte budget: who holds how much, who waits for more, and
//! the rule that keeps it from deadlocking.
//!
//! # Why a byte budget cannot deadlock
//!
//! Items grow as they travel (a fetched body, then its decoded pixels, then
//! the warp's input and output side by side), and each item holds its share
//! while it waits in a mailbox. A plain semaphore stalls for good when every
//! byte is held by items that each wait for more (a hold-and-wait circle:
//! issue 16 saw it with a skewed corpus at 256 MiB). Three rules make
//! progress follow from the design instead:
//!
//! 1. **An item asks only for the difference** between what its stage
//!    charges and what it already holds, and gives back the excess when the
//!    charge shrinks. Its share is one ticket that grows and shrinks.
//! 2. **The deepest item is served first** (deeper in the flow, then
//!    earlier admitted): no byte goes to anyone else while the first waiter
//!    waits, so new admissions stop as soon as an item downstream needs room.
//! 3. **A stuck first waiter evicts what blocks it.** The budget knows which
//!    bytes are held by items that cannot move on their own: items waiting
//!    for more, and items parked in a mailbox of a stage no deeper than the
//!    first waiter's. When the first waiter's need exceeds what is free plus
//!    everything else (held by items being worked on, or parked deeper in the
//!    flow, all of which will move), it is stuck: every other waiter that
//!    holds bytes, or that waits at a stage the parked bytes must pass
//!    through (at or below the shallowest mailbox holding some), is told to
//!    give its item back (the engine sends it to the start of the flow
//!    again, holding nothing), and the first waiter empties its own mailbox
//!    the same way.
//!
//! The argument: take the first waiter `w`. Items deeper than `w` never wait
//! on this budget (they would come first), so they finish or park deeper,
//! and are counted as movable. Items no deeper than `w` are either worked on
//! (movable), waiting, or parked. Parked in `w`'s own mailbox, `w` takes
//! them out. Parked further up, at stage `d`: every waiter from `d` to `w`'s
//! stage is evicted, so the workers from `d` on are each working (they
//! finish and pass the item on), waiting to pass it on (into a mailbox whose
//! workers are in the same case, down to `w`'s, which `w` empties), or
//! evicted and free to take the next item. So the parked items move, and an
//! item that moves either needs no more (it passes) or waits and is evicted.
//! While `w` is stuck, the bytes held by anyone but `w` and the movable
//! items only fall, and the movable ones finish. `w`'s whole charge
//! fits the budget (larger charges fail or take the whole budget), so `w` is
//! served. Each service moves the first waiter on; an item served at the last
//! stage that charges ends. Evicted items come back through admission, so
//! every item ends. `engine/tests/all/budget.rs` checks it on random flows.

use std::collections::BTreeMap;
use std::sync::Mutex;

use tokio::sync::Notify;

/// Who asks for bytes: how deep in the flow the item is (the index of the
/// stage that charges), then how early it was admitted. A greater priority
/// is served first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Priority {
    /// The index of the stage asking, in flow order.
    pub depth: u32,
    /// The item's admission number (lower: admitted earlier).
    pub seq: u64,
}

impl Priority {
    /// The priority of code that asks on its own (not through the engine):
    /// served after every item the engine asks for.
    pub const LOWEST: Priority = Priority {
        depth: 0,
        seq: u64::MAX,
    };
}

impl Ord for Priority {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.depth
            .cmp(&other.depth)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

impl PartialOrd for Priority {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// A waiter's place in the queue: its priority, then first come first
/// served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    priority: Priority,
    id: u64,
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.priority
            .cmp(&other.priority)
            .then_with(|| other.id.cmp(&self.id))
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Debug, Clone, Copy)]
struct Want {
    /// Bytes wanted on top of `held`.
    more: u64,
    /// Bytes the waiter's item holds already.
    held: u64,
}

#[derive(Debug, Default)]
struct State {
    /// Bytes held by tickets.
    used: u64,
    /// The part of `used` held by items that wait for more.
    held_by_waiters: u64,
    /// The part of `used` held by items parked in a mailbox, by the depth of
    /// the stage whose mailbox it is.
    parked: BTreeMap<u32, u64>,
    waiters: BTreeMap<Key, Want>,
    /// Moves on every change, so a waiter cannot miss one.
    version: u64,
    next_id: u64,
    /// Items told to give their bytes back.
    evictions: u64,
}

impl State {
    /// The first waiter, if it cannot be served even once every item that
    /// can move has given its bytes back.
    fn stuck(&self, capacity: u64) -> Option<Key> {
        let (&key, want) = self.waiters.last_key_value()?;
        let free = capacity.saturating_sub(self.used);
        if want.more <= free {
            return None;
        }
        let blocked: u64 = self
            .parked
            .range(..=key.priority.depth)
            .map(|(_, b)| *b)
            .sum();
        let movable = self
            .used
            .saturating_sub(self.held_by_waiters)
            .saturating_sub(blocked);
        (want.more > free.saturating_add(movable)).then_some(key)
    }

    fn changed(&mut self) {
        self.version = self.version.wrapping_add(1);
    }
}

/// How a wait for more bytes ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// The bytes are the waiter's.
    Granted,
    /// An item deeper in the flow is stuck behind this one's bytes: give
    /// them back (the item goes to the start of the flow again).
    Evicted,
    /// This waiter is first and stuck: take parked items out of the stage's
    /// own mailbox and give their bytes back, then wait again; `version`
    /// is the state this was decided on (see [`Budget::changed_since`]).
    Stuck {
        /// The state's version when this was decided.
        version: u64,
    },
}

/// A byte budget (in bytes; amounts are whole KiB by the caller's rounding).
#[derive(Debug)]
pub(crate) struct Budget {
    capacity: u64,
    state: Mutex<State>,
    changed: Notify,
}

impl Budget {
    pub(crate) fn new(capacity: u64) -> Self {
        Budget {
            capacity,
            state: Mutex::new(State::default()),
            changed: Notify::new(),
        }
    }

    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every update leaves the state whole, so a poisoned lock's data is
        // still right.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn update<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let r = {
            let mut s = self.lock();
            let r = f(&mut s);
            s.changed();
            r
        };
        self.changed.notify_waiters();
        r
    }

    /// Bytes free right now.
    pub(crate) fn available(&self) -> u64 {
        self.capacity.saturating_sub(self.lock().used)
    }

    /// Items told to give their bytes back so far.
    #[cfg(test)]
    fn evictions(&self) -> u64 {
        self.lock().evictions
    }

    /// Takes `amount` bytes now if they are free and nobody waits.
    pub(crate) fn try_take(&self, amount: u64) -> bool {
        let taken = {
            let mut s = self.lock();
            let fits = s.waiters.is_empty() && amount <= self.capacity.saturating_sub(s.used);
            if fits {
                s.used += amount;
                s.changed();
            }
            fits
        };
        if taken {
            self.changed.notify_waiters();
        }
        taken
    }

    /// Gives back `amount` bytes, held by an item parked at `parked` (or
    /// moving, `None`).
    pub(crate) fn give_back(&self, amount: u64, parked: Option<u32>) {
        self.update(|s| {
            s.used = s.used.saturating_sub(amount);
            if let Some(depth) = parked {
                unpark(s, depth, amount);
            }
        });
    }

    /// Marks `amount` held bytes as parked in the mailbox of stage `depth`
    /// (`Some`), or moving again (`None`, after `from`).
    pub(crate) fn set_parked(&self, amount: u64, from: Option<u32>, to: Option<u32>) {
        if amount == 0 || from == to {
            return;
        }
        self.update(|s| {
            if let Some(depth) = from {
                unpark(s, depth, amount);
            }
            if let Some(depth) = to {
                *s.parked.entry(depth).or_default() += amount;
            }
        });
    }

    /// Joins the queue for `more` bytes on top of the `held` the item has.
    pub(crate) fn request(&self, priority: Priority, held: u64, more: u64) -> Request<'_> {
        let id = self.update(|s| {
            let id = s.next_id;
            s.next_id += 1;
            s.held_by_waiters += held;
            s.waiters.insert(Key { priority, id }, Want { more, held });
            id
        });
        Request {
            budget: self,
            key: Key { priority, id },
            done: false,
        }
    }

    /// Resolves once the state has moved past `version`.
    pub(crate) async fn changed_since(&self, version: u64) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.lock().version != version {
                return;
            }
            notified.await;
        }
    }
}

fn unpark(s: &mut State, depth: u32, amount: u64) {
    if let Some(b) = s.parked.get_mut(&depth) {
        *b = b.saturating_sub(amount);
        if *b == 0 {
            s.parked.remove(&depth);
        }
    }
}

/// A place in a budget's queue; leaving it (drop) gives up the place.
#[derive(Debug)]
pub(crate) struct Request<'a> {
    budget: &'a Budget,
    key: Key,
    done: bool,
}

impl Request<'_> {
    /// Waits until the bytes are granted, the item must give its bytes back,
    /// or this waiter is first and stuck.
    pub(crate) async fn wait(&mut self) -> Wait {
        if self.done {
            return Wait::Granted;
        }
        loop {
            let notified = self.budget.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(end) = self.decide() {
                return end;
            }
            notified.await;
        }
    }

    fn decide(&mut self) -> Option<Wait> {
        let budget = self.budget;
        let mut s = budget.lock();
        let want = *s.waiters.get(&self.key)?;
        let first = s.waiters.last_key_value().map(|(k, _)| *k) == Some(self.key);
        let free = budget.capacity.saturating_sub(s.used);
        if first && want.more <= free {
            s.waiters.remove(&self.key);
            s.used += want.more;
            s.held_by_waiters = s.held_by_waiters.saturating_sub(want.held);
            s.changed();
            drop(s);
            self.done = true;
            budget.changed.notify_waiters();
            return Some(Wait::Granted);
        }
        let stuck = s.stuck(budget.capacity)?;
        if stuck == self.key {
            return Some(Wait::Stuck { version: s.version });
        }
        // In the way: bytes the first waiter needs, or a worker that the
        // parked bytes need to pass through (a waiter at or below the
        // shallowest stage whose mailbox holds some keeps that stage's
        // worker, and with it everything parked above, from moving).
        let shallowest = s
            .parked
            .range(..=stuck.priority.depth)
            .next()
            .map(|(d, _)| *d);
        let holds_a_passage = shallowest.is_some_and(|d| self.key.priority.depth >= d);
        if want.held == 0 && !holds_a_passage {
            return None;
        }
        s.waiters.remove(&self.key);
        s.held_by_waiters = s.held_by_waiters.saturating_sub(want.held);
        s.evictions += 1;
        s.changed();
        drop(s);
        self.done = true;
        budget.changed.notify_waiters();
        Some(Wait::Evicted)
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let key = self.key;
        self.budget.update(|s| {
            if let Some(w) = s.waiters.remove(&key) {
                s.held_by_waiters = s.held_by_waiters.saturating_sub(w.held);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(depth: u32, seq: u64) -> Priority {
        Priority { depth, seq }
    }

    #[test]
    fn deeper_then_older_comes_first() {
        assert!(p(2, 9) > p(1, 0));
        assert!(p(1, 0) > p(1, 1));
        assert!(p(0, 0) > Priority::LOWEST);
    }

    #[tokio::test]
    async fn the_first_waiter_is_served_before_a_smaller_later_one() {
        let b = Budget::new(100);
        assert!(b.try_take(90));
        let mut deep = b.request(p(2, 5), 0, 50);
        let mut shallow = b.request(p(0, 1), 0, 5);
        // 10 are free, enough for the shallow one, but the deep one is first.
        let shallow_now = futures::FutureExt::now_or_never(shallow.wait());
        assert_eq!(shallow_now, None);
        b.give_back(90, None);
        assert_eq!(deep.wait().await, Wait::Granted);
        assert_eq!(shallow.wait().await, Wait::Granted);
        assert_eq!(b.available(), 45);
    }

    #[tokio::test]
    async fn a_stuck_first_waiter_evicts_waiters_that_hold_bytes() {
        let b = Budget::new(100);
        assert!(b.try_take(40)); // held by the deep item, which waits for 50 more
        assert!(b.try_take(40)); // held by a shallow item, which waits for 30 more
        assert!(b.try_take(20)); // parked in the deep stage's own mailbox
        b.set_parked(20, None, Some(2));
        let mut deep = b.request(p(2, 1), 40, 50);
        let mut shallow = b.request(p(1, 2), 40, 30);
        assert_eq!(shallow.wait().await, Wait::Evicted);
        b.give_back(40, None);
        assert!(matches!(deep.wait().await, Wait::Stuck { .. }));
        b.give_back(20, Some(2)); // the deep worker took it out of its mailbox
        assert_eq!(deep.wait().await, Wait::Granted);
        assert_eq!(b.evictions(), 1);
    }

    #[tokio::test]
    async fn bytes_that_will_move_do_not_make_a_waiter_stuck() {
        let b = Budget::new(100);
        assert!(b.try_take(60)); // an item being worked on
        assert!(b.try_take(30)); // parked deeper than the waiter
        b.set_parked(30, None, Some(3));
        let mut w = b.request(p(1, 1), 0, 50);
        assert_eq!(futures::FutureExt::now_or_never(w.wait()), None);
        b.give_back(60, None);
        assert_eq!(w.wait().await, Wait::Granted);
    }
}
