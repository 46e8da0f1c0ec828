//! Object-store credentials that expire, for the tests of a run that
//! outlives them: a [`CredentialServer`] on loopback that hands out AWS
//! session credentials as a container's or an instance's metadata service
//! does (EKS Pod Identity's `GET` of `AWS_CONTAINER_CREDENTIALS_FULL_URI`
//! with the token file's content in `Authorization`; IMDSv2's token `PUT`,
//! role and credentials `GET`s at `AWS_METADATA_ENDPOINT`), and a web
//! identity's STS endpoint ([`sts`](crate::sts)), each answer a
//! new session token that expires `lifetime` after it is handed out; and a
//! proxy in front of the S3 server ([`expiry_checking_proxy`]) that
//! refuses a request whose session token (`x-amz-security-token`) has
//! expired, `400 ExpiredToken` as S3 answers, or was never handed out,
//! `403 InvalidToken`, and forwards the others (the S3 test server checks
//! the signature, not the session).
//!
//! Time is the system's: the credentials' `Expiration` is what the client
//! reads, and the proxy holds it to it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The role the instance metadata service names.
const ROLE: &str = "warpline-test-role";

/// Session credentials of one key pair, handed out and checked.
#[derive(Debug)]
pub struct Credentials {
    key: String,
    secret: String,
    /// What `Authorization` must say to the container endpoint, and a
    /// web identity's token to STS.
    pub(crate) authorization: String,
    lifetime: Duration,
    /// Every session token handed out, and when it expires.
    issued: Mutex<HashMap<String, SystemTime>>,
    /// Session tokens that signed a request the proxy let through.
    used: Mutex<Vec<String>>,
    accepted: AtomicU64,
    expired: AtomicU64,
    invalid: AtomicU64,
}

impl Credentials {
    /// Session credentials of `key` and `secret` that last `lifetime`; the
    /// container endpoint answers requests authorized by `authorization`,
    /// STS a web identity whose token is the same.
    pub fn new(key: &str, secret: &str, authorization: &str, lifetime: Duration) -> Arc<Self> {
        Arc::new(Credentials {
            key: key.to_owned(),
            secret: secret.to_owned(),
            authorization: authorization.to_owned(),
            lifetime,
            issued: Mutex::new(HashMap::new()),
            used: Mutex::new(Vec::new()),
            accepted: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            invalid: AtomicU64::new(0),
        })
    }

    /// New session credentials, as the metadata services write them.
    pub fn issue(&self) -> String {
        let (token, expiration) = self.session();
        format!(
            "{{\"Code\":\"Success\",\"Type\":\"AWS-HMAC\",\"AccessKeyId\":\"{}\",\
             \"SecretAccessKey\":\"{}\",\"Token\":\"{token}\",\"Expiration\":\"{expiration}\"}}",
            self.key, self.secret
        )
    }

    /// New session credentials, as STS's `AssumeRoleWithWebIdentity`
    /// writes them.
    pub fn issue_xml(&self) -> String {
        let (token, expiration) = self.session();
        format!(
            "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>\
             <AccessKeyId>{}</AccessKeyId><SecretAccessKey>{}</SecretAccessKey>\
             <SessionToken>{token}</SessionToken><Expiration>{expiration}</Expiration>\
             </Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>",
            self.key, self.secret
        )
    }

    /// A new session token and its expiry (RFC 3339).
    fn session(&self) -> (String, String) {
        let n = lock(&self.issued).len();
        let token = format!("warpline-session-{n}-{:016x}", random());
        let expiry = SystemTime::now() + self.lifetime;
        lock(&self.issued).insert(token.clone(), expiry);
        let expiration = chrono::DateTime::<chrono::Utc>::from(expiry)
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        (token, expiration)
    }

    /// Credentials handed out so far.
    pub fn issued(&self) -> u64 {
        lock(&self.issued).len() as u64
    }

    /// The distinct session tokens of the requests let through, in the
    /// order they were first used.
    pub fn used(&self) -> Vec<String> {
        lock(&self.used).clone()
    }

    /// Requests let through, refused as expired, refused as unknown.
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.accepted.load(Ordering::SeqCst),
            self.expired.load(Ordering::SeqCst),
            self.invalid.load(Ordering::SeqCst),
        )
    }

    /// Checks a request's session token: `Ok`, or S3's refusal (status
    /// line, code, message).
    fn check(&self, token: Option<&str>) -> Result<(), Refusal> {
        let expiry = token.and_then(|t| lock(&self.issued).get(t).copied());
        match (token, expiry) {
            (Some(token), Some(expiry)) if SystemTime::now() <= expiry => {
                self.accepted.fetch_add(1, Ordering::SeqCst);
                let mut used = lock(&self.used);
                if !used.iter().any(|u| u == token) {
                    used.push(token.to_owned());
                }
                Ok(())
            }
            (Some(_), Some(_)) => {
                self.expired.fetch_add(1, Ordering::SeqCst);
                Err(Refusal {
                    status: "400 Bad Request",
                    code: "ExpiredToken",
                    message: "The provided token has expired.",
                })
            }
            _ => {
                self.invalid.fetch_add(1, Ordering::SeqCst);
                Err(Refusal {
                    status: "403 Forbidden",
                    code: "InvalidToken",
                    message: "The provided token is malformed or otherwise invalid.",
                })
            }
        }
    }
}

/// A request S3 refuses: its status line, error code and message.
struct Refusal {
    status: &'static str,
    code: &'static str,
    message: &'static str,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn random() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(SystemTime::now())
}

