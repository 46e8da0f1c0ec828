//! Parsing of the human-friendly values a pipeline file holds: byte sizes
//! (`"512MiB"`), durations (`"250ms"`) and counts that may say `"cores"`.

use std::time::Duration;

use serde::Deserialize;

/// What is wrong with a value of a pipeline file: said in the file's
/// terms, as the problem at its key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// `""` as a size.
    #[error("expected a size such as \"512MiB\", got an empty string")]
    EmptySize,
    /// `"-5MiB"`.
    #[error("a size cannot be negative, got {0:?}")]
    NegativeSize(String),
    /// Not a size.
    #[error("expected a size such as \"512MiB\", \"64KiB\" or a number of bytes, got {0:?}")]
    Size(String),
    /// Not a duration.
    #[error("expected a duration such as \"250ms\" or \"30s\", got {0:?}")]
    Duration(String),
    /// A duration in a unit there is none of.
    #[error("expected a duration such as \"250ms\" or \"30s\", got {text:?}: unknown unit {unit:?} (use ms, s, m, h or d)")]
    DurationUnit {
        /// The duration as written.
        text: String,
        /// The unit it names.
        unit: String,
    },
    /// A duration too long to hold.
    #[error("expected a duration such as \"250ms\" or \"30s\", got {0:?}: too large")]
    DurationTooLarge(String),
    /// A count of 0 or less.
    #[error("must be at least 1, got {0}")]
    CountBelowOne(i64),
    /// A count above `u32::MAX` (as written: a number, or quoted text).
    #[error("{0} is too large (at most {max})", max = u32::MAX)]
    CountTooLarge(String),
    /// Not a count.
    #[error("expected a positive whole number, \"cores\", \"cores+N\" or \"cores-N\", got {0:?}")]
    Count(String),
    /// None of the words a setting takes.
    #[error("expected {expected}, got {text:?}")]
    Word {
        /// The words it takes, as the file writes them.
        expected: String,
        /// What the file said.
        text: String,
    },
}

/// A byte size as written in a pipeline: an integer number of bytes or a
/// string with a unit (`"64KiB"`, `"1.5GiB"`, `"10MB"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(
    untagged,
    expecting = "expected a size: a number of bytes, or text with a unit such as \"512MiB\""
)]
pub enum SizeValue {
    /// A plain number of bytes.
    Bytes(u64),
    /// A number with a unit, parsed by [`parse_size`].
    Text(String),
}

impl SizeValue {
    /// The size in bytes, or a message saying what is wrong with it.
    pub fn bytes(&self) -> Result<u64, ValueError> {
        match self {
            SizeValue::Bytes(n) => Ok(*n),
            SizeValue::Text(s) => parse_size(s),
        }
    }
}

/// A byte size as a pipeline writes it, checked when the file is read: a
/// number of bytes or text with a unit, as [`SizeValue`] takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "SizeValue")]
pub struct Size(pub u64);

impl TryFrom<SizeValue> for Size {
    type Error = ValueError;
    fn try_from(value: SizeValue) -> Result<Self, ValueError> {
        value.bytes().map(Size)
    }
}

/// A duration as a pipeline writes it (`"250ms"`, `"30s"`, `"1h 30m"`),
/// checked by [`parse_duration`] when the file is read. It is read as text,
/// as every text setting is: `30` is the text "30", which lacks a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct HumanDuration(pub Duration);

impl TryFrom<String> for HumanDuration {
    type Error = ValueError;
    fn try_from(text: String) -> Result<Self, ValueError> {
        parse_duration(&text).map(HumanDuration)
    }
}

/// A setting that is one of a few words (`on_error = "abort"`): the value
/// `text` names in `words`, or a message saying what is `expected` (the
/// words as the file writes them) and what the file said instead.
pub fn one_of<T: Copy>(text: &str, words: &[(&str, T)], expected: &str) -> Result<T, ValueError> {
    words
        .iter()
        .find(|(word, _)| *word == text)
        .map(|(_, value)| *value)
        .ok_or_else(|| ValueError::Word {
            expected: expected.to_owned(),
            text: text.to_owned(),
        })
}

/// Reads a setting that is one of a few words (`on_error = "abort"`) into
/// a type with [`one_of`](crate::units::one_of); the type says
/// `#[serde(try_from = "String")]`. `$expected` is how the message names
/// the words.
///
/// ```
/// #[derive(Clone, Copy, serde::Deserialize)]
/// #[serde(try_from = "String")]
/// enum Mode { Fast, Safe }
/// warpline_engine::word_setting!(Mode, "\"fast\" or \"safe\"", {
///     "fast" => Mode::Fast, "safe" => Mode::Safe,
/// });
/// let e = Mode::try_from("slow".to_owned()).err().unwrap();
/// assert_eq!(e.to_string(), r#"expected "fast" or "safe", got "slow""#);
/// ```
#[macro_export]
macro_rules! word_setting {
    ($ty:ty, $expected:expr, { $($word:literal => $value:expr),+ $(,)? }) => {
        impl ::core::convert::TryFrom<::std::string::String> for $ty {
            type Error = $crate::units::ValueError;
            fn try_from(
                text: ::std::string::String,
            ) -> ::core::result::Result<Self, $crate::units::ValueError> {
                $crate::units::one_of(&text, &[$(($word, $value)),+], $expected)
            }
        }
    };
}

