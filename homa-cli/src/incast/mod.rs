//! `homa incast`: Homa against TCP on the kernel's real network stack, in network
//! namespaces this command creates (and removes): N client hosts and a probe host send to
//! one server through a bridge whose port toward the server is the bottleneck, shaped by
//! HTB into eight strict-priority queues keyed on the TOS bits Homa sets ([`topo`]).
//!
//! Three workloads run for each contender ([`contender`]), one contender after another,
//! each with the same seeded stream of requests: a mix of sizes from a workload at given
//! loads, incast bursts under a probe, and synchronisation rounds under bulk load.

mod contender;
mod plot;
mod report;
mod topo;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::{Duration, Instant};

use homa_core::testnet::Rng;
use homa_sim::Workload;
use indicatif::{ProgressBar, ProgressStyle};

use contender::{Clients, Done, Kind};
use topo::{LEVELS, Shape, Teardown, Topology};

use crate::client::MAX_MESSAGE;
use crate::error::Error;
use crate::logging;
use crate::netns::is_root;

/// Homa against TCP through a shaped bottleneck in network namespaces (root).
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Examples:
  sudo homa incast
  sudo homa incast --link-mbps 1000 --buffer-kb 200 --json incast.json
  sudo homa incast --clients 3 --duration 0.5 --contenders homa/udp,tcp --keep
  sudo homa incast --contenders homa/udp,homa/python,tcp --python .venv/bin/python
  sudo homa incast --cpu-hog 2      # overloaded hosts: two busy loops beside the lab
  sudo homa incast --own-cpu --workloads burst   # the probe's hosts off the load's CPUs

Builds a lab of network namespaces: --clients load clients, a probe client and a server, \
joined by a bridge. The bridge's port toward the server is the bottleneck: HTB at \
--link-mbps with eight strict-priority queues of --buffer-kb each, one per Homa priority \
level (the top three TOS bits), like a switch port. Then, for each contender (homa/ip, \
homa/udp, tcp with one connection per client, tcp-pool with four, tcp-top whose short \
requests ride the top class on their own connection; homa/python, Homa over UDP from the \
Python package in a process per host, when named), one after another with the same seeded \
requests:
  mixed    Poisson requests from every client, sizes from --workload, at each of --loads
  burst    every client sends --burst-bytes at once every --burst-period-ms, while the \
probe host sends 100-byte requests (--probe-rate per second), and another 100-byte request \
at a time in a closed loop
  barrier  rounds in which every client sends 1 KB and the round ends with the slowest \
