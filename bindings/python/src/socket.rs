//! `homa.Socket` (blocking, GIL released while waiting) and the pieces the asyncio layer
//! (`homa.aio`, in Python) is built from: a [`Reactor`] that turns homa-io's futures into
//! asyncio futures, and a [`Poller`] through which the event loop drives the socket itself.
//!
//! How an asyncio call completes: `call_async` starts the RPC (its packets are sent from
//! the calling thread) and parks homa-io's `Call` future in homa-io's
//! [`homa_io::Reactor`] with the asyncio future. The event loop watches the socket
//! ([`Poller::fileno`], homa-io's `Socket::poller`) with `add_reader`; when the response
//! arrives it calls [`Poller::drive`], which receives and handles it on the loop's thread
//! and then sets the results of the futures that completed. One wake-up of the loop per
//! packet, as for a TCP stream, and no other thread involved.
//!
//! While the loop is busy (a handler's synchronous work, another thread holding the GIL),
//! homa-io's driver thread receives and answers for it, and runs timers; what it completes
//! reaches the loop through an eventfd the loop also watches, whose callback
//! ([`Reactor::dispatch`]) resolves it. No thread but the loop's touches Python objects;
//! homa-io's threads never take the GIL, so they can never deadlock with a Python thread
//! waiting for the endpoint lock.

use std::collections::{BTreeMap, VecDeque};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use homa_io::reactor::{Done, Op, Parked};
use homa_io::{Cidr, TransportKind};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyInt, PyTuple};

use crate::convert::{self, addr_to_py, int};
use crate::errors;
use crate::{buffer, received};

/// How long a blocking `recv_request` waits at a time before checking for signals
/// (Ctrl-C), so a server loop can be interrupted.
const SIGNAL_CHECK: Duration = Duration::from_millis(200);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Argument `name`: a number of seconds, or None.
fn seconds(name: &str, obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Duration>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else { return Ok(None) };
    if !(obj.is_instance_of::<PyFloat>() || obj.is_instance_of::<PyInt>())
        || obj.is_instance_of::<pyo3::types::PyBool>()
    {
        return Err(PyTypeError::new_err(format!(
            "{name} must be a number of seconds or None, not {}",
            obj.get_type().name()?
        )));
    }
    let secs: f64 = obj.extract()?;
    Duration::try_from_secs_f64(secs).map(Some).map_err(|_| {
        PyValueError::new_err(format!("{name} must be a finite number of seconds >= 0, not {secs}"))
    })
}

/// A Homa socket on a real network (homa-io): one endpoint, run by its own driver thread,
/// over UDP (default), raw IP protocol 146 (``transport="ip"``, needs CAP_NET_RAW) or
/// io_uring (``"uring"``, ``"uring-ip"``).
///
/// ``port`` given: a server on Homa port ``port`` (1..32767) of ``host``, which can also
/// make calls. ``port=None``: a client with an ephemeral port. Keyword arguments set
/// ``Config`` fields by the module's tunable names; ``busy_poll`` (seconds; default 50 µs,
/// adaptive; 0: never) is how long a blocked thread polls before it sleeps; ``allow`` is a
/// list of CIDR prefixes to accept packets from. ``reuse_port=True`` (UDP servers only) lets
/// several processes serve one port, the kernel spreading clients over them; such a socket
/// cannot make calls (see :func:`homa.workers.run`).
///
/// Blocking methods release the GIL while they wait. Use it as a context manager, or call
/// :meth:`close`.
#[pyclass(module = "homa._native", frozen)]
#[derive(Debug)]
pub(crate) struct Socket {
    /// `None` once closed: dropping it lets homa-io free the transport (and the port) as
    /// soon as no call or request still holds it, even while a reference cycle keeps this
    /// Python object alive.
    inner: Mutex<Option<Arc<homa_io::Socket>>>,
    local: std::net::SocketAddr,
    port: u16,
    kind: TransportKind,
    /// The MTU and link rate the socket runs with: given, or taken from the path.
    mtu: u32,
    link_mbps: u32,
    /// The metrics at close, so they stay readable.
    last_metrics: Mutex<Option<homa_io::Metrics>>,
}

