//! The log: `WARPLINE_LOG`'s filter (HTTP clients kept quiet), text or
//! JSON lines on stderr, above the progress bar.

use std::io::IsTerminal;

use super::LogFormat;

/// Crates whose debug logs quote URLs with their user names and passwords
/// (hyper's connection pool keys, reqwest's redirect targets): kept at
/// `info` when `WARPLINE_LOG` asks for `debug` or `trace` everywhere, unless
/// it names them.
const QUIET_CRATES: &[&str] = &["hyper", "hyper_util", "reqwest", "rustls", "h2"];

/// `WARPLINE_LOG`'s directives, with `CRATE=info` added for each of
/// [`QUIET_CRATES`] that no directive names when one asks for more than
/// `info` for every target.
fn log_directives(given: &str) -> String {
    use tracing_subscriber::filter::LevelFilter;
    let mut verbose = false;
    let mut targets = Vec::new();
    for d in given.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        // `LEVEL`, `TARGET`, `TARGET=LEVEL`, `TARGET[SPAN{FIELD=V}]=LEVEL`.
        let (target, level) = match d.rsplit_once('=') {
            Some((lhs, level)) if level.parse::<LevelFilter>().is_ok() => (lhs, level),
            _ if d.parse::<LevelFilter>().is_ok() => ("", d),
            _ => (d, "trace"),
        };
        let target = target.split(['[', '=']).next().unwrap_or_default();
        if target.is_empty() {
            verbose |= level
                .parse::<LevelFilter>()
                .is_ok_and(|l| l > LevelFilter::INFO);
        } else {
            targets.push(target);
        }
    }
    let mut directives = given.to_owned();
    if verbose {
        for quiet in QUIET_CRATES {
            // A directive applies to the targets it is a prefix of; one for
            // a part of the crate (`reqwest::connect`) is more specific than
            // `reqwest=info` and still wins there.
            let named = targets.iter().any(|t| quiet.starts_with(t));
            if !named {
                directives.push_str(&format!(",{quiet}=info"));
            }
        }
    }
    directives
}

pub(super) fn init_logging(format: LogFormat) {
    let filter = std::env::var("WARPLINE_LOG")
        .ok()
        .and_then(|given| tracing_subscriber::EnvFilter::try_new(log_directives(&given)).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new("warn,warpline::progress=info"));
    // A log line that cannot be written (stderr is a closed pipe) is
    // dropped: the default reports it on stderr, which panics there.
    // Colour only on a terminal (a log file or a pipe gets plain text),
    // and never with `NO_COLOR` set (https://no-color.org).
    let colour = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .log_internal_errors(false)
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(warpline_cli::progress::LogWriter);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn http_clients_stay_at_info_unless_named() {
        use super::log_directives;
        let quiet = ",hyper=info,hyper_util=info,reqwest=info,rustls=info,h2=info";
        assert_eq!(log_directives("debug"), format!("debug{quiet}"));
        assert_eq!(
            log_directives("info,[item]=trace"),
            format!("info,[item]=trace{quiet}")
        );
        // Named (`hyper` is a prefix of `hyper_util`, as the filter reads
        // it): left as asked.
        assert_eq!(
            log_directives("debug,hyper=trace,reqwest::connect=debug"),
            "debug,hyper=trace,reqwest::connect=debug,reqwest=info,rustls=info,h2=info"
        );
        // Nothing asks for more than `info` everywhere: nothing to add.
        for given in [
            "warn,warpline::progress=info",
            "warpline_engine=debug",
            "info",
            "off",
        ] {
            assert_eq!(log_directives(given), given);
        }
        for given in ["debug", "trace,hyper_util=debug", "warn,gdal=debug"] {
            assert!(tracing_subscriber::EnvFilter::try_new(log_directives(given)).is_ok());
        }
    }
}