/// One request as read off a connection: its method, target, headers
/// (names lowercased) and body.
pub(crate) struct Request {
    pub(crate) method: String,
    pub(crate) target: String,
    headers: Vec<(String, String)>,
    head: Vec<u8>,
    body: Vec<u8>,
}

impl Request {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one request (its body by `Content-Length`); `None` when the
/// client closed the connection or sent something else.
pub(crate) async fn read_request<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut Vec<u8>,
) -> Option<Request> {
    let mut chunk = [0u8; 8192];
    let end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 || buf.len() > 64 << 10 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head: Vec<u8> = buf.drain(..end).collect();
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, target) = (first.next()?.to_owned(), first.next()?.to_owned());
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    while buf.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = buf.drain(..length).collect();
    Some(Request {
        method,
        target,
        headers,
        head,
        body,
    })
}

pub(crate) async fn respond<S: AsyncWrite + Unpin>(
    stream: &mut S,
    status: &str,
    kind: &str,
    body: &str,
) -> bool {
    let answer = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(answer.as_bytes()).await.is_ok()
}

/// A container's and an instance's credentials endpoints on loopback.
/// Stops when dropped.
#[derive(Debug)]
pub struct CredentialServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl CredentialServer {
    /// Serves `credentials` on the current tokio runtime.
    pub async fn start(credentials: Arc<Credentials>) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let credentials = Arc::clone(&credentials);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    while let Some(request) = read_request(&mut stream, &mut buf).await {
                        if !answer(&mut stream, &credentials, &request).await {
                            return;
                        }
                    }
                });
            }
        });
        Ok(CredentialServer { addr, task })
    }

    /// `AWS_CONTAINER_CREDENTIALS_FULL_URI`.
    pub fn container_uri(&self) -> String {
        format!("http://{}/v1/credentials", self.addr)
    }

    /// `AWS_METADATA_ENDPOINT`.
    pub fn metadata_endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for CredentialServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Answers one request to the credentials endpoints.
async fn answer(stream: &mut TcpStream, c: &Credentials, r: &Request) -> bool {
    const ROLES: &str = "/latest/meta-data/iam/security-credentials/";
    let json = "application/json";
    let imds = r.header("x-aws-ec2-metadata-token") == Some("warpline-imds-token");
    match (r.method.as_str(), r.target.as_str()) {
        ("GET", "/v1/credentials") if r.header("authorization") == Some(&c.authorization) => {
            respond(stream, "200 OK", json, &c.issue()).await
        }
        ("GET", "/v1/credentials") => respond(stream, "401 Unauthorized", json, "{}").await,
        ("PUT", "/latest/api/token") => {
            respond(stream, "200 OK", "text/plain", "warpline-imds-token").await
        }
        ("GET", ROLES) if imds => respond(stream, "200 OK", "text/plain", ROLE).await,
        ("GET", path) if imds && path.strip_prefix(ROLES) == Some(ROLE) => {
            respond(stream, "200 OK", json, &c.issue()).await
        }
        ("GET", path) if path.starts_with("/latest/") => {
            respond(stream, "401 Unauthorized", "text/plain", "").await
        }
        _ => respond(stream, "404 Not Found", "text/plain", "").await,
    }
}

/// Starts a proxy to the S3 server at `upstream` (`http://host:port`) on a
/// loopback port of its own, on the current tokio runtime: each request
/// whose session token `credentials` handed out and has not expired is
/// forwarded (after `delay`, on a connection of its own), the others
/// refused as S3 refuses them. Returns its endpoint.
///
/// # Panics
/// When no loopback port can be bound (test support: the test fails).
pub async fn expiry_checking_proxy(
    upstream: &str,
    credentials: Arc<Credentials>,
    delay: Duration,
) -> String {
    let upstream = upstream.trim_start_matches("http://").to_owned();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let endpoint = format!("http://{}", listener.local_addr().expect("address"));
    tokio::spawn(async move {
        while let Ok((mut down, _)) = listener.accept().await {
            let (upstream, credentials) = (upstream.clone(), Arc::clone(&credentials));
            tokio::spawn(async move {
                let mut buf = Vec::new();
                while let Some(r) = read_request(&mut down, &mut buf).await {
                    tokio::time::sleep(delay).await;
                    if let Err(refused) = credentials.check(r.header("x-amz-security-token")) {
                        let xml = format!(
                            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{}</Code>\
                             <Message>{}</Message></Error>",
                            refused.code, refused.message
                        );
                        respond(&mut down, refused.status, "application/xml", &xml).await;
                        return;
                    }
                    if !forward(&mut down, &upstream, &r).await {
                        return;
                    }
                }
            });
        }
    });
    endpoint
}

/// Sends `r` upstream on a connection of its own (`Connection: close`)
/// and its whole answer back; whether the client's connection goes on.
async fn forward(down: &mut TcpStream, upstream: &str, r: &Request) -> bool {
    let Ok(mut up) = TcpStream::connect(upstream).await else {
        return false;
    };
    let head = String::from_utf8_lossy(&r.head);
    let mut rewritten = String::new();
    for line in head.trim_end().split("\r\n") {
        if !line.to_ascii_lowercase().starts_with("connection:") {
            rewritten.push_str(line);
            rewritten.push_str("\r\n");
        }
    }
    rewritten.push_str("Connection: close\r\n\r\n");
    if up.write_all(rewritten.as_bytes()).await.is_err() || up.write_all(&r.body).await.is_err() {
        return false;
    }
    let mut answer = Vec::new();
    if up.read_to_end(&mut answer).await.is_err() {
        return false;
    }
    // The server said `Connection: close`: so does its answer, and the
    // client opens another connection for its next request.
    let _ = down.write_all(&answer).await;
    false
}
