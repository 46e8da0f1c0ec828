//! `read = "window"` (issue 22, item 3): a large COG served over loopback
//! HTTP is read by ranges through warpline's own fetch, only the bytes the
//! warp needs (counted at the server), with gdalwarp's pixels; a server
//! that stalls ends the item as a clear failure, not a hang; range reads
//! signed with tokens that expire mid-warp (issue 39, item 2).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::child;
use crate::common;
use crate::common::{assert_same_raster, gdalwarp, raster_pipeline, real_rasters};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};

/// A loopback server of one file that answers HEAD (unless `refuses_head`:
/// 403, as to an S3 URL presigned for GET) and byte ranges, and counts the
/// bytes it sends. After `stall_after` range requests it answers no more
/// (the requests hang).
struct Server {
    data: Vec<u8>,
    sent: AtomicU64,
    ranges: AtomicU64,
    stall_after: u64,
    refuses_head: bool,
    /// The most bytes one range answer holds (a server that caps ranges).
    cap: usize,
    /// Requests must be signed with a token of this account that has not
    /// expired (`403` otherwise, as Azure answers).
    sas: Option<Arc<warpline_testkit::Sas>>,
}

async fn answer(
    axum::extract::State(s): axum::extract::State<Arc<Server>>,
    method: Method,
    headers: HeaderMap,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Response {
    if let Some(refused) = s.sas.as_ref().and_then(|a| a.check(query.as_deref()).err()) {
        return (StatusCode::FORBIDDEN, refused.body).into_response();
    }
    let size = s.data.len();
    let base = [
        (header::ACCEPT_RANGES, "bytes".to_owned()),
        (header::CONTENT_TYPE, "image/tiff".to_owned()),
    ];
    if method == Method::HEAD && s.refuses_head {
        return StatusCode::FORBIDDEN.into_response();
    }
    if method == Method::HEAD {
        let mut r = base.into_response();
        r.headers_mut()
            .insert(header::CONTENT_LENGTH, size.to_string().parse().unwrap());
        return r;
    }
    let range = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("bytes="))
        .and_then(|v| v.split_once('-'))
        .and_then(|(a, b)| Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?)));
    let Some((first, last)) = range else {
        s.sent.fetch_add(size as u64, Ordering::Relaxed);
        return (base, s.data.clone()).into_response();
    };
    if s.ranges.fetch_add(1, Ordering::Relaxed) >= s.stall_after {
        std::future::pending::<()>().await;
    }
    let last = last.min(size - 1).min(first.saturating_add(s.cap - 1));
    let body = s.data[first..=last].to_vec();
    s.sent.fetch_add(body.len() as u64, Ordering::Relaxed);
    let range = format!("bytes {first}-{last}/{size}");
    (
        StatusCode::PARTIAL_CONTENT,
        [(header::CONTENT_RANGE, range)],
        base,
        body,
    )
        .into_response()
}

/// Serves `file` at `http://ADDR/NAME` on a runtime of its own.
fn serve(file: &Path, stall_after: u64) -> (String, Arc<Server>, tokio::runtime::Runtime) {
    serve_as(file, stall_after, false, usize::MAX)
}

/// As [`serve`], refusing HEAD requests when `refuses_head`.
fn serve_as(
    file: &Path,
    stall_after: u64,
    refuses_head: bool,
    cap: usize,
) -> (String, Arc<Server>, tokio::runtime::Runtime) {
    serve_server(
        file,
        Server {
            data: std::fs::read(file).unwrap(),
            sent: AtomicU64::new(0),
            ranges: AtomicU64::new(0),
            stall_after,
            refuses_head,
            cap,
            sas: None,
        },
    )
}

/// Serves `server` (of `file`) at `http://ADDR/NAME` on a runtime of its
/// own.
fn serve_server(file: &Path, server: Server) -> (String, Arc<Server>, tokio::runtime::Runtime) {
    let server = Arc::new(server);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let name = file.file_name().unwrap().to_string_lossy();
    let app = axum::Router::new()
        .route(&format!("/{name}"), axum::routing::get(answer))
        .with_state(Arc::clone(&server));
    runtime.spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/{name}"), server, runtime)
}

/// A 50 x 50 km window at about the source's resolution: the reproject
/// stage's settings, and the same as gdalwarp options.
const WINDOW_REPROJECT: &str = "crs = \"EPSG:3857\"\n\
     extent = [200000, 2700000, 250000, 2750000]\n\
     extent_crs = \"EPSG:32618\"\nresolution = 60";