impl Socket {
    fn open(&self, py: Python<'_>) -> PyResult<Arc<homa_io::Socket>> {
        lock(&self.inner).clone().ok_or_else(|| errors::closed(py))
    }
}

/// Logs homa-io's warnings to the ``"homa"`` logger (homa's own threads never take the
/// GIL: they are logged by whichever Python thread next uses the socket).
fn log_warnings(py: Python<'_>, warnings: Vec<String>) {
    if warnings.is_empty() {
        return;
    }
    let logged = (|| -> PyResult<()> {
        let logger = py.import("logging")?.call_method1("getLogger", ("homa",))?;
        for w in warnings {
            logger.call_method1("warning", (w,))?;
        }
        Ok(())
    })();
    if let Err(e) = logged {
        e.write_unraisable(py, None);
    }
}

#[pymethods]
impl Socket {
    #[new]
    #[pyo3(signature = (port = None, host = "0.0.0.0", transport = "udp", *, busy_poll = None, allow = None, reuse_port = false, **config))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        port: Option<&Bound<'_, PyAny>>,
        host: &str,
        transport: &str,
        busy_poll: Option<&Bound<'_, PyAny>>,
        allow: Option<Vec<String>>,
        reuse_port: bool,
        config: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let ip = convert::bind_ip(py, host)?;
        let kind: TransportKind =
            transport.parse().map_err(|e| PyValueError::new_err(format!("{e}")))?;
        let mut c = homa_io::Config::default();
        convert::apply_config(py, &mut c, config, &[])?;
        let given = |name: &str| config.is_some_and(|d| d.contains(name).unwrap_or(false));
        let (mtu, link_mbps) =
            (given("mtu").then_some(c.mtu), given("link_mbps").then_some(c.link_mbps));
        let mut builder =
            homa_io::Socket::builder().transport(kind).config(c).reuse_port(reuse_port);
        // Given ones win; the others come from the interface the socket sends by.
        if let Some(mtu) = mtu {
            builder = builder.mtu(mtu);
        }
        if let Some(mbps) = link_mbps {
            builder = builder.link_mbps(mbps);
        }
        if let Some(spin) = seconds("busy_poll", busy_poll)? {
            builder = builder.busy_poll(spin);
        }
        if let Some(nets) = allow {
            let cidrs = nets
                .iter()
                .map(|n| {
                    n.parse::<Cidr>().map_err(|e| PyValueError::new_err(format!("allow: {e}")))
                })
                .collect::<PyResult<Vec<_>>>()?;
            builder = builder.allow(cidrs);
        }
        let port: Option<u16> =
            port.filter(|p| !p.is_none()).map(|p| int(p, "port")).transpose()?;
        let opened = py.detach(|| match port {
            Some(port) => builder.bind(std::net::SocketAddr::new(ip, port)),
            None => builder.client(ip),
        });
        let inner = opened.map_err(|e| errors::io(py, e))?;
        Ok(Socket {
            local: inner.local_addr(),
            port: inner.port(),
            kind: inner.transport(),
            mtu: inner.mtu(),
            link_mbps: inner.link_mbps(),
            inner: Mutex::new(Some(Arc::new(inner))),
            last_metrics: Mutex::new(None),
        })
    }

    /// Where peers reach this socket, ``(host, port)``.
    #[getter]
    fn local_addr<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        addr_to_py(py, self.local)
    }

    /// The Homa port: the server port, or the client's ephemeral port.
    #[getter]
    fn port(&self) -> u16 {
        self.port
    }

    /// The transport in use (``"udp"``, ``"ip"``, ``"uring"``, ``"uring-ip"``), after any
    /// io_uring fallback.
    #[getter]
    fn transport(&self) -> &'static str {
        self.kind.name()
    }

    /// The largest IP packet this socket sends: the ``mtu`` given, or the MTU of the
    /// interface it sends by (65,535 on loopback).
    #[getter]
    fn mtu(&self) -> u32 {
        self.mtu
    }

    /// The link rate its pacer keeps to, in Mbit/s: the ``link_mbps`` given, or the speed
    /// of the interface it sends by (unpaced on loopback; 25,000 where none is reported).
    #[getter]
    fn link_mbps(&self) -> u32 {
        self.link_mbps
    }

    /// How long (seconds) a thread blocked in a call or a receive, or the asyncio loop
    /// after a call starts or a packet arrives, polls before it sleeps (``busy_poll``).
    #[getter]
    fn busy_poll(&self, py: Python<'_>) -> PyResult<f64> {
        Ok(self.open(py)?.busy_poll().as_secs_f64())
    }

    /// Whether :meth:`close` was called.
    #[getter]
    fn closed(&self) -> bool {
        lock(&self.inner).is_none()
    }

    /// Sends ``message`` (any bytes-like object; read-only ones are not copied, writable
    /// ones are copied once) to the Homa server at ``dest``
    /// and blocks, without the GIL, until the response arrives; returns it as bytes.
    /// ``dest``'s host may be a name (resolved by the system resolver, each call).
    /// ``timeout`` (seconds) bounds the whole call (``homa.TimeoutError``, kind
    /// ``"timeout"``); a server silent for Homa's timeout (``timeout_ticks``) fails it
    /// sooner (kind ``"peer_silent"``). A full send buffer makes the call wait for room;
    /// with ``block=False`` it raises ``homa.ResourceLimitError``. Signals (Ctrl-C) are
    /// handled while waiting: an exception they raise abandons the call.
    #[pyo3(signature = (dest, message, timeout = None, *, block = true))]
    fn call<'py>(
        &self,
        py: Python<'py>,
        dest: &Bound<'py, PyAny>,
        message: &Bound<'py, PyAny>,
        timeout: Option<&Bound<'py, PyAny>>,
        block: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let sock = self.open(py)?;
        let dest = convert::resolve(py, convert::dest(dest, "dest")?, self.local.is_ipv6())?;
        let deadline = seconds("timeout", timeout)?;
        let payload = buffer::payload(message)?;
        let started = py.detach(|| match block {
            true => sock.start_call(dest, payload, deadline),
            false => sock.try_call_async(dest, payload, deadline),
        });
        let mut call = started.map_err(|e| errors::io(py, e))?;
        let result = loop {
            match py.detach(|| call.wait_timeout(SIGNAL_CHECK)) {
                Some(r) => break r,
                None => {
                    if let Err(e) = py.check_signals() {
                        drop(call); // aborts the RPC
                        buffer::release_pending(py);
                        return Err(e);
                    }
                }
            }
        };
        drop(call);
        buffer::release_pending(py);
        let response = result.map_err(|e| errors::io(py, e))?;
        received::message(py, response)
    }

    /// Blocks, without the GIL, until a request arrives; returns it as a :class:`Request`.
    /// ``timeout`` (seconds) raises ``homa.TimeoutError`` when it passes. Signals (Ctrl-C)
    /// are handled while waiting.
    #[pyo3(signature = (timeout = None))]
    fn recv_request(
        &self,
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Request> {
        let limit = seconds("timeout", timeout)?;
        let start = std::time::Instant::now();
        loop {
            let sock = self.open(py)?;
            let left = limit.map(|l| l.saturating_sub(start.elapsed()));
            let wait = left.map_or(SIGNAL_CHECK, |l| l.min(SIGNAL_CHECK));
            let got = py.detach(|| sock.recv_request_timeout(wait));
            log_warnings(py, sock.take_warnings());
            match got {
                Ok(r) => return Request::new(py, r),
                Err(homa_io::Error::TimedOut) => {
                    if left.is_some_and(|l| l <= wait) {
                        return Err(errors::io(py, homa_io::Error::TimedOut));
                    }
                    py.check_signals()?;
                }
                Err(e) => return Err(errors::io(py, e)),
            }
        }
    }

    /// Counters: ``core`` (the endpoint's, as :meth:`Endpoint.metrics`), ``transport``
    /// (datagrams and system calls), ``dropped_by_allow_list``, ``wakeups`` (of the driver
    /// thread), ``pending_calls``, ``queued_requests``, ``receive_errors``, ``send_errors``,
    /// ``loop_stalls`` (the event loop fell behind and the driver thread received for it),
    /// ``late_timers`` (the driver thread's timers ran so late that peers may ask for
    /// resends: the host is short of CPU), ``bytes_in_place`` (payload bytes the kernel
    /// received straight into their messages; the rest were copied once more),
    /// ``lent_bytes`` (received messages whose views are still alive: they count against
    /// ``max_rx_bytes``, and while they fill it new messages wait).
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let live = lock(&self.inner).clone();
        let m = match live {
            Some(s) => s.metrics(),
            None => lock(&self.last_metrics).clone().unwrap_or_default(),
        };
        convert::map_to_py(py, &m.to_value()).map(Bound::into_any)
    }

    /// Every counter, gauge and latency histogram of :meth:`metrics` in Prometheus' text
    /// exposition format, each sample labelled ``socket="<local address>"`` and with
    /// ``labels`` (which may name ``socket`` otherwise). ``homa.prometheus`` hands it to
    /// ``prometheus_client``. A label name Prometheus does not allow, or one the samples
    /// carry themselves (``type``, ``reason``, ``kind``, ``side``, ``le``), raises
    /// ``ValueError``.
    #[pyo3(signature = (labels = None))]
    fn metrics_text(&self, labels: Option<BTreeMap<String, String>>) -> PyResult<String> {
        let labels = homa_io::socket_labels(self.local, labels.unwrap_or_default())
            .map_err(PyValueError::new_err)?;
        let live = lock(&self.inner).clone();
        let m = match &live {
            Some(s) => s.metrics(),
            None => lock(&self.last_metrics).clone().unwrap_or_default(),
        };
        let all: Vec<_> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        Ok(m.to_prometheus(&all))
    }

    /// Closes the socket: pending calls fail with ``ShutdownError``, blocked receivers
    /// return it, the driver thread is joined. Idempotent.
    fn close(&self, py: Python<'_>) {
        let Some(sock) = lock(&self.inner).take() else { return };
        *lock(&self.last_metrics) = Some(sock.metrics());
        py.detach(move || {
            sock.shutdown();
            drop(sock); // the last reference, unless a blocked call still holds one
        });
        buffer::release_pending(py);
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) {
        self.close(py);
    }

    fn __repr__(&self) -> String {
        let state = if self.closed() { " closed" } else { "" };
        format!("<homa.Socket {} port {} at {}{state}>", self.kind, self.port, self.local)
    }

    /// Starts a call for the asyncio layer: returns the reactor token of the pending call.
    /// The asyncio future ``future`` gets the response (bytes) or the exception.
    /// A host name as ``dest`` raises ``InvalidArgumentError`` of kind ``"host_name"``:
    /// the asyncio layer resolves it without blocking the loop, and calls again.
    #[pyo3(signature = (reactor, future, dest, message, timeout = None, block = true))]
    #[expect(clippy::too_many_arguments, reason = "the Python method's own arguments")]
    fn _call_async(
        &self,
        py: Python<'_>,
        reactor: &Reactor,
        future: Py<PyAny>,
        dest: &Bound<'_, PyAny>,
        message: &Bound<'_, PyAny>,
        timeout: Option<&Bound<'_, PyAny>>,
        block: bool,
    ) -> PyResult<u64> {
        let sock = self.open(py)?;
        let dest = match convert::dest(dest, "dest")? {
            convert::Dest::Addr(a) => a,
            convert::Dest::Name(host, _) => {
                let message = format!("{host:?} is a host name: resolve it first");
                return Err(errors::new(py, "InvalidArgumentError", Some("host_name"), message));
            }
        };
        let deadline = seconds("timeout", timeout)?;
        let payload = buffer::payload(message)?;
        let call = match block {
            true => sock.call_async(dest, payload, deadline),
            false => sock.try_call_async(dest, payload, deadline),
        };
        let call = call.map_err(|e| errors::io(py, e))?;
        reactor.park(py, Op::Call(call), future)
    }

    /// A :class:`Poller` for the asyncio layer: the event loop drives the socket itself.
    /// One at a time (``HomaError`` while another is open).
    fn _poller(&self, py: Python<'_>) -> PyResult<Poller> {
        let sock = self.open(py)?;
        let poller = sock.poller().map_err(|e| errors::io(py, e))?;
        let fd = poller.fd();
        Ok(Poller { inner: Mutex::new(Some(poller)), fd })
    }

    /// The next request for the asyncio layer: ``(request, token)``: the request if one is
    /// ready, else ``None`` and ``future`` will get it (``token`` cancels that).
    fn _recv_async(
        &self,
        py: Python<'_>,
        reactor: &Reactor,
        future: Py<PyAny>,
    ) -> PyResult<(Option<Request>, u64)> {
        let sock = self.open(py)?;
        let token = reactor.inner.next_token();
        match reactor.inner.park(token, Op::Recv(sock.recv_request_async()), future) {
            Parked::Done(_, Done::Request(Ok(r))) => Ok((Some(Request::new(py, r)?), token)),
            Parked::Done(_, Done::Request(Err(e))) => Err(errors::io(py, e)),
            Parked::Done(_, Done::Response(_)) => unreachable!("a receive gives a request"),
            Parked::Pending => Ok((None, token)),
        }
    }
}

