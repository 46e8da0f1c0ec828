//! Every `toml` example in docs/pipeline.md and every pipeline in pipelines/
//! is a valid pipeline.

use std::path::Path;

fn toml_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```toml") => current = Some(String::new()),
            (Some(_), "```") => blocks.extend(current.take()),
            (Some(block), text) => {
                block.push_str(text);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

#[test]
fn every_toml_example_in_the_reference_is_a_valid_pipeline() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/pipeline.md")).unwrap();
    let blocks = toml_blocks(&doc);
    assert!(blocks.len() >= 4, "found only {} examples", blocks.len());
    for (i, block) in blocks.iter().enumerate() {
        if let Err(e) = warpline::Pipeline::from_toml_str(block, &warpline::registry()) {
            panic!(
                "example {} of docs/pipeline.md is invalid:\n{e}\n{block}",
                i + 1
            );
        }
    }
}

/// pipelines/ and its folders (the cookbook's recipes in
/// pipelines/cookbook/).
#[test]
fn every_pipeline_file_validates() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("pipelines");
    let mut dirs = vec![root.clone()];
    let mut seen = 0;
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "toml") {
                seen += 1;
                if let Err(e) = warpline::Pipeline::from_path(&path, &warpline::registry()) {
                    panic!("{e}");
                }
            }
        }
    }
    assert!(seen >= 9, "{seen} pipelines in {}", root.display());
}

#[tokio::test]
async fn the_synthetic_reference_examples_run_to_completion() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/pipeline.md")).unwrap();
    let runnable: Vec<String> = toml_blocks(&doc)
        .into_iter()
        .filter(|b| b.contains("kind = \"generate\""))
        .collect();
    assert!(runnable.len() >= 4);
    for block in runnable {
        let p = warpline::Pipeline::from_toml_str(&block, &warpline::registry()).unwrap();
        let report = p.run().await.unwrap();
        assert_eq!(report.items.done, report.items.total, "{report}");
    }
}
