//! fetch's `signer` (issue 39, item 2): URLs signed with tokens that
//! expire, from a token endpoint that is itself rate-limited, as Planetary
//! Computer's data is read. The token endpoint and the storage's check are
//! `warpline_testkit::sas`, on a clock the client shares and each tile the
//! storage accepts moves on: tokens expire after a known number of tiles,
//! however busy the machine.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::common;

use common::{runtime, tiles};
use warpline_testkit::tileserver::Strict;
use warpline_testkit::{Clock, Faults, Sas, TileServer, TokenServer};

/// 2024-05-01T10:00:00Z.
fn start() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_714_557_600)
}

/// `fetch` -> `discard` over `urls`, fetch signing with `signer` (a TOML
/// inline table) with `workers` workers.
fn pipeline(list: &std::path::Path, workers: u32, signer: &str) -> String {
    format!(
        r#"
[pipeline]
flow = ["fetch", "discard"]

[source]
kind = "list"
path = {list:?}

[stages.fetch]
kind = "fetch"
workers = {workers}
retry = {{ attempts = 1 }}
# The loopback tile server answers some requests 40 ms late (Nagle's
# algorithm meets delayed ACKs: it writes head and body apart), which
# adaptive limits read as a latency knee, down to one request at a time.
adaptive = false

signer = {signer}

[stages.discard]
kind = "discard"
"#
    )
}

/// The built-in kinds, with fetch's signer telling the time by `clock`.
fn registry(clock: &Clock) -> warpline::Registry {
    let mut registry = warpline::registry();
    let clock = clock.clone();
    let now: warpline::stages::fetch::Clock = Arc::new(move || clock.now());
    registry.register_stage("fetch", warpline::stages::fetch::factory_with_clock(now));
    registry
}

/// `count` tiles (one sample tile's bytes under as many names) served to
/// requests signed by `sas`, and the list of their URLs.
async fn signed_tiles(
    sas: &Arc<Sas>,
    count: usize,
    work: &std::path::Path,
) -> (TileServer, std::path::PathBuf) {
    let bytes = Arc::new(tiles(1, 64).remove(0).1);
    let names: Vec<String> = (0..count).map(|i| format!("t{i:04}.tif")).collect();
    let faults = Faults {
        sas: Some(Arc::clone(sas)),
        ..Faults::default()
    };
    let served = names.iter().map(|n| (n.clone(), Arc::clone(&bytes)));
    let server = TileServer::start_with(served, faults).await.unwrap();
    let list = work.join("tiles.txt");
    common::write_url_list(&server, names.iter().map(String::as_str), &list);
    (server, list)
}

/// The signature of every token `sas` handed out, and asserts none is in
/// `text` (`what`).
fn assert_no_token(sas: &Sas, what: &str, text: &str) {
    for token in sas.tokens() {
        let sig = token.rsplit_once("sig=").unwrap().1;
        assert!(
            !text.contains(sig),
            "{what} holds a token's signature:\n{text}"
        );
        assert!(!text.contains(&token), "{what} holds a token:\n{text}");
    }
}

