//! Buffered standard output, one record per line, and diagnostics that stay in order with it.

use std::io::{self, BufWriter, StdoutLock, Write};

use serde_json::Value;

use crate::error::Error;

/// Standard output, buffered. Diagnostics go through [`Output::warn`], which flushes first so
/// that on a terminal they appear next to the record they are about.
#[derive(Debug)]
pub(crate) struct Output {
    out: BufWriter<StdoutLock<'static>>,
}

impl Output {
    pub(crate) fn new() -> Output {
        Output { out: BufWriter::new(io::stdout().lock()) }
    }

    /// Writes one JSON object on its own line.
    pub(crate) fn json(&mut self, value: Value) -> Result<(), Error> {
        self.line(&value.to_string())
    }

    /// Writes one line.
    pub(crate) fn line(&mut self, line: &str) -> Result<(), Error> {
        writeln!(self.out, "{line}").map_err(Error::io("writing standard output"))
    }

    /// Prints `message` on stderr, after everything written so far.
    pub(crate) fn warn(&mut self, message: &str) -> Result<(), Error> {
        self.flush()?;
        // A closed stderr must not stop the decoding; the message has nowhere to go.
        let _ = writeln!(io::stderr(), "{message}");
        Ok(())
    }

    pub(crate) fn flush(&mut self) -> Result<(), Error> {
        self.out.flush().map_err(Error::io("writing standard output"))
    }
}
