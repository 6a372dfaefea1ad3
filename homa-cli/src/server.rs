//! `homa server`: a Homa echo server (the response is the request, as with HomaModule's
//! `cp_node server`), until SIGINT or SIGTERM; then a graceful shutdown and the final counters.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use homa_io::{Builder, Cidr, Socket, TransportKind};

use crate::error::Error;
use crate::logging;

/// Serve Homa RPCs: answer every request with its own bytes (or with --response-len bytes).
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Examples:
  homa server --port 4000
  homa server --port 4000 --addr 198.18.0.1 --transport ip --allow 198.18.0.0/15
  homa server --port 0 --addr 127.0.0.1        (any free port; the line below names it)

Once the socket is open the server prints one line on stdout:
  listening on 127.0.0.1:4000 transport udp
With --metrics ADDR it also serves its counters and latency histograms to Prometheus at \
http://ADDR/metrics, and says so on a second line:
  metrics on http://127.0.0.1:9464/metrics
It runs until SIGINT (Ctrl-C) or SIGTERM, then shuts down gracefully: for up to 2 seconds it goes \
on answering until every response has been acknowledged by its client (a lost packet of a \
response is then still resent), then closes the socket and prints what it served and the \
endpoint's counters (--json FILE: all of them). Logs go to stderr (RUST_LOG, or -v / -vv).")]
pub(crate) struct Args {
    /// The Homa port to serve (1..=32767; with UDP also the UDP port). 0 picks a free one.
    #[arg(long)]
    port: u16,
    /// The local address to bind. Raw IP servers should name one (see homa-io's README).
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::UNSPECIFIED))]
    addr: IpAddr,
    /// udp (default, unprivileged), ip (IP protocol 146, as the Linux module; needs
    /// CAP_NET_RAW), uring (UDP through io_uring) or uring-ip.
    #[arg(long, default_value = "udp")]
    transport: TransportKind,
    /// Accept packets only from this prefix (repeatable), e.g. 198.18.0.0/15; others are
    /// dropped and counted.
    #[arg(long, value_name = "CIDR")]
    allow: Vec<Cidr>,
    /// Largest IP packet to send (default 1500; 65535 suits loopback).
    #[arg(long)]
    mtu: Option<u32>,
    /// Link speed for the pacer in Mbit/s (default 25000).
    #[arg(long)]
    link_mbps: Option<u32>,
    /// Answer with this many bytes instead of echoing (1..=1000000; cp_node --one-way
    /// answers with 100).
    #[arg(long, value_name = "BYTES")]
    response_len: Option<usize>,
    /// Threads taking requests.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Serve every counter and the latency histograms at http://ADDR/metrics, in
    /// Prometheus' text format (e.g. 127.0.0.1:9464; port 0 picks a free one).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// At exit, also write what was served and every counter as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<std::path::PathBuf>,
    /// More log output (-v: debug, -vv: trace); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
}

/// Describes a `homa_io` failure as the command's error: I/O errors exit 1, the rest
/// (a port in use, a missing capability, a bad option) are input errors (exit 2).
pub(crate) fn net_error(what: &str) -> impl FnOnce(homa_io::Error) -> Error + '_ {
    move |e| match e {
        homa_io::Error::Io(source) => Error::Io { what: what.to_string(), source },
        other => Error::Input(format!("{what}: {other}")),
    }
}

/// Binds a server on `ip`: on `port`, or on a free server port if `port` is 0.
pub(crate) fn bind(builder: &Builder, ip: IpAddr, port: u16) -> homa_io::Result<Socket> {
    if port != 0 {
        return builder.clone().bind(SocketAddr::new(ip, port));
    }
    // Server ports are 1..=32767, outside the kernel's ephemeral UDP range, so no port 0
    // trick: try candidates from a per-process starting point.
    let mut candidate = 10_000 + (std::process::id().wrapping_mul(7919) % 20_000) as u16;
    let mut last = None;
    for _ in 0..1000 {
        match builder.clone().bind(SocketAddr::new(ip, candidate)) {
            Err(e @ homa_io::Error::Api(homa_core::ApiError::PortInUse(_))) => last = Some(e),
            other => return other,
        }
        candidate = if candidate >= 32_767 { 10_000 } else { candidate + 1 };
    }
    Err(last.unwrap_or(homa_core::ApiError::PortInUse(candidate).into()))
}

