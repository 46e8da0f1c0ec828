//! Item ids: made from each input's name, file-name safe and unique in a
//! run ([`Ids`]), and the form an id takes in an output's file name
//! ([`file_name_id`]). A leaf: sources make ids, write and reproject name
//! files by them, the store's listings make them too.

use std::collections::{HashMap, HashSet};

/// Makes ids unique and file-name safe.
///
/// `seen` holds a 64-bit fingerprint of every plain id given so far (the
/// names made safe), and `again` how many inputs had each name given more
/// than once: 9 to 18 bytes an input (the set's load) whatever its name's
/// length, not the name (a source of 100,000 inputs keeps about 1.2 MiB for
/// this, where names took 8). A de-duplicated id is `NAME~N`: no plain id
/// holds a `~` ([`safe_char`] turns it into `_`), and `NAME~N` is new for
/// each `(NAME, N)` (the count of a fingerprint only grows), so no id is
/// ever given twice, whatever comes later. Two names of one fingerprint (a
/// chance in 2^64 for a pair) would only number the second `NAME~2`.
#[derive(Debug, Default)]
pub(crate) struct Ids {
    seen: HashSet<u64>,
    again: HashMap<u64, u32>,
}

/// Marks a de-duplicated id (`NAME~2`); never in a name made safe.
pub const DEDUP_MARK: char = '~';

/// Characters kept in ids; every other one becomes `_`.
fn safe_char(c: char) -> char {
    if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
        c
    } else {
        '_'
    }
}

/// A file-name-safe form of `raw`: ASCII letters, digits, `-`, `_`, `.`;
/// no leading dot; at most 120 characters.
pub fn safe_id(raw: &str) -> String {
    tidy(raw.chars().map(safe_char).collect(), &['.'], 120)
}

/// `name` (already of safe characters) without the leading `lead`
/// characters, cut to `max` bytes (every character is ASCII); `_` when
/// nothing or only dots are left.
fn tidy(mut name: String, lead: &[char], max: usize) -> String {
    let trimmed = name.trim_start_matches(lead);
    if trimmed.len() != name.len() {
        name = trimmed.to_owned();
    }
    name.truncate(max);
    if name.is_empty() || name.chars().all(|c| c == '.') {
        "_".to_owned()
    } else {
        name
    }
}

impl Ids {
    pub(crate) fn next(&mut self, source: &str) -> String {
        // The last path segment, without query or extension.
        let path = source.split(['?', '#']).next().unwrap_or(source);
        let name = path.rsplit(['/', '\\']).next().unwrap_or(path);
        let decoded = percent_decode(name);
        let stem = match decoded.rsplit_once('.') {
            Some((stem, _)) if !stem.is_empty() => stem.to_owned(),
            _ => decoded,
        };
        self.named(&stem)
    }

    /// `name` made safe, and unique as [`Ids::next`]'s ids are.
    pub(crate) fn named(&mut self, name: &str) -> String {
        let id = safe_id(name);
        let print = fingerprint(&id);
        if self.seen.insert(print) {
            return id;
        }
        let n = self.again.entry(print).or_insert(1);
        *n += 1;
        format!("{id}{DEDUP_MARK}{n}")
    }
}

/// A fixed 64-bit hash of `value` (SipHash with zero keys): the same in
/// every process and run.
pub(crate) fn fingerprint(value: impl std::hash::Hash) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault};
    BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(value)
}

/// The form of an item's id used in an output's file name: as [`safe_id`],
/// but keeping the [`DEDUP_MARK`] and up to 160 characters, so that every
/// id a source here makes (a name of at most 120 characters, `~`, a count)
/// is kept as it is and two of them never name one file. Ids from other
/// sources are made safe the same way.
pub fn file_name_id(id: &str) -> String {
    let safe = id
        .chars()
        .map(|c| if c == DEDUP_MARK { c } else { safe_char(c) })
        .collect();
    tidy(safe, &['.', DEDUP_MARK], 160)
}

fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}
