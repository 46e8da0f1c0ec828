//! A small HTTP/1.1 server on loopback that serves tiles from memory, for
//! the demo, the tests and the benchmarks. It can misbehave on purpose
//! ([`Faults`]): server errors, connection resets, bodies cut short, bodies
//! too slow, 429 storms with `Retry-After`, being down for a while, added
//! latency (fixed, or growing with the requests in flight), a server-side
//! rate limit that may change at set times, a strict limit as real APIs
//! count it (a sliding window, a token bucket, a fixed window: `strict.rs`),
//! and a spell of 503s. It can answer a STAC API's search too, page after
//! page, its items' assets its tiles (`stacapi.rs`, [`StacApi`]).
//! Connections are kept alive between requests, as
//! real tile servers keep them; an answer a fault cuts short closes its
//! connection.
//!
//! It is hand-written on tokio rather than built on a web framework because
//! a framework hides exactly what the faults need: resetting a connection
//! before a response, or stopping a body half-way.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use corpus::Corpus;
use pace::{latency, rate_allows, rate_now};
use stacapi::PageStats;
pub use stacapi::{PageCounts, StacApi};
pub use strict::{Counts, Strict, StrictLimit};

/// Which tiles suffer a fault, and for how many requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// One tile in `one_in` (chosen by a hash of its name) is affected.
    pub one_in: u32,
    /// An affected tile's first `times` requests get the fault; later ones
    /// succeed.
    pub times: u32,
}

impl Fault {
    /// Every tile, on its first `times` requests.
    pub fn all(times: u32) -> Self {
        Fault { one_in: 1, times }
    }

    fn hits(&self, name: &str, salt: &str, attempt: u32) -> bool {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (name, salt).hash(&mut h);
        attempt <= self.times && h.finish() % u64::from(self.one_in.max(1)) == 0
    }
}

/// How the server misbehaves. The default is a well-behaved server.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Answer `500 Internal Server Error`.
    pub server_errors: Option<Fault>,
    /// Reset the connection without answering.
    pub resets: Option<Fault>,
    /// Send the headers and half the body, then close.
    pub truncated: Option<Fault>,
    /// Send the headers and a few bytes, then pause this long.
    pub slow: Option<(Fault, Duration)>,
    /// Answer `429 Too Many Requests` with `Retry-After: N` seconds.
    pub throttle: Option<(Fault, u64)>,
    /// Refuse connections for this long after starting.
    pub down_for: Option<Duration>,
    /// Wait this long before answering each request.
    pub latency: Option<Duration>,
    /// Answer 429 (`Retry-After: 1`) to requests beyond this many per
    /// second: GCRA with a burst of 3 (two requests may come early), as
    /// servers allow, so scheduling jitter alone is not punished.
    pub rate_limit: Option<f64>,
    /// Changes to `rate_limit` during the run: from `.0` after the first
    /// request, `.1` requests a second (in order of time).
    pub rate_changes: Vec<(Duration, f64)>,
    /// A strict limit, counted on every request: 429 beyond it, with a
    /// whole-second `Retry-After` rounded up ([`Strict`]). It replaces
    /// `rate_limit` and `rate_changes`.
    pub strict: Option<Strict>,
    /// Latency that grows with the load: a request that arrives with more
    /// than `.0` requests in flight (itself counted) waits `.1` more for
    /// each one beyond, on top of `latency`.
    pub latency_per_in_flight: Option<(u64, Duration)>,
    /// Answer `503 Service Unavailable` (no `Retry-After`) to every request
    /// from `.0` after the first request, for `.1`.
    pub unavailable: Option<(Duration, Duration)>,
    /// Answer `302 Found` for these tile names, to these locations.
    pub redirects: Vec<(String, String)>,
    /// Serve a tile only to a request signed with a token of this account
    /// that has not expired; `403` with Azure's body otherwise.
    pub sas: Option<Arc<crate::sas::Sas>>,
}

#[derive(Debug, Default)]
struct Stats {
    /// When each tile request arrived.
    times: Mutex<Vec<std::time::Instant>>,
    requests: AtomicU64,
    throttled: AtomicU64,
    in_flight: AtomicU64,
    peak_in_flight: AtomicU64,
    served: AtomicU64,
    unavailable: AtomicU64,
    /// When the first request arrived (the clock of the timed faults).
    first: Mutex<Option<tokio::time::Instant>>,
    /// Each answer's status, and when it was decided.
    answers: Mutex<Vec<(std::time::Instant, u16)>>,
}

impl Stats {
    fn answered(&self, status: u16) {
        let mut a = self.answers.lock().unwrap_or_else(|p| p.into_inner());
        a.push((std::time::Instant::now(), status));
    }

