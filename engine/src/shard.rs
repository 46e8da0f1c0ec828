//! Splitting a run across machines without a coordinator: `--shard i/N`
//! admits only the inputs whose id hashes to shard `i` of `N`. The hash
//! (64-bit FNV-1a of the id) is fixed, so the shards are disjoint, cover
//! every input together, and stay the same from run to run and from
//! machine to machine.

use std::fmt;
use std::str::FromStr;

/// One shard of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// Which shard, from 0.
    pub index: u32,
    /// How many shards in all.
    pub count: u32,
}

/// The environment variables of indexed jobs and job arrays that carry a
/// shard's index: Kubernetes Indexed Jobs, Slurm job arrays, AWS Batch array
/// jobs.
pub const INDEX_VARIABLES: &[&str] = &[
    "JOB_COMPLETION_INDEX",
    "SLURM_ARRAY_TASK_ID",
    "AWS_BATCH_JOB_ARRAY_INDEX",
];

/// What is wrong with a shard as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    /// A number with a sign, spaces or leading zeros.
    #[error("{what} {text:?} is not a whole number written plainly (digits only, no sign, spaces or leading zeros)")]
    NotPlain {
        /// What the number is (`the index`, a variable's name).
        what: String,
        /// The number as given.
        text: String,
    },
    /// A number above `u32::MAX`.
    #[error("{what} {text} is too large (at most {max})", max = u32::MAX)]
    TooLarge {
        /// What the number is.
        what: String,
        /// The number as given.
        text: String,
    },
    /// `i/0`.
    #[error("the shard count must be at least 1")]
    NoCount,
    /// `3/3`.
    #[error("shard index {index} is not below the count {count} (indexes start at 0)")]
    IndexTooLarge {
        /// The index given.
        index: u32,
        /// The count given.
        count: u32,
    },
    /// A Slurm array task below the array's first.
    #[error("SLURM_ARRAY_TASK_ID={index} is below SLURM_ARRAY_TASK_MIN={min}")]
    BelowSlurmMin {
        /// `SLURM_ARRAY_TASK_ID`.
        index: u32,
        /// `SLURM_ARRAY_TASK_MIN`.
        min: u32,
    },
    /// `auto/N` with none of [`INDEX_VARIABLES`] set.
    #[error("--shard auto/{count}: none of {vars} is set", vars = INDEX_VARIABLES.join(", "))]
    NoIndexVariable {
        /// The count given.
        count: u32,
    },
    /// Not `INDEX/COUNT`.
    #[error("{given:?}: expected INDEX/COUNT, e.g. 3/10 or auto/10")]
    NotIndexCount {
        /// The text given.
        given: String,
    },
    /// A number of `given` that is not written plainly.
    #[error("{given:?}: {number}")]
    Number {
        /// The text given.
        given: String,
        /// What is wrong with the number.
        number: Box<ShardError>,
    },
}

/// A shard number as written: plain digits, no sign, no spaces, no leading
/// zero (`00/3`, `+1/3` and `' 0/3'` are typos more often than intent).
fn whole_number(what: &str, text: &str) -> Result<u32, ShardError> {
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    let (what, text) = (what.to_owned(), text.to_owned());
    if !digits || (text.len() > 1 && text.starts_with('0')) {
        return Err(ShardError::NotPlain { what, text });
    }
    text.parse()
        .map_err(|_| ShardError::TooLarge { what, text })
}

