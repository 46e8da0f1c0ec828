//! Object-store credentials that expire during a run (issue 39, item 2):
//! session credentials from a container's (EKS Pod Identity's full URI)
//! or an instance's (IMDSv2) metadata service, or from STS for a web
//! identity (over https), on loopback, each lasting 2 s, and a proxy in
//! front of the S3 test server that refuses a request whose session token
//! has expired (`400 ExpiredToken`, as S3 does). A run
//! of 4.8 s at least (80 ms a request, one at a time) keeps working:
//! `object_store` asks for new credentials before the ones it holds expire
//! (it takes any with less than 5 minutes left as due, and asks at most
//! every 100 ms). The same run on static session credentials fails once
//! they expire: the proxy does hold a client to the expiry.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use super::server::{items, run_with, s3, warpline, S3};
use warpline_testkit::credentials::{expiry_checking_proxy, CredentialServer, Credentials};
use warpline_testkit::sts::StsServer;

/// Objects read, one request each, 80 ms apiece at the proxy: a run of
/// 4.8 s at least, more than twice the credentials' lifetime.
const OBJECTS: usize = 60;
const DELAY: Duration = Duration::from_millis(80);
const LIFETIME: Duration = Duration::from_secs(2);

/// `s3` with `OBJECTS` objects under `in/`, session credentials of its key
/// that last `LIFETIME`, their endpoints, and the proxy: the pipeline
/// (glob -> fetch -> discard) and the binary set to read through it, with
/// no credentials of its own and an empty HOME.
struct Run {
    s3: S3,
    credentials: Arc<Credentials>,
    server: CredentialServer,
    proxy: String,
    work: tempfile::TempDir,
}

impl Run {
    fn new(s3: S3) -> Self {
        for i in 0..OBJECTS {
            s3.put(&format!("in/t{i:03}.tif"), vec![0x49; 1024]);
        }
        let credentials = Credentials::new(&s3.key, &s3.secret, "eks-pod-token", LIFETIME);
        let (server, proxy) = s3.rt.block_on(async {
            let server = CredentialServer::start(Arc::clone(&credentials))
                .await
                .unwrap();
            let c = Arc::clone(&credentials);
            let proxy = expiry_checking_proxy(&s3.endpoint, c, DELAY).await;
            (server, proxy)
        });
        Run {
            s3,
            credentials,
            server,
            proxy,
            work: tempfile::tempdir().unwrap(),
        }
    }

    fn command(&self) -> Command {
        let mut c = warpline();
        c.env("HOME", self.work.path())
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ENDPOINT_URL", &self.proxy);
        c
    }

    fn toml(&self) -> String {
        format!(
            r#"
[pipeline]
flow = ["fetch", "discard"]
[source]
kind = "glob"
pattern = "{}"
[stages.fetch]
kind = "fetch"
retry = {{ attempts = 1 }}
[stages.discard]
kind = "discard"
"#,
            self.s3.url("in/*.tif")
        )
    }

    /// Runs with `command`, expecting `code`: the report and what was said.
    fn run(&self, command: Command, code: i32) -> (serde_json::Value, String) {
        run_with(command, self.work.path(), &self.toml(), code)
    }

    /// Every request let through, none refused, and as many session tokens
    /// used as the run's length needs: a token holds 2 s, the run 4.8 s.
    fn assert_kept_working(&self, report: &serde_json::Value, said: &str) {
        let n = OBJECTS as u64;
        assert_eq!(items(report), [n, n, 0, 0], "{said}");
        let (accepted, expired, invalid) = self.credentials.counts();
        assert_eq!((expired, invalid), (0, 0), "{said}");
        assert!(accepted > n, "the listing and {n} reads: {accepted}");
        let used = self.credentials.used().len();
        assert!(
            used >= 3,
            "{used} session tokens for a run of at least {:?}",
            DELAY * OBJECTS as u32
        );
        for token in self.credentials.used() {
            assert!(!said.contains(&token), "a session token was shown: {said}");
        }
        eprintln!(
            "{} credentials handed out, {used} used, {accepted} requests",
            self.credentials.issued()
        );
    }
}

/// A run on `s3` under the name `name`, its binary given the source of
/// credentials by `configure` (which may start a server, held to the end
/// of the run), keeps working as the credentials expire.
fn kept_working_with<G>(name: &str, configure: impl FnOnce(&Run, &mut Command) -> G) {
    let _serial = super::server::serial();
    let Some(s3) = s3(name) else {
        return;
    };
    let run = Run::new(s3);
    let mut command = run.command();
    let _held = configure(&run, &mut command);
    let (report, said) = run.run(command, 0);
    run.assert_kept_working(&report, &said);
}

impl Run {
    /// A file of the run's holding `text`.
    fn file(&self, name: &str, text: &str) -> std::path::PathBuf {
        let path = self.work.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

#[test]
fn container_credentials_that_expire_during_a_run_are_renewed() {
    kept_working_with("creds-container", |run, command| {
        let token_file = run.file("eks-token", "eks-pod-token");
        command
            .env(
                "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                run.server.container_uri(),
            )
            .env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", token_file);
    });
}

#[test]
fn instance_credentials_that_expire_during_a_run_are_renewed() {
    kept_working_with("creds-instance", |run, command| {
        command.env("AWS_METADATA_ENDPOINT", run.server.metadata_endpoint());
    });
}

/// A web identity (EKS's IAM roles for service accounts): the token file,
/// the role, and STS on loopback over https (`AWS_ENDPOINT_URL_STS`, its
/// authority trusted through `SSL_CERT_FILE`), whose session credentials
/// last 2 s. STS is asked again as they run out, with the token file's
/// token each time.
#[test]
fn web_identity_credentials_that_expire_during_a_run_are_renewed() {
    kept_working_with("creds-web-identity", |run, command| {
        let start = StsServer::start(Arc::clone(&run.credentials));
        let sts = run.s3.rt.block_on(start).unwrap();
        command
            .env(
                "AWS_WEB_IDENTITY_TOKEN_FILE",
                run.file("web-identity-token", "eks-pod-token"),
            )
            .env(
                "AWS_ROLE_ARN",
                "arn:aws:iam::000000000000:role/warpline-test",
            )
            .env("AWS_ENDPOINT_URL_STS", sts.endpoint())
            .env("SSL_CERT_FILE", run.file("sts-authority.pem", sts.ca_pem()));
        sts
    });
}

/// The control: session credentials given once (as `AWS_SESSION_TOKEN`)
/// are refused once they expire, and the items read after that fail,
/// saying the token expired.
#[test]
fn static_session_credentials_fail_once_they_expire() {
    let _serial = super::server::serial();
    let Some(s3) = s3("creds-static") else {
        return;
    };
    let run = Run::new(s3);
    let issued: serde_json::Value = serde_json::from_str(&run.credentials.issue()).unwrap();
    let token = issued["Token"].as_str().unwrap();
    let mut command = run.command();
    command
        .env("AWS_ACCESS_KEY_ID", &run.s3.key)
        .env("AWS_SECRET_ACCESS_KEY", &run.s3.secret)
        .env("AWS_SESSION_TOKEN", token);
    let (report, said) = run.run(command, 3);
    let [total, done, _, failed] = items(&report);
    let (_, expired, _) = run.credentials.counts();
    assert!(
        failed >= 1 && expired >= 1 && done + failed == total,
        "{done} done, {failed} failed, {expired} refused as expired: {said}"
    );
    let message = report["failures"][0]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains("ExpiredToken"), "{message}");
    eprintln!("{done} done, {failed} failed: {message}");
    assert!(!said.contains(token) && !message.contains(token), "{said}");
}
