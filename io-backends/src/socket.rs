//! [`Socket`]: the application's view of Homa — calls (blocking or as futures), received
//! requests and their replies, metrics and shutdown.

use std::collections::BTreeSet;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::Duration;

use homa_core::config::Problem;
use homa_core::{ApiError, Config, ConfigError, Endpoint, MIN_EPHEMERAL_PORT, Payload, ServerRpc};

use crate::cidr::Cidr;
use crate::driver::{Completion, Incoming, Shared};
use crate::error::{Error, Result};
use crate::transport::{self, TransportKind, TransportStats};

/// Homa ports taken by raw-IP sockets of this process. Every raw socket sees every Homa
/// packet for its address, so two endpoints must not answer to the same port.
static RAW_PORTS: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

fn raw_ports() -> std::sync::MutexGuard<'static, BTreeSet<u16>> {
    RAW_PORTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Options for opening a [`Socket`]: transport, MTU, link rate, busy polling, allow-list,
/// and any other [`Config`] tunable.
///
/// ```no_run
/// use homa_io::{Socket, TransportKind};
/// let server = Socket::builder()
///     .transport(TransportKind::Udp)
///     .allow(["198.18.0.0/15".parse().unwrap()])
///     .bind("0.0.0.0:4000".parse().unwrap())?;
/// # Ok::<(), homa_io::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct Builder {
    kind: TransportKind,
    config: Config,
    busy_poll: Option<Duration>,
    allow: Vec<Cidr>,
}

impl Builder {
    /// The transport (default: UDP).
    pub fn transport(mut self, kind: TransportKind) -> Builder {
        self.kind = kind;
        self
    }

    /// All Homa tunables at once (module sysctl names and defaults). `outer_header_bytes`
    /// is always set from the transport, a `seed` of 0 is replaced by a random one, and a
    /// `first_client_id` of 2 (the default) by a random even one.
    /// Call before [`mtu`](Builder::mtu) and [`link_mbps`](Builder::link_mbps), which
    /// change fields of this config.
    pub fn config(mut self, config: Config) -> Builder {
        self.config = config;
        self
    }

    /// Largest IP packet to send (default 1500). Use the path MTU: packets go with
    /// don't-fragment set (and IPv4 ID 0 when sent one by one, as the module's). Where the
    /// path's MTU is smaller, the socket, told so by the kernel or by a router's ICMP error,
    /// logs a warning naming the MTU and lets the kernel fragment from then on, which is
    /// slower; what was refused before is sent again. On loopback, 65,535 gives the best
    /// throughput.
    pub fn mtu(mut self, mtu: u32) -> Builder {
        self.config.mtu = mtu;
        self
    }

    /// Uplink speed in Mbit/s, for the pacer (default 25,000).
    pub fn link_mbps(mut self, mbps: u32) -> Builder {
        self.config.link_mbps = mbps;
        self
    }

    /// Trade CPU for latency: a thread blocked in `call`, `Call::wait` or `recv_request`
    /// polls the socket without sleeping for up to `spin` before it sleeps. Off by default.
    pub fn busy_poll(mut self, spin: Duration) -> Builder {
        self.busy_poll = Some(spin);
        self
    }

    /// Accept packets only from these prefixes; others are dropped and counted in
    /// [`Metrics::dropped_by_allow_list`]. Empty (the default) accepts everyone.
    pub fn allow(mut self, nets: impl IntoIterator<Item = Cidr>) -> Builder {
        self.allow.extend(nets);
        self
    }

    /// A server socket: accepts requests on Homa port `addr.port()` (1..=32767). With UDP
    /// the UDP socket binds `addr` itself; with raw IP only `addr.ip()` is bound and the
    /// port lives in the Homa header. Can also make calls.
    pub fn bind(self, addr: SocketAddr) -> Result<Socket> {
        let port = addr.port();
        if port == 0 || port >= MIN_EPHEMERAL_PORT {
            return Err(ApiError::InvalidPort(port).into());
        }
        self.open(addr, Some(port))
    }

    /// A client socket on local address `local` (e.g. `Ipv4Addr::UNSPECIFIED`), with an
    /// ephemeral Homa port (and UDP port). It can call peers of `local`'s address family.
    pub fn client(self, local: impl Into<IpAddr>) -> Result<Socket> {
        self.open(SocketAddr::new(local.into(), 0), None)
    }

