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

#[tokio::test]
async fn an_item_done_twice_counts_once_and_older_runs_are_counted_from_their_results() {
    let Ok(url) = std::env::var("WARPLINE_TEST_REDIS") else {
        eprintln!("WARPLINE_TEST_REDIS is not set: the Redis test is skipped");
        return;
    };
    let run = format!(
        "counts-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let c = Coordinator::connect(
        &url,
        Settings {
            run: run.clone(),
            consumer: "test".into(),
            max_deliveries: 3,
            reclaim_after: Duration::from_secs(60),
            give_up_after: Duration::from_secs(10),
        },
    )
    .await
    .unwrap_or_else(|e| panic!("WARPLINE_TEST_REDIS={url} is set but: {e}"));
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
