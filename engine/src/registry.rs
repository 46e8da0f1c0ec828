//! The kinds a pipeline file can name: `kind = "hold"` under a stage, `kind =
//! "generate"` under the source. Each kind is a factory that reads its own
//! settings (strictly: unknown keys are errors) and returns a ready stage or
//! source. The engine registers its synthetic kinds; `warpline-stages` adds
//! the raster ones; embedders add their own.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::limit::{Limiter, LimiterKind, Limits};
use crate::problem::Problem;
use crate::stage::{Handler, SourceSpec};

/// The settings of one stage or source, without the keys the engine reads
/// itself (`kind`, `workers`, `mailbox`, `limits`, `carry`, `release`).
#[derive(Debug, Clone)]
pub struct Settings {
    path: String,
    table: config::Map<String, config::Value>,
    limits: Limits,
    held: Vec<Limiter>,
    /// The keys of this table the engine reads itself, for error messages.
    engine_keys: &'static [&'static str],
    /// Limiters the stage said it charges itself (through [`limiter`]).
    ///
    /// [`limiter`]: Settings::limiter
    charged: std::cell::RefCell<Vec<Limiter>>,
    /// The problems [`read`](Settings::read) found: the table's own keys
    /// and values, whatever else the kind checks.
    read_problems: std::cell::RefCell<Vec<Problem>>,
}

impl Settings {
    pub(crate) fn new(
        path: String,
        table: config::Map<String, config::Value>,
        limits: Limits,
        held: Vec<Limiter>,
        engine_keys: &'static [&'static str],
    ) -> Self {
        Settings {
            path,
            table,
            limits,
            held,
            engine_keys,
            charged: std::cell::RefCell::new(Vec::new()),
            read_problems: std::cell::RefCell::new(Vec::new()),
        }
    }

    /// The limiters the stage's `limits` list holds, in acquisition order.
    pub fn stage_limits(&self) -> &[Limiter] {
        &self.held
    }

    /// The limiter a setting names, for a stage that charges it itself (for
    /// example by a Content-Length it learns mid-way) and keeps the ticket
    /// with the item ([`Item::keep`](crate::Item::keep)). `key` is the
    /// setting (`memory = "memory"`), for error messages. It must be of
    /// `kind`, and declared after every limiter the stage's `limits` list
    /// holds, so the charge keeps the one global acquisition order. Later
    /// stages see it as carried (and may `release` it).
    pub fn limiter(&self, key: &str, name: &str, kind: LimiterKind) -> Result<Limiter, Problem> {
        let Some(l) = self.limits.get(name) else {
            return Err(self.problem(
                key,
                format!(
                    "unknown limiter `{name}`; declared limiters: {}",
                    self.limits
                        .iter()
                        .map(|l| format!("`{}`", l.name()))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        };
        if l.kind() != kind {
            return Err(self.problem(
                key,
                format!(
                    "`{name}` is a {} limiter; this setting needs a {kind} limiter",
                    l.kind()
                ),
            ));
        }
        let pos = |x: &Limiter| self.limits.position(x.name());
        if let Some(after) = self.held.iter().find(|h| pos(h) > pos(l)) {
            return Err(self.problem(
                key,
                format!(
                    "`{name}` is charged while `{}` is held, but is declared before it; declare \
                     [limits.{name}] after [limits.{}] so every acquisition follows one order",
                    after.name(),
                    after.name()
                ),
            ));
        }
        self.charged.borrow_mut().push(l.clone());
        Ok(l.clone())
    }

    pub(crate) fn charged(&self) -> Vec<Limiter> {
        self.charged.borrow().clone()
    }

    /// What reading the settings found wrong with their keys and values
    /// (unknown keys, wrong types, values refused), whatever else the kind
    /// said: for a table whose engine keys did not read, whose kind's
    /// checks would rest on a guess.
    pub(crate) fn read_problems(&self) -> Vec<Problem> {
        self.read_problems.borrow().clone()
    }

    /// Settings from TOML text, for tests and for building kinds in code.
    pub fn from_toml(path: &str, text: &str) -> Result<Self, Problem> {
        let cfg = config::Config::builder()
            .add_source(config::File::from_str(text, config::FileFormat::Toml))
            .build()
            .map_err(|e| Problem::new(path, e.to_string()))?;
        let table = cfg
            .try_deserialize::<config::Map<String, config::Value>>()
            .map_err(|e| Problem::new(path, e.to_string()))?;
        Ok(Settings::new(
            path.to_owned(),
            table,
            Limits::default(),
            Vec::new(),
            &[],
        ))
    }

    /// Where these settings live in the pipeline file (`stages.decode`).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// A problem at `key` within these settings.
    pub fn problem(&self, key: &str, message: impl Into<String>) -> Problem {
        Problem::new(format!("{}.{key}", self.path), message)
    }

    /// A problem at `key` that comes from this machine (a CRS PROJ does not
    /// know, a GDAL driver or option, a directory).
    pub fn env_problem(&self, key: &str, message: impl Into<String>) -> Problem {
        Problem::environment(format!("{}.{key}", self.path), message)
    }

    /// Reads the settings into `T`, which should use
    /// `#[serde(deny_unknown_fields)]` so a misspelt key is an error.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, Vec<Problem>> {
        let mut problems = Vec::new();
        match self.read(&mut problems) {
            Some(t) if problems.is_empty() => Ok(t),
            _ => Err(problems),
        }
    }

    /// Reads the settings into `T` as [`parse`](Settings::parse) does,
    /// adding to `problems` every unknown key, every value of the wrong
    /// type and every value that did not read as its setting (a word no
    /// setting takes, a duration without a unit), all at once, each at its
    /// key path. Returns `T` without the refused values when those are all
    /// that is wrong, so the kind's own checks still run; `None` after an
    /// unknown key or a wrong type.
    pub fn read<T: DeserializeOwned>(&self, problems: &mut Vec<Problem>) -> Option<T> {
        let table = config::Value::new(None, config::ValueKind::Table(self.table.clone()));
        let mut found = Vec::new();
        let read = crate::lenient::deserialize_all(&self.path, table, self.engine_keys, &mut found);
        self.read_problems
            .borrow_mut()
            .extend(found.iter().cloned());
        problems.append(&mut found);
        read
    }
}

/// Builds a stage from its settings.
pub type StageFactory = Arc<dyn Fn(&Settings) -> Result<Handler, Vec<Problem>> + Send + Sync>;

/// Builds a source from its settings.
pub type SourceFactory =
    Arc<dyn Fn(&Settings) -> Result<Arc<dyn SourceSpec>, Vec<Problem>> + Send + Sync>;

/// What a stage kind gets where its pipeline says nothing, besides the
/// defaults of its own keys (docs/pipeline.md, "Defaults: the smallest
/// pipeline"). A kind registered without any says nothing: one worker,
/// and no share of the default memory budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KindDefaults {
    /// One worker per core (of those the [`Machine`](crate::machine::Machine)
    /// gives the process) when the stage's table has no `workers`, instead
    /// of one: for a blocking kind whose work is the CPU's.
    pub workers_per_core: bool,
    /// How the kind charges the pipeline's default memory budget.
    pub memory: DefaultCharge,
}