    fn open(self, local: SocketAddr, server: Option<u16>) -> Result<Socket> {
        if self.kind.is_ip()
            && let Some(port) = server
            && raw_ports().contains(&port)
        {
            return Err(ApiError::PortInUse(port).into());
        }
        let transport = transport::open(self.kind, local)?;
        let mut config = self.config;
        config.outer_header_bytes = transport.outer_header_bytes();
        if config.seed == 0 {
            config.seed = random_seed();
        }
        if config.first_client_id == Config::default().first_client_id {
            // A random even start: a socket that gets an earlier one's address and port
            // (ephemeral ports are reused, NATs map anew) must not meet that one's RPCs at
            // a server, which tells RPCs apart by (address, port, id) and would answer the
            // new call with the old response.
            config.first_client_id = (random_seed() >> 2 << 1).max(2);
        }
        config.validate()?;
        if config.max_packet_len() > transport.max_packet_len() {
            let reason = "larger than one datagram of this transport can carry";
            return Err(ConfigError { field: "mtu", problem: Problem::Rule(reason) }.into());
        }
        let mut endpoint = Endpoint::new(config)?;
        let kind = transport.kind();
        let port = match server {
            Some(port) => {
                endpoint.bind(port)?;
                port
            }
            None => endpoint.bind_ephemeral()?,
        };
        let claim = if kind.is_ip() {
            Some(claim_raw_port(&mut endpoint, port, server.is_some())?)
        } else {
            None
        };
        let port = claim.unwrap_or(port);
        let local = match kind.is_ip() {
            true => SocketAddr::new(transport.local_addr().ip(), port),
            false => transport.local_addr(),
        };
        let (shared, thread) = match Shared::start(endpoint, transport, self.allow, self.busy_poll)
        {
            Ok(started) => started,
            Err(e) => {
                release_raw_port(claim);
                return Err(e);
            }
        };
        let raw_port = Mutex::new(claim);
        Ok(Socket { shared, thread: Mutex::new(Some(thread)), local, port, kind, raw_port })
    }
}

/// A seed for the endpoint's hash tables that peers cannot guess (so they cannot aim
/// collisions at them).
fn random_seed() -> u64 {
    let mut seed = [0u8; 8];
    // SAFETY: getrandom writes at most the 8 bytes of the live buffer.
    let n = unsafe { libc::getrandom(seed.as_mut_ptr().cast(), seed.len(), 0) };
    if n != 8 {
        // No entropy source: the clock is better than a constant.
        return std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
    }
    u64::from_ne_bytes(seed)
}

/// Registers `port` for this process's raw-IP sockets; for a client, moves on to the next
/// ephemeral port until a free one is found. Returns the port claimed.
fn claim_raw_port(endpoint: &mut Endpoint, mut port: u16, server: bool) -> Result<u16> {
    let mut taken = raw_ports();
    while taken.contains(&port) {
        if server {
            return Err(ApiError::PortInUse(port).into());
        }
        let next = endpoint.bind_ephemeral()?;
        let _ = endpoint.unbind(port);
        port = next;
    }
    taken.insert(port);
    Ok(port)
}

fn release_raw_port(port: Option<u16>) {
    if let Some(p) = port {
        raw_ports().remove(&p);
    }
}

/// A Homa socket: one [`homa_core::Endpoint`] run by its own driver thread over a
/// transport. All methods take `&self`; share it between threads with an `Arc`.
///
/// Blocking call and server loop over UDP loopback:
///
/// ```
/// use homa_io::Socket;
/// use std::net::Ipv4Addr;
///
/// // Homa port 4321 is also the UDP port.
/// let server = Socket::bind("127.0.0.1:4321".parse().unwrap())?;
/// let addr = server.local_addr();
/// std::thread::spawn(move || {
///     while let Ok(mut request) = server.recv_request() {
///         let message = request.take_message();
///         request.reply(message).unwrap(); // echo
///     }
/// });
/// let client = Socket::client(Ipv4Addr::LOCALHOST)?;
/// let response = client.call(addr, b"ping".to_vec(), None)?;
/// assert_eq!(response, b"ping");
/// # Ok::<(), homa_io::Error>(())
/// ```
///
/// The same call as a future, with any executor:
///
/// ```no_run
/// # let client = homa_io::Socket::client(std::net::Ipv4Addr::LOCALHOST)?;
/// # let addr = "127.0.0.1:4321".parse().unwrap();
/// # pollster::block_on(async {
/// let response = client.call_async(addr, b"ping".to_vec(), None)?.await?;
/// # Ok::<(), homa_io::Error>(()) })?;
/// # Ok::<(), homa_io::Error>(())
/// ```
#[derive(Debug)]
pub struct Socket {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    local: SocketAddr,
    port: u16,
    kind: TransportKind,
    /// The raw-IP Homa port this socket holds in [`RAW_PORTS`], until shutdown.
    raw_port: Mutex<Option<u16>>,
}