reply, while bulk requests (W5, cut to 1 MB) load the bottleneck to 80 %
Responses are 100 bytes. Homa paces for --link-mbps: set it to the real bottleneck's rate. \
The report gives per contender the probe's and short messages' latency, round times, \
slowdown per size bin, goodput, the bottleneck's drops and packets per class (and, with \
nftables, the top class's packets longer than a short message's), \
retransmissions and CPU time; per workload the RESENDs Homa sent, the BUSY answers they got, \
packets resent and dropped, requests left unanswered, with where each of those stood on \
its client and the server, and the timers Homa's sockets ran 4 ms or more late (the \
hosts' CPU falling short); then each target against TCP. The namespaces are removed at \
the end, on an error and on Ctrl-C, unless --keep.")]
pub(crate) struct Args {
    /// Load clients (the probe host comes on top).
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// The bottleneck's rate in Mbit/s; Homa is told it too.
    #[arg(long, value_name = "MBPS", default_value_t = 1000)]
    link_mbps: u32,
    /// Bytes (in KB) each of the bottleneck's eight queues holds before dropping.
    #[arg(long, value_name = "KB", default_value_t = 200)]
    buffer_kb: u32,
    /// Seconds each workload offers requests for, per contender.
    #[arg(long, value_name = "S", default_value_t = 5.0)]
    duration: f64,
    /// The mixed workload's sizes: w1..w5 or a CDF file (cut to 1,000,000 bytes).
    #[arg(long, default_value = "w4")]
    workload: String,
    /// Loads of the mixed workload, as fractions of the bottleneck's rate.
    #[arg(long, value_delimiter = ',', default_value = "0.5,0.8")]
    loads: Vec<f64>,
    /// Contenders to run, in order (homa/python too, when named).
    #[arg(long, value_delimiter = ',', default_value = "homa/ip,homa/udp,tcp,tcp-pool,tcp-top")]
    contenders: Vec<String>,
    /// Workloads to run: mixed, burst, barrier.
    #[arg(long, value_delimiter = ',', default_value = "mixed,burst,barrier")]
    workloads: Vec<String>,
    /// Bytes each client sends per incast burst.
    #[arg(long, value_name = "BYTES", default_value_t = 500_000)]
    burst_bytes: usize,
    /// Milliseconds between incast bursts.
    #[arg(long, value_name = "MS", default_value_t = 50.0)]
    burst_period_ms: f64,
    /// Probe requests per second (Poisson) during the bursts.
    #[arg(long, value_name = "PER_S", default_value_t = 2000.0)]
    probe_rate: f64,
    /// Overload: this many processes busy-loop at normal priority for the whole run, so
    /// that the hosts compete with them for the CPUs (as on a loaded server).
    #[arg(long, value_name = "N", default_value_t = 0)]
    cpu_hog: usize,
    /// The server and the probe host run on a CPU of their own (the last), the load clients
    /// and this command on the others: the load's CPU work then stays off the probe's path,
    /// as on hosts of their own.
    #[arg(long)]
    own_cpu: bool,
    /// The Python interpreter the homa/python contender runs (it needs the package
    /// homa-transport).
    #[arg(long, value_name = "PATH", default_value = "python3")]
    python: String,
    /// Seed of every request stream.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the report as JSON here (`-` for stdout, instead of the table).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Draw the mixed workload's slowdown per message size, per contender, as SVG here.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// Leave the namespaces in place at the end (names printed), to inspect.
    #[arg(long)]
    keep: bool,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
    /// More log output (-v: info, -vv: debug); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
}

/// Processes that keep CPUs busy for as long as they live (`--cpu-hog`).
struct CpuHogs(Vec<std::process::Child>);

impl CpuHogs {
    fn start(n: usize) -> Result<CpuHogs, Error> {
        let mut hogs = CpuHogs(Vec::with_capacity(n));
        for _ in 0..n {
            let hog = std::process::Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .spawn()
                .map_err(Error::io("starting a --cpu-hog process (sh)"))?;
            hogs.0.push(hog);
        }
        Ok(hogs)
    }
}

impl Drop for CpuHogs {
    fn drop(&mut self) {
        for hog in &mut self.0 {
            let _ = hog.kill();
            let _ = hog.wait();
        }
    }
}

/// Requests up to this size are "short" (and ride TCP-top's top class).
const SHORT: usize = 1024;
/// The probe's and the check-ins' sizes.
const PROBE_BYTES: usize = 100;
const CHECKIN_BYTES: usize = 1000;
/// The load the barrier's bulk requests offer.
const BULK_LOAD: f64 = 0.8;
/// How long requests still in flight at the end get.
const DRAIN: Duration = Duration::from_secs(5);

/// One of the workloads.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Part {
    Mixed(f64),
    Burst,
    Barrier,
}

impl Part {
    fn label(self) -> String {
        match self {
            Part::Mixed(load) => format!("mixed {:.0} %", load * 100.0),
            Part::Burst => "burst".into(),
            Part::Barrier => "barrier".into(),
        }
    }
}

/// What a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A request of the mixed workload.
    Load,
    /// The burst workload's probe: Poisson arrivals, however many are in flight.
    Probe,
    /// The same probe in a closed loop: one request at a time, each sent when the last
    /// returned (on a connection of its own for TCP).
    ClosedProbe,
    /// A request of an incast burst.
    Burst,
    /// The barrier's background load (its check-ins are counted per round).
    Bulk,
}

/// One request of a stream: when (from the run's start), from which host (0 the probe,
/// then the clients), how long.
#[derive(Debug, Clone, Copy)]
struct Request {
    at: Duration,
    host: usize,
    size: usize,
    role: Role,
}

