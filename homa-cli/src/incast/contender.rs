//! The contenders `homa incast` compares: Homa over raw IP and over UDP, TCP three ways, and
//! Homa from Python ([`python`]).
//! Each opens a server in the server's namespace and one client per client host, and offers
//! one operation, [`Clients::start`]: send a request of some size from a host, and report
//! when its (100-byte) response is back.

use std::collections::{HashMap, VecDeque};
use std::future::Future as _;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod python;

use homa_io::{Call, Payload, RpcInfo, Socket, TransportKind};

use super::topo::{Host, Topology, in_netns};
use crate::client::{MAX_MESSAGE, Prefix};
use crate::error::Error;
use crate::server::{Served, bind, net_error, serve};

/// Every response: small, as for cp_node's one-way mode; the requests carry the load.
pub(super) const RESPONSE_BYTES: usize = 100;

/// The server's port (Homa and TCP alike).
const PORT: u16 = 4000;

/// Called once per request: the time its response arrived, or the failure's kind.
pub(super) type Done = Box<dyn FnOnce(Result<Instant, &'static str>) + Send>;

/// The five contenders, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    HomaIp,
    HomaUdp,
    /// One connection per client: every request waits for those ahead of it.
    Tcp,
    /// Four connections per client; a request takes the one with the least outstanding.
    TcpPool,
    /// As `Tcp`, plus a second connection per client, marked for the top class, that the
    /// short requests (the probes, the check-ins, messages up to 1 KB) take: what priority
    /// alone buys.
    TcpTop,
    /// Homa over UDP from Python's asyncio API, a process per host.
    HomaPython,
}

impl Kind {
    pub(super) const ALL: [Kind; 6] =
        [Kind::HomaIp, Kind::HomaUdp, Kind::Tcp, Kind::TcpPool, Kind::TcpTop, Kind::HomaPython];

    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::HomaIp => "homa/ip",
            Kind::HomaUdp => "homa/udp",
            Kind::Tcp => "tcp",
            Kind::TcpPool => "tcp-pool",
            Kind::TcpTop => "tcp-top",
            Kind::HomaPython => "homa/python",
        }
    }

    pub(super) fn parse(name: &str) -> Result<Kind, String> {
        Kind::ALL.into_iter().find(|k| k.name() == name).ok_or_else(|| {
            let names: Vec<_> = Kind::ALL.iter().map(|k| k.name()).collect();
            format!("unknown contender {name:?} (expected one of {})", names.join(", "))
        })
    }

    pub(super) fn is_homa(self) -> bool {
        matches!(self, Kind::HomaIp | Kind::HomaUdp | Kind::HomaPython)
    }
}

/// A contender's server and clients, open in the lab.
pub(super) struct Clients {
    /// Per host index: 0 the probe, then the load clients.
    hosts: Vec<Box<dyn Client>>,
    server: Box<dyn Server>,
}

/// What a contender counted itself, at the end.
#[derive(Debug, Default)]
pub(super) struct Counters {
    /// DATA packets Homa retransmitted (clients and server); TCP's come from the kernel.
    pub(super) homa_retransmissions: u64,
    /// RESEND packets Homa receivers sent.
    pub(super) homa_resends: u64,
    /// BUSY packets that answered them (a sender with the bytes asked for still queued).
    pub(super) homa_busy: u64,
    /// Packets Homa's own sockets lost: refused by the kernel on send, or dropped on a full
    /// receive buffer (not the bottleneck's drops).
    pub(super) homa_host_drops: u64,
    /// Timers Homa's sockets ran so late that a peer may have asked for a resend because
    /// of it alone (`Metrics::late_timers`): the hosts' share of the CPUs fell short.
    pub(super) homa_late_timers: u64,
    /// CPU seconds of the contender's own processes (this one's are counted apart).
    pub(super) cpu_s: f64,
}

trait Client: Send + Sync {
    fn start(&self, size: usize, short: bool, done: Done);
    /// Where the RPCs it holds stand (Homa in this process only).
    fn held(&self) -> Vec<(SocketAddr, RpcInfo)> {
        Vec::new()
    }
    /// Closes the client; returns its counters.
    fn close(self: Box<Self>) -> Counters;
}

trait Server: Send + Sync {
    /// As [`Client::held`].
    fn held(&self) -> Vec<(SocketAddr, RpcInfo)> {
        Vec::new()
    }
    fn close(self: Box<Self>) -> Counters;
}