/// A request a server received. Answer it with :meth:`reply`; dropping it unanswered
/// discards it (the client's Homa resends the request, so it may arrive again, until the
/// client gives up).
#[pyclass(module = "homa._native", frozen)]
#[derive(Debug)]
pub(crate) struct Request {
    inner: Mutex<Option<homa_io::Request>>,
    message: Py<PyAny>,
    len: usize,
    peer: std::net::SocketAddr,
    id: u64,
}

impl Request {
    fn new(py: Python<'_>, mut r: homa_io::Request) -> PyResult<Request> {
        let message = r.take_message();
        let len = message.len();
        let message = received::message(py, message)?.unbind();
        let (peer, id) = (r.peer(), r.id());
        Ok(Request { inner: Mutex::new(Some(r)), message, len, peer, id })
    }
}

#[pymethods]
impl Request {
    /// The request's bytes: a read-only memoryview over the buffer they were received into.
    #[getter]
    fn message(&self, py: Python<'_>) -> Py<PyAny> {
        self.message.clone_ref(py)
    }

    /// The client: its UDP address, or with raw IP its IP address and Homa port.
    #[getter]
    fn peer<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        addr_to_py(py, self.peer)
    }

    /// The server's id for the RPC (odd).
    #[getter]
    fn id(&self) -> u64 {
        self.id
    }

    /// Whether :meth:`reply` or :meth:`discard` was called.
    #[getter]
    fn answered(&self) -> bool {
        lock(&self.inner).is_none()
    }

    /// Sends the response (any bytes-like object; read-only ones are not copied, writable
    /// ones are copied once). It never blocks: the
    /// packets the receiver allows are sent now, the rest by the driver. Returns an
    /// awaitable that is already done, so ``await req.reply(data)`` and ``req.reply(data)``
    /// both work. Raises ``InvalidArgumentError`` if the request was already answered.
    fn reply(&self, py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<Replied> {
        let payload = buffer::payload(message)?;
        let Some(r) = lock(&self.inner).take() else {
            return Err(errors::new(
                py,
                "InvalidArgumentError",
                Some("not_awaiting_response"),
                format!("request {} was already answered", self.id),
            ));
        };
        r.reply(payload).map_err(|e| errors::io(py, e))?;
        Ok(Replied)
    }

    /// Forgets the request without answering it (the client is not told).
    fn discard(&self) {
        lock(&self.inner).take();
    }

    fn __repr__(&self) -> String {
        let peer = convert::addr_repr(self.peer);
        format!("<homa.Request id {} from {peer}, {} bytes>", self.id, self.len)
    }
}