/// What the run learned about one request.
#[derive(Debug, Clone, Copy)]
struct Record {
    role: Role,
    size: usize,
    /// Latency, or the failure's kind.
    result: Result<Duration, &'static str>,
}

/// The shape of every stream.
struct Streams {
    clients: usize,
    link_mbps: u32,
    duration: Duration,
    seed: u64,
}

impl Streams {
    /// Poisson requests from every client whose sizes (from `w`, cut to 1 MB) offer `load`
    /// of the link, in time order.
    fn poisson(&self, w: &Workload, load: f64, role: Role, salt: u64) -> Vec<Request> {
        let mean: f64 = w
            .sizes()
            .iter()
            .zip(w.probabilities())
            .map(|(&s, p)| s.min(MAX_MESSAGE) as f64 * p)
            .sum();
        let per_client = load * f64::from(self.link_mbps) * 1e6 / 8.0 / mean / self.clients as f64;
        let mut all = Vec::new();
        for c in 0..self.clients {
            let mut rng = Rng::new(self.seed.wrapping_mul(1_000_003) ^ (salt << 32) ^ c as u64);
            let mut t = 0.0;
            loop {
                t += -(-rng.next_f64()).ln_1p() / per_client;
                if t >= self.duration.as_secs_f64() {
                    break;
                }
                let size = w.sample(rng.next_f64()).min(MAX_MESSAGE) as usize;
                all.push(Request { at: Duration::from_secs_f64(t), host: c + 1, size, role });
            }
        }
        all.sort_by_key(|r| r.at);
        all
    }

    /// Bursts of `bytes` from every client every `period`, and Poisson probes.
    fn burst(&self, bytes: usize, period: Duration, probe_rate: f64) -> Vec<Request> {
        let mut all = Vec::new();
        let mut at = period / 2;
        while at < self.duration {
            all.extend((0..self.clients).map(|c| Request {
                at,
                host: c + 1,
                size: bytes,
                role: Role::Burst,
            }));
            at += period;
        }
        let mut rng = Rng::new(self.seed ^ 0x9e37_79b9_7f4a_7c15);
        let mut t = 0.0;
        loop {
            t += -(-rng.next_f64()).ln_1p() / probe_rate;
            if t >= self.duration.as_secs_f64() {
                break;
            }
            let at = Duration::from_secs_f64(t);
            all.push(Request { at, host: 0, size: PROBE_BYTES, role: Role::Probe });
        }
        all.sort_by_key(|r| r.at);
        all
    }
}

/// Everything one contender's run of one workload measured.
#[derive(Debug)]
struct Run {
    part: Part,
    records: Vec<Record>,
    /// Barrier rounds: the slowest check-in of each, or a failure.
    rounds: Vec<Result<Duration, &'static str>>,
    /// Requests without a response when the drain ended.
    unfinished: usize,
    /// CPU seconds of this process and the contender's own (clients, server, the kernel
    /// work done for them).
    cpu_s: f64,
    /// Share of the machine's CPUs busy during the run (softirq work included).
    machine_busy: f64,
    queues: [topo::Queue; LEVELS],
    /// The top class's packets, all and long ones (when nftables counts them).
    top_class: Option<topo::TopClass>,
    peak_backlog_bytes: u64,
    retransmissions: u64,
    resends: u64,
    /// BUSY packets Homa's endpoints received: RESENDs the sender could not yet answer.
    busy: u64,
    /// Each request left unanswered at the end: its client's RPC and the server's.
    unanswered: Vec<String>,
    /// Packets Homa's sockets lost in the hosts (see `Counters::homa_host_drops`).
    host_drops: u64,
    /// See `Counters::homa_late_timers`.
    late_timers: u64,
    seconds: f64,
}

/// Requests finished so far, to wait for.
#[derive(Default)]
struct Tally {
    records: Mutex<Vec<Record>>,
    changed: Condvar,
}

impl Tally {
    fn push(&self, r: Record) {
        self.records.lock().unwrap_or_else(|e| e.into_inner()).push(r);
        self.changed.notify_all();
    }

