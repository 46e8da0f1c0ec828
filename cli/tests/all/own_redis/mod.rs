//! A redis-server of a test's own, on a free port, that the test may stop,
//! start again and freeze (never the shared one `scripts/test.sh` starts).
//! It keeps its data in an append-only file synced on every write, so a
//! stop and start keeps the run's keys, as a production Redis does.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct OwnRedis {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl OwnRedis {
    /// Starts one, or `None` (said on stderr) when `redis-server` is not on
    /// PATH (`scripts/setup.sh` installs it).
    pub fn start() -> Option<Self> {
        if Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_err()
        {
            eprintln!("redis-server is not on PATH: this test is skipped");
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut r = OwnRedis {
            port,
            dir: tempfile::tempdir().expect("a temporary directory"),
            child: None,
        };
        r.resume();
        Some(r)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn dir(&self) -> PathBuf {
        self.dir.path().to_owned()
    }

    /// Starts the server process (again), and waits until it answers.
    pub fn resume(&mut self) {
        assert!(self.child.is_none(), "already running");
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ])
            .arg("--dir")
            .arg(self.dir())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let up = redis::Client::open(self.url())
                .and_then(|c| c.get_connection())
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
            if up.is_ok() {
                return;
            }
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the server process (SIGTERM: it syncs its file and exits) and
    /// waits for it to be gone.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(&child, libc::SIGTERM);
            let _ = child.wait();
        }
    }

    /// SIGSTOP: the server freezes, its connections stay open.
    pub fn freeze(&self) {
        if let Some(c) = &self.child {
            signal(c, libc::SIGSTOP);
        }
    }

    /// SIGCONT.
    pub fn thaw(&self) {
        if let Some(c) = &self.child {
            signal(c, libc::SIGCONT);
        }
    }
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on the pid of a child this test started and has not
    // waited for, so the pid is still that process's.
    let rc = unsafe { libc::kill(child.id() as i32, sig) };
    assert_eq!(rc, 0, "kill({}, {sig})", child.id());
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            signal(&c, libc::SIGCONT);
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
