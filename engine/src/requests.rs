//! Requests made outside a stage's workers (a source reading a STAC API's
//! pages), put through the same per-host machinery a stage's worker puts a
//! fetch through: the host's adaptive gate ([`crate::adapt`]: a pause for
//! a refusal's `Retry-After`, a rate learnt from refusals, a concurrency
//! limit) and a [`RetryPolicy`] for transient errors.
//!
//! A refusal (429, 503) is not a failed try, as in a stage: the gate
//! pauses the host and the request waits for it, up to the adaptive
//! `max_throttled` refusals; an unreachable host pauses it too, but each
//! such try counts. Other transient errors (a reset, a timeout, a 500) are
//! tried again after the policy's backoff (or the server's `Retry-After`,
//! if longer); permanent ones fail at once.

use std::future::Future;
use std::sync::Arc;

use crate::adapt::{
    refusal, throttled as is_throttled, Adaptive, AdaptiveSection, Answer, Gates, HostLimits,
};
use crate::item::StageError;
use crate::retry::RetryPolicy;

/// Requests to remote hosts, each host with its own adaptive gate, tried
/// again by one policy. Cloning is cheap and shares the gates.
#[derive(Debug, Clone)]
pub struct Requests {
    gates: Arc<Gates>,
    retry: RetryPolicy,
}

impl Requests {
    /// Requests through gates of `adaptive`, tried again by `retry`.
    pub fn new(adaptive: Adaptive, retry: RetryPolicy) -> Self {
        Requests {
            gates: Arc::new(Gates::new(adaptive, None)),
            retry,
        }
    }

    /// One request at a time per host (a concurrency limit of 1, the
    /// adaptive defaults otherwise), tried as a fetch stage tries by
    /// default ([`RetryPolicy::patient`] with 6 tries).
    pub fn one_at_a_time() -> Self {
        // The defaults resolve for any number of workers (min 1 <= max,
        // decrease 0.5, latency 2.5): `resolve` fails only on given keys.
        let adaptive = Adaptive::resolve(&AdaptiveSection::default(), 1)
            .expect("the default adaptive settings resolve");
        Self::new(adaptive, RetryPolicy::patient(6))
    }

    /// The adaptive settings of every host's gate.
    pub fn adaptive(&self) -> &Adaptive {
        self.gates.settings()
    }

    /// The retry policy.
    pub fn retry(&self) -> &RetryPolicy {
        &self.retry
    }

    /// Sends a request to `host` (its origin, as
    /// [`host_of`](crate::run::host_of) gives it; `None`: no gate, as for a
    /// local file) by calling `once` for each try, until it succeeds, fails
    /// for good, or runs out of tries or refusals. The error of the last
    /// try, saying how many there were when more than one.
    pub async fn send<T, F, Fut>(&self, host: Option<&str>, mut once: F) -> Result<T, StageError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, StageError>>,
    {
        let gate = host.map(|h| self.gates.host(h));
        let (mut attempts, mut throttled) = (0u32, 0u32);
        loop {
            attempts += 1;
            let entered = match &gate {
                Some(g) => Some(g.enter().await),
                None => None,
            };
            let result = once().await;
            let error = match result {
                Ok(value) => {
                    if let Some(t) = entered {
                        t.finish(Answer::Ok);
                    }
                    return Ok(value);
                }
                Err(e) => e,
            };
            let refused = refusal(&error);
            if let Some(t) = entered {
                if let Some(limits) = t.finish(Answer::of(Some(&error), false)) {
                    tracing::info!(host, ?limits, "a host's adaptive limits lowered");
                }
            }
            let max_throttled = self.adaptive().max_throttled;
            if is_throttled(refused, gate.is_some(), throttled, max_throttled) {
                // Not a failed try: the gate holds the next until its pause ends.
                attempts -= 1;
                throttled += 1;
                tracing::debug!(host, throttled, "refused: {}", error.message);
                continue;
            }
            if !self.retry.retries(&error, attempts) {
                return Err(said_how_often(error, attempts, throttled));
            }
            let delay = self
                .retry
                .backoff(attempts)
                .max(error.retry_after.unwrap_or_default());
            tracing::warn!(host, attempts, ?delay, "trying again: {}", error.message);
            tokio::time::sleep(delay).await;
        }
    }

    /// Every host's adaptive limits, as they stand.
    pub fn host_limits(&self) -> Vec<(String, HostLimits)> {
        self.gates.snapshot()
    }
}