    /// Waits until `n` records are in or `deadline` passes; returns how many are in.
    fn wait_for(&self, n: usize, deadline: Instant) -> usize {
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        while records.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            records = self.changed.wait_timeout(records, left).unwrap_or_else(|e| e.into_inner()).0;
        }
        records.len()
    }
}

/// Starts `request` now on `clients`; its record goes to `tally`.
fn start(clients: &Clients, tally: &Arc<Tally>, r: Request) {
    let (tally, t0) = (Arc::clone(tally), Instant::now());
    let short = r.size <= SHORT;
    clients.start(
        r.host,
        r.size,
        short,
        Box::new(move |result| {
            let result = result.map(|end| end.saturating_duration_since(t0));
            tally.push(Record { role: r.role, size: r.size, result });
        }),
    );
}

/// Sleeps until `at` (pacing the requests; not synchronisation).
fn sleep_until(at: Instant) {
    let now = Instant::now();
    if at > now {
        std::thread::sleep(at - now);
    }
}

/// A request's end, sent to `tx` (its waiter may have given up: then it goes nowhere).
fn report_to(tx: mpsc::Sender<Result<Instant, &'static str>>) -> Done {
    Box::new(move |r| {
        let _ = tx.send(r);
    })
}

/// Sends the closed-loop probe from `host` until `end`: one request at a time, the next as
/// soon as the last returned.
fn closed_probe(clients: &Clients, host: usize, end: Instant) -> Vec<Record> {
    let mut records = Vec::new();
    while Instant::now() < end {
        let (tx, rx) = mpsc::channel();
        let t0 = Instant::now();
        clients.start(host, PROBE_BYTES, true, report_to(tx));
        let result = match rx.recv_timeout(DRAIN) {
            Ok(r) => r.map(|at| at.saturating_duration_since(t0)),
            Err(_) => Err("unfinished"),
        };
        let failed = result.is_err();
        records.push(Record { role: Role::ClosedProbe, size: PROBE_BYTES, result });
        if failed {
            break;
        }
    }
    records
}

/// Runs the barrier's rounds until `end`: all clients check in, the round ends with the
/// last reply, then a 1 ms pause.
fn rounds(clients: &Clients, n: usize, end: Instant) -> Vec<Result<Duration, &'static str>> {
    let mut rounds = Vec::new();
    while Instant::now() < end {
        let t0 = Instant::now();
        let (tx, rx) = mpsc::channel();
        for host in 1..=n {
            clients.start(host, CHECKIN_BYTES, true, report_to(tx.clone()));
        }
        drop(tx);
        let mut round = Ok(Duration::ZERO);
        for _ in 0..n {
            match rx.recv_timeout(DRAIN) {
                Ok(Ok(end)) => {
                    if let Ok(slowest) = &mut round {
                        *slowest = (*slowest).max(end.saturating_duration_since(t0));
                    }
                }
                Ok(Err(kind)) => round = Err(kind),
                Err(_) => {
                    round = Err("unfinished");
                    break;
                }
            }
        }
        rounds.push(round);
        std::thread::sleep(Duration::from_millis(1));
    }
    rounds
}

