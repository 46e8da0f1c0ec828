//! Reading only what a warp needs from a large COG in an object store
//! (issue 22, item 3), against GDAL's own `/vsis3/`:
//!
//!     cargo bench --bench window -- cog-1g
//!
//! Only when named (it makes a 1 GB file). Needs `WARPLINE_TEST_DATA` (the
//! shared rasters), `gdal_translate`, `gdalwarp`, `/usr/bin/time` and
//! `s3s-fs` (`cargo install s3s-fs --features binary`; started here on
//! port `WARPLINE_BENCH_S3_PORT`, 8441 by default).
//!
//! RGB.byte.tif made 21 times larger (16,611 x 15,078, 3 bands,
//! uncompressed, 512 px tiles, with overviews: about 1 GB) is put in a
//! bucket of s3s-fs, behind a loopback proxy that counts the bytes the
//! server sends. Then, each in a process of its own (`/usr/bin/time` reads
//! its peak RSS): `gdalwarp -t_srs EPSG:3857 -ts 1024 0 /vsis3/...`, and
//! warpline with fetch's `read = "window"` and the same options. Printed:
//! bytes sent, wall time, peak RSS of each, and whether the pixels are the
//! same.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Names the pipeline a child process runs.
const CHILD: &str = "WARPLINE_BENCH_WINDOW_CHILD";
const KEY: &str = "warpline-bench";
const SECRET: &str = "warpline-bench-secret";

fn main() {
    if let Ok(path) = std::env::var(CHILD) {
        return child_run(&path);
    }
    if !std::env::args().any(|a| a == "cog-1g") {
        eprintln!("window: only when named: cargo bench --bench window -- cog-1g");
        return;
    }
    let data = std::env::var("WARPLINE_TEST_DATA").expect("set WARPLINE_TEST_DATA");
    let work = tempfile::tempdir_in("/tmp").unwrap();
    let root = work.path().join("s3");
    std::fs::create_dir_all(root.join("bench")).unwrap();
    let cog = root.join("bench/big.tif");
    let size = make_cog(Path::new(&data), &cog);
    let port: u16 = std::env::var("WARPLINE_BENCH_S3_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(8441);
    let mut server = S3Server::start(&root, port);
    let (proxy, sent, requests) = counting_proxy(port);
    let endpoint = format!("http://127.0.0.1:{proxy}");

    let theirs = work.path().join("gdalwarp.tif");
    sent.store(0, Ordering::SeqCst);
    requests.store(0, Ordering::SeqCst);
    let (wall, rss) = timed(
        Command::new("gdalwarp")
            .args(["-q", "-overwrite", "-of", "GTiff", "-t_srs", "EPSG:3857"])
            .args(["-ts", "1024", "0", "/vsis3/bench/big.tif"])
            .arg(&theirs)
            .env("AWS_S3_ENDPOINT", format!("127.0.0.1:{proxy}"))
            .env("AWS_HTTPS", "NO")
            .env("AWS_VIRTUAL_HOSTING", "FALSE")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", KEY)
            .env("AWS_SECRET_ACCESS_KEY", SECRET),
    );
    let gdal_bytes = sent.load(Ordering::SeqCst);
    println!(
        "cog-1g gdalwarp /vsis3/: {gdal_bytes} bytes from the server ({:.2}% of {size}) in {} \
         requests, {wall:.2} s, peak RSS {} MiB",
        100.0 * gdal_bytes as f64 / size as f64,
        requests.load(Ordering::SeqCst),
        rss >> 20
    );

    let out = work.path().join("out");
    let toml = work.path().join("pipeline.toml");
    std::fs::write(&toml, pipeline(&endpoint, &out)).unwrap();
    sent.store(0, Ordering::SeqCst);
    requests.store(0, Ordering::SeqCst);
    let (wall, rss) = timed(
        Command::new(std::env::current_exe().unwrap())
            .env(CHILD, &toml)
            .env("AWS_ACCESS_KEY_ID", KEY)
            .env("AWS_SECRET_ACCESS_KEY", SECRET)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ALLOW_HTTP", "true"),
    );
    let ours_bytes = sent.load(Ordering::SeqCst);
    let same = same_pixels(&out.join("big.tif"), &theirs);
    println!(
        "cog-1g warpline read = \"window\": {ours_bytes} bytes from the server ({:.2}% of {size}) \
         in {} requests, {wall:.2} s, peak RSS {} MiB; pixels equal gdalwarp's: {same}",
        100.0 * ours_bytes as f64 / size as f64,
        requests.load(Ordering::SeqCst),
        rss >> 20
    );
    server.stop();
}

/// In the child process: runs the pipeline file at `path`, says where its
/// time went.
fn child_run(path: &str) {
    let toml = std::fs::read_to_string(path).unwrap();
    let pipeline = warpline::Pipeline::from_toml_str(&toml, &warpline::registry()).unwrap();
    let report = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(pipeline.run())
        .unwrap();
    assert_eq!(report.items.done, 1, "{report}");
    let busy: Vec<String> = report
        .stages
        .iter()
        .map(|s| format!("{} {:.2} s", s.name, s.busy_s))
        .collect();
    eprintln!("cog-1g warpline: busy {}", busy.join(", "));
}

/// RGB.byte.tif in `data` made 21 times larger as an uncompressed COG at
/// `cog`; its size in bytes.
fn make_cog(data: &Path, cog: &Path) -> u64 {
    let made = Instant::now();
    run(Command::new("gdal_translate")
        .args([
            "-q",
            "-of",
            "COG",
            "-co",
            "COMPRESS=NONE",
            "-co",
            "BLOCKSIZE=512",
        ])
        .args(["-outsize", "2100%", "2100%"])
        .arg(data.join("RGB.byte.tif"))
        .arg(cog));
    let size = std::fs::metadata(cog).unwrap().len();
    eprintln!(
        "cog-1g: made {size} bytes in {:.1} s",
        made.elapsed().as_secs_f64()
    );
    size
}

/// The pipeline: the object read by windows, warped as gdalwarp above.
fn pipeline(endpoint: &str, out: &Path) -> String {
    format!(
        r#"
[pipeline]
flow = ["fetch", "decode", "reproject", "write"]
[source]
kind = "inline"
inputs = ["s3://bench/big.tif"]
[limits.memory]
budget = "256MiB"
[stages.fetch]
kind = "fetch"
memory = "memory"
read = "window"
endpoint = "{endpoint}"
[stages.decode]
kind = "decode"
limits = ["memory"]
carry = ["memory"]
max_pixels = 400000000
[stages.reproject]
kind = "reproject"
limits = ["memory"]
carry = ["memory"]
crs = "EPSG:3857"
size = [1024, 0]
[stages.write]
kind = "write"
dir = "{}"
"#,
        out.display()
    )
}

fn run(cmd: &mut Command) {
    let status = cmd.status().unwrap();
    assert!(status.success(), "{cmd:?}");
}

/// Runs `cmd` under `/usr/bin/time`: wall seconds and peak RSS in bytes.
fn timed(cmd: &mut Command) -> (f64, u64) {
    let program = cmd.get_program().to_owned();
    let args: Vec<_> = cmd.get_args().map(ToOwned::to_owned).collect();
    let envs: Vec<_> = cmd
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
        .collect();
    let start = Instant::now();
    let out = Command::new("/usr/bin/time")
        .arg("-f")
        .arg("maxrss_kb=%M")
        .arg(program)
        .args(args)
        .envs(envs)
        .output()
        .unwrap();
    let wall = start.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let kb: u64 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("maxrss_kb="))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    (wall, kb << 10)
}

