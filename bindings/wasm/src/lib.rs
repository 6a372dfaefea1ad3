//! Homa's sans-IO core for JavaScript, through WebAssembly: the npm package `homa-wasm`.
//!
//! [`Endpoint`] is homa-core's `Endpoint` one to one, named as in the Node binding: the
//! embedder feeds it packets and time and sends what it says, over whatever transport it
//! has (a WebSocket, a WebRTC data channel, `dgram`). [`wire_decode`] / [`wire_encode`] are
//! the packet fields codec. With the `sim` feature, a second module adds `simulate`: the
//! simulator that reproduces the paper (kept apart: it is most of the size).
//!
//! JavaScript sees: times as Numbers of nanoseconds (from any origin, never going back),
//! RPC ids and cookies as BigInts (a 64-bit id can be any u64), packets and messages as
//! `Uint8Array`s, addresses as `"ip:port"` strings, events and counters as plain objects.
//! Bad input throws an `Error` (a `TypeError` or `RangeError` for arguments, otherwise
//! with a `kind`, the name every binding uses); nothing a caller or a peer sends panics.

#[cfg(feature = "sim")]
mod sim;
mod value;

#[cfg(feature = "sim")]
pub use sim::simulate;

use std::net::SocketAddr;

use homa_core::{Config, Event, Instant, ServerRpc};
use js_sys::{BigInt, Object, Reflect, Uint8Array};
use wasm_bindgen::prelude::*;

#[wasm_bindgen(typescript_custom_section)]
const TYPES: &str = r#"
/** The handle of a received request, for `sendResponse` and `discard`. */
export interface ServerRpc { client: string; id: bigint | number }
/** A packet to send: `data` to `to` ("ip:port") at priority level `priority` (0-7). */
export interface Transmit { to: string; priority: number; data: Uint8Array }
/** What `pollEvent` returns. */
export type EndpointEvent =
  | { type: 'request_received'; rpc: { client: string; id: bigint }; client: string; id: bigint;
      port: number; clientPort: number; message: Uint8Array }
  | { type: 'response_received'; id: bigint; cookie: bigint; message: Uint8Array }
  | { type: 'rpc_failed'; id: bigint; cookie: bigint; reason: 'timeout' | 'unreachable' | 'port_closed' };
/** `simulate`'s options. */
export interface SimulateOptions {
  workload?: 'w1' | 'w2' | 'w3' | 'w4' | 'w5' | { name?: string; cdf: string }; load?: number; hosts?: number; messages?: number;
  warmup?: number; bins?: number; seed?: number; oracle?: boolean; mode?: 'oneway' | 'rpc';
}
"#;

/// An `Error` whose `kind` is `kind` (the names every binding shares).
pub(crate) fn failure(kind: &str, message: impl std::fmt::Display) -> JsValue {
    let e = js_sys::Error::new(&message.to_string());
    let _ = Reflect::set(&e, &"kind".into(), &kind.into());
    e.into()
}

pub(crate) fn type_error(message: impl std::fmt::Display) -> JsValue {
    js_sys::TypeError::new(&message.to_string()).into()
}

pub(crate) fn range_error(message: impl std::fmt::Display) -> JsValue {
    js_sys::RangeError::new(&message.to_string()).into()
}

/// The largest integer a Number holds exactly.
const MAX_SAFE: f64 = 9_007_199_254_740_991.0;

/// A whole Number in `0..=max` (and exactly representable).
fn uint(v: f64, what: &str, max: u64) -> Result<u64, JsValue> {
    if !v.is_finite() || v.fract() != 0.0 {
        return Err(range_error(format!("{what} must be a whole number, not {v}")));
    }
    if v > MAX_SAFE && max > MAX_SAFE as u64 {
        return Err(range_error(format!("{what} above 2^53 - 1 must be a BigInt, not a Number")));
    }
    if !(0.0..=MAX_SAFE).contains(&v) || v as u64 > max {
        return Err(range_error(format!("{what} must be between 0 and {max}, not {v}")));
    }
    Ok(v as u64)
}

/// A Number argument (not coerced from anything else).
fn number(v: &JsValue, what: &str) -> Result<f64, JsValue> {
    v.as_f64().ok_or_else(|| type_error(format!("{what} must be a Number")))
}

fn port(v: &JsValue, what: &str) -> Result<u16, JsValue> {
    uint(number(v, what)?, what, u64::from(u16::MAX)).map(|p| p as u16)
}

/// The longest packet `handlePacket` and `wire.decode` take (an IP datagram's limit).
const MAX_PACKET: u32 = 65_535;