impl Clients {
    /// Opens `kind`'s server and clients; Homa paces for `link_mbps`; homa/python runs
    /// `python`.
    pub(super) fn open(
        kind: Kind,
        topo: &Topology,
        link_mbps: u32,
        python: &str,
    ) -> Result<Clients, Error> {
        let addr = SocketAddr::new(topo.server.ip, PORT);
        // The probe host twice: first the open-loop probe, last the closed-loop one.
        let probe = std::iter::once(&topo.probe);
        let hosts = probe.clone().chain(&topo.clients).chain(probe);
        if kind == Kind::HomaPython {
            let server = python::PyServer::open(python, &topo.server, link_mbps)?;
            let hosts = hosts
                .map(|h| {
                    let client = python::PyClient::open(python, h, &topo.server, link_mbps)?;
                    Ok(Box::new(client) as Box<dyn Client>)
                })
                .collect::<Result<_, Error>>()?;
            return Ok(Clients { hosts, server: Box::new(server) });
        }
        if kind.is_homa() {
            let transport =
                if kind == Kind::HomaIp { TransportKind::Ip } else { TransportKind::Udp };
            let builder = Socket::builder().transport(transport).link_mbps(link_mbps);
            let server = HomaServer::open(&topo.server, &builder)?;
            let collector = Collector::start();
            let buf = Arc::new((0..MAX_MESSAGE).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
            let hosts = hosts
                .map(|h| {
                    let socket = in_netns(h, || {
                        builder.clone().client(h.ip).map_err(net_error("opening a client socket"))
                    })?;
                    let (buf, events) = (Arc::clone(&buf), collector.events.clone());
                    Ok(Box::new(HomaClient { socket, server: addr, buf, events })
                        as Box<dyn Client>)
                })
                .collect::<Result<_, Error>>()?;
            drop(collector);
            return Ok(Clients { hosts, server: Box::new(server) });
        }
        let server = TcpServer::open(&topo.server)?;
        let (conns, top) = match kind {
            Kind::TcpPool => (4, false),
            Kind::TcpTop => (1, true),
            _ => (1, false),
        };
        let hosts = hosts
            .map(|h| {
                in_netns(h, || {
                    let open = |tos| Conn::open(addr, tos);
                    let conns = (0..conns).map(|_| open(0)).collect::<Result<_, _>>()?;
                    let top = if top { Some(open(0xe0)?) } else { None };
                    Ok(Box::new(TcpClient { conns, top }) as Box<dyn Client>)
                })
            })
            .collect::<Result<_, Error>>()?;
        Ok(Clients { hosts, server: Box::new(server) })
    }

    /// Sends `size` bytes from host `host` (0 the probe, then the clients, then the
    /// closed-loop probe on the probe's host); `short` marks the requests that TCP-top sends
    /// in its top class.
    pub(super) fn start(&self, host: usize, size: usize, short: bool, done: Done) {
        self.hosts[host].start(size, short, done);
    }

    /// Each request still unanswered, as its client's RPC and the server's stand, one line
    /// each (Homa in this process; the others say nothing).
    pub(super) fn unanswered(&self) -> Vec<String> {
        let server = self.server.held();
        let mut lines = Vec::new();
        for (at, c) in self.hosts.iter().flat_map(|h| h.held()) {
            let on_server = server.iter().find(|(_, s)| s.id == c.id && s.peer.ip() == at.ip());
            let there = match on_server {
                Some((_, s)) => format!("{s}"),
                None => "the server holds no such RPC".into(),
            };
            lines.push(format!("{at}: {c}. {there}"));
        }
        lines
    }

    /// Closes clients, then the server; returns their counters summed.
    pub(super) fn close(self) -> Counters {
        let mut sum = Counters::default();
        let mut add = |c: Counters| {
            sum.homa_retransmissions += c.homa_retransmissions;
            sum.homa_resends += c.homa_resends;
            sum.homa_busy += c.homa_busy;
            sum.homa_host_drops += c.homa_host_drops;
            sum.homa_late_timers += c.homa_late_timers;
            sum.cpu_s += c.cpu_s;
        };
        for h in self.hosts {
            add(h.close());
        }
        add(self.server.close());
        sum
    }
}

fn homa_counters(socket: &Socket) -> Counters {
    let m = socket.metrics();
    let core = m.core;
    Counters {
        homa_retransmissions: core.retransmitted_packets,
        homa_resends: core.packets_out_by_type[2],
        homa_busy: core.packets_in_by_type[4],
        homa_host_drops: m.transport.tx_dropped + m.transport.rx_overflow,
        homa_late_timers: m.late_timers,
        cpu_s: 0.0,
    }
}

struct HomaServer {
    socket: Arc<Socket>,
    threads: Vec<JoinHandle<()>>,
}

impl HomaServer {
    fn open(host: &Host, builder: &homa_io::Builder) -> Result<HomaServer, Error> {
        // The threads start in the host, on its CPUs.
        in_netns(host, || {
            let socket =
                bind(builder, host.ip, PORT).map_err(net_error("opening the server socket"))?;
            let socket = Arc::new(socket);
            let served = Arc::new(Served::default());
            let threads = (0..2)
                .map(|_| {
                    let (socket, served) = (Arc::clone(&socket), Arc::clone(&served));
                    std::thread::spawn(move || serve(&socket, &served, Some(RESPONSE_BYTES)))
                })
                .collect();
            Ok(HomaServer { socket, threads })
        })
    }
}

impl Server for HomaServer {
    fn held(&self) -> Vec<(SocketAddr, RpcInfo)> {
        self.socket.rpcs().into_iter().map(|r| (self.socket.local_addr(), r)).collect()
    }

