//! `homa soak`: a long run under loss that shows whether anything grows. A server and a
//! client in two network namespaces joined by a veth pair, random loss on both sides, many
//! calls of mixed sizes in flight in a closed loop; the process's resident memory, open
//! descriptors and threads sampled at intervals.

use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use homa_core::testnet::Rng;
use homa_io::{Call, Socket};
use homa_sim::Workload;
use serde_json::json;

use crate::bench::veth::Veth;
use crate::error::Error;
use crate::netns::{self, Teardown, sh};

/// Run Homa for a long time under loss and report whether memory, descriptors or threads
/// grow, and whether any call fails (root: it makes network namespaces).
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Examples:
  sudo homa soak                                   (30 minutes, W4, 1,000 in flight, 1 % loss)
  sudo homa soak --duration 60 --warmup 10 --in-flight 200 --json soak.json

A server and a client run in this process, in two network namespaces joined by a veth pair \
(MTU 1500, addresses from 198.18.0.0/15), removed at the end and on SIGINT or SIGTERM. nftables \
drops --loss % of the packets entering each namespace at random. The client keeps --in-flight \
calls going, each of a size drawn from --workload (cut at 1,000,000 bytes), and starts the next \
as one completes. Every --sample seconds a line gives the calls completed and failed, the \
process's heap in use (malloc's live blocks), its resident memory once malloc has given back \
the free memory it keeps (malloc_trim; \"kept\" says how much that was), open descriptors and \
threads. The run passes (exit 0) when no call failed and, after --warmup, the heap in use and \
the resident memory over the second half of the samples averaged at most --max-growth % above \
the first half's, and descriptors and threads did not grow. (Untrimmed, resident memory \
follows the highest total of message bytes in flight so far, which random sizes raise now and \
then however long the run: malloc keeps freed buffers for the next messages.)")]
pub(crate) struct Args {
    /// Seconds to run.
    #[arg(long, default_value_t = 1800.0)]
    duration: f64,
    /// Seconds at the start whose growth does not count (buffers and tables fill up).
    #[arg(long, default_value_t = 60.0)]
    warmup: f64,
    /// Calls kept in flight.
    #[arg(long, default_value_t = 1000)]
    in_flight: usize,
    /// Percent of the packets dropped on arrival in each namespace (0..=50).
    #[arg(long, default_value_t = 1)]
    loss: u32,
    /// Message sizes: w1..w5, or a CDF file (cut at 1,000,000 bytes).
    #[arg(long, default_value = "w4")]
    workload: String,
    /// Percent the heap in use and resident memory may grow after the warm-up (see below).
    #[arg(long, default_value_t = 5.0)]
    max_growth: f64,
    /// Seconds between samples.
    #[arg(long, default_value_t = 10.0)]
    sample: f64,
    /// Seed of the message sizes.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also write every sample and the verdict as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// Homa's largest message by default; larger workload sizes are cut to it.
const MAX_MESSAGE: u64 = 1_000_000;
/// How long calls in flight at the end may take to finish.
const DRAIN: Duration = Duration::from_secs(30);

/// One sample of the process.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: f64,
    completed: u64,
    failed: u64,
    heap: u64,
    /// Resident memory once malloc gave back the free memory it kept.
    rss: u64,
    /// What that gave back: freed memory malloc kept since the previous sample.
    kept: u64,
    fds: u64,
    threads: u64,
}

pub(crate) fn run(args: &Args) -> Result<(), Error> {
    crate::logging::init(0, "warn"); // a failed call says why
    if !netns::is_root() {
        return Err(Error::Input("homa soak makes network namespaces: run it as root".into()));
    }
    if args.loss > 50 || args.in_flight == 0 || args.sample <= 0.0 || args.duration <= 0.0 {
        return Err(Error::Input(
            "--loss must be 0..=50, --in-flight at least 1, --sample and --duration positive"
                .into(),
        ));
    }
    let workload = Workload::load(&args.workload).map_err(|e| Error::Input(e.to_string()))?;
    let teardown = Teardown::default();
    teardown.on_signals("homa soak");
    let result = soak(args, &workload, &teardown);
    teardown.run();
    result
}

