//! The native half of the `homa` npm package: homa-io's [`Socket`](homa_io::Socket) run on
//! Node's event loop (the `reactor` module), and the core's packet fields codec, for `index.js`,
//! which gives them their JavaScript shape (Promises, async iterators, `HomaError`,
//! argument checks in JavaScript terms).
//!
//! Errors cross as `Error`s whose message is `kind`, the unit separator (`\x1f`), then the
//! text; `index.js` turns them into `HomaError`s. Large messages cross without copies: a
//! sent Buffer of 64 KiB or more is kept referenced and read in place until Homa is done
//! with it, and a received message of 16 KiB or more becomes a Buffer over homa-io's
//! bytes; shorter ones are copied, which costs less at their size.

mod convert;
mod endpoint;
mod reactor;
mod value;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use homa_core::{Payload, Value};
use napi::bindgen_prelude::{Buffer, PromiseRaw, Unknown};
use napi::{Env, Error, JsValue, Result, Status};
use napi_derive::napi;

use reactor::Reactor;

/// Separates an error's kind from its message (see the crate docs).
const SEP: char = '\u{1f}';

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An error of `kind` (the names every binding shares, e.g. `timed_out`) for `index.js`.
fn failure(kind: &str, message: impl std::fmt::Display) -> Error {
    Error::new(Status::GenericFailure, format!("{kind}{SEP}{message}"))
}

/// A homa-io error as a [`failure`] of its kind.
fn io_error(e: homa_io::Error) -> Error {
    failure(e.name(), &e)
}

/// Messages this long or longer are sent from the caller's Buffer in place; shorter ones
/// are copied, so the caller may reuse its Buffer at once (the usual case for small RPCs)
/// and no reference to it outlives the call.
const SHARE_FROM: usize = 64 * 1024;

/// A JavaScript Buffer as message bytes: a copy, or from `SHARE_FROM` on read in place, the
/// Buffer referenced until homa drops the payload (napi-rs releases the reference on the
/// JavaScript thread).
fn payload(message: Buffer) -> Payload {
    match message.len() < SHARE_FROM {
        true => Payload::from(message.to_vec()),
        false => Payload::shared(Arc::new(message)),
    }
}

/// A Homa socket (homa-io) run on this thread's event loop, opened by
/// [`NativeSocket::open`].
#[napi]
pub struct NativeSocket {
    reactor: reactor::Shared,
    local: SocketAddr,
    port: u16,
    transport: &'static str,
    /// The MTU and link rate the socket runs with: given, or taken from the path.
    mtu: u32,
    link_mbps: u32,
}

#[napi]
impl NativeSocket {
    /// Opens a socket: a server on `port` of `host`, or (no port) a client. `config` is an
    /// object of `Config` fields by name; `busy_poll_ms` the busy-polling window (0: off;
    /// none: homa-io's default); `reuse_port` shares the UDP port with other sockets.
    #[napi(factory)]
    pub fn open(
        env: &Env,
        port: Option<u32>,
        host: String,
        transport: String,
        busy_poll_ms: Option<f64>,
        reuse_port: bool,
        config: Unknown<'_>,
    ) -> Result<NativeSocket> {
        let spin = busy_poll_ms
            .map(|ms| Duration::try_from_secs_f64(ms / 1000.0))
            .transpose()
            .map_err(|_| failure("RangeError", "busyPollMs must be a finite number >= 0"))?;
        let ip: std::net::IpAddr =
            host.parse().map_err(|_| failure("invalid_argument", "host is not an IP address"))?;
        let kind: homa_io::TransportKind =
            transport.parse().map_err(|e| failure("invalid_argument", e))?;
        let mut c = homa_io::Config::default();
        // SAFETY: an argument of this call, on the JavaScript thread.
        let fields = unsafe { value::from_js(env.raw(), config.raw(), "config")? };
        convert::apply_config(&mut c, &fields)?;
        let (mtu, link_mbps) = (c.mtu, c.link_mbps);
        let mut builder =
            homa_io::Socket::builder().transport(kind).config(c).reuse_port(reuse_port);
        // Given ones win; the others come from the interface the socket sends by.
        if convert::given(&fields, "mtu") {
            builder = builder.mtu(mtu);
        }
        if convert::given(&fields, "link_mbps") {
            builder = builder.link_mbps(link_mbps);
        }
        if let Some(spin) = spin {
            builder = builder.busy_poll(spin);
        }
        let opened = match port {
            Some(p) => {
                let p = u16::try_from(p).map_err(|_| failure("invalid_port", "port too large"))?;
                builder.bind(SocketAddr::new(ip, p))
            }
            None => builder.client(ip),
        };
        let inner = opened.map_err(io_error)?;
        Ok(NativeSocket {
            local: inner.local_addr(),
            port: inner.port(),
            transport: inner.transport().name(),
            mtu: inner.mtu(),
            link_mbps: inner.link_mbps(),
            reactor: Reactor::start(env.raw(), inner)?,
        })
    }

