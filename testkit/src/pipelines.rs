//! Pipeline files the tests and benchmarks share: the head every pipeline
//! starts with, the generated-input head of the engine's tests, and the
//! fetch -> decode -> reproject -> write raster pipeline ([`Raster`]) the
//! product's tests and the raster benchmark run with their own figures.

/// A TOML array of strings.
pub fn toml_list<S: AsRef<str>>(items: &[S]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{:?}", s.as_ref())).collect();
    format!("[{}]", quoted.join(", "))
}

/// A pipeline's TOML: `[pipeline]` with `flow`, `[source]` with the keys in
/// `source` (its `kind` first), then `rest` (more source keys, then
/// limiter and stage tables).
pub fn pipeline(flow: &[&str], source: &str, rest: &str) -> String {
    format!("{}{rest}", head(flow, "", source))
}

/// `[pipeline]` with `flow` and the keys in `keys`, then `[source]` with
/// the keys in `source`.
fn head(flow: &[&str], keys: &str, source: &str) -> String {
    let keys = if keys.is_empty() {
        String::new()
    } else {
        format!("{}\n", keys.trim_end())
    };
    format!(
        "[pipeline]\nflow = {}\n{keys}[source]\n{}\n",
        toml_list(flow),
        source.trim_end()
    )
}

/// A pipeline's TOML with the given `flow` and a `generate` source of
/// `count` inputs, followed by `rest` (more source keys, then limits and
/// stages).
pub fn generated(flow: &[&str], count: u64, rest: &str) -> String {
    pipeline(flow, &format!("kind = \"generate\"\ncount = {count}"), rest)
}

/// A `[stages.KIND]` table for decode or reproject: `workers` workers (a
/// TOML value: `2`, `"cores"`) under the `memory` and `cpu` limits,
/// releasing the memory the item held and carrying the memory it holds
/// now (keys of its own may follow).
pub fn cpu_stage(kind: &str, workers: &str) -> String {
    format!(
        r#"[stages.{kind}]
kind = "{kind}"
workers = {workers}
limits = ["memory", "cpu"]
release = ["memory"]
carry = ["memory"]
"#
    )
}

/// The fetch -> decode -> reproject -> write pipeline over rasters: fetch
/// under `connections` (and `limits`), decode and reproject under the
/// `memory` budget and the `cpu` permits ([`cpu_stage`]), then write. Each
/// field is TOML text; [`Raster::default`] is one worker a stage, four
/// connections and 512 MiB.
#[derive(Debug, Clone, Copy)]
pub struct Raster<'a> {
    /// More `[pipeline]` keys (after the flow).
    pub pipeline: &'a str,
    /// The `[source]` table's keys.
    pub source: &'a str,
    /// The `connections` limiter's permits, and the fetch stage's workers.
    pub connections: u32,
    /// More limiter tables, declared after `connections` (so acquired after
    /// it) and before `memory` and `cpu`.
    pub limits: &'a str,
    /// The fetch stage's `limits` list.
    pub fetch_limits: &'a str,
    /// More keys of the fetch stage.
    pub fetch: &'a str,
    /// The `memory` limiter's budget.
    pub budget: &'a str,
    /// The `cpu` limiter's permits.
    pub cpu: &'a str,
    /// Workers of decode, reproject and write.
    pub workers: &'a str,
    /// The decode stage's own keys.
    pub decode: &'a str,
    /// The reproject stage's own keys.
    pub reproject: &'a str,
    /// The write stage's own keys.
    pub write: &'a str,
}

impl Default for Raster<'_> {
    fn default() -> Self {
        Raster {
            pipeline: "",
            source: "",
            connections: 4,
            limits: "",
            fetch_limits: r#"["connections"]"#,
            fetch: "",
            budget: "\"512MiB\"",
            cpu: "1",
            workers: "1",
            decode: "",
            reproject: "",
            write: "",
        }
    }
}

impl Raster<'_> {
    /// The pipeline's TOML.
    pub fn toml(&self) -> String {
        let Raster {
            pipeline,
            source,
            connections,
            limits,
            fetch_limits,
            fetch,
            budget,
            cpu,
            workers,
            decode,
            reproject,
            write,
        } = *self;
        let head = head(&["fetch", "decode", "reproject", "write"], pipeline, source);
        let decode_stage = cpu_stage("decode", workers);
        let reproject_stage = cpu_stage("reproject", workers);
        format!(
            r#"{head}[limits.connections]
permits = {connections}
{limits}
[limits.memory]
budget = {budget}
[limits.cpu]
permits = {cpu}
[stages.fetch]
kind = "fetch"
workers = {connections}
limits = {fetch_limits}
memory = "memory"
{fetch}
{decode_stage}{decode}
{reproject_stage}{reproject}
[stages.write]
kind = "write"
workers = {workers}
{write}
"#
        )
    }
}
