//! Structured logs on stderr for the networking subcommands (`tracing`): `RUST_LOG` when set
//! (e.g. `RUST_LOG=homa_io=debug`), else a level from the `-v` count.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the subscriber. `quiet_level` is the level without `-v` ("info" for a server,
/// "warn" for commands whose output is a report); each `-v` goes one level further.
pub(crate) fn init(verbose: u8, quiet_level: &str) {
    let level = match (quiet_level, verbose) {
        (_, 0) => quiet_level,
        ("warn", 1) => "info",
        ("warn", 2) | ("info", 1) => "debug",
        _ => "trace",
    };
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.is_empty() => EnvFilter::new(spec),
        _ => EnvFilter::new(level),
    };
    // A second init (tests calling `run` twice) keeps the first subscriber.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
