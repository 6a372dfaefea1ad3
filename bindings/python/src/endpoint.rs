//! `homa.Endpoint`: the sans-IO core, one to one. Times are int nanoseconds from any origin.

use homa_core::Instant;
use homa_core::{Config, Event, ServerRpc as CoreServerRpc};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use crate::buffer;
use crate::convert::{self, addr, addr_to_py, int};
use crate::errors;

/// The handle of a request a server received, for :meth:`Endpoint.send_response`.
#[pyclass(module = "homa._native", frozen, eq, hash)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ServerRpc(CoreServerRpc);

#[pymethods]
impl ServerRpc {
    #[new]
    fn new(client: &Bound<'_, PyAny>, id: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(ServerRpc(CoreServerRpc { client: addr(client, "client")?, id: int(id, "id")? }))
    }

    /// The client's transport address, ``(host, port)``.
    #[getter]
    fn client<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        addr_to_py(py, self.0.client)
    }

    /// The server's id for the RPC (odd).
    #[getter]
    fn id(&self) -> u64 {
        self.0.id
    }

    fn __repr__(&self) -> String {
        format!("ServerRpc(client={}, id={})", convert::addr_repr(self.0.client), self.0.id)
    }
}

/// A packet to send: ``data`` to transport address ``to`` at priority level ``priority``
/// (0..7; a UDP or raw-IP transport puts ``priority << 5`` in the IP TOS byte).
#[pyclass(module = "homa._native", frozen, get_all)]
#[derive(Debug)]
pub(crate) struct Transmit {
    /// Destination transport address, ``(host, port)``.
    to: Py<PyTuple>,
    /// Priority level 0..7.
    priority: u8,
    /// The Homa packet, from the common header on.
    data: Py<PyBytes>,
}

#[pymethods]
impl Transmit {
    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "Transmit(to={}, priority={}, data=<{} bytes>)",
            self.to.bind(py),
            self.priority,
            self.data.bind(py).as_bytes().len()
        )
    }
}

/// A complete request arrived on a bound port; answer it with :meth:`Endpoint.send_response`.
#[pyclass(module = "homa._native", frozen, get_all)]
#[derive(Debug)]
pub(crate) struct RequestReceived {
    /// The handle to answer with.
    rpc: Py<ServerRpc>,
    /// The local port it arrived on.
    port: u16,
    /// The client's Homa port.
    client_port: u16,
    /// The request's bytes.
    message: Py<PyBytes>,
}

#[pymethods]
impl RequestReceived {
    /// The client's transport address (``rpc.client``).
    #[getter]
    fn client<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        addr_to_py(py, self.rpc.get().0.client)
    }

    /// The server's id for the RPC (``rpc.id``).
    #[getter]
    fn id(&self) -> u64 {
        self.rpc.get().0.id
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let rpc = self.rpc.get().0;
        format!(
            "RequestReceived(client={}, id={}, port={}, client_port={}, message=<{} bytes>)",
            convert::addr_repr(rpc.client),
            rpc.id,
            self.port,
            self.client_port,
            self.message.bind(py).as_bytes().len()
        )
    }
}

/// The response to a request sent with :meth:`Endpoint.send_request` arrived.
#[pyclass(module = "homa._native", frozen, get_all)]
#[derive(Debug)]
pub(crate) struct ResponseReceived {
    /// The RPC's id, as ``send_request`` returned it.
    id: u64,
    /// The cookie given to ``send_request``.
    cookie: u64,
    /// The response's bytes.
    message: Py<PyBytes>,
}

#[pymethods]
impl ResponseReceived {
    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "ResponseReceived(id={}, cookie={}, message=<{} bytes>)",
            self.id,
            self.cookie,
            self.message.bind(py).as_bytes().len()
        )
    }
}

/// A request sent with :meth:`Endpoint.send_request` will never get a response.
#[pyclass(module = "homa._native", frozen, get_all)]
#[derive(Debug)]
pub(crate) struct RpcFailed {
    /// The RPC's id.
    id: u64,
    /// The cookie given to ``send_request``.
    cookie: u64,
    /// Why: ``"timeout"`` (the peer was silent for ``timeout_ticks``), ``"unreachable"``
    /// (``handle_unreachable``), or ``"port_closed"`` (the local port was unbound).
    reason: &'static str,
}

