//! `homa.Endpoint`: the sans-IO core, one to one, for embedding and for the conformance
//! suite. Times, ids and cookies are BigInts (u64 nanoseconds from any origin, the core's
//! ids); Numbers are accepted on the way in. Addresses are `"ip:port"` strings.

use std::net::SocketAddr;

use homa_core::{Config, Event, Instant, ServerRpc, Value};
use napi::bindgen_prelude::{BigInt, Buffer, Object, ToNapiValue, Unknown};
use napi::{Env, JsValue, Result};
use napi_derive::napi;

use crate::{failure, payload, value};

/// `v` (a Number or a BigInt) as an integer in `0..=max`; `what` names it in errors.
fn uint(env: &Env, v: Unknown<'_>, what: &str, max: u64) -> Result<u64> {
    // SAFETY: a value of this call, on the JavaScript thread.
    let value = unsafe { value::from_js(env.raw(), v.raw(), what)? };
    match value {
        Value::Int(i) => u64::try_from(i).ok().filter(|&n| n <= max).ok_or_else(|| {
            failure("RangeError", format!("{what} must be between 0 and {max}, not {i}"))
        }),
        _ => Err(failure("TypeError", format!("{what} must be an integer (Number or BigInt)"))),
    }
}

fn nanos(env: &Env, v: Unknown<'_>) -> Result<Instant> {
    uint(env, v, "now", u64::MAX).map(Instant::from_nanos)
}

fn port(env: &Env, v: Unknown<'_>, what: &str) -> Result<u16> {
    uint(env, v, what, u64::from(u16::MAX)).map(|p| p as u16)
}

fn addr(s: &str, what: &str) -> Result<SocketAddr> {
    s.parse().map_err(|_| failure("TypeError", format!("{what} must be \"ip:port\", not {s:?}")))
}

fn api(e: homa_core::ApiError) -> napi::Error {
    failure(e.name(), e)
}

/// The handle of a received request, `{ client, id }`, as JavaScript sees it.
fn server_rpc(env: &Env, rpc: Object<'_>) -> Result<ServerRpc> {
    let client: String =
        rpc.get("client")?.ok_or_else(|| failure("TypeError", "rpc.client must be \"ip:port\""))?;
    let id: Unknown<'_> =
        rpc.get("id")?.ok_or_else(|| failure("TypeError", "rpc.id must be an integer"))?;
    Ok(ServerRpc { client: addr(&client, "rpc.client")?, id: uint(env, id, "rpc.id", u64::MAX)? })
}

/// A u64 as a BigInt.
fn big(env: &Env, n: u64) -> Result<Unknown<'_>> {
    // SAFETY: on the JavaScript thread; the value is used in this call.
    unsafe {
        let v = BigInt::to_napi_value(env.raw(), BigInt::from(n))?;
        Ok(Unknown::from_raw_unchecked(env.raw(), v))
    }
}

/// One host's Homa stack as a state machine (`homa_core::Endpoint`). It never reads a clock
/// or a socket: feed it packets (`handlePacket`) and time (`handleTimeout`), call the API,
/// and after any of these drain `pollTransmit` and `pollEvent` until they return null,
/// then sleep until `pollTimeout`.
#[napi]
#[derive(Debug)]
pub struct Endpoint {
    inner: homa_core::Endpoint,
    buf: Vec<u8>,
}

#[napi]
impl Endpoint {
    /// An endpoint with `config` (Config fields by the module's tunable names).
    #[napi(constructor)]
    pub fn new(env: Env, config: Option<Unknown<'_>>) -> Result<Endpoint> {
        let mut c = Config::default();
        if let Some(config) = config {
            // SAFETY: an argument of this call.
            let fields = unsafe { value::from_js(env.raw(), config.raw(), "config")? };
            crate::convert::apply_config(&mut c, &fields)?;
        }
        let inner = homa_core::Endpoint::new(c).map_err(|e| failure("config", e))?;
        let buf = vec![0; inner.config().max_packet_len()];
        Ok(Endpoint { inner, buf })
    }