impl Socket {
    /// Options for a socket; finish with [`Builder::bind`] or [`Builder::client`].
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// A UDP server socket with default options (see [`Builder::bind`]).
    pub fn bind(addr: SocketAddr) -> Result<Socket> {
        Builder::default().bind(addr)
    }

    /// A UDP client socket with default options (see [`Builder::client`]).
    pub fn client(local: impl Into<IpAddr>) -> Result<Socket> {
        Builder::default().client(local)
    }

    /// Where peers reach this socket: the UDP address for UDP; the IP address and the Homa
    /// port for raw IP.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The Homa port: the server port, or the ephemeral port of a client.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The transport in use (after any io_uring fallback).
    pub fn transport(&self) -> TransportKind {
        self.kind
    }

    /// Sends `message` to the Homa server at `dest` and blocks until its response arrives.
    /// `timeout` bounds the whole call; without one the call still fails with
    /// [`Error::TimedOut`] if the server goes silent for Homa's timeout. While the socket's
    /// outgoing messages fill its send buffer (`Config::wmem_max`), the request waits for
    /// room first, as a write to a full socket does.
    pub fn call(
        &self,
        dest: SocketAddr,
        message: impl Into<Payload>,
        timeout: Option<Duration>,
    ) -> Result<Vec<u8>> {
        self.shared.call(self.port, dest, message.into(), timeout)
    }

    /// Starts a call and returns it as a [`Call`]: a future of the response (any
    /// executor), which can also be waited for with [`Call::wait`]. Argument errors are
    /// returned here; dropping the `Call` before it finishes aborts the RPC. While the send
    /// buffer is full the request waits for room inside the call (its `timeout` runs
    /// meanwhile); [`try_call_async`](Socket::try_call_async) fails instead.
    pub fn call_async(
        &self,
        dest: SocketAddr,
        message: impl Into<Payload>,
        timeout: Option<Duration>,
    ) -> Result<Call> {
        self.start(dest, message.into(), timeout, false, true)
    }

    /// As [`call_async`](Socket::call_async), but fails at once with
    /// `Error::Api(ApiError::TxBufferFull)` when the send buffer has no room for the
    /// request (or other requests already wait for room), for callers that shed load
    /// rather than queue it.
    pub fn try_call_async(
        &self,
        dest: SocketAddr,
        message: impl Into<Payload>,
        timeout: Option<Duration>,
    ) -> Result<Call> {
        self.start(dest, message.into(), timeout, false, false)
    }

    /// Starts a call that this thread will block on ([`Call::wait`],
    /// [`Call::wait_timeout`]): as [`call_async`](Socket::call_async), but the thread
    /// leads (receives itself, see the crate docs) from before the request leaves, so a
    /// fast response wakes it directly, as with [`call`](Socket::call). For a blocking
    /// caller that wakes up periodically:
    ///
    /// ```
    /// # use homa_io::Socket;
    /// # use std::time::Duration;
    /// # let server = Socket::bind("127.0.0.1:4324".parse().unwrap())?;
    /// # let client = Socket::client(std::net::Ipv4Addr::LOCALHOST)?;
    /// # let echo = std::thread::spawn(move || {
    /// #     let mut r = server.recv_request().unwrap();
    /// #     let m = r.take_message();
    /// #     r.reply(m).unwrap();
    /// # });
    /// let mut call = client.start_call("127.0.0.1:4324".parse().unwrap(), b"hi".to_vec(), None)?;
    /// let response = loop {
    ///     match call.wait_timeout(Duration::from_millis(200)) {
    ///         Some(r) => break r?,
    ///         None => { /* check for Ctrl-C, then wait again */ }
    ///     }
    /// };
    /// # assert_eq!(response, b"hi");
    /// # echo.join().unwrap();
    /// # Ok::<(), homa_io::Error>(())
    /// ```
    pub fn start_call(
        &self,
        dest: SocketAddr,
        message: impl Into<Payload>,
        timeout: Option<Duration>,
    ) -> Result<Call> {
        self.start(dest, message.into(), timeout, true, true)
    }

