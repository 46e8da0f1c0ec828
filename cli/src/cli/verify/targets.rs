//! What `verify` checks: the outputs of a folder (its `.tif` files), of a
//! run's `collection.json` (the data asset of each item it links), or of a
//! bucket prefix (`s3://`, `az://`, `gs://`: its `.tif` objects, or the
//! collection there). An output in a store is copied to a scratch file
//! when its turn comes, one at a time, so a sample reads only what it
//! checks.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};
use serde_json::Value;
use warpline::stages::store::{is_store_url, Prefix};

/// Where an output is.
#[derive(Debug)]
enum At {
    File(PathBuf),
    /// An object, by its name under the prefix.
    Object(Arc<Prefix>, String),
}

/// One output to check.
#[derive(Debug)]
pub(super) struct Output {
    /// Its path or URL, as reports name it.
    pub(super) shown: String,
    at: At,
}

impl Output {
    fn file(path: PathBuf) -> Self {
        Output {
            shown: path.display().to_string(),
            at: At::File(path),
        }
    }

    fn object(prefix: &Arc<Prefix>, name: String) -> Self {
        Output {
            shown: prefix.url(&name),
            at: At::Object(Arc::clone(prefix), name),
        }
    }

    /// The output as a local file: itself, or its copy in `scratch`.
    pub(super) fn local(&self, scratch: &Path) -> Result<PathBuf, String> {
        match &self.at {
            At::File(path) => Ok(path.clone()),
            At::Object(prefix, name) => {
                let copy = scratch.join("output.tif");
                prefix.download(name, &copy)?;
                Ok(copy)
            }
        }
    }
}

/// The outputs `target` names, sorted; `endpoint` the store's server for
/// a bucket prefix.
pub(super) fn outputs(target: &Path, endpoint: Option<String>) -> anyhow::Result<Vec<Output>> {
    let text = target.to_string_lossy();
    let mut found = if is_store_url(&text) {
        in_store(&text, endpoint)?
    } else if target.is_dir() {
        let mut found = Vec::new();
        walk(target, &mut found)?;
        found.into_iter().map(Output::file).collect()
    } else {
        collection_outputs(target)?
            .into_iter()
            .map(Output::file)
            .collect()
    };
    found.sort_by(|a, b| a.shown.cmp(&b.shown));
    Ok(found)
}

fn is_tiff(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.ends_with(".tif") || lower.ends_with(".tiff")
}

fn walk(dir: &Path, found: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    for entry in entries {
        let path = entry?.path();
        let hidden = path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'));
        if hidden {
            continue;
        }
        if path.is_dir() {
            walk(&path, found)?;
        } else if is_tiff(&path.to_string_lossy()) {
            found.push(path);
        }
    }
    Ok(())
}

fn read_json(p: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?;
    serde_json::from_slice(&text).with_context(|| format!("{}: not JSON", p.display()))
}

/// The hrefs of a collection's item links; `shown` names it in errors.
fn item_links(collection: &Value, shown: &str) -> anyhow::Result<Vec<String>> {
    if collection["type"] != "Collection" {
        bail!("{shown}: not a folder, a bucket prefix nor a STAC collection");
    }
    let links = collection["links"].as_array().into_iter().flatten();
    Ok(links
        .filter(|l| l["rel"] == "item")
        .filter_map(|l| l["href"].as_str().map(str::to_owned))
        .collect())
}

/// An item's data asset's href; `shown` names the item in errors.
fn data_asset(item: &Value, shown: &str) -> anyhow::Result<String> {
    match item["assets"]["data"]["href"].as_str() {
        Some(href) => Ok(href.to_owned()),
        None => bail!("{shown}: no data asset"),
    }
}

fn collection_outputs(path: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let collection = read_json(path)?;
    let base = path.parent().unwrap_or(Path::new("."));
    let mut out = Vec::new();
    for href in item_links(&collection, &path.display().to_string())? {
        let item_path = base.join(href.strip_prefix("./").unwrap_or(&href));
        let item = read_json(&item_path)?;
        let asset = data_asset(&item, &item_path.display().to_string())?;
        let asset = asset.strip_prefix("./").unwrap_or(&asset);
        out.push(item_path.parent().unwrap_or(base).join(asset));
    }
    Ok(out)
}

