//! `warpline warp`: gdalwarp's command line as a pipeline. The gdalwarp
//! flags become the keys of the decode, reproject and write stages
//! (`flags`), the inputs a source and the last name the output directory
//! (`pipeline`); the TOML text made of them is compiled with the registry
//! and run as `warpline run` runs a file (`execute`: progress, report,
//! exit codes), or printed with `--print-pipeline`. Flags warpline cannot
//! honour are refused by name, with exit code 2.

mod flags;
mod pipeline;
mod toml;

use std::ffi::OsString;
use std::path::Path;

use warpline::{ConfigErrors, Pipeline};

use super::execute::execute;
use super::load::text_loader;
use super::{only_ids, or_error, runtime, ProgressMode, RunArgs, EXIT_INVALID, EXIT_OK};

/// What `warpline warp` was given.
#[derive(Debug)]
pub(super) struct WarpCommand<'a> {
    /// gdalwarp's arguments: flags, inputs, the output directory.
    pub(super) gdalwarp: &'a [String],
    pub(super) print_pipeline: bool,
    pub(super) args: &'a RunArgs,
    pub(super) retry_failed: Option<&'a Path>,
}

/// The command line as clap is to read it: for `warp`, warpline's own
/// flags (`--report FILE`, `--set K=V`, ...), wherever they are, first,
/// then `--` and gdalwarp's arguments in their order. clap would read a
/// flag after the first file name as one more file name, and gdalwarp's
/// `-tr` as its own short flags.
pub(super) fn clap_order(argv: Vec<OsString>) -> Vec<OsString> {
    let cli = <super::Cli as clap::CommandFactory>::command();
    let takes_value = |a: &clap::Arg| a.get_action().takes_values();
    // The subcommand: the first word that is neither a flag nor a global
    // flag's value.
    let mut at = 1;
    while let Some(word) = argv.get(at).and_then(|w| w.to_str()) {
        let global = cli
            .get_arguments()
            .find(|a| a.get_long().is_some_and(|l| word == format!("--{l}")));
        match global {
            Some(a) if takes_value(a) => at += 2,
            _ if word.starts_with('-') => at += 1,
            _ => break,
        }
    }
    let Some(warp) = cli.find_subcommand("warp") else {
        return argv;
    };
    if argv.get(at).and_then(|w| w.to_str()) != Some("warp") {
        return argv;
    }
    let ours: Vec<&clap::Arg> = warp
        .get_arguments()
        .chain(cli.get_arguments().filter(|a| a.is_global_set()))
        .collect();
    let (mut flags, mut gdalwarp) = (argv[..=at].to_vec(), Vec::new());
    let mut rest = argv[at + 1..].iter();
    while let Some(word) = rest.next() {
        let text = word.to_string_lossy();
        if text == "--" {
            gdalwarp.extend(rest.by_ref().cloned());
            break;
        }
        let name = text
            .strip_prefix("--")
            .map(|l| l.split_once('=').map_or(l, |(n, _)| n));
        // Some(None): `--help`; Some(Some(arg)): one of warp's flags.
        let known = match name {
            None => None,
            Some("help") => Some(None),
            Some(n) => ours.iter().find(|a| a.get_long() == Some(n)).map(Some),
        };
        match known {
            None => gdalwarp.push(word.clone()),
            Some(arg) => {
                flags.push(word.clone());
                if arg.is_some_and(|a| takes_value(a)) && !text.contains('=') {
                    flags.extend(rest.next().cloned());
                }
            }
        }
    }
    flags.push("--".into());
    flags.extend(gdalwarp);
    flags
}

/// The pipeline's name, in its `[pipeline]` table and in messages.
const NAME: &str = "warp";

