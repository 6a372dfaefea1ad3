//! `homa bench rtt`: request/response ping-pong over loopback for every Homa transport,
//! plain UDP and TCP, interleaved in rounds.

use std::io::Write as _;
use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use homa_io::{Config, Payload, Socket, TransportKind};
use serde_json::{Map, Value, json};

use super::uring::{self, UringUdp};
use super::{HomaPair, LOOPBACK_MBPS, TcpConn, TcpServer, UdpEcho, write_json};
use crate::error::Error;
use crate::logging;
use crate::netns::is_root;
use crate::stats::{Samples, Summary, cpu_time, host_json, ratio, us};

/// Ping-pong latency over loopback: Homa (UDP, io_uring, raw IP) vs plain UDP and TCP.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Examples:
  homa bench rtt
  homa bench rtt --count 50000 --json rtt.json
  homa bench rtt --size 1000 --only homa/udp,udp,tcp

Every contender runs in this process: a server thread answering each request with its own \
bytes, and this thread calling it, one call at a time, over 127.0.0.0/8:
  homa/udp       Homa over UDP (homa_io, the default transport)
  homa/uring     Homa over UDP through io_uring (falls back to plain UDP if unavailable)
  homa/ip        Homa as IP protocol 146, as the Linux module (needs CAP_NET_RAW)
  homa/uring-ip  the same through io_uring
  udp            plain UDP: sendto / recvfrom, no protocol at all (the floor)
  uring          plain UDP through io_uring, one ring entry per side per round trip \
(io_uring's floor, for homa/uring)
  tcp            TCP with TCP_NODELAY on one connection, length-framed messages
Contenders take turns in rounds of --round round trips (the order rotates each round), so \
load from elsewhere on the machine hits all of them alike. Homa's pacer is set to 1 Tbit/s \
(the loopback device has no line rate). The ratios compare p50 (and p99) with plain UDP's \
and TCP's from the same run. CPU per RPC is this process's user + system time during the \
contender's turns (both ends, and the kernel's work on their behalf) per round trip.")]
pub(crate) struct Args {
    /// Round trips measured per contender (after a warm-up of one round).
    #[arg(long, default_value_t = 20_000)]
    count: usize,
    /// Round trips per contender per turn.
    #[arg(long, default_value_t = 1000)]
    round: usize,
    /// Request (and response) size in bytes.
    #[arg(long, default_value_t = 100)]
    size: usize,
    /// Only these contenders (comma-separated names, see below).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Write the results as JSON here.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// How long a blocked Homa caller polls before it sleeps, in µs (default: homa-io's
    /// 50, backing off while it does not pay; 0: never).
    #[arg(long, value_name = "US")]
    busy_poll_us: Option<u64>,
    /// Where the threads run: wherever the scheduler puts them (any), all on one CPU
    /// (same: the work of a round trip, no cross-CPU wake-up), or the caller on one CPU and
    /// every server and Homa driver thread on another (split: each round trip crosses CPUs
    /// twice, as between hosts).
    #[arg(long, value_enum, default_value_t = Cpus::Any)]
    cpus: Cpus,
    /// More log output; RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
}

/// homa/udp's p50 round trip against plain UDP's, at most.
const P50_VS_UDP_TARGET: f64 = 1.15;

/// Thread placement (`--cpus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Cpus {
    Any,
    Same,
    Split,
}

impl Cpus {
    /// As `--cpus` spells it.
    fn name(self) -> String {
        use clap::ValueEnum as _;
        self.to_possible_value().expect("no variant is skipped").get_name().to_string()
    }
}

/// The CPUs this process may run on.
fn allowed_cpus() -> Result<Vec<usize>, Error> {
    // SAFETY: cpu_set_t is plain data; the call fills it, CPU_ISSET reads it below
    // CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(Error::io("reading the CPU affinity")(std::io::Error::last_os_error()));
        }
        Ok((0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect())
    }
}