/// What :meth:`Request.reply` returns: an awaitable that is already done.
#[pyclass(module = "homa._native", frozen)]
#[derive(Debug)]
pub(crate) struct Replied;

#[pymethods]
impl Replied {
    fn __await__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self) -> Option<Py<PyAny>> {
        None
    }

    fn __repr__(&self) -> &'static str {
        "<homa.Replied>"
    }
}

/// An event loop's handle for driving a socket itself (homa-io's `Socket::poller`): watch
/// :meth:`fileno` with ``loop.add_reader(poller.fileno(), poller.drive, reactor)``. Used
/// by ``homa.aio``.
#[pyclass(module = "homa._native", frozen)]
#[derive(Debug)]
pub(crate) struct Poller {
    /// `None` once closed.
    inner: Mutex<Option<homa_io::Poller>>,
    fd: i32,
}

#[pymethods]
impl Poller {
    /// The descriptor to watch for readability (until the socket closes).
    fn fileno(&self) -> i32 {
        self.fd
    }

    /// Receives and handles what has arrived, runs due timers, sends, and resolves the
    /// asyncio futures of ``reactor`` that this completed. Never blocks. Returns the number
    /// of datagrams received.
    fn drive(&self, py: Python<'_>, reactor: &Reactor) -> PyResult<usize> {
        let got = {
            let guard = lock(&self.inner);
            let Some(poller) = guard.as_ref() else { return Ok(0) };
            let got = reactor.inner.drive(poller, false);
            log_warnings(py, poller.take_warnings());
            got
        };
        reactor.dispatch_ready(py)?;
        Ok(got)
    }

