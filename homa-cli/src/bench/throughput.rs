//! `homa bench throughput`: large messages over loopback (or a veth pair between network
//! namespaces), one and several in flight, Homa against TCP, interleaved in rounds; with the
//! CPU time and system calls they cost.

use std::collections::VecDeque;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use homa_io::{Config, Payload, Socket, TransportKind};
use serde_json::{Value, json};

use super::veth::Veth;
use super::{HomaPair, LOOPBACK_MBPS, TcpConn, TcpServer, write_json};
use crate::error::Error;
use crate::logging;
use crate::netns::{Teardown, is_root};
use crate::stats::{cpu_time, host_json};

/// Throughput of large messages over loopback or a veth pair: Homa vs TCP, in the same run.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Examples:
  homa bench throughput
  homa bench throughput --in-flight 1,8 --mtu 65535 --seconds 1 --json tput.json
  homa bench throughput --echo
  sudo homa bench throughput --netns --mtu 1500,9000 --in-flight 1,8
  sudo homa bench throughput --netns --mtu 9000 --size 16777216 --in-flight 1,8

Each contender runs in this process: a server thread answering each request (with \
--response bytes, or with the request itself under --echo) and callers keeping --in-flight \
requests outstanding: for Homa one thread with that many calls in flight on one socket, for \
TCP that many connections (TCP_NODELAY), each with one length-framed message at a time and \
its own thread at both ends. Gbit/s counts request and response bytes. Contenders take turns \
(--rounds turns of --seconds each, order rotating), so load from elsewhere hits all alike. \
Homa's pacer is set to 1 Tbit/s; --mtu sets the largest IP packet Homa sends: 1500 by \
default, the MTU of real networks, where UDP GSO/GRO batch packets in the kernel; the \
loopback device takes up to 65,535, which Homa sockets use there when given no MTU; \
--max-incoming caps the bytes a receiver has granted and not yet received (a higher cap \
means fewer GRANT round trips, each of which wakes a thread at both ends); by default it is \
what a socket given none takes: 128 us of its link, at most its receive buffer. CPU is this \
process's user + system time (both ends), per GB moved and as cores busy; machine CPU is \
the whole machine's busy time, the kernel's softirq work included. With --netns (root) each \
MTU gets a link of its own: a server namespace and a client namespace joined by a veth \
pair of that MTU (created and removed by the command), where Homa and TCP each run; each \
is compared with TCP over the same link. Above 1,000,000 bytes, Homa's \
max_message_length is raised at both ends.")]
pub(crate) struct Args {
    /// Request size in bytes, at most 16 MiB (above 1,000,000 Homa's limit is raised).
    #[arg(long, default_value_t = 1_000_000)]
    size: usize,
    /// Requests in flight (comma-separated levels).
    #[arg(long, value_delimiter = ',', default_values_t = [1, 4, 16])]
    in_flight: Vec<usize>,
    /// Homa MTUs to run (comma-separated; each is a contender).
    #[arg(long, value_delimiter = ',', default_values_t = [1500])]
    mtu: Vec<u32>,
    /// Homa's cap on granted-but-unreceived bytes per receiver; 0: the socket's default
    /// (128 us of its link, at most its receive buffer).
    #[arg(long, default_value_t = 0)]
    max_incoming: u32,
    /// Homa transports to run (comma-separated: udp, ip, uring, uring-ip).
    #[arg(long, value_delimiter = ',', default_values_t = [TransportKind::Udp])]
    transport: Vec<TransportKind>,
    /// Seconds per turn.
    #[arg(long, default_value_t = 0.5)]
    seconds: f64,
    /// Turns per contender and level.
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Response size in bytes (cp_node --one-way answers with 100).
    #[arg(long, default_value_t = 100)]
    response: usize,
    /// Answer with the request itself instead.
    #[arg(long)]
    echo: bool,
    /// How long a blocked Homa caller polls before it sleeps, in µs (default: homa-io's
    /// 50, backing off while it does not pay; 0: never).
    #[arg(long, value_name = "US")]
    busy_poll_us: Option<u64>,
    /// Run each MTU's contenders across a veth pair between two network namespaces
    /// (root; created and removed by the command) instead of over loopback.
    #[arg(long)]
    netns: bool,
    /// Leave TCP out (to profile Homa alone).
    #[arg(long)]
    no_tcp: bool,
    /// Write the results as JSON here.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// More log output; RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
}