/// The outputs of a bucket prefix (its `.tif` objects; hidden names, as a
/// staging area's, passed over), or of the collection a `.json` URL names.
fn in_store(url: &str, endpoint: Option<String>) -> anyhow::Result<Vec<Output>> {
    if let Some((dir, file)) = url.rsplit_once('/').filter(|(_, f)| f.ends_with(".json")) {
        let prefix = Arc::new(Prefix::parse(dir, endpoint).map_err(anyhow::Error::msg)?);
        return store_collection(&prefix, file);
    }
    let prefix = Arc::new(Prefix::parse(url, endpoint).map_err(anyhow::Error::msg)?);
    let names = prefix.list().map_err(anyhow::Error::msg)?;
    let hidden = |name: &str| name.split('/').any(|s| s.starts_with('.'));
    Ok(names
        .into_iter()
        .filter(|n| is_tiff(n) && !hidden(n))
        .map(|n| Output::object(&prefix, n))
        .collect())
}

/// The outputs the collection `name` under `prefix` links, through its
/// items (read from the store, small).
fn store_collection(prefix: &Arc<Prefix>, name: &str) -> anyhow::Result<Vec<Output>> {
    let scratch = tempfile::tempdir().context("cannot make a scratch folder")?;
    let read = |name: &str| -> anyhow::Result<Value> {
        let copy = scratch.path().join("read.json");
        prefix.download(name, &copy).map_err(anyhow::Error::msg)?;
        read_json(&copy).with_context(|| prefix.url(name))
    };
    let collection = read(name)?;
    let mut out = Vec::new();
    for href in item_links(&collection, &prefix.url(name))? {
        let item_name = relative(parent(name), &href)
            .with_context(|| format!("{}: item link {href:?}", prefix.url(name)))?;
        let item = read(&item_name)?;
        let asset = data_asset(&item, &prefix.url(&item_name))?;
        let asset_name = relative(parent(&item_name), &asset)
            .with_context(|| format!("{}: data asset {asset:?}", prefix.url(&item_name)))?;
        out.push(Output::object(prefix, asset_name));
    }
    Ok(out)
}

/// The folder part of a name under the prefix (`""` at its top).
fn parent(name: &str) -> &str {
    name.rsplit_once('/').map_or("", |(dir, _)| dir)
}

/// `href` (relative to the folder `dir` under the prefix) as a name under
/// the prefix; an absolute href, or one that leaves the prefix, is refused.
fn relative(dir: &str, href: &str) -> anyhow::Result<String> {
    if href.contains("://") || href.starts_with('/') {
        bail!("an absolute href is not read: the links of a collection in a bucket are relative");
    }
    let mut parts: Vec<&str> = dir.split('/').filter(|s| !s.is_empty()).collect();
    for segment in href.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    bail!("it leaves the prefix");
                }
            }
            s => parts.push(s),
        }
    }
    Ok(parts.join("/"))
}

/// `n` outputs spread evenly over the sorted list (all without `--sample`).
pub(super) fn sample(all: &[Output], n: Option<usize>) -> Vec<&Output> {
    match n {
        Some(n) if n < all.len() => (0..n).map(|i| &all[i * all.len() / n.max(1)]).collect(),
        _ => all.iter().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_spread_over_the_outputs() {
        let all: Vec<Output> = (0..10)
            .map(|i| Output::file(PathBuf::from(format!("{i}"))))
            .collect();
        let picked: Vec<&str> = sample(&all, Some(3))
            .iter()
            .map(|o| o.shown.as_str())
            .collect();
        assert_eq!(picked, ["0", "3", "6"]);
        assert_eq!(sample(&all, Some(20)).len(), 10);
        assert_eq!(sample(&all, None).len(), 10);
    }

    #[test]
    fn links_resolve_within_the_prefix() {
        assert_eq!(relative("", "./a/item.json").unwrap(), "a/item.json");
        assert_eq!(relative("a", "./x.tif").unwrap(), "a/x.tif");
        assert_eq!(relative("a/b", "../c/x.tif").unwrap(), "a/c/x.tif");
        assert!(relative("", "../x.tif").is_err());
        assert!(relative("a", "s3://other/x.tif").is_err());
        assert!(relative("a", "/x.tif").is_err());
    }
}