    fn close(self: Box<Self>) -> Counters {
        // Responses stay until acknowledged: a lost last packet is still resent.
        self.socket.wait_idle(Duration::from_secs(2));
        let counters = homa_counters(&self.socket);
        self.socket.shutdown();
        for t in self.threads {
            let _ = t.join();
        }
        counters
    }
}

struct HomaClient {
    socket: Socket,
    server: SocketAddr,
    buf: Arc<Vec<u8>>,
    events: mpsc::Sender<Event>,
}

impl Client for HomaClient {
    fn start(&self, size: usize, _short: bool, done: Done) {
        let payload = Payload::shared(Arc::new(Prefix { buf: Arc::clone(&self.buf), len: size }));
        match self.socket.call_async(self.server, payload, None) {
            Ok(call) => {
                let _ = self.events.send(Event::Started(call, done, self.events.clone()));
            }
            Err(e) => done(Err(e.name())),
        }
    }

    fn held(&self) -> Vec<(SocketAddr, RpcInfo)> {
        self.socket.rpcs().into_iter().map(|r| (self.socket.local_addr(), r)).collect()
    }

    fn close(self: Box<Self>) -> Counters {
        let counters = homa_counters(&self.socket);
        self.socket.shutdown();
        counters
    }
}

/// Polls Homa calls when their wakers fire, and reports each one's end.
struct Collector {
    events: mpsc::Sender<Event>,
}

enum Event {
    /// A call, its report, and a sender for its waker.
    Started(Call, Done, mpsc::Sender<Event>),
    Woken(u64, Instant),
}

struct Waiting {
    call: Call,
    done: Done,
    waker: Waker,
}

/// Sends the wake-up's time (when the response arrived) to the collector.
struct Notify {
    slot: u64,
    events: mpsc::Sender<Event>,
}

impl Wake for Notify {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let _ = self.events.send(Event::Woken(self.slot, Instant::now()));
    }
}

impl Collector {
    /// Starts the collector's thread. It holds no sender itself: it ends once the clients
    /// are gone and every call has finished (closing a socket fails its calls), which
    /// drops the last waker.
    fn start() -> Collector {
        let (events, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut waiting: HashMap<u64, Waiting> = HashMap::new();
            let mut next = 0u64;
            for event in rx {
                let (slot, at) = match event {
                    Event::Started(call, done, events) => {
                        let slot = next;
                        next += 1;
                        let waker = Waker::from(Arc::new(Notify { slot, events }));
                        waiting.insert(slot, Waiting { call, done, waker });
                        (slot, Instant::now())
                    }
                    Event::Woken(slot, at) => (slot, at),
                };
                let Some(w) = waiting.get_mut(&slot) else { continue };
                let waker = w.waker.clone();
                if let Poll::Ready(result) =
                    std::pin::Pin::new(&mut w.call).poll(&mut Context::from_waker(&waker))
                {
                    let w = waiting.remove(&slot).expect("present");
                    (w.done)(result.map(|_| at).map_err(|e| e.name()));
                }
            }
        });
        Collector { events }
    }
}

/// A TCP echo-style server: per connection, read a length-prefixed request, answer with a
/// length-prefixed 100-byte response.
struct TcpServer {
    addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    host: Host,
    accept: JoinHandle<()>,
}

impl TcpServer {
    fn open(host: &Host) -> Result<TcpServer, Error> {
        let addr = SocketAddr::new(host.ip, PORT);
        let stopping = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&stopping);
        // The threads start in the host, on its CPUs.
        let accept = in_netns(host, || {
            let listener =
                TcpListener::bind(addr).map_err(Error::io("opening the TCP server socket"))?;
            Ok(std::thread::spawn(move || {
                let mut conns = Vec::new();
                for stream in listener.incoming() {
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    conns.push(std::thread::spawn(move || answer(stream)));
                }
                for c in conns {
                    let _ = c.join();
                }
            }))
        })?;
        Ok(TcpServer { addr, stopping, host: host.clone(), accept })
    }
}