/// What one or more turns of a contender at one level measured.
#[derive(Debug, Default, Clone, Copy)]
struct Cell {
    messages: u64,
    bytes: u64,
    secs: f64,
    cpu_user: f64,
    cpu_sys: f64,
    /// The whole machine's busy CPU seconds (softirq included).
    cpu_machine: f64,
    errors: u64,
    /// Homa only: transport counters of both sockets.
    datagrams: u64,
    syscalls: u64,
    retransmitted: u64,
    wakeups: u64,
    /// Homa only: packets dropped (endpoints, transports: refused sends, bad datagrams).
    drops: u64,
    /// Homa only: datagrams received straight into their message.
    in_place: u64,
}

impl Cell {
    fn add(&mut self, o: &Cell) {
        self.messages += o.messages;
        self.bytes += o.bytes;
        self.secs += o.secs;
        self.cpu_user += o.cpu_user;
        self.cpu_sys += o.cpu_sys;
        self.cpu_machine += o.cpu_machine;
        self.errors += o.errors;
        self.datagrams += o.datagrams;
        self.syscalls += o.syscalls;
        self.retransmitted += o.retransmitted;
        self.in_place += o.in_place;
        self.wakeups += o.wakeups;
        self.drops += o.drops;
    }

    fn gbps(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.secs.max(1e-9) / 1e9
    }

    fn cpu_per_gb(&self) -> f64 {
        (self.cpu_user + self.cpu_sys) / (self.bytes as f64 / 1e9).max(1e-12)
    }

    fn machine_per_gb(&self) -> f64 {
        self.cpu_machine / (self.bytes as f64 / 1e9).max(1e-12)
    }

    fn cores(&self) -> f64 {
        (self.cpu_user + self.cpu_sys) / self.secs.max(1e-9)
    }
}

enum Kind {
    Homa(HomaPair),
    Tcp { _server: TcpServer, conns: Vec<TcpConn> },
}

struct Contender {
    name: String,
    /// TCP, the baseline of the contenders on its link.
    tcp: bool,
    /// The MTU of its veth pair under --netns; `None` on loopback.
    link: Option<u32>,
    kind: Option<Kind>,
    /// Why it could not be set up.
    skipped: Option<String>,
    /// Per level, summed over rounds.
    cells: Vec<Cell>,
}

impl Contender {
    fn new(
        name: String,
        tcp: bool,
        link: Option<u32>,
        kind: Result<Kind, String>,
        levels: usize,
    ) -> Contender {
        let (kind, skipped) = match kind {
            Ok(k) => (Some(k), None),
            Err(why) => (None, Some(why)),
        };
        Contender { name, tcp, link, kind, skipped, cells: vec![Cell::default(); levels] }
    }
}

/// Sums of the transport counters of a pair's two sockets.
fn homa_counters(pair: &HomaPair) -> [u64; 6] {
    let (c, s) = (pair.client.metrics(), pair.server.metrics());
    let t = |m: &homa_io::Metrics| {
        [
            m.transport.tx_datagrams + m.transport.rx_datagrams,
            m.transport.tx_calls + m.transport.rx_calls,
            m.core.retransmitted_packets,
            m.wakeups,
            m.core.drops.total() + m.transport.tx_dropped + m.transport.rx_dropped,
            m.transport.rx_in_place,
        ]
    };
    let (a, b) = (t(&c), t(&s));
    std::array::from_fn(|i| a[i] + b[i])
}

