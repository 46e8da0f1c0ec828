//! A loopback TCP proxy that watches the requests on their way to a server:
//! it counts the times a needle appears in them, and can hold every
//! connection whose request holds the needle (never answered), to stall a
//! client mid-transfer, or hold them until the test opens a gate, to order
//! one client's request after another client's work.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does once a request holds the needle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnNeedle {
    /// Count each time the needle appears, and forward everything.
    Count,
    /// Count the connection once and hold it: read on, forward nothing more.
    Hold,
}

/// Starts a proxy to `upstream` (`http://host:port[/path]` or `host:port`) on a
/// loopback port of its own, on the current tokio runtime. Returns its
/// endpoint (`http://127.0.0.1:port[/path]`) and the count of needles seen (with
/// [`OnNeedle::Hold`], of connections held). A needle split between two
/// reads is seen.
///
/// # Panics
/// When no loopback port can be bound (test support: the test fails).
pub async fn watching_proxy(
    upstream: &str,
    needle: &'static [u8],
    on_needle: OnNeedle,
) -> (String, Arc<AtomicUsize>) {
    let action = match on_needle {
        OnNeedle::Count => Action::Count,
        OnNeedle::Hold => Action::Hold,
    };
    proxy(upstream, needle, action).await
}

/// The gate of a [`gated_proxy`]: how many requests holding the needle came,
/// and its opening.
#[derive(Debug)]
pub struct Gate {
    came: Arc<AtomicUsize>,
    open: watch::Sender<bool>,
}

impl Gate {
    /// How many requests holding the needle came (held, or let through
    /// once open).
    pub fn came(&self) -> usize {
        self.came.load(Ordering::SeqCst)
    }

    /// Lets every request held, and every later one, through.
    pub fn open(&self) {
        self.open.send_replace(true);
    }
}

/// Starts a proxy to `upstream` (as [`watching_proxy`]'s) that holds each
/// request holding `needle` (not forwarded, not answered) until the
/// [`Gate`] opens, then forwards it whole. Returns its endpoint and gate.
///
/// # Panics
/// When no loopback port can be bound (test support: the test fails).
pub async fn gated_proxy(upstream: &str, needle: &'static [u8]) -> (String, Gate) {
    let (open, shut) = watch::channel(false);
    let (endpoint, came) = proxy(upstream, needle, Action::Gate(shut)).await;
    (endpoint, Gate { came, open })
}

/// What the proxy does once a request holds the needle.
#[derive(Clone, Debug)]
enum Action {
    Count,
    Hold,
    /// Waits until the gate is open.
    Gate(watch::Receiver<bool>),
}

async fn proxy(
    upstream: &str,
    needle: &'static [u8],
    action: Action,
) -> (String, Arc<AtomicUsize>) {
    assert!(!needle.is_empty(), "the needle is empty");
    // An endpoint with a path (Azurite's `/ACCOUNT`) keeps it.
    let upstream = upstream.trim_start_matches("http://");
    let (upstream, path) = upstream.split_once('/').unwrap_or((upstream, ""));
    let upstream = upstream.to_owned();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let endpoint = format!("http://{}/{path}", listener.local_addr().expect("address"));
    let endpoint = endpoint.trim_end_matches('/').to_owned();
    let count = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&count);
    tokio::spawn(async move {
        while let Ok((down, _)) = listener.accept().await {
            let (upstream, counted) = (upstream.clone(), Arc::clone(&counted));
            let action = action.clone();
            tokio::spawn(async move {
                let Ok(up) = TcpStream::connect(&upstream).await else {
                    return;
                };
                let (down_r, mut down_w) = down.into_split();
                let (mut up_r, up_w) = up.into_split();
                let requests = forward(down_r, up_w, needle, action, counted);
                let answers = async move {
                    let _ = tokio::io::copy(&mut up_r, &mut down_w).await;
                };
                tokio::join!(requests, answers);
            });
        }
    });
    (endpoint, count)
}

/// Forwards one connection's requests upstream, counting (or holding on)
/// the needle.
async fn forward(
    mut down_r: OwnedReadHalf,
    mut up_w: OwnedWriteHalf,
    needle: &'static [u8],
    mut action: Action,
    counted: Arc<AtomicUsize>,
) {
    let mut buf = vec![0u8; 64 << 10];
    // The end of the last read, so a needle split between two reads is seen.
    let mut tail: Vec<u8> = Vec::new();
    loop {
        let n = match down_r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        tail.extend_from_slice(&buf[..n]);
        let found = tail.windows(needle.len()).filter(|w| w == &needle).count();
        let keep = tail.len().min(needle.len() - 1);
        tail.drain(..tail.len() - keep);
        match &mut action {
            Action::Hold if found > 0 => {
                counted.fetch_add(1, Ordering::SeqCst);
                while let Ok(n) = down_r.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                }
                return;
            }
            // A gate dropped (its test ended) lets the request through.
            Action::Gate(shut) if found > 0 => {
                counted.fetch_add(found, Ordering::SeqCst);
                let _ = shut.wait_for(|open| *open).await;
                if up_w.write_all(&buf[..n]).await.is_err() {
                    break;
                }
                continue;
            }
            _ => {}
        }
        counted.fetch_add(found, Ordering::SeqCst);
        if up_w.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = up_w.shutdown().await;
}