    /// Stops driving: homa-io's driver thread watches the socket again. Idempotent.
    fn close(&self) {
        lock(&self.inner).take();
    }
}

/// Bridges homa-io's futures to one asyncio event loop (homa-io's [`homa_io::Reactor`],
/// woken through an eventfd): watch :meth:`fileno` with
/// ``loop.add_reader(reactor.fileno(), reactor.dispatch)``. Used by ``homa.aio``.
#[pyclass(module = "homa._native", frozen)]
#[derive(Debug)]
pub(crate) struct Reactor {
    inner: homa_io::Reactor<Py<PyAny>>,
    eventfd: Arc<OwnedFd>,
    /// Requests whose asyncio future was cancelled before they arrived: handed to the next
    /// receiver instead of being dropped.
    leftover: Mutex<VecDeque<Request>>,
}

impl Reactor {
    /// Resolves the asyncio futures of the operations that completed.
    fn dispatch_ready(&self, py: Python<'_>) -> PyResult<()> {
        buffer::release_pending(py);
        for (future, done) in self.inner.take_done() {
            if let Some(unclaimed) = resolve(py, future.bind(py), done)? {
                lock(&self.leftover).push_back(unclaimed);
            }
        }
        Ok(())
    }

    /// Parks `op` until it completes (resolving `future` then), or resolves it now if it
    /// is done already; returns its token.
    fn park(&self, py: Python<'_>, op: Op, future: Py<PyAny>) -> PyResult<u64> {
        let token = self.inner.next_token();
        if let Parked::Done(future, done) = self.inner.park(token, op, future) {
            resolve(py, future.bind(py), done)?;
        }
        Ok(token)
    }
}

