//! For the tests of this module: the test server (`WARPLINE_TEST_S3`, see
//! cli/tests/all/s3/), clients with its credentials (not the environment's), and
//! a loopback proxy that counts requests on their way to it.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use object_store::aws::{AmazonS3, AmazonS3Builder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::create::Creating;

fn var(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

pub(crate) use warpline_testkit::runtime;

/// The test server.
pub(crate) struct Server {
    pub(crate) endpoint: String,
    pub(crate) bucket: String,
}

/// The test server, or `None` (and a message saying what is skipped).
pub(crate) fn server(skipped: &str) -> Option<Server> {
    let Ok(endpoint) = std::env::var("WARPLINE_TEST_S3") else {
        eprintln!("WARPLINE_TEST_S3 is not set: {skipped} skipped");
        return None;
    };
    Some(Server {
        endpoint,
        bucket: var("WARPLINE_TEST_S3_BUCKET", "warpline-test"),
    })
}

/// A prefix no other test (or run) uses.
pub(crate) fn unique(test: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{test}-{}-{nanos}", std::process::id())
}

impl Server {
    /// A client of the bucket through `endpoint` (the server's, or a
    /// proxy's), with the test credentials.
    pub(crate) fn client(&self, endpoint: &str) -> Arc<AmazonS3> {
        self.client_trying(endpoint, 3)
    }

    /// [`client`](Self::client), asking again `retries` times as
    /// [`Stores`](super::Stores) is told to.
    pub(crate) fn client_trying(&self, endpoint: &str, retries: usize) -> Arc<AmazonS3> {
        Arc::new(self.builder(endpoint, retries).build().unwrap())
    }

    /// A client that completes uploads only if no object has the name
    /// (see [`create`](super::create)).
    pub(crate) fn creating_client(&self, endpoint: &str) -> Arc<AmazonS3> {
        let b = self.builder(endpoint, 3);
        Arc::new(b.with_http_connector(Creating::S3).build().unwrap())
    }

    fn builder(&self, endpoint: &str, retries: usize) -> AmazonS3Builder {
        AmazonS3Builder::new()
            .with_retry(object_store::RetryConfig {
                max_retries: retries,
                ..Default::default()
            })
            .with_endpoint(endpoint)
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_bucket_name(&self.bucket)
            .with_access_key_id(var("WARPLINE_TEST_S3_KEY", "warpline-test"))
            .with_secret_access_key(var("WARPLINE_TEST_S3_SECRET", "warpline-test-secret"))
    }

    /// A proxy to the server on a port of its own: its endpoint, and how
    /// many requests holding `needle` went through it.
    pub(crate) async fn counting_proxy(&self, needle: &'static [u8]) -> (String, Arc<AtomicUsize>) {
        warpline_testkit::watching_proxy(&self.endpoint, needle, warpline_testkit::OnNeedle::Count)
            .await
    }
}

/// A server on loopback that answers every request with `status` and an
/// S3 error body of `code`: its endpoint.
pub(crate) async fn refusing_server(status: &'static str, code: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let n = match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    seen.extend_from_slice(&buf[..n]);
                    // Requests without bodies (HEAD, GET): each ends with a
                    // blank line.
                    while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        seen.drain(..end + 4);
                        let body = format!("<Error><Code>{code}</Code></Error>");
                        let answer = format!(
                            "HTTP/1.1 {status}\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if conn.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    endpoint
}