/// The last error, saying how many tries and refusals led to it.
fn said_how_often(mut error: StageError, attempts: u32, throttled: u32) -> StageError {
    let tries = (attempts > 1).then(|| format!("{attempts} tries"));
    let refusals =
        (throttled > 0).then(|| format!("{throttled} refusals, at most adaptive `max_throttled`"));
    let said: Vec<String> = tries.into_iter().chain(refusals).collect();
    if !said.is_empty() {
        error
            .message
            .push_str(&format!(" (after {})", said.join(" and ")));
    }
    error
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;
    use crate::item::ErrorKind;

    /// The tries' ends, in turn.
    type Script = Arc<Mutex<VecDeque<Result<u32, StageError>>>>;

    async fn run(
        requests: &Requests,
        host: Option<&str>,
        script: Vec<Result<u32, StageError>>,
    ) -> (Result<u32, StageError>, Vec<Duration>) {
        let script: Script = Arc::new(Mutex::new(script.into()));
        let starts = Arc::new(Mutex::new(Vec::new()));
        let t0 = Instant::now();
        let result = requests
            .send(host, || {
                let (script, starts) = (Arc::clone(&script), Arc::clone(&starts));
                async move {
                    starts.lock().unwrap().push(Instant::now());
                    script
                        .lock()
                        .unwrap()
                        .pop_front()
                        .expect("no more tries scripted")
                }
            })
            .await;
        let at = starts.lock().unwrap().iter().map(|s| *s - t0).collect();
        (result, at)
    }

    fn refused(status: u16, secs: Option<u64>) -> Result<u32, StageError> {
        Err(StageError::transient(format!("HTTP {status}"))
            .with_status(status)
            .with_retry_after(secs.map(Duration::from_secs)))
    }

    /// Three 429s with `Retry-After: 2` and a 503 without one: each pauses
    /// the host (2 s each, then 1 s), and none uses up a try.
    #[tokio::test(start_paused = true)]
    async fn refusals_pause_the_host_and_use_no_try() {
        let requests = Requests::new(
            *Requests::one_at_a_time().adaptive(),
            RetryPolicy::transient(2),
        );
        let script = vec![
            refused(429, Some(2)),
            refused(429, Some(2)),
            refused(429, Some(2)),
            refused(503, None),
            Err(StageError::transient("reset")),
            Ok(7),
        ];
        let (result, at) = run(&requests, Some("http://api"), script).await;
        assert_eq!(result.unwrap(), 7);
        let secs: Vec<u64> = at.iter().map(|d| d.as_secs()).collect();
        assert_eq!(&secs[..4], [0, 2, 4, 6], "each Retry-After waited for");
        assert!(
            at[4] >= Duration::from_secs(7),
            "the 503 paused 1 s: {at:?}"
        );
        assert_eq!(at.len(), 6, "four refusals and one reset: two tries of two");
    }

    /// A transient error uses the policy's tries; the last says how many.
    #[tokio::test(start_paused = true)]
    async fn transient_errors_use_up_the_tries() {
        let requests = Requests::new(
            *Requests::one_at_a_time().adaptive(),
            RetryPolicy::transient(3),
        );
        let reset = || Err(StageError::transient("connection reset"));
        let (result, at) = run(
            &requests,
            Some("http://api"),
            vec![reset(), reset(), reset()],
        )
        .await;
        let e = result.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Transient);
        assert!(e.message.ends_with("(after 3 tries)"), "{}", e.message);
        assert_eq!(at.len(), 3);
        let permanent = vec![Err(StageError::permanent("HTTP 404"))];
        let (result, at) = run(&requests, Some("http://api"), permanent).await;
        assert_eq!(result.unwrap_err().message, "HTTP 404", "not tried again");
        assert_eq!(at.len(), 1);
    }

    /// Past `max_throttled` refusals, a refusal is a failed try (as in a
    /// stage's worker); the last error says how many of each.
    #[tokio::test(start_paused = true)]
    async fn a_host_that_keeps_refusing_fails_the_request() {
        let section = AdaptiveSection {
            max_throttled: Some(2),
            ..AdaptiveSection::default()
        };
        let adaptive = Adaptive::resolve(&section, 1).unwrap();
        let requests = Requests::new(adaptive, RetryPolicy::transient(6));
        // Two refusals waited for, then refusals are failed tries.
        let script = (0..8).map(|_| refused(429, Some(1))).collect();
        let (result, at) = run(&requests, Some("http://api"), script).await;
        let e = result.unwrap_err();
        assert!(
            e.message
                .ends_with("(after 6 tries and 2 refusals, at most adaptive `max_throttled`)"),
            "{}",
            e.message
        );
        assert_eq!(at.len(), 8);
        // Without a host (a local file) there is no gate: a refusal is a
        // transient error like any other.
        let script = vec![refused(503, None), Ok(1)];
        let (result, _) = run(&requests, None, script).await;
        assert_eq!(result.unwrap(), 1);
    }
}
