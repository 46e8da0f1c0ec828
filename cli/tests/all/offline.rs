//! `warpline validate` on a fresh machine: every shipped pipeline is valid
//! with no credentials, an empty HOME and no network, and validate opens
//! no connection to anything but this machine; `--online` does reach out.
//!
//! Two witnesses, each able to fail: `strace` logs every `connect()` of the
//! process and its threads (each must be to loopback or a Unix socket), and
//! a listener of the test's own stands for every server a check could ask
//! (the AWS, Azure and Google metadata services, an HTTP proxy), so a
//! request that strace would see as a loopback connect (through the
//! proxy) is counted too. The `--online` case shows both see a real one.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::binary::said;

/// A loopback server that answers every request with 404 and counts the
/// connections it was asked for.
struct Trap {
    addr: SocketAddr,
    count: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Trap {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let count = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s) = (Arc::clone(&count), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                // Counted before it is answered: the client goes on only
                // after the answer, so its process ends after this.
                c.fetch_add(1, Ordering::SeqCst);
                if let Ok(stream) = stream {
                    answer(stream);
                }
            }
        });
        Trap {
            addr,
            count,
            stop,
            thread,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops the server; the connections it was asked for.
    fn finish(self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept: the loop sees `stop` and ends uncounted.
        let _ = TcpStream::connect(self.addr);
        self.thread.join().unwrap();
        self.count.load(Ordering::SeqCst)
    }
}

/// Reads a request's head and answers 404 (never retried by a client).
fn answer(mut stream: TcpStream) {
    // A bound, not a guess at timing: a client that sends nothing must
    // not hold the server.
    let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(10)));
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let _ = stream
        .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
}

/// Whether a `connect()` line of strace's log is to this machine: a Unix
/// or netlink socket, 127.0.0.0/8, `::1` (or 127.x mapped), or AF_UNSPEC
/// (which dissolves a socket's association).
fn local(line: &str) -> bool {
    let between = |from: &str| line.split_once(from).and_then(|(_, r)| r.split_once('"'));
    if ["AF_UNIX", "AF_NETLINK", "AF_UNSPEC"]
        .iter()
        .any(|f| line.contains(&format!("sa_family={f}")))
    {
        return true;
    }
    if let Some((v4, _)) = between("inet_addr(\"") {
        return v4.starts_with("127.");
    }
    if let Some((v6, _)) = between("inet_pton(AF_INET6, \"") {
        return v6 == "::1" || v6.starts_with("::ffff:127.");
    }
    false
}

/// The `connect()` calls in strace's log that are not to this machine.
fn remote_connects(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains("connect(") && !local(l))
        .collect()
}

/// `warpline ARGS` under `strace -f -e trace=connect`, on a fresh
/// machine: no AWS_*, AZURE_*, GOOGLE_* (nor GCE_*, XDG_*, proxy or
/// WARPLINE_*) variables, HOME an empty directory, run in `dir`; every
/// metadata service and proxy pointed at `trap`. Its output and strace's
/// log.
fn traced_fresh(dir: &Path, args: &[&str], trap: &Trap) -> (Output, String) {
    let strace = Command::new("strace").arg("-V").output();
    assert!(
        strace.is_ok_and(|o| o.status.success()),
        "strace is needed to see every connection (scripts/setup.sh installs it)"
    );
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let log = dir.join("connects.log");
    let mut c = Command::new("strace");
    c.args(["-f", "-qq", "-e", "trace=connect", "-o"])
        .arg(&log)
        .arg(env!("CARGO_BIN_EXE_warpline"))
        .args(args)
        .current_dir(dir);
    let cloud = [
        "AWS_",
        "AZURE_",
        "GOOGLE_",
        "GCE_",
        "XDG_",
        "WARPLINE",
        "CLOUDSDK_",
    ];
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if cloud.iter().any(|p| k.starts_with(p)) || k.to_ascii_lowercase().ends_with("_proxy") {
            c.env_remove(&key);
        }
    }
    c.env("HOME", &home);
    for var in ["AWS_METADATA_ENDPOINT", "AWS_EC2_METADATA_SERVICE_ENDPOINT"] {
        c.env(var, trap.url());
    }
    for var in ["AZURE_MSI_ENDPOINT", "IDENTITY_ENDPOINT", "MSI_ENDPOINT"] {
        c.env(
            var,
            format!("{}/metadata/identity/oauth2/token", trap.url()),
        );
    }
    for var in ["GCE_METADATA_HOST", "GCE_METADATA_IP"] {
        c.env(var, trap.addr.to_string());
    }
    for var in [
        "http_proxy",
        "https_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
    ] {
        c.env(var, trap.url());
    }
    let out = c.output().unwrap();
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    (out, log)
}

