//! The `stac` source against a real HTTP server on loopback (testkit's
//! tile server serving the pages as files).

use std::sync::Arc;

use serde_json::json;
use warpline_testkit::tileserver::{Fault, Faults, TileServer};

use super::read::{Link, Request};
use super::run::next_request;
use super::*;

fn spec(first: &str, assets: &[&str]) -> Stac {
    Stac {
        kind: Kind::Items,
        first: Request::get(Url::parse(first).unwrap()),
        assets: assets.iter().map(|a| a.to_string()).collect(),
        schemes: Schemes {
            allowed: super::super::KNOWN_SCHEMES
                .iter()
                .map(|s| s.to_string())
                .collect(),
        },
        client: crate::http::client(Duration::from_secs(5), Duration::from_secs(30), 5, None)
            .unwrap(),
    }
}

/// A page of items `ids`, its `next` link (relative) to `next`.
fn page(ids: &[&str], next: Option<&str>) -> Vec<u8> {
    // Item "c" says where it lives: its href is relative to that.
    let features: Vec<Value> = ids
        .iter()
        .map(|id| {
            let links = match *id {
                "c" => json!([{"rel": "self", "href": "../other/c.json"}]),
                _ => json!([]),
            };
            json!({"type": "Feature", "id": id, "links": links,
                   "assets": {"B04": {"href": format!("{id}.tif")}}})
        })
        .collect();
    let links: Vec<Value> = next
        .map(|n| json!({"rel": "next", "href": n}))
        .into_iter()
        .collect();
    serde_json::to_vec(&json!({"type": "FeatureCollection", "features": features, "links": links}))
        .unwrap()
}

/// Three pages: the first is read with the first input asked for (not
/// when the source is opened), each next one while the inputs of the one
/// before are taken, never more than one page ahead; relative hrefs are
/// resolved against the page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_are_read_one_at_a_time_as_inputs_are_taken() {
    let pages: Vec<(String, Arc<Vec<u8>>)> = vec![
        (
            "p1.json".into(),
            Arc::new(page(&["a", "b"], Some("p2.json"))),
        ),
        (
            "p2.json".into(),
            Arc::new(page(&["c", "d"], Some("./p3.json"))),
        ),
        ("p3.json".into(), Arc::new(page(&["e"], None))),
    ];
    let server = TileServer::start(pages).await.unwrap();
    let mut source = spec(&server.url("p1.json"), &["B04"]).open().unwrap();
    assert_eq!(server.requests(), 0, "opening the source reads nothing");
    let mut ahead = Vec::new();
    let mut ids = Vec::new();
    while let Some(input) = source.next().await {
        let input = input.unwrap();
        // Page k's inputs (k from 1): pages up to k + 1 asked for, never more.
        let page = match input.id.as_str() {
            "a_B04" | "b_B04" => 1,
            "c_B04" | "d_B04" => 2,
            _ => 3,
        };
        if page < 3 {
            // The next page is asked for while this one's are taken.
            until(|| server.requests() == page + 1).await;
        }
        ahead.push(server.requests() - page);
        match input.id.as_str() {
            "a_B04" => assert_eq!(input.source, server.url("a.tif")),
            "c_B04" => assert_eq!(
                input.source,
                format!("http://{}/other/c.tif", server.addr())
            ),
            _ => {}
        }
        ids.push(input.id);
    }
    assert_eq!(ids, ["a_B04", "b_B04", "c_B04", "d_B04", "e_B04"]);
    assert_eq!(ahead, [1, 1, 1, 1, 0], "one page ahead, never more");
    assert_eq!(server.requests(), 3);
}

/// Waits until `done` holds (a count the test waits for, not a time it
/// guesses): at most 30 s, then fails.
async fn until(done: impl Fn() -> bool) {
    let waited = tokio::time::timeout(Duration::from_secs(30), async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });
    waited.await.expect("the awaited count never came");
}

/// A page the server moved (a redirect): its relative links are relative
/// to where it was read, not to the URL first asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relative_links_of_a_redirected_page_follow_the_redirect() {
    let pages: Vec<(String, Arc<Vec<u8>>)> = vec![
        (
            "new/p1.json".into(),
            Arc::new(page(&["a"], Some("p2.json"))),
        ),
        ("new/p2.json".into(), Arc::new(page(&["b"], None))),
    ];
    let faults = Faults {
        redirects: vec![("old.json".into(), "/tiles/new/p1.json".into())],
        ..Faults::default()
    };
    let server = TileServer::start_with(pages, faults).await.unwrap();
    let mut source = spec(&server.url("old.json"), &["B04"]).open().unwrap();
    let mut sources = Vec::new();
    while let Some(input) = source.next().await {
        sources.push(input.unwrap().source);
    }
    assert_eq!(sources, [server.url("new/a.tif"), server.url("new/b.tif")]);
}