/// Sets the asyncio future's result; a request whose future was cancelled is returned.
fn resolve(py: Python<'_>, future: &Bound<'_, PyAny>, done: Done) -> PyResult<Option<Request>> {
    let cancelled = future.call_method0(pyo3::intern!(py, "done"))?.is_truthy()?;
    match done {
        Done::Response(r) => {
            if cancelled {
                return Ok(None);
            }
            match r {
                Ok(v) => future
                    .call_method1(pyo3::intern!(py, "set_result"), (received::message(py, v)?,))?,
                Err(e) => future.call_method1(
                    pyo3::intern!(py, "set_exception"),
                    (errors::io(py, e).into_value(py),),
                )?,
            };
        }
        Done::Request(r) => match r {
            Ok(r) => {
                let req = Request::new(py, r)?;
                if cancelled {
                    return Ok(Some(req));
                }
                future.call_method1(pyo3::intern!(py, "set_result"), (req,))?;
            }
            Err(e) => {
                if !cancelled {
                    future.call_method1(
                        pyo3::intern!(py, "set_exception"),
                        (errors::io(py, e).into_value(py),),
                    )?;
                }
            }
        },
    }
    Ok(None)
}

#[pymethods]
impl Reactor {
    #[new]
    #[pyo3(signature = (busy_poll = 0.0))]
    fn new(busy_poll: f64) -> PyResult<Self> {
        let busy_poll = Duration::try_from_secs_f64(busy_poll)
            .map_err(|_| PyValueError::new_err("busy_poll must be a finite number >= 0"))?;
        // SAFETY: a plain system call creating a new descriptor.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        // SAFETY: fd is a new descriptor owned by nobody else.
        let eventfd = Arc::new(unsafe { OwnedFd::from_raw_fd(fd) });
        let signal = Arc::clone(&eventfd);
        let wake_loop = move || {
            let one = 1u64;
            // SAFETY: writes 8 bytes from a live u64 to our eventfd.
            unsafe { libc::write(signal.as_raw_fd(), (&raw const one).cast(), 8) };
        };
        Ok(Reactor {
            inner: homa_io::Reactor::new(wake_loop, busy_poll),
            eventfd,
            leftover: Mutex::new(VecDeque::new()),
        })
    }