fn soak(args: &Args, workload: &Workload, teardown: &Teardown) -> Result<(), Error> {
    let veth = Veth::create(teardown, 1, 1500)?;
    for ns in [&veth.server_ns, &veth.client_ns] {
        set_loss(ns, args.loss)?;
    }
    // Loss makes calls slower, not fail: the client keeps the default timeout.
    let echo = veth.echo(4000)?;
    let server_addr = echo.server.local_addr();
    let (completed, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (completed, failed, stop) = (completed.clone(), failed.clone(), stop.clone());
        let client = Arc::clone(&echo.client);
        let sizes: Vec<u64> = sizes(workload, args.seed).take(1 << 16).collect();
        let in_flight = args.in_flight;
        std::thread::spawn(move || {
            closed_loop(&client, server_addr, &sizes, in_flight, &completed, &failed, &stop)
        })
    };
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut out = std::io::stdout().lock();
    let line = |out: &mut std::io::StdoutLock<'_>, s: &Sample| {
        let _ = writeln!(
            out,
            "{:>8.0} s {:>12} {:>8} {:>10.1} {:>10.1} {:>10.1} {:>6} {:>8}",
            s.at,
            s.completed,
            s.failed,
            s.heap as f64 / 1e6,
            s.rss as f64 / 1e6,
            s.kept as f64 / 1e6,
            s.fds,
            s.threads
        );
        let _ = out.flush();
    };
    let _ = writeln!(
        out,
        "homa soak: {} in flight, workload {}, {} % loss, {:.0} s, MTU 1500 veth",
        args.in_flight,
        workload.name(),
        args.loss,
        args.duration
    );
    let _ = writeln!(
        out,
        "{:>10} {:>12} {:>8} {:>10} {:>10} {:>10} {:>6} {:>8}",
        "time", "completed", "failed", "heap MB", "RSS MB", "kept MB", "fds", "threads"
    );
    let total = Duration::from_secs_f64(args.duration);
    let every = Duration::from_secs_f64(args.sample);
    let mut next = every;
    while started.elapsed() < total && !teardown.stopped() {
        let wait = next.min(total).saturating_sub(started.elapsed());
        std::thread::sleep(wait.min(Duration::from_millis(200)));
        if started.elapsed() >= next.min(total) {
            let s = sample(started, &completed, &failed)?;
            line(&mut out, &s);
            samples.push(s);
            next += every;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let unfinished = load.join().map_err(|_| Error::Failed("the load thread panicked".into()))?;
    let end = sample(started, &completed, &failed)?;
    echo.stop();
    let loss_drops: Vec<u64> =
        [&veth.server_ns, &veth.client_ns].iter().map(|ns| drops(ns)).collect::<Result<_, _>>()?;
    let verdict = judge(&samples, args.warmup, args.max_growth / 100.0, end.failed + unfinished);
    let _ = writeln!(
        out,
        "{} calls completed, {} failed, {unfinished} unfinished; {} packets dropped by the \
         loss rules; {}",
        end.completed,
        end.failed,
        loss_drops.iter().sum::<u64>(),
        verdict.describe()
    );
    if let Some(path) = &args.json {
        let report = json!({
            "in_flight": args.in_flight,
            "workload": workload.name(),
            "loss_percent": args.loss,
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "samples": samples.iter().map(|s| json!({
                "at_s": s.at, "completed": s.completed, "failed": s.failed,
                "heap_bytes": s.heap, "rss_bytes": s.rss, "kept_bytes": s.kept, "fds": s.fds, "threads": s.threads,
            })).collect::<Vec<_>>(),
            "completed": end.completed,
            "failed": end.failed,
            "unfinished": unfinished,
            "loss_drops": loss_drops.iter().sum::<u64>(),
            "heap_growth": verdict.heap_growth,
            "rss_growth": verdict.rss_growth,
            "passed": verdict.passed(),
        });
        crate::bench::write_json(path, &report)?;
    }
    if verdict.passed() { Ok(()) } else { Err(Error::Failed(verdict.describe())) }
}

/// Keeps `in_flight` calls of the given sizes going until `stop`, then lets the last ones
/// finish (for up to [`DRAIN`]); returns how many did not.
fn closed_loop(
    client: &Socket,
    server: SocketAddr,
    sizes: &[u64],
    in_flight: usize,
    completed: &AtomicU64,
    failed: &AtomicU64,
    stop: &AtomicBool,
) -> u64 {
    /// Wakes the loop for call `id`.
    struct Notify {
        id: u64,
        tx: mpsc::Sender<u64>,
    }
    impl Wake for Notify {
        fn wake(self: Arc<Self>) {
            let _ = self.tx.send(self.id);
        }
    }
    let (tx, rx) = mpsc::channel();
    let mut calls: HashMap<u64, (Call, Waker)> = HashMap::new();
    let mut next = 0u64;
    let payload = vec![0x5a; MAX_MESSAGE as usize];
    let mut drain_until = None;
    loop {
        while drain_until.is_none() && calls.len() < in_flight {
            let len = sizes[next as usize % sizes.len()] as usize;
            match client.call_async(server, payload[..len].to_vec(), None) {
                Ok(call) => {
                    let waker = Waker::from(Arc::new(Notify { id: next, tx: tx.clone() }));
                    let _ = tx.send(next); // poll it once, to register the waker
                    calls.insert(next, (call, waker));
                }
                Err(e) => {
                    tracing::warn!("starting a call: {e}");
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
            next += 1;
        }
        if drain_until.is_none() && stop.load(Ordering::Relaxed) {
            drain_until = Some(Instant::now() + DRAIN);
        }
        if calls.is_empty() && drain_until.is_some() {
            return 0;
        }
        let wait = match drain_until {
            Some(until) if Instant::now() >= until => return calls.len() as u64,
            Some(until) => until.saturating_duration_since(Instant::now()),
            None => Duration::from_millis(100), // to see `stop`
        };
        let Ok(id) = rx.recv_timeout(wait) else { continue };
        let Some((call, waker)) = calls.get_mut(&id) else { continue };
        let mut cx = Context::from_waker(waker);
        if let Poll::Ready(result) = Pin::new(call).poll(&mut cx) {
            calls.remove(&id);
            match result {
                Ok(_) => completed.fetch_add(1, Ordering::Relaxed),
                Err(e) => {
                    tracing::warn!("a call failed: {e}");
                    failed.fetch_add(1, Ordering::Relaxed)
                }
            };
        }
    }
}

/// Message sizes drawn from `workload` (cut at [`MAX_MESSAGE`]), seeded.
fn sizes(workload: &Workload, seed: u64) -> impl Iterator<Item = u64> + '_ {
    let mut rng = Rng::new(seed);
    std::iter::repeat_with(move || workload.sample(rng.next_f64()).clamp(1, MAX_MESSAGE))
}

fn sample(started: Instant, completed: &AtomicU64, failed: &AtomicU64) -> Result<Sample, Error> {
    let read =
        |path: &str| std::fs::read_to_string(path).map_err(Error::io(format!("reading {path}")));
    let rss = || -> Result<u64, Error> {
        let statm = read("/proc/self/statm")?;
        let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
        // SAFETY: sysconf only reads a configuration value.
        let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        Ok(pages * page)
    };
    let held = rss()?;
    give_back_free_memory();
    let rss = rss()?;
    let status = read("/proc/self/status")?;
    let threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    let fds =
        std::fs::read_dir("/proc/self/fd").map_err(Error::io("reading /proc/self/fd"))?.count();
    Ok(Sample {
        at: started.elapsed().as_secs_f64(),
        completed: completed.load(Ordering::Relaxed),
        failed: failed.load(Ordering::Relaxed),
        heap: heap_in_use(),
        rss,
        kept: held.saturating_sub(rss),
        fds: fds as u64,
        threads,
    })
}

/// Makes malloc give the free memory it keeps back to the kernel (glibc; nothing elsewhere),
/// so that resident memory shows what the process uses, not the most it ever used.
fn give_back_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages; it takes malloc's own locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Bytes of malloc's blocks in use (glibc; 0 elsewhere).
pub(crate) fn heap_in_use() -> u64 {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 only reads malloc's statistics.
        let m = unsafe { libc::mallinfo2() };
        (m.uordblks + m.hblkhd) as u64
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        0
    }
}

/// What the samples say.
struct Verdict {
    failures: u64,
    /// After the warm-up: the mean heap in use over the second half of the samples,
    /// relative to the first half's, less one.
    heap_growth: f64,
    /// The same for resident memory.
    rss_growth: f64,
    /// Descriptors or threads grew after the warm-up.
    grew: bool,
    /// Fewer than two samples after the warm-up.
    unjudged: bool,
    /// The growth allowed.
    max_growth: f64,
}

impl Verdict {
    fn passed(&self) -> bool {
        self.failures == 0
            && self.heap_growth.max(self.rss_growth) <= self.max_growth
            && !self.grew
            && !self.unjudged
    }

    fn describe(&self) -> String {
        if self.unjudged {
            return "fewer than two samples after the warm-up: run longer".into();
        }
        format!(
            "{}: {} failed calls, heap in use {:+.1} % and resident memory {:+.1} % after the \
             warm-up (at most {:.0} %), descriptors and threads {}",
            if self.passed() { "passed" } else { "FAILED" },
            self.failures,
            self.heap_growth * 100.0,
            self.rss_growth * 100.0,
            self.max_growth * 100.0,
            if self.grew { "grew" } else { "steady" }
        )
    }
}

fn judge(samples: &[Sample], warmup: f64, max_growth: f64, failures: u64) -> Verdict {
    let after: Vec<&Sample> = samples.iter().filter(|s| s.at >= warmup).collect();
    let Some(first) = after.first().filter(|_| after.len() >= 2) else {
        let (heap_growth, rss_growth, grew, unjudged) = (0.0, 0.0, false, true);
        return Verdict { failures, heap_growth, rss_growth, grew, unjudged, max_growth };
    };
    let (early, late) = after.split_at(after.len() / 2);
    let growth = |of: fn(&Sample) -> u64| {
        let mean = |s: &[&Sample]| s.iter().map(|s| of(s) as f64).sum::<f64>() / s.len() as f64;
        mean(late) / mean(early).max(1.0) - 1.0
    };
    let (heap_growth, rss_growth) = (growth(|s| s.heap), growth(|s| s.rss));
    let grew = after.iter().any(|s| s.fds > first.fds || s.threads > first.threads);
    Verdict { failures, heap_growth, rss_growth, grew, unjudged: false, max_growth }
}

/// Drops `percent` % of the UDP packets (Homa's, here) arriving in namespace `ns`, with a
/// counter.
fn set_loss(ns: &str, percent: u32) -> Result<(), Error> {
    let rules = format!(
        "table inet homasoak {{\n  chain pre {{\n    \
         type filter hook prerouting priority -300; policy accept;\n    \
         ip protocol udp numgen random mod 100 < {percent} counter drop\n  }}\n}}\n"
    );
    let path = std::env::temp_dir().join(format!("homa-soak-{}-{ns}.nft", std::process::id()));
    std::fs::write(&path, rules).map_err(Error::io("writing the loss rules"))?;
    let result = sh("ip", &["netns", "exec", ns, "nft", "-f", &path.to_string_lossy()]);
    let _ = std::fs::remove_file(&path);
    result.map(drop)
}

/// Packets the loss rule of namespace `ns` dropped.
fn drops(ns: &str) -> Result<u64, Error> {
    let out = sh("ip", &["netns", "exec", ns, "nft", "list", "table", "inet", "homasoak"])?;
    let words: Vec<&str> = out.split_whitespace().collect();
    Ok(words
        .iter()
        .position(|w| *w == "packets")
        .and_then(|i| words[i + 1].parse().ok())
        .unwrap_or(0))
}