    /// Where peers reach this socket, as `"ip:port"` (`"[v6]:port"`).
    #[napi(getter)]
    pub fn local_addr(&self) -> String {
        self.local.to_string()
    }

    /// The Homa port: the server's, or the client's ephemeral one.
    #[napi(getter)]
    pub fn port(&self) -> u32 {
        u32::from(self.port)
    }

    /// The transport in use (after any io_uring fallback).
    #[napi(getter)]
    pub fn transport(&self) -> String {
        self.transport.into()
    }

    /// The largest IP packet this socket sends: the `mtu` given, or the interface's.
    #[napi(getter)]
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// The link rate its pacer keeps to, in Mbit/s: the `link_mbps` given, or the
    /// interface's speed (unpaced on loopback).
    #[napi(getter)]
    pub fn link_mbps(&self) -> u32 {
        self.link_mbps
    }

    /// Whether `close` was called.
    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.reactor.borrow().is_closed()
    }

    /// Sends `message` (copied below 64 KiB, else read in place) to `dest` (`"ip:port"`)
    /// and resolves to the response, a Buffer. `token` (unique among this socket's pending
    /// operations) lets [`cancel`](NativeSocket::cancel) abort it.
    #[napi]
    pub fn call<'env>(
        &self,
        env: &'env Env,
        token: u32,
        dest: String,
        message: Buffer,
        timeout_ms: Option<f64>,
        block: bool,
    ) -> Result<PromiseRaw<'env, Buffer>> {
        let dest: SocketAddr = dest
            .parse()
            .map_err(|_| failure("invalid_argument", format!("{dest:?} is not ip:port")))?;
        let timeout = timeout_ms
            .map(|ms| Duration::try_from_secs_f64(ms / 1000.0))
            .transpose()
            .map_err(|_| failure("RangeError", "timeoutMs must be a finite number >= 0"))?;
        let promise = Reactor::call(&self.reactor, token, |sock| match block {
            true => sock.call_async(dest, payload(message), timeout),
            false => sock.try_call_async(dest, payload(message), timeout),
        })?;
        Ok(PromiseRaw::new(env.raw(), promise))
    }

    /// Resolves to the next request, `[handle, message, peer, id]` (an error of kind
    /// `shutdown` once closed). `token` as for [`call`](NativeSocket::call).
    #[napi]
    pub fn recv_request<'env>(
        &self,
        env: &'env Env,
        token: u32,
    ) -> Result<PromiseRaw<'env, Unknown<'env>>> {
        Ok(PromiseRaw::new(env.raw(), Reactor::recv(&self.reactor, token)?))
    }

    /// Aborts pending operation `token`: its promise rejects with kind `aborted` and a
    /// call's RPC is forgotten. Returns whether it was pending.
    #[napi]
    pub fn cancel(&self, token: u32) -> bool {
        Reactor::cancel(&self.reactor, token)
    }

    /// Counters (homa-io's `Metrics`).
    #[napi]
    pub fn metrics<'env>(&self, env: &'env Env) -> Result<Unknown<'env>> {
        let counters = self.reactor.borrow().socket()?.metrics().to_value();
        to_js(env, &Value::from(counters))
    }

    /// The metrics in Prometheus' text exposition format, each sample labelled
    /// `socket="<local address>"` and with `labels` (which may name `socket` otherwise).
    #[napi]
    pub fn metrics_text(&self, labels: Option<BTreeMap<String, String>>) -> Result<String> {
        let labels = homa_io::socket_labels(self.local, labels.unwrap_or_default())
            .map_err(|e| failure("TypeError", e))?;
        let metrics = self.reactor.borrow().socket()?.metrics();
        let all: Vec<_> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        Ok(metrics.to_prometheus(&all))
    }

    /// Warnings homa-io logged since the last call (e.g. a peer sending too long
    /// messages), for `index.js` to print once.
    #[napi]
    pub fn take_warnings(&self) -> Vec<String> {
        self.reactor.borrow().take_warnings()
    }

    /// Closes the socket: pending calls and receives reject (`shutdown`). Idempotent.
    #[napi]
    pub fn close(&self) {
        Reactor::close(&self.reactor, true);
        reactor::forget_hook(&self.reactor);
    }
}

