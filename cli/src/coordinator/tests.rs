//! The coordinator's own keys, against a real Redis (`WARPLINE_TEST_REDIS`).

use super::*;
use redis::AsyncCommands;

/// Records results as the workers do (the message ids need not exist:
/// acknowledging an unknown one does nothing).
async fn set(c: &Coordinator, id: &str, value: &str) {
    let dead = [("id", id.to_owned())];
    let entry: &[(&str, String)] = if value == "dead" { &dead } else { &[] };
    c.record(id, "0-1", value, entry).await.unwrap();
}

/// A coordinator of a run of its own (`NAME-PID-NANOS`) on
/// `WARPLINE_TEST_REDIS`; `None` (the test is skipped) when it is not set.
async fn connected(name: &str) -> Option<Coordinator> {
    let Ok(url) = std::env::var("WARPLINE_TEST_REDIS") else {
        eprintln!("WARPLINE_TEST_REDIS is not set: the Redis test is skipped");
        return None;
    };
    let run = format!(
        "{name}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let c = Coordinator::connect(
        &url,
        Settings {
            run,
            consumer: "test".into(),
            max_deliveries: 3,
            reclaim_after: Duration::from_secs(60),
            give_up_after: Duration::from_secs(10),
        },
    )
    .await
    .unwrap_or_else(|e| panic!("WARPLINE_TEST_REDIS={url} is set but: {e}"));
    Some(c)
}

#[tokio::test]
async fn an_item_done_twice_counts_once_and_older_runs_are_counted_from_their_results() {
    let Some(c) = connected("counts").await else {
        return;
    };
    set(&c, "a", "done").await;
    // Redone after a worker died before acknowledging: still one.
    set(&c, "a", "done").await;
    set(&c, "b", "done").await;
    assert_eq!(c.status().await.unwrap().done, 2);
    // A slow worker failing an item another worker finished: the
    // complete output wins, and no dead-letter entry is added.
    set(&c, "b", "dead").await;
    assert_eq!(c.status().await.unwrap().done, 2);
    set(&c, "c", "dead").await;
    // Sent again (its reply was lost while Redis restarted): no second
    // dead-letter entry.
    set(&c, "c", "dead").await;
    let mut conn = c.cmd.once(|c| async move { Ok(c) }).await.unwrap();
    // A dead result comes with its dead-letter entry.
    let dead: u64 = conn.xlen(c.key("dead")).await.unwrap();
    assert_eq!(dead, 1);
    let result: String = conn.hget(c.key("results"), "b").await.unwrap();
    assert_eq!(result, "done");
    let counted: u64 = conn.hget(c.key("counts"), "done").await.unwrap();
    assert_eq!(counted, 2);
    // The count is what is read, not every result: a result written
    // around the script is not seen.
    conn.hset::<_, _, _, ()>(c.key("results"), "d", "done")
        .await
        .unwrap();
    assert_eq!(c.done().await.unwrap(), 2);
    // A run begun without counts is counted from its results (a, b, d).
    conn.hdel::<_, _, ()>(c.key("counts"), "tracked")
        .await
        .unwrap();
    assert_eq!(c.done().await.unwrap(), 3);
    conn.del::<_, ()>(&[
        c.key("results"),
        c.key("counts"),
        c.key("stream"),
        c.key("dead"),
    ])
    .await
    .unwrap();
}

/// Sends the command `words` and reads its reply as `T`.
async fn query<T: redis::FromRedisValue>(conn: &mut MultiplexedConnection, words: &[&str]) -> T {
    let mut cmd = redis::cmd(words[0]);
    for w in &words[1..] {
        cmd.arg(*w);
    }
    cmd.query_async(conn).await.unwrap()
}

/// Stream replies are read with redis's own types: what XREADGROUP (new
/// and pending), XAUTOCLAIM and XRANGE return becomes `(id, fields)`, and
/// an entry deleted after it was delivered is left out.
#[tokio::test]
async fn stream_replies_keep_their_fields_and_leave_deleted_entries_out() {
    use redis::streams::{StreamAutoClaimReply, StreamPendingReply};
    use redis::streams::{StreamRangeReply, StreamReadReply};
    use scripts::entries;
    let Some(c) = connected("entries").await else {
        return;
    };
    let mut conn = c.cmd.once(|c| async move { Ok(c) }).await.unwrap();
    let stream = c.key("stream");
    let fields = |id: &str| {
        HashMap::from([
            ("id".to_owned(), id.to_owned()),
            ("source".to_owned(), format!("s/{id}")),
        ])
    };
    let mut ids = Vec::new();
    for id in ["a", "b"] {
        let source = format!("s/{id}");
        let add = ["XADD", &stream, "*", "id", id, "source", &source];
        ids.push(query::<String>(&mut conn, &add).await);
    }
    let (a, b) = (ids[0].clone(), ids[1].clone());
    let read = |after| {
        [
            "XREADGROUP",
            "GROUP",
            GROUP,
            "w",
            "COUNT",
            "100",
            "STREAMS",
            &stream,
            after,
        ]
    };
    let new: StreamReadReply = query(&mut conn, &read(">")).await;
    let got = entries(new.keys.into_iter().flat_map(|k| k.ids));
    assert_eq!(
        got,
        vec![(a.clone(), fields("a")), (b.clone(), fields("b"))]
    );
    // Nothing new: nil, read as no entry.
    let none: StreamReadReply = query(&mut conn, &read(">")).await;
    assert!(none.keys.iter().all(|k| k.ids.is_empty()));
    // b deleted after its delivery: still pending, its fields nil.
    query::<()>(&mut conn, &["XDEL", &stream, &b]).await;
    let pending: StreamReadReply = query(&mut conn, &read("0")).await;
    let got = entries(pending.keys.into_iter().flat_map(|k| k.ids));
    assert_eq!(got, vec![(a.clone(), fields("a"))]);
    let range: StreamRangeReply = query(&mut conn, &["XRANGE", &stream, "-", "+"]).await;
    assert_eq!(entries(range.ids), vec![(a.clone(), fields("a"))]);
    let claim = ["XAUTOCLAIM", &stream, GROUP, "w2", "0", "0-0"];
    let claimed: StreamAutoClaimReply = query(&mut conn, &claim).await;
    assert_eq!(entries(claimed.claimed), vec![(a.clone(), fields("a"))]);
    // Redis 7 drops the deleted entry from the pending list as it claims.
    let count: StreamPendingReply = query(&mut conn, &["XPENDING", &stream, GROUP]).await;
    assert_eq!(count.count(), 1);
    assert_eq!(c.pending().await.unwrap(), 1);
    query::<()>(&mut conn, &["DEL", &stream, &c.key("counts")]).await;
}