const WINDOW_GDALWARP: [&str; 12] = [
    "-t_srs",
    "EPSG:3857",
    "-te",
    "200000",
    "2700000",
    "250000",
    "2750000",
    "-te_srs",
    "EPSG:32618",
    "-tr",
    "60",
    "60",
];

/// A COG of `src` made 6 times larger, named `name` in `dir`: 256 px
/// tiles, `compress`ed, with overviews (and mask overviews, when `src` has
/// a mask). From RGB.byte.tif uncompressed: 4,746 x 4,308, 3 bands, about
/// 80 MB.
fn large_cog(src: &Path, dir: &Path, name: &str, compress: &str) -> PathBuf {
    let big = dir.join("big.tif");
    let cog = dir.join(name);
    let run = |args: &[&str]| warpline_testkit::gdal_tool("gdal_translate", args, &[]);
    let s = |p: &Path| p.to_string_lossy().into_owned();
    run(&["-q", "-outsize", "600%", "600%", &s(src), &s(&big)]);
    let compress = format!("COMPRESS={compress}");
    let cog_args = ["-q", "-of", "COG", "-co", &compress, "-co", "BLOCKSIZE=256"];
    run(&[&cog_args[..], &[&s(&big), &s(&cog)]].concat());
    std::fs::remove_file(&big).unwrap();
    cog
}

/// Serves `cog` and reads it by window twice, equal to gdalwarp each time
/// and reading less than `1 / share` of its bytes: a 50 x 50 km window at
/// about the source's resolution, and the whole scene downsampled 16 times
/// (from an overview).
fn windows_equal_gdalwarp(cog: &Path, work: &Path, share: u64) {
    let size = std::fs::metadata(cog).unwrap().len();
    let name = cog.file_name().unwrap();
    let cases = [
        ("window", WINDOW_REPROJECT, WINDOW_GDALWARP.to_vec()),
        (
            "downsampled",
            "crs = \"EPSG:3857\"\nresolution = 800",
            vec!["-t_srs", "EPSG:3857", "-tr", "800", "800"],
        ),
    ];
    for (what, reproject, args) in cases {
        let (url, server, _runtime) = serve(cog, u64::MAX);
        let out = work.join(what);
        let report = common::run(&pipeline(&url, reproject, &out, ""));
        assert_eq!(report.items.done, 1, "{what}: {report}");
        let sent = server.sent.load(Ordering::Relaxed);
        eprintln!(
            "{what}: {sent} of {size} bytes ({:.1}%) in {} range requests",
            100.0 * sent as f64 / size as f64,
            server.ranges.load(Ordering::Relaxed)
        );
        assert!(sent * share < size, "{what}: read {sent} of {size} bytes");
        let theirs = work.join(format!("{what}-gdalwarp.tif"));
        let args: Vec<String> = args.into_iter().map(String::from).collect();
        gdalwarp(&args, cog, &theirs);
        assert_same_raster(&out.join(name), &theirs, what);
    }
}

/// One window-read run of `url` with `reproject`, into `out`.
fn pipeline(url: &str, reproject: &str, out: &Path, fetch: &str) -> String {
    raster_pipeline(
        &[url.to_owned()],
        reproject,
        &format!("dir = {:?}", out.to_string_lossy()),
        1,
    )
    .replace(
        "memory = \"memory\"\n",
        &format!("memory = \"memory\"\nread = \"window\"\n{fetch}\n"),
    )
}

#[test]
fn a_window_of_a_large_cog_reads_a_few_of_its_bytes_and_equals_gdalwarp() {
    let Some(data) = real_rasters() else { return };
    let work = tempfile::tempdir().unwrap();
    let cog = large_cog(&data[0], work.path(), "large-cog.tif", "NONE");
    let size = std::fs::metadata(&cog).unwrap().len();
    assert!(size > 60 << 20, "the COG is {size} bytes");
    windows_equal_gdalwarp(&cog, work.path(), 10);
}

/// The large COG in a fresh work folder, served by a server that serves
/// the header's block and hangs on every later range request: the work
/// folder, the URL, the server and its runtime; `None` without the real
/// rasters (the tests say they skip).
fn stalling_large_cog() -> Option<(
    tempfile::TempDir,
    String,
    Arc<Server>,
    tokio::runtime::Runtime,
)> {
    let data = real_rasters()?;
    let work = tempfile::tempdir().unwrap();
    let cog = large_cog(&data[0], work.path(), "large-cog.tif", "NONE");
    let (url, server, runtime) = serve(&cog, 1);
    Some((work, url, server, runtime))
}

