//! The tile server's own tests: its corpus packing and its faults.

use super::*;

/// Reads one answer: the status line and the body (by Content-Length).
async fn read_answer(stream: &mut TcpStream) -> (String, Vec<u8>) {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut buf).await.expect("read the head");
        assert!(n > 0, "the connection closed before an answer");
        data.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&data[..end]).into_owned();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .and_then(|v| v.trim().parse().ok())
        .expect("a Content-Length");
    let mut body = data[end..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut buf).await.expect("read the body");
        if n == 0 {
            break;
        }
        body.extend_from_slice(&buf[..n]);
    }
    (head.lines().next().unwrap_or_default().to_owned(), body)
}

/// A server with one tile, `a.tif`, misbehaving as `faults` says, and a
/// connection to it that has asked for the tile.
async fn asked(tile: Vec<u8>, faults: Faults) -> (TileServer, TcpStream) {
    let server = TileServer::start_with([("a.tif".to_owned(), tile)], faults)
        .await
        .unwrap();
    let mut stream = TcpStream::connect(server.addr()).await.unwrap();
    stream
        .write_all(b"GET /tiles/a.tif HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    (server, stream)
}

async fn closed(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 16];
    matches!(stream.read(&mut buf).await, Ok(0) | Err(_))
}

#[test]
fn names_that_share_a_tile_share_one_copy_and_each_name_gets_its_bytes() {
    let a = Arc::new(vec![1u8; 3000]);
    let b = Arc::new((0..5000u32).map(|i| i as u8).collect::<Vec<_>>());
    let corpus = Corpus::pack([
        ("a1".to_owned(), Arc::clone(&a)),
        ("b".to_owned(), Arc::clone(&b)),
        ("a2".to_owned(), Arc::clone(&a)),
        ("empty".to_owned(), Arc::new(Vec::new())),
    ])
    .unwrap();
    assert_eq!(corpus.bytes.len(), 8000, "one copy of `a`");
    assert_eq!(corpus.get("a1"), Some(&a[..]));
    assert_eq!(corpus.get("a2"), Some(&a[..]));
    assert_eq!(corpus.get("b"), Some(&b[..]));
    assert_eq!(corpus.get("empty"), Some(&[][..]));
    assert_eq!(corpus.get("none"), None);
    assert!(Corpus::pack(Vec::<(String, Vec<u8>)>::new()).is_ok());
}

#[tokio::test]
async fn a_connection_serves_many_requests_until_a_bad_one() {
    let tile = vec![7u8; 100_000];
    let server = TileServer::start([("a.tif".to_owned(), tile.clone())])
        .await
        .unwrap();
    let mut stream = TcpStream::connect(server.addr()).await.unwrap();
    for _ in 0..2 {
        stream
            .write_all(b"GET /tiles/a.tif HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let (status, body) = read_answer(&mut stream).await;
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert_eq!(body, tile);
    }
    stream
        .write_all(b"GET /tiles/none.tif HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(read_answer(&mut stream).await.0, "HTTP/1.1 404 Not Found");
    assert_eq!((server.requests(), server.served()), (3, 2));
    stream.write_all(b"POST / HTTP/1.1\r\n\r\n").await.unwrap();
    assert_eq!(read_answer(&mut stream).await.0, "HTTP/1.1 400 Bad Request");
    assert!(
        closed(&mut stream).await,
        "a bad request closes the connection"
    );
}

#[tokio::test]
async fn a_body_cut_short_closes_its_connection() {
    let faults = Faults {
        truncated: Some(Fault::all(1)),
        ..Faults::default()
    };
    let (_server, mut stream) = asked(vec![7u8; 100_000], faults).await;
    let (status, body) = read_answer(&mut stream).await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(body.len(), 50_000, "half the body, then the end");
    assert!(closed(&mut stream).await);
}

#[tokio::test]
async fn a_reset_sends_no_answer_and_no_orderly_close() {
    let faults = Faults {
        resets: Some(Fault::all(1)),
        ..Faults::default()
    };
    let (_server, mut stream) = asked(vec![7u8; 10], faults).await;
    let mut buf = [0u8; 16];
    let read = stream.read(&mut buf).await;
    assert_eq!(
        read.map_err(|e| e.kind()),
        Err(std::io::ErrorKind::ConnectionReset),
        "an RST, not an answer or a FIN"
    );
}

#[test]
fn the_rate_limit_changes_at_its_times_and_latency_grows_past_the_knee() {
    let s = Duration::from_secs;
    let f = Faults {
        rate_limit: Some(40.0),
        rate_changes: vec![(s(10), 10.0), (s(20), 40.0)],
        latency: Some(Duration::from_millis(20)),
        latency_per_in_flight: Some((8, Duration::from_millis(10))),
        ..Faults::default()
    };
    let rates: Vec<_> = [0, 9, 10, 19, 20, 99].map(|t| rate_now(&f, s(t))).to_vec();
    assert_eq!(
        rates,
        [40.0, 40.0, 10.0, 10.0, 40.0, 40.0].map(Some).to_vec()
    );
    assert_eq!(rate_now(&Faults::default(), s(5)), None);
    let ms = |n| latency(&f, n).as_millis();
    assert_eq!([ms(1), ms(8), ms(9), ms(12)], [20, 20, 30, 60]);
}

#[tokio::test]
async fn a_spell_of_unavailability_answers_503() {
    let faults = Faults {
        unavailable: Some((Duration::ZERO, Duration::from_secs(3600))),
        ..Faults::default()
    };
    let (server, mut stream) = asked(vec![7u8; 10], faults).await;
    let (status, _) = read_answer(&mut stream).await;
    assert_eq!(status, "HTTP/1.1 503 Service Unavailable");
    assert_eq!((server.unavailable(), server.served()), (1, 0));
    let answers = server.answers();
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].1, 503);
}

#[tokio::test]
async fn a_strict_limit_answers_429_with_whole_seconds_and_counts_its_decisions() {
    // Two a minute, sliding: the third request is refused, and a place
    // frees when the first leaves the window, up to 60 s away (said in
    // whole seconds, rounded up).
    let faults = Faults {
        strict: Some(Strict::SlidingWindow {
            limit: 2,
            window: Duration::from_secs(60),
        }),
        // Ignored beside a strict limit.
        rate_limit: Some(1000.0),
        ..Faults::default()
    };
    let (server, mut stream) = asked(vec![7u8; 10], faults).await;
    assert_eq!(read_answer(&mut stream).await.0, "HTTP/1.1 200 OK");
    let get = b"GET /tiles/a.tif HTTP/1.1\r\n\r\n";
    stream.write_all(get).await.unwrap();
    assert_eq!(read_answer(&mut stream).await.0, "HTTP/1.1 200 OK");
    stream.write_all(get).await.unwrap();
    let mut data = Vec::new();
    while !data.windows(4).any(|w| w == b"\r\n\r\n") {
        let mut buf = [0u8; 256];
        let n = stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed before the head ended");
        data.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&data).into_owned();
    assert!(head.starts_with("HTTP/1.1 429 Too Many Requests"), "{head}");
    let retry_after: u64 = head
        .lines()
        .find_map(|l| l.strip_prefix("Retry-After: "))
        .and_then(|v| v.trim().parse().ok())
        .expect("a Retry-After in seconds");
    assert!((59..=60).contains(&retry_after), "{retry_after}");
    let counts = server.strict_counts();
    assert_eq!((counts.accepted, counts.refused), (2, 1));
    assert_eq!((server.served(), server.throttled()), (2, 1));
}