/// Pins the calling thread, and the threads it starts from now on, to `cpu`.
fn pin_to(cpu: usize) -> Result<(), Error> {
    // SAFETY: as above; `set` holds `cpu`, below CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(Error::io("setting the CPU affinity")(std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// The names, in the order they are set up and reported.
const CONTENDERS: [&str; 7] =
    ["homa/udp", "homa/uring", "homa/ip", "homa/uring-ip", "udp", "uring", "tcp"];

/// Something that can do one round trip.
trait Pinger {
    fn ping(&mut self) -> Result<(), String>;

    /// Counters worth reporting (Homa: both sockets' driver wake-ups and system calls).
    fn counters(&self) -> Option<Value> {
        None
    }
}

struct HomaPinger {
    pair: HomaPair,
    dest: SocketAddr,
    /// Shared with every call (as the other contenders reuse one buffer).
    message: Arc<Vec<u8>>,
}

impl Pinger for HomaPinger {
    fn ping(&mut self) -> Result<(), String> {
        let response = self
            .pair
            .client
            .call(self.dest, Payload::shared(Arc::clone(&self.message) as _), None)
            .map_err(|e| e.to_string())?;
        if response.len() != self.message.len() {
            return Err(format!("response of {} bytes", response.len()));
        }
        Ok(())
    }

    fn counters(&self) -> Option<Value> {
        let side = |m: homa_io::Metrics| {
            json!({
                "driver_wakeups": m.wakeups,
                "tx_datagrams": m.transport.tx_datagrams,
                "tx_calls": m.transport.tx_calls,
                "rx_datagrams": m.transport.rx_datagrams,
                "rx_calls": m.transport.rx_calls,
                "retransmitted_packets": m.core.retransmitted_packets,
            })
        };
        Some(json!({
            "client": side(self.pair.client.metrics()),
            "server": side(self.pair.server.metrics()),
        }))
    }
}

struct UdpPinger {
    _server: UdpEcho,
    socket: UdpSocket,
    dest: SocketAddr,
    message: Vec<u8>,
    buf: Vec<u8>,
}

impl Pinger for UdpPinger {
    fn ping(&mut self) -> Result<(), String> {
        self.socket.send_to(&self.message, self.dest).map_err(|e| e.to_string())?;
        let (n, _) = self.socket.recv_from(&mut self.buf).map_err(|e| e.to_string())?;
        if n != self.message.len() {
            return Err(format!("response of {n} bytes"));
        }
        Ok(())
    }
}

/// Plain UDP through io_uring ([`uring`]): one ring entry per side per round
/// trip.
struct UringPinger {
    _server: UdpEcho,
    ring: UringUdp,
    dest: SocketAddrV4,
    message: Vec<u8>,
    buf: Vec<u8>,
}

impl Pinger for UringPinger {
    fn ping(&mut self) -> Result<(), String> {
        let out = Some((&self.message[..], self.dest));
        let (n, _) = self.ring.exchange(out, &mut self.buf).map_err(|e| e.to_string())?;
        if n != self.message.len() {
            return Err(format!("response of {n} bytes"));
        }
        Ok(())
    }
}

struct TcpPinger {
    _server: TcpServer,
    conn: TcpConn,
    message: Vec<u8>,
    buf: Vec<u8>,
}

impl Pinger for TcpPinger {
    fn ping(&mut self) -> Result<(), String> {
        self.conn.send(&self.message, Some(u32::MAX)).map_err(|e| e.to_string())?;
        self.conn.recv(&mut self.buf).map_err(|e| e.to_string())?;
        if self.buf.len() != self.message.len() {
            return Err(format!("response of {} bytes", self.buf.len()));
        }
        Ok(())
    }
}

/// One contender: set up (or why not), and what it measured.
struct Contender {
    name: &'static str,
    pinger: Option<Box<dyn Pinger>>,
    /// Why it did not run.
    skipped: Option<String>,
    /// The transport homa_io used (io_uring may fall back).
    used: Option<TransportKind>,
    samples: Samples,
    busy: Duration,
    /// CPU seconds (user + system) this process spent during the recorded turns: both ends.
    cpu_s: f64,
    errors: u64,
    first_error: Option<String>,
}

impl Contender {
    fn new(
        name: &'static str,
        setup: Result<(Box<dyn Pinger>, Option<TransportKind>), String>,
    ) -> Contender {
        let (pinger, used, skipped) = match setup {
            Ok((p, used)) => (Some(p), used, None),
            Err(why) => (None, None, Some(why)),
        };
        Contender {
            name,
            pinger,
            skipped,
            used,
            samples: Samples::default(),
            busy: Duration::ZERO,
            cpu_s: 0.0,
            errors: 0,
            first_error: None,
        }
    }

    /// `n` round trips, each timed and (if `record`) kept.
    fn turn(&mut self, n: usize, record: bool) {
        let Some(p) = self.pinger.as_mut() else { return };
        let (begin, cpu0) = (Instant::now(), cpu_time());
        for _ in 0..n {
            let start = Instant::now();
            match p.ping() {
                Ok(()) if record => self.samples.push(start.elapsed()),
                Ok(()) => {}
                Err(e) => {
                    self.errors += 1;
                    self.first_error.get_or_insert(e);
                }
            }
        }
        if record {
            self.busy += begin.elapsed();
            let cpu1 = cpu_time();
            self.cpu_s += (cpu1.0 - cpu0.0) + (cpu1.1 - cpu0.1);
        }
    }
}

/// The Homa transport a contender asks for.
fn wanted(name: &str) -> Option<TransportKind> {
    match name {
        "homa/udp" => Some(TransportKind::Udp),
        "homa/uring" => Some(TransportKind::UringUdp),
        "homa/ip" => Some(TransportKind::Ip),
        "homa/uring-ip" => Some(TransportKind::UringIp),
        _ => None,
    }
}

fn setup(
    name: &str,
    size: usize,
    busy_poll: Option<Duration>,
) -> Result<(Box<dyn Pinger>, Option<TransportKind>), String> {
    let message = vec![0x42u8; size];
    let homa =
        |kind: TransportKind, n: u8| -> Result<(Box<dyn Pinger>, Option<TransportKind>), String> {
            if kind.is_ip() && !is_root() {
                return Err("skipped: needs CAP_NET_RAW (run as root)".into());
            }
            // A loaded machine can leave a thread unscheduled for a while; don't let Homa's
            // 100 ms silence timeout turn that into failed calls.
            let config = Config { timeout_ticks: 2000, ..Config::default() };
            let mut builder = Socket::builder().config(config).link_mbps(LOOPBACK_MBPS);
            if let Some(spin) = busy_poll {
                builder = builder.busy_poll(spin);
            }
            let pair = HomaPair::open(&builder, kind, n, None).map_err(|e| match e {
                homa_io::Error::MissingCapability { capability, .. } => {
                    format!("skipped: needs {capability}")
                }
                other => format!("skipped: {other}"),
            })?;
            let (dest, used) = (pair.dest(), pair.used());
            if used != kind {
                tracing::warn!("{kind} fell back to {used} (see the warning above)");
            }
            let message = Arc::new(message.clone());
            Ok((Box::new(HomaPinger { pair, dest, message }), Some(used)))
        };
    if let Some(kind) = wanted(name) {
        let n = CONTENDERS.iter().position(|&c| c == name).unwrap_or(0) as u8;
        return homa(kind, n);
    }
    match name {
        "udp" => {
            let server = UdpEcho::start().map_err(|e| e.to_string())?;
            let socket = UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
            let dest = server.addr;
            let pinger = UdpPinger { _server: server, socket, dest, message, buf: vec![0; 65_536] };
            Ok((Box::new(pinger), None))
        }
        "uring" => {
            let skipped = |e: std::io::Error| format!("skipped: io_uring unavailable: {e}");
            let server = uring::start_echo().map_err(skipped)?;
            let ring = UringUdp::bind().map_err(skipped)?;
            let SocketAddr::V4(dest) = server.addr else { unreachable!("bound to 127.0.0.1") };
            let buf = vec![0; 65_536];
            Ok((Box::new(UringPinger { _server: server, ring, dest, message, buf }), None))
        }
        "tcp" => {
            let server = TcpServer::start(1).map_err(|e| e.to_string())?;
            let conn = server.connect().map_err(|e| e.to_string())?;
            Ok((Box::new(TcpPinger { _server: server, conn, message, buf: Vec::new() }), None))
        }
        other => Err(format!("unknown contender {other}")),
    }
}

pub(crate) fn run(args: &Args) -> Result<(), Error> {
    logging::init(args.verbose, "warn");
    if args.count == 0 || args.round == 0 {
        return Err(Error::Input("--count and --round must be positive".into()));
    }
    if !(1..=65_000).contains(&args.size) {
        return Err(Error::Input("--size must be between 1 and 65,000 (one UDP datagram)".into()));
    }
    for o in &args.only {
        if !CONTENDERS.contains(&o.as_str()) {
            return Err(Error::Input(format!(
                "unknown contender {o:?} (known: {})",
                CONTENDERS.join(", ")
            )));
        }
    }
    let busy_poll = args.busy_poll_us.map(Duration::from_micros);
    let host_before = host_json();
    // Threads inherit the affinity of the thread that starts them: the servers' and the
    // drivers' is set before they start, the caller's after.
    let cpus = allowed_cpus()?;
    match (args.cpus, &cpus[..]) {
        (Cpus::Any, _) => {}
        (Cpus::Same, [first, ..]) => pin_to(*first)?,
        (Cpus::Split, [_, second, ..]) => pin_to(*second)?,
        (_, _) => {
            let why = format!("--cpus split needs two CPUs; this process may run on {cpus:?}");
            return Err(Error::Input(why));
        }
    }
    let mut all: Vec<Contender> = CONTENDERS
        .iter()
        .filter(|n| args.only.is_empty() || args.only.iter().any(|o| o == *n))
        .map(|&name| Contender::new(name, setup(name, args.size, busy_poll)))
        .collect();
    if args.cpus == Cpus::Split {
        pin_to(cpus[0])?;
    }
    let rounds = args.count.div_ceil(args.round);
    let cpu_before = cpu_time();
    let started = Instant::now();
    for c in &mut all {
        c.turn(args.round, false); // warm-up
    }
    let n = all.len();
    for r in 0..rounds {
        let this_round = args.round.min(args.count - r * args.round);
        for i in 0..n {
            all[(r + i) % n].turn(this_round, true);
        }
        if r % 5 == 4 {
            tracing::info!("round {} of {rounds}", r + 1);
        }
    }
    let wall = started.elapsed();
    let cpu_after = cpu_time();
    // Shut everything down before reporting (servers, driver threads).
    let mut rows: Vec<Row> = all
        .iter_mut()
        .map(|c| {
            let counters = c.pinger.as_ref().and_then(|p| p.counters());
            c.pinger = None;
            Row {
                counters,
                name: c.name,
                skipped: c.skipped.clone(),
                used: c.used,
                summary: c.samples.summary(),
                busy: c.busy,
                cpu_s: c.cpu_s,
                errors: c.errors,
                first_error: c.first_error.clone(),
            }
        })
        .collect();
    let (udp, tcp) = (base("udp", &rows), base("tcp", &rows));
    let json = to_json(args, &mut rows, udp, tcp, wall, (cpu_before, cpu_after), host_before);
    let mut out = std::io::stdout().lock();
    write!(out, "{}", table(args, &rows, udp, tcp, rounds, wall))
        .map_err(Error::io("writing standard output"))?;
    if let Some(path) = &args.json {
        write_json(path, &json)?;
    }
    Ok(())
}

struct Row {
    counters: Option<Value>,
    name: &'static str,
    skipped: Option<String>,
    used: Option<TransportKind>,
    summary: Summary,
    busy: Duration,
    cpu_s: f64,
    errors: u64,
    first_error: Option<String>,
}

impl Row {
    fn rpcs_per_s(&self) -> f64 {
        self.summary.count as f64 / self.busy.as_secs_f64().max(1e-9)
    }

    /// CPU time per round trip, both ends and the kernel's work for them, in µs.
    fn cpu_us_per_rpc(&self) -> f64 {
        self.cpu_s * 1e6 / (self.summary.count.max(1) as f64)
    }
}

fn to_json(
    args: &Args,
    rows: &mut [Row],
    udp: Option<Summary>,
    tcp: Option<Summary>,
    wall: Duration,
    (before, after): ((f64, f64), (f64, f64)),
    host_before: Value,
) -> Value {
    let contenders: Vec<Value> = rows
        .iter()
        .map(|r| {
            let mut m = Map::new();
            m.insert("name".into(), json!(r.name));
            if let Some(why) = &r.skipped {
                m.insert("status".into(), json!("skipped"));
                m.insert("reason".into(), json!(why));
                return Value::Object(m);
            }
            m.insert("status".into(), json!(if r.summary.count > 0 { "ok" } else { "failed" }));
            if let Some(used) = r.used {
                m.insert("transport_used".into(), json!(used.name()));
            }
            m.extend(r.summary.to_json());
            m.insert("rpcs_per_s".into(), json!(r.rpcs_per_s().round()));
            m.insert("cpu_us_per_rpc".into(), json!((r.cpu_us_per_rpc() * 100.0).round() / 100.0));
            m.insert("errors".into(), json!(r.errors));
            if let Some(e) = &r.first_error {
                m.insert("first_error".into(), json!(e));
            }
            if let Some(c) = &r.counters {
                m.insert("counters".into(), c.clone());
            }
            let b = |s: Option<Summary>, f: fn(&Summary) -> u64| {
                s.map_or(Value::Null, |s| ratio(f(&r.summary), f(&s)))
            };
            m.insert("p50_vs_udp".into(), b(udp, |s| s.p50));
            m.insert("p99_vs_udp".into(), b(udp, |s| s.p99));
            m.insert("p50_vs_tcp".into(), b(tcp, |s| s.p50));
            m.insert("p99_vs_tcp".into(), b(tcp, |s| s.p99));
            Value::Object(m)
        })
        .collect();
    let homa_udp = base("homa/udp", rows);
    let mut targets = match (homa_udp, udp, tcp) {
        (Some(h), Some(u), Some(t)) => json!({
            "homa_udp_p50_vs_udp": ratio(h.p50, u.p50),
            "homa_udp_p50_vs_udp_target": P50_VS_UDP_TARGET,
            "homa_udp_p50_vs_udp_met": h.p50 as f64 <= P50_VS_UDP_TARGET * u.p50 as f64,
            "homa_udp_p50_below_tcp_p50": h.p50 < t.p50,
        }),
        _ => Value::Null,
    };
    if let (Some(h), Some(r), Value::Object(m)) = (homa_udp, homa_uring(rows), &mut targets) {
        m.insert("homa_uring_p50_vs_homa_udp".into(), ratio(r.p50, h.p50));
        m.insert("homa_uring_p50_vs_homa_udp_met".into(), json!(r.p50 <= h.p50));
    }
    json!({
        "bench": "rtt",
        "size_bytes": args.size,
        "count": args.count,
        "round": args.round,
        "busy_poll_us": args.busy_poll_us,
        "cpus": args.cpus.name(),
        "link_mbps": LOOPBACK_MBPS,
        "wall_s": wall.as_secs_f64(),
        "cpu_s": { "user": after.0 - before.0, "system": after.1 - before.1 },
        "contenders": contenders,
        "targets": targets,
        "host": host_before,
        "load_average_1min_after": crate::stats::load_average(),
    })
}

fn table(
    args: &Args,
    rows: &[Row],
    udp: Option<Summary>,
    tcp: Option<Summary>,
    rounds: usize,
    wall: Duration,
) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "homa bench rtt: {} B request and response over loopback, {} round trips each in {rounds} interleaved rounds, --cpus {} ({:.1} s)",
        args.size,
        args.count,
        args.cpus.name(),
        wall.as_secs_f64()
    );
    let _ = writeln!(
        s,
        "{:<14} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>10}",
        "", "p50 us", "p99 us", "p99.9 us", "RPCs/s", "CPU us/RPC", "p50/udp", "p50/tcp"
    );
    let f = |ns: u64| format!("{:.1}", ns as f64 / 1e3);
    let x = |a: u64, b: Option<Summary>| match b {
        Some(b) if b.p50 > 0 => format!("{:.2}x", a as f64 / b.p50 as f64),
        _ => "-".into(),
    };
    for r in rows {
        let name = match (r.used, wanted(r.name)) {
            (Some(used), Some(want)) if used != want => format!("{} (as {used})", r.name),
            _ => r.name.to_string(),
        };
        if let Some(why) = &r.skipped {
            let _ = writeln!(s, "{name:<14} {why}");
            continue;
        }
        let m = &r.summary;
        if m.count == 0 {
            let _ = writeln!(
                s,
                "{name:<14} failed: {}",
                r.first_error.as_deref().unwrap_or("no samples")
            );
            continue;
        }
        let _ = writeln!(
            s,
            "{name:<14} {:>9} {:>9} {:>9} {:>9.0} {:>10.1} {:>10} {:>10}",
            f(m.p50),
            f(m.p99),
            f(m.p999),
            r.rpcs_per_s(),
            r.cpu_us_per_rpc(),
            x(m.p50, udp),
            x(m.p50, tcp)
        );
        if r.errors > 0 {
            let _ = writeln!(
                s,
                "{:<14} {} failed calls, first: {}",
                "",
                r.errors,
                r.first_error.as_deref().unwrap_or("?")
            );
        }
    }
    if let Some(h) = rows.iter().find(|r| r.name == "homa/udp" && r.summary.count > 0)
        && let (Some(u), Some(t)) = (udp, tcp)
    {
        let q = h.summary.p50 as f64 / u.p50 as f64;
        let _ = writeln!(
            s,
            "target: homa/udp p50 <= {P50_VS_UDP_TARGET}x plain UDP p50 ({q:.2}x: {}) and below TCP p50 ({} vs {} us: {})",
            if q <= P50_VS_UDP_TARGET { "met" } else { "missed" },
            us(h.summary.p50),
            us(t.p50),
            if h.summary.p50 < t.p50 { "met" } else { "missed" }
        );
    }
    if let (Some(h), Some(r)) = (base("homa/udp", rows), homa_uring(rows)) {
        let q = r.p50 as f64 / h.p50 as f64;
        let met = if r.p50 <= h.p50 { "met" } else { "missed" };
        let floor = match (base("uring", rows), udp) {
            (Some(b), Some(u)) => {
                format!("; bare io_uring: {:.2}x plain UDP", b.p50 as f64 / u.p50 as f64)
            }
            _ => String::new(),
        };
        let _ = writeln!(s, "target: homa/uring p50 <= homa/udp p50 ({q:.2}x: {met}{floor})");
    }
    s
}

/// The summary of a successful contender.
fn base(name: &str, rows: &[Row]) -> Option<Summary> {
    rows.iter().find(|r| r.name == name && r.summary.count > 0).map(|r| r.summary)
}

/// homa/uring's summary, if it ran through io_uring (not fallen back to plain UDP).
fn homa_uring(rows: &[Row]) -> Option<Summary> {
    rows.iter()
        .find(|r| r.name == "homa/uring" && r.used == Some(TransportKind::UringUdp))
        .filter(|r| r.summary.count > 0)
        .map(|r| r.summary)
}
