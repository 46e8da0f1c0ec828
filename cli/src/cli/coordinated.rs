//! The commands of a Redis-coordinated run: `enqueue`, `status`, `dead`,
//! `requeue`, and what `run --coordinator` checks before and after.

use std::path::Path;

use clap::Args;
use warpline_cli::coordinator::Coordinator;

use super::{load_with, not_connected, runtime, Format, EXIT_ERROR, EXIT_INVALID, EXIT_OK};

/// Where a run's shared work queue lives.
#[derive(Debug, Args)]
pub(super) struct RedisArgs {
    /// Read inputs from the run's work queue in Redis (filled by `warpline
    /// enqueue`) instead of the pipeline's source; keep `scope = "global"`
    /// rates there.
    #[arg(long, value_name = "redis://HOST:PORT")]
    pub(super) coordinator: Option<String>,
    /// The run's name in Redis (`run`, `enqueue`: default the pipeline's
    /// name; `status`, `dead`, `requeue`: required).
    #[arg(long, value_name = "NAME")]
    pub(super) run: Option<String>,
    /// `run` only: this worker's name (default: HOST-PID).
    #[arg(long, value_name = "NAME")]
    consumer: Option<String>,
    /// `run` only: deliveries of an item before it goes to the dead-letter stream (an
    /// item failed by a permanent error goes there at once).
    #[arg(long, value_name = "N", default_value_t = 3)]
    max_deliveries: u32,
    /// `run` only: claim an item from another worker when it has been pending this
    /// long: a live worker renews its items' claims every third of it, so
    /// only a dead worker's go idle; they move within 1.25x this.
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    reclaim_after: String,
    /// `run` only: how long a worker keeps trying while Redis is out of reach
    /// (restarting, frozen, cut off) before it gives up with exit code 5.
    /// What finished meanwhile is acknowledged once Redis is back.
    #[arg(long, value_name = "DURATION", default_value = "120s")]
    redis_timeout: String,
}

impl RedisArgs {
    pub(super) async fn connect(
        &self,
        pipeline_name: &str,
    ) -> anyhow::Result<Option<warpline_cli::coordinator::Coordinator>> {
        let Some(url) = &self.coordinator else {
            return Ok(None);
        };
        let reclaim_after = warpline::engine::units::parse_duration(&self.reclaim_after)
            .map_err(|e| anyhow::anyhow!("--reclaim-after: {e}"))?;
        let give_up_after = warpline::engine::units::parse_duration(&self.redis_timeout)
            .map_err(|e| anyhow::anyhow!("--redis-timeout: {e}"))?;
        let consumer = self.consumer.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/etc/hostname").unwrap_or_else(|_| "host".into());
            format!("{}-{}", host.trim(), std::process::id())
        });
        let settings = warpline_cli::coordinator::Settings {
            run: self.run.clone().unwrap_or_else(|| pipeline_name.to_owned()),
            consumer,
            max_deliveries: self.max_deliveries.max(1),
            reclaim_after,
            give_up_after,
        };
        let c = warpline_cli::coordinator::Coordinator::connect(url, settings)
            .await
            .map_err(|e| anyhow::anyhow!(e))?;
        Ok(Some(c))
    }
}

pub(super) fn enqueue(path: &Path, sets: &[String], redis: &RedisArgs) -> anyhow::Result<u8> {
    let pipeline = match load_with(path, sets, Some(not_connected())) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    if redis.coordinator.is_none() {
        say_err!("error: enqueue needs --coordinator redis://HOST:PORT");
        return Ok(EXIT_INVALID);
    }
    runtime()?.block_on(async {
        let c = redis
            .connect(pipeline.name())
            .await?
            .expect("checked above");
        let source = pipeline.source().open().map_err(|e| anyhow::anyhow!(e))?;
        let (added, already) = c.enqueue(source).await.map_err(|e| anyhow::anyhow!(e))?;
        say!("enqueued {added} inputs ({already} were there already)");
        Ok(EXIT_OK)
    })
}

