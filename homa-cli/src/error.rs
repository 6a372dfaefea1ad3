//! How a subcommand fails, and the exit status each failure maps to.

use std::io;
use std::process::ExitCode;

/// Why a subcommand did not succeed.
#[derive(Debug)]
pub(crate) enum Error {
    /// The input is bad (exit 2); the message says how.
    Input(String),
    /// Some inputs were bad and each was reported on stderr as it was met (exit 2).
    Reported,
    /// Reading or writing `what` failed (exit 1).
    Io { what: String, source: io::Error },
    /// The run completed but did not succeed, e.g. calls failed (exit 1); the message says
    /// what failed, after the report.
    Failed(String),
}

impl Error {
    /// An [`Error::Io`] for `what`, for use with `map_err`.
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
        let what = what.into();
        move |source| Error::Io { what, source }
    }

    /// Prints the message, if any, and returns the exit status.
    pub(crate) fn report(self) -> ExitCode {
        match self {
            Error::Input(message) => {
                eprintln!("error: {message}");
                ExitCode::from(2)
            }
            Error::Reported => ExitCode::from(2),
            // A reader that went away (`homa decode ... | head`) is not a failure.
            Error::Io { source, .. } if source.kind() == io::ErrorKind::BrokenPipe => {
                ExitCode::SUCCESS
            }
            Error::Io { what, source } => {
                eprintln!("error: {what}: {source}");
                ExitCode::from(1)
            }
            Error::Failed(message) => {
                eprintln!("error: {message}");
                ExitCode::from(1)
            }
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Input(message) | Error::Failed(message) => f.write_str(message),
            Error::Reported => f.write_str("bad input, reported above"),
            Error::Io { what, source } => write!(f, "{what}: {source}"),
        }
    }
}
