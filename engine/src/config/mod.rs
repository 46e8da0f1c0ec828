//! Loading a pipeline file: TOML read with the `config` crate (the file, then
//! `WARPLINE__...` environment overrides when asked for, then `--set
//! key=value` overrides), then one compile step (`compile`) that checks
//! everything and returns every problem at once, each naming its key path.

mod carried;
mod compile;
mod defaults;
mod file;

use std::fmt;
use std::path::{Path, PathBuf};

use crate::pipeline::Pipeline;
use crate::registry::Registry;

pub use crate::pipeline::OnError;
pub(crate) use crate::problem::{join, known, nearest};
pub use crate::problem::{Problem, Tier};
pub use file::{LimitSection, PipelineSection};

/// How much of this machine a load checks besides the file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum MachineChecks {
    /// None: the file alone (`run`, `plan`).
    #[default]
    None,
    /// What can be checked without the network (`validate`).
    Local,
    /// That, and what the pipeline will reach over the network (`validate
    /// --online`).
    Online,
}

/// Every problem found in a pipeline.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors {
    /// What file (or `<string>`) the problems are in.
    pub origin: String,
    /// The problems, in the order they were found.
    pub problems: Vec<Problem>,
    /// Checks that were not made because they depend on something that
    /// did not compile (each says what and why): a problem they would find
    /// could follow only from one of `problems`.
    pub not_checked: Vec<String>,
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.problems.len();
        write!(
            f,
            "{}: {n} problem{}",
            self.origin,
            if n == 1 { "" } else { "s" }
        )?;
        for p in &self.problems {
            write!(f, "\n  - {p}")?;
        }
        for n in &self.not_checked {
            write!(f, "\n  (not checked: {n})")?;
        }
        Ok(())
    }
}

impl Pipeline {
    /// Reads and compiles a pipeline file (no environment overrides; see
    /// [`Loader`] for those).
    pub fn from_path(path: impl AsRef<Path>, registry: &Registry) -> Result<Self, ConfigErrors> {
        Loader::from_path(path).load(registry)
    }

    /// Compiles a pipeline from TOML text.
    pub fn from_toml_str(text: &str, registry: &Registry) -> Result<Self, ConfigErrors> {
        Loader::from_toml_str(text).load(registry)
    }
}

enum Text {
    Path(PathBuf),
    Inline(String),
}

/// Reads a pipeline file with its overrides and compiles it.
///
/// ```
/// use warpline_engine::{config::Loader, Registry};
///
/// let pipeline = Loader::from_toml_str(r#"
///     [pipeline]
///     flow = ["work"]
///     [source]
///     kind = "generate"
///     count = 10
///     [stages.work]
///     kind = "hold"
///     duration = "1ms"
/// "#)
/// .set("stages.work.workers", "3")
/// .load(&Registry::with_builtins())
/// .unwrap();
/// assert_eq!(pipeline.stages()[0].workers, 3);
/// ```
pub struct Loader {
    text: Text,
    env: bool,
    sets: Vec<(String, String)>,
    shared: Option<crate::limit::Limits>,
    global: Option<crate::limit::RateBackendFactory>,
    machine: MachineChecks,
    /// The machine the defaults are sized from (this one unless a test
    /// gives another).
    facts: Option<crate::machine::Machine>,
    /// The name of a pipeline given as text.
    name: Option<String>,
}

impl fmt::Debug for Loader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Loader")
            .field("origin", &self.origin())
            .field("env", &self.env)
            .field("sets", &self.sets)
            .finish()
    }
}

/// An override's value: the TOML value `text` is, if it is exactly one
/// (so a quoted string loses its quotes, as in the file), else the text.
fn override_value(text: &str) -> config::Value {
    match format!("value = {text}").parse::<toml::Table>() {
        Ok(mut table) if table.len() == 1 => {
            table.remove("value").map_or_else(|| text.into(), from_toml)
        }
        _ => text.into(),
    }
}