#[pymethods]
impl RpcFailed {
    fn __repr__(&self) -> String {
        format!("RpcFailed(id={}, cookie={}, reason={:?})", self.id, self.cookie, self.reason)
    }
}

/// One host's Homa stack as a state machine (``homa_core::Endpoint``): bound ports, peers,
/// RPCs, the receiver's grant scheduler, the sender's SRPT queue and pacer. It never reads a
/// clock or a socket: feed it packets (:meth:`handle_packet`) and time
/// (:meth:`handle_timeout`), call the API, and after **any** of these drain
/// :meth:`poll_transmit` and :meth:`poll_event` until they return ``None``, then sleep until
/// :meth:`poll_timeout`.
///
/// Keyword arguments set ``Config`` fields by the Linux module's tunable names (``mtu``,
/// ``unsched_bytes``, ``timeout_ticks``...); a bad value raises ``ConfigError`` naming it.
#[pyclass(module = "homa._native")]
#[derive(Debug)]
pub(crate) struct Endpoint {
    inner: homa_core::Endpoint,
    buf: Vec<u8>,
}

#[pymethods]
impl Endpoint {
    #[new]
    #[pyo3(signature = (**config))]
    fn new(py: Python<'_>, config: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let mut c = Config::default();
        convert::apply_config(py, &mut c, config, &[])?;
        let inner = homa_core::Endpoint::new(c).map_err(|e| errors::config(py, &e))?;
        let buf = vec![0; inner.config().max_packet_len()];
        Ok(Endpoint { inner, buf })
    }