impl std::fmt::Debug for NativeSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeSocket").field("local", &self.local).finish_non_exhaustive()
    }
}

impl Drop for NativeSocket {
    /// Collected unclosed (nothing was pending: a pending call's promise keeps its socket
    /// alive through `index.js`): closed, while the environment lives; at its teardown,
    /// the cleanup hook has closed it already.
    fn drop(&mut self) {
        reactor::forget_hook(&self.reactor);
        Reactor::close(&self.reactor, true);
    }
}

/// A received request's handle, for the reply. A receive resolves to
/// `[handle, message, peer, id]` (see `Reactor::settle`).
#[napi]
#[derive(Debug)]
pub struct NativeRequest {
    inner: Mutex<Option<homa_io::Request>>,
}

#[napi]
impl NativeRequest {
    /// Sends the response (copied below 64 KiB, else read in place). A second reply is an
    /// error.
    #[napi]
    pub fn reply(&self, message: Buffer) -> Result<()> {
        let r = lock(&self.inner).take();
        let r = r.ok_or_else(|| failure("not_awaiting_response", "already answered"))?;
        r.reply(payload(message)).map_err(io_error)
    }

    /// Drops the request unanswered (the client's Homa will ask again).
    #[napi]
    pub fn discard(&self) {
        lock(&self.inner).take();
    }
}

/// `v` as a JavaScript value of this call.
fn to_js<'env>(env: &'env Env, v: &Value) -> Result<Unknown<'env>> {
    // SAFETY: on the JavaScript thread, for the value this call returns.
    unsafe {
        let raw = value::to_js(env.raw(), v)?;
        Ok(Unknown::from_raw_unchecked(env.raw(), raw))
    }
}

/// The packet fields codec (`homa.wire.decode`): a packet's fields, the conformance
/// suite's canonical object.
#[napi]
pub fn wire_decode<'env>(env: &'env Env, packet: Buffer) -> Result<Unknown<'env>> {
    let fields = homa_core::wire::fields::decode(&packet).map_err(|e| failure(e.class(), e))?;
    to_js(env, &Value::from(fields))
}

/// The packet fields codec (`homa.wire.encode`): the bytes of the packet `fields` names.
#[napi]
pub fn wire_encode(env: &Env, fields: Unknown<'_>) -> Result<Buffer> {
    // SAFETY: an argument of this call, on the JavaScript thread.
    let fields = unsafe { value::from_js(env.raw(), fields.raw(), "the fields")? };
    let Value::Map(map) = fields else {
        return Err(failure("TypeError", "the fields must be an object"));
    };
    let bytes = homa_core::wire::fields::encode(&map).map_err(|e| failure("invalid_fields", &e))?;
    Ok(Buffer::from(bytes))
}

/// The `Config` fields every binding shares: `[{ name, kind, min, max, doc }]`.
#[napi]
pub fn config_fields(env: &Env) -> Result<Unknown<'_>> {
    to_js(env, &convert::config_fields())
}
