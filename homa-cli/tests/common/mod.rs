//! Running the real `homa` binary.

use std::io::Write;
use std::process::{Command, Stdio};

/// What one run of `homa` did.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Run {
    /// Each stdout line parsed as JSON.
    pub(crate) fn json_lines(&self) -> Vec<serde_json::Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }
}

/// Runs `homa args...` with `stdin` as its standard input.
pub(crate) fn homa(args: &[&str], stdin: impl AsRef<[u8]>) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_homa"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("homa starts");
    let mut input = child.stdin.take().expect("stdin is piped");
    input.write_all(stdin.as_ref()).expect("homa reads its input");
    drop(input);
    let out = child.wait_with_output().expect("homa finishes");
    Run {
        code: out.status.code().expect("homa exits normally"),
        stdout: String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(out.stderr).expect("stderr is UTF-8"),
    }
}