/// Checks that `report`'s one item failed at `stage` after its three
/// tries, with a message naming `url`, and that nothing was left in `out`.
fn failed_after_tries(report: &warpline::RunReport, stage: &str, url: &str, out: &Path) {
    assert_eq!(report.items.failed, 1, "{report}");
    let failure = &report.failures[0];
    assert_eq!(failure.stage, stage, "{}", failure.message);
    assert!(
        failure.message.contains(url) && failure.message.contains("after 3 tries"),
        "{}",
        failure.message
    );
    assert_eq!(std::fs::read_dir(out).map_or(0, |d| d.count()), 0);
}

#[test]
fn a_server_that_stalls_mid_warp_fails_the_item_without_a_hang() {
    let Some((work, url, server, _runtime)) = stalling_large_cog() else {
        return;
    };
    let out = work.path().join("out");
    let toml = pipeline(&url, "crs = \"EPSG:3857\"", &out, "timeout = \"1s\"");
    failed_after_tries(&common::run(&toml), "reproject", &url, &out);
    // One header request, then three tries of the first block it needed:
    // the reads after that failure fail at once.
    assert_eq!(server.ranges.load(Ordering::Relaxed), 4);
}

/// A compressed COG with an internal mask and mask overviews (RGB2.byte.tif
/// and its `.msk`, 6x larger, DEFLATE): read by window, the mask and its
/// overviews come through the same ranged reads, with gdalwarp's pixels.
#[test]
fn a_window_of_a_masked_deflate_cog_equals_gdalwarp() {
    let Some(data) = real_rasters() else { return };
    let rgb2 = data[0].with_file_name("RGB2.byte.tif");
    let work = tempfile::tempdir().unwrap();
    let cog = large_cog(&rgb2, work.path(), "masked-cog.tif", "DEFLATE");
    windows_equal_gdalwarp(&cog, work.path(), 3);
}

/// Without reproject, write reads the pixels by ranges as it copies them:
/// a server that stalls then fails the item at write, naming the input and
/// the failed read, not with GDAL's words about a short read.
#[test]
fn a_server_that_stalls_while_write_copies_fails_the_item_naming_the_read() {
    let Some((work, url, _server, _runtime)) = stalling_large_cog() else {
        return;
    };
    let out = work.path().join("out");
    // The same pipeline with its reproject stage taken out.
    let toml = pipeline(&url, "", &out, "timeout = \"1s\"");
    let (head, tail) = toml.split_once("[stages.reproject]").unwrap();
    let (_, write) = tail.split_once("[stages.write]").unwrap();
    let toml = format!("{head}[stages.write]{write}").replace(
        "flow = [\"fetch\", \"decode\", \"reproject\", \"write\"]",
        "flow = [\"fetch\", \"decode\", \"write\"]",
    );
    failed_after_tries(&common::run(&toml), "write", &url, &out);
}

/// A URL that refuses HEAD (S3's presigned GET URLs do) is sized by a
/// request for its first byte, and read by ranges all the same.
#[test]
fn a_url_that_refuses_head_is_sized_by_a_range_request() {
    let Some(data) = real_rasters() else { return };
    let work = tempfile::tempdir().unwrap();
    let (url, server, _runtime) = serve_as(&data[0], u64::MAX, true, usize::MAX);
    let out = work.path().join("out");
    let report = common::run(&pipeline(&url, "crs = \"EPSG:3857\"", &out, ""));
    assert_eq!(report.items.done, 1, "{report}");
    assert!(server.ranges.load(Ordering::Relaxed) >= 2);
    let theirs = work.path().join("gdalwarp.tif");
    let args: Vec<String> = ["-t_srs", "EPSG:3857"].map(String::from).to_vec();
    gdalwarp(&args, &data[0], &theirs);
    let name = data[0].file_name().unwrap();
    assert_same_raster(&out.join(name), &theirs, "refused HEAD");
}

/// A server that answers a range with fewer bytes than asked for (within
/// the file) fails the item with a message naming the input, after the
/// reader's tries.
#[test]
fn a_range_answered_short_fails_the_item_naming_the_input() {
    let Some(data) = real_rasters() else { return };
    let work = tempfile::tempdir().unwrap();
    let (url, _server, _runtime) = serve_as(&data[0], u64::MAX, false, 1000);
    let out = work.path().join("out");
    let report = common::run(&pipeline(&url, "crs = \"EPSG:3857\"", &out, ""));
    assert_eq!(report.items.failed, 1, "{report}");
    let message = &report.failures[0].message;
    assert!(
        message.contains(&url) && message.contains("bytes of the") && message.contains("3 tries"),
        "{message}"
    );
}

