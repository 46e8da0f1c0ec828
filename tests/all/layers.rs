//! The house's layers, read from the sources: no stage module of
//! `warpline-stages` imports another stage module, and no two top-level
//! modules of `warpline-stages`, `warpline-gdal` or `warpline-gdal36`
//! import each other, directly or round a longer circle.
//!
//! A module's imports are the `crate::NAME` paths in its files (and, at a
//! crate's top level, `super::NAME`), outside comments; a name the crate's
//! root re-exports (`pub use m::{a, b}`) counts as an import of `m`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The stage modules of `warpline-stages`, in flow order.
const STAGES: &[&str] = &["source", "fetch", "decode", "reproject", "write"];

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Every `.rs` file under `dir`, with the top-level module it belongs to.
fn files(src: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(src).unwrap();
                let top = rel
                    .components()
                    .next()
                    .unwrap()
                    .as_os_str()
                    .to_string_lossy();
                let top = top.trim_end_matches(".rs").to_owned();
                out.push((top, std::fs::read_to_string(&p).unwrap()));
            }
        }
    }
    out
}

/// The names the crate root re-exports, by the module they come from.
fn root_exports(lib: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in lib.lines().map(str::trim) {
        let Some(rest) = line
            .strip_prefix("pub use ")
            .or_else(|| line.strip_prefix("pub(crate) use "))
        else {
            continue;
        };
        let Some((module, names)) = rest.trim_end_matches(';').split_once("::") else {
            continue;
        };
        let names = names.trim_start_matches('{').trim_end_matches('}');
        for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let name = name.rsplit(" as ").next().unwrap_or(name);
            out.insert(name.to_owned(), module.to_owned());
        }
    }
    out
}

/// The identifiers after `prefix` in `code` (`crate::a`, `crate::{a, b}`).
fn after(code: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices(prefix) {
        let rest = &code[at + prefix.len()..];
        let group = rest
            .strip_prefix('{')
            .map(|g| &g[..g.find('}').unwrap_or(g.len())]);
        let items: Vec<&str> = match group {
            Some(g) => g.split(',').collect(),
            None => vec![rest],
        };
        for item in items {
            let name: String = item
                .trim()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.push(name);
            }
        }
    }
    out
}

/// The graph of a crate's top-level modules (`lib` itself left out: it is
/// the front page that names them all).
fn graph(src: &Path) -> Graph {
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let exports = root_exports(&lib);
    let mut g = Graph::new();
    for (top, text) in files(src) {
        if top == "lib" {
            continue;
        }
        let code: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let mut names = after(&code, "crate::");
        names.extend(after(&code, "super::"));
        let edges = g.entry(top.clone()).or_default();
        for name in names {
            let module = exports.get(&name).cloned().unwrap_or(name);
            if module != top && src.join(format!("{module}.rs")).exists() {
                edges.insert(module);
            }
        }
    }
    g
}

/// A circle in `g`, if there is one.
fn circle(g: &Graph) -> Option<Vec<String>> {
    fn visit(
        g: &Graph,
        at: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == at) {
            let mut c = path[i..].to_vec();
            c.push(at.to_owned());
            return Some(c);
        }
        if done.contains(at) {
            return None;
        }
        path.push(at.to_owned());
        for next in g.get(at).into_iter().flatten() {
            if let Some(c) = visit(g, next, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(at.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    g.keys()
        .find_map(|m| visit(g, m, &mut Vec::new(), &mut done))
}

fn src(krate: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(krate)
        .join("src")
}

#[test]
fn no_stage_module_imports_another() {
    let g = graph(&src("stages"));
    assert!(
        g.contains_key("reproject") && g.contains_key("payloads"),
        "{g:?}"
    );
    for stage in STAGES {
        let reached: Vec<&String> = g[*stage]
            .iter()
            .filter(|m| STAGES.contains(&m.as_str()))
            .collect();
        assert!(reached.is_empty(), "stage `{stage}` imports {reached:?}");
    }
}

#[test]
fn no_import_circle_among_the_modules_of_the_stages_and_gdal_crates() {
    for krate in ["stages", "gdal", "gdal36"] {
        let g = graph(&src(krate));
        assert!(g.len() > 1, "{krate}: {g:?}");
        if let Some(c) = circle(&g) {
            panic!("{krate}: import circle {}", c.join(" -> "));
        }
    }
}

#[test]
fn the_checker_sees_a_circle_and_a_stage_import() {
    let mut g = Graph::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    assert_eq!(circle(&g), None);
    g.entry("c".into()).or_default().insert("a".into());
    assert_eq!(circle(&g).map(|c| c.len()), Some(4));
    assert_eq!(
        after("use crate::{fetch::X, ids};", "crate::"),
        ["fetch", "ids"]
    );
    let exports =
        root_exports("pub use sources::{Sources, WarpedBy};\npub(crate) use copy::flush;");
    assert_eq!(exports["WarpedBy"], "sources");
    assert_eq!(exports["flush"], "copy");
}

/// `unsafe` lives in the GDAL crate (and the accelerator plug-in, which
/// mirrors GDAL's internals) only: every other crate's root forbids it.
#[test]
fn only_the_gdal_crates_hold_unsafe_code() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for file in [
        "src/lib.rs",
        "engine/src/lib.rs",
        "stages/src/lib.rs",
        "cli/src/lib.rs",
        "cli/src/main.rs",
        "testkit/src/lib.rs",
        "python/src/lib.rs",
    ] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        assert!(
            text.contains("#![forbid(unsafe_code)]"),
            "{file} does not forbid unsafe code"
        );
    }
}
