//! The native half of the `homa` npm package: homa-io's [`Socket`](homa_io::Socket) and the
//! core's packet fields codec, for `index.js`, which gives them their JavaScript shape
//! (Promises, async iterators, `HomaError`, argument checks in JavaScript terms).
//!
//! Completions reach JavaScript without polling: each call or receive is a future on
//! napi-rs's runtime thread, woken by homa-io's driver when its RPC ends, and its promise is
//! settled on the JavaScript thread through a thread-safe function. Errors cross as
//! `Error`s whose message is `kind`, the unit separator (`\x1f`), then the text;
//! `index.js` turns them into `HomaError`s.

mod convert;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use napi::bindgen_prelude::{Buffer, PromiseRaw};
use napi::{Env, Error, Result, Status};
use napi_derive::napi;

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

/// A Homa socket (homa-io), opened by [`NativeSocket::open`].
#[napi]
#[derive(Debug)]
pub struct NativeSocket {
    inner: Mutex<Option<Arc<homa_io::Socket>>>,
    local: SocketAddr,
    port: u16,
    transport: &'static str,
}

impl NativeSocket {
    fn socket(&self) -> Result<Arc<homa_io::Socket>> {
        lock(&self.inner).clone().ok_or_else(|| failure("shutdown", "the socket is closed"))
    }
}

#[napi]
impl NativeSocket {
    /// Opens a socket: a server on `port` of `host`, or (no port) a client. `config` is a
    /// JSON object of `Config` fields by name.
    #[napi(factory)]
    pub fn open(
        port: Option<u32>,
        host: String,
        transport: String,
        config: String,
    ) -> Result<NativeSocket> {
        let ip: std::net::IpAddr =
            host.parse().map_err(|_| failure("invalid_argument", "host is not an IP address"))?;
        let kind: homa_io::TransportKind =
            transport.parse().map_err(|e| failure("invalid_argument", e))?;
        let config = convert::config(&config)?;
        let builder = homa_io::Socket::builder().transport(kind).config(config);
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
            inner: Mutex::new(Some(Arc::new(inner))),
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

    /// Whether `close` was called.
    #[napi(getter)]
    pub fn closed(&self) -> bool {
        lock(&self.inner).is_none()
    }

    /// Sends `message` (copied once) to `dest` (`"ip:port"`) and resolves to the response,
    /// a Buffer over the received bytes. `abort`, if given, cancels the call.
    #[napi]
    pub fn call<'env>(
        &self,
        env: &'env Env,
        dest: String,
        message: Buffer,
        timeout_ms: Option<f64>,
        block: bool,
        abort: Option<&AbortHandle>,
    ) -> Result<PromiseRaw<'env, Buffer>> {
        let sock = self.socket()?;
        let dest: SocketAddr = dest
            .parse()
            .map_err(|_| failure("invalid_argument", format!("{dest:?} is not ip:port")))?;
        let timeout = timeout_ms.map(|ms| Duration::from_secs_f64(ms / 1000.0));
        let payload = message.to_vec();
        let call = match block {
            true => sock.call_async(dest, payload, timeout),
            false => sock.try_call_async(dest, payload, timeout),
        }
        .map_err(io_error)?;
        let call = Abortable { inner: call, flag: abort.map(|a| Arc::clone(&a.flag)) };
        env.spawn_future(async move {
            let response = call.await?;
            Ok(Buffer::from(response))
        })
    }

    /// Resolves to the next request (an error of kind `shutdown` once closed).
    #[napi]
    pub fn recv_request<'env>(&self, env: &'env Env) -> Result<PromiseRaw<'env, NativeRequest>> {
        let sock = self.socket()?;
        env.spawn_future(async move {
            let mut r = sock.recv_request_async().await.map_err(io_error)?;
            let message = r.take_message();
            Ok(NativeRequest {
                peer: r.peer().to_string(),
                id: r.id() as f64,
                message: Mutex::new(Some(message)),
                inner: Mutex::new(Some(r)),
            })
        })
    }

    /// Counters, as JSON (homa-io's `Metrics`).
    #[napi]
    pub fn metrics(&self) -> Result<String> {
        let sock = self.socket()?;
        Ok(serde_json::Value::from(sock.metrics().to_value()).to_string())
    }

    /// Warnings homa-io logged since the last call (e.g. a peer sending too long
    /// messages), for `index.js` to print once.
    #[napi]
    pub fn take_warnings(&self) -> Vec<String> {
        lock(&self.inner).as_ref().map(|s| s.take_warnings()).unwrap_or_default()
    }

    /// Closes the socket: pending calls fail (`shutdown`), receives end. Idempotent.
    #[napi]
    pub fn close(&self) {
        if let Some(sock) = lock(&self.inner).take() {
            sock.shutdown();
        }
    }
}