#[test]
fn a_window_of_a_large_cog_in_s3_equals_gdalwarp() {
    let Some(data) = real_rasters() else { return };
    let (Ok(endpoint), Ok(root), Ok(bucket), Ok(key), Ok(secret)) = (
        std::env::var("WARPLINE_TEST_S3"),
        std::env::var("WARPLINE_TEST_S3_ROOT"),
        std::env::var("WARPLINE_TEST_S3_BUCKET"),
        std::env::var("WARPLINE_TEST_S3_KEY"),
        std::env::var("WARPLINE_TEST_S3_SECRET"),
    ) else {
        eprintln!("WARPLINE_TEST_S3 is not set: the S3 window test is skipped");
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let cog = large_cog(&data[0], work.path(), "large-cog.tif", "NONE");
    // Put where the server keeps the bucket's objects, under a prefix of
    // this test's own.
    let prefix = format!("window-{}", std::process::id());
    let dir = Path::new(&root).join(&bucket).join(&prefix);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&cog, dir.join("large-cog.tif")).unwrap();
    let out = work.path().join("out");
    let url = format!("s3://{bucket}/{prefix}/large-cog.tif");
    let endpoint = format!("endpoint = {endpoint:?}");
    // In a process of its own, with the server's credentials in its
    // environment.
    let report = child::run_alone(
        &pipeline(&url, WINDOW_REPROJECT, &out, &endpoint),
        work.path(),
        &[
            ("AWS_ACCESS_KEY_ID", key.as_str()),
            ("AWS_SECRET_ACCESS_KEY", secret.as_str()),
            ("AWS_REGION", "us-east-1"),
        ],
    );
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(report["items"]["done"], 1, "{report:#}");
    let theirs = work.path().join("gdalwarp.tif");
    gdalwarp(&WINDOW_GDALWARP.map(String::from), &cog, &theirs);
    assert_same_raster(&out.join("large-cog.tif"), &theirs, "s3 window");
}

/// Signed URLs that expire mid-warp (issue 39, item 2): every range read
/// is signed as it is made, and one refused as expired (the storage's clock
/// runs ahead of this machine's: a token serves 3 requests) gets a new
/// token and is made again. The pixels are gdalwarp's.
#[test]
fn range_reads_signed_with_tokens_that_expire_mid_warp_renew_them() {
    use std::time::{Duration, SystemTime};
    use warpline_testkit::{Clock, Sas, TokenServer};
    let Some(data) = real_rasters() else { return };
    let work = tempfile::tempdir().unwrap();
    let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_714_557_600);
    let sas = Sas::new(
        Clock::stopped(start),
        Duration::from_secs(20),
        Duration::from_secs(10),
    );
    let server = Server {
        data: std::fs::read(&data[0]).unwrap(),
        sent: AtomicU64::new(0),
        ranges: AtomicU64::new(0),
        stall_after: u64::MAX,
        refuses_head: false,
        cap: usize::MAX,
        sas: Some(Arc::clone(&sas)),
    };
    let (url, server, runtime) = serve_server(&data[0], server);
    let tokens = runtime
        .block_on(TokenServer::start(Arc::clone(&sas), None))
        .unwrap();
    let out = work.path().join("out");
    let signer = format!("signer = {{ url = {:?} }}", tokens.url("naip"));
    let toml = pipeline(&url, "crs = \"EPSG:3857\"", &out, &signer);
    // This machine's clock stands still: only the storage says a token
    // expired.
    let mut registry = warpline::registry();
    let now: warpline::stages::fetch::Clock = Arc::new(move || start);
    registry.register_stage("fetch", warpline::stages::fetch::factory_with_clock(now));
    let p = warpline::Pipeline::from_toml_str(&toml, &registry).unwrap();
    let report = common::runtime().block_on(p.run()).unwrap();
    assert_eq!(report.items.done, 1, "{report}");
    let ranges = server.ranges.load(Ordering::Relaxed);
    // The HEAD and every range read accepted, 3 a token; each refusal
    // renewed once.
    assert_eq!(sas.accepted(), ranges + 1);
    assert!(
        sas.expired() >= 1 && sas.issued() == sas.expired() + 1,
        "{} tokens, {} refused, {ranges} ranges",
        sas.issued(),
        sas.expired()
    );
    assert_eq!(sas.forged(), 0);
    eprintln!(
        "{ranges} range reads, {} tokens, {} requests refused as expired",
        sas.issued(),
        sas.expired()
    );
    let theirs = work.path().join("gdalwarp.tif");
    let args: Vec<String> = ["-t_srs", "EPSG:3857"].map(String::from).to_vec();
    gdalwarp(&args, &data[0], &theirs);
    let name = data[0].file_name().unwrap();
    assert_same_raster(&out.join(name), &theirs, "signed ranges");
}
