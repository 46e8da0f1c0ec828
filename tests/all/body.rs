//! A body of unknown length is charged to the byte budget as it grows,
//! before each chunk that would pass the charge: an endless chunked body is
//! stopped by the budget, not read up to `max_bytes` outside it (issue 16).

use crate::common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::runtime;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use warpline::engine::ErrorKind;

/// Answers every request with a chunked body that never ends (64 KiB
/// chunks), until the client goes away or 512 MiB were sent. Counts the
/// bytes of body it sent.
async fn endless_server() -> (String, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sent = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&sent);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let counter = Arc::clone(&counter);
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let _ = socket.read(&mut request).await;
                let head = "HTTP/1.1 200 OK\r\nContent-Type: image/tiff\r\n\
                            Transfer-Encoding: chunked\r\n\r\n";
                if socket.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = vec![0x49u8; 64 << 10];
                let frame = [format!("{:x}\r\n", chunk.len()).as_bytes(), &chunk, b"\r\n"].concat();
                for _ in 0..(512 << 20) / chunk.len() {
                    if socket.write_all(&frame).await.is_err() {
                        return;
                    }
                    counter.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                }
            });
        }
    });
    (format!("http://{addr}"), sent)
}

#[test]
fn an_endless_chunked_body_is_stopped_by_the_budget_not_by_max_bytes() {
    let rt = runtime();
    rt.block_on(async {
        let (base, sent) = endless_server().await;
        let work = tempfile::tempdir().unwrap();
        let list = work.path().join("list.txt");
        let urls: Vec<String> = (0..3).map(|i| format!("{base}/endless-{i}.tif")).collect();
        std::fs::write(&list, urls.join("\n")).unwrap();
        let toml = format!(
            r#"
            [pipeline]
            flow = ["fetch", "sink"]
            [source]
            kind = "list"
            path = "{}"
            [limits.memory]
            budget = "4MiB"
            [stages.fetch]
            kind = "fetch"
            workers = 1
            memory = "memory"
            max_bytes = "256MiB"
            retry = {{ attempts = 1 }}
            [stages.sink]
            kind = "discard"
            "#,
            list.display()
        );
        let pipeline = warpline::Pipeline::from_toml_str(&toml, &warpline::registry()).unwrap();
        let report = pipeline.run().await.unwrap();
        assert_eq!(report.items.failed, 3, "{report}");
        for f in &report.failures {
            assert_eq!(f.kind, ErrorKind::OverBudget, "{f:?}");
            assert!(f.message.contains("memory"), "{f:?}");
        }
        let memory = report.limiter("memory").unwrap();
        assert!(memory.peak_in_use.unwrap() <= 4 << 20, "{report}");
        // Each fetch stopped at the budget (4 MiB charged, 8 asked for); the
        // rest is what the kernel's socket buffers took in.
        let per_item = sent.load(Ordering::Relaxed) / 3;
        assert!(per_item < 64 << 20, "{per_item} bytes sent per item");
    });
}
