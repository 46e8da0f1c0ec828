//! `warpline verify` of outputs in a bucket (issue 40, item 4): a run
//! that wrote its COGs, items and collection to a bucket prefix is
//! verified from the prefix and from its `collection.json` there, every
//! output identical; an object replaced by an edited copy is reported
//! different, by its URL. The same for `gs://`, whose outputs a test
//! uploads (warpline does not write there).

use std::path::Path;

use super::server::{items, pipeline, s3, S3};
use crate::binary::said;
use crate::common;

/// `warpline verify ARGS --endpoint E` with `store`'s credentials: the
/// exit code and what it said.
fn verify(store: &S3, args: &[&str]) -> (Option<i32>, String) {
    let out = store
        .warpline(&store.secret)
        .arg("verify")
        .args(args)
        .args(["--endpoint", &store.endpoint])
        .output()
        .unwrap();
    (out.status.code(), said(&out))
}

/// Two tiles warped to COGs with their STAC items under `out` in the
/// bucket: by the run itself, or (`upload`) by a local run whose folder
/// is then uploaded.
fn outputs_in_bucket(store: &S3, work: &Path, upload: bool) -> Vec<String> {
    let tiles = common::sample_files(&work.join("tiles"), 1, 64);
    let glob = format!(
        "kind = \"glob\"\npattern = \"{}/*.tif\"",
        work.join("tiles").display()
    );
    let local = work.join("local-out");
    let dir = if upload {
        format!("dir = \"{}\"", local.display())
    } else {
        format!(
            "dir = \"{}\"\nendpoint = \"{}\"",
            store.url("out"),
            store.endpoint
        )
    };
    let write = format!("{dir}\nformat = \"COG\"\nstac = true");
    let toml = pipeline(&glob, &write, &store.endpoint)
        .replace("creation_options = { COMPRESS = \"DEFLATE\" }\n", "");
    let (report, text) = store.run(work, &toml, &store.secret, 0);
    let n = tiles.len() as u64;
    assert_eq!(items(&report), [n, n, 0, 0], "{text}");
    if upload {
        for file in super::server::files(&local) {
            let name = file
                .strip_prefix(&local)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            store.put(&format!("out/{name}"), std::fs::read(&file).unwrap());
        }
    }
    tiles
        .iter()
        .map(|t| t.file_stem().unwrap().to_string_lossy().into_owned())
        .collect()
}

/// Verified from the prefix and the collection there; then one object
/// edited and put back is the one reported different.
pub(crate) fn verified_in_bucket(store: &S3, upload: bool) {
    let work = tempfile::tempdir().unwrap();
    let stems = outputs_in_bucket(store, work.path(), upload);
    let n = stems.len();
    let prefix = store.url("out");
    let (code, text) = verify(store, &[&prefix]);
    assert_eq!(code, Some(0), "{text}");
    let summary = format!("verify: {n} of {n} outputs checked: {n} identical, 0 different");
    assert!(text.contains(&summary), "{text}");
    for stem in &stems {
        let url = store.url(&format!("out/{stem}.tif"));
        assert!(text.contains(&format!("identical        {url}")), "{text}");
    }
    let collection = store.url("out/collection.json");
    let (code, text) = verify(store, &[&collection, "--sample", "1"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains(&format!("verify: 1 of {n} outputs checked: 1 identical")),
        "{text}"
    );

    // One output's metadata edited in a copy, the copy put back.
    let name = format!("out/{}.tif", stems[0]);
    let copy = work.path().join("edited.tif");
    std::fs::write(&copy, store.get(&name)).unwrap();
    crate::verify::edit(&copy, |ds| {
        gdal::Metadata::set_metadata_item(ds, "EDITED", "by hand", "").unwrap()
    });
    store.put(&name, std::fs::read(&copy).unwrap());
    let (code, text) = verify(store, &[&prefix]);
    assert_eq!(code, Some(3), "{text}");
    let edited = store.url(&name);
    assert!(
        text.contains(&format!("different        {edited}")),
        "{text}"
    );
    assert!(text.contains("metadata: dataset metadata EDITED"), "{text}");
    assert!(
        text.contains(&format!("{} identical, 1 different", n - 1)),
        "{text}"
    );
}

#[test]
fn outputs_in_a_bucket_are_verified_from_the_prefix_and_the_collection() {
    let _serial = super::server::serial();
    let Some(s3) = s3("verify") else { return };
    verified_in_bucket(&s3, false);
}

#[test]
fn a_prefix_with_no_output_and_a_link_out_of_the_prefix_are_said() {
    let _serial = super::server::serial();
    let Some(s3) = s3("verify-bad") else { return };
    let (code, text) = verify(&s3, &[&s3.url("nothing-here")]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("no output to verify"), "{text}");
    let collection = serde_json::json!({
        "type": "Collection",
        "links": [{"rel": "item", "href": "../../elsewhere/item.json"}],
    });
    s3.put("c/collection.json", collection.to_string().into_bytes());
    let (code, text) = verify(&s3, &[&s3.url("c/collection.json")]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("item link \"../../elsewhere/item.json\""),
        "{text}"
    );
    assert!(text.contains("it leaves the prefix"), "{text}");
}
