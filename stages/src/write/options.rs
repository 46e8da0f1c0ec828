//! The creation options a GDAL driver declares, and a pipeline's options
//! checked against them when the pipeline compiles.

use std::collections::BTreeMap;

/// One creation option the driver declares.
#[derive(Debug)]
pub(super) struct DeclaredOption {
    kind: String,
    values: Vec<String>,
}

/// The creation options a driver declares, from its
/// `DMD_CREATIONOPTIONLIST` XML.
pub(super) fn declared_options(xml: &str) -> Result<BTreeMap<String, DeclaredOption>, String> {
    let doc = roxmltree::Document::parse(xml)
        .map_err(|e| format!("cannot read the driver's option list: {e}"))?;
    let mut out = BTreeMap::new();
    for node in doc.descendants().filter(|n| n.has_tag_name("Option")) {
        let Some(name) = node.attribute("name") else {
            continue;
        };
        let values = node
            .children()
            .filter(|c| c.has_tag_name("Value"))
            .flat_map(|c| {
                let mut v: Vec<String> = c
                    .text()
                    .map(|t| t.trim().to_ascii_uppercase())
                    .into_iter()
                    .collect();
                if let Some(alias) = c.attribute("alias") {
                    v.push(alias.to_ascii_uppercase());
                }
                v
            })
            .collect();
        out.insert(
            name.to_ascii_uppercase(),
            DeclaredOption {
                kind: node.attribute("type").unwrap_or("string").to_owned(),
                values,
            },
        );
    }
    Ok(out)
}

/// Checks one option against the driver's list.
pub(super) fn check_option(
    declared: &BTreeMap<String, DeclaredOption>,
    key: &str,
    value: &str,
) -> Result<(), String> {
    let Some(d) = declared.get(&key.to_ascii_uppercase()) else {
        return Err(format!(
            "unknown creation option; the driver knows {}",
            declared.keys().cloned().collect::<Vec<_>>().join(", ")
        ));
    };
    let v = value.trim().to_ascii_uppercase();
    match d.kind.as_str() {
        "string-select" if !d.values.is_empty() && !d.values.contains(&v) => {
            Err(format!("{value:?} is not one of {}", d.values.join(", ")))
        }
        "int" | "integer" if v.parse::<i64>().is_err() => {
            Err(format!("{value:?} is not a whole number"))
        }
        "float" | "double" if v.parse::<f64>().is_err() => {
            Err(format!("{value:?} is not a number"))
        }
        "boolean"
            if !["YES", "NO", "TRUE", "FALSE", "ON", "OFF", "1", "0"].contains(&v.as_str()) =>
        {
            Err(format!("{value:?} is not YES or NO"))
        }
        _ => Ok(()),
    }
}
