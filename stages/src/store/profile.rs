//! Credentials and settings from the AWS shared files, which
//! `object_store` does not read: the profile `AWS_PROFILE` (else
//! `AWS_DEFAULT_PROFILE`, else `default`) of `~/.aws/credentials`
//! (`AWS_SHARED_CREDENTIALS_FILE`) and `~/.aws/config` (`AWS_CONFIG_FILE`,
//! sections `[profile NAME]`, or `[default]`).
//!
//! Read: `aws_access_key_id`, `aws_secret_access_key`, `aws_session_token`
//! (the credentials file's first, then the config's), `region` and
//! `endpoint_url` (the config's). The environment's own variables win over
//! the files, as in the AWS tools. Nothing read is ever in a message: an
//! error names the file, the profile and the line, never a value.
//!
//! A hand-written reader of the files' INI dialect (about 40 lines) rather
//! than an INI crate: what AWS accepts differs from the generic INI crates
//! (`[profile NAME]` in one file and `[NAME]` in the other, indented lines
//! that belong to a sub-section such as `s3 =`, comments after `#` or `;`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// What a profile sets. Its `Debug` shows no key, secret or token.
#[derive(Default, PartialEq, Eq)]
pub(super) struct Profile {
    pub(super) access_key_id: Option<String>,
    pub(super) secret_access_key: Option<String>,
    pub(super) session_token: Option<String>,
    pub(super) region: Option<String>,
    pub(super) endpoint_url: Option<String>,
}

impl std::fmt::Debug for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |v: &Option<String>| v.as_ref().map(|_| "***");
        f.debug_struct("Profile")
            .field("access_key_id", &hidden(&self.access_key_id))
            .field("secret_access_key", &hidden(&self.secret_access_key))
            .field("session_token", &hidden(&self.session_token))
            .field("region", &self.region)
            .field("endpoint_url", &self.endpoint_url)
            .finish()
    }
}

/// The profile the environment names, from the files it names (`env`
/// reads a variable). `Ok(None)` when neither file has the profile and it
/// was not named; an error when it was named and is in neither, or a file
/// cannot be read.
pub(super) fn load(env: impl Fn(&str) -> Option<String>) -> Result<Option<Profile>, String> {
    let named = env("AWS_PROFILE").or_else(|| env("AWS_DEFAULT_PROFILE"));
    let name = named.clone().unwrap_or_else(|| "default".to_owned());
    let home = env("HOME").map(PathBuf::from);
    let file = |var: &str, default: &str| {
        env(var)
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".aws").join(default)))
    };
    let credentials = file("AWS_SHARED_CREDENTIALS_FILE", "credentials");
    let config = file("AWS_CONFIG_FILE", "config");
    let from_credentials = match &credentials {
        Some(path) => section(path, &name)?,
        None => None,
    };
    let config_section = if name == "default" {
        "default".to_owned()
    } else {
        format!("profile {name}")
    };
    let from_config = match &config {
        Some(path) => section(path, &config_section)?,
        None => None,
    };
    if from_credentials.is_none() && from_config.is_none() {
        return match named {
            None => Ok(None),
            Some(_) => Err(format!(
                "AWS profile {name:?} is in neither {} nor {}",
                shown(credentials.as_deref()),
                shown(config.as_deref())
            )),
        };
    }
    let (c, f) = (
        from_credentials.unwrap_or_default(),
        from_config.unwrap_or_default(),
    );
    let get = |key: &str| c.get(key).or_else(|| f.get(key)).cloned();
    Ok(Some(Profile {
        access_key_id: get("aws_access_key_id"),
        secret_access_key: get("aws_secret_access_key"),
        session_token: get("aws_session_token"),
        region: f.get("region").cloned(),
        endpoint_url: f.get("endpoint_url").cloned(),
    }))
}

fn shown(path: Option<&Path>) -> String {
    path.map_or("(no HOME)".to_owned(), |p| p.display().to_string())
}

/// The keys of `[wanted]` in the INI file at `path` (`None` when the file
/// or the section is not there).
fn section(path: &Path, wanted: &str) -> Result<Option<HashMap<String, String>>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let mut found: Option<HashMap<String, String>> = None;
    let mut inside = false;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with(['#', ';']) {
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix('[') {
            let Some(name) = rest.strip_suffix(']') else {
                return Err(format!(
                    "{}:{}: a section without `]`",
                    path.display(),
                    n + 1
                ));
            };
            inside = name.split_whitespace().collect::<Vec<_>>().join(" ") == wanted;
            if inside {
                found.get_or_insert_with(HashMap::new);
            }
            continue;
        }
        // Indented lines belong to a sub-section (`s3 =` then `  key = v`).
        if !inside || line.starts_with([' ', '\t']) {
            continue;
        }
        let Some((key, value)) = trimmed.split_once('=') else {
            return Err(format!(
                "{}:{}: not `key = value` in profile {wanted:?}",
                path.display(),
                n + 1
            ));
        };
        if let Some(map) = found.as_mut() {
            map.insert(key.trim().to_ascii_lowercase(), value.trim().to_owned());
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, String)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn a_profile_is_read_from_both_files() {
        let home = tempfile::tempdir().unwrap();
        let aws = home.path().join(".aws");
        std::fs::create_dir_all(&aws).unwrap();
        std::fs::write(
            aws.join("credentials"),
            "[default]\naws_access_key_id = AKDEFAULT\naws_secret_access_key = s-default\n\n\
             # a comment\n[work]\naws_access_key_id=AKWORK\naws_secret_access_key = s/work=\n",
        )
        .unwrap();
        std::fs::write(
            aws.join("config"),
            "[default]\nregion = eu-west-1\n[profile  work]\nregion = us-west-2\n\
             endpoint_url = http://127.0.0.1:9000\ns3 =\n  addressing_style = path\n\
             aws_session_token = t-work\n",
        )
        .unwrap();
        let home_var = ("HOME", home.path().display().to_string());
        let default = load(env(std::slice::from_ref(&home_var))).unwrap().unwrap();
        assert_eq!(default.access_key_id.as_deref(), Some("AKDEFAULT"));
        assert_eq!(default.region.as_deref(), Some("eu-west-1"));
        let work = load(env(&[home_var.clone(), ("AWS_PROFILE", "work".into())]))
            .unwrap()
            .unwrap();
        assert_eq!(work.access_key_id.as_deref(), Some("AKWORK"));
        assert_eq!(work.secret_access_key.as_deref(), Some("s/work="));
        assert_eq!(work.session_token.as_deref(), Some("t-work"));
        assert_eq!(work.region.as_deref(), Some("us-west-2"));
        assert_eq!(work.endpoint_url.as_deref(), Some("http://127.0.0.1:9000"));
        // A profile named that is nowhere is an error naming both files.
        let e = load(env(&[home_var.clone(), ("AWS_PROFILE", "nope".into())])).unwrap_err();
        assert!(
            e.contains("\"nope\" is in neither") && e.contains("credentials"),
            "{e}"
        );
        // No files: nothing, no error.
        let empty = tempfile::tempdir().unwrap();
        assert!(load(env(&[("HOME", empty.path().display().to_string())]))
            .unwrap()
            .is_none());
    }

    #[test]
    fn a_bad_line_is_named_without_its_value() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("credentials");
        std::fs::write(&file, "[default]\naws_secret_access_key qqv-secret\n").unwrap();
        let vars = [("AWS_SHARED_CREDENTIALS_FILE", file.display().to_string())];
        let e = load(env(&vars)).unwrap_err();
        assert!(e.contains("credentials:2"), "{e}");
        assert!(!e.contains("qqv-secret"), "{e}");
    }
}