/// Keeps `n` calls in flight for `secs`, then lets the last ones finish.
fn homa_turn(
    pair: &HomaPair,
    n: usize,
    secs: f64,
    payload: &Arc<Vec<u8>>,
    response: usize,
) -> Cell {
    let dest = pair.dest();
    let before = homa_counters(pair);
    let cpu0 = cpu_time();
    let machine0 = machine_secs();
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    let mut cell = Cell::default();
    let mut calls = VecDeque::with_capacity(n);
    let mut issuing = true;
    loop {
        while issuing && calls.len() < n {
            let message = Payload::shared(Arc::clone(payload) as _);
            match pair.client.call_async(dest, message, Some(Duration::from_secs(10))) {
                Ok(call) => calls.push_back(call),
                Err(e) => {
                    tracing::debug!("call refused: {e}");
                    cell.errors += 1;
                    break;
                }
            }
        }
        let Some(call) = calls.pop_front() else { break };
        match call.wait() {
            Ok(r) => {
                cell.messages += 1;
                cell.bytes += (payload.len() + r.len()) as u64;
                debug_assert!(response == usize::MAX || r.len() == response);
            }
            Err(e) => {
                tracing::debug!("call failed: {e}");
                cell.errors += 1;
            }
        }
        issuing = Instant::now() < end;
    }
    cell.secs = start.elapsed().as_secs_f64();
    let cpu1 = cpu_time();
    let after = homa_counters(pair);
    cell.cpu_user = cpu1.0 - cpu0.0;
    cell.cpu_sys = cpu1.1 - cpu0.1;
    cell.cpu_machine = machine_secs() - machine0;
    cell.datagrams = after[0] - before[0];
    cell.syscalls = after[1] - before[1];
    cell.retransmitted = after[2] - before[2];
    cell.wakeups = after[3] - before[3];
    cell.drops = after[4] - before[4];
    cell.in_place = after[5] - before[5];
    if tracing::enabled!(tracing::Level::DEBUG) {
        let (c, s) = (pair.client.metrics(), pair.server.metrics());
        // Packets sent per type (DATA, GRANT, RESEND, RPC_UNKNOWN, BUSY, ...), since opening.
        let (c_out, s_out) = (c.core.packets_out_by_type, s.core.packets_out_by_type);
        tracing::debug!(client = ?c.core.drops, client_transport = ?c.transport, ?c_out, server = ?s.core.drops, server_transport = ?s.transport, ?s_out, "counters");
    }
    cell
}