    /// Starts a call; with `lead`, claims leadership first if free (the caller will wait);
    /// with `wait`, a request without room waits for it.
    fn start(
        &self,
        dest: SocketAddr,
        message: Payload,
        timeout: Option<Duration>,
        lead: bool,
        wait: bool,
    ) -> Result<Call> {
        let (started, leading) = self.shared.with(|inner, now| {
            let leading = lead && self.shared.claim(inner);
            if leading {
                // Until the call is waited on the driver thread receives, even if it was
                // still off the transport after an earlier leader (`LEADER_GRACE`).
                self.shared.watch_for_claimer(inner);
            } else {
                self.shared.need_driver(inner);
            }
            let started = inner.start_call(now, self.port, dest, message, timeout, wait);
            inner.settle(false);
            (started, leading)
        });
        let (id, completion) = started.inspect_err(|_| {
            if leading {
                self.shared.resign();
            }
        })?;
        let shared = Arc::clone(&self.shared);
        Ok(Call { shared, id, completion, leading, done: false })
    }

    /// Aborts call `id` ([`Call::id`]): it fails with [`Error::Aborted`]. The server is not
    /// told (as with the module's `HOMAIOCABORT`).
    pub fn abort(&self, id: u64) -> Result<()> {
        let found = self.shared.with(|inner, _| {
            let found = inner.cancel(id, Some(Error::Aborted));
            inner.settle(false);
            found
        });
        if found { Ok(()) } else { Err(ApiError::UnknownRpc(id).into()) }
    }

    /// Blocks until a request arrives (servers only; a client socket never gets one).
    /// Returns [`Error::Shutdown`] once the socket is shut down.
    pub fn recv_request(&self) -> Result<Request> {
        self.shared.next_request(None).map(|r| self.request(r))
    }

    /// Like [`recv_request`](Socket::recv_request), but gives up with
    /// [`Error::TimedOut`] after `timeout`.
    pub fn recv_request_timeout(&self, timeout: Duration) -> Result<Request> {
        self.shared.next_request(Some(timeout)).map(|r| self.request(r))
    }

    /// A request already received, if there is one, without waiting (e.g. on an event
    /// loop's turn, after [`Poller::drive`]).
    pub fn try_recv_request(&self) -> Result<Option<Request>> {
        Ok(self.shared.try_request()?.map(|r| self.request(r)))
    }

    /// The next request as a future (any executor).
    pub fn recv_request_async(&self) -> RecvRequest {
        RecvRequest { shared: Arc::clone(&self.shared), ip: self.kind.is_ip() }
    }

    fn request(&self, r: Incoming) -> Request {
        Request::new(Arc::clone(&self.shared), r, self.kind.is_ip())
    }

    /// Lets an event loop drive this socket on its own thread: the loop watches
    /// [`Poller::fd`] for readability and calls [`Poller::drive`] when it is readable,
    /// which receives and handles what has arrived, runs due timers and sends, and wakes
    /// the tasks of calls and requests it completed — on the loop's thread, so an RPC
    /// completes there without a hand-off from another thread. While the `Poller` lives,
    /// the driver thread stops watching the transport (it still runs timers when the loop
    /// does not, draining the socket first), and other threads that block in `call` or
    /// `recv_request` wait for the loop instead of receiving themselves. Dropping the
    /// `Poller` hands the transport back to the driver thread.
    ///
    /// One at a time: [`Error::PollerExists`] while another lives;
    /// [`Error::Shutdown`] after shutdown.
    ///
    /// ```
    /// use homa_io::Socket;
    /// use std::net::Ipv4Addr;
    ///
    /// let server = Socket::bind("127.0.0.1:4323".parse().unwrap())?;
    /// let client = Socket::client(Ipv4Addr::LOCALHOST)?;
    /// let poller = server.poller()?;
    /// let call = client.call_async(server.local_addr(), b"hi".to_vec(), None)?;
    /// let mut fds = [libc::pollfd { fd: poller.fd(), events: libc::POLLIN, revents: 0 }];
    /// // An event loop would wait in epoll; this one polls the descriptor itself.
    /// while server.try_recv_request()?.is_none() {
    ///     // SAFETY: one valid pollfd.
    ///     unsafe { libc::poll(fds.as_mut_ptr(), 1, 1000) };
    ///     poller.drive();
    /// }
    /// # drop(call);
    /// # Ok::<(), homa_io::Error>(())
    /// ```
    pub fn poller(&self) -> Result<Poller> {
        let fd = self.shared.attach()?;
        Ok(Poller { shared: Arc::clone(&self.shared), fd })
    }