/// Bytes from a `Uint8Array` (a Buffer is one) or an `ArrayBuffer`, copied into the module;
/// longer than `max` is an error of kind `kind`, found before anything is copied.
fn bytes(v: &JsValue, what: &str, max: u32, kind: &str) -> Result<Vec<u8>, JsValue> {
    let array = match v.dyn_ref::<Uint8Array>() {
        Some(a) => a.clone(),
        None if v.is_instance_of::<js_sys::ArrayBuffer>() => Uint8Array::new(v),
        None => return Err(type_error(format!("{what} must be a Uint8Array or an ArrayBuffer"))),
    };
    if array.length() > max {
        let len = array.length();
        return Err(failure(kind, format!("{what} is {len} bytes, more than the {max} allowed")));
    }
    Ok(array.to_vec())
}

/// An address argument, `"ip:port"` (anything but a string is a TypeError, not coerced).
fn addr_arg(v: &JsValue, what: &str) -> Result<SocketAddr, JsValue> {
    let s =
        v.as_string().ok_or_else(|| type_error(format!("{what} must be an \"ip:port\" string")))?;
    addr(&s, what)
}

/// A BigInt (or a whole Number) as a u64: ids and cookies.
fn u64_of(v: &JsValue, what: &str) -> Result<u64, JsValue> {
    if let Some(n) = v.as_f64() {
        return uint(n, what, u64::MAX);
    }
    let Ok(b) = v.clone().dyn_into::<BigInt>() else {
        return Err(type_error(format!("{what} must be a BigInt or a Number")));
    };
    u64::try_from(b).map_err(|_| range_error(format!("{what} must be between 0 and 2^64 - 1")))
}

fn addr(s: &str, what: &str) -> Result<SocketAddr, JsValue> {
    s.parse().map_err(|_| type_error(format!("{what} must be \"ip:port\", not {s:?}")))
}

fn api(e: homa_core::ApiError) -> JsValue {
    failure(e.name(), e)
}

pub(crate) fn set(o: &Object, key: &str, v: impl Into<JsValue>) {
    let _ = Reflect::set(o, &key.into(), &v.into());
}

/// The handle of a received request, `{ client, id }`, as JavaScript holds it.
fn server_rpc(rpc: &JsValue) -> Result<ServerRpc, JsValue> {
    if !rpc.is_object() {
        return Err(type_error("rpc must be an object { client, id }"));
    }
    let client = Reflect::get(rpc, &"client".into())?;
    let client = client.as_string().ok_or_else(|| type_error("rpc.client must be \"ip:port\""))?;
    let id = u64_of(&Reflect::get(rpc, &"id".into())?, "rpc.id")?;
    Ok(ServerRpc { client: addr(&client, "rpc.client")?, id })
}

/// One host's Homa stack as a state machine (homa-core's `Endpoint`). It never reads a clock
/// or a socket: feed it packets (`handlePacket`) and time (`handleTimeout`), call the API,
/// and after any of these drain `pollTransmit` and `pollEvent` until they return null,
/// then sleep until `pollTimeout`.
#[wasm_bindgen]
#[derive(Debug)]
pub struct Endpoint {
    inner: homa_core::Endpoint,
    buf: Vec<u8>,
    /// The latest time given (times never go back).
    now: u64,
}

impl Endpoint {
    /// `now` as the core's time, refusing a time before one already given.
    fn at(&mut self, now: &JsValue) -> Result<Instant, JsValue> {
        let t = uint(number(now, "now")?, "now", u64::MAX)?;
        if t < self.now {
            return Err(range_error(format!(
                "time went backwards: now is {t} ns, before the {} ns given earlier",
                self.now
            )));
        }
        self.now = t;
        Ok(Instant::from_nanos(t))
    }
}

#[wasm_bindgen]
impl Endpoint {
    /// An endpoint with `config` (Config fields by the module's tunable names: `mtu`,
    /// `unsched_bytes`, `timeout_ticks`, ...).
    #[wasm_bindgen(constructor)]
    pub fn new(config: Option<Object>) -> Result<Endpoint, JsValue> {
        let mut c = Config::default();
        if let Some(config) = config {
            value::apply_config(&mut c, &config)?;
        }
        let inner = homa_core::Endpoint::new(c).map_err(|e| failure("config", e))?;
        let buf = vec![0; inner.config().max_packet_len()];
        Ok(Endpoint { inner, buf, now: 0 })
    }

    /// The configuration in force, Config fields by name.
    #[wasm_bindgen(getter, unchecked_return_type = "Record<string, number | number[]>")]
    pub fn config(&self) -> JsValue {
        let c = self.inner.config();
        let map: homa_core::Map =
            homa_core::config::FIELDS.iter().map(|f| (f.name, (f.get)(c))).collect();
        value::to_js(&homa_core::Value::Map(map))
    }

