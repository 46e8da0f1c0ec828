//! Signed URLs that expire, for the tests and benchmarks of fetch's
//! `signer`: a [`Sas`] account whose [`TokenServer`] hands out tokens with
//! an expiry as Planetary Computer's SAS endpoint does (`GET
//! /api/sas/v1/token/{collection}` answers `{"msft:expiry": "...",
//! "token": "st=...&se=...&sp=rl&sv=...&sr=c&sig=..."}`), itself
//! rate-limited if asked ([`Strict`]), and whose storage check the tile
//! server makes of every tile request ([`Faults::sas`](crate::Faults)):
//! a token past its `se` gets `403` with Azure's body
//! (`AuthenticationFailed`, "Signature not valid in the specified time
//! frame"), a missing or forged one `403` too ("Signature did not match").
//!
//! Both tell the time by one [`Clock`], which a test may share with the
//! client and move faster than it runs: by hand, or by a `tick` for each
//! tile request the storage accepts (time passing as tiles are served), so
//! a token expires after a known number of tiles, however busy the
//! machine. The signature is a keyed hash (SipHash, a key drawn at
//! random) of the token's fields: a client cannot make one up or stretch
//! its expiry, only ask for a new token.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash, Hasher};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::net::TcpListener;

use crate::tileserver::{read_request, respond, Request, Strict, StrictLimit};

/// The time the token service and the storage tell: the system's or a
/// fixed start, plus whatever it was advanced by.
#[derive(Debug, Clone)]
pub struct Clock {
    /// `None`: the system's time.
    start: Option<SystemTime>,
    /// Milliseconds added.
    ahead: Arc<AtomicU64>,
}

impl Clock {
    /// The system's time (advanced, it runs ahead of it).
    pub fn system() -> Self {
        Clock {
            start: None,
            ahead: Arc::new(AtomicU64::new(0)),
        }
    }

    /// A clock that stands at `start` until advanced.
    pub fn stopped(start: SystemTime) -> Self {
        Clock {
            start: Some(start),
            ahead: Arc::new(AtomicU64::new(0)),
        }
    }

    /// What it says now.
    pub fn now(&self) -> SystemTime {
        let ahead = Duration::from_millis(self.ahead.load(Ordering::SeqCst));
        self.start.unwrap_or_else(SystemTime::now) + ahead
    }

    /// Moves it on by `by` (every copy of it).
    pub fn advance(&self, by: Duration) {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.ahead.fetch_add(ms, Ordering::SeqCst);
    }
}

/// A storage account that signs with a key of its own: it hands out
/// tokens ([`Sas::issue`]) and checks the signed requests made with them
/// ([`Sas::check`]).
#[derive(Debug)]
pub struct Sas {
    key: u64,
    clock: Clock,
    lifetime: Duration,
    tick: Duration,
    /// Milliseconds the storage's clock is ahead of the token service's.
    storage_ahead: AtomicU64,
    issued: AtomicU64,
    accepted: AtomicU64,
    expired: AtomicU64,
    forged: AtomicU64,
    /// Every token handed out, to look for in what a run wrote.
    tokens: Mutex<Vec<String>>,
}

/// A request the storage refused: its status line and Azure's XML body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `403 Forbidden`.
    pub status: &'static str,
    /// The XML error, as Azure Storage writes it.
    pub body: String,
}

impl Sas {
    /// An account whose tokens hold for `lifetime` of `clock`, which moves
    /// on by `tick` for each request the storage accepts.
    pub fn new(clock: Clock, lifetime: Duration, tick: Duration) -> Arc<Self> {
        Arc::new(Sas {
            key: RandomState::new().hash_one("sas key"),
            clock,
            lifetime,
            tick,
            storage_ahead: AtomicU64::new(0),
            issued: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            forged: AtomicU64::new(0),
            tokens: Mutex::new(Vec::new()),
        })
    }

    /// The account's clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Sets the storage's clock `by` ahead of the token service's (theirs
    /// differ): a token this much shorter than its lifetime is refused.
    pub fn set_storage_ahead(&self, by: Duration) {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.storage_ahead.store(ms, Ordering::SeqCst);
    }