    /// How long since the first request.
    fn since_first(&self) -> Duration {
        let now = tokio::time::Instant::now();
        let mut first = self.first.lock().unwrap_or_else(|p| p.into_inner());
        now - *first.get_or_insert(now)
    }
}

#[derive(Debug)]
struct Shared {
    tiles: Corpus,
    faults: Faults,
    attempts: Mutex<HashMap<String, u32>>,
    stats: Stats,
    /// For the rate limit: the earliest time the next request is allowed.
    next_allowed: Mutex<Option<tokio::time::Instant>>,
    /// The strict limit's state.
    strict: Option<Mutex<StrictLimit>>,
    /// The STAC API answered at `/search`, and its pages' counts.
    stac: Option<StacApi>,
    pages: PageStats,
}

/// A running tile server. Stops when dropped.
#[derive(Debug)]
pub struct TileServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl TileServer {
    /// Serves `tiles` (name, bytes) at `http://127.0.0.1:PORT/tiles/NAME` on
    /// the current tokio runtime. The server keeps one copy of each distinct
    /// tile: names given the same `Arc<Vec<u8>>` share it.
    pub async fn start(
        tiles: impl IntoIterator<Item = (String, impl Into<Arc<Vec<u8>>>)>,
    ) -> std::io::Result<Self> {
        Self::start_with(tiles, Faults::default()).await
    }

    /// As [`start`](Self::start), misbehaving as `faults` says.
    pub async fn start_with(
        tiles: impl IntoIterator<Item = (String, impl Into<Arc<Vec<u8>>>)>,
        faults: Faults,
    ) -> std::io::Result<Self> {
        Self::start_all(tiles, faults, None).await
    }

    /// As [`start_with`](Self::start_with), answering the STAC API `api`
    /// at `http://127.0.0.1:PORT/search` (its pages suffer the faults too).
    pub async fn start_stac(
        tiles: impl IntoIterator<Item = (String, impl Into<Arc<Vec<u8>>>)>,
        faults: Faults,
        api: StacApi,
    ) -> std::io::Result<Self> {
        Self::start_all(tiles, faults, Some(api)).await
    }

    async fn start_all(
        tiles: impl IntoIterator<Item = (String, impl Into<Arc<Vec<u8>>>)>,
        faults: Faults,
        stac: Option<StacApi>,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let down_for = faults.down_for;
        let shared = Arc::new(Shared {
            tiles: Corpus::pack(tiles)?,
            attempts: Mutex::new(HashMap::new()),
            stats: Stats::default(),
            next_allowed: Mutex::new(None),
            strict: faults.strict.map(|k| Mutex::new(StrictLimit::new(k))),
            faults,
            stac,
            pages: PageStats::default(),
        });
        let task_shared = Arc::clone(&shared);
        let task = tokio::spawn(async move {
            let listener = match down_for {
                None => listener,
                Some(d) => {
                    // Down: nothing listens on the port (connections are
                    // refused), then the same port is bound again.
                    drop(listener);
                    tokio::time::sleep(d).await;
                    match rebind(addr) {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::error!("tile server cannot come back up on {addr}: {e}");
                            return;
                        }
                    }
                }
            };
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let shared = Arc::clone(&task_shared);
                tokio::spawn(async move {
                    let _ = serve(stream, &shared).await;
                });
            }
        });
        Ok(TileServer { addr, shared, task })
    }

    /// The URL of a tile.
    pub fn url(&self, name: &str) -> String {
        format!("http://{}/tiles/{name}", self.addr)
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests received so far.
    pub fn requests(&self) -> u64 {
        self.shared.stats.requests.load(Ordering::SeqCst)
    }

    /// Requests per second between the first request and the last.
    pub fn achieved_rate(&self) -> f64 {
        self.achieved_rate_after(Duration::ZERO)
    }

    /// Requests per second between `skip` after the first request and the
    /// last (a steady state, without the start).
    pub fn achieved_rate_after(&self, skip: Duration) -> f64 {
        let times = self
            .shared
            .stats
            .times
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let Some(first) = times.first() else {
            return 0.0;
        };
        let later: Vec<_> = times.iter().filter(|t| **t >= *first + skip).collect();
        match (later.first(), later.last()) {
            (Some(a), Some(b)) if later.len() > 1 => {
                (later.len() - 1) as f64
                    / b.duration_since(**a).as_secs_f64().max(f64::MIN_POSITIVE)
            }
            _ => 0.0,
        }
    }

    /// Requests answered with a whole tile.
    pub fn served(&self) -> u64 {
        self.shared.stats.served.load(Ordering::SeqCst)
    }

    /// Requests answered 429.
    pub fn throttled(&self) -> u64 {
        self.shared.stats.throttled.load(Ordering::SeqCst)
    }

    /// What the strict limit ([`Faults::strict`]) accepted and refused so
    /// far (zero without one).
    pub fn strict_counts(&self) -> Counts {
        self.shared.strict.as_ref().map_or(Counts::default(), |l| {
            l.lock().unwrap_or_else(|p| p.into_inner()).counts()
        })
    }

    /// What became of the STAC API's page requests ([`StacApi`]).
    pub fn page_counts(&self) -> PageCounts {
        self.shared.pages.counts()
    }

    /// Requests answered 503 by [`Faults::unavailable`].
    pub fn unavailable(&self) -> u64 {
        self.shared.stats.unavailable.load(Ordering::SeqCst)
    }

    /// Every answer with a status (200 with a whole tile, 302, 404, 429,
    /// 500, 503), in order: its status, and how long after the first
    /// request's arrival it was decided.
    pub fn answers(&self) -> Vec<(Duration, u16)> {
        let stats = &self.shared.stats;
        let times = stats.times.lock().unwrap_or_else(|p| p.into_inner());
        let answers = stats.answers.lock().unwrap_or_else(|p| p.into_inner());
        let since =
            |at: &std::time::Instant| times.first().map(|f| at.saturating_duration_since(*f));
        answers
            .iter()
            .filter_map(|(at, status)| Some((since(at)?, *status)))
            .collect()
    }

    /// The most requests handled at once (from arrival until the answer
    /// starts: a lower bound on the connections the clients held at once).
    pub fn peak_in_flight(&self) -> u64 {
        self.shared.stats.peak_in_flight.load(Ordering::SeqCst)
    }
}

