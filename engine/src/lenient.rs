//! Reading one table of a pipeline file with every mistake said at once.
//!
//! serde stops at the first error, so a table with two unknown keys and a
//! bad value would be reported one mistake per `validate`. Here the table
//! is read again and again, each time without the key the last error
//! named (an unknown key, a value of the wrong type, a value its setting
//! refuses), until what is left reads: each key taken out is one problem
//! at its key path. What is left is the table's value, so that checks made
//! on it never see a key that was wrong; how much was taken out tells the
//! caller whether such checks would be sound ([`LeftOut`]).

use config::{ConfigError, Value, ValueKind};

use crate::problem::{problem_from, Problem};

/// What a lenient read had to take out of a table before the rest read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum LeftOut {
    /// Nothing: the table read as it is.
    Nothing,
    /// Values that read as their type but not as their setting (a word no
    /// setting takes, a duration without a unit): the rest is the table
    /// without those keys, as if they had not been written.
    Values,
    /// Keys the table does not have, or values of the wrong type: what the
    /// writer meant is not known, so checks on the rest may mislead.
    Keys,
}

/// A table read leniently: see the module's documentation.
#[derive(Debug)]
pub(crate) struct Lenient<T> {
    /// What the table reads as without the keys taken out; `None` when it
    /// does not read even then (a key it needs is missing, or an error
    /// that names no key).
    pub(crate) value: Option<T>,
    /// The worst that was taken out.
    pub(crate) left_out: LeftOut,
}

/// Which key an error blames, and how.
enum Culprit {
    /// A key the table does not have (its dotted path within the table).
    Unknown(String),
    /// A known key whose value is of the wrong type.
    Type(String),
    /// A known key whose value its setting's own conversion refused.
    Setting(String),
    /// A key the table needs and does not have.
    Missing(String),
    /// Nothing to take out.
    Whole,
}

/// Reads `value` into `T`, adding a problem at its key path for every key
/// taken out on the way (see the module's documentation). `also` are keys
/// of the same table that the engine reads itself, for the did-you-mean of
/// an unknown key. A key the table needs that is missing is a problem too,
/// unless it was taken out for its value (that one was said).
pub(crate) fn read_all<T: serde::de::DeserializeOwned>(
    path: &str,
    mut value: Value,
    also: &[&str],
    problems: &mut Vec<Problem>,
) -> Lenient<T> {
    let mut left_out = LeftOut::Nothing;
    let mut taken: Vec<String> = Vec::new();
    // Each turn takes one key out of a finite table, or returns.
    loop {
        let error = match value.clone().try_deserialize::<T>() {
            Ok(t) => {
                return Lenient {
                    value: Some(t),
                    left_out,
                }
            }
            Err(e) => e,
        };
        let (key, kind) = match culprit(&error) {
            Culprit::Unknown(k) => (k, LeftOut::Keys),
            Culprit::Type(k) => (k, LeftOut::Keys),
            Culprit::Setting(k) => (k, LeftOut::Values),
            Culprit::Missing(k) => {
                if !taken.contains(&k) {
                    problems.push(problem_from(path, error, also));
                }
                return Lenient {
                    value: None,
                    left_out: left_out.max(LeftOut::Keys),
                };
            }
            Culprit::Whole => {
                problems.push(problem_from(path, error, also));
                return Lenient {
                    value: None,
                    left_out: left_out.max(LeftOut::Keys),
                };
            }
        };
        // A value within a list (`limits[1]`) takes the whole list out.
        let key = key.split('[').next().unwrap_or_default().to_owned();
        let removed = remove(&mut value, &key);
        problems.push(problem_from(path, error, also));
        if !removed {
            return Lenient {
                value: None,
                left_out: left_out.max(LeftOut::Keys),
            };
        }
        left_out = left_out.max(kind);
        taken.push(key);
    }
}

/// Reads `value` into `T` as [`read_all`] does: `T` when at most values
/// refused by their settings were taken out (every one is a problem), so
/// the kind's own checks still run on the others; `None` after an unknown
/// key or a wrong type (every one of them a problem too).
pub(crate) fn deserialize_all<T: serde::de::DeserializeOwned>(
    path: &str,
    value: Value,
    also: &[&str],
    problems: &mut Vec<Problem>,
) -> Option<T> {
    let read = read_all(path, value, also, problems);
    read.value.filter(|_| read.left_out < LeftOut::Keys)
}

/// The key `error` blames, as a dotted path within the table read.
fn culprit(error: &ConfigError) -> Culprit {
    match error {
        ConfigError::Type { key: Some(k), .. } => Culprit::Type(k.clone()),
        ConfigError::NotFound(k) => Culprit::Missing(k.clone()),
        ConfigError::At {
            error,
            key: Some(at),
            ..
        } => match serde_culprit(&error.to_string()) {
            Some(Culprit::Unknown(name)) => Culprit::Unknown(format!("{at}.{name}")),
            Some(Culprit::Missing(name)) => Culprit::Missing(format!("{at}.{name}")),
            Some(_) => Culprit::Type(at.clone()),
            // A message of the setting's own conversion.
            None => Culprit::Setting(at.clone()),
        },
        ConfigError::Message(m) => match serde_culprit(m) {
            Some(c @ (Culprit::Unknown(_) | Culprit::Missing(_))) => c,
            _ => Culprit::Whole,
        },
        _ => Culprit::Whole,
    }
}