/// The shipped pipelines, copied into `dir/pipelines` as a fresh checkout
/// has them (nothing they make exists yet); their relative paths.
fn shipped(dir: &Path) -> Vec<String> {
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../pipelines");
    std::fs::create_dir_all(dir.join("pipelines")).unwrap();
    let mut names: Vec<PathBuf> = std::fs::read_dir(&from)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    names.sort();
    names
        .iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            std::fs::copy(p, dir.join("pipelines").join(&name)).unwrap();
            format!("pipelines/{name}")
        })
        .collect()
}

/// The README's `warpline validate pipelines/*.toml`, on a fresh machine:
/// exit 0, and no connection but to this machine.
#[test]
fn every_shipped_pipeline_validates_offline_without_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let files = shipped(dir.path());
    assert!(files.len() >= 4, "{files:?}");
    let trap = Trap::start();
    let mut args = vec!["validate"];
    args.extend(files.iter().map(String::as_str));
    let (out, log) = traced_fresh(dir.path(), &args, &trap);
    let asked = trap.finish();
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    for f in &files {
        assert!(
            said(&out).contains(&format!("{f}: valid")),
            "{}",
            said(&out)
        );
    }
    assert_eq!(
        remote_connects(&log),
        Vec::<&str>::new(),
        "validate connected beyond this machine"
    );
    assert_eq!(asked, 0, "validate asked a metadata service or a proxy");
}

/// `--online` checks the output bucket of the cloud demo: with no
/// credentials, object_store asks the metadata service (the trap), and
/// strace sees that connect. The offline test's witnesses do see one.
#[test]
fn online_validate_reaches_the_bucket_and_both_witnesses_see_it() {
    let dir = tempfile::tempdir().unwrap();
    shipped(dir.path());
    let trap = Trap::start();
    let port = trap.addr.port();
    let args = ["validate", "--online", "pipelines/cloud-demo.toml"];
    let (out, log) = traced_fresh(dir.path(), &args, &trap);
    let asked = trap.finish();
    let text = said(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("[environment] stages.write: output bucket cannot be listed"),
        "{text}"
    );
    assert!(asked > 0, "{text}");
    let to_trap = format!("sin_port=htons({port}), sin_addr=inet_addr(\"127.0.0.1\")");
    assert!(
        log.lines()
            .any(|l| l.contains("connect(") && l.contains(&to_trap)),
        "strace did not log the connect to the trap:\n{log}"
    );
}

/// The log reader tells this machine from others.
#[test]
fn a_connect_beyond_this_machine_is_told_apart() {
    let imds = r#"501 connect(11, {sa_family=AF_INET, sin_port=htons(80), sin_addr=inet_addr("169.254.169.254")}, 16) = -1 EINPROGRESS"#;
    let dns = r#"502 connect(11, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("10.255.255.53")}, 16) = 0"#;
    let v6 = r#"503 connect(7, {sa_family=AF_INET6, sin6_port=htons(443), sin6_flowinfo=htonl(0), inet_pton(AF_INET6, "2600:1f18::1", &sin6_addr), sin6_scope_id=0}, 28"#;
    let ok = [
        r#"504 connect(11, {sa_family=AF_INET, sin_port=htons(9), sin_addr=inet_addr("127.0.0.1")}, 16) = 0"#,
        r#"505 connect(11, {sa_family=AF_UNIX, sun_path="/var/run/nscd/socket"}, 110) = -1 ENOENT"#,
        r#"506 connect(7, {sa_family=AF_INET6, sin6_port=htons(9), sin6_flowinfo=htonl(0), inet_pton(AF_INET6, "::1", &sin6_addr), sin6_scope_id=0}, 28) = 0"#,
    ];
    let log = [imds, dns, v6]
        .iter()
        .chain(&ok)
        .copied()
        .collect::<Vec<_>>();
    assert_eq!(remote_connects(&log.join("\n")), [imds, dns, v6]);
}
