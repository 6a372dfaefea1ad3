//! The homa/python contender: Homa's asyncio API, one Python process per host running
//! `python.py` (embedded here), driven over pipes. Response times are the Python side's
//! CLOCK_MONOTONIC readings, so the pipe back adds nothing to them; the pipe there (and
//! any backlog in the Python process) counts, as it would for the application.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::super::topo::{Host, in_netns};
use super::{Client, Counters, Done, PORT, RESPONSE_BYTES, Server};
use crate::error::Error;

const SCRIPT: &str = include_str!("python.py");

/// One Python process, its pending calls, and the thread that reads its reports.
struct Process {
    child: Child,
    stdin: Mutex<Option<ChildStdin>>,
    pending: Arc<Mutex<HashMap<u64, Done>>>,
    next: AtomicU64,
    reader: JoinHandle<Counters>,
}

impl Process {
    /// Starts `python.py ARGS` in `host`'s namespace and waits for it to be ready.
    fn start(python: &str, host: &Host, args: &[String]) -> Result<Process, Error> {
        let mut child = in_netns(host, || {
            Command::new(python)
                .arg("-c")
                .arg(SCRIPT)
                .args(args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(Error::io(format!("starting {python} for the homa/python contender")))
        })?;
        // Read all along, so that a chatty process never blocks on a full pipe; the last
        // line explains a failed start.
        let stderr = BufReader::new(child.stderr.take().expect("piped"));
        let errors = std::thread::spawn(move || {
            stderr.lines().map_while(Result::ok).filter(|l| !l.trim().is_empty()).last()
        });
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        if stdout.read_line(&mut line).is_err() || line.trim() != "ready" {
            let _ = child.kill();
            let _ = child.wait();
            let last = errors.join().ok().flatten().unwrap_or_default();
            return Err(Error::Failed(format!(
                "the homa/python contender needs {python} with the package homa-transport \
                 (pip install homa-transport; --python names the interpreter): {}",
                match (last.as_str(), line.trim()) {
                    ("", "") => "it exited before it was ready",
                    ("", out) => out,
                    (err, _) => err,
                }
            )));
        }
        let pending: Arc<Mutex<HashMap<u64, Done>>> = Arc::default();
        let reader = {
            let pending = Arc::clone(&pending);
            std::thread::spawn(move || read_reports(stdout, &pending))
        };
        let stdin = Mutex::new(child.stdin.take());
        Ok(Process { child, stdin, pending, next: AtomicU64::new(0), reader })
    }

    /// Ends the input, waits for the process's last calls, and returns its counters.
    fn close(mut self) -> Counters {
        drop(self.stdin.lock().unwrap_or_else(|e| e.into_inner()).take());
        let counters = self.reader.join().unwrap_or_default();
        let _ = self.child.wait();
        counters
    }
}

/// Hands each "ID NS" or "ID !KIND" line to its call's `Done`, until the counters' line.
fn read_reports(stdout: BufReader<ChildStdout>, pending: &Mutex<HashMap<u64, Done>>) -> Counters {
    let clock = Clock::now();
    let mut counters = Counters::default();
    for line in stdout.lines() {
        let Ok(line) = line else { break };
        if line.starts_with('{') {
            counters = parse_counters(&line);
            break;
        }
        let Some((id, what)) = line.split_once(' ') else { continue };
        let Some(done) = id.parse().ok().and_then(|id| lock(pending).remove(&id)) else {
            continue;
        };
        match what.strip_prefix('!') {
            Some(kind) => done(Err(static_kind(kind))),
            None => match what.parse() {
                Ok(ns) => done(Ok(clock.instant(ns))),
                Err(_) => done(Err("python")),
            },
        }
    }
    // A process that ended early answers nothing more.
    for (_, done) in lock(pending).drain() {
        done(Err("python_exited"));
    }
    counters
}

fn parse_counters(line: &str) -> Counters {
    let v: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
    Counters {
        homa_retransmissions: v["retransmitted_packets"].as_u64().unwrap_or(0),
        homa_resends: v["resends"].as_u64().unwrap_or(0),
        homa_busy: v["busy"].as_u64().unwrap_or(0),
        homa_host_drops: v["host_drops"].as_u64().unwrap_or(0),
        homa_late_timers: v["late_timers"].as_u64().unwrap_or(0),
        cpu_s: v["cpu_s"].as_f64().unwrap_or(0.0),
    }
}

/// The kinds of Python's homa errors a call may end with, as the report counts them.
fn static_kind(kind: &str) -> &'static str {
    const KINDS: [&str; 6] =
        ["timeout", "timed_out", "peer_silent", "unreachable", "aborted", "shutdown"];
    KINDS.into_iter().find(|&k| k == kind).unwrap_or("python")
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Turns CLOCK_MONOTONIC readings (Python's `time.monotonic_ns()`) into `Instant`s.
struct Clock {
    at: Instant,
    ns: u64,
}

impl Clock {
    fn now() -> Clock {
        Clock { at: Instant::now(), ns: monotonic_ns() }
    }

    fn instant(&self, ns: u64) -> Instant {
        match ns.checked_sub(self.ns) {
            Some(after) => self.at + Duration::from_nanos(after),
            None => self.at - Duration::from_nanos(self.ns - ns),
        }
    }
}

fn monotonic_ns() -> u64 {
    // SAFETY: all-zero bytes are a valid timespec; clock_gettime writes into it.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a live timespec to write into.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub(super) struct PyServer(Process);

impl PyServer {
    pub(super) fn open(python: &str, host: &Host, link_mbps: u32) -> Result<PyServer, Error> {
        let args = ["server".into(), host.ip.to_string(), PORT.to_string(), link_mbps.to_string()];
        debug_assert_eq!(RESPONSE_BYTES, 100, "python.py answers 100 bytes");
        Process::start(python, host, &args).map(PyServer)
    }
}

impl Server for PyServer {
    fn close(self: Box<Self>) -> Counters {
        self.0.close()
    }
}

pub(super) struct PyClient(Process);

impl PyClient {
    pub(super) fn open(
        python: &str,
        host: &Host,
        server: &Host,
        link_mbps: u32,
    ) -> Result<PyClient, Error> {
        let args = [
            "client".into(),
            host.ip.to_string(),
            server.ip.to_string(),
            PORT.to_string(),
            link_mbps.to_string(),
        ];
        Process::start(python, host, &args).map(PyClient)
    }
}

impl Client for PyClient {
    fn start(&self, size: usize, _short: bool, done: Done) {
        let p = &self.0;
        let id = p.next.fetch_add(1, Ordering::Relaxed);
        lock(&p.pending).insert(id, done);
        let sent = match lock(&p.stdin).as_mut() {
            Some(stdin) => writeln!(stdin, "{id} {size}").and_then(|()| stdin.flush()).is_ok(),
            None => false,
        };
        if !sent && let Some(done) = lock(&p.pending).remove(&id) {
            done(Err("python_exited"));
        }
    }

    fn close(self: Box<Self>) -> Counters {
        self.0.close()
    }
}