/// Answers one connection's requests until it closes.
fn answer(mut stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let mut response = (RESPONSE_BYTES as u32).to_be_bytes().to_vec();
    response.resize(4 + RESPONSE_BYTES, 0x5a);
    let mut scratch = vec![0u8; 64 * 1024];
    loop {
        let mut len = [0u8; 4];
        if stream.read_exact(&mut len).is_err() {
            return;
        }
        let mut left = u32::from_be_bytes(len) as usize;
        while left > 0 {
            let n = left.min(scratch.len());
            if stream.read_exact(&mut scratch[..n]).is_err() {
                return;
            }
            left -= n;
        }
        if stream.write_all(&response).is_err() {
            return;
        }
    }
}

impl Server for TcpServer {
    fn close(self: Box<Self>) -> Counters {
        self.stopping.store(true, Ordering::Release);
        // Wake the accept loop with one last connection, from the server's namespace.
        let addr = self.addr;
        let _ = in_netns(&self.host, || Ok(TcpStream::connect(addr)));
        let _ = self.accept.join();
        Counters::default()
    }
}

/// One client connection: a writer thread sends requests in order, a reader thread takes
/// the responses in the same order.
struct Conn {
    requests: Option<mpsc::Sender<(usize, Done)>>,
    outstanding: Arc<AtomicUsize>,
    threads: Vec<JoinHandle<()>>,
}

impl Conn {
    fn open(addr: SocketAddr, tos: i32) -> Result<Conn, Error> {
        let stream = TcpStream::connect(addr).map_err(Error::io("connecting to the TCP server"))?;
        stream.set_nodelay(true).map_err(Error::io("setting TCP_NODELAY"))?;
        if tos != 0 {
            let fd = stream.as_raw_fd();
            // SAFETY: a live socket and a pointer to an int of the length given.
            let rc = unsafe {
                libc::setsockopt(
                    fd,
                    libc::IPPROTO_IP,
                    libc::IP_TOS,
                    (&raw const tos).cast(),
                    std::mem::size_of::<i32>() as libc::socklen_t,
                )
            };
            if rc != 0 {
                return Err(Error::io("setting IP_TOS")(std::io::Error::last_os_error()));
            }
        }
        let mut reader = stream.try_clone().map_err(Error::io("cloning a TCP socket"))?;
        let mut writer = stream;
        let pending: Arc<Mutex<VecDeque<Done>>> = Arc::default();
        let outstanding = Arc::new(AtomicUsize::new(0));
        let (requests, rx) = mpsc::channel::<(usize, Done)>();
        let buf = Arc::new((0..MAX_MESSAGE).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
        let write = {
            let pending = Arc::clone(&pending);
            std::thread::spawn(move || {
                for (size, done) in rx {
                    pending.lock().unwrap_or_else(|e| e.into_inner()).push_back(done);
                    let ok = writer
                        .write_all(&(size as u32).to_be_bytes())
                        .and_then(|()| writer.write_all(&buf[..size]));
                    if ok.is_err() {
                        break;
                    }
                }
                let _ = writer.shutdown(Shutdown::Write);
            })
        };
        let read = {
            let outstanding = Arc::clone(&outstanding);
            std::thread::spawn(move || {
                let mut response = vec![0u8; 4 + RESPONSE_BYTES];
                let ok = loop {
                    if reader.read_exact(&mut response).is_err() {
                        break false;
                    }
                    let at = Instant::now();
                    let Some(done) = pending.lock().unwrap_or_else(|e| e.into_inner()).pop_front()
                    else {
                        break false;
                    };
                    outstanding.fetch_sub(1, Ordering::Relaxed);
                    done(Ok(at));
                };
                let _ = ok;
                for done in pending.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
                    done(Err("connection_closed"));
                }
            })
        };
        Ok(Conn { requests: Some(requests), outstanding, threads: vec![write, read] })
    }

    fn send(&self, size: usize, done: Done) {
        self.outstanding.fetch_add(1, Ordering::Relaxed);
        if let Some(tx) = &self.requests
            && let Err(mpsc::SendError((_, done))) = tx.send((size, done))
        {
            done(Err("connection_closed"));
        }
    }

    fn close(mut self) {
        drop(self.requests.take());
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

struct TcpClient {
    conns: Vec<Conn>,
    top: Option<Conn>,
}

impl Client for TcpClient {
    fn start(&self, size: usize, short: bool, done: Done) {
        let conn = match &self.top {
            Some(top) if short => top,
            _ => self
                .conns
                .iter()
                .min_by_key(|c| c.outstanding.load(Ordering::Relaxed))
                .expect("at least one connection"),
        };
        conn.send(size, done);
    }

    fn close(self: Box<Self>) -> Counters {
        let this = *self;
        for c in this.conns.into_iter().chain(this.top) {
            c.close();
        }
        Counters::default()
    }
}
