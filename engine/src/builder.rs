//! Building a pipeline in Rust code, without a file. The builder writes the
//! same TOML a file would hold and goes through the same compile step, so
//! every check (and every error message, with its key path) is the same.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::config::{ConfigErrors, Loader, Problem};
use crate::limit::Limits;
use crate::pipeline::Pipeline;
use crate::registry::Registry;

/// Builds a pipeline step by step.
///
/// ```
/// use serde_json::json;
/// use warpline_engine::{PipelineBuilder, Registry};
///
/// let pipeline = PipelineBuilder::new("thumbnails")
///     .source("generate", json!({ "count": 10 }))
///     .limit("cpu", json!({ "permits": 2 }))
///     .stage("work", "hold", json!({ "duration": "1ms", "workers": 4, "limits": ["cpu"] }))
///     .stage("sink", "discard", json!({}))
///     .build(&Registry::with_builtins())
///     .unwrap();
/// assert_eq!(pipeline.stages().len(), 2);
/// assert_eq!(pipeline.admission_bound(), 1 + (4 + 4) + (1 + 1));
/// ```
#[derive(Debug, Clone, Default)]
pub struct PipelineBuilder {
    pipeline: Map<String, Value>,
    source: Option<Value>,
    limits: Map<String, Value>,
    stages: Map<String, Value>,
    flow: Vec<String>,
    errors: Vec<Problem>,
    shared: Option<Limits>,
}

fn to_value(path: &str, settings: impl Serialize, errors: &mut Vec<Problem>) -> Map<String, Value> {
    match serde_json::to_value(settings) {
        Ok(Value::Object(m)) => m,
        Ok(Value::Null) => Map::new(),
        Ok(other) => {
            errors.push(Problem::new(
                path,
                format!("settings must be a table, got {other}"),
            ));
            Map::new()
        }
        Err(e) => {
            errors.push(Problem::new(
                path,
                format!("settings cannot be written: {e}"),
            ));
            Map::new()
        }
    }
}

impl PipelineBuilder {
    /// A pipeline with this name.
    pub fn new(name: &str) -> Self {
        let mut b = PipelineBuilder::default();
        b.pipeline.insert("name".into(), Value::from(name));
        b
    }

    /// A `[pipeline]` setting, such as `on_error` or `shutdown_deadline`.
    pub fn setting(mut self, key: &str, value: impl Serialize) -> Self {
        match serde_json::to_value(value) {
            Ok(v) => {
                self.pipeline.insert(key.to_owned(), v);
            }
            Err(e) => self
                .errors
                .push(Problem::new(format!("pipeline.{key}"), e.to_string())),
        }
        self
    }

    /// The source: its kind and settings.
    pub fn source(mut self, kind: &str, settings: impl Serialize) -> Self {
        let mut m = to_value("source", settings, &mut self.errors);
        m.insert("kind".into(), Value::from(kind));
        self.source = Some(Value::Object(m));
        self
    }

    /// A limiter (`{"permits": 4}`, `{"budget": "1GiB"}`, `{"per_second": 20}`
    /// or `{"shared": true}`), in acquisition order.
    pub fn limit(mut self, name: &str, settings: impl Serialize) -> Self {
        let m = to_value(&format!("limits.{name}"), settings, &mut self.errors);
        self.limits.insert(name.to_owned(), Value::Object(m));
        self
    }

    /// The next stage of the flow: its name, kind and settings (the
    /// engine's keys such as `workers` and `limits` included).
    pub fn stage(mut self, name: &str, kind: &str, settings: impl Serialize) -> Self {
        let mut m = to_value(&format!("stages.{name}"), settings, &mut self.errors);
        m.insert("kind".into(), Value::from(kind));
        self.stages.insert(name.to_owned(), Value::Object(m));
        self.flow.push(name.to_owned());
        self
    }

    /// Lets the pipeline draw on limiters shared with other pipelines.
    pub fn with_limits(mut self, shared: &Limits) -> Self {
        self.shared = Some(shared.clone());
        self
    }

    /// The pipeline as TOML text (what a file would say).
    pub fn to_toml(&self) -> Result<String, toml::ser::Error> {
        let mut pipeline = self.pipeline.clone();
        pipeline.insert("flow".into(), Value::from(self.flow.clone()));
        let mut root = Map::new();
        root.insert("pipeline".into(), Value::Object(pipeline));
        if let Some(s) = &self.source {
            root.insert("source".into(), s.clone());
        }
        if !self.limits.is_empty() {
            root.insert("limits".into(), Value::Object(self.limits.clone()));
        }
        root.insert("stages".into(), Value::Object(self.stages.clone()));
        toml::to_string(&Value::Object(root))
    }

    /// Compiles the pipeline, with every problem at once.
    pub fn build(&self, registry: &Registry) -> Result<Pipeline, ConfigErrors> {
        let fail = |problems| ConfigErrors {
            origin: "<builder>".to_owned(),
            problems,
            not_checked: Vec::new(),
        };
        if !self.errors.is_empty() {
            return Err(fail(self.errors.clone()));
        }
        let text = self
            .to_toml()
            .map_err(|e| fail(vec![Problem::new("<builder>", e.to_string())]))?;
        let mut loader = Loader::from_toml_str(&text);
        if let Some(shared) = &self.shared {
            loader = loader.with_limits(shared);
        }
        loader.load(registry)
    }
}
