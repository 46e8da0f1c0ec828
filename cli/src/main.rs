//! The `warpline` binary. See `warpline --help` and docs/pipeline.md.

#![forbid(unsafe_code)]

mod cli;

fn main() -> std::process::ExitCode {
    warpline::tune_allocator();
    cli::main()
}