    /// Binds server port `port` (1..32767).
    pub fn bind(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] port: JsValue,
    ) -> Result<(), JsValue> {
        let p = self::port(&port, "port")?;
        self.inner.bind(p).map_err(api)
    }

    /// Takes a free ephemeral port (32768..65535) for sending requests; returns it.
    #[wasm_bindgen(js_name = bindEphemeral)]
    pub fn bind_ephemeral(&mut self) -> Result<u16, JsValue> {
        self.inner.bind_ephemeral().map_err(api)
    }

    /// Releases a port: its pending client RPCs fail (`port_closed`).
    pub fn unbind(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] port: JsValue,
    ) -> Result<(), JsValue> {
        let p = self::port(&port, "port")?;
        self.inner.unbind(p).map_err(api)
    }

    /// Starts an RPC from local `port` to Homa port `destPort` at `dest` ("ip:port");
    /// returns its id (a BigInt). The outcome arrives as an event carrying `cookie`.
    #[wasm_bindgen(js_name = sendRequest)]
    pub fn send_request(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] now: JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] port: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string")] dest: JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] dest_port: JsValue,
        #[wasm_bindgen(unchecked_param_type = "Uint8Array | ArrayBuffer")] message: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "bigint | number")] cookie: Option<JsValue>,
    ) -> Result<BigInt, JsValue> {
        let max = self.inner.config().max_message_length;
        let message = bytes(&message, "message", max, "message_length")?;
        let port = self::port(&port, "port")?;
        let dest = addr_arg(&dest, "dest")?;
        let dest_port = self::port(&dest_port, "destPort")?;
        let cookie = cookie.filter(|c| !c.is_null()).map(|c| u64_of(&c, "cookie")).transpose()?;
        let cookie = cookie.unwrap_or(0);
        let now = self.at(&now)?;
        let id =
            self.inner.send_request(now, port, dest, dest_port, message, cookie).map_err(api)?;
        Ok(BigInt::from(id))
    }

    /// Sends the response to a request from a `request_received` event (its `rpc`).
    #[wasm_bindgen(js_name = sendResponse)]
    pub fn send_response(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] now: JsValue,
        #[wasm_bindgen(unchecked_param_type = "ServerRpc")] rpc: JsValue,
        #[wasm_bindgen(unchecked_param_type = "Uint8Array | ArrayBuffer")] message: JsValue,
    ) -> Result<(), JsValue> {
        let rpc = server_rpc(&rpc)?;
        let message =
            bytes(&message, "message", self.inner.config().max_message_length, "message_length")?;
        let now = self.at(&now)?;
        self.inner.send_response(now, rpc, message).map_err(api)
    }

    /// Abandons client RPC `id` without an event.
    pub fn abort(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "bigint | number")] id: JsValue,
    ) -> Result<(), JsValue> {
        let id = u64_of(&id, "id")?;
        self.inner.abort(id).map_err(api)
    }

    /// Forgets a received request without answering it.
    pub fn discard(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "ServerRpc")] rpc: JsValue,
    ) -> Result<(), JsValue> {
        let rpc = server_rpc(&rpc)?;
        self.inner.discard(rpc).map_err(api)
    }

    /// The transport found `peer` unreachable (or only its Homa port `port`): its client
    /// RPCs fail with `unreachable`.
    #[wasm_bindgen(js_name = handleUnreachable)]
    pub fn handle_unreachable(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "string")] peer: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "number")] port: Option<JsValue>,
    ) -> Result<(), JsValue> {
        let peer = addr_arg(&peer, "peer")?;
        let port = port.filter(|p| !p.is_null()).map(|p| self::port(&p, "port")).transpose()?;
        self.inner.handle_unreachable(peer, port);
        Ok(())
    }

    /// Handles one received packet (from the Homa header on) from `source`. Malformed
    /// bytes throw an Error whose `kind` names what is wrong (the packet is dropped and
    /// counted).
    #[wasm_bindgen(js_name = handlePacket)]
    pub fn handle_packet(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] now: JsValue,
        #[wasm_bindgen(unchecked_param_type = "string")] source: JsValue,
        #[wasm_bindgen(unchecked_param_type = "Uint8Array | ArrayBuffer")] data: JsValue,
    ) -> Result<(), JsValue> {
        let from = addr_arg(&source, "source")?;
        let data = bytes(&data, "data", MAX_PACKET, "too_long")?;
        let now = self.at(&now)?;
        self.inner.handle_packet(now, from, &data).map_err(|e| failure(e.class(), e))
    }

    /// Runs the timer work due at `now`; harmless when nothing is due.
    #[wasm_bindgen(js_name = handleTimeout)]
    pub fn handle_timeout(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] now: JsValue,
    ) -> Result<(), JsValue> {
        let now = self.at(&now)?;
        self.inner.handle_timeout(now);
        Ok(())
    }

    /// The next packet to send, `{ to, priority, data }`, or null.
    #[wasm_bindgen(js_name = pollTransmit, unchecked_return_type = "Transmit | null")]
    pub fn poll_transmit(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] now: JsValue,
    ) -> Result<JsValue, JsValue> {
        let now = self.at(&now)?;
        let sent = self.inner.poll_transmit(now, &mut self.buf);
        let Some(t) = sent.map_err(|e| failure("internal", e))? else { return Ok(JsValue::NULL) };
        let out = Object::new();
        set(&out, "to", t.to.to_string());
        set(&out, "priority", t.priority);
        set(&out, "data", Uint8Array::from(&self.buf[..t.len]));
        Ok(out.into())
    }

    /// The next event, or null: `{ type: 'request_received', rpc: { client, id }, client,
    /// id, port, clientPort, message }`, `{ type: 'response_received', id, cookie, message }`
    /// or `{ type: 'rpc_failed', id, cookie, reason }`.
    #[wasm_bindgen(js_name = pollEvent, unchecked_return_type = "EndpointEvent | null")]
    pub fn poll_event(&mut self) -> JsValue {
        let Some(e) = self.inner.poll_event() else { return JsValue::NULL };
        let out = Object::new();
        match e {
            Event::RequestReceived { rpc, port, client_port, message } => {
                let handle = Object::new();
                set(&handle, "client", rpc.client.to_string());
                set(&handle, "id", BigInt::from(rpc.id));
                set(&out, "type", "request_received");
                set(&out, "rpc", handle);
                set(&out, "client", rpc.client.to_string());
                set(&out, "id", BigInt::from(rpc.id));
                set(&out, "port", port);
                set(&out, "clientPort", client_port);
                set(&out, "message", Uint8Array::from(&message[..]));
            }
            Event::ResponseReceived { id, cookie, message } => {
                set(&out, "type", "response_received");
                set(&out, "id", BigInt::from(id));
                set(&out, "cookie", BigInt::from(cookie));
                set(&out, "message", Uint8Array::from(&message[..]));
            }
            Event::RpcFailed { id, cookie, reason } => {
                set(&out, "type", "rpc_failed");
                set(&out, "id", BigInt::from(id));
                set(&out, "cookie", BigInt::from(cookie));
                set(&out, "reason", reason.name());
            }
        }
        out.into()
    }

    /// When `handleTimeout` must next run (ns), or null if nothing is pending. A time at or
    /// before now means output is ready.
    #[wasm_bindgen(js_name = pollTimeout, unchecked_return_type = "number | null")]
    pub fn poll_timeout(&mut self) -> JsValue {
        match self.inner.poll_timeout() {
            Some(t) => JsValue::from_f64(t.as_nanos() as f64),
            None => JsValue::NULL,
        }
    }

    /// The counters (the conformance suite's names).
    #[wasm_bindgen(unchecked_return_type = "Record<string, any>")]
    pub fn metrics(&self) -> JsValue {
        value::to_js(&homa_core::Value::Map(self.inner.metrics().to_value()))
    }
}

/// The packet fields codec: a packet's fields, the conformance suite's canonical object
/// (integers beyond `Number.MAX_SAFE_INTEGER` are BigInts).
#[wasm_bindgen(js_name = wireDecode, unchecked_return_type = "Record<string, any>")]
pub fn wire_decode(
    #[wasm_bindgen(unchecked_param_type = "Uint8Array | ArrayBuffer")] packet: JsValue,
) -> Result<JsValue, JsValue> {
    let packet = bytes(&packet, "the packet", MAX_PACKET, "too_long")?;
    let fields = homa_core::wire::fields::decode(&packet).map_err(|e| failure(e.class(), e))?;
    Ok(value::to_js(&homa_core::Value::Map(fields)))
}

/// The packet fields codec: the bytes of the packet `fields` names.
#[wasm_bindgen(js_name = wireEncode)]
pub fn wire_encode(
    #[wasm_bindgen(unchecked_param_type = "Record<string, any>")] fields: JsValue,
) -> Result<Vec<u8>, JsValue> {
    let homa_core::Value::Map(map) = value::from_js(&fields, "the fields")? else {
        return Err(type_error("the fields must be an object"));
    };
    homa_core::wire::fields::encode(&map).map_err(|e| failure("invalid_fields", e))
}