/// `n` connections, each sending one message at a time for `secs` from its own thread.
fn tcp_turn(conns: &mut [TcpConn], n: usize, secs: f64, payload: &[u8], response: u32) -> Cell {
    let cpu0 = cpu_time();
    let machine0 = machine_secs();
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    let per: Vec<(u64, u64, u64)> = std::thread::scope(|s| {
        let threads: Vec<_> = conns[..n]
            .iter_mut()
            .map(|conn| {
                s.spawn(move || {
                    let (mut messages, mut bytes, mut errors) = (0, 0, 0);
                    let mut buf = Vec::new();
                    loop {
                        let r =
                            conn.send(payload, Some(response)).and_then(|()| conn.recv(&mut buf));
                        match r {
                            Ok(()) => {
                                messages += 1;
                                bytes += (payload.len() + buf.len()) as u64;
                            }
                            Err(e) => {
                                tracing::warn!("tcp: {e}");
                                errors += 1;
                                break;
                            }
                        }
                        if Instant::now() >= end {
                            break;
                        }
                    }
                    (messages, bytes, errors)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap_or((0, 0, 1))).collect()
    });
    let secs = start.elapsed().as_secs_f64();
    let cpu1 = cpu_time();
    Cell {
        messages: per.iter().map(|p| p.0).sum(),
        bytes: per.iter().map(|p| p.1).sum(),
        errors: per.iter().map(|p| p.2).sum(),
        secs,
        cpu_user: cpu1.0 - cpu0.0,
        cpu_sys: cpu1.1 - cpu0.1,
        cpu_machine: machine_secs() - machine0,
        ..Cell::default()
    }
}

/// The whole machine's busy CPU time so far, in seconds.
fn machine_secs() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    crate::stats::machine_cpu_ticks().map_or(f64::NAN, |(busy, _)| busy as f64 / hz)
}

/// The largest --size: 16 MiB, the largest tensors the bench is meant for.
const MAX_SIZE: usize = 1 << 24;

pub(crate) fn run(args: &Args) -> Result<(), Error> {
    logging::init(args.verbose, "warn");
    if !(1..=MAX_SIZE).contains(&args.size) || !(1..=MAX_SIZE).contains(&args.response) {
        return Err(Error::Input("--size and --response must be between 1 and 16,777,216".into()));
    }
    if args.in_flight.is_empty() || args.in_flight.contains(&0) || args.rounds == 0 {
        return Err(Error::Input("--in-flight levels and --rounds must be positive".into()));
    }
    if !(args.seconds > 0.0 && args.seconds <= 86_400.0) {
        return Err(Error::Input("--seconds must be positive and at most a day".into()));
    }
    if args.netns && !is_root() {
        return Err(Error::Input(
            "--netns needs root: it creates network namespaces and veth pairs".into(),
        ));
    }
    if args.netns && args.mtu.len() > 254 {
        return Err(Error::Input("--netns takes at most 254 MTUs".into()));
    }
    let max_level = *args.in_flight.iter().max().expect("not empty");
    let response_len = (!args.echo).then_some(args.response);
    let tcp_response = if args.echo { u32::MAX } else { args.response as u32 };
    let payload = Arc::new((0..args.size).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
    let longest = args.size.max(if args.echo { args.size } else { args.response });
    let defaults = Config::default();
    let config = Config {
        timeout_ticks: 2000,
        max_incoming: args.max_incoming,
        max_message_length: defaults.max_message_length.max(longest as u32),
        wmem_max: defaults.wmem_max.max((longest * max_level * 2) as u64),
        ..defaults
    };
    config.validate().map_err(|e| Error::Input(format!("--max-incoming: {e}")))?;
    let host_before = host_json();

    // Before any thread exists, so that every thread leaves the signals to its own.
    let teardown = Teardown::default();
    if args.netns {
        teardown.on_signals("homa bench throughput");
    }
    let _removed = Removed(teardown.clone());
    let links = args
        .mtu
        .iter()
        .enumerate()
        .map(|(i, &mtu)| args.netns.then(|| Veth::create(&teardown, i as u8 + 1, mtu)).transpose())
        .collect::<Result<Vec<_>, _>>()?;

    let mut all = Vec::new();
    let mut n = 10u8;
    for &kind in &args.transport {
        for (&mtu, link) in args.mtu.iter().zip(&links) {
            n += 1;
            let mut builder =
                Socket::builder().config(config.clone()).link_mbps(LOOPBACK_MBPS).mtu(mtu);
            if let Some(us) = args.busy_poll_us {
                builder = builder.busy_poll(Duration::from_micros(us));
            }
            let pair = match link {
                Some(veth) => HomaPair::open_across(&builder, kind, veth, response_len),
                None => HomaPair::open(&builder, kind, n, response_len)
                    .map_err(|e| Error::Failed(e.to_string())),
            };
            let pair = pair.map_err(|e| e.to_string());
            let name = match &pair {
                Ok(p) if p.used() != kind => format!("homa/{kind} (as {}) mtu {mtu}", p.used()),
                _ => format!("homa/{kind} mtu {mtu}"),
            };
            let link = link.as_ref().map(|v| v.mtu);
            all.push(Contender::new(name, false, link, pair.map(Kind::Homa), args.in_flight.len()));
        }
    }
    if !args.netns {
        let tcp =
            if args.no_tcp { Err("left out (--no-tcp)".into()) } else { tcp(None, max_level) };
        all.push(Contender::new("tcp".into(), true, None, tcp, args.in_flight.len()));
    } else if !args.no_tcp {
        for veth in links.iter().flatten() {
            let (name, tcp) = (format!("tcp mtu {}", veth.mtu), tcp(Some(veth), max_level));
            all.push(Contender::new(name, true, Some(veth.mtu), tcp, args.in_flight.len()));
        }
    }

    let started = Instant::now();
    let count = all.len();
    for (li, &level) in args.in_flight.iter().enumerate() {
        for round in 0..args.rounds {
            for i in 0..count {
                let c = &mut all[(round + i + li) % count];
                let cell = match &mut c.kind {
                    Some(Kind::Homa(pair)) => homa_turn(
                        pair,
                        level,
                        args.seconds,
                        &payload,
                        if args.echo { usize::MAX } else { args.response },
                    ),
                    Some(Kind::Tcp { conns, .. }) => {
                        tcp_turn(conns, level, args.seconds, &payload, tcp_response)
                    }
                    None => continue,
                };
                tracing::info!(contender = %c.name, level, round, gbps = cell.gbps(), "turn");
                c.cells[li].add(&cell);
            }
        }
    }
    let wall = started.elapsed();
    for c in &mut all {
        c.kind = None; // shuts servers and sockets down
    }

    let json = to_json(args, &all, wall, host_before);
    let mut out = std::io::stdout().lock();
    write!(out, "{}", table(args, &all, wall)).map_err(Error::io("writing standard output"))?;
    if let Some(path) = &args.json {
        write_json(path, &json)?;
    }
    Ok(())
}

/// A TCP server and `conns` connections to it: over loopback, or across `veth`.
fn tcp(veth: Option<&Veth>, conns: usize) -> Result<Kind, String> {
    let open = || -> Result<Kind, Error> {
        let starting = || Error::io("starting the TCP server");
        let server = match veth {
            Some(v) => {
                v.at_server(|| TcpServer::start_at(v.server_ip, conns).map_err(starting()))?
            }
            None => TcpServer::start(conns).map_err(starting())?,
        };
        let connect = || {
            let conns = (0..conns).map(|_| server.connect());
            conns.collect::<std::io::Result<Vec<_>>>().map_err(Error::io("connecting"))
        };
        let conns = match veth {
            Some(v) => v.at_client(connect)?,
            None => connect()?,
        };
        Ok(Kind::Tcp { _server: server, conns })
    };
    open().map_err(|e| e.to_string())
}

/// Removes the namespaces --netns created, however `run` ends.
struct Removed(Teardown);

impl Drop for Removed {
    fn drop(&mut self) {
        self.0.run();
    }
}

/// The cell of the TCP contender on `c`'s link at level `li`, if it ran.
fn tcp_cell(all: &[Contender], c: &Contender, li: usize) -> Option<Cell> {
    all.iter().find(|t| t.tcp && t.link == c.link).map(|t| t.cells[li]).filter(|t| t.bytes > 0)
}

fn to_json(args: &Args, all: &[Contender], wall: Duration, host: Value) -> Value {
    let mut results = Vec::new();
    for (li, &level) in args.in_flight.iter().enumerate() {
        for c in all {
            let cell = c.cells[li];
            if cell.messages == 0 && cell.errors == 0 {
                continue;
            }
            let tcp = tcp_cell(all, c, li);
            let mb = cell.bytes as f64 / 1e6;
            let homa = !c.tcp;
            results.push(json!({
                "contender": c.name,
                "veth_mtu": c.link,
                "in_flight": level,
                "gbps": cell.gbps(),
                "vs_tcp": tcp.map(|t| cell.gbps() / t.gbps()),
                "messages": cell.messages,
                "bytes": cell.bytes,
                "seconds": cell.secs,
                "errors": cell.errors,
                "cpu_user_s": cell.cpu_user,
                "cpu_system_s": cell.cpu_sys,
                "cpu_s_per_gb": cell.cpu_per_gb(),
                "cpu_per_gb_vs_tcp": tcp.map(|t| cell.cpu_per_gb() / t.cpu_per_gb()),
                "machine_cpu_s_per_gb": cell.machine_per_gb(),
                "cores_busy": cell.cores(),
                "datagrams_per_mb": homa.then(|| cell.datagrams as f64 / mb),
                "syscalls_per_mb": homa.then(|| cell.syscalls as f64 / mb),
                "in_place_per_mb": homa.then(|| cell.in_place as f64 / mb),
                "retransmitted_packets": homa.then_some(cell.retransmitted),
                "driver_wakeups": homa.then_some(cell.wakeups),
                "dropped_packets": homa.then_some(cell.drops),
            }));
        }
    }
    let skipped: Vec<Value> = all
        .iter()
        .filter_map(|c| c.skipped.as_ref().map(|why| json!({ "contender": c.name, "reason": why })))
        .collect();
    json!({
        "bench": "throughput",
        "size_bytes": args.size,
        "response_bytes": if args.echo { Value::from("echo") } else { Value::from(args.response) },
        "in_flight": args.in_flight,
        "seconds_per_turn": args.seconds,
        "rounds": args.rounds,
        "link": if args.netns { "veth pairs between network namespaces" } else { "loopback" },
        "pacer_link_mbps": LOOPBACK_MBPS,
        "max_incoming": args.max_incoming,
        "busy_poll_us": args.busy_poll_us,
        "wall_s": wall.as_secs_f64(),
        "results": results,
        "skipped": skipped,
        "host": host,
        "load_average_1min_after": crate::stats::load_average(),
    })
}

fn table(args: &Args, all: &[Contender], wall: Duration) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let response =
        if args.echo { "echoed".to_string() } else { format!("{} B responses", args.response) };
    let _ = writeln!(
        s,
        "homa bench throughput: {} B requests, {response}, {}, Homa max_incoming {}; {} turns of {} s per contender and level, interleaved ({:.1} s)",
        args.size,
        if args.netns { "veth pairs between network namespaces" } else { "loopback" },
        match args.max_incoming {
            0 => "auto".to_string(),
            n => n.to_string(),
        },
        args.rounds,
        args.seconds,
        wall.as_secs_f64()
    );
    let _ = writeln!(
        s,
        "{:>9}  {:<24} {:>8} {:>7} {:>9} {:>7} {:>10} {:>6} {:>12} {:>11} {:>11}",
        "in flight",
        "contender",
        "Gbit/s",
        "vs tcp",
        "CPU s/GB",
        "vs tcp",
        "machine/GB",
        "cores",
        "datagrams/MB",
        "syscalls/MB",
        "in place/MB"
    );
    for (li, &level) in args.in_flight.iter().enumerate() {
        for c in all {
            let cell = c.cells[li];
            let tcp = tcp_cell(all, c, li);
            if cell.messages == 0 {
                if li == 0
                    && let Some(why) = &c.skipped
                {
                    let _ = writeln!(s, "{:>9}  {:<24} skipped: {why}", "", c.name);
                }
                continue;
            }
            let mb = cell.bytes as f64 / 1e6;
            let (dg, sc, ip) = if c.tcp {
                ("-".to_string(), "-".to_string(), "-".to_string())
            } else {
                (
                    format!("{:.1}", cell.datagrams as f64 / mb),
                    format!("{:.1}", cell.syscalls as f64 / mb),
                    format!("{:.1}", cell.in_place as f64 / mb),
                )
            };
            let vs = |f: fn(&Cell) -> f64| {
                tcp.map_or("-".to_string(), |t| format!("{:.2}x", f(&cell) / f(&t)))
            };
            let _ = writeln!(
                s,
                "{level:>9}  {:<24} {:>8.2} {:>7} {:>9.2} {:>7} {:>10.2} {:>6.2} {dg:>12} {sc:>11} {ip:>11}",
                c.name,
                cell.gbps(),
                vs(Cell::gbps),
                cell.cpu_per_gb(),
                vs(Cell::cpu_per_gb),
                cell.machine_per_gb(),
                cell.cores()
            );
            if cell.errors > 0 {
                let _ = writeln!(s, "{:>9}  {:<24} {} failed calls", "", "", cell.errors);
            }
        }
    }
    s
}