    /// Blocks until this socket's endpoint holds no RPC: every call complete, every
    /// response sent and acknowledged by its client, nothing waiting for room; or until
    /// `timeout` passes. Returns whether it is idle. For a graceful shutdown: a response
    /// whose last packet was lost is resent until then. Requests that arrive meanwhile are
    /// received as usual.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        self.shared.wait_idle(timeout)
    }

    /// A snapshot of the counters.
    pub fn metrics(&self) -> Metrics {
        self.shared.with(|inner, _| Metrics {
            core: inner.endpoint.metrics(),
            transport: inner.transport_stats(),
            dropped_by_allow_list: inner.counters.dropped_by_allow_list,
            wakeups: inner.counters.wakeups,
            pending_calls: inner.pending_calls() as u64,
            queued_requests: inner.queued_requests() as u64,
            receive_errors: inner.counters.receive_errors,
            send_errors: inner.counters.send_errors,
        })
    }

    /// Shuts the socket down: pending calls fail with [`Error::Shutdown`], blocked
    /// `recv_request`s return it, queued requests are dropped, and the driver thread is
    /// joined. Later calls fail with `Error::Shutdown`. Dropping the socket does the same.
    pub fn shutdown(&self) {
        self.shared.close();
        release_raw_port(self.raw_port.lock().unwrap_or_else(|e| e.into_inner()).take());
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = thread
            && t.thread().id() != std::thread::current().id()
        {
            let _ = t.join();
        }
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// An RPC in progress: a [`Future`] of its response, or [`wait`](Call::wait) for it.
/// Dropping an unfinished `Call` aborts the RPC.
#[derive(Debug)]
#[must_use = "dropping a Call aborts it"]
pub struct Call {
    shared: Arc<Shared>,
    id: u64,
    completion: Arc<Completion>,
    /// This call's thread claimed leadership when sending ([`Socket::start_call`]).
    leading: bool,
    done: bool,
}

impl Call {
    /// This call's id on its socket, for [`Socket::abort`]: not the RPC's id on the wire (a
    /// call waiting for room in the send buffer has none yet).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Blocks until the response (or failure) arrives.
    pub fn wait(mut self) -> Result<Vec<u8>> {
        let claimed = std::mem::take(&mut self.leading);
        let r = self.shared.wait_call(&self.completion, claimed);
        self.done = true;
        r
    }

    /// Blocks until the response (or failure) arrives, or for at most `timeout`: `None`
    /// if the call is still pending then (it goes on; wait again, poll it, or drop it to
    /// abort it). Lets a blocking caller wake up periodically, e.g. to check for signals.
    /// Once it has returned `Some`, later calls return
    /// `Some(Err(Error::Api(ApiError::UnknownRpc)))`, as would [`Socket::abort`].
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<Result<Vec<u8>>> {
        if self.done {
            return Some(Err(ApiError::UnknownRpc(self.id).into()));
        }
        let until = std::time::Instant::now() + timeout;
        // Leadership ends with the wait; the next wait claims it again if it is free.
        let claimed = std::mem::take(&mut self.leading);
        let r = self.shared.wait_call_until(&self.completion, claimed, until);
        self.done = r.is_some();
        r
    }
}

impl Future for Call {
    type Output = Result<Vec<u8>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if std::mem::take(&mut self.leading) {
            self.shared.resign(); // polled, not waited for: the driver thread receives
        }
        match self.completion.poll(cx.waker()) {
            Some(r) => {
                self.done = true;
                Poll::Ready(r)
            }
            None => Poll::Pending,
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        if self.leading {
            self.shared.resign();
        }
        if !self.done {
            let id = self.id;
            self.shared.with(|inner, _| {
                inner.cancel(id, None);
                inner.settle(false);
            });
        }
    }
}

/// An event loop's handle on a [`Socket`] it drives ([`Socket::poller`]).
#[derive(Debug)]
pub struct Poller {
    shared: Arc<Shared>,
    fd: RawFd,
}

impl Poller {
    /// The descriptor to watch for readability (the socket itself, or for io_uring an
    /// eventfd). Valid until the socket shuts down: remove it from the loop first.
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// Receives and handles whatever has arrived, runs due timers and sends what is
    /// ready, without blocking; wakes (on this thread) the tasks of calls and requests
    /// that completed. Returns the number of datagrams received. Call it when
    /// [`fd`](Poller::fd) is readable (a spurious call does no harm).
    pub fn drive(&self) -> usize {
        self.shared.drive()
    }
}

impl AsRawFd for Poller {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        self.shared.detach();
    }
}