/// A count as written in a pipeline: a positive integer, `"cores"` (the
/// number of CPUs this process may use), or `"cores+N"` / `"cores-N"`
/// (never below 1).
#[derive(Debug, Clone, Deserialize)]
#[serde(
    untagged,
    expecting = "expected a positive whole number, \"cores\", \"cores+N\" or \"cores-N\""
)]
pub enum CountValue {
    /// A plain number.
    Number(i64),
    /// `"cores"`, `"cores+N"`, `"cores-N"`, or a number as text.
    Text(String),
}

impl CountValue {
    /// The count, or a message saying what is wrong with it. Zero is an error:
    /// a stage with no workers or a limiter with no permits never runs.
    pub fn resolve(&self) -> Result<u32, ValueError> {
        match self {
            CountValue::Number(n) if *n <= 0 => Err(ValueError::CountBelowOne(*n)),
            CountValue::Number(n) => {
                u32::try_from(*n).map_err(|_| ValueError::CountTooLarge(n.to_string()))
            }
            CountValue::Text(s) => {
                let expected = || ValueError::Count(s.clone());
                let text = s.trim();
                let Some(rest) = text.strip_prefix("cores") else {
                    return match text.parse::<i64>() {
                        Ok(n) => CountValue::Number(n).resolve(),
                        Err(_) => Err(expected()),
                    };
                };
                let rest = rest.trim_start();
                let by = |n: &str| {
                    n.trim()
                        .parse::<u32>()
                        .map(i64::from)
                        .map_err(|_| expected())
                };
                let offset = if rest.is_empty() {
                    0
                } else if let Some(n) = rest.strip_prefix('+') {
                    by(n)?
                } else if let Some(n) = rest.strip_prefix('-') {
                    -by(n)?
                } else {
                    return Err(expected());
                };
                let n = (i64::from(cores()) + offset).max(1);
                u32::try_from(n).map_err(|_| ValueError::CountTooLarge(format!("{s:?}")))
            }
        }
    }
}

/// The number of CPUs this process may use (at least 1).
pub fn cores() -> u32 {
    std::thread::available_parallelism()
        .map(|n| u32::try_from(n.get()).unwrap_or(u32::MAX))
        .unwrap_or(1)
}

/// Parses a byte size such as `"512MiB"`, `"64 KiB"`, `"1.5GiB"` or `"1000"`.
/// Binary units (KiB, MiB, GiB, TiB) are powers of 1024; decimal units (KB,
/// MB, GB, TB) are powers of 1000.
pub fn parse_size(text: &str) -> Result<u64, ValueError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(ValueError::EmptySize);
    }
    if t.starts_with('-') {
        return Err(ValueError::NegativeSize(text.to_owned()));
    }
    t.parse::<bytesize::ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|_| ValueError::Size(text.to_owned()))
}

/// Parses a duration such as `"250ms"`, `"30s"`, `"2m"` or `"1h 30m"`.
pub fn parse_duration(text: &str) -> Result<Duration, ValueError> {
    use humantime::DurationError as E;
    let text = text.to_owned();
    humantime::parse_duration(text.trim()).map_err(|e| {
        // Said in the file's terms, not the parser's (no byte offsets).
        match e {
            E::UnknownUnit { unit, .. } => ValueError::DurationUnit { text, unit },
            E::NumberOverflow => ValueError::DurationTooLarge(text),
            _ => ValueError::Duration(text),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_duration_is_said_without_parser_internals() {
        let e = parse_duration("soon").unwrap_err();
        assert_eq!(
            e.to_string(),
            "expected a duration such as \"250ms\" or \"30s\", got \"soon\""
        );
        let e = parse_duration("5 parsecs").unwrap_err();
        assert!(
            e.to_string()
                .ends_with("unknown unit \"parsecs\" (use ms, s, m, h or d)"),
            "{e}"
        );
    }

    #[test]
    fn sizes_parse_with_binary_and_decimal_units() {
        assert_eq!(parse_size("512MiB"), Ok(512 * 1024 * 1024));
        assert_eq!(parse_size("64 KiB"), Ok(64 * 1024));
        assert_eq!(parse_size("10MB"), Ok(10_000_000));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("-5MiB").is_err());
        assert!(parse_size("").is_err());
    }

    #[test]
    fn durations_parse_and_reject_garbage() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("30").is_err());
    }

    #[test]
    fn counts_reject_zero_and_accept_cores() {
        assert_eq!(CountValue::Number(3).resolve(), Ok(3));
        assert!(CountValue::Number(0).resolve().is_err());
        assert!(CountValue::Number(-2).resolve().is_err());
        assert_eq!(CountValue::Text("cores".into()).resolve(), Ok(cores()));
        assert_eq!(CountValue::Text("7".into()).resolve(), Ok(7));
        assert!(CountValue::Text("many".into()).resolve().is_err());
        let c = cores();
        assert_eq!(CountValue::Text("cores+1".into()).resolve(), Ok(c + 1));
        assert_eq!(CountValue::Text(" cores + 2 ".into()).resolve(), Ok(c + 2));
        assert_eq!(
            CountValue::Text("cores-1".into()).resolve(),
            Ok((c - 1).max(1))
        );
        // Never below one, whatever the machine.
        assert_eq!(CountValue::Text(format!("cores-{c}")).resolve(), Ok(1));
        for bad in [
            "cores*2", "cores+", "cores+x", "cores+-1", "corest", "2cores", "co res",
        ] {
            let e = CountValue::Text(bad.into()).resolve().unwrap_err();
            let e = e.to_string();
            assert!(e.contains("cores+N") && e.contains(bad), "{bad}: {e}");
        }
    }
}