/// 64-bit FNV-1a: tiny, and fixed forever (unlike `std`'s hasher).
pub fn stable_hash(id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl Shard {
    /// Shard `index` of `count`; `index < count`, `count >= 1`.
    pub fn new(index: u32, count: u32) -> Result<Self, ShardError> {
        if count == 0 {
            return Err(ShardError::NoCount);
        }
        if index >= count {
            return Err(ShardError::IndexTooLarge { index, count });
        }
        Ok(Shard { index, count })
    }

    /// Whether this shard takes the input with this id.
    pub fn takes(&self, id: &str) -> bool {
        stable_hash(id) % u64::from(self.count) == u64::from(self.index)
    }

    /// `auto/N`: the index from the first of [`INDEX_VARIABLES`] that is set
    /// (for Slurm, less `SLURM_ARRAY_TASK_MIN` when that is set).
    pub fn from_environment(
        count: u32,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ShardError> {
        for var in INDEX_VARIABLES {
            if let Some(value) = env(var) {
                let mut index = whole_number(var, value.trim())?;
                if *var == "SLURM_ARRAY_TASK_ID" {
                    if let Some(min) = env("SLURM_ARRAY_TASK_MIN") {
                        let min = whole_number("SLURM_ARRAY_TASK_MIN", min.trim())?;
                        index = index
                            .checked_sub(min)
                            .ok_or(ShardError::BelowSlurmMin { index, min })?;
                    }
                }
                return Shard::new(index, count);
            }
        }
        Err(ShardError::NoIndexVariable { count })
    }
}

impl FromStr for Shard {
    type Err = ShardError;

    /// `i/N`, or `auto/N` to read the index from the environment.
    fn from_str(s: &str) -> Result<Self, ShardError> {
        let given = || s.to_owned();
        let (i, n) = s
            .split_once('/')
            .ok_or_else(|| ShardError::NotIndexCount { given: given() })?;
        let in_given = |e| ShardError::Number {
            given: given(),
            number: Box::new(e),
        };
        let count = whole_number("the count", n).map_err(in_given)?;
        if i == "auto" {
            return Shard::from_environment(count, |k| std::env::var(k).ok());
        }
        let index = whole_number("the index", i).map_err(in_given)?;
        Shard::new(index, count)
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_fixed() {
        // Changing these breaks every sharded batch in flight: don't.
        assert_eq!(stable_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(stable_hash("a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn shards_parse_and_check() {
        assert_eq!(
            "3/10".parse::<Shard>(),
            Ok(Shard {
                index: 3,
                count: 10
            })
        );
        assert!("10/10".parse::<Shard>().is_err());
        assert!("1/0".parse::<Shard>().is_err());
        assert!("x/3".parse::<Shard>().is_err());
        assert!("3".parse::<Shard>().is_err());
    }

    #[test]
    fn shards_are_written_plainly_and_say_what_is_wrong() {
        for typo in ["+1/3", "00/3", " 0/3", "0/ 3", "1/03", "-1/3"] {
            let e = typo.parse::<Shard>().unwrap_err();
            assert!(e.to_string().contains("written plainly"), "{typo}: {e}");
        }
        let e = "0/99999999999".parse::<Shard>().unwrap_err();
        assert!(e.to_string().contains("too large"), "{e}");
        let e = Shard::from_environment(4, |k| match k {
            "SLURM_ARRAY_TASK_ID" => Some("1".into()),
            "SLURM_ARRAY_TASK_MIN" => Some("2".into()),
            _ => None,
        })
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "SLURM_ARRAY_TASK_ID=1 is below SLURM_ARRAY_TASK_MIN=2"
        );
    }

    #[test]
    fn the_index_comes_from_indexed_jobs_and_job_arrays() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            Shard::from_environment(4, env(&[("JOB_COMPLETION_INDEX", "2")]))
                .unwrap()
                .index,
            2
        );
        assert_eq!(
            Shard::from_environment(
                4,
                env(&[("SLURM_ARRAY_TASK_ID", "5"), ("SLURM_ARRAY_TASK_MIN", "3")])
            )
            .unwrap()
            .index,
            2
        );
        assert_eq!(
            Shard::from_environment(4, env(&[("AWS_BATCH_JOB_ARRAY_INDEX", "3")]))
                .unwrap()
                .index,
            3
        );
        assert!(Shard::from_environment(4, env(&[("AWS_BATCH_JOB_ARRAY_INDEX", "4")])).is_err());
        assert!(Shard::from_environment(4, env(&[])).is_err());
    }
}