/// The check the issue names: 600 items whose signed URLs expire every
/// 20 s (a second passes per tile served: 30 expiries), from a token
/// endpoint that lets 10 requests through a second: every item done,
/// about one token per expiry, the endpoint's refusals waited out (never
/// a storm), and no token in the report.
#[test]
fn six_hundred_items_whose_signed_urls_expire_every_20_s_are_all_done() {
    let work = tempfile::tempdir().unwrap();
    let clock = Clock::stopped(start());
    let sas = Sas::new(
        clock.clone(),
        Duration::from_secs(20),
        Duration::from_secs(1),
    );
    let rt = runtime();
    let (report, requests, refused, took) = rt.block_on(async {
        let tokens = TokenServer::start(Arc::clone(&sas), Some(Strict::sliding(10)))
            .await
            .unwrap();
        let (_tiles, list) = signed_tiles(&sas, 600, work.path()).await;
        let signer = format!("{{ url = {:?} }}", tokens.url("sentinel-2-l2a"));
        let toml = pipeline(&list, 8, &signer);
        let p = warpline::Pipeline::from_toml_str(&toml, &registry(&clock)).unwrap();
        let began = Instant::now();
        let report = p.run().await.unwrap();
        (report, tokens.requests(), tokens.refused(), began.elapsed())
    });
    assert_eq!(report.items.done, 600, "{report}");
    assert_eq!(sas.accepted(), 600, "one accepted request a tile");
    assert_eq!(
        sas.forged(),
        0,
        "every URL signed as the token was handed out"
    );
    // 600 s of the storage's clock: 30 tokens' lifetimes. A token is
    // renewed 2 s before it expires (a tenth of its lifetime): 18 tiles a
    // token, 34 at most; never one per worker or per refusal. It serves 21
    // at most (a renewal waiting out the endpoint's 429): 29 at least.
    let expiries = 600 / 20;
    let issued = sas.issued();
    assert!(
        (expiries - 1..=expiries * 6 / 5).contains(&issued),
        "{issued} tokens for {expiries} expiries ({} requests refused as expired)",
        sas.expired()
    );
    // The endpoint's refusals are waited out (its Retry-After, 1 s) by the
    // one request asking: at most one a second.
    assert_eq!(requests, issued + refused);
    assert!(
        refused <= took.as_secs() + 1,
        "{refused} requests refused in {took:?}: a storm"
    );
    let json = serde_json::to_string(&report).unwrap();
    assert_no_token(&sas, "the report", &json);
    assert_no_token(&sas, "the report", &report.to_string());
    eprintln!(
        "600 items in {took:?}: {issued} tokens, {refused} token requests refused (429), {} \
         tile requests refused as expired",
        sas.expired()
    );
}

/// A storage whose clock runs ahead of the client's: it refuses a token
/// the client still takes for fresh, saying the signature expired. The
/// request is made once more with a new token (one per refused token,
/// however many requests it refused), and the item done. The endpoint
/// refuses the first two requests for a token (429): they are waited out
/// by the one request asking, however many workers wait for it.
#[test]
fn a_signature_refused_as_expired_gets_one_new_token_and_the_item_is_done() {
    let work = tempfile::tempdir().unwrap();
    // The servers' clock moves 10 minutes a tile; the client's stands
    // still: a token of an hour is refused at its 8th tile.
    let servers = Clock::stopped(start());
    let client = Clock::stopped(start());
    let sas = Sas::new(servers, Duration::from_secs(3600), Duration::from_secs(600));
    let rt = runtime();
    for workers in [1, 4] {
        let before = (sas.issued(), sas.expired());
        let (report, requests) = rt.block_on(async {
            let tokens = TokenServer::start(Arc::clone(&sas), None).await.unwrap();
            tokens.refuse_next(2);
            let (_tiles, list) = signed_tiles(&sas, 30, work.path()).await;
            let signer = format!("{{ url = {:?} }}", tokens.url("naip"));
            let toml = pipeline(&list, workers, &signer);
            let p = warpline::Pipeline::from_toml_str(&toml, &registry(&client)).unwrap();
            (p.run().await.unwrap(), tokens.requests())
        });
        assert_eq!(report.items.done, 30, "{workers} workers: {report}");
        let issued = sas.issued() - before.0;
        assert_eq!(
            requests,
            issued + 2,
            "{workers} workers: the two 429s, once"
        );
        let expired = sas.expired() - before.1;
        // 7 tiles a token (0 to 60 minutes): 5 tokens for 30 tiles.
        if workers == 1 {
            assert_eq!((issued, expired), (5, 4), "one worker");
        } else {
            // Up to 4 requests refused with a token; one new token for them.
            assert!(
                (5..=6).contains(&issued) && expired >= issued - 1,
                "{workers} workers: {issued} tokens, {expired} refused"
            );
        }
        assert_no_token(&sas, "the report", &serde_json::to_string(&report).unwrap());
    }
}

