//! Hiding secrets in what a run shows: the user names and passwords of
//! URLs, and the values of secret query parameters, replaced by `***`.
//!
//! - [`redact`] hides them in one source (a URL or a path);
//! - [`redact_text`] hides them in every URL quoted in a longer message
//!   (`scheme://...`, up to the next blank or quote), and hides the key
//!   material of a credentials file quoted in it: a PEM private key, and
//!   the values of the JSON fields of Google's service account and
//!   authorized user files that are secrets ([`SECRET_FIELDS`]). A
//!   client reports a bad `GOOGLE_SERVICE_ACCOUNT` path by quoting it, and
//!   users do set it to the key's JSON instead of the file's path.
//!
//! Both work on the text: a URL that does not parse (a port out of range, a
//! stray character) is redacted too. A URL that parses has its user
//! information removed by the URL parser; one that does not loses everything
//! between `scheme://` and the last `@` before the first `/`. In either case
//! the value of every secret parameter ([`SECRET_PARAMS`], compared
//! case-insensitively after percent-decoding) is hidden, in the query and in
//! the fragment (`#access_token=...`).
//!
//! A leaf module: it uses nothing else of the engine, so any part of it (and
//! of the stages) can redact before formatting.

/// Query parameters whose values are secrets (compared case-insensitively,
/// after percent-decoding the name).
///
/// Generic tokens, keys and passwords; Azure API Management's
/// `subscription-key`; S3 (`X-Amz-*`, the V2
/// `AWSAccessKeyId`/`Signature`) and CloudFront (`Policy`, `Key-Pair-Id`)
/// signed URLs; GCS signed URLs (`X-Goog-*`, the V2 `GoogleAccessId`); and
/// every field of an Azure SAS (`sig` is its secret; the others say what it
/// grants, to whom and until when, and are hidden with it).
pub const SECRET_PARAMS: &[&str] = &[
    // Generic.
    "token",
    "access_token",
    "refresh_token",
    "id_token",
    "auth",
    "authorization",
    "api_key",
    "api-key",
    "apikey",
    "key",
    "client_secret",
    "password",
    "passwd",
    "pwd",
    "secret",
    "signature",
    "credential",
    "sig",
    // Azure API Management's key (Planetary Computer's token endpoint
    // takes it in the query, or as a header).
    "subscription-key",
    // S3 and CloudFront.
    "x-amz-signature",
    "x-amz-credential",
    "x-amz-security-token",
    "awsaccesskeyid",
    "policy",
    "key-pair-id",
    // GCS.
    "x-goog-signature",
    "x-goog-credential",
    "x-goog-security-token",
    "googleaccessid",
    // Azure SAS.
    "se",
    "st",
    "sp",
    "sv",
    "sr",
    "ss",
    "srt",
    "spr",
    "sip",
    "si",
    "sdd",
    "skoid",
    "sktid",
    "skt",
    "ske",
    "sks",
    "skv",
    "saoid",
    "suoid",
    "scid",
];

/// JSON fields whose values are secrets: those of Google's service account
/// key files (`private_key`, `private_key_id`) and of gcloud's authorized
/// user files (`client_secret`, `refresh_token`), and OAuth tokens.
pub const SECRET_FIELDS: &[&str] = &[
    "private_key",
    "private_key_id",
    "client_secret",
    "refresh_token",
    "access_token",
    "id_token",
];

/// Whether the query parameter `name` (as written, percent-encoded or not)
/// names a secret.
pub fn is_secret_param(name: &str) -> bool {
    let decoded = url::form_urlencoded::parse(name.as_bytes())
        .next()
        .map_or(std::borrow::Cow::Borrowed(name), |(k, _)| k);
    SECRET_PARAMS
        .iter()
        .any(|s| decoded.trim().eq_ignore_ascii_case(s))
}

/// A source as it may appear in logs, reports and failure records: user
/// names, passwords and secret query parameters of URLs replaced by `***`.
/// The source comes back unchanged when it holds none.
pub fn redact(source: &str) -> String {
    let without_user = match url::Url::parse(source) {
        Ok(url) => hide_parsed_userinfo(url),
        Err(_) => hide_userinfo(source),
    };
    let text = without_user.as_deref().unwrap_or(source);
    match hide_params(text) {
        Some(hidden) => hidden,
        None => text.to_owned(),
    }
}

