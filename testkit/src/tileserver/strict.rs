//! Strict server-side limits, as real APIs count them: a sliding window, a
//! token bucket or a fixed window. Unlike [`Faults::rate_limit`](super::Faults),
//! which forgives scheduling jitter (GCRA with a burst of 3), these refuse
//! the first request beyond the limit, with `429 Too Many Requests` and a
//! whole-second `Retry-After` rounded up from the time until a request
//! would be accepted (at least 1 s, as the header has no fractions).
//!
//! Only accepted requests count against the limit, and every decision is
//! counted ([`Counts`]), so tests and benches read what the server let
//! through and what it refused.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// A strict limit a server enforces on every request, whatever its client.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Strict {
    /// Refuses a request when `limit` were accepted within the `window`
    /// ending now (a request `window` or more ago no longer counts).
    SlidingWindow {
        /// Requests accepted per window.
        limit: u32,
        /// The window's length.
        window: Duration,
    },
    /// A token bucket: `per_second` tokens a second, at most `burst` held
    /// (it starts full); each accepted request takes one.
    TokenBucket {
        /// Tokens added per second.
        per_second: f64,
        /// Tokens the bucket holds at most.
        burst: u32,
    },
    /// At most `limit` accepted in each window of `window`, the windows
    /// counted from the server's first request.
    FixedWindow {
        /// Requests accepted per window.
        limit: u32,
        /// The window's length.
        window: Duration,
    },
}

impl Strict {
    /// `limit` requests in any sliding second.
    pub fn sliding(limit: u32) -> Self {
        Strict::SlidingWindow {
            limit,
            window: Duration::from_secs(1),
        }
    }

    /// A token bucket of `per_second` holding at most `burst`.
    pub fn bucket(per_second: f64, burst: u32) -> Self {
        Strict::TokenBucket { per_second, burst }
    }

    /// `limit` requests in each second from the first request.
    pub fn fixed(limit: u32) -> Self {
        Strict::FixedWindow {
            limit,
            window: Duration::from_secs(1),
        }
    }

    /// The short name of the kind (`sliding`, `bucket`, `fixed`).
    pub fn kind(&self) -> &'static str {
        match self {
            Strict::SlidingWindow { .. } => "sliding",
            Strict::TokenBucket { .. } => "bucket",
            Strict::FixedWindow { .. } => "fixed",
        }
    }
}

/// What a strict limit decided, so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Requests it let through.
    pub accepted: u64,
    /// Requests it refused (429).
    pub refused: u64,
}

/// A strict limit's state: what the tile server consults on each request,
/// and what a simulated server on paused time can consult too.
#[derive(Debug)]
pub struct StrictLimit {
    kind: Strict,
    /// Sliding window: when each request of the window was accepted.
    accepted_at: VecDeque<Instant>,
    /// Token bucket: tokens held at `filled`.
    tokens: f64,
    filled: Option<Instant>,
    /// Fixed window: when the windows start, the current one's index and
    /// its count.
    origin: Option<Instant>,
    current: (u64, u32),
    counts: Counts,
}

impl StrictLimit {
    /// A limit of `kind` that has seen no request.
    pub fn new(kind: Strict) -> Self {
        let tokens = match kind {
            Strict::TokenBucket { burst, .. } => f64::from(burst),
            _ => 0.0,
        };
        StrictLimit {
            kind,
            accepted_at: VecDeque::new(),
            tokens,
            filled: None,
            origin: None,
            current: (0, 0),
            counts: Counts::default(),
        }
    }

    /// What it accepted and refused so far.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// Decides a request arriving `now` (tokio's clock): `Ok` (it counts),
    /// or the whole seconds of its `Retry-After`.
    pub fn admit(&mut self, now: Instant) -> Result<(), u64> {
        let wait = match self.kind {
            Strict::SlidingWindow { limit, window } => {
                while self.accepted_at.front().is_some_and(|t| now - *t >= window) {
                    self.accepted_at.pop_front();
                }
                if self.accepted_at.len() < limit as usize {
                    self.accepted_at.push_back(now);
                    None
                } else {
                    // A place frees when the oldest leaves the window.
                    let oldest = self.accepted_at.front().copied().unwrap_or(now);
                    Some((oldest + window).saturating_duration_since(now))
                }
            }
            Strict::TokenBucket { per_second, burst } => {
                let since = self.filled.map_or(Duration::ZERO, |f| now - f);
                self.tokens =
                    (self.tokens + since.as_secs_f64() * per_second).min(f64::from(burst));
                self.filled = Some(now);
                if self.tokens >= 1.0 {
                    self.tokens -= 1.0;
                    None
                } else {
                    Some(Duration::from_secs_f64((1.0 - self.tokens) / per_second))
                }
            }
            Strict::FixedWindow { limit, window } => {
                let origin = *self.origin.get_or_insert(now);
                let index = ((now - origin).as_nanos() / window.as_nanos().max(1)) as u64;
                if self.current.0 != index {
                    self.current = (index, 0);
                }
                if self.current.1 < limit {
                    self.current.1 += 1;
                    None
                } else {
                    let next = origin + window * u32::try_from(index + 1).unwrap_or(u32::MAX);
                    Some(next.saturating_duration_since(now))
                }
            }
        };
        match wait {
            None => {
                self.counts.accepted += 1;
                Ok(())
            }
            Some(wait) => {
                self.counts.refused += 1;
                Err(whole_seconds(wait))
            }
        }
    }
}