/// How a stage kind charges the default memory budget: as it would a
/// budget its pipeline declares, by the same code.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DefaultCharge {
    /// It does not (an item carries what earlier stages charged through
    /// it).
    #[default]
    None,
    /// The budget is put in the stage's `limits` and `carry`: the stage
    /// charges what its [`demand`](crate::Stage::demand) says it holds at
    /// its peak, and the item carries that on.
    Limits,
    /// The stage's own setting of this name names the budget (fetch's
    /// `memory`), and the stage charges it as it reads.
    Setting(&'static str),
}

/// The stage and source kinds a pipeline may name.
#[derive(Clone, Default)]
pub struct Registry {
    stages: BTreeMap<String, StageFactory>,
    sources: BTreeMap<String, SourceFactory>,
    defaults: BTreeMap<String, KindDefaults>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("stages", &self.stages.keys().collect::<Vec<_>>())
            .field("sources", &self.sources.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Registry {
    /// A registry with no kinds at all.
    pub fn empty() -> Self {
        Registry::default()
    }

    /// Adds (or replaces) a stage kind.
    pub fn register_stage<F>(&mut self, kind: &str, factory: F) -> &mut Self
    where
        F: Fn(&Settings) -> Result<Handler, Vec<Problem>> + Send + Sync + 'static,
    {
        self.stages.insert(kind.to_owned(), Arc::new(factory));
        self
    }

    /// Adds (or replaces) a source kind.
    pub fn register_source<F>(&mut self, kind: &str, factory: F) -> &mut Self
    where
        F: Fn(&Settings) -> Result<Arc<dyn SourceSpec>, Vec<Problem>> + Send + Sync + 'static,
    {
        self.sources.insert(kind.to_owned(), Arc::new(factory));
        self
    }

    /// Sets what a stage kind gets where its pipeline says nothing (see
    /// [`KindDefaults`]).
    pub fn set_defaults(&mut self, kind: &str, defaults: KindDefaults) -> &mut Self {
        self.defaults.insert(kind.to_owned(), defaults);
        self
    }

    /// What a stage kind gets where its pipeline says nothing.
    pub fn defaults(&self, kind: &str) -> KindDefaults {
        self.defaults.get(kind).copied().unwrap_or_default()
    }

    pub(crate) fn stage(&self, kind: &str) -> Option<&StageFactory> {
        self.stages.get(kind)
    }

    pub(crate) fn source(&self, kind: &str) -> Option<&SourceFactory> {
        self.sources.get(kind)
    }

    /// The stage kinds, sorted.
    pub fn stage_kinds(&self) -> Vec<&str> {
        self.stages.keys().map(String::as_str).collect()
    }

    /// The source kinds, sorted.
    pub fn source_kinds(&self) -> Vec<&str> {
        self.sources.keys().map(String::as_str).collect()
    }
}
