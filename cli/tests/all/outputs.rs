//! One output per input (issue 16, item 5): inputs with the same file name
//! each get an id of their own, and a write that would land on the output
//! of another input of the same run fails loudly instead of being skipped
//! as "exists" or overwriting it.

use crate::binary::warpline;
use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{hashes, sample_files};
use warpline::engine::{async_trait, Input, Source, SourceError, SourceSpec};

/// fetch -> decode -> write, reading `source` (a TOML `[source]` body),
/// writing to `out` with `exists`.
fn pipeline(source: &str, out: &Path, exists: &str) -> String {
    common::copy_pipeline(source, out, &format!("exists = \"{exists}\""))
}

/// Three different tiles: the first two share a file name, the third is
/// named as the second's de-duplicated id used to be.
fn three_inputs(work: &Path) -> Vec<PathBuf> {
    let tiles = sample_files(&work.join("made"), 1, 64);
    let names = [
        "tiles/t000030.tif",
        "skewed/t000030.tif",
        "crafted/t000030-2.tif",
    ];
    names
        .iter()
        .zip(&tiles)
        .map(|(name, tile)| {
            let p = work.join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::copy(tile, &p).unwrap();
            p
        })
        .collect()
}

#[test]
fn inputs_with_the_same_name_each_get_their_own_output() {
    let work = tempfile::tempdir().unwrap();
    let inputs = three_inputs(work.path());
    // Each input alone, under a name of its own: the output it should get.
    let reference = work.path().join("reference");
    let alone: Vec<String> = inputs
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let q = work.path().join(format!("alone/{i}.tif"));
            std::fs::create_dir_all(q.parent().unwrap()).unwrap();
            std::fs::copy(p, &q).unwrap();
            q.display().to_string()
        })
        .collect();
    let inline = format!("kind = \"inline\"\ninputs = {}", common::toml_list(&alone));
    let report = common::run(&pipeline(&inline, &reference, "skip"));
    assert_eq!(report.items.done, 3, "{report}");
    let want = hashes(&reference);

    let list = work.path().join("list.txt");
    let lines: Vec<String> = inputs.iter().map(|p| p.display().to_string()).collect();
    std::fs::write(&list, lines.join("\n")).unwrap();
    let out = work.path().join("out");
    let toml = work.path().join("p.toml");
    let source = format!("kind = \"list\"\npath = {:?}", list.display().to_string());
    std::fs::write(&toml, pipeline(&source, &out, "skip")).unwrap();
    let run = warpline().arg("run").arg(&toml).output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert_eq!(
        run.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        stdout.contains("3 items, 3 done, 0 skipped, 0 failed"),
        "{stdout}"
    );
    let got = hashes(&out);
    let expected = [
        ("t000030.tif", "0.tif"),
        ("t000030~2.tif", "1.tif"),
        ("t000030-2.tif", "2.tif"),
    ];
    assert_eq!(got.len(), 3, "{got:?}");
    for (output, alone) in expected {
        assert_eq!(
            got.get(output),
            want.get(alone),
            "{output} is not the output of its own input ({alone}): {got:?}"
        );
    }
}

/// A source of inputs with the ids given (as a custom source of an
/// embedding program may make them).
struct Given(Vec<(String, String)>);

struct GivenRun(std::vec::IntoIter<(String, String)>);

impl SourceSpec for Given {
    fn open(&self) -> Result<Box<dyn Source>, warpline::OpenError> {
        Ok(Box::new(GivenRun(self.0.clone().into_iter())))
    }
}

#[async_trait]
impl Source for GivenRun {
    async fn next(&mut self) -> Option<Result<Input, SourceError>> {
        let (id, source) = self.0.next()?;
        Some(Ok(Input {
            id,
            source,
            size_hint: None,
            meta: Default::default(),
        }))
    }
}

/// Runs `inputs` (id, path) in order, one at a time, through fetch ->
/// decode -> write into `out`.
fn run_given(inputs: &[(&str, &Path)], out: &Path, exists: &str) -> warpline::RunReport {
    let given: Vec<(String, String)> = inputs
        .iter()
        .map(|(id, p)| (id.to_string(), p.display().to_string()))
        .collect();
    let mut registry = warpline::registry();
    registry.register_source("given", move |_| {
        Ok(Arc::new(Given(given.clone())) as Arc<dyn SourceSpec>)
    });
    // One worker each: the first input reaches write first.
    let toml = pipeline("kind = \"given\"", out, exists).replace("workers = 2", "workers = 1");
    let pipeline = warpline::Pipeline::from_toml_str(&toml, &registry).unwrap();
    common::runtime().block_on(pipeline.run()).unwrap()
}

/// Asserts `report` failed the second input at write, naming both.
fn assert_second_refused(report: &warpline::RunReport, what: &str) {
    assert_eq!(report.items.failed, 1, "{what}: {report}");
    let f = &report.failures[0];
    assert_eq!(
        (f.id.as_str(), f.stage.as_str()),
        ("x_y", "write"),
        "{what}: {f:?}"
    );
    assert_eq!(f.kind, warpline::engine::ErrorKind::Permanent, "{what}");
    for part in ["x_y", "x/y", "b.tif", "two inputs cannot share one output"] {
        assert!(
            f.message.contains(part),
            "{what}: {part:?} not in {:?}",
            f.message
        );
    }
}

#[test]
fn a_write_onto_another_inputs_output_of_the_same_run_fails_naming_both() {
    let work = tempfile::tempdir().unwrap();
    let tiles = sample_files(&work.path().join("tiles"), 1, 64);
    let (a, b) = (work.path().join("a.tif"), work.path().join("b.tif"));
    std::fs::copy(&tiles[0], &a).unwrap();
    std::fs::copy(&tiles[1], &b).unwrap();
    // `x/y` and `x_y` are different ids with one output file, `x_y.tif`.
    let inputs = [("x/y", a.as_path()), ("x_y", b.as_path())];
    let alone = work.path().join("alone");
    assert_eq!(run_given(&inputs[..1], &alone, "skip").items.done, 1);
    let a_output = hashes(&alone);

    for exists in ["skip", "overwrite", "error"] {
        let out = work.path().join(format!("out-{exists}"));
        let report = run_given(&inputs, &out, exists);
        assert_eq!(report.items.done, 1, "{exists}: {report}");
        assert_second_refused(&report, exists);
        assert_eq!(hashes(&out), a_output, "{exists}: the first input's output");
    }

    // Resuming: the first input's output is there from an earlier run; the
    // first is skipped, the second is not skipped as if it were done.
    let report = run_given(&inputs, &alone, "skip");
    assert_eq!(report.items.skipped, 1, "resume: {report}");
    assert_second_refused(&report, "resume");
    assert_eq!(hashes(&alone), a_output, "resume");
}