/// `message` with every URL in it (`scheme://` up to the next blank, quote
/// or angle bracket) passed through [`redact`].
pub fn redact_text(message: &str) -> String {
    let without_keys = hide_key_material(message);
    let message = without_keys.as_deref().unwrap_or(message);
    if !message.contains("://") {
        return message.to_owned();
    }
    let mut out = message.to_owned();
    let mut from = 0;
    while let Some(found) = out[from..].find("://") {
        let sep = from + found;
        let start = from + scheme_start(&out[from..sep]);
        if start == sep {
            from = sep + 3;
            continue;
        }
        let end = out[sep + 3..]
            .find(ends_url)
            .map_or(out.len(), |e| sep + 3 + e);
        let hidden = redact(&out[start..end]);
        // Go on after this URL's `scheme://`, not after its end: a URL
        // quoted inside it (`?next=http://user:pw@...`) is redacted too.
        let next = hidden.find("://").map_or(hidden.len(), |i| i + 3);
        out.replace_range(start..end, &hidden);
        from = start + next;
    }
    out
}

/// `text` with every PEM private key (`-----BEGIN ... PRIVATE KEY-----` to
/// its `-----END ...-----`, or to the end of the text) and the value of
/// every [`SECRET_FIELDS`] field replaced by `***`, if it holds any.
fn hide_key_material(text: &str) -> Option<String> {
    let pem = hide_pem_keys(text);
    let text = pem.as_deref().unwrap_or(text);
    hide_secret_fields(text).or(pem)
}

fn hide_pem_keys(text: &str) -> Option<String> {
    const BEGIN: &str = "-----BEGIN ";
    const END: &str = "-----END ";
    const DASHES: &str = "-----";
    let mut out = String::new();
    let mut rest = text;
    let mut changed = false;
    while let Some(at) = rest.find(BEGIN) {
        let after = &rest[at + BEGIN.len()..];
        let label_end = after.find(DASHES).unwrap_or(after.len());
        if !after[..label_end].ends_with("PRIVATE KEY") {
            out.push_str(&rest[..at + BEGIN.len()]);
            rest = after;
            continue;
        }
        out.push_str(&rest[..at]);
        out.push_str("***");
        changed = true;
        // The block ends after the END line's closing dashes.
        rest = match after.find(END) {
            Some(end) => {
                let tail = &after[end + END.len()..];
                tail.find(DASHES).map_or("", |d| &tail[d + DASHES.len()..])
            }
            None => "",
        };
    }
    out.push_str(rest);
    changed.then_some(out)
}

/// The values of `"FIELD": "VALUE"` pairs for secret fields hidden, in
/// JSON as written and as quoted once more (`\"FIELD\": \"VALUE\"`).
fn hide_secret_fields(text: &str) -> Option<String> {
    let mut out = String::new();
    let mut from = 0;
    let mut changed = false;
    while let Some(name_end) = next_secret_field(text, from) {
        let after = &text[name_end..];
        // `"`, `\`, blanks, one `:`, then the value's opening quote.
        let sep_len = after
            .find(|c: char| !(c == '"' || c == '\\' || c == ':' || c.is_whitespace()))
            .unwrap_or(after.len());
        let sep = &after[..sep_len];
        if !sep.contains(':') || !sep.trim_end_matches('\\').ends_with('"') {
            out.push_str(&text[from..name_end]);
            from = name_end;
            continue;
        }
        let value = &after[sep_len..];
        let len = value.find('"').unwrap_or(value.len());
        let len = if value[..len].ends_with('\\') {
            len - 1
        } else {
            len
        };
        out.push_str(&text[from..name_end + sep_len]);
        if len > 0 {
            out.push_str("***");
            changed = true;
        }
        from = name_end + sep_len + len;
    }
    if !changed {
        return None;
    }
    out.push_str(&text[from..]);
    Some(out)
}

/// The end of the next quoted secret field name at or after `from`:
/// `"NAME"`, or `\"NAME\"` as quoted again, never the end of another
/// name (`"my_private_key"`).
fn next_secret_field(text: &str, from: usize) -> Option<usize> {
    SECRET_FIELDS
        .iter()
        .filter_map(|f| {
            let mut at = from;
            while let Some(i) = text[at..].find(f) {
                let (start, end) = (at + i, at + i + f.len());
                let after = &text[end..];
                if text[..start].ends_with('"')
                    && (after.starts_with('"') || after.starts_with("\\\""))
                {
                    return Some(end);
                }
                at = end;
            }
            None
        })
        .min()
}

/// Characters that end a URL quoted in a message.
fn ends_url(c: char) -> bool {
    c.is_whitespace() || c.is_control() || matches!(c, '"' | '\'' | '<' | '>' | '`')
}