/// A 500 is tried again (after a fetch's backoff); a page that is not
/// JSON ends the listing with a failed item naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_error_is_tried_again_and_a_bad_page_is_named() {
    let pages: Vec<(String, Arc<Vec<u8>>)> = vec![
        ("p1.json".into(), Arc::new(page(&["a"], Some("p2.json")))),
        ("p2.json".into(), Arc::new(b"<html>busy</html>".to_vec())),
    ];
    let faults = Faults {
        server_errors: Some(Fault::all(1)),
        ..Faults::default()
    };
    let server = TileServer::start_with(pages, faults).await.unwrap();
    let mut source = spec(&server.url("p1.json"), &["B04"]).open().unwrap();
    assert_eq!(source.next().await.unwrap().unwrap().id, "a_B04");
    let failed = source.next().await.unwrap().unwrap_err();
    assert_eq!(failed.id, server.url("p2.json"));
    assert!(
        failed.message.contains("not a STAC JSON document")
            && failed.message.contains("(after 1 items)"),
        "{}",
        failed.message
    );
    assert!(source.next().await.is_none());
    assert_eq!(
        server.requests(),
        4,
        "each page twice: a 500, then the page"
    );
}

/// A POST `next` link: its body merged into the last one when it says
/// `merge`, its headers sent.
#[test]
fn a_post_next_link_merges_its_body() {
    let base = Url::parse("https://api.test/search").unwrap();
    let last: Map<String, Value> =
        serde_json::from_value(json!({"collections": ["s2"], "limit": 2})).unwrap();
    let link: Link = serde_json::from_value(json!({
        "rel": "next", "href": "/search", "method": "POST", "merge": true,
        "body": {"token": "next:2"}, "headers": {"X-Page": "2"}
    }))
    .unwrap();
    let (req, body) = next_request(&link, &base, Some(last.clone())).unwrap();
    let body = body.unwrap();
    assert_eq!(body["collections"], json!(["s2"]));
    assert_eq!(body["token"], "next:2");
    assert_eq!(req.headers, [("X-Page".to_owned(), "2".to_owned())]);
    let mut not_merged = link.clone();
    not_merged.merge = false;
    let (_, body) = next_request(&not_merged, &base, Some(last)).unwrap();
    assert_eq!(Value::Object(body.unwrap()), json!({"token": "next:2"}));
    let mut put = link;
    put.method = Some("PUT".into());
    assert!(next_request(&put, &base, None).unwrap_err().contains("PUT"));
}

/// A `next` link of a page read over HTTP never leads to a local file.
#[test]
fn a_remote_next_link_to_a_local_file_is_refused() {
    let base = Url::parse("https://api.test/search").unwrap();
    let link: Link =
        serde_json::from_value(json!({"rel": "next", "href": "file:///etc/passwd"})).unwrap();
    let refused = next_request(&link, &base, None).unwrap_err();
    assert!(refused.contains("cannot lead to a local file"), "{refused}");
    // From a local page, a local next page is fine.
    let local = Url::parse("file:///data/p1.json").unwrap();
    assert!(next_request(&link, &local, None).is_ok());
}

fn search_spec(url: &str) -> Stac {
    Stac {
        kind: Kind::Search,
        ..spec(url, &["B04"])
    }
}

/// A STAC API whose pages are each refused once (429 with `Retry-After:
/// 1`) or reset once, and that answers 503 for its first half second: every
/// page is read once it answers, every item once, and no page fails (a
/// refusal waits for the host's gate, a reset is tried again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttling_resetting_api_loses_no_page() {
    use warpline_testkit::StacApi;
    let api = StacApi::new(15, 3);
    let faults = Faults {
        resets: Some(Fault {
            one_in: 2,
            times: 1,
        }),
        throttle: Some((Fault::all(1), 1)),
        unavailable: Some((Duration::ZERO, Duration::from_millis(500))),
        ..Faults::default()
    };
    let tiles: Vec<(String, Arc<Vec<u8>>)> = Vec::new();
    let server = TileServer::start_stac(tiles, faults, api).await.unwrap();
    let url = format!("http://{}/search", server.addr());
    let mut source = search_spec(&url).open().unwrap();
    let mut ids = Vec::new();
    while let Some(input) = source.next().await {
        let input = input.expect("no page fails");
        assert_eq!(
            input.source,
            server.url(&StacApi::tile(ids.len() as u32)),
            "in order"
        );
        ids.push(input.id);
    }
    assert_eq!(ids.len(), 15, "every item once: {ids:?}");
    let pages = server.page_counts();
    assert_eq!(pages.served, 5, "each page read once: {pages:?}");
    // Each page's first answer a reset or a 429, and a 503 before.
    assert!(pages.asked >= 11, "{pages:?}");
    assert!(pages.refused >= 1, "{pages:?}");
}