    /// The configuration in force, Config fields by name.
    #[napi(getter)]
    pub fn config<'env>(&self, env: &'env Env) -> Result<Unknown<'env>> {
        let fields = crate::convert::config_to_map(self.inner.config());
        // SAFETY: on the JavaScript thread.
        unsafe {
            let v = value::map_to_js(env.raw(), &fields)?;
            Ok(Unknown::from_raw_unchecked(env.raw(), v))
        }
    }

    /// Binds server port `port` (1..32767).
    #[napi]
    pub fn bind(&mut self, env: Env, port: Unknown<'_>) -> Result<()> {
        let p = self::port(&env, port, "port")?;
        self.inner.bind(p).map_err(api)
    }

    /// Takes a free ephemeral port (32768..65535) for sending requests; returns it.
    #[napi]
    pub fn bind_ephemeral(&mut self) -> Result<u32> {
        self.inner.bind_ephemeral().map(u32::from).map_err(api)
    }

    /// Releases a port: its pending client RPCs fail (`port_closed`).
    #[napi]
    pub fn unbind(&mut self, env: Env, port: Unknown<'_>) -> Result<()> {
        let p = self::port(&env, port, "port")?;
        self.inner.unbind(p).map_err(api)
    }

    /// Starts an RPC from local `port` to Homa port `destPort` at `dest` ("ip:port");
    /// returns its id. The outcome arrives as an event carrying `cookie`. `message` is read
    /// in place until sent.
    #[napi]
    #[allow(clippy::too_many_arguments)] // the core's arguments, one to one
    pub fn send_request<'env>(
        &mut self,
        env: &'env Env,
        now: Unknown<'_>,
        port: Unknown<'_>,
        dest: String,
        dest_port: Unknown<'_>,
        message: Buffer,
        cookie: Option<Unknown<'_>>,
    ) -> Result<Unknown<'env>> {
        let now = nanos(env, now)?;
        let port = self::port(env, port, "port")?;
        let dest = addr(&dest, "dest")?;
        let dest_port = self::port(env, dest_port, "destPort")?;
        let cookie = cookie.map(|c| uint(env, c, "cookie", u64::MAX)).transpose()?.unwrap_or(0);
        let id = self
            .inner
            .send_request(now, port, dest, dest_port, payload(message), cookie)
            .map_err(api)?;
        big(env, id)
    }

    /// Sends the response to a request from a `request_received` event (its `rpc`).
    #[napi]
    pub fn send_response(
        &mut self,
        env: Env,
        now: Unknown<'_>,
        rpc: Object<'_>,
        message: Buffer,
    ) -> Result<()> {
        let now = nanos(&env, now)?;
        let rpc = server_rpc(&env, rpc)?;
        self.inner.send_response(now, rpc, payload(message)).map_err(api)
    }

    /// Abandons client RPC `id` without an event.
    #[napi]
    pub fn abort(&mut self, env: Env, id: Unknown<'_>) -> Result<()> {
        let id = uint(&env, id, "id", u64::MAX)?;
        self.inner.abort(id).map_err(api)
    }

    /// Forgets a received request without answering it.
    #[napi]
    pub fn discard(&mut self, env: Env, rpc: Object<'_>) -> Result<()> {
        let rpc = server_rpc(&env, rpc)?;
        self.inner.discard(rpc).map_err(api)
    }

    /// The transport found `peer` unreachable (or only its Homa port `port`): its client
    /// RPCs fail with `unreachable`.
    #[napi]
    pub fn handle_unreachable(
        &mut self,
        env: Env,
        peer: String,
        port: Option<Unknown<'_>>,
    ) -> Result<()> {
        let peer = addr(&peer, "peer")?;
        let port = port.map(|p| self::port(&env, p, "port")).transpose()?;
        self.inner.handle_unreachable(peer, port);
        Ok(())
    }

    /// Handles one received packet (from the Homa header on) from `source`. Malformed bytes
    /// throw a HomaError of the wire kind (the packet is dropped and counted).
    #[napi]
    pub fn handle_packet(
        &mut self,
        env: Env,
        now: Unknown<'_>,
        source: String,
        data: Buffer,
    ) -> Result<()> {
        let now = nanos(&env, now)?;
        let from = addr(&source, "source")?;
        self.inner.handle_packet(now, from, &data).map_err(|e| failure(e.class(), e))
    }

    /// Runs the timer work due at `now`; harmless when nothing is due.
    #[napi]
    pub fn handle_timeout(&mut self, env: Env, now: Unknown<'_>) -> Result<()> {
        let now = nanos(&env, now)?;
        self.inner.handle_timeout(now);
        Ok(())
    }

    /// The next packet to send, `{ to, priority, data }`, or null.
    #[napi(ts_return_type = "Transmit | null")]
    pub fn poll_transmit<'env>(
        &mut self,
        env: &'env Env,
        now: Unknown<'_>,
    ) -> Result<Option<Object<'env>>> {
        let now = nanos(env, now)?;
        let sent = self.inner.poll_transmit(now, &mut self.buf);
        let Some(t) = sent.expect("the buffer holds max_packet_len") else { return Ok(None) };
        let mut out = Object::new(env)?;
        out.set("to", t.to.to_string())?;
        out.set("priority", u32::from(t.priority))?;
        out.set("data", Buffer::from(self.buf[..t.len].to_vec()))?;
        Ok(Some(out))
    }

    /// The next event, or null: `{ type: 'request_received', rpc: { client, id }, client,
    /// id, port, clientPort, message }`, `{ type: 'response_received', id, cookie, message }`
    /// or `{ type: 'rpc_failed', id, cookie, reason }`.
    #[napi(ts_return_type = "EndpointEvent | null")]
    pub fn poll_event<'env>(&mut self, env: &'env Env) -> Result<Option<Object<'env>>> {
        let Some(e) = self.inner.poll_event() else { return Ok(None) };
        let mut out = Object::new(env)?;
        match e {
            Event::RequestReceived { rpc, port, client_port, message } => {
                let mut handle = Object::new(env)?;
                handle.set("client", rpc.client.to_string())?;
                handle.set("id", big(env, rpc.id)?)?;
                out.set("type", "request_received")?;
                out.set("rpc", handle)?;
                out.set("client", rpc.client.to_string())?;
                out.set("id", big(env, rpc.id)?)?;
                out.set("port", u32::from(port))?;
                out.set("clientPort", u32::from(client_port))?;
                out.set("message", Buffer::from(message))?;
            }
            Event::ResponseReceived { id, cookie, message } => {
                out.set("type", "response_received")?;
                out.set("id", big(env, id)?)?;
                out.set("cookie", big(env, cookie)?)?;
                out.set("message", Buffer::from(message))?;
            }
            Event::RpcFailed { id, cookie, reason } => {
                out.set("type", "rpc_failed")?;
                out.set("id", big(env, id)?)?;
                out.set("cookie", big(env, cookie)?)?;
                out.set("reason", reason.name())?;
            }
        }
        Ok(Some(out))
    }

    /// When `handleTimeout` must next run (BigInt ns), or null if nothing is pending. A time
    /// at or before now means output is ready.
    #[napi(ts_return_type = "bigint | null")]
    pub fn poll_timeout<'env>(&mut self, env: &'env Env) -> Result<Option<Unknown<'env>>> {
        self.inner.poll_timeout().map(|t| big(env, t.as_nanos())).transpose()
    }

    /// The counters (the conformance suite's names).
    #[napi]
    pub fn metrics<'env>(&self, env: &'env Env) -> Result<Unknown<'env>> {
        // SAFETY: on the JavaScript thread.
        unsafe {
            let v = value::map_to_js(env.raw(), &self.inner.metrics().to_value())?;
            Ok(Unknown::from_raw_unchecked(env.raw(), v))
        }
    }
}