/// Where the scheme that `before` ends with starts (`before.len()` if it
/// does not end with one): letters, digits, `+`, `-`, `.`, from a letter.
fn scheme_start(before: &str) -> usize {
    let scheme_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.');
    let run = before
        .char_indices()
        .rev()
        .take_while(|&(_, c)| scheme_char(c))
        .last()
        .map_or(before.len(), |(i, _)| i);
    // All scheme characters are ASCII, so every index past `run` is a
    // character boundary.
    before[run..]
        .find(|c: char| c.is_ascii_alphabetic())
        .map_or(before.len(), |i| run + i)
}

/// The URL without its user name and password, if it had either.
fn hide_parsed_userinfo(mut url: url::Url) -> Option<String> {
    if url.username().is_empty() && url.password().is_none() {
        return None;
    }
    // Setting them fails only for URLs that cannot have a user name (no
    // host, or `file:`), and this one has one.
    let _ = url.set_username("***");
    let _ = url.set_password(None);
    Some(url.into())
}

/// For text that does not parse as a URL: everything between `scheme://`
/// and the last `@` before the first `/` hidden, if there is such an `@`.
fn hide_userinfo(text: &str) -> Option<String> {
    let sep = text.find("://")?;
    if sep == 0 || scheme_start(&text[..sep]) != 0 {
        return None;
    }
    let rest = &text[sep + 3..];
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    let at = authority.rfind('@')?;
    Some(format!("{}***{}", &text[..sep + 3], &rest[at..]))
}