impl Drop for TileServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn rebind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// A request head, as read off a connection.
pub(crate) enum Request {
    /// The client closed the connection (or sent a head over 16 KiB).
    Closed,
    /// A `GET` of this path.
    Get(String),
    /// Anything else.
    Bad,
}

/// Reads one request head.
pub(crate) async fn read_request(stream: &mut TcpStream) -> std::io::Result<Request> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 || head.len() > 16 * 1024 {
            return Ok(Request::Closed);
        }
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head);
    let mut parts = text.lines().next().unwrap_or_default().split_whitespace();
    Ok(match (parts.next(), parts.next()) {
        (Some("GET"), Some(path)) => Request::Get(path.to_owned()),
        _ => Request::Bad,
    })
}

/// What becomes of a connection after an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Then {
    /// It waits for the next request.
    KeepAlive,
    /// It is closed (FIN): the answer was cut short on purpose.
    Close,
    /// It is reset (RST), nothing sent.
    Reset,
}

/// Writes a whole answer; the connection stays open.
pub(crate) async fn respond(
    stream: &mut TcpStream,
    status: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> std::io::Result<Then> {
    let mut head = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    Ok(Then::KeepAlive)
}

struct InFlight<'a>(&'a Stats);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Answers the requests of one connection until the client closes it, a
/// request cannot be read, or a fault cuts an answer short.
async fn serve(mut stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    loop {
        let then = match read_request(&mut stream).await? {
            Request::Closed => return Ok(()),
            Request::Bad => {
                respond(&mut stream, "400 Bad Request", &[], b"").await?;
                Then::Close
            }
            Request::Get(path) => answer(&mut stream, shared, path).await?,
        };
        match then {
            Then::KeepAlive => {}
            Then::Close => return stream.shutdown().await,
            // Dropped with a zero linger: an RST.
            Then::Reset => return Ok(()),
        }
    }
}

/// Counts a request as it arrives; it is in flight until the guard drops.
/// Also the requests in flight with it, itself counted.
fn arrive(stats: &Stats) -> (InFlight<'_>, u64) {
    stats.requests.fetch_add(1, Ordering::SeqCst);
    stats.since_first();
    stats
        .times
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(std::time::Instant::now());
    let now = stats.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    stats.peak_in_flight.fetch_max(now, Ordering::SeqCst);
    (InFlight(stats), now)
}