/// A storage that refuses every token as expired (its clock two minutes
/// ahead of the token service's, whose tokens last one): the item fails
/// for good after one new token, saying why; not a loop.
#[test]
fn a_signature_refused_again_with_a_new_token_fails_the_item_saying_why() {
    let work = tempfile::tempdir().unwrap();
    let clock = Clock::stopped(start());
    let sas = Sas::new(clock.clone(), Duration::from_secs(60), Duration::ZERO);
    sas.set_storage_ahead(Duration::from_secs(120));
    let rt = runtime();
    let (report, url) = rt.block_on(async {
        let tokens = TokenServer::start(Arc::clone(&sas), None).await.unwrap();
        let (_tiles, list) = signed_tiles(&sas, 1, work.path()).await;
        let signer = format!("{{ url = {:?} }}", tokens.url("naip"));
        let toml = pipeline(&list, 1, &signer);
        let p = warpline::Pipeline::from_toml_str(&toml, &registry(&clock)).unwrap();
        let url = std::fs::read_to_string(&list).unwrap();
        (p.run().await.unwrap(), url)
    });
    assert_eq!(report.items.failed, 1, "{report}");
    assert_eq!((sas.issued(), sas.expired()), (2, 2));
    let f = &report.failures[0];
    assert_eq!(f.stage, "fetch", "{f:?}");
    assert_eq!(f.kind, warpline::engine::ErrorKind::Permanent, "{f:?}");
    assert!(
        f.message.starts_with(url.trim())
            && f.message.contains("403")
            && f.message.contains("again with a new token")
            && f.message.contains("clock"),
        "{f:?}"
    );
    assert_no_token(&sas, "the report", &serde_json::to_string(&report).unwrap());
}

/// The issue's check in real time: 600 items whose tokens expire every
/// 20 s of this machine's clock (the stock fetch kind), 900 ms a tile with
/// 8 workers (about 70 s), from an endpoint that lets 2 requests through
/// a second: every item done, about one token per 18 s, none refused.
#[test]
#[ignore = "a measurement: 600 items over about 70 s of real time"]
fn six_hundred_items_over_real_time_with_tokens_of_20_s() {
    let work = tempfile::tempdir().unwrap();
    let sas = Sas::new(Clock::system(), Duration::from_secs(20), Duration::ZERO);
    let rt = runtime();
    let (report, requests, refused, took) = rt.block_on(async {
        let tokens = TokenServer::start(Arc::clone(&sas), Some(Strict::sliding(2)))
            .await
            .unwrap();
        let bytes = Arc::new(tiles(1, 64).remove(0).1);
        let names: Vec<String> = (0..600).map(|i| format!("t{i:04}.tif")).collect();
        let faults = Faults {
            sas: Some(Arc::clone(&sas)),
            latency: Some(Duration::from_millis(900)),
            ..Faults::default()
        };
        let served = names.iter().map(|n| (n.clone(), Arc::clone(&bytes)));
        let server = TileServer::start_with(served, faults).await.unwrap();
        let list = work.path().join("tiles.txt");
        common::write_url_list(&server, names.iter().map(String::as_str), &list);
        let signer = format!("{{ url = {:?} }}", tokens.url("sentinel-2-l2a"));
        let toml = pipeline(&list, 8, &signer);
        let p = warpline::Pipeline::from_toml_str(&toml, &warpline::registry()).unwrap();
        let began = Instant::now();
        let report = p.run().await.unwrap();
        (report, tokens.requests(), tokens.refused(), began.elapsed())
    });
    assert_eq!(report.items.done, 600, "{report}");
    let expiries = took.as_secs_f64() / 20.0;
    let issued = sas.issued();
    eprintln!(
        "600 items in {took:?} ({expiries:.1} lifetimes of a token): {issued} tokens, {requests} \
         token requests ({refused} refused, 429), {} tile requests refused as expired",
        sas.expired()
    );
    assert!(
        issued as f64 <= expiries * 20.0 / 18.0 + 2.0,
        "{issued} tokens"
    );
    assert_eq!(sas.expired(), 0);
    assert_no_token(&sas, "the report", &serde_json::to_string(&report).unwrap());
}
