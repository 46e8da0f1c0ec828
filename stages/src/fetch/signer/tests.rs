use std::sync::atomic::AtomicBool;
use std::time::{Duration, SystemTime};

use super::*;

fn token(query: &str) -> Token {
    Token {
        query: query.to_owned(),
        names: query
            .split('&')
            .map(|p| p.split_once('=').map_or(p, |(n, _)| n).to_owned())
            .collect(),
        expiry: SystemTime::UNIX_EPOCH,
        renew_at: SystemTime::UNIX_EPOCH,
        refused: AtomicBool::new(false),
    }
}

#[test]
fn a_url_is_signed_with_the_token_as_its_query() {
    let t = token("st=a&se=b&sig=x%2By%3D");
    assert_eq!(
        sign("https://h.blob.core.windows.net/c/a.tif", &t),
        "https://h.blob.core.windows.net/c/a.tif?st=a&se=b&sig=x%2By%3D"
    );
    // Its own parameters kept as written, the token's replaced (an old
    // signature of its own too), the fragment kept.
    assert_eq!(
        sign("https://h/c/a.tif?v=1&se=old&sig=old%2F&x=a%20b#frag", &t),
        "https://h/c/a.tif?v=1&x=a%20b&st=a&se=b&sig=x%2By%3D#frag"
    );
    assert_eq!(
        sign("https://h/a.tif?", &t),
        "https://h/a.tif?st=a&se=b&sig=x%2By%3D"
    );
}

#[test]
fn a_refusal_that_says_the_signature_expired_is_told_from_others() {
    let azure =
        "<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>AuthenticationFailed</Code>\
        <Message>Server failed to authenticate the request.</Message><AuthenticationErrorDetail>\
        Signature not valid in the specified time frame: Start [Wed, 01 May 2024 09:55:00 GMT] - \
        Expiry [Wed, 01 May 2024 10:00:00 GMT] - Current [Wed, 01 May 2024 10:00:05 GMT]\
        </AuthenticationErrorDetail></Error>";
    assert!(says_expired(azure));
    assert!(says_expired(
        "<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>"
    ));
    assert!(!says_expired(
        "<Error><Code>AuthenticationFailed</Code><AuthenticationErrorDetail>Signature did not \
         match.</AuthenticationErrorDetail></Error>"
    ));
    assert!(!says_expired(""));
}

fn signer(prefixes: &[&str], clock: Clock) -> Signer {
    signer_of("https://pc.example/api/sas/v1/token/c", prefixes, clock)
}

fn signer_of(url: &str, prefixes: &[&str], clock: Clock) -> Signer {
    let mut toml = format!("signer = {{ url = {url:?}");
    if !prefixes.is_empty() {
        toml.push_str(&format!(", prefixes = {prefixes:?}"));
    }
    toml.push_str(" }\n");
    let s = Settings::from_toml("stages.fetch", &toml).unwrap();
    #[derive(Deserialize)]
    struct Table {
        signer: SignerSettings,
    }
    let t: Table = s.parse().unwrap();
    let mut problems = Vec::new();
    Signer::new(&s, t.signer, reqwest::Client::new(), clock, &mut problems).unwrap()
}

#[test]
fn only_urls_under_the_prefixes_are_signed() {
    let all = signer(&[], system_clock());
    assert!(all.signs("https://a.example/x.tif"));
    assert!(all.signs("http://b.example/x.tif"));
    assert!(!all.signs("s3://bucket/x.tif"));
    assert!(!all.signs("/data/x.tif"));
    let some = signer(&["https://acct.blob.core.windows.net/c/"], system_clock());
    assert!(some.signs("https://acct.blob.core.windows.net/c/x.tif"));
    assert!(!some.signs("https://acct.blob.core.windows.net/other/x.tif"));
    assert!(!some.signs("https://elsewhere.example/c/x.tif"));
}