/// Size, geotransform and every pixel the same.
fn same_pixels(a: &Path, b: &Path) -> bool {
    let (a, b) = (
        gdal::Dataset::open(a).unwrap(),
        gdal::Dataset::open(b).unwrap(),
    );
    if a.raster_size() != b.raster_size() || a.geo_transform().ok() != b.geo_transform().ok() {
        return false;
    }
    let (w, h) = a.raster_size();
    (1..=a.raster_count()).all(|i| {
        let read = |d: &gdal::Dataset| {
            let band = d.rasterband(i).unwrap();
            band.read_as::<u8>((0, 0), (w, h), (w, h), None)
                .unwrap()
                .data()
                .to_vec()
        };
        read(&a) == read(&b)
    })
}

/// s3s-fs over `root` (its directories are buckets) on `port`.
struct S3Server(Child);

impl S3Server {
    fn start(root: &Path, port: u16) -> Self {
        let bin = std::env::var_os("CARGO_HOME")
            .map(|h| Path::new(&h).join("bin/s3s-fs"))
            .filter(|p| p.exists())
            .unwrap_or_else(|| Path::new("s3s-fs").to_owned());
        let child = Command::new(bin)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", KEY, "--secret-key", SECRET])
            .arg(root)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("s3s-fs (cargo install s3s-fs --features binary)");
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "s3s-fs does not answer"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        S3Server(child)
    }

    fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback proxy to `port` that counts the bytes the server sends, and
/// the requests (reads from the client that start with an HTTP method):
/// its port, and the counts.
fn counting_proxy(port: u16) -> (u16, Arc<AtomicU64>, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy = listener.local_addr().unwrap().port();
    let sent = Arc::new(AtomicU64::new(0));
    let requests = Arc::new(AtomicU64::new(0));
    let (counter, asked) = (Arc::clone(&sent), Arc::clone(&requests));
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(server) = TcpStream::connect(("127.0.0.1", port)) else {
                continue;
            };
            let (mut c_in, mut s_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let asked = Arc::clone(&asked);
            std::thread::spawn(move || {
                let mut buf = vec![0; 64 << 10];
                while let Ok(n) = c_in.read(&mut buf) {
                    if n == 0 || s_out.write_all(&buf[..n]).is_err() {
                        break;
                    }
                    if [&b"GET "[..], b"HEAD ", b"PUT ", b"POST "]
                        .iter()
                        .any(|m| buf[..n].starts_with(m))
                    {
                        asked.fetch_add(1, Ordering::Relaxed);
                    }
                }
                let _ = s_out.shutdown(std::net::Shutdown::Write);
            });
            let counter = Arc::clone(&counter);
            let (mut s_in, mut c_out) = (server, client);
            std::thread::spawn(move || {
                let mut buf = vec![0; 64 << 10];
                while let Ok(n) = s_in.read(&mut buf) {
                    if n == 0 || c_out.write_all(&buf[..n]).is_err() {
                        break;
                    }
                    counter.fetch_add(n as u64, Ordering::Relaxed);
                }
                let _ = c_out.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    (proxy, sent, requests)
}
