//! `homa client`: an open-loop load generator like HomaModule's `cp_node client`. Requests
//! start at Poisson times (exponentially distributed gaps at the given rate), whatever the
//! responses do; sizes come from a workload's CDF (`homa_sim::Workload`), capped at
//! 1,000,000 bytes (Homa's largest message; cp_node truncates the same way). Latencies are
//! reported per size bin (each bin holds about the same share of messages, as cp_vs_tcp
//! plots them by size percentile), with throughput and failures by kind.

use std::collections::{BTreeMap, HashMap};
use std::future::Future as _;
use std::io::Write;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use homa_core::testnet::Rng;
use homa_io::{Call, Payload, Socket, TransportKind};
use homa_sim::Workload;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Map, Value, json};

use crate::error::Error;
use crate::logging;
use crate::server::net_error;
use crate::stats::{Samples, Summary, host_json, us};

/// Homa's largest message; larger workload sizes are cut to it.
pub(crate) const MAX_MESSAGE: u64 = 1_000_000;

/// Load a Homa server with RPCs at Poisson times; report latency per message-size bin.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Examples:
  homa client --server 127.0.0.1:4000 --workload w3 --rate 2000 --duration 10
  homa client --server 198.18.0.1:4000 --transport ip --workload w4 --rate 500 --duration 30 --json w4.json
  homa client --server 127.0.0.1:4000 --workload my_cdf.txt --rate 100 --duration 5 --seed 7