    /// A new token, and when it expires: valid from 5 minutes ago (as
    /// Azure's start allows for clocks that differ) until `lifetime` from
    /// now.
    pub fn issue(&self) -> (String, SystemTime) {
        let now = self.clock.now();
        let start = now - Duration::from_secs(300);
        let expiry = now + self.lifetime;
        let (st, se) = (sas_time(start), sas_time(expiry));
        let sig = self.signature(&st, &se);
        let token =
            format!("st={st}&se={se}&sp=rl&sv=2024-05-04&sr=c&skoid=warpline-test&sig={sig}");
        self.issued.fetch_add(1, Ordering::SeqCst);
        lock(&self.tokens).push(token.clone());
        (token, expiry)
    }

    /// Checks a signed request's query (`None`: none at all): `Ok`, and
    /// the clock moves on by `tick`, or Azure's refusal.
    pub fn check(&self, query: Option<&str>) -> Result<(), Refusal> {
        let param = |name: &str| {
            query?
                .split('&')
                .filter_map(|p| p.split_once('='))
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_owned())
        };
        let (Some(st), Some(se), Some(sig)) = (param("st"), param("se"), param("sig")) else {
            self.forged.fetch_add(1, Ordering::SeqCst);
            return Err(refusal("Signature fields not well formed."));
        };
        if sig != self.signature(&st, &se) {
            self.forged.fetch_add(1, Ordering::SeqCst);
            return Err(refusal("Signature did not match."));
        }
        let (Some(start), Some(expiry)) = (parse_sas_time(&st), parse_sas_time(&se)) else {
            self.forged.fetch_add(1, Ordering::SeqCst);
            return Err(refusal("Signature fields not well formed."));
        };
        let ahead = Duration::from_millis(self.storage_ahead.load(Ordering::SeqCst));
        let now = self.clock.now() + ahead;
        if now < start || now > expiry {
            self.expired.fetch_add(1, Ordering::SeqCst);
            return Err(refusal(&format!(
                "Signature not valid in the specified time frame: Start [{}] - Expiry [{}] - \
                 Current [{}]",
                http_date(start),
                http_date(expiry),
                http_date(now)
            )));
        }
        self.accepted.fetch_add(1, Ordering::SeqCst);
        self.clock.advance(self.tick);
        Ok(())
    }

    /// Tokens handed out so far.
    pub fn issued(&self) -> u64 {
        self.issued.load(Ordering::SeqCst)
    }

    /// Signed requests accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Requests refused because their token had expired.
    pub fn expired(&self) -> u64 {
        self.expired.load(Ordering::SeqCst)
    }

    /// Requests refused for a missing or forged signature.
    pub fn forged(&self) -> u64 {
        self.forged.load(Ordering::SeqCst)
    }

    /// Every token handed out so far.
    pub fn tokens(&self) -> Vec<String> {
        lock(&self.tokens).clone()
    }

    /// The signature of a token's times (as written in its query).
    fn signature(&self, st: &str, se: &str) -> String {
        let hash = |salt: u64| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (self.key, salt, st, se, "rl", "c").hash(&mut h);
            h.finish()
        };
        // Base64's `+` and `=` as a SAS carries them, percent-encoded: a
        // client that decodes and encodes the query again spoils it.
        format!("{:016x}%2B{:016x}%3D", hash(1), hash(2))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A time as a SAS field: RFC 3339 to the second, its colons encoded.
fn sas_time(t: SystemTime) -> String {
    rfc3339(t).replace(':', "%3A")
}

fn parse_sas_time(text: &str) -> Option<SystemTime> {
    let t = chrono::DateTime::parse_from_rfc3339(&text.replace("%3A", ":")).ok()?;
    Some(t.into())
}

/// RFC 3339 in UTC, to the second (`msft:expiry`'s form).
fn rfc3339(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn http_date(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t)
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string()
}

fn refusal(detail: &str) -> Refusal {
    Refusal {
        status: "403 Forbidden",
        body: format!(
            "<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>AuthenticationFailed</Code>\
             <Message>Server failed to authenticate the request. Make sure the value of \
             Authorization header is formed correctly including the signature.</Message>\
             <AuthenticationErrorDetail>{detail}</AuthenticationErrorDetail></Error>"
        ),
    }
}

/// The token endpoint of a [`Sas`] account, on loopback. Stops when
/// dropped.
#[derive(Debug)]
pub struct TokenServer {
    addr: SocketAddr,
    shared: Arc<TokenShared>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Debug)]
