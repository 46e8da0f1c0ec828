//! A [`Problem`] in a pipeline file, at its key path, and the words that
//! say it (the nearest known name, the known names): what the compile step,
//! the registry and every kind's factory report.

use std::fmt;

/// Which check found a problem. `warpline validate` checks in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// The file's shape: TOML syntax, known keys, types, values.
    Schema,
    /// How the parts connect: the flow, limiter and stage references, the
    /// acquisition order.
    Graph,
    /// This machine: CRSs PROJ understands, GDAL drivers and creation
    /// options, output directories that can be written; and, only when
    /// asked (`validate --online`), what the pipeline reaches over the
    /// network (an output bucket can be listed).
    Environment,
}

/// One thing wrong with a pipeline, at a key path such as
/// `stages.decode.workers`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// Which check found it.
    pub tier: Tier,
    /// Where in the pipeline file (dotted key path; `<file>` for the whole).
    pub path: String,
    /// What is wrong and, where it helps, what would be right.
    pub message: String,
}

impl Problem {
    /// A problem with the file's shape at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Problem {
            tier: Tier::Schema,
            path: path.into(),
            message: message.into(),
        }
    }

    /// A problem with how the parts connect.
    pub fn graph(path: impl Into<String>, message: impl Into<String>) -> Self {
        Problem {
            tier: Tier::Graph,
            ..Problem::new(path, message)
        }
    }

    /// A problem with this machine (CRS, driver, directory).
    pub fn environment(path: impl Into<String>, message: impl Into<String>) -> Self {
        Problem {
            tier: Tier::Environment,
            ..Problem::new(path, message)
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Turns an error from the `config` crate into a problem at `path`, naming
/// the key when the crate knows it. A misspelt key is told the nearest
/// known one; `also` are keys of the same table that the engine reads
/// itself (a stage's `workers`), which the kind's own list does not name.
pub(crate) fn problem_from(path: &str, error: config::ConfigError, also: &[&str]) -> Problem {
    // In a table within the table (`retry = { ... }`): the config crate
    // says which, and the engine's own keys are not among its keys.
    if let config::ConfigError::At {
        error,
        key: Some(key),
        ..
    } = error
    {
        let inner = error.to_string();
        let message = unknown_field(&inner, &[]).unwrap_or_else(|| plain(inner));
        return Problem::new(join(path, &key), message);
    }
    if let Some(message) = unknown_field(&error.to_string(), also) {
        return Problem::new(path, message);
    }
    match error {
        config::ConfigError::NotFound(key) => {
            Problem::new(join(path, &key), "missing: this key is required")
        }
        config::ConfigError::Type {
            unexpected,
            expected,
            key: Some(key),
            ..
        } => Problem::new(
            join(path, &key),
            type_message(&unexpected.to_string(), expected),
        ),
        other => Problem::new(path, plain(other.to_string())),
    }
}

/// A message from serde with its "invalid type: X, expected Y" said as
/// [`type_message`] says it; any other as it is.
fn plain(message: String) -> String {
    let parts = message
        .strip_prefix("invalid type: ")
        .and_then(|rest| rest.split_once(", expected "));
    match parts {
        Some((unexpected, expected)) => type_message(unexpected, expected),
        None => message,
    }
}

/// serde's "invalid type: 64-bit integer `-1`, expected an unsigned 64 bit
/// or less integer" in the file's terms: `expected a whole number (0 or
/// more), got -1`.
fn type_message(unexpected: &str, expected: &str) -> String {
    // The crate's `Unexpected` is not public: read its text, `string
    // "x"`, `64-bit integer `-1``, `boolean `true``, `sequence`, `map`.
    let text = unexpected.to_owned();
    let got = if let Some(s) = text.strip_prefix("string ") {
        s.to_owned()
    } else if let Some((_, v)) = text.split_once('`') {
        v.trim_end_matches('`').to_owned()
    } else {
        match text.as_str() {
            "sequence" => "a list".to_owned(),
            "map" => "a table".to_owned(),
            "unit value" => "nothing".to_owned(),
            _ => text,
        }
    };
    let has = |word: &str| expected.contains(word);
    let wanted = if has("floating point") || matches!(expected, "f32" | "f64") {
        "a number"
    } else if has("unsigned") || matches!(expected, "u8" | "u16" | "u32" | "u64") {
        "a whole number (0 or more)"
    } else if has("integer") || matches!(expected, "i8" | "i16" | "i32" | "i64") {
        "a whole number"
    } else if has("sequence") {
        "a list, e.g. [\"a\", \"b\"]"
    } else if has("map") || has("struct") {
        "a table"
    } else if has("bool") {
        "true or false"
    } else if has("string") || has("char") {
        "text in quotes"
    } else {
        expected
    };
    format!("expected {wanted}, got {got}")
}

/// The known name nearest to a misspelt `name`, if one is near enough: by
/// Jaro-Winkler similarity, as clap suggests subcommands.
pub(crate) fn nearest<'a>(name: &str, known: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    known
        .map(|k| (strsim::jaro_winkler(name, k), k))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

/// serde's "unknown field `x`, expected one of `a`, `b`" (or "there are no
/// fields"), with the nearest known key and `also` among the known ones.
fn unknown_field(message: &str, also: &[&str]) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let (name, rest) = rest.split_once('`')?;
    // The known keys are the backquoted words after the name.
    let mut keys: Vec<&str> = also.to_vec();
    for k in rest.split('`').skip(1).step_by(2) {
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mut out = format!("unknown field `{name}`");
    if let Some(k) = nearest(name, keys.iter().copied()) {
        out += &format!(" (did you mean `{k}`?)");
    }
    out += &format!("; known keys: {}", known(keys.iter()));
    Some(out)
}

/// Names in backquotes, comma-separated (`none` for no names).
pub(crate) fn known(names: impl Iterator<Item = impl AsRef<str>>) -> String {
    let v: Vec<String> = names.map(|n| format!("`{}`", n.as_ref())).collect();
    if v.is_empty() {
        "none".to_owned()
    } else {
        v.join(", ")
    }
}

pub(crate) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}
