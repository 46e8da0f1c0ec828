//! What the command line is: the commands, their flags and the exit
//! codes (the coordinator's flags live beside its commands, in
//! `coordinated`). Parsed by clap; nothing here runs.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use super::{EnqueueArgs, NamedRunArgs, RedisArgs};

/// Every input ended done or skipped.
pub(super) const EXIT_OK: u8 = 0;
/// warpline could not start or finish the run (unreadable source, unwritable
/// report file, ...).
pub(super) const EXIT_ERROR: u8 = 1;
/// The command line or a pipeline file is invalid.
pub(super) const EXIT_INVALID: u8 = 2;
/// The run finished but some items failed.
pub(super) const EXIT_ITEMS_FAILED: u8 = 3;
/// The run was aborted because an item failed and `on_error = "abort"`.
pub(super) const EXIT_ABORTED_ON_ERROR: u8 = 4;
/// A coordinated worker gave up on Redis: it was out of reach for
/// `--redis-timeout`.
pub(super) const EXIT_COORDINATOR_LOST: u8 = 5;
/// The run was interrupted by Ctrl-C / SIGINT or SIGTERM.
pub(super) const EXIT_INTERRUPTED: u8 = 130;

const AFTER_HELP: &str = "\
Examples:
  warpline demo
  warpline validate pipelines/*.toml
  warpline plan pipelines/demo.toml
  warpline run pipelines/synthetic.toml --report report.json --report-html report.html
  warpline run my.toml --set stages.decode.workers=4 --failures failed.jsonl
  warpline run my.toml --retry-failed failed.jsonl
  warpline warp -t_srs EPSG:3857 -r cubic -tr 30 30 'scenes/*.tif' out/mercator
  warpline verify out/demo/output/collection.json --sample 5
  WARPLINE__STAGES__WORK__WORKERS=8 warpline run pipelines/synthetic.toml

Exit codes: 0 all items done or skipped; 1 could not run; 2 invalid pipeline or
usage; 3 some items failed; 4 aborted on error (on_error = \"abort\"); 5 a
coordinated worker gave up on Redis (out of reach for --redis-timeout);
130 interrupted (Ctrl-C or SIGTERM). verify: 0 all identical; 3 some
different; 4 some not re-derivable, none different.

Logs go to stderr; filter them with WARPLINE_LOG (like RUST_LOG), e.g.
WARPLINE_LOG=debug. The pipeline file reference is docs/pipeline.md.";

/// `warpline warp --help`: the gdalwarp options it takes, and the keys
/// they set (docs/pipeline.md has the same table).
pub(super) const WARP_HELP: &str = "\
gdalwarp's options, in any case and any order, and the keys they set:
  -t_srs SRS (required)          reproject.crs
  -s_srs SRS                     reproject.src_crs
  -ct STRING                     reproject.coordinate_operation
  -to NAME=VALUE (repeatable)    reproject.transformer_options
  -vshift | -novshift            reproject.vertical_shift
  -s_coord_epoch E, -t_coord_epoch E   reproject.src_coord_epoch, dst_coord_epoch
  -order N | -tps | -rpc | -geoloc     reproject.transformer (and order)
  -et ERROR                      reproject.error_threshold
  -refine_gcps TOL [MIN]         reproject.refine_gcps
  -te XMIN YMIN XMAX YMAX        reproject.extent
  -te_srs SRS                    reproject.extent_crs
  -tr XRES YRES                  reproject.resolution
  -tap                           reproject.tap
  -ts WIDTH HEIGHT               reproject.size
  -ovr LEVEL|AUTO|AUTO-n|NONE    reproject.overview
  -wo NAME=VALUE (repeatable)    reproject.warp_options
  -ot TYPE, -wt TYPE             reproject.dtype, working_type
  -srcnodata \"V [V...]\"          reproject.src_nodata
  -dstnodata \"V [V...]\"          reproject.dst_nodata
  -srcalpha | -nosrcalpha        reproject.src_alpha
  -dstalpha                      reproject.dst_alpha
  -r METHOD                      reproject.resampling
  -wm MEMORY                     reproject.warp_memory (MB below 10000, else bytes)
  -cutline FILE, -cl LAYER, -cwhere EXPR, -csql SQL, -cblend DIST, -crop_to_cutline
                                 reproject.cutline, cutline_layer, cutline_where,
                                 cutline_sql, cutline_blend, crop_to_cutline
  -nomd, -cvmd VALUE             reproject.metadata = false, conflicting_metadata
  -b N, -srcband N (repeatable)  reproject.bands
  -if DRIVER (repeatable)        decode.drivers (default GTiff only)
  -oo NAME=VALUE (repeatable)    decode.open_options
  -of GTiff|COG                  write.format (default GTiff)
  -co NAME=VALUE (repeatable)    write.creation_options
  -overwrite                     write.exists = \"overwrite\" (default \"skip\": resume)
  -q, -quiet                     --progress off
  -multi, -wo NUM_THREADS=N      taken, left out: they change only speed
Refused, by name (exit code 2): -doo, -setci, -dstband, --config, --debug, --optfile.

Unlike gdalwarp, which writes one output file, warpline warp writes one output
per input into OUTDIR, named after the input ({id}.tif), and never warps into an
existing file. docs/pipeline.md (`warpline warp`) says more.

Examples:
  warpline warp -t_srs EPSG:3857 -r cubic -tr 30 30 -co COMPRESS=DEFLATE \\
      'scenes/*.tif' out/mercator
  warpline warp -t_srs EPSG:4326 -of COG @tiles.txt out/wgs84 --report report.json
  warpline warp -t_srs EPSG:3857 s3://bucket/a.tif out --print-pipeline > warp.toml";

/// warpline: fetch, decode, reproject and write raster tiles, with every
/// resource bounded and every input accounted for.
#[derive(Debug, Parser)]
#[command(name = "warpline", version, about, after_help = AFTER_HELP)]
pub(super) struct Cli {
    /// Log lines as text or as JSON objects.
    #[arg(long, value_enum, global = true, default_value_t = LogFormat::Text)]
    pub(super) log_format: LogFormat,
    #[command(subcommand)]
    pub(super) command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum Format {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum ProgressMode {
    /// A bar on a terminal; otherwise a summary line in the log every 10 s.
    Auto,
    /// A live view per stage (items queued, working, passed on, failed,
    /// rate), per limiter (use) and of the failures: redrawn every second
    /// on a terminal, otherwise in the log every 10 s.
    Stages,
    /// Never a bar; the summary line only.
    Log,
    /// Nothing.
    Off,
}

/// What `run`, `demo` and `warp` share.
#[derive(Debug, Clone, Args)]
pub(super) struct RunArgs {
    /// Override a setting, e.g. `--set stages.decode.workers=4`; applied
    /// after the file and WARPLINE__ environment variables. VALUE is read as
    /// TOML when it is TOML (`'"EPSG:3857"'`, `'["cpu"]'`), else as text
    /// (`EPSG:3857`). Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(super) sets: Vec<String>,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub(super) report: Option<PathBuf>,
    /// Also write the report as a self-contained HTML page with a timeline.
    #[arg(long, value_name = "FILE")]
    pub(super) report_html: Option<PathBuf>,
    /// Write every event (admitted, stage started/finished, done, skipped,
    /// failed) as one JSON line to this file.
    #[arg(long, value_name = "FILE")]
    pub(super) events: Option<PathBuf>,
    /// Write each failed item as one JSON line to this file.
    #[arg(long, value_name = "FILE")]
    pub(super) failures: Option<PathBuf>,
    /// Serve Prometheus metrics at this address (e.g. 127.0.0.1:9898) while
    /// the run lasts.
    #[arg(long, value_name = "ADDR")]
    pub(super) metrics: Option<std::net::SocketAddr>,
    /// How progress is shown.
    #[arg(long, value_enum, default_value_t = ProgressMode::Auto)]
    pub(super) progress: ProgressMode,
    /// Admit only the inputs of shard INDEX of COUNT (`3/10`, counted from
    /// 0), split by a fixed hash of each input's id. `auto/COUNT` takes the
    /// index from JOB_COMPLETION_INDEX, SLURM_ARRAY_TASK_ID or
    /// AWS_BATCH_JOB_ARRAY_INDEX. Not with --coordinator, whose workers
    /// share one queue instead.
    #[arg(long, value_name = "INDEX/COUNT")]
    pub(super) shard: Option<warpline::engine::shard::Shard>,
}

#[derive(Debug, Subcommand)]
pub(super) enum Command {
    /// Run a pipeline and print its report.
    Run {
        /// The pipeline file (TOML).
        pipeline: PathBuf,
        #[command(flatten)]
        args: RunArgs,
        #[command(flatten)]
        redis: RedisArgs,
        /// Run only the items listed in a failures file of an earlier run
        /// (the pipeline's source is read again; only those ids are admitted).
        /// Not with --coordinator: a coordinated run's failures are in its
        /// dead-letter stream.
        #[arg(long, value_name = "FILE")]
        retry_failed: Option<PathBuf>,
    },
    /// Warp rasters with gdalwarp's options: one output per input, named
    /// after it, in OUTDIR. Runs the pipeline the options mean, as `run`
    /// runs a file; `--print-pipeline` prints it as TOML instead.
    #[command(after_long_help = WARP_HELP)]
    Warp {
        /// gdalwarp's options (-t_srs is required), then the inputs:
        /// files, URLs, s3://, az:// or gs:// objects, one pattern
        /// ('scenes/*.tif', 's3://bucket/scenes/*.tif') or @LIST (a file
        /// of one input a line), then the output directory.
        #[arg(
            value_name = "GDALWARP_OPTIONS/INPUTS/OUTDIR",
            required = true,
            num_args = 1..
        )]
        gdalwarp: Vec<String>,
        /// Print the pipeline as TOML instead of running it; grow it, then
        /// `warpline run` it.
        #[arg(long, conflicts_with_all = [
            "sets", "report", "report_html", "events", "failures", "metrics", "progress",
            "shard", "retry_failed",
        ])]
        print_pipeline: bool,
        #[command(flatten)]
        args: RunArgs,
        /// Run only the items listed in a failures file of an earlier run
        /// of the same command.
        #[arg(long, value_name = "FILE")]
        retry_failed: Option<PathBuf>,
    },
    /// Run the demo: make sample tiles in four CRSs, serve them on a
    /// loopback HTTP server, and fetch, decode, reproject (to EPSG:3857) and
    /// write them as COGs with pipelines/demo.toml. Needs no network and no
    /// data files.
    Demo {
        /// Where the tile list and the outputs go.
        #[arg(long, value_name = "DIR", default_value = "out/demo")]
        dir: PathBuf,
        #[command(flatten)]
        args: RunArgs,
    },
    /// Check outputs against their provenance: make each again from the
    /// inputs and settings its GeoTIFF records (written with the write
    /// stage's `stac = true`) and say whether it is identical, different
    /// (pixels or metadata, and how) or not re-derivable (an input changed
    /// or cannot be read). Exit 0 all identical, 3 some different, 4 none
    /// different but some not re-derivable, 1 nothing to verify.
    Verify {
        /// A folder of outputs (its .tif files, subfolders too), the
        /// run's collection.json, or a bucket prefix (s3://, az://, gs://:
        /// its .tif objects, or the collection.json there).
        target: PathBuf,
        /// Check only N outputs, spread evenly over the sorted list.
        #[arg(long, value_name = "N")]
        sample: Option<usize>,
        /// Compare the full-resolution pixels and metadata with what the
        /// gdalwarp command of the recorded options makes instead.
        #[arg(long)]
        gdalwarp: bool,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// The object store's server for a bucket prefix (else the
        /// environment's, as for the stages, else the cloud's).
        #[arg(long, value_name = "URL")]
        endpoint: Option<String>,
    },
    /// Check pipeline files in tiers (schema, graph, environment) and print
    /// every problem found; exit 0 when all are valid.
    Validate {
        /// The pipeline files (TOML).
        #[arg(required = true)]
        pipelines: Vec<PathBuf>,
        /// Override a setting before checking, as for `run`. Repeatable.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
        /// Text for people, JSON for tools.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Also check what the pipelines will reach over the network (an
        /// output bucket can be listed with the credentials at hand). Off:
        /// validate opens no connection to anything but this machine.
        #[arg(long)]
        online: bool,
    },
    /// Put the inputs of a pipeline's source in the run's work queue in
    /// Redis, once each (enqueueing twice adds nothing).
    Enqueue {
        /// The pipeline file (TOML).
        pipeline: PathBuf,
        /// Override a setting, as for `run`. Repeatable.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
        #[command(flatten)]
        redis: EnqueueArgs,
    },
    /// Show a Redis-coordinated run's progress across workers.
    Status {
        #[command(flatten)]
        redis: NamedRunArgs,
        /// Text for people, JSON for tools.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// List a Redis-coordinated run's dead letters: each item's id, input,
    /// deliveries and last error.
    Dead {
        #[command(flatten)]
        redis: NamedRunArgs,
        /// Text for people, JSON for tools.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Move dead letters of a Redis-coordinated run back to its work queue
    /// (their deliveries counted from 0 again); then start workers.
    Requeue {
        #[command(flatten)]
        redis: NamedRunArgs,
        /// The items to move (their ids, as `dead` lists them).
        #[arg(
            value_name = "ID",
            required_unless_present = "all",
            conflicts_with = "all"
        )]
        ids: Vec<String>,
        /// Move every dead letter.
        #[arg(long)]
        all: bool,
    },
    /// Show the pipeline as it will run: stages, the admission bound,
    /// limiters with resolved numbers, GDAL's cache, estimated peak memory.
    Plan {
        /// The pipeline file (TOML).
        pipeline: PathBuf,
        /// Override a setting, as for `run`. Repeatable.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
        /// Text for people, JSON for tools.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// How many of the first inputs to size for the estimate of peak
        /// memory (local files are read; 0: none).
        #[arg(long, value_name = "N", default_value_t = warpline_cli::plan::memory::DEFAULT_SAMPLE)]
        sample: usize,
    },
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        // clap's own checks (conflicts and groups name arguments that
        // exist in every subcommand, no two flags alike), which it would
        // otherwise run only when a user gives that subcommand.
        super::Cli::command().debug_assert();
    }
}