/// The values of secret parameters after the first `?` or `#` hidden, if
/// there are any. A name starts after `?`, `&`, `#`, `;` or `=` (so that
/// `;`-separated and nested pairs are caught too); a secret value runs to
/// the next `&` or `#`.
fn hide_params(text: &str) -> Option<String> {
    let start = text.find(['?', '#'])? + 1;
    let mut out = String::with_capacity(text.len());
    out.push_str(&text[..start]);
    let mut rest = &text[start..];
    let mut changed = false;
    while !rest.is_empty() {
        let end = rest.find(['=', '&', '#', '?', ';']).unwrap_or(rest.len());
        let name = &rest[..end];
        let value = rest[end..].strip_prefix('=');
        match value {
            Some(value) if is_secret_param(name) => {
                let len = value.find(['&', '#']).unwrap_or(value.len());
                out.push_str(name);
                out.push('=');
                if len > 0 {
                    out.push_str("***");
                    changed = true;
                }
                rest = &value[len..];
            }
            _ => {
                // The delimiters are ASCII: `end + 1` is a boundary.
                let take = (end + 1).min(rest.len());
                out.push_str(&rest[..take]);
                rest = &rest[take..];
            }
        }
    }
    changed.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The secret parameters the fault run and the brief named, as written
    /// in signed URLs.
    const NAMED: &[&str] = &[
        "token",
        "X-Goog-Signature",
        "X-Goog-Credential",
        "refresh_token",
        "sig",
        "se",
        "sp",
        "sv",
        "X-Amz-Security-Token",
        "X-Amz-Credential",
        "X-Amz-Signature",
        "AWSAccessKeyId",
        "Signature",
        "Policy",
        "Key-Pair-Id",
        "subscription-key",
        "api_key",
        "access_token",
        "password",
    ];

    #[test]
    fn credentials_and_secret_parameters_are_hidden() {
        assert_eq!(
            redact("https://user:pa55@example.com/a.tif?x=1&token=abc"),
            "https://***@example.com/a.tif?x=1&token=***"
        );
        assert_eq!(
            redact("https://example.com/a.tif"),
            "https://example.com/a.tif"
        );
        assert_eq!(redact("/data/a.tif"), "/data/a.tif");
        assert!(!redact("https://u:p@h/x").contains(":p@"));
    }

    #[test]
    fn every_named_parameter_is_hidden_in_any_case() {
        for name in NAMED {
            for written in [
                name.to_string(),
                name.to_ascii_lowercase(),
                name.to_ascii_uppercase(),
            ] {
                for base in [
                    "https://h.example/b/a.tif",
                    "http://u:p@127.0.0.1:99999/a.tif",
                ] {
                    let url = format!("{base}?x=1&{written}=S3CR3T&y=2");
                    let shown = redact(&url);
                    assert!(!shown.contains("S3CR3T"), "{url} -> {shown}");
                    assert!(shown.contains(&format!("{written}=***")), "{shown}");
                    assert!(shown.contains("x=1") && shown.contains("y=2"), "{shown}");
                }
            }
        }
    }

    #[test]
    fn signed_urls_keep_their_harmless_parameters() {
        let s3 = "https://b.s3.amazonaws.com/k.tif?X-Amz-Algorithm=AWS4-HMAC-SHA256\
                  &X-Amz-Credential=AKIA%2F20260101%2Fus-east-1%2Fs3%2Faws4_request\
                  &X-Amz-Date=20260101T000000Z&X-Amz-Expires=900&X-Amz-SignedHeaders=host\
                  &X-Amz-Signature=deadbeef";
        assert_eq!(
            redact(s3),
            "https://b.s3.amazonaws.com/k.tif?X-Amz-Algorithm=AWS4-HMAC-SHA256\
             &X-Amz-Credential=***&X-Amz-Date=20260101T000000Z&X-Amz-Expires=900\
             &X-Amz-SignedHeaders=host&X-Amz-Signature=***"
        );
        let sas = "https://a.blob.core.windows.net/c/t.tif?sv=2022-11-02&ss=b&srt=o\
                   &sp=r&se=2026-01-01T00:00:00Z&st=2025-01-01&spr=https&sig=abc%2Bdef%3D";
        let shown = redact(sas);
        assert!(!shown.contains("abc") && !shown.contains("2022") && !shown.contains("sp=r"));
        assert!(shown.starts_with("https://a.blob.core.windows.net/c/t.tif?sv=***"));
        let gcs = "https://storage.googleapis.com/b/o.tif?X-Goog-Algorithm=GOOG4-RSA-SHA256\
                   &X-Goog-Credential=sa%40p.iam.gserviceaccount.com&X-Goog-Signature=0123ab";
        let shown = redact(gcs);
        assert!(!shown.contains("gserviceaccount") && !shown.contains("0123ab"));
        assert!(shown.contains("X-Goog-Algorithm=GOOG4-RSA-SHA256"));
    }

    #[test]
    fn a_url_that_does_not_parse_is_redacted_too() {
        let bad = "http://user:hunter2@127.0.0.1:99999/x.tif?token=S&X-Goog-Signature=abc";
        assert!(url::Url::parse(bad).is_err());
        assert_eq!(
            redact(bad),
            "http://***@127.0.0.1:99999/x.tif?token=***&X-Goog-Signature=***"
        );
        // A password holding `@` or `:`: up to the last `@` before `/`.
        assert_eq!(
            redact("https://u:p@ss:w:rd@h:-1/a.tif"),
            "https://***@h:-1/a.tif"
        );
        // No path at all.
        assert_eq!(redact("http://u:pw@h:99999"), "http://***@h:99999");
        // An `@` in the path is not user information.
        assert_eq!(redact("http://h:99999/a@2x.tif"), "http://h:99999/a@2x.tif");
        // Names percent-encoded, or after `;`, a second `?`, or in the fragment.
        assert_eq!(
            redact("http://h:99999/a?X%2DAmz%2DSignature=1&a=2;sig=3?token=4#access_token=5&b=6"),
            "http://h:99999/a?X%2DAmz%2DSignature=***&a=2;sig=***#access_token=***&b=6"
        );
        // An empty value stays empty; nothing else changes.
        assert_eq!(redact("h:99999/?token=&a=b"), "h:99999/?token=&a=b");
    }

    #[test]
    fn redacting_twice_changes_nothing_more() {
        for s in [
            "http://user:hunter2@127.0.0.1:99999/x.tif?token=S&X-Goog-Signature=abc",
            "https://user:pa55@example.com/a.tif?x=1&token=abc#sig=1",
            "malformed URL \"http://u:p@h:99999/a?sig=1\": invalid port number",
        ] {
            let once = redact_text(s);
            assert_eq!(redact_text(&once), once);
            assert_eq!(redact(&redact(s)), redact(s));
        }
    }

    #[test]
    fn urls_quoted_in_a_message_are_redacted() {
        let message = "malformed URL \"http://user:hunter2@127.0.0.1:99999/x.tif?token=S\": \
                       invalid port number; see s3://AK:SK@bucket/k.tif?x=1 and \
                       gs://b/o.tif?X-Goog-Signature=abc (then az://acct/c/b?sig=q)";
        let shown = redact_text(message);
        for secret in ["hunter2", "token=S", "SK", "abc", "sig=q"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.starts_with(
            "malformed URL \"http://***@127.0.0.1:99999/x.tif?token=***\": invalid port number;"
        ));
        assert!(
            shown.contains("gs://b/o.tif?X-Goog-Signature=***"),
            "{shown}"
        );
        assert!(shown.ends_with("(then az://acct/c/b?sig=***"), "{shown}");
        // A URL inside a URL, and a message with no URL at all.
        assert_eq!(
            redact_text("go to https://p.example/?next=http://u:pw@h.example/x.tif now"),
            "go to https://p.example/?next=http://***@h.example/x.tif now"
        );
        assert_eq!(redact_text("no URL: a://"), "no URL: a://");
        assert_eq!(redact_text("://u:p@h ://"), "://u:p@h ://");
        assert_eq!(redact_text("HTTP 404 Not Found"), "HTTP 404 Not Found");
    }

    /// A service account key given where its path was expected is quoted
    /// by the client's error: its private key and key id are hidden, as
    /// are an authorized user's secret and refresh token, in JSON as
    /// written and quoted again; what says which account it is stays.
    #[test]
    fn key_material_quoted_in_a_message_is_hidden() {
        let key = r#"{"type": "service_account", "private_key_id": "qqvkeyid1",
            "private_key": "-----BEGIN PRIVATE KEY-----\nqqvPEM\n-----END PRIVATE KEY-----\n",
            "client_email": "w@p.iam.gserviceaccount.com"}"#;
        let message = format!("Unable to open service account file from {key}: not found");
        let shown = redact_text(&message);
        assert!(!shown.contains("qqv"), "{shown}");
        assert!(shown.contains("\"private_key\": \"***\""), "{shown}");
        assert!(shown.contains("w@p.iam.gserviceaccount.com"), "{shown}");
        assert!(shown.ends_with(": not found"), "{shown}");
        let quoted = format!(
            "{:?}",
            r#"{"client_secret":"qqvcs","refresh_token": "qqvrt"}"#
        );
        let shown = redact_text(&format!("bad file {quoted}"));
        assert!(!shown.contains("qqv"), "{shown}");
        // A PEM key alone, and one cut short.
        let pem = "key -----BEGIN RSA PRIVATE KEY-----\nqqv\n-----END RSA PRIVATE KEY----- ok";
        assert_eq!(redact_text(pem), "key *** ok");
        assert_eq!(redact_text("x -----BEGIN PRIVATE KEY-----\nqqv"), "x ***");
        // Not a secret: a certificate, another field of the same name's end.
        let cert = "-----BEGIN CERTIFICATE-----\nMII\n-----END CERTIFICATE-----";
        assert_eq!(redact_text(cert), cert);
        let other = r#"{"my_private_key": "v", "private_key_path": "/k.json"}"#;
        assert_eq!(redact_text(other), other);
        assert_eq!(redact_text(&redact_text(&message)), redact_text(&message));
    }

    #[test]
    fn well_formed_urls_without_secrets_are_left_as_written() {
        for s in [
            "https://h.example/tiles/12/a.tif?style=x&sign=1",
            "file:///data/a@b.tif",
            "/data/a@b.tif",
            "https://h.example/a.tif?q=a@b.c",
        ] {
            assert_eq!(redact(s), s);
            assert_eq!(redact_text(s), s);
        }
    }

    proptest::proptest! {
        #[test]
        fn no_secret_survives(
            user in "[a-zA-Z0-9._~-]{0,6}",
            password in "[a-zA-Z0-9._~!$*+,;=:@%-]{1,12}",
            port in proptest::sample::select(vec!["", ":8080", ":99999", ":x"]),
            name in proptest::sample::select(NAMED.to_vec()),
            upper in proptest::bool::ANY,
            value in "[a-zA-Z0-9._~%+/-]{0,10}",
            fragment in proptest::bool::ANY,
        ) {
            let name = if upper { name.to_ascii_uppercase() } else { name.to_owned() };
            let sep = if fragment { '#' } else { '?' };
            let url = format!(
                "https://{user}:Pw{password}@h.example{port}/a.tif{sep}k=v&{name}=Qz{value}&z=1"
            );
            for shown in [redact(&url), redact_text(&format!("failed: \"{url}\" (x)"))] {
                proptest::prop_assert!(!shown.contains("Pw"), "{} -> {}", url, shown);
                proptest::prop_assert!(!shown.contains("Qz"), "{} -> {}", url, shown);
                proptest::prop_assert!(shown.contains("z=1"), "{} -> {}", url, shown);
            }
        }
    }
}
