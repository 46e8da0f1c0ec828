//! TOML text for the pipeline `warpline warp` makes: a stage's keys in the
//! order the command line gave them, and values written as a pipeline
//! file writes them (strings escaped as TOML's basic strings, numbers as
//! TOML floats, `NAME=VALUE` options as inline tables).

/// One key's value: TOML text, a list grown flag by flag (`-b`, `-if`),
/// or options grown flag by flag (`-wo`, `-co`, ...).
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Toml(String),
    List(Vec<String>),
    Options(Vec<(String, String)>),
}

/// A stage's keys, in the order first given.
#[derive(Debug, Default)]
pub(super) struct Table(Vec<(String, Value)>);

impl Table {
    fn slot(&mut self, key: &str, empty: Value) -> &mut Value {
        let at = match self.0.iter().position(|(k, _)| k == key) {
            Some(at) => at,
            None => {
                self.0.push((key.to_owned(), empty));
                self.0.len() - 1
            }
        };
        &mut self.0[at].1
    }

    /// Sets `key` to `value` (TOML text); a later flag wins, as in gdalwarp.
    pub(super) fn set(&mut self, key: &str, value: String) {
        *self.slot(key, Value::Toml(String::new())) = Value::Toml(value);
    }

    /// Adds `value` (TOML text) to the list at `key`.
    pub(super) fn push(&mut self, key: &str, value: String) {
        match self.slot(key, Value::List(Vec::new())) {
            Value::List(items) => items.push(value),
            other => *other = Value::List(vec![value]),
        }
    }

    /// Adds `NAME=VALUE` to the options at `key`. A name given twice with
    /// another value is refused: GDAL would read one of them, and which
    /// one depends on the option.
    pub(super) fn option(&mut self, key: &str, name_value: &str) -> Result<(), String> {
        let Some((name, value)) = name_value
            .split_once('=')
            .filter(|(n, _)| !n.trim().is_empty())
        else {
            return Err("expected NAME=VALUE".to_owned());
        };
        let (name, value) = (name.trim().to_owned(), value.to_owned());
        // A key takes options only (the flags of one key are alike).
        let Value::Options(options) = self.slot(key, Value::Options(Vec::new())) else {
            return Err(format!("`{key}` is set otherwise too"));
        };
        match options.iter().find(|(n, _)| n.eq_ignore_ascii_case(&name)) {
            Some((_, v)) if *v == value => Ok(()),
            Some((_, v)) => Err(format!(
                "{name} is given twice ({v:?} and {value:?}): give it once"
            )),
            None => {
                options.push((name, value));
                Ok(())
            }
        }
    }

    /// The TOML text of `key`, if set.
    pub(super) fn get(&self, key: &str) -> Option<String> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| render(v))
    }

    /// `key = value` lines.
    pub(super) fn lines(&self) -> String {
        self.0
            .iter()
            .map(|(k, v)| format!("{k} = {}\n", render(v)))
            .collect()
    }
}

fn render(v: &Value) -> String {
    match v {
        Value::Toml(t) => t.clone(),
        Value::List(items) => format!("[{}]", items.join(", ")),
        Value::Options(o) => {
            let items: Vec<String> = o
                .iter()
                .map(|(n, v)| format!("{} = {}", key(n), string(v)))
                .collect();
            format!("{{ {} }}", items.join(", "))
        }
    }
}

/// A TOML key: bare when it may be, else quoted.
fn key(name: &str) -> String {
    let bare = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare && !name.is_empty() {
        name.to_owned()
    } else {
        string(name)
    }
}

/// A TOML basic string.
pub(super) fn string(text: &str) -> String {
    let mut s = String::with_capacity(text.len() + 2);
    s.push('"');
    for c in text.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            '\t' => s.push_str("\\t"),
            '\r' => s.push_str("\\r"),
            c if c.is_control() => s.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

/// A TOML float (`30.0`, `1e-5`, `inf`, `nan`).
pub(super) fn float(v: f64) -> String {
    if v.is_nan() {
        "nan".to_owned()
    } else {
        format!("{v:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_written_as_toml() {
        assert_eq!(string("a\"b\\c\nd\u{1}"), r#""a\"b\\c\nd\u0001""#);
        assert_eq!(float(30.0), "30.0");
        assert_eq!(float(-0.5), "-0.5");
        assert_eq!(float(f64::NAN), "nan");
        assert_eq!(float(f64::NEG_INFINITY), "-inf");
        let mut t = Table::default();
        t.set("crs", string("EPSG:3857"));
        t.option("warp_options", "INIT_DEST=0").unwrap();
        t.option("warp_options", "a.b=c=d").unwrap();
        t.push("bands", "3".into());
        t.push("bands", "1".into());
        t.set("crs", string("EPSG:4326"));
        assert_eq!(
            t.lines(),
            "crs = \"EPSG:4326\"\nwarp_options = { INIT_DEST = \"0\", \"a.b\" = \"c=d\" }\n\
             bands = [3, 1]\n"
        );
        let twice = t.option("warp_options", "init_dest=1").unwrap_err();
        assert!(twice.contains("given twice"), "{twice}");
        assert!(t.option("warp_options", "INIT_DEST=0").is_ok());
        assert!(t.option("warp_options", "=1").is_err());
        assert!(t.option("warp_options", "NOVALUE").is_err());
    }
}