fn from_toml(value: toml::Value) -> config::Value {
    match value {
        toml::Value::String(s) => s.into(),
        toml::Value::Integer(i) => i.into(),
        toml::Value::Float(f) => f.into(),
        toml::Value::Boolean(b) => b.into(),
        toml::Value::Datetime(d) => d.to_string().into(),
        toml::Value::Array(a) => a.into_iter().map(from_toml).collect::<Vec<_>>().into(),
        toml::Value::Table(t) => t
            .into_iter()
            .map(|(k, v)| (k, from_toml(v)))
            .collect::<config::Map<_, _>>()
            .into(),
    }
}

/// The environment variable prefix for overrides: `WARPLINE__STAGES__DECODE__WORKERS=4`.
pub const ENV_PREFIX: &str = "WARPLINE";

impl Loader {
    /// Reads the pipeline from a TOML file.
    pub fn from_path(path: impl AsRef<Path>) -> Self {
        Loader::of(Text::Path(path.as_ref().to_owned()))
    }

    /// Reads the pipeline from TOML text.
    pub fn from_toml_str(text: &str) -> Self {
        Loader::of(Text::Inline(text.to_owned()))
    }

    fn of(text: Text) -> Self {
        Loader {
            text,
            env: false,
            sets: Vec::new(),
            shared: None,
            global: None,
            machine: MachineChecks::None,
            facts: None,
            name: None,
        }
    }

    /// Also applies `WARPLINE__SECTION__KEY=value` environment variables
    /// (double underscores separate keys; names are lowercased).
    pub fn with_env(mut self) -> Self {
        self.env = true;
        self
    }

    /// Lets the pipeline use these limiters, shared with other pipelines of
    /// the process: a file declares `[limits.NAME] shared = true` to draw on
    /// the shared `NAME` instead of a limiter of its own.
    pub fn with_limits(mut self, shared: &crate::limit::Limits) -> Self {
        self.shared = Some(shared.clone());
        self
    }

    /// Also checks this machine for every stage that compiles (an output
    /// directory is writable, ...), in the same pass as the file, without
    /// the network: the environment tier of `warpline validate`, whose
    /// problems then come with the others (see
    /// [`Pipeline::check_environment`](crate::Pipeline::check_environment)).
    pub fn with_environment_checks(mut self) -> Self {
        self.machine = self.machine.max(MachineChecks::Local);
        self
    }

    /// Also checks, as [`with_environment_checks`](Self::with_environment_checks)
    /// does and in the same pass, what the source and every stage that
    /// compiles will reach over the network (an output bucket can be
    /// listed with the credentials at hand, ...): `warpline validate
    /// --online` (see [`Pipeline::check_online`](crate::Pipeline::check_online)).
    pub fn with_online_checks(mut self) -> Self {
        self.machine = MachineChecks::Online;
        self
    }

    /// Sizes the defaults (workers per core, the default memory budget)
    /// from `machine` instead of this one ([`Machine::this`]): for a test,
    /// or to plan for another machine.
    ///
    /// [`Machine::this`]: crate::machine::Machine::this
    pub fn with_machine(mut self, machine: crate::machine::Machine) -> Self {
        self.facts = Some(machine);
        self
    }

    /// Keeps rate limiters with `scope = "global"` with this backend (the
    /// coordinator's), shared by every worker of the run.
    pub fn with_global_rates(mut self, factory: crate::limit::RateBackendFactory) -> Self {
        self.global = Some(factory);
        self
    }

    /// Applies `key = value` last, as `--set key=value` does (`key` is a dotted
    /// path such as `stages.decode.workers`). `value` is read as a TOML value
    /// when it is one, as in the file (`8`, `true`, `"EPSG:3857"`,
    /// `["cpu", "memory"]`, `{ COMPRESS = "DEFLATE" }`), and otherwise taken
    /// as text (`EPSG:3857`, `cores`, `1GiB`, a path).
    pub fn set(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.sets.push((key.into(), value.into()));
        self
    }