    /// The eventfd to watch for readability.
    fn fileno(&self) -> i32 {
        self.eventfd.as_raw_fd()
    }

    /// Resolves the asyncio futures whose homa-io futures are ready. Call from the loop's
    /// thread when :meth:`fileno` is readable (or any time: it does nothing if none is).
    fn dispatch(&self, py: Python<'_>) -> PyResult<()> {
        let mut n = 0u64;
        // SAFETY: reads 8 bytes into a live u64 from our non-blocking eventfd.
        unsafe { libc::read(self.eventfd.as_raw_fd(), (&raw mut n).cast(), 8) };
        self.dispatch_ready(py)
    }

    /// A request left over from a cancelled receive, if any.
    fn take_leftover(&self) -> Option<Request> {
        lock(&self.leftover).pop_front()
    }

    /// Gives a request back, for the next receiver (its asyncio future was cancelled after
    /// it had the request).
    fn push_leftover(&self, request: Py<Request>, py: Python<'_>) -> PyResult<()> {
        let r = request.get();
        let inner = lock(&r.inner).take();
        if let Some(inner) = inner {
            let req = Request {
                inner: Mutex::new(Some(inner)),
                message: r.message.clone_ref(py),
                len: r.len,
                peer: r.peer,
                id: r.id,
            };
            lock(&self.leftover).push_back(req);
        }
        Ok(())
    }

    /// Forgets parked operation ``token``: a pending call is aborted (the RPC is
    /// abandoned; the server is not told). Returns whether it was still pending.
    fn cancel(&self, py: Python<'_>, token: u64) -> bool {
        let found = self.inner.cancel(token).is_some();
        buffer::release_pending(py);
        found
    }

    /// Operations parked and not yet done.
    fn pending(&self) -> usize {
        self.inner.pending()
    }

    /// A call started (``arrived`` false) or packets arrived (true): whether the loop
    /// should start busy-polling (homa-io's rule: adaptive, ``busy_poll`` long).
    fn busy_poll(&self, arrived: bool) -> bool {
        self.inner.busy_poll(arrived)
    }

    /// Whether the loop should go on busy-polling.
    fn keep_polling(&self) -> bool {
        self.inner.keep_polling()
    }
}
