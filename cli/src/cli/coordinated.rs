//! The commands of a Redis-coordinated run: `enqueue`, `status`, `dead`,
//! `requeue`, and what `run --coordinator` checks before and after.

use std::path::Path;

use clap::Args;
use warpline_cli::coordinator::Coordinator;

use super::{load_with, not_connected, runtime, Format, EXIT_ERROR, EXIT_OK};

/// `run`'s flags for a Redis-coordinated run: where the shared work queue
/// lives, and how this worker takes from it.
#[derive(Debug, Args)]
pub(super) struct RedisArgs {
    /// Read inputs from the run's work queue in Redis (filled by `warpline
    /// enqueue`) instead of the pipeline's source; keep `scope = "global"`
    /// rates there.
    #[arg(long, value_name = "redis://HOST:PORT")]
    pub(super) coordinator: Option<String>,
    /// The run's name in Redis, as given to `enqueue` (default: the
    /// pipeline's name).
    #[arg(long, value_name = "NAME")]
    pub(super) run: Option<String>,
    /// With --coordinator: this worker's name (default: HOST-PID).
    #[arg(long, value_name = "NAME")]
    consumer: Option<String>,
    /// With --coordinator: deliveries of an item before it goes to the
    /// dead-letter stream (an item failed by a permanent error goes there
    /// at once).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_DELIVERIES)]
    max_deliveries: u32,
    /// With --coordinator: claim an item from another worker when it has
    /// been pending this long: a live worker renews its items' claims every third of it, so
    /// only a dead worker's go idle; they move within 1.25x this.
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    reclaim_after: String,
    /// With --coordinator: how long this worker keeps trying while Redis
    /// is out of reach (restarting, frozen, cut off) before it gives up
    /// with exit code 5. What finished meanwhile is acknowledged once Redis
    /// is back.
    #[arg(long, value_name = "DURATION", default_value = "120s")]
    redis_timeout: String,
}

/// `enqueue`'s flags: the Redis server and the run's name there.
#[derive(Debug, Args)]
pub(super) struct EnqueueArgs {
    /// The Redis server that holds the run's work queue.
    #[arg(long, value_name = "redis://HOST:PORT")]
    coordinator: String,
    /// The run's name in Redis (default: the pipeline's name); workers
    /// then take `--run` with the same name.
    #[arg(long, value_name = "NAME")]
    run: Option<String>,
}

/// The flags of `status`, `dead` and `requeue`, which take no pipeline:
/// the Redis server and the run's name, both required.
#[derive(Debug, Args)]
pub(super) struct NamedRunArgs {
    /// The Redis server that holds the run's work queue.
    #[arg(long, value_name = "redis://HOST:PORT")]
    coordinator: String,
    /// The run's name in Redis: the pipeline's name, unless `enqueue` was
    /// given another with --run.
    #[arg(long, value_name = "NAME")]
    run: String,
}

/// `--max-deliveries` when not given.
const DEFAULT_MAX_DELIVERIES: u32 = 3;

impl RedisArgs {
    pub(super) async fn connect(&self, pipeline_name: &str) -> anyhow::Result<Option<Coordinator>> {
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
        let c = Coordinator::connect(url, settings)
            .await
            .map_err(|e| anyhow::anyhow!(e))?;
        Ok(Some(c))
    }
}

/// Connects to run `run` for a command that is not a worker (the
/// worker's settings are their defaults, unused).
async fn connect_to(url: &str, run: &str) -> anyhow::Result<Coordinator> {
    let settings = warpline_cli::coordinator::Settings {
        run: run.to_owned(),
        consumer: format!("warpline-cli-{}", std::process::id()),
        max_deliveries: DEFAULT_MAX_DELIVERIES,
        reclaim_after: std::time::Duration::from_secs(30),
        give_up_after: std::time::Duration::from_secs(120),
    };
    Coordinator::connect(url, settings)
        .await
        .map_err(|e| anyhow::anyhow!(e))
}

pub(super) fn enqueue(path: &Path, sets: &[String], redis: &EnqueueArgs) -> anyhow::Result<u8> {
    let pipeline = match load_with(path, sets, Some(not_connected())) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    runtime()?.block_on(async {
        let run = redis.run.as_deref().unwrap_or(pipeline.name());
        let c = connect_to(&redis.coordinator, run).await?;
        let source = pipeline.source().open().map_err(|e| anyhow::anyhow!(e))?;
        let (added, already) = c.enqueue(source).await.map_err(|e| anyhow::anyhow!(e))?;
        say!("{}", enqueued(added, already));
        Ok(EXIT_OK)
    })
}

pub(super) fn status(redis: &NamedRunArgs, format: Format) -> anyhow::Result<u8> {
    runtime()?.block_on(async {
        let c = connect_to(&redis.coordinator, &redis.run).await?;
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

/// `enqueued 3 inputs (1 was there already)`.
fn enqueued(added: u64, already: u64) -> String {
    format!(
        "enqueued {added} input{} ({already} {} there already)",
        if added == 1 { "" } else { "s" },
        if already == 1 { "was" } else { "were" }
    )
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
pub(super) fn dead(redis: &NamedRunArgs, format: Format) -> anyhow::Result<u8> {
    runtime()?.block_on(async {
        let c = connect_to(&redis.coordinator, &redis.run).await?;
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
pub(super) fn requeue(redis: &NamedRunArgs, ids: Option<&[String]>) -> anyhow::Result<u8> {
    runtime()?.block_on(async {
        let c = connect_to(&redis.coordinator, &redis.run).await?;
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

#[cfg(test)]
mod tests {
    #[test]
    fn enqueued_counts_agree_with_their_nouns() {
        assert_eq!(
            super::enqueued(1, 1),
            "enqueued 1 input (1 was there already)"
        );
        assert_eq!(
            super::enqueued(3, 0),
            "enqueued 3 inputs (0 were there already)"
        );
    }
}