pub(super) fn status(redis: &RedisArgs, format: Format) -> anyhow::Result<u8> {
    runtime()?.block_on(async {
        let c = match connect_named(redis, "status").await? {
            Ok(c) => c,
            Err(code) => return Ok(code),
        };
        let s = c.status().await.map_err(|e| anyhow::anyhow!(e))?;
        match format {
            Format::Json => say!("{}", serde_json::to_string_pretty(&s)?),
            Format::Text => say!(
                "run `{}`: {} enqueued, {} done, {} dead, {} pending{}",
                s.run,
                s.enqueued,
                s.done,
                s.dead,
                s.pending,
                if s.complete {
                    ": complete"
                } else if s.enqueued == 0 {
                    " (nothing was enqueued under this name: check --run, or run `warpline enqueue` first)"
                } else {
                    ""
                }
            ),
        }
        Ok(EXIT_OK)
    })
}

/// The run's name for commands that take no pipeline: `--run` is needed.
fn run_name(redis: &RedisArgs, command: &str) -> Option<String> {
    if redis.run.is_none() {
        say_err!("error: {command} needs --run NAME (the run's name: the pipeline's name unless `enqueue` was given --run)");
    }
    redis.run.clone()
}

/// Connects for a command that takes no pipeline; `Err(code)` when it
/// cannot (the problem is said).
async fn connect_named(
    redis: &RedisArgs,
    command: &str,
) -> anyhow::Result<Result<Coordinator, u8>> {
    let Some(run) = run_name(redis, command) else {
        return Ok(Err(EXIT_INVALID));
    };
    match redis.connect(&run).await? {
        Some(c) => Ok(Ok(c)),
        None => {
            say_err!("error: {command} needs --coordinator redis://HOST:PORT");
            Ok(Err(EXIT_INVALID))
        }
    }
}

/// Before a worker starts: a run nothing was enqueued for is a mistake (a
/// wrong `--run`, or `enqueue` forgotten), not an empty success.
pub(super) async fn nothing_enqueued(c: &Coordinator) -> anyhow::Result<Option<u8>> {
    let s = c.status().await.map_err(|e| anyhow::anyhow!(e))?;
    if s.enqueued > 0 {
        return Ok(None);
    }
    say_err!(
        "error: nothing was enqueued under the run name `{}`: check --run, or run \
         `warpline enqueue` first",
        s.run
    );
    Ok(Some(EXIT_ERROR))
}

/// `warpline dead`: the run's dead letters.
pub(super) fn dead(redis: &RedisArgs, format: Format) -> anyhow::Result<u8> {
    runtime()?.block_on(async {
        let c = match connect_named(redis, "dead").await? {
            Ok(c) => c,
            Err(code) => return Ok(code),
        };
        let dead = c.dead_letters().await.map_err(|e| anyhow::anyhow!(e))?;
        match format {
            Format::Json => say!("{}", serde_json::to_string_pretty(&dead)?),
            Format::Text => {
                say!("run `{}`: {} dead", c.settings().run, dead.len());
                for d in &dead {
                    say!(
                        "{}\t{}\t{} deliveries\t{}",
                        d.id,
                        d.source,
                        d.deliveries,
                        d.error
                    );
                }
            }
        }
        Ok(EXIT_OK)
    })
}

/// `warpline requeue`: dead letters back to the queue.
pub(super) fn requeue(redis: &RedisArgs, ids: Option<&[String]>) -> anyhow::Result<u8> {
    runtime()?.block_on(async {
        let c = match connect_named(redis, "requeue").await? {
            Ok(c) => c,
            Err(code) => return Ok(code),
        };
        let (moved, missing) = c.requeue(ids).await.map_err(|e| anyhow::anyhow!(e))?;
        say!(
            "requeued {} item{} of run `{}`: start workers to run them",
            moved.len(),
            if moved.len() == 1 { "" } else { "s" },
            c.settings().run
        );
        if missing.is_empty() {
            return Ok(EXIT_OK);
        }
        say_err!(
            "error: not dead letters of this run: {}",
            missing.join(", ")
        );
        Ok(EXIT_ERROR)
    })
}