    /// The configuration in force, as a dict of ``Config`` fields.
    #[getter]
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        convert::config_to_py(py, self.inner.config())
    }

    /// Binds server port ``port`` (1..32767).
    fn bind(&mut self, py: Python<'_>, port: &Bound<'_, PyAny>) -> PyResult<()> {
        let port = int(port, "port")?;
        self.inner.bind(port).map_err(|e| errors::api(py, e))
    }

    /// Takes a free ephemeral port (32768..65535) for sending requests; returns it.
    fn bind_ephemeral(&mut self, py: Python<'_>) -> PyResult<u16> {
        self.inner.bind_ephemeral().map_err(|e| errors::api(py, e))
    }

    /// Releases a port: its pending client RPCs fail (``"port_closed"``).
    fn unbind(&mut self, py: Python<'_>, port: &Bound<'_, PyAny>) -> PyResult<()> {
        let port = int(port, "port")?;
        self.inner.unbind(port).map_err(|e| errors::api(py, e))
    }

    /// Starts an RPC from local ``port`` to Homa port ``dest_port`` at transport address
    /// ``dest``; returns its id (even). The outcome arrives as an event carrying ``cookie``.
    /// ``message`` is any bytes-like object (a read-only one is kept, not copied, until
    /// sent; a writable one is copied once).
    #[pyo3(signature = (now, port, dest, dest_port, message, cookie = None))]
    #[allow(clippy::too_many_arguments)] // the core's arguments, one to one
    fn send_request(
        &mut self,
        py: Python<'_>,
        now: &Bound<'_, PyAny>,
        port: &Bound<'_, PyAny>,
        dest: &Bound<'_, PyAny>,
        dest_port: &Bound<'_, PyAny>,
        message: &Bound<'_, PyAny>,
        cookie: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        let now = int(now, "now")?;
        let port = int(port, "port")?;
        let dest = addr(dest, "dest")?;
        let dest_port = int(dest_port, "dest_port")?;
        let cookie = cookie.map(|c| int(c, "cookie")).transpose()?.unwrap_or(0);
        let message = buffer::payload(message)?;
        self.inner
            .send_request(Instant::from_nanos(now), port, dest, dest_port, message, cookie)
            .map_err(|e| errors::api(py, e))
    }

    /// Sends the response to a request delivered by a ``RequestReceived`` event.
    fn send_response(
        &mut self,
        py: Python<'_>,
        now: &Bound<'_, PyAny>,
        rpc: PyRef<'_, ServerRpc>,
        message: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let now = int(now, "now")?;
        let message = buffer::payload(message)?;
        self.inner
            .send_response(Instant::from_nanos(now), rpc.0, message)
            .map_err(|e| errors::api(py, e))
    }

    /// Abandons client RPC ``id`` without an event.
    fn abort(&mut self, py: Python<'_>, id: &Bound<'_, PyAny>) -> PyResult<()> {
        let id = int(id, "id")?;
        self.inner.abort(id).map_err(|e| errors::api(py, e))
    }

    /// Forgets a received request without answering it.
    fn discard(&mut self, py: Python<'_>, rpc: PyRef<'_, ServerRpc>) -> PyResult<()> {
        self.inner.discard(rpc.0).map_err(|e| errors::api(py, e))
    }

    /// The transport found ``peer`` unreachable (or only its Homa port ``port``): its
    /// client RPCs fail with ``"unreachable"``.
    #[pyo3(signature = (peer, port = None))]
    fn handle_unreachable(
        &mut self,
        peer: &Bound<'_, PyAny>,
        port: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let peer = addr(peer, "peer")?;
        let port = port.map(|p| int(p, "port")).transpose()?;
        self.inner.handle_unreachable(peer, port);
        Ok(())
    }

    /// Handles one received packet (from the Homa header on) from transport address
    /// ``source``. Malformed bytes raise ``WireError`` (the packet is dropped and counted).
    fn handle_packet(
        &mut self,
        py: Python<'_>,
        now: &Bound<'_, PyAny>,
        source: &Bound<'_, PyAny>,
        data: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let now = int(now, "now")?;
        let from = addr(source, "source")?;
        let handled = buffer::with_bytes(data, |bytes| {
            self.inner.handle_packet(Instant::from_nanos(now), from, bytes)
        })?;
        handled.map_err(|e| errors::wire(py, e))
    }

    /// Runs the timer work due at ``now``; harmless when nothing is due.
    fn handle_timeout(&mut self, now: &Bound<'_, PyAny>) -> PyResult<()> {
        let now = int(now, "now")?;
        self.inner.handle_timeout(Instant::from_nanos(now));
        Ok(())
    }

    /// The next packet to send, or ``None``.
    fn poll_transmit(
        &mut self,
        py: Python<'_>,
        now: &Bound<'_, PyAny>,
    ) -> PyResult<Option<Transmit>> {
        let now = int(now, "now")?;
        let Some(t) = self
            .inner
            .poll_transmit(Instant::from_nanos(now), &mut self.buf)
            .expect("the buffer holds max_packet_len")
        else {
            return Ok(None);
        };
        Ok(Some(Transmit {
            to: addr_to_py(py, t.to)?.unbind(),
            priority: t.priority,
            data: PyBytes::new(py, &self.buf[..t.len]).unbind(),
        }))
    }

    /// The next event (``RequestReceived``, ``ResponseReceived`` or ``RpcFailed``), or
    /// ``None``.
    fn poll_event(&mut self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let Some(e) = self.inner.poll_event() else { return Ok(None) };
        let obj = match e {
            Event::RequestReceived { rpc, port, client_port, message } => {
                let rpc = Py::new(py, ServerRpc(rpc))?;
                let message = PyBytes::new(py, &message).unbind();
                Py::new(py, RequestReceived { rpc, port, client_port, message })?.into_any()
            }
            Event::ResponseReceived { id, cookie, message } => {
                let message = PyBytes::new(py, &message).unbind();
                Py::new(py, ResponseReceived { id, cookie, message })?.into_any()
            }
            Event::RpcFailed { id, cookie, reason } => {
                let reason = reason.name();
                Py::new(py, RpcFailed { id, cookie, reason })?.into_any()
            }
        };
        Ok(Some(obj))
    }

    /// When :meth:`handle_timeout` must next run (int ns), or ``None`` if nothing is
    /// pending. A time at or before now means output is ready.
    fn poll_timeout(&mut self) -> Option<u64> {
        self.inner.poll_timeout().map(homa_core::Instant::as_nanos)
    }

    /// A snapshot of the counters, as a dict (the conformance suite's names: ``drops`` is a
    /// dict with a ``total``; per-type counts are dicts keyed by packet type name).
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        convert::map_to_py(py, &self.inner.metrics().to_value()).map(Bound::into_any)
    }

    fn __repr__(&self) -> String {
        format!("<homa.Endpoint with {} RPCs>", self.inner.rpc_count())
    }
}