#[test]
fn an_answer_is_read_without_ever_being_quoted() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_714_557_600); // 2024-05-01T10:00:00Z
    let s = signer(&[], Arc::new(move || now));
    let t = s
        .read_answer(br#"{"msft:expiry":"2024-05-01T11:00:00Z","token":"st=a&se=b&sig=SECRET"}"#)
        .unwrap();
    assert_eq!(t.query, "st=a&se=b&sig=SECRET");
    assert_eq!(t.names, ["st", "se", "sig"]);
    assert_eq!(t.expiry, now + Duration::from_secs(3600));
    // An hour's token: renewed a minute before it expires (`refresh_before`).
    assert_eq!(t.renew_at, now + Duration::from_secs(3540));
    assert!(!format!("{t:?}").contains("SECRET"), "{t:?}");
    // A 20 s token: a tenth of its lifetime before.
    let t = s
        .read_answer(br#"{"msft:expiry":1714557620,"token":"?sig=SECRET"}"#)
        .unwrap();
    assert_eq!(t.query, "sig=SECRET", "a leading ? is not the token's");
    assert_eq!(t.renew_at, now + Duration::from_secs(18));
    for (answer, says) in [
        (&br#"{"token":"sig=SECRET"}"#[..], "has no `msft:expiry`"),
        (
            br#"{"msft:expiry":"tomorrow","token":"sig=SECRET"}"#,
            "not an RFC 3339 time",
        ),
        (
            br#"{"msft:expiry":"2024-05-01T11:00:00Z","tok":"sig=SECRET"}"#,
            "has no `token`",
        ),
        (
            br#"{"msft:expiry":"2024-05-01T11:00:00Z","token":""}"#,
            "has no `token`",
        ),
        (b"sig=SECRET", "not JSON"),
    ] {
        let e = s.read_answer(answer).unwrap_err();
        assert!(e.contains(says) && !e.contains("SECRET"), "{e}");
    }
}

#[test]
fn every_mistake_in_the_table_is_named_with_its_key() {
    let s = Settings::from_toml(
        "stages.fetch",
        "signer = { url = \"ftp://x/y\", prefixes = [\"s3://b/\", \"https://ok.example/\"], \
         token_field = \" \" }\n",
    )
    .unwrap();
    #[derive(Deserialize)]
    struct Table {
        signer: SignerSettings,
    }
    let t: Table = s.parse().unwrap();
    let mut problems = Vec::new();
    assert!(Signer::new(
        &s,
        t.signer,
        reqwest::Client::new(),
        system_clock(),
        &mut problems
    )
    .is_none());
    let said: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
    assert_eq!(said.len(), 3, "{said:#?}");
    assert!(
        said[0].contains("stages.fetch.signer.url") && said[0].contains("ftp"),
        "{said:#?}"
    );
    assert!(
        said[1].contains("stages.fetch.signer.prefixes") && said[1].contains("s3://b/"),
        "{said:#?}"
    );
    assert!(
        said[2].contains("stages.fetch.signer.token_field"),
        "{said:#?}"
    );
}

/// A token about to expire is renewed in the background: the caller that
/// notices goes on with the token that still holds (inline renewal would
/// hand it the new one), one request for the next goes to the endpoint,
/// and the callers after it get the new token. Before that point, no
/// request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_about_to_expire_is_renewed_in_the_background() {
    use warpline_testkit::{Clock as SasClock, Sas, TokenServer};
    let clock = SasClock::stopped(SystemTime::UNIX_EPOCH + Duration::from_secs(1_714_557_600));
    let sas = Sas::new(clock.clone(), Duration::from_secs(20), Duration::ZERO);
    let tokens = TokenServer::start(Arc::clone(&sas), None).await.unwrap();
    let now = clock.clone();
    let s = Arc::new(signer_of(
        &tokens.url("c"),
        &[],
        Arc::new(move || now.now()),
    ));
    let first = s.token().await.unwrap();
    assert_eq!(tokens.requests(), 1);
    // 20 s tokens are renewed from 18 s on (a tenth of their lifetime).
    clock.advance(Duration::from_secs(17));
    assert_eq!(s.token().await.unwrap().query, first.query);
    assert_eq!(tokens.requests(), 1, "a fresh token is not renewed");
    clock.advance(Duration::from_millis(1500));
    let noticed = s.token().await.unwrap();
    assert_eq!(
        noticed.query, first.query,
        "the caller goes on with the token that holds"
    );
    // The renewal's answer: polled, up to a generous bound.
    let renewed = async {
        loop {
            let t = s.token().await.unwrap();
            if t.query != first.query {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let next = tokio::time::timeout(Duration::from_secs(30), renewed)
        .await
        .expect("the token was renewed in the background");
    assert_ne!(next.query, first.query);
    assert_eq!(tokens.requests(), 2, "one request for the next token");
}