/// `Retry-After` in whole seconds: rounded up, at least 1.
fn whole_seconds(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// Sends a request at each of `at` (ms from `t0`): what each got.
    fn decide(limit: &mut StrictLimit, t0: Instant, at: &[u64]) -> Vec<Result<(), u64>> {
        at.iter().map(|ms| limit.admit(t0 + MS(*ms))).collect()
    }

    #[test]
    fn a_sliding_window_refuses_the_21st_request_within_any_second() {
        let t0 = Instant::now();
        let mut limit = StrictLimit::new(Strict::sliding(20));
        // 20 requests 50 ms apart: all in, the last at 950 ms.
        let first: Vec<u64> = (0..20).map(|i| i * 50).collect();
        assert!(decide(&mut limit, t0, &first).iter().all(Result::is_ok));
        // At 999 ms all 20 are still within the second: refused, and a
        // place frees at 1000 ms (1 ms away), said as 1 s.
        assert_eq!(limit.admit(t0 + MS(999)), Err(1));
        // At 1000 ms the first has left the window.
        assert_eq!(limit.admit(t0 + MS(1000)), Ok(()));
        // The refused one did not count: at 1049 ms the window (49 ms,
        // 1049 ms] holds the 19 from 50 ms on and the one at 1000 ms.
        assert_eq!(limit.admit(t0 + MS(1049)), Err(1));
        assert_eq!(limit.admit(t0 + MS(1050)), Ok(()));
        assert_eq!(
            limit.counts,
            Counts {
                accepted: 22,
                refused: 2
            }
        );
    }

    #[test]
    fn a_sliding_window_refuses_arrivals_paced_at_the_limit_with_jitter() {
        // 50 ms apart on average, one arriving 2 ms early: the 21st
        // within a second, refused (the failure of a bucket at exactly
        // the limit against such a server).
        let t0 = Instant::now();
        let mut limit = StrictLimit::new(Strict::sliding(20));
        let mut at: Vec<u64> = (0..20).map(|i| i * 50 + 5).collect();
        at.push(1003);
        let got = decide(&mut limit, t0, &at);
        assert!(got[..20].iter().all(Result::is_ok));
        assert_eq!(got[20], Err(1));
    }

    #[test]
    fn a_token_bucket_lets_its_burst_through_then_its_rate() {
        let t0 = Instant::now();
        let mut limit = StrictLimit::new(Strict::bucket(20.0, 2));
        let got = decide(&mut limit, t0, &[0, 0, 0]);
        assert_eq!(got, [Ok(()), Ok(()), Err(1)]);
        // One token back 50 ms later, not before.
        assert_eq!(limit.admit(t0 + MS(49)), Err(1));
        assert_eq!(limit.admit(t0 + MS(50)), Ok(()));
        assert_eq!(limit.counts.accepted, 3);
        assert_eq!(limit.counts.refused, 2);
    }

    #[test]
    fn a_token_bucket_says_how_many_whole_seconds_until_a_token() {
        let t0 = Instant::now();
        let mut limit = StrictLimit::new(Strict::bucket(0.4, 1));
        assert_eq!(limit.admit(t0), Ok(()));
        // 2.5 s until the next token: 3 s.
        assert_eq!(limit.admit(t0), Err(3));
    }

    #[test]
    fn a_fixed_window_counts_from_the_first_request() {
        let t0 = Instant::now();
        let mut limit = StrictLimit::new(Strict::fixed(3));
        let got = decide(&mut limit, t0, &[0, 10, 990, 995, 1000, 1001, 1002, 1003]);
        assert_eq!(
            got,
            [
                Ok(()),
                Ok(()),
                Ok(()),
                Err(1),
                Ok(()),
                Ok(()),
                Ok(()),
                Err(1)
            ]
        );
        // A fixed window lets 2 x limit through across its edge: 3 at
        // 0-990 ms and 3 at 1000-1002 ms, 6 within 12 ms.
        assert_eq!(limit.counts.accepted, 6);
    }

    #[test]
    fn retry_after_is_whole_seconds_rounded_up() {
        assert_eq!(whole_seconds(Duration::ZERO), 1);
        assert_eq!(whole_seconds(MS(1)), 1);
        assert_eq!(whole_seconds(MS(1000)), 1);
        assert_eq!(whole_seconds(MS(1001)), 2);
    }
}