/// A received request: its message (taken once by `index.js`), its peer and id, and the
/// reply.
#[napi]
#[derive(Debug)]
pub struct NativeRequest {
    inner: Mutex<Option<homa_io::Request>>,
    message: Mutex<Option<Vec<u8>>>,
    peer: String,
    id: f64,
}

#[napi]
impl NativeRequest {
    /// The request's message, a Buffer over the received bytes (once; `index.js` keeps it).
    #[napi]
    pub fn take_message(&self) -> Buffer {
        Buffer::from(lock(&self.message).take().unwrap_or_default())
    }

    /// The client's address, `"ip:port"`.
    #[napi(getter)]
    pub fn peer(&self) -> String {
        self.peer.clone()
    }

    /// The RPC id.
    #[napi(getter)]
    pub fn id(&self) -> f64 {
        self.id
    }

    /// Sends the response (copied once). A second reply is an error.
    #[napi]
    pub fn reply(&self, message: Buffer) -> Result<()> {
        let r = lock(&self.inner).take();
        let r = r.ok_or_else(|| failure("not_awaiting_response", "already answered"))?;
        r.reply(message.to_vec()).map_err(io_error)
    }

    /// Drops the request unanswered (the client's Homa will ask again).
    #[napi]
    pub fn discard(&self) {
        lock(&self.inner).take();
    }
}

/// Cancels one call: `index.js` makes one per call that has an `AbortSignal`.
#[napi]
#[derive(Debug, Default)]
pub struct AbortHandle {
    flag: Arc<Flag>,
}

#[napi]
impl AbortHandle {
    /// A handle nobody has aborted yet.
    #[napi(constructor)]
    pub fn new() -> AbortHandle {
        AbortHandle::default()
    }

    /// Aborts the call: it fails with kind `aborted` and its RPC is forgotten.
    #[napi]
    pub fn abort(&self) {
        self.flag.aborted.store(true, Ordering::Release);
        if let Some(w) = lock(&self.flag.waker).take() {
            w.wake();
        }
    }
}

/// Whether a call was aborted, and the waker of the future watching it.
#[derive(Debug, Default)]
struct Flag {
    aborted: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

/// A call that ends with `aborted` once its [`Flag`], if it has one, is set (dropping the
/// `Call` aborts the RPC).
struct Abortable {
    inner: homa_io::Call,
    flag: Option<Arc<Flag>>,
}

impl Future for Abortable {
    type Output = Result<Vec<u8>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(flag) = &self.flag {
            *lock(&flag.waker) = Some(cx.waker().clone());
            if flag.aborted.load(Ordering::Acquire) {
                return Poll::Ready(Err(failure("aborted", "the call was aborted")));
            }
        }
        Pin::new(&mut self.inner).poll(cx).map(|r| r.map_err(io_error))
    }
}

/// The packet fields codec (`homa.wire.decode`): a packet's fields as JSON.
#[napi]
pub fn wire_decode(packet: Buffer) -> Result<String> {
    let fields = homa_core::wire::fields::decode(&packet).map_err(|e| failure(e.class(), e))?;
    Ok(serde_json::Value::from(fields).to_string())
}

/// The packet fields codec (`homa.wire.encode`): the bytes of the packet that JSON names.
#[napi]
pub fn wire_encode(fields: String) -> Result<Buffer> {
    let map = convert::json_to_map(&fields)?;
    let bytes = homa_core::wire::fields::encode(&map).map_err(|e| failure("invalid_fields", &e))?;
    Ok(Buffer::from(bytes))
}

/// The `Config` fields every binding shares: name, kind and doc, as JSON.
#[napi]
pub fn config_fields() -> String {
    convert::config_fields().to_string()
}