/// SIGINT and SIGTERM, blocked in the calling thread (and every thread it starts later),
/// to be taken with `sigwait`.
pub(crate) struct Signals(libc::sigset_t);

impl Signals {
    pub(crate) fn block() -> Signals {
        // SAFETY: all-zero bytes are a valid sigset_t, which sigemptyset initialises; the
        // calls only read and write the live set.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            Signals(set)
        }
    }

    /// Waits for one of the signals; returns its name.
    pub(crate) fn wait(&self) -> &'static str {
        let mut sig = 0;
        // SAFETY: a live, initialised set and an int to write the signal number into.
        while unsafe { libc::sigwait(&self.0, &mut sig) } != 0 {}
        if sig == libc::SIGINT { "SIGINT" } else { "SIGTERM" }
    }
}

/// Serves `GET /metrics` on `addr` from a thread of its own (which lives as long as the
/// process): the socket's metrics in Prometheus' text format. Returns the bound address.
fn serve_metrics(addr: SocketAddr, socket: Arc<Socket>) -> Result<SocketAddr, Error> {
    let listener = TcpListener::bind(addr).map_err(Error::io("opening the metrics port"))?;
    let bound = listener.local_addr().map_err(Error::io("opening the metrics port"))?;
    let label = socket.local_addr().to_string();
    std::thread::Builder::new()
        .name("homa-metrics".into())
        .spawn(move || {
            let metrics = || socket.metrics().to_prometheus(&[("socket", &label)]);
            for conn in listener.incoming().flatten() {
                if let Err(e) = answer_scrape(conn, metrics) {
                    tracing::debug!("metrics request: {e}");
                }
            }
        })
        .map_err(Error::io("starting the metrics thread"))?;
    Ok(bound)
}