pub(super) fn warp(c: &WarpCommand<'_>) -> u8 {
    let request = match flags::parse(c.gdalwarp) {
        Ok(w) => w,
        Err(problems) => {
            for p in problems {
                say_err!("error: {p}");
            }
            return EXIT_INVALID;
        }
    };
    if request.help {
        // gdalwarp's `-h`, `-help`: the help `--help` prints.
        let cli = <super::Cli as clap::CommandFactory>::command();
        if let Err(help) = cli.try_get_matches_from(["warpline", "warp", "--help"]) {
            let _ = help.print();
        }
        return EXIT_OK;
    }
    let text = match pipeline::text(&request, c.gdalwarp) {
        Ok(t) => t,
        Err(e) => {
            say_err!("error: {e}");
            return EXIT_INVALID;
        }
    };
    if c.print_pipeline {
        // Printed only when `warpline run` would take it.
        if let Err(code) = compile(&text, &[]) {
            return code;
        }
        use std::io::Write as _;
        let _ = write!(std::io::stdout().lock(), "{text}");
        return EXIT_OK;
    }
    for note in &request.left_out {
        say_err!("warpline warp: {note}");
    }
    let only_ids = match only_ids(c.retry_failed) {
        Ok(ids) => ids,
        Err(code) => return code,
    };
    let mut args = c.args.clone();
    if request.quiet {
        args.progress = ProgressMode::Off;
    }
    or_error(run(&text, &args, only_ids))
}

/// Compiles the pipeline with the environment's and `--set` overrides,
/// as `warpline run` compiles a file; prints every problem, with the flag
/// each key came from.
fn compile(text: &str, sets: &[String]) -> Result<Pipeline, u8> {
    let loaded = text_loader(text, NAME, sets).map(|l| l.load(&warpline::registry()));
    match loaded {
        Err(usage) => {
            say_err!("error: {usage}");
            Err(EXIT_INVALID)
        }
        Ok(Err(errors)) => {
            say_err!("{errors}");
            say_flags(&errors);
            Err(EXIT_INVALID)
        }
        Ok(Ok(p)) => Ok(p),
    }
}

/// Which flags set the keys the problems name.
fn say_flags(errors: &ConfigErrors) {
    let mut seen = Vec::new();
    for p in &errors.problems {
        let Some(key) = p.path.strip_prefix("stages.") else {
            continue;
        };
        for f in flags::FLAGS {
            let stage_key = f.key.split([' ', ',']).next().unwrap_or_default();
            let of = key
                .strip_prefix(stage_key)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']));
            if of && !seen.contains(&(p.path.as_str(), f.name)) {
                seen.push((p.path.as_str(), f.name));
            }
        }
    }
    for (path, flag) in seen {
        say_err!("  ({path} is {flag}'s key)");
    }
    say_err!(
        "  (`warpline warp ... --print-pipeline` prints the pipeline made of the command line)"
    );
}

/// Runs the pipeline as `warpline run` runs a file.
fn run(
    text: &str,
    args: &RunArgs,
    only_ids: Option<std::collections::HashSet<String>>,
) -> anyhow::Result<u8> {
    runtime()?.block_on(async {
        match compile(text, &args.sets) {
            Ok(pipeline) => execute(&pipeline, args, only_ids, None).await,
            Err(code) => Ok(code),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::clap_order;

    fn order(line: &str) -> String {
        let argv = line.split(' ').map(Into::into).collect();
        let words: Vec<String> = clap_order(argv)
            .into_iter()
            .map(|w| w.to_string_lossy().into_owned())
            .collect();
        words.join(" ")
    }

    #[test]
    fn warplines_flags_go_before_gdalwarps_arguments() {
        assert_eq!(
            order(
                "warpline --log-format json warp -t_srs EPSG:3857 a.tif --report r.json -tr 1 1 \
                 out --print-pipeline --set=a=b --progress off --log-format text -h"
            ),
            "warpline --log-format json warp --report r.json --print-pipeline --set=a=b \
             --progress off --log-format text -- -t_srs EPSG:3857 a.tif -tr 1 1 out -h"
        );
        assert_eq!(
            order("warpline warp -r near a -- --report b"),
            "warpline warp -- -r near a --report b"
        );
        assert_eq!(
            order("warpline run p.toml --report r"),
            "warpline run p.toml --report r"
        );
    }
}