Requests start at exponentially spaced times (an open loop, like HomaModule's cp_node): a slow \
server does not slow the offered load down, until --concurrency calls are in flight; then the \
next request waits for a free slot and is counted as late. Message sizes follow the workload \
(w1..w5 from the Homa paper, or a CDF file of `size_bytes cumulative_probability` lines), cut \
to 1,000,000 bytes, Homa's largest message, as cp_node does (the report says how many were \
cut). The server is expected to echo (homa server does), so a response is as long as its \
request. Latency is from the call's start to the response, per size bin; each bin holds about \
1/--bins of the messages. Calls still in flight when the run ends get --drain seconds, then \
count as unfinished.")]
pub(crate) struct Args {
    /// The server, ADDR:PORT (e.g. a `homa server`).
    #[arg(long, value_name = "ADDR:PORT")]
    server: SocketAddr,
    /// w1..w5, or the path of a CDF file.
    #[arg(long, default_value = "w4")]
    workload: String,
    /// Requests started per second (Poisson arrivals).
    #[arg(long, value_name = "RPCS_PER_S", default_value_t = 1000.0)]
    rate: f64,
    /// Seconds to start requests for.
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    duration: f64,
    /// Stop after starting this many requests (or when --duration is over, if sooner).
    #[arg(long, value_name = "N")]
    requests: Option<u64>,
    /// Check that every response is its request, byte for byte (the server echoes, as
    /// `homa server` does without --response-len); mismatches count as `corrupted`.
    #[arg(long)]
    verify: bool,
    /// udp, ip (needs CAP_NET_RAW), uring or uring-ip.
    #[arg(long, default_value = "udp")]
    transport: TransportKind,
    /// Most calls in flight at once.
    #[arg(long, default_value_t = 1000)]
    concurrency: usize,
    /// Write the report as JSON here (`-` for stdout, instead of the table).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Seed for arrival times and sizes.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Size bins (each about 1/BINS of the messages).
    #[arg(long, default_value_t = 10)]
    bins: usize,
    /// Fail a call after this many milliseconds (default: only Homa's own timeout, when
    /// the server goes silent).
    #[arg(long, value_name = "MS")]
    timeout_ms: Option<u64>,
    /// Seconds to wait for calls still in flight at the end.
    #[arg(long, value_name = "S", default_value_t = 2.0)]
    drain: f64,
    /// Largest IP packet to send (default 1500).
    #[arg(long)]
    mtu: Option<u32>,
    /// Link speed for the pacer in Mbit/s (default 25000).
    #[arg(long)]
    link_mbps: Option<u32>,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
    /// More log output (-v: info, -vv: debug); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
}

/// The local address a socket should use to reach `server` (the kernel's route choice; no
/// packet is sent). Raw IP sockets must not bind the wildcard address.
pub(crate) fn local_ip_for(server: SocketAddr) -> IpAddr {
    let wildcard: SocketAddr =
        if server.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().expect("a valid address");
    let routed = UdpSocket::bind(wildcard)
        .and_then(|s| s.connect(server).and_then(|()| s.local_addr()))
        .map(|a| a.ip());
    routed.unwrap_or(wildcard.ip())
}

/// Bytes for requests, shared by all calls (no allocation or fill per call).
#[derive(Debug)]
pub(crate) struct Prefix {
    pub(crate) buf: Arc<Vec<u8>>,
    pub(crate) len: usize,
}

impl AsRef<[u8]> for Prefix {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// Size bins: upper bounds (ascending, the last at least the largest size) and, per bin,
/// the workload's cumulative share of messages at its bound.
#[derive(Debug)]
pub(crate) struct Bins {
    pub(crate) bounds: Vec<u64>,
    cum: Vec<f64>,
}

impl Bins {
    pub(crate) fn new(w: &Workload, bins: usize) -> Bins {
        let mut bounds: Vec<u64> = homa_sim::report::auto_bins(w, 1.0 / bins as f64)
            .into_iter()
            .map(|b| b.min(MAX_MESSAGE))
            .collect();
        bounds.dedup();
        let cum = bounds
            .iter()
            .map(|&b| {
                if b >= MAX_MESSAGE {
                    return 1.0;
                }
                let i = w.sizes().partition_point(|&s| s <= b);
                if i == 0 { 0.0 } else { w.cumulative()[i - 1] }
            })
            .collect();
        Bins { bounds, cum }
    }

    pub(crate) fn of(&self, size: u64) -> usize {
        self.bounds.partition_point(|&b| b < size).min(self.bounds.len() - 1)
    }
}

/// What the collector learns about one call.
enum Msg {
    Started {
        id: u64,
        call: Call,
        start: Instant,
        bin: usize,
        len: usize,
    },
    /// The call's waker fired at this time.
    Woken {
        id: u64,
        at: Instant,
    },
    /// Failed to start (the error kind).
    Refused(&'static str),
    /// No more calls will start.
    End,
}

/// Wakes the collector with the time of the wake-up (which is when the response arrived).
struct Notify {
    id: u64,
    tx: mpsc::Sender<Msg>,
}

impl Wake for Notify {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let _ = self.tx.send(Msg::Woken { id: self.id, at: Instant::now() });
    }
}

/// Counts calls in flight against the limit.
#[derive(Debug, Default)]
struct Slots {
    in_flight: Mutex<usize>,
    freed: Condvar,
}

impl Slots {
    /// Takes a slot, waiting while `limit` are taken; returns whether it had to wait.
    fn take(&self, limit: usize) -> bool {
        let mut n = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        let waited = *n >= limit;
        while *n >= limit {
            n = self.freed.wait(n).unwrap_or_else(|e| e.into_inner());
        }
        *n += 1;
        waited
    }

    fn give(&self) {
        let mut n = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        *n -= 1;
        self.freed.notify_one();
    }

    fn count(&self) -> usize {
        *self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The short name of a failure, as counted in the report ([`homa_io::Error::name`]).
pub(crate) fn error_kind(e: &homa_io::Error) -> &'static str {
    e.name()
}

/// What the collector measured.
#[derive(Debug, Default)]
struct Results {
    per_bin: Vec<Samples>,
    all: Samples,
    completed: u64,
    request_bytes: u64,
    response_bytes: u64,
    errors: BTreeMap<&'static str, u64>,
    unfinished: u64,
    /// Responses that were not their request (with `--verify`).
    corrupted: u64,
}

struct InFlight {
    call: Call,
    start: Instant,
    bin: usize,
    len: usize,
    waker: Waker,
}

/// Gathers completions until told the end and every call is done (or `drain` passes).
fn collect(
    rx: &mpsc::Receiver<Msg>,
    tx: &mpsc::Sender<Msg>,
    slots: &Slots,
    bins: usize,
    drain: Duration,
    done: &AtomicU64,
    verify: Option<&[u8]>,
) -> Results {
    let mut r = Results { per_bin: vec![Samples::default(); bins], ..Results::default() };
    let mut calls: HashMap<u64, InFlight> = HashMap::new();
    let mut end: Option<Instant> = None;
    let finish =
        |r: &mut Results, f: InFlight, result: homa_io::Result<homa_io::Message>, at: Instant| {
            match result {
                Ok(response) => {
                    if verify.is_some_and(|bytes| response != bytes[..f.len]) {
                        r.corrupted += 1;
                    }
                    let rtt = at.saturating_duration_since(f.start);
                    r.per_bin[f.bin].push(rtt);
                    r.all.push(rtt);
                    r.completed += 1;
                    r.request_bytes += f.len as u64;
                    r.response_bytes += response.len() as u64;
                }
                Err(e) => *r.errors.entry(error_kind(&e)).or_default() += 1,
            }
            slots.give();
            done.fetch_add(1, Ordering::Relaxed);
        };
    loop {
        if end.is_some() && calls.is_empty() {
            break;
        }
        let msg = match end {
            None => rx.recv().ok(),
            Some(deadline) => {
                match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                    Ok(m) => Some(m),
                    Err(mpsc::RecvTimeoutError::Timeout) => break,
                    Err(mpsc::RecvTimeoutError::Disconnected) => None,
                }
            }
        };
        let Some(msg) = msg else { break };
        let (id, at) = match msg {
            Msg::End => {
                end = Some(Instant::now() + drain);
                continue;
            }
            Msg::Refused(kind) => {
                *r.errors.entry(kind).or_default() += 1;
                slots.give();
                done.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Msg::Started { id, call, start, bin, len } => {
                let notify = Notify { id, tx: tx.clone() };
                let waker = Waker::from(Arc::new(notify));
                calls.insert(id, InFlight { call, start, bin, len, waker });
                (id, Instant::now())
            }
            Msg::Woken { id, at } => (id, at),
        };
        let Some(f) = calls.get_mut(&id) else { continue };
        let waker = f.waker.clone();
        let mut cx = Context::from_waker(&waker);
        if let Poll::Ready(result) = std::pin::Pin::new(&mut f.call).poll(&mut cx) {
            let f = calls.remove(&id).expect("present");
            finish(&mut r, f, result, at);
        }
    }
    r.unfinished = calls.len() as u64;
    for _ in 0..calls.len() {
        slots.give();
    }
    r
}

/// Longest --duration and --drain: any Instant plus this much is representable.
const YEAR_S: f64 = 365.0 * 24.0 * 3600.0;

pub(crate) fn run(args: &Args) -> Result<(), Error> {
    logging::init(args.verbose, "warn");
    let workload = Workload::load(&args.workload).map_err(|e| Error::Input(e.to_string()))?;
    if !(args.rate > 0.0 && args.rate.is_finite()) {
        return Err(Error::Input("--rate must be positive".into()));
    }
    if !(args.duration > 0.0 && args.duration <= YEAR_S) {
        return Err(Error::Input("--duration must be positive and at most a year".into()));
    }
    if args.concurrency == 0 || args.bins == 0 {
        return Err(Error::Input("--concurrency and --bins must be at least 1".into()));
    }
    if !(args.drain >= 0.0 && args.drain <= YEAR_S) {
        return Err(Error::Input("--drain must be a number of seconds, at most a year".into()));
    }
    let mut builder = Socket::builder().transport(args.transport);
    if let Some(mtu) = args.mtu {
        builder = builder.mtu(mtu);
    }
    if let Some(mbps) = args.link_mbps {
        builder = builder.link_mbps(mbps);
    }
    let socket = builder
        .client(local_ip_for(args.server))
        .map_err(net_error("opening the client socket"))?;
    tracing::info!(server = %args.server, transport = %socket.transport(), local = %socket.local_addr(), "client open");

    let bins = Bins::new(&workload, args.bins);
    let truncated: f64 = workload
        .sizes()
        .iter()
        .zip(workload.probabilities())
        .filter(|&(&s, _)| s > MAX_MESSAGE)
        .map(|(_, p)| p)
        .sum();
    let buf = Arc::new((0..MAX_MESSAGE).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
    let timeout = args.timeout_ms.map(Duration::from_millis);
    let slots = Arc::new(Slots::default());
    let done = Arc::new(AtomicU64::new(0));
    let (tx, rx) = mpsc::channel();
    let collector = {
        let (tx, slots, done) = (tx.clone(), Arc::clone(&slots), Arc::clone(&done));
        let nbins = bins.bounds.len();
        let drain = Duration::from_secs_f64(args.drain);
        let (buf, verify) = (Arc::clone(&buf), args.verify);
        std::thread::Builder::new()
            .name("homa-client-collector".into())
            .spawn(move || {
                let verify = verify.then_some(&buf[..]);
                collect(&rx, &tx, &slots, nbins, drain, &done, verify)
            })
            .map_err(Error::io("starting the collector thread"))?
    };

    let bar = progress_bar(args.quiet, args.duration);
    let mut rng = Rng::new(args.seed);
    let duration = Duration::from_secs_f64(args.duration);
    let started = Instant::now();
    let (mut sent, mut late, mut cut, mut max_lag) = (0u64, 0u64, 0u64, Duration::ZERO);
    let mut next = started;
    let mut last_draw = started;
    loop {
        // Exponential gap: -ln(1 - u) / rate.
        let gap = -(-rng.next_f64()).ln_1p() / args.rate;
        // A gap too long to represent lies past the end anyway (--rate may be tiny).
        let Some(at) = Duration::try_from_secs_f64(gap).ok().and_then(|g| next.checked_add(g))
        else {
            break;
        };
        next = at;
        if next.duration_since(started) >= duration || args.requests.is_some_and(|n| sent >= n) {
            break;
        }
        loop {
            let now = Instant::now();
            if now.duration_since(last_draw) >= Duration::from_millis(100) {
                last_draw = now;
                let finished = done.load(Ordering::Relaxed);
                bar.set_position(now.duration_since(started).as_millis() as u64);
                bar.set_message(format!(
                    "{sent} started, {finished} finished, {} in flight",
                    slots.count()
                ));
            }
            if now >= next {
                break;
            }
            std::thread::sleep((next - now).min(Duration::from_millis(100)));
        }
        let waited = slots.take(args.concurrency);
        let size = workload.sample(rng.next_f64());
        if size > MAX_MESSAGE {
            cut += 1;
        }
        let size = size.min(MAX_MESSAGE) as usize;
        let start = Instant::now();
        let lag = start.saturating_duration_since(next);
        max_lag = max_lag.max(lag);
        late += u64::from(waited);
        let payload = Payload::shared(Arc::new(Prefix { buf: Arc::clone(&buf), len: size }));
        let msg = match socket.call_async(args.server, payload, timeout) {
            Ok(call) => {
                Msg::Started { id: sent, call, start, bin: bins.of(size as u64), len: size }
            }
            Err(e) => {
                tracing::debug!("call refused: {e}");
                Msg::Refused(error_kind(&e))
            }
        };
        sent += 1;
        let _ = tx.send(msg);
    }
    let generating = started.elapsed();
    let _ = tx.send(Msg::End);
    drop(tx);
    bar.set_position(bar.length().unwrap_or(0));
    bar.set_message(format!("{sent} started; waiting for the last responses"));
    let results =
        collector.join().map_err(|_| Error::Input("the collector thread panicked".into()))?;
    bar.finish_and_clear();
    let metrics = socket.metrics();
    socket.shutdown();

    let mut results = results;
    let all = results.all.summary();
    let per_bin = results.per_bin.iter_mut().map(Samples::summary).collect();
    let report = Report {
        args,
        workload: &workload,
        transport: socket.transport(),
        local: socket.local_addr(),
        bins: &bins,
        truncated,
        sent,
        cut,
        late,
        max_lag,
        generating,
        results,
        all,
        per_bin,
        metrics,
    };
    let json = report.to_json();
    let failed = report.failed();
    match args.json.as_deref() {
        Some(p) if p.as_os_str() == "-" => {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{}", serde_json::to_string_pretty(&json).expect("serializable"))
                .map_err(Error::io("writing standard output"))?;
        }
        other => {
            let mut out = std::io::stdout().lock();
            write!(out, "{}", report.table()).map_err(Error::io("writing standard output"))?;
            if let Some(path) = other {
                crate::bench::write_json(path, &json)?;
            }
        }
    }
    if failed > 0 {
        return Err(Error::Failed(format!("{failed} of {sent} calls failed")));
    }
    Ok(())
}

fn progress_bar(quiet: bool, duration: f64) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    // Drawn on stderr, and only when it is a terminal.
    let bar = ProgressBar::new((duration * 1000.0) as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {percent:>3}%  {msg}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar
}

/// Everything the report shows.
struct Report<'a> {
    args: &'a Args,
    workload: &'a Workload,
    transport: TransportKind,
    local: SocketAddr,
    bins: &'a Bins,
    truncated: f64,
    sent: u64,
    cut: u64,
    late: u64,
    max_lag: Duration,
    generating: Duration,
    results: Results,
    all: Summary,
    per_bin: Vec<Summary>,
    metrics: homa_io::Metrics,
}

impl Report<'_> {
    /// The time requests were started over (throughput is per this time).
    fn elapsed(&self) -> f64 {
        self.generating.as_secs_f64().max(1e-9)
    }

    fn failed(&self) -> u64 {
        self.results.errors.values().sum()
    }

    fn to_json(&self) -> Value {
        let secs = self.elapsed();
        let r = &self.results;
        let bins: Vec<Value> = self
            .per_bin
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let mut m = Map::new();
                m.insert(
                    "min_bytes".into(),
                    json!(if i == 0 { 1 } else { self.bins.bounds[i - 1] + 1 }),
                );
                m.insert("max_bytes".into(), json!(self.bins.bounds[i]));
                m.insert("workload_share".into(), json!(share(self.bins, i)));
                m.extend(s.to_json());
                Value::Object(m)
            })
            .collect();
        let core = &self.metrics.core;
        let t = &self.metrics.transport;
        json!({
            "command": "client",
            "server": self.args.server.to_string(),
            "local": self.local.to_string(),
            "transport": self.transport.name(),
            "workload": self.workload.name(),
            "max_message_bytes": MAX_MESSAGE,
            "workload_share_over_max": self.truncated,
            "messages_cut_to_max": self.cut,
            "rate_offered": self.args.rate,
            "duration_s": self.args.duration,
            "seed": self.args.seed,
            "concurrency": self.args.concurrency,
            "requests": {
                "started": self.sent,
                "completed": r.completed,
                "failed": self.failed(),
                "unfinished": r.unfinished,
                "corrupted": r.corrupted,
                "late_starts": self.late,
                "max_start_lag_us": us(self.max_lag.as_nanos() as u64),
            },
            "throughput": {
                "rpcs_per_s": r.completed as f64 / secs,
                "request_gbps": r.request_bytes as f64 * 8.0 / secs / 1e9,
                "response_gbps": r.response_bytes as f64 * 8.0 / secs / 1e9,
                "request_bytes": r.request_bytes,
                "response_bytes": r.response_bytes,
            },
            "errors": r.errors,
            "latency": self.all.to_json(),
            "bins": bins,
            "endpoint": {
                "packets_in": core.packets_in,
                "drops": core.drops.total(),
                "retransmitted_packets": core.retransmitted_packets,
                "client_timeouts": core.client_timeouts,
                "restarts": core.restarts,
                "resends_received": core.packets_in_by_type[2],
                "resends_sent": core.packets_out_by_type[2],
                "rpcs": core.rpcs,
                "rx_bytes": core.rx_bytes,
                "tx_bytes": core.tx_bytes,
                "receive_errors": self.metrics.receive_errors,
                "send_errors": self.metrics.send_errors,
                "tx_datagrams": t.tx_datagrams,
                "tx_calls": t.tx_calls,
                "rx_datagrams": t.rx_datagrams,
                "rx_calls": t.rx_calls,
                "driver_wakeups": self.metrics.wakeups,
            },
            "metrics": serde_json::Value::from(self.metrics.to_value()),
            "host": host_json(),
        })
    }

    fn table(&self) -> String {
        use std::fmt::Write as _;
        let r = &self.results;
        let secs = self.elapsed();
        let mut s = String::new();
        let _ = writeln!(
            s,
            "homa client -> {} over {}: workload {}, {} RPC/s offered for {} s (seed {})",
            self.args.server,
            self.transport,
            self.workload.name(),
            self.args.rate,
            self.args.duration,
            self.args.seed
        );
        if self.truncated > 0.0 {
            let _ = writeln!(
                s,
                "sizes cut to {MAX_MESSAGE} B (Homa's largest message, as cp_node does): {:.2} % of the workload, {} messages here",
                self.truncated * 100.0,
                self.cut
            );
        }
        let _ = writeln!(
            s,
            "started {}, completed {}, failed {}, unfinished {}{}; {} started late (concurrency limit {}), max start lag {:.0} us",
            self.sent,
            r.completed,
            self.failed(),
            r.unfinished,
            if self.args.verify { format!(", corrupted {}", r.corrupted) } else { String::new() },
            self.late,
            self.args.concurrency,
            self.max_lag.as_secs_f64() * 1e6
        );
        let _ = writeln!(
            s,
            "throughput: {:.1} RPC/s, {:.3} Gbit/s of requests + {:.3} Gbit/s of responses",
            r.completed as f64 / secs,
            r.request_bytes as f64 * 8.0 / secs / 1e9,
            r.response_bytes as f64 * 8.0 / secs / 1e9
        );
        let _ = writeln!(
            s,
            "{:>21} {:>7} {:>9} {:>10} {:>10} {:>10}",
            "size bin (bytes)", "share", "count", "p50 us", "p99 us", "p99.9 us"
        );
        let row = |s: &mut String, label: &str, share: String, m: &Summary| {
            let f = |ns: u64| {
                if m.count == 0 { "-".to_string() } else { format!("{:.1}", ns as f64 / 1e3) }
            };
            let _ = writeln!(
                s,
                "{label:>21} {share:>7} {:>9} {:>10} {:>10} {:>10}",
                m.count,
                f(m.p50),
                f(m.p99),
                f(m.p999)
            );
        };
        for (i, m) in self.per_bin.iter().enumerate() {
            let lo = if i == 0 { 1 } else { self.bins.bounds[i - 1] + 1 };
            let label = format!("{lo}..{}", self.bins.bounds[i]);
            row(&mut s, &label, format!("{:.1}%", share(self.bins, i) * 100.0), m);
        }
        row(&mut s, "all", "100%".into(), &self.all);
        // The socket's own histogram, as Prometheus would see it: bucket bounds, not samples.
        let h = &self.metrics.calls;
        let q = |q: f64| match h.quantile(q) {
            _ if h.count() == 0 => "-".to_string(),
            Some(b) => format!("<= {:.1}", b * 1e6),
            None => "above 10 s".to_string(),
        };
        let _ = writeln!(
            s,
            "socket histogram (homa_call_duration_seconds, {} calls): p50 {} us, p99 {} us",
            h.count(),
            q(0.5),
            q(0.99)
        );
        let errors = if r.errors.is_empty() {
            "none".to_string()
        } else {
            r.errors.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")
        };
        let _ = writeln!(s, "errors: {errors}");
        s
    }
}

/// The workload's share of messages in bin `i`.
fn share(bins: &Bins, i: usize) -> f64 {
    bins.cum[i] - if i == 0 { 0.0 } else { bins.cum[i - 1] }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_cover_every_size_and_stop_at_the_largest_message() {
        let w = Workload::builtin("w5").unwrap();
        let bins = Bins::new(&w, 10);
        assert_eq!(*bins.bounds.last().unwrap(), MAX_MESSAGE);
        assert!(bins.bounds.windows(2).all(|b| b[0] < b[1]));
        assert_eq!(bins.of(1), 0);
        assert_eq!(bins.of(MAX_MESSAGE), bins.bounds.len() - 1);
        assert!((bins.cum.last().unwrap() - 1.0).abs() < 1e-9);
    }
}