struct TokenShared {
    sas: Arc<Sas>,
    limit: Option<Mutex<StrictLimit>>,
    /// Requests still to refuse, whatever the limit says.
    refuse: AtomicU64,
    requests: AtomicU64,
    refused: AtomicU64,
}

impl TokenServer {
    /// Serves `sas`'s tokens at `/api/sas/v1/token/{collection}` on the
    /// current tokio runtime; beyond `limit` (if any), `429` with a
    /// `Retry-After`.
    pub async fn start(sas: Arc<Sas>, limit: Option<Strict>) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(TokenShared {
            sas,
            limit: limit.map(|l| Mutex::new(StrictLimit::new(l))),
            refuse: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        });
        let task_shared = Arc::clone(&shared);
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    continue;
                };
                // Head and body are written apart: without this, Nagle's
                // algorithm holds the body for the client's delayed ACK.
                let _ = stream.set_nodelay(true);
                let shared = Arc::clone(&task_shared);
                tokio::spawn(async move {
                    while let Ok(Request::Get(path)) = read_request(&mut stream).await {
                        if answer(&mut stream, &shared, &path).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Ok(TokenServer { addr, shared, task })
    }

    /// The token endpoint of `collection`.
    pub fn url(&self, collection: &str) -> String {
        format!("http://{}/api/sas/v1/token/{collection}", self.addr)
    }

    /// Refuses the next `n` requests (`429`, `Retry-After: 1`), whatever
    /// the limit says.
    pub fn refuse_next(&self, n: u64) {
        self.shared.refuse.store(n, Ordering::SeqCst);
    }

    /// Requests for a token so far (refused ones too).
    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// Requests refused by the rate limit (429).
    pub fn refused(&self) -> u64 {
        self.shared.refused.load(Ordering::SeqCst)
    }
}

impl Drop for TokenServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Answers one request for a token.
async fn answer(
    stream: &mut tokio::net::TcpStream,
    shared: &TokenShared,
    path: &str,
) -> std::io::Result<()> {
    shared.requests.fetch_add(1, Ordering::SeqCst);
    let told = shared
        .refuse
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    let refused = match &shared.limit {
        _ if told => Some(1),
        Some(l) => lock(l).admit(tokio::time::Instant::now()).err(),
        None => None,
    };
    if let Some(secs) = refused {
        shared.refused.fetch_add(1, Ordering::SeqCst);
        let after = [("Retry-After", secs.to_string())];
        respond(stream, "429 Too Many Requests", &after, b"").await?;
        return Ok(());
    }
    let collection = path.strip_prefix("/api/sas/v1/token/").unwrap_or_default();
    if collection.is_empty() || collection.contains(['/', '?']) {
        respond(stream, "404 Not Found", &[], b"no such collection\n").await?;
        return Ok(());
    }
    let (token, expiry) = shared.sas.issue();
    let body = format!(
        "{{\"msft:expiry\":\"{}\",\"token\":\"{token}\"}}",
        rfc3339(expiry)
    );
    let json = [("Content-Type", "application/json".to_owned())];
    respond(stream, "200 OK", &json, body.as_bytes()).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_holds_until_its_expiry_and_not_after() {
        let clock = Clock::stopped(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000));
        let sas = Sas::new(
            clock.clone(),
            Duration::from_secs(20),
            Duration::from_secs(1),
        );
        let (token, expiry) = sas.issue();
        assert_eq!(expiry, clock.now() + Duration::from_secs(20));
        assert!(token.contains("se=2023-11-14T22%3A13%3A40Z"), "{token}");
        for _ in 0..=20 {
            assert_eq!(sas.check(Some(&token)), Ok(()));
        }
        // 21 ticks: a second past its expiry.
        let refused = sas.check(Some(&token)).unwrap_err();
        assert!(
            refused
                .body
                .contains("Signature not valid in the specified time frame"),
            "{refused:?}"
        );
        assert_eq!((sas.accepted(), sas.expired(), sas.forged()), (21, 1, 0));
        // A stretched expiry, or none at all, is a forgery.
        let stretched = token.replace("se=2023-11-14T22%3A13%3A40Z", "se=2099-01-01T00%3A00%3A00Z");
        assert!(sas
            .check(Some(&stretched))
            .unwrap_err()
            .body
            .contains("did not match"));
        assert!(sas.check(None).is_err());
        assert_eq!(sas.forged(), 2);
    }
}
