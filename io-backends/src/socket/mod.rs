//! [`Socket`]: the application's view of Homa — calls (blocking or as futures), received
//! requests and their replies, metrics and shutdown.
//!
//! This file holds [`Socket`] itself and the registry of the raw-IP Homa ports this
//! process's sockets hold. The other parts: [`builder`] (the options a socket opens with),
//! [`call`] (an RPC in progress), [`request`] (a request a server received), [`poller`]
//! (an event loop's handle) and [`metrics`] (the counters).

mod builder;
mod call;
mod exposition;
mod histogram;
mod message;
mod metrics;
mod path;
mod poller;
mod request;

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use homa_core::{ApiError, Endpoint, Payload, RpcInfo};

use crate::driver::{Incoming, Shared};
use crate::error::{Error, Result};
use crate::transport::TransportKind;

pub use builder::Builder;
pub use call::Call;
pub use exposition::socket_labels;
pub use histogram::Histogram;
pub use message::Message;
pub use metrics::Metrics;
pub use poller::Poller;
pub use request::{RecvRequest, Request};

/// Homa ports taken by raw-IP sockets of this process. Every raw socket sees every Homa
/// packet for its address, so two endpoints must not answer to the same port.
static RAW_PORTS: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

fn raw_ports() -> std::sync::MutexGuard<'static, BTreeSet<u16>> {
    RAW_PORTS.lock().unwrap_or_else(|e| e.into_inner())
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
    /// The MTU and link rate the endpoint runs with (given, or taken from the path).
    mtu: u32,
    link_mbps: u32,
    /// The raw-IP Homa port this socket holds in [`RAW_PORTS`], until shutdown.
    raw_port: Mutex<Option<u16>>,
    /// Opened with [`Builder::reuse_port`]: serves only.
    shared_port: bool,
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

    /// Warnings this socket has logged through `tracing` since the last call (each kind
    /// once per socket, e.g. a peer sending messages over `max_message_length`), for
    /// programs that report them another way: the Python binding logs them to `logging`.
    pub fn take_warnings(&self) -> Vec<String> {
        self.shared.take_warnings()
    }

    /// The largest IP packet this socket sends: [`Builder::mtu`]'s, or the one taken from
    /// the interface its local address sends by.
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// How long a waiting thread, or an event loop after activity ([`crate::Reactor`]),
    /// polls before it sleeps ([`Builder::busy_poll`]).
    pub fn busy_poll(&self) -> Duration {
        self.shared.spin_window()
    }

    /// The link rate the pacer keeps to, in Mbit/s ([`Builder::link_mbps`]).
    pub fn link_mbps(&self) -> u32 {
        self.link_mbps
    }

    /// The transport in use (after any io_uring fallback).
    pub fn transport(&self) -> TransportKind {
        self.kind
    }

    /// Sends `message` to the Homa server at `dest` and blocks until its response arrives.
    /// `timeout` bounds the whole call; without one the call still fails with
    /// [`Error::PeerSilent`] if the server goes silent for Homa's timeout. While the socket's
    /// outgoing messages fill its send buffer (`Config::wmem_max`), the request waits for
    /// room first, as a write to a full socket does.
    pub fn call(
        &self,
        dest: SocketAddr,
        message: impl Into<Payload>,
        timeout: Option<Duration>,
    ) -> Result<Message> {
        self.may_call()?;
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
        self.may_call()?;
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

    fn may_call(&self) -> Result<()> {
        match self.shared_port {
            true => Err(Error::SharedPort(
                "a socket that shares its port (reuse_port) cannot make calls: the response \
                 could reach another socket of the port; make calls from a client socket",
            )),
            false => Ok(()),
        }
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

    /// Where each RPC the socket holds stands ([`RpcInfo`]: which side, its phase, how far
    /// its messages got, how long its peer has been silent), for diagnosing a call that
    /// does not complete. Each prints as one line.
    pub fn rpcs(&self) -> Vec<RpcInfo> {
        self.shared.with(|inner, _| inner.endpoint.rpcs().collect())
    }

    /// A snapshot of the counters.
    pub fn metrics(&self) -> Metrics {
        let (busy_polls, busy_polls_paid) = self.shared.spin_counts();
        self.shared.with(|inner, _| Metrics {
            core: inner.endpoint.metrics(),
            transport: inner.transport_stats(),
            dropped_by_allow_list: inner.counters.dropped_by_allow_list,
            wakeups: inner.counters.wakeups,
            busy_polls,
            busy_polls_paid,
            pending_calls: inner.pending_calls() as u64,
            queued_requests: inner.queued_requests() as u64,
            receive_errors: inner.counters.receive_errors,
            send_errors: inner.counters.send_errors,
            loop_stalls: inner.counters.loop_stalls,
            late_timers: inner.counters.late_timers,
            bytes_in_place: inner.counters.bytes_in_place,
            lent_bytes: inner.lent.load(std::sync::atomic::Ordering::Relaxed),
            calls: inner.latency.calls.clone(),
            served: inner.latency.served.clone(),
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