/// Answers one request, and says what becomes of the connection.
async fn answer(stream: &mut TcpStream, shared: &Shared, path: String) -> std::io::Result<Then> {
    let stats = &shared.stats;
    let (in_flight, count) = arrive(stats);
    let page = shared.stac.as_ref().and(StacApi::page_of(&path));
    let refused_page = || {
        if page.is_some() {
            shared.pages.refused.fetch_add(1, Ordering::SeqCst);
        }
    };
    if page.is_some() {
        shared.pages.asked.fetch_add(1, Ordering::SeqCst);
    }
    let f = &shared.faults;
    tokio::time::sleep(latency(f, count)).await;
    let since = stats.since_first();
    if let Some((from, length)) = f.unavailable {
        if since >= from && since < from + length {
            refused_page();
            stats.unavailable.fetch_add(1, Ordering::SeqCst);
            stats.answered(503);
            return respond(stream, "503 Service Unavailable", &[], b"").await;
        }
    }
    let refused = match &shared.strict {
        Some(limit) => {
            let mut limit = limit.lock().unwrap_or_else(|p| p.into_inner());
            limit.admit(tokio::time::Instant::now()).err()
        }
        None => rate_now(f, since).and_then(|rate| (!rate_allows(shared, rate)).then_some(1)),
    };
    if let Some(secs) = refused {
        refused_page();
        stats.throttled.fetch_add(1, Ordering::SeqCst);
        stats.answered(429);
        return respond(
            stream,
            "429 Too Many Requests",
            &[("Retry-After", secs.to_string())],
            b"",
        )
        .await;
    }
    let (path, query) = match path.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (path.as_str(), None),
    };
    if let Some(refused) = f.sas.as_ref().and_then(|sas| sas.check(query).err()) {
        stats.answered(403);
        let xml = [("Content-Type", "application/xml".to_owned())];
        return respond(stream, refused.status, &xml, refused.body.as_bytes()).await;
    }
    let name = match page {
        Some(k) => format!("search?page={k}"),
        None => path.strip_prefix("/tiles/").unwrap_or_default().to_owned(),
    };
    let attempt = {
        let mut a = shared.attempts.lock().unwrap_or_else(|p| p.into_inner());
        let n = a.entry(name.clone()).or_insert(0);
        *n += 1;
        *n
    };
    if let Some((_, location)) = f.redirects.iter().find(|(n, _)| *n == name) {
        stats.answered(302);
        return respond(stream, "302 Found", &[("Location", location.clone())], b"").await;
    }
    if let Some(body) = page.and_then(|k| shared.stac.as_ref()?.page(k)) {
        return serve_tile(stream, shared, &name, attempt, &body, in_flight).await;
    }
    let Some(body) = shared.tiles.get(&name) else {
        stats.answered(404);
        return respond(
            stream,
            "404 Not Found",
            &[],
            format!("no tile {name}\n").as_bytes(),
        )
        .await;
    };
    serve_tile(stream, shared, &name, attempt, body, in_flight).await
}

/// Answers a request for a tile that exists: with the faults it suffers on
/// this attempt, or with the tile.
async fn serve_tile(
    stream: &mut TcpStream,
    shared: &Shared,
    name: &str,
    attempt: u32,
    body: &[u8],
    in_flight: InFlight<'_>,
) -> std::io::Result<Then> {
    let (f, stats) = (&shared.faults, &shared.stats);
    if f.resets.is_some_and(|x| x.hits(name, "reset", attempt)) {
        // Closing with a zero linger sends an RST, and no answer.
        socket2::SockRef::from(&*stream).set_linger(Some(Duration::ZERO))?;
        return Ok(Then::Reset);
    }
    if f.server_errors
        .is_some_and(|x| x.hits(name, "500", attempt))
    {
        stats.answered(500);
        return respond(stream, "500 Internal Server Error", &[], b"").await;
    }
    if let Some((x, secs)) = f.throttle {
        if x.hits(name, "429", attempt) {
            if name.starts_with("search?") {
                shared.pages.refused.fetch_add(1, Ordering::SeqCst);
            }
            stats.throttled.fetch_add(1, Ordering::SeqCst);
            stats.answered(429);
            return respond(
                stream,
                "429 Too Many Requests",
                &[("Retry-After", secs.to_string())],
                b"",
            )
            .await;
        }
    }
    let page = name.starts_with("search?");
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nContent-Length: {}\r\n\r\n",
        if page {
            "application/geo+json"
        } else {
            "image/tiff"
        },
        body.len()
    );
    if f.truncated.is_some_and(|x| x.hits(name, "cut", attempt)) {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(&body[..body.len() / 2]).await?;
        return Ok(Then::Close);
    }
    if let Some((x, pause)) = f.slow {
        if x.hits(name, "slow", attempt) {
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(&body[..body.len().min(64)]).await?;
            tokio::time::sleep(pause).await;
            stream.write_all(&body[body.len().min(64)..]).await?;
            return Ok(Then::Close);
        }
    }
    // In flight ends as the answer starts: the window from a request's
    // arrival to here lies inside the client's own wait for the answer, so
    // the count never runs ahead of what the client holds, however the
    // threads are scheduled.
    drop(in_flight);
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    let served = if page {
        &shared.pages.served
    } else {
        &stats.served
    };
    served.fetch_add(1, Ordering::SeqCst);
    stats.answered(200);
    Ok(Then::KeepAlive)
}

mod corpus;
mod pace;
mod stacapi;
mod strict;
#[cfg(test)]
mod tests;