/// What serde's own messages blame: `unknown field` and `missing field`
/// name a key (returned); `invalid type`, `invalid value` and `invalid
/// length` blame the key the message is at (`Type`). `None`: not serde's.
fn serde_culprit(message: &str) -> Option<Culprit> {
    let named = |prefix: &str| {
        message
            .strip_prefix(prefix)
            .and_then(|rest| rest.split_once('`'))
            .map(|(name, _)| name.to_owned())
    };
    if let Some(name) = named("unknown field `") {
        return Some(Culprit::Unknown(name));
    }
    if let Some(name) = named("missing field `") {
        return Some(Culprit::Missing(name));
    }
    let wrong = ["invalid type", "invalid value", "invalid length"];
    wrong
        .iter()
        .any(|p| message.starts_with(p))
        .then(|| Culprit::Type(String::new()))
}

/// Removes the key at a dotted path (`retry.base_delay`) from a table;
/// false when there is none.
fn remove(value: &mut Value, key: &str) -> bool {
    let mut at = value;
    let mut parts = key.split('.').peekable();
    while let Some(part) = parts.next() {
        let ValueKind::Table(table) = &mut at.kind else {
            return false;
        };
        if parts.peek().is_none() {
            return table.shift_remove(part).is_some();
        }
        match table.get_mut(part) {
            Some(next) => at = next,
            None => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    use serde::Deserialize;

    use crate::units::HumanDuration;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Fetchish {
        timeout: Option<HumanDuration>,
        workers: Option<u32>,
        retry: Option<Retryish>,
        dir: String,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Retryish {
        attempts: Option<u32>,
        base_delay: Option<HumanDuration>,
    }

    fn table(text: &str) -> Value {
        config::Config::builder()
            .add_source(config::File::from_str(text, config::FileFormat::Toml))
            .build()
            .unwrap()
            .try_deserialize::<Value>()
            .unwrap()
    }

    fn lenient(text: &str) -> (Lenient<Fetchish>, Vec<Problem>) {
        let mut problems = Vec::new();
        let read = read_all("stages.fetch", table(text), &["workers"], &mut problems);
        (read, problems)
    }

    fn paths(problems: &[Problem]) -> Vec<(&str, &str)> {
        problems
            .iter()
            .map(|p| (p.path.as_str(), p.message.as_str()))
            .collect()
    }

    /// Two unknown keys and a bad value, in any order, are three problems
    /// at once, each at its key path, the misspelt key told the nearest.
    #[test]
    fn every_unknown_key_and_bad_value_of_a_table_is_said_at_once() {
        let text = "workerz = 4\ntimeout = \"soon\"\nretires = 3\ndir = \"out\"\n";
        let (read, problems) = lenient(text);
        let found = paths(&problems);
        assert_eq!(found.len(), 3, "{found:#?}");
        assert_eq!(found[0].0, "stages.fetch");
        assert!(
            found[0]
                .1
                .starts_with("unknown field `workerz` (did you mean `workers`?)"),
            "{found:#?}"
        );
        assert_eq!(found[1].0, "stages.fetch.timeout");
        assert!(found[1].1.contains("soon"), "{found:#?}");
        assert_eq!(found[2].0, "stages.fetch");
        assert!(
            found[2].1.starts_with("unknown field `retires`"),
            "{found:#?}"
        );
        // What is left read, but unknown keys make checks on it unsound.
        assert_eq!(read.left_out, LeftOut::Keys);
        assert_eq!(read.value.map(|f| f.dir).as_deref(), Some("out"));
        // Another order, the same three.
        let (_, again) = lenient("timeout = \"soon\"\ndir = \"out\"\nretires = 3\nworkerz = 4\n");
        assert_eq!(again.len(), 3, "{:#?}", paths(&again));
    }

    /// A wrong type and a bad value within a table in the table, and an
    /// unknown key there: each at its own path.
    #[test]
    fn mistakes_in_a_table_within_the_table_have_their_paths() {
        let text = "workers = \"many\"\ndir = \"out\"\n\
                    retry = { attempts = -1, base_delay = \"often\", bse = 1 }\n";
        let (read, problems) = lenient(text);
        let at: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            at,
            [
                "stages.fetch.workers",
                "stages.fetch.retry.attempts",
                "stages.fetch.retry.base_delay",
                "stages.fetch.retry",
            ],
            "{:#?}",
            paths(&problems)
        );
        assert!(problems[3].message.contains("unknown field `bse`"));
        assert_eq!(read.left_out, LeftOut::Keys);
    }

    /// Only values their settings refuse: the rest is read and sound.
    /// A missing key is said, unless it was taken out for its value.
    #[test]
    fn refused_values_leave_the_rest_and_missing_keys_are_said_once() {
        let (read, problems) = lenient("timeout = \"soon\"\ndir = \"out\"\n");
        assert_eq!(problems.len(), 1);
        assert_eq!(read.left_out, LeftOut::Values);
        assert!(read.value.is_some());
        let (read, problems) = lenient("timeout = \"soon\"\n");
        assert_eq!(paths(&problems).len(), 2, "{:#?}", paths(&problems));
        assert_eq!(
            (problems[1].path.as_str(), problems[1].message.as_str()),
            ("stages.fetch.dir", "missing: this key is required")
        );
        assert!(read.value.is_none());
        let (read, problems) = lenient("dir = [\"out\"]\n");
        assert_eq!(paths(&problems).len(), 1, "{:#?}", paths(&problems));
        assert_eq!(problems[0].path, "stages.fetch.dir");
        assert!(read.value.is_none());
    }
}