/// Reads one HTTP request (its head, at most 8 KiB, for at most a second) and answers it
/// (within a second too): `metrics()` for `GET /metrics`, 404 for any other path.
fn answer_scrape(mut conn: TcpStream, metrics: impl Fn() -> String) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(1)))?;
    conn.set_write_timeout(Some(Duration::from_secs(1)))?;
    let mut head = Vec::new();
    let mut buf = [0; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        match conn.read(&mut buf)? {
            0 => break,
            n => head.extend_from_slice(&buf[..n]),
        }
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let (status, kind, body) = if line.starts_with(b"GET /metrics ") {
        ("200 OK", "text/plain; version=0.0.4; charset=utf-8", metrics())
    } else {
        ("404 Not Found", "text/plain; charset=utf-8", "only /metrics is served here\n".into())
    };
    write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// What the request threads counted.
#[derive(Debug, Default)]
pub(crate) struct Served {
    requests: AtomicU64,
    request_bytes: AtomicU64,
    response_bytes: AtomicU64,
    reply_errors: AtomicU64,
}

pub(crate) fn run(args: &Args) -> Result<(), Error> {
    logging::init(args.verbose, "info");
    if let Some(n) = args.response_len
        && !(1..=1_000_000).contains(&n)
    {
        return Err(Error::Input("--response-len must be between 1 and 1,000,000".into()));
    }
    if args.threads == 0 {
        return Err(Error::Input("--threads must be at least 1".into()));
    }
    // Before any thread exists, so that all of them leave the signals to `sigwait`.
    let signals = Signals::block();
    let mut builder = Socket::builder().transport(args.transport).allow(args.allow.clone());
    if let Some(mtu) = args.mtu {
        builder = builder.mtu(mtu);
    }
    if let Some(mbps) = args.link_mbps {
        builder = builder.link_mbps(mbps);
    }
    let socket = Arc::new(
        bind(&builder, args.addr, args.port).map_err(net_error("opening the server socket"))?,
    );
    let local = socket.local_addr();
    tracing::info!(%local, transport = %socket.transport(), allow = ?args.allow, "serving");
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {local} transport {}", socket.transport())
            .and_then(|()| out.flush())
            .map_err(Error::io("writing standard output"))?;
        if let Some(addr) = args.metrics {
            let at = serve_metrics(addr, Arc::clone(&socket))?;
            writeln!(out, "metrics on http://{at}/metrics")
                .and_then(|()| out.flush())
                .map_err(Error::io("writing standard output"))?;
        }
    }
    let started = Instant::now();
    let served = Arc::new(Served::default());
    let workers: Vec<_> = (0..args.threads)
        .map(|i| {
            let (socket, served) = (Arc::clone(&socket), Arc::clone(&served));
            let response_len = args.response_len;
            std::thread::Builder::new()
                .name(format!("homa-server-{i}"))
                .spawn(move || serve(&socket, &served, response_len))
                .map_err(Error::io("starting a server thread"))
        })
        .collect::<Result<_, _>>()?;
    let signal = signals.wait();
    tracing::info!(signal, "shutting down");
    // Responses stay until their clients acknowledge them: one whose last packet was lost
    // is still resent then.
    if !socket.wait_idle(DRAIN) {
        tracing::warn!("{} RPCs still open after {DRAIN:?}", socket.metrics().core.rpcs);
    }
    let m = socket.metrics();
    socket.shutdown();
    for w in workers {
        let _ = w.join();
    }
    let secs = started.elapsed().as_secs_f64();
    let c = &m.core;
    let requests = served.requests.load(Ordering::Relaxed);
    let mut out = std::io::stdout().lock();
    let lines = [
        format!(
            "stopped by {signal} after {secs:.1} s: {requests} requests answered ({} bytes in, {} bytes out), {} replies failed",
            served.request_bytes.load(Ordering::Relaxed),
            served.response_bytes.load(Ordering::Relaxed),
            served.reply_errors.load(Ordering::Relaxed),
        ),
        format!(
            "endpoint: {} packets in, {} dropped (malformed {}, no port {}, unknown rpc {}, duplicate {}), {} by the allow-list; {} retransmitted; {} server timeouts",
            c.packets_in,
            c.drops.total(),
            c.drops.malformed,
            c.drops.no_port,
            c.drops.unknown_rpc,
            c.drops.duplicate,
            m.dropped_by_allow_list,
            c.retransmitted_packets,
            c.server_timeouts,
        ),
        format!(
            "transport: {} datagrams out in {} calls ({} refused), {} in in {} calls ({} dropped)",
            m.transport.tx_datagrams,
            m.transport.tx_calls,
            m.transport.tx_dropped,
            m.transport.rx_datagrams,
            m.transport.rx_calls,
            m.transport.rx_dropped,
        ),
    ];
    for line in lines {
        writeln!(out, "{line}").map_err(Error::io("writing standard output"))?;
    }
    out.flush().map_err(Error::io("writing standard output"))?;
    if let Some(path) = &args.json {
        let report = serde_json::json!({
            "command": "server",
            "local": local.to_string(),
            "transport": socket.transport().name(),
            "stopped_by": signal,
            "seconds": secs,
            "requests_answered": requests,
            "request_bytes": served.request_bytes.load(Ordering::Relaxed),
            "response_bytes": served.response_bytes.load(Ordering::Relaxed),
            "reply_errors": served.reply_errors.load(Ordering::Relaxed),
            "metrics": serde_json::Value::from(m.to_value()),
        });
        crate::bench::write_json(path, &report)?;
    }
    Ok(())
}

/// How long a stopping server waits for its responses to be acknowledged.
const DRAIN: std::time::Duration = std::time::Duration::from_secs(2);

/// Answers requests until the socket shuts down: with `response_len` bytes, or echoing.
pub(crate) fn serve(socket: &Socket, served: &Served, response_len: Option<usize>) {
    // One shared buffer for fixed-size answers: no allocation per reply.
    let fixed: Option<Arc<Vec<u8>>> = response_len.map(|n| Arc::new(vec![0x5a; n]));
    loop {
        let mut request = match socket.recv_request() {
            Ok(r) => r,
            Err(homa_io::Error::Shutdown) => return,
            Err(e) => {
                tracing::warn!("receiving a request: {e}");
                continue;
            }
        };
        let message = request.take_message();
        let (peer, id, len) = (request.peer(), request.id(), message.len());
        let response: homa_io::Payload = match &fixed {
            Some(buf) => homa_io::Payload::shared(Arc::clone(buf) as _),
            None => message.into(),
        };
        let out = response.len() as u64;
        served.requests.fetch_add(1, Ordering::Relaxed);
        served.request_bytes.fetch_add(len as u64, Ordering::Relaxed);
        match request.reply(response) {
            Ok(()) => {
                served.response_bytes.fetch_add(out, Ordering::Relaxed);
                tracing::trace!(%peer, id, len, "answered");
            }
            Err(homa_io::Error::Shutdown) => return,
            Err(e) => {
                served.reply_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%peer, id, "reply failed: {e}");
            }
        }
    }
}