/// The gap between two reservations' times, from their waits.
fn gap(earlier: Duration, later: Duration) -> f64 {
    later.as_secs_f64() - earlier.as_secs_f64()
}

/// A margin one worker's bucket learns from a refusal is Redis's: another
/// worker's next tokens are paced at it. A bucket of one token per 100 s
/// (so each reservation's wait, not a sleep, shows the pace; the calls
/// themselves take milliseconds, however loaded the machine).
#[tokio::test]
async fn a_margin_learnt_by_one_worker_paces_every_worker() {
    use warpline_engine::limit::{RateBackend, MARGIN};
    let Some(a) = connected("margin").await else {
        return;
    };
    // The same run, on connections of its own: a second worker.
    let b = Coordinator::connect(
        &std::env::var("WARPLINE_TEST_REDIS").unwrap(),
        a.settings.clone(),
    )
    .await
    .unwrap();
    let (ra, rb) = (a.global_rate("api", 0.01, 1), b.global_rate("api", 0.01, 1));
    let host = "http://example.com";
    let first = ra.reserve(host).await.unwrap();
    assert_eq!(first, Duration::ZERO);
    let second = ra.reserve(host).await.unwrap();
    assert!((gap(first, second) - 100.0).abs() < 1.0, "{second:?}");
    // Worker b is refused at the bucket's rate: the margin widens once
    // for the refusals of one burst.
    assert_eq!(rb.widen(host).await.unwrap(), MARGIN.step);
    assert_eq!(rb.widen(host).await.unwrap(), MARGIN.step);
    // Worker a's tokens after the one already due are 1 / 0.98 apart.
    let third = ra.reserve(host).await.unwrap();
    let fourth = ra.reserve(host).await.unwrap();
    let widened = 100.0 / (1.0 - MARGIN.step);
    assert!((gap(second, third) - 100.0).abs() < 1.0, "{third:?}");
    assert!((gap(third, fourth) - widened).abs() < 1.0, "{fourth:?}");
    let mut conn = a.cmd.once(|c| async move { Ok(c) }).await.unwrap();
    let margin_key = format!("warpline:{}:margin:api:{host}", a.settings.run);
    let kept: String = conn.hget(&margin_key, "m").await.unwrap();
    assert_eq!(kept.parse::<f64>().unwrap(), MARGIN.step);
    // Kept for its hold after the last refusal, then narrowing: a margin
    // of 0.04 last refused 20 s past its hold is 0.03.
    let now_us = {
        let (s, us): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
        s * 1_000_000 + us
    };
    let at = now_us - MARGIN.hold.as_micros() as u64 - 20_000_000;
    conn.hset_multiple::<_, _, _, ()>(&margin_key, &[("m", "0.04"), ("at", &at.to_string())])
        .await
        .unwrap();
    let fifth = ra.reserve(host).await.unwrap();
    let sixth = ra.reserve(host).await.unwrap();
    let narrowed = 100.0 / (1.0 - (0.04 - 20.0 * MARGIN.creep_per_s));
    assert!(
        (gap(fifth, sixth) - narrowed).abs() < 0.5,
        "{sixth:?} after {fifth:?}"
    );
    let parts =
        ["rate", "pause", "margin"].map(|p| format!("warpline:{}:{p}:api:{host}", a.settings.run));
    conn.del::<_, ()>(&parts).await.unwrap();
}

/// A pause (a server's `Retry-After`) moves every worker's next token to
/// its end, and after it tokens come at the rate, not in a burst.
#[tokio::test]
async fn a_global_pause_ends_with_tokens_at_the_rate_not_a_burst() {
    use warpline_engine::limit::RateBackend;
    let Some(a) = connected("pause").await else {
        return;
    };
    // 1 token a second, a burst of 3.
    let rate = a.global_rate("api", 1.0, 3);
    let host = "h";
    rate.pause(host, Duration::from_secs(100)).await.unwrap();
    let waits: Vec<f64> = {
        let mut w = Vec::new();
        for _ in 0..3 {
            w.push(rate.reserve(host).await.unwrap().as_secs_f64());
        }
        w
    };
    assert!((waits[0] - 100.0).abs() < 1.0, "{waits:?}");
    assert!((waits[1] - waits[0] - 1.0).abs() < 0.1, "{waits:?}");
    assert!((waits[2] - waits[1] - 1.0).abs() < 0.1, "{waits:?}");
    let mut conn = a.cmd.once(|c| async move { Ok(c) }).await.unwrap();
    let parts =
        ["rate", "pause", "margin"].map(|p| format!("warpline:{}:{p}:api:{host}", a.settings.run));
    conn.del::<_, ()>(&parts).await.unwrap();
}