/// A future of the next request ([`Socket::recv_request_async`]).
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct RecvRequest {
    shared: Arc<Shared>,
    ip: bool,
}

impl Future for RecvRequest {
    type Output = Result<Request>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.shared.poll_request(cx.waker()) {
            Some(r) => Poll::Ready(r.map(|r| Request::new(Arc::clone(&self.shared), r, self.ip))),
            None => Poll::Pending,
        }
    }
}

/// A request a server received. Answer it with [`reply`](Request::reply). Dropping it
/// unanswered discards it: the client is not told, and its Homa resends the request after
/// its resend interval, so the request may arrive again.
#[derive(Debug)]
pub struct Request {
    shared: Arc<Shared>,
    rpc: ServerRpc,
    peer: SocketAddr,
    message: Vec<u8>,
    answered: bool,
}

impl Request {
    fn new(shared: Arc<Shared>, r: Incoming, ip: bool) -> Request {
        // Name the client as the application would: with raw IP, by its Homa port.
        let mut peer = r.rpc.client;
        if ip {
            peer.set_port(r.client_port);
        }
        Request { shared, rpc: r.rpc, peer, message: r.message, answered: false }
    }

    /// The request's bytes.
    pub fn message(&self) -> &[u8] {
        &self.message
    }

    /// Takes the request's bytes out (leaving an empty message), e.g. to echo them.
    pub fn take_message(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.message)
    }

    /// The client: its UDP address, or with raw IP its IP address and Homa port.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The server-side RPC id (odd).
    pub fn id(&self) -> u64 {
        self.rpc.id
    }

    /// Sends the response (or, while the send buffer is full, queues it until there is
    /// room: it never blocks). Succeeds silently if the client has gone away (as the
    /// module's `sendmsg` does); fails with a message length error ([`Error::Api`]) or
    /// [`Error::Shutdown`].
    pub fn reply(mut self, message: impl Into<Payload>) -> Result<()> {
        let message = message.into();
        let rpc = self.rpc;
        self.answered = true;
        self.shared.with(|inner, now| {
            let sent = inner.reply(now, rpc, message);
            inner.settle(false);
            sent
        })
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        if !self.answered {
            let rpc = self.rpc;
            self.shared.with(|inner, _| {
                let _ = inner.endpoint.discard(rpc);
                inner.settle(false);
            });
        }
    }
}

/// Counters of a socket: the endpoint's, the transport's, and the driver's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metrics {
    /// The Homa endpoint's counters (malformed packets are `core.drops.malformed`).
    pub core: homa_core::Metrics,
    /// Datagrams and system calls of the transport.
    pub transport: TransportStats,
    /// Packets from addresses outside the allow-list, dropped before Homa saw them.
    pub dropped_by_allow_list: u64,
    /// Times the driver thread woke up to do work.
    pub wakeups: u64,
    /// Calls waiting for a response.
    pub pending_calls: u64,
    /// Requests received and not yet taken by `recv_request`.
    pub queued_requests: u64,
    /// Receive calls that failed (e.g. EFAULT from a raw socket next to the Linux module);
    /// each ends a receive round, and Homa's resends recover what it lost.
    pub receive_errors: u64,
    /// Send calls that failed as a whole (their datagrams count as lost).
    pub send_errors: u64,
}

impl Metrics {
    /// Every counter by name, as the bindings and `homa` show them: `core`
    /// ([`homa_core::Metrics::to_value`]), `transport` ([`TransportStats::to_value`]), and
    /// the driver's own.
    pub fn to_value(&self) -> homa_core::Map {
        let mut v = homa_core::Map::new();
        v.insert("core", self.core.to_value());
        v.insert("transport", self.transport.to_value());
        for (name, n) in [
            ("dropped_by_allow_list", self.dropped_by_allow_list),
            ("wakeups", self.wakeups),
            ("pending_calls", self.pending_calls),
            ("queued_requests", self.queued_requests),
            ("receive_errors", self.receive_errors),
            ("send_errors", self.send_errors),
        ] {
            v.insert(name, n);
        }
        v
    }
}