    fn origin(&self) -> String {
        match (&self.text, &self.name) {
            (Text::Path(p), _) => p.display().to_string(),
            (Text::Inline(_), Some(name)) => name.clone(),
            (Text::Inline(_), None) => "<string>".to_owned(),
        }
    }

    /// Names a pipeline given as text (a job posted to a service, say):
    /// its problems are headed with `name` instead of `<string>`, and the
    /// pipeline is called `name` when its `[pipeline]` table gives none
    /// (instead of `pipeline`). No effect on a pipeline read from a file.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Reads, overrides and compiles, returning every problem at once.
    pub fn load(self, registry: &Registry) -> Result<Pipeline, ConfigErrors> {
        let origin = self.origin();
        let fail = |problems: Vec<Problem>| ConfigErrors {
            origin: origin.clone(),
            problems,
            not_checked: Vec::new(),
        };
        let mut builder = config::Config::builder();
        let default_name = match &self.text {
            Text::Path(p) => {
                if !p.is_file() {
                    let why = if p.is_dir() {
                        "a directory, not a pipeline file"
                    } else {
                        "no such file"
                    };
                    return Err(fail(vec![Problem::new(
                        "<file>",
                        format!("cannot read pipeline file {}: {why}", p.display()),
                    )]));
                }
                builder = builder
                    .add_source(config::File::from(p.as_path()).format(config::FileFormat::Toml));
                p.file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "pipeline".to_owned())
            }
            Text::Inline(t) => {
                builder = builder.add_source(config::File::from_str(t, config::FileFormat::Toml));
                self.name.clone().unwrap_or_else(|| "pipeline".to_owned())
            }
        };
        if self.env {
            builder = builder.add_source(
                config::Environment::with_prefix(ENV_PREFIX)
                    .prefix_separator("__")
                    .separator("__")
                    .try_parsing(true),
            );
        }
        let mut problems = Vec::new();
        for (key, value) in &self.sets {
            match builder.set_override(key.as_str(), override_value(value)) {
                Ok(b) => builder = b,
                Err(e) => {
                    problems.push(Problem::new(key.clone(), format!("cannot set: {e}")));
                    return Err(fail(problems));
                }
            }
        }
        let root = builder
            .build()
            .and_then(|c| c.try_deserialize::<config::Map<String, config::Value>>())
            .map_err(|e| fail(vec![Problem::new("<file>", e.to_string())]))?;
        self.compile(root, registry, &default_name)
            .map_err(|f| ConfigErrors {
                origin: origin.clone(),
                problems: f.problems,
                not_checked: f.not_checked,
            })
    }

    /// Compiles `root` with the defaults of this loader's machine. A
    /// default must not make a valid pipeline invalid: when the compile
    /// with the default budget fails, the file is compiled again without
    /// it, and the pipeline (if it compiles then) says why it has none.
    fn compile(
        &self,
        root: config::Map<String, config::Value>,
        registry: &Registry,
        default_name: &str,
    ) -> Result<Pipeline, compile::Failed> {
        let machine = self
            .facts
            .clone()
            .unwrap_or_else(|| crate::machine::Machine::this().clone());
        let compile = |root, memory| {
            compile::compile(
                root,
                registry,
                default_name,
                self.shared.as_ref(),
                self.global.as_ref(),
                self.machine,
                &defaults::Defaults {
                    machine: &machine,
                    memory,
                },
            )
        };
        match compile(root.clone(), defaults::MemoryDefault::Try) {
            Err(f) if f.put_memory => {
                let with = f
                    .problems
                    .first()
                    .map(|p| p.to_string())
                    .unwrap_or_default();
                compile(
                    root,
                    defaults::MemoryDefault::DoesNotFit(format!(
                        "the default budget does not fit this pipeline's limiter order (with \
                         it: {with}); declare [limits.memory] where it fits the order \
                         (docs/pipeline.md, \"Memory in a raster pipeline\")"
                    )),
                )
            }
            done => done,
        }
    }
}