/// Runs `kind` through one workload.
fn run_one(
    kind: Kind,
    part: Part,
    requests: &[Request],
    topo: &Topology,
    streams: &Streams,
    python: &str,
) -> Result<Run, Error> {
    topo.reset_bottleneck()?;
    let tcp_retrans =
        || -> Result<u64, Error> { topo.hosts().map(|h| topo::tcp_retransmissions(&h.ns)).sum() };
    let tcp_before = if kind.is_homa() { 0 } else { tcp_retrans()? };
    let top0 = topo.top_class();
    let clients = Clients::open(kind, topo, streams.link_mbps, python)?;
    let cpu = || {
        let (u, s) = crate::stats::cpu_time();
        u + s
    };
    let cpu0 = cpu();
    let machine0 = crate::stats::machine_cpu_ticks();
    let tally = Arc::new(Tally::default());
    let sampling = AtomicBool::new(true);
    let started = Instant::now();
    let end = started + streams.duration;
    let (peak, rounds, closed) = std::thread::scope(|s| -> Result<_, Error> {
        let sampler = s.spawn(|| {
            let mut peak = 0;
            while sampling.load(Ordering::Relaxed) {
                if let Ok(q) = topo.queues() {
                    peak = peak.max(q.iter().map(|q| q.backlog_bytes).sum());
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            peak
        });
        let barrier =
            (part == Part::Barrier).then(|| s.spawn(|| rounds(&clients, streams.clients, end)));
        let closed = (part == Part::Burst).then(|| {
            s.spawn(|| {
                topo::pin(&topo.probe.cpus)?;
                Ok(closed_probe(&clients, streams.clients + 1, end))
            })
        });
        for &r in requests {
            sleep_until(started + r.at);
            start(&clients, &tally, r);
        }
        let rounds = barrier.map(|b| b.join().unwrap_or_default()).unwrap_or_default();
        tally.wait_for(requests.len() + rounds.len() * streams.clients, Instant::now() + DRAIN);
        let closed = match closed.map(|c| c.join()) {
            Some(Ok(closed)) => closed?,
            _ => Vec::new(),
        };
        sampling.store(false, Ordering::Relaxed);
        Ok((sampler.join().unwrap_or(0), rounds, closed))
    })?;
    let seconds = started.elapsed().as_secs_f64();
    // Taken before closing, which fails whatever is still in flight.
    let mut records = std::mem::take(&mut *tally.records.lock().unwrap_or_else(|e| e.into_inner()));
    let unfinished = requests.len().saturating_sub(records.len());
    records.extend(closed);
    let failures = records.iter().filter(|r| r.result.is_err()).count()
        + rounds.iter().filter(|r| r.is_err()).count();
    let unanswered = if unfinished + failures > 0 { clients.unanswered() } else { Vec::new() };
    let counters = clients.close();
    let cpu_s = cpu() - cpu0 + counters.cpu_s;
    let machine_busy = match (machine0, crate::stats::machine_cpu_ticks()) {
        (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => (b1 - b0) as f64 / (t1 - t0) as f64,
        _ => f64::NAN,
    };
    let queues = topo.queues()?;
    let top_class = topo
        .top_class()
        .zip(top0)
        .map(|(b, a)| topo::TopClass { all: b.all - a.all, long: b.long - a.long });
    let retransmissions =
        if kind.is_homa() { counters.homa_retransmissions } else { tcp_retrans()? - tcp_before };
    Ok(Run {
        part,
        records,
        rounds,
        unfinished,
        cpu_s,
        machine_busy,
        queues,
        top_class,
        peak_backlog_bytes: peak,
        retransmissions,
        resends: counters.homa_resends,
        busy: counters.homa_busy,
        unanswered,
        host_drops: counters.homa_host_drops,
        late_timers: counters.homa_late_timers,
        seconds,
    })
}

fn progress_bar(quiet: bool, runs: usize) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(runs as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} runs  {msg}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar
}

pub(crate) fn run(args: &Args) -> Result<(), Error> {
    logging::init(args.verbose, "warn");
    if !is_root() {
        return Err(Error::Input(
            "homa incast needs root: it creates network namespaces, veths and qdiscs, and \
             opens raw IP sockets (try: sudo homa incast)"
                .into(),
        ));
    }
    let workload = Workload::load(&args.workload).map_err(|e| Error::Input(e.to_string()))?;
    let kinds: Vec<Kind> = args
        .contenders
        .iter()
        .map(|c| Kind::parse(c))
        .collect::<Result<_, _>>()
        .map_err(Error::Input)?;
    let mut parts = Vec::new();
    for w in &args.workloads {
        match w.as_str() {
            "mixed" => parts.extend(args.loads.iter().map(|&l| Part::Mixed(l))),
            "burst" => parts.push(Part::Burst),
            "barrier" => parts.push(Part::Barrier),
            other => {
                return Err(Error::Input(format!(
                    "unknown workload {other:?} (expected mixed, burst or barrier)"
                )));
            }
        }
    }
    if args.loads.iter().any(|l| !(*l > 0.0 && *l <= 1.5)) {
        return Err(Error::Input("--loads must be fractions in (0, 1.5]".into()));
    }
    if args.clients == 0 || args.clients > 250 {
        return Err(Error::Input("--clients must be between 1 and 250".into()));
    }
    if !(args.duration > 0.0 && args.duration <= 3600.0) {
        return Err(Error::Input("--duration must be positive, at most an hour".into()));
    }
    if !(1..=MAX_MESSAGE as usize).contains(&args.burst_bytes) {
        return Err(Error::Input("--burst-bytes must be between 1 and 1,000,000".into()));
    }
    if !(args.burst_period_ms > 0.0 && args.probe_rate > 0.0) {
        return Err(Error::Input("--burst-period-ms and --probe-rate must be positive".into()));
    }
    if args.link_mbps == 0 || args.buffer_kb == 0 {
        return Err(Error::Input("--link-mbps and --buffer-kb must be positive".into()));
    }
    let shape =
        Shape { link_mbps: args.link_mbps, buffer_bytes: args.buffer_kb.saturating_mul(1000) };
    let streams = Streams {
        clients: args.clients,
        link_mbps: args.link_mbps,
        duration: Duration::from_secs_f64(args.duration),
        seed: args.seed,
    };
    let bulk = Workload::builtin("w5").expect("a built-in workload");
    let stream = |part: Part| match part {
        Part::Mixed(load) => streams.poisson(&workload, load, Role::Load, 1),
        Part::Burst => streams.burst(
            args.burst_bytes,
            Duration::from_secs_f64(args.burst_period_ms / 1000.0),
            args.probe_rate,
        ),
        Part::Barrier => streams.poisson(&bulk, BULK_LOAD, Role::Bulk, 2),
    };
    let streams_by_part: Vec<Vec<Request>> = parts.iter().map(|&p| stream(p)).collect();

    // Before any thread exists, so that every thread leaves the signals to its own.
    let teardown = Teardown::default();
    teardown.on_signals("homa incast");
    let lab = || -> Result<_, Error> {
        let topo = Topology::create(args.clients, shape, teardown.clone(), args.own_cpu)?;
        // This thread starts the load's requests, and its threads run with the load.
        topo::pin(&topo.clients[0].cpus)?;
        let _hogs = CpuHogs::start(args.cpu_hog)?;
        let namespaces = topo.namespaces();
        let bar = progress_bar(args.quiet, kinds.len() * parts.len());
        let mut contenders = Vec::new();
        for &kind in &kinds {
            let mut runs = Vec::new();
            for (&part, requests) in parts.iter().zip(&streams_by_part) {
                bar.set_message(format!("{}: {}", kind.name(), part.label()));
                runs.push(run_one(kind, part, requests, &topo, &streams, &args.python)?);
                bar.inc(1);
            }
            contenders.push((kind, runs));
        }
        bar.finish_and_clear();
        let kept = if args.keep { topo.keep() } else { Vec::new() };
        Ok((namespaces, contenders, kept))
    };
    let (namespaces, contenders, kept) = match lab() {
        Ok(done) => done,
        // A signal removed the lab under a command or a contender: the signal thread
        // reports that and exits; this error is only its echo.
        Err(_) if teardown.stopped() => loop {
            std::thread::park();
        },
        Err(e) => {
            // Topology::create may fail halfway, before a Topology exists to drop.
            teardown.run();
            return Err(e);
        }
    };
    let setup = report::Setup {
        args,
        workload: &workload,
        namespaces,
        offered_mbps: parts
            .iter()
            .zip(&streams_by_part)
            .map(|(p, rs)| {
                (
                    p.label(),
                    rs.iter().map(|r| r.size as f64).sum::<f64>() * 8.0 / args.duration / 1e6,
                )
            })
            .collect(),
    };
    let report = report::Report::new(&setup, contenders);
    report.write(args.json.as_deref())?;
    if let Some(path) = &args.plot {
        plot::svg(report.json(), path)?;
    }
    if !kept.is_empty() {
        eprintln!("namespaces kept: {} (remove each with `ip netns delete NAME`)", kept.join(" "));
    }
    let failed = report.failed();
    if failed > 0 {
        return Err(Error::Failed(format!("{failed} requests failed or went unanswered")));
    }
    Ok(())
}
