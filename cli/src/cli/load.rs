//! Loading a pipeline for a command: the file, `WARPLINE__` variables and
//! `--set` overrides, every problem printed; and the backends of global
//! rates, bound when the coordinator is connected.

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use warpline::engine::limit::{RateBackend, RateBackendError, RateBackendFactory};
use warpline::{Loader, Pipeline};

use super::EXIT_INVALID;

pub(super) fn parse_sets(sets: &[String]) -> Result<Vec<(String, String)>, String> {
    sets.iter()
        .map(|s| match s.split_once('=') {
            Some((k, v)) => Ok((k.trim().to_owned(), v.trim().to_owned())),
            None => Err(format!(
                "--set {s:?}: expected KEY=VALUE, e.g. --set stages.decode.workers=4"
            )),
        })
        .collect()
}

pub(super) fn loader(path: &Path, sets: &[String]) -> Result<Loader, String> {
    with_sets(Loader::from_path(path).with_env(), sets)
}

/// A pipeline given as text (`warpline warp`'s), called `name`, with the
/// overrides a file has: `WARPLINE__` variables, then `--set`.
pub(super) fn text_loader(text: &str, name: &str, sets: &[String]) -> Result<Loader, String> {
    with_sets(Loader::from_toml_str(text).named(name).with_env(), sets)
}

fn with_sets(mut loader: Loader, sets: &[String]) -> Result<Loader, String> {
    for (key, value) in parse_sets(sets)? {
        loader = loader.set(key, value);
    }
    Ok(loader)
}

/// The backends of `scope = "global"` rates, bound once the coordinator
/// is connected. The run's name, which names its keys in Redis, comes from
/// the pipeline, so a coordinated run compiles its pipeline once, with
/// these, and binds them after connecting. Unbound (`validate`, `plan`,
/// `enqueue`), a global rate's backend says the coordinator is not
/// connected.
#[derive(Clone, Default)]
pub(super) struct GlobalRates(Arc<OnceLock<RateBackendFactory>>);

impl GlobalRates {
    /// What the pipeline is compiled with: a backend per global rate that
    /// is made by the bound factory when first used.
    pub(super) fn factory(&self) -> RateBackendFactory {
        let bound = Arc::clone(&self.0);
        Arc::new(move |name: &str, per_second: f64, burst: u32| {
            Arc::new(LateRate {
                bound: Arc::clone(&bound),
                name: name.to_owned(),
                per_second,
                burst,
                backend: OnceLock::new(),
            }) as Arc<dyn RateBackend>
        })
    }

    /// Binds every global rate of the pipelines compiled with
    /// [`factory`](Self::factory) to `factory` (the coordinator's); the
    /// first binding stays.
    pub(super) fn bind(&self, factory: RateBackendFactory) {
        let _ = self.0.set(factory);
    }
}

/// A global rate whose backend is made when [`GlobalRates`] is bound.
struct LateRate {
    bound: Arc<OnceLock<RateBackendFactory>>,
    name: String,
    per_second: f64,
    burst: u32,
    backend: OnceLock<Arc<dyn RateBackend>>,
}

impl LateRate {
    fn backend(&self) -> Result<&Arc<dyn RateBackend>, RateBackendError> {
        let Some(factory) = self.bound.get() else {
            return Err(RateBackendError(
                "the coordinator is not connected".to_owned(),
            ));
        };
        Ok(self
            .backend
            .get_or_init(|| factory(&self.name, self.per_second, self.burst)))
    }
}

#[warpline::async_trait]
impl RateBackend for LateRate {
    async fn acquire(&self, key: &str) -> Result<Duration, RateBackendError> {
        self.backend()?.acquire(key).await
    }

    async fn widen(&self, key: &str) -> Result<f64, RateBackendError> {
        self.backend()?.widen(key).await
    }

    async fn pause(&self, key: &str, delay: Duration) -> Result<(), RateBackendError> {
        match self.backend() {
            Ok(backend) => backend.pause(key, delay).await,
            Err(_) => Ok(()),
        }
    }
}

/// Global rates that stay unbound: checked like any other rate, never run.
pub(super) fn not_connected() -> RateBackendFactory {
    GlobalRates::default().factory()
}

/// Loads a pipeline, printing every problem; `Err(code)` to exit with.
/// `global` makes the backends of `scope = "global"` rates.
pub(super) fn load_with(
    path: &Path,
    sets: &[String],
    global: Option<RateBackendFactory>,
) -> Result<Pipeline, u8> {
    let loaded = loader(path, sets).map(|l| match global {
        Some(g) => l.with_global_rates(g),
        None => l,
    });
    match loaded.map(|l| l.load(&warpline::registry())) {
        Err(usage) => {
            say_err!("error: {usage}");
            Err(EXIT_INVALID)
        }
        Ok(Err(errors)) => {
            say_err!("{errors}");
            Err(EXIT_INVALID)
        }
        Ok(Ok(p)) => Ok(p),
    }
}
