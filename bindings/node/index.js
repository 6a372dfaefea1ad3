'use strict';
// homa for Node: Promise-based sockets over homa-io (the native module built from this
// package's Rust crate), run on Node's own event loop; the sans-IO Endpoint; the packet
// fields codec. The native half takes checked values and reports errors as `kind` + '\x1f'
// + message; this file gives them their JavaScript shape: argument checks (TypeError,
// RangeError), HomaError with Node-style codes, async iteration, AbortSignal, host names.

const net = require('node:net');
const dns = require('node:dns/promises');

const native = require('./native.js').load();

const SEP = '\x1f';
const MAX_PORT = 32767;
const TRANSPORTS = ['udp', 'ip', 'uring', 'uring-ip'];

/** Node-style codes by error kind (the kinds every binding shares). */
const CODES = {
  timed_out: 'ETIMEDOUT',
  peer_silent: 'ETIMEDOUT',
  unreachable: 'ECONNREFUSED',
  unknown_rpc: 'ENOENT',
  aborted: 'EABORTED',
  shutdown: 'ESHUTDOWN',
  message_length: 'EMSGSIZE',
  port_in_use: 'EADDRINUSE',
  tx_buffer_full: 'ENOBUFS',
  too_many_peers: 'ENOBUFS',
  no_ephemeral_port: 'EADDRNOTAVAIL',
  address_family: 'EAFNOSUPPORT',
  missing_capability: 'EPERM',
  io: 'EIO',
};

/** An error of Homa or of its socket. `kind` is the name every binding uses (Python's
 * `HomaError.kind`), `code` a Node-style code (`'ETIMEDOUT'`, `'ECONNREFUSED'`, ...). */
class HomaError extends Error {
  constructor(message, kind) {
    super(message);
    this.name = 'HomaError';
    this.kind = kind;
    this.code = CODES[kind] ?? (WIRE_KINDS.has(kind) ? 'EPROTO' : 'EINVAL');
  }
}

/** The kinds of bytes that are not a Homa packet (the conformance suite's error classes). */
const WIRE_KINDS = new Set([
  'truncated', 'unknown_type', 'too_many_acks', 'bad_message_length',
  'past_message_end', 'bad_priority', 'invalid_fields',
]);

/** A native error as a HomaError, TypeError or RangeError (anything else unchanged). An
 * argument napi-rs could not convert (code `StringExpected`, `ObjectExpected`, ...) is a
 * TypeError. */
function translate(e) {
  if (!(e instanceof Error) || typeof e.message !== 'string') return e;
  if (e.message.includes(SEP)) {
    const [kind, message] = e.message.split(SEP);
    if (kind === 'TypeError') return new TypeError(message);
    if (kind === 'RangeError') return new RangeError(message);
    return new HomaError(message, kind);
  }
  if (typeof e.code === 'string' && /Expected$|^InvalidArg$/.test(e.code)) return new TypeError(e.message);
  return e;
}

function native_(f) {
  try {
    return f();
  } catch (e) {
    throw translate(e);
  }
}

/** `data` as a Buffer over the same bytes (a copy only of a resizable buffer, which could
 * shrink under a message read in place). */
function bytes(data, what) {
  let buf;
  if (Buffer.isBuffer(data)) buf = data;
  else if (data instanceof Uint8Array) buf = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  else if (data instanceof ArrayBuffer) buf = Buffer.from(data);
  else throw new TypeError(`${what} must be a Buffer, Uint8Array or ArrayBuffer, not ${describe(data)}`);
  return buf.buffer.resizable ? Buffer.from(buf) : buf;
}

function describe(v) {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  return typeof v === 'object' ? `an instance of ${v.constructor?.name ?? 'Object'}` : `a ${typeof v}`;
}

function checkPort(port, what, max = MAX_PORT) {
  if (typeof port !== 'number' || !Number.isInteger(port)) {
    throw new TypeError(`${what} must be an integer, not ${describe(port)}`);
  }
  if (port < 1 || port > max) throw new RangeError(`${what} must be between 1 and ${max}, not ${port}`);
}

/** "host:port" or "[v6]:port" as [host, port]. */
function splitAddress(dest) {
  if (typeof dest !== 'string') {
    throw new TypeError(`the address must be a "host:port" string, not ${describe(dest)}`);
  }
  const m = /^\[([^\]]+)\]:(\d+)$/.exec(dest) ?? /^([^:]+):(\d+)$/.exec(dest);
  if (!m) throw new TypeError(`the address must be "host:port" or "[v6]:port", not ${JSON.stringify(dest)}`);
  const port = Number(m[2]);
  if (port > 65535) throw new RangeError(`the port of ${JSON.stringify(dest)} must be between 0 and 65535`);
  return [m[1], port];
}

async function resolve(host, family) {
  if (net.isIP(host)) return host;
  try {
    return (await dns.lookup(host, { family })).address;
  } catch (e) {
    throw new HomaError(`cannot resolve ${JSON.stringify(host)}: ${e.message}`, 'invalid_argument');
  }
}

/**
 * Opens a Homa socket: a server on `port` (1-32767; with UDP also the UDP port), or without
 * a port a client. `host` is an IP address or a name; `transport` 'udp' (default), 'ip'
 * (IP protocol 146, as the Linux module; needs CAP_NET_RAW), 'uring' or 'uring-ip'.
 * `busyPollMs` (default 0.05; 0: off): for that long after a call starts or a packet
 * arrives, while anything is pending, the event loop polls instead of sleeping, so a quick
 * response is handled without a wake-up (as the Linux module's recvmsg busy-polls). It
 * adapts: a window that ends without a packet, when none comes within four windows either,
 * makes the next 1, 2, 4, ... up to 1,024 chances to poll pass. `reusePort: true` (UDP
 * servers only) lets several processes serve one port, the kernel spreading clients over
 * them; such a socket cannot make calls (kind 'shared_port'). Other
 * options are Config fields by name (`max_message_length`, `timeout_ticks`, ...; see
 * `configFields`).
 */
async function open(options = {}) {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(`the options must be an object, not ${describe(options)}`);
  }
  const { port, host = '0.0.0.0', transport = 'udp', busyPollMs, reusePort = false, ...config } =
    options;
  if (typeof reusePort !== 'boolean') {
    throw new TypeError(`reusePort must be a boolean, not ${describe(reusePort)}`);
  }
  if (busyPollMs !== undefined && typeof busyPollMs !== 'number') {
    throw new TypeError(`busyPollMs must be a number of milliseconds, not ${describe(busyPollMs)}`);
  }
  if (busyPollMs !== undefined && !(busyPollMs >= 0 && busyPollMs <= 1000)) {
    throw new RangeError(`busyPollMs must be between 0 and 1000 milliseconds, not ${busyPollMs}`);
  }
  if (port !== undefined && port !== null) checkPort(port, 'port');
  if (typeof host !== 'string') throw new TypeError(`host must be a string, not ${describe(host)}`);
  if (!TRANSPORTS.includes(transport)) {
    throw new RangeError(`transport must be one of ${TRANSPORTS.join(', ')}, not ${JSON.stringify(transport)}`);
  }
  for (const [name, value] of Object.entries(config)) {
    const ok = Number.isInteger(value) || (Array.isArray(value) && value.every(Number.isInteger));
    if (!ok) throw new TypeError(`option ${name} must be an integer (or a list of them), not ${describe(value)}`);
  }
  const ip = net.isIP(host) ? host : await resolve(host, 4).catch(() => resolve(host, 6));
  const sock = native_(() =>
    native.NativeSocket.open(port ?? null, ip, transport, busyPollMs ?? null, reusePort, config));
  return new Socket(sock);
}

/** A request a server received: its `message`, `peer` and `id`; answer with `reply`. */
class Request {
  /** From what the native side resolves a receive with: [handle, message, peer, id]. */
  constructor([inner, message, peer, id]) {
    this._inner = inner;
    /** The request's message: a Buffer. */
    this.message = message;
    /** The client's address, "ip:port". */
    this.peer = peer;
    /** The RPC's id (a BigInt). */
    this.id = id;
  }

  /** Sends the response; resolves at once. A response of 64 KiB or more is read in place
   * until the client has it: do not modify, transfer or resize it after replying. */
  async reply(data) {
    this._send(data);
  }

  _send(data) {
    const buf = bytes(data, 'the response');
    native_(() => this._inner.reply(buf));
  }

  /** Drops the request unanswered: the client's Homa asks again. */
  discard() {
    this._inner.discard();
  }
}

/** A Homa socket: `call` as a client, `requests` or `serve` as a server. */
class Socket {
  constructor(inner) {
    this._inner = inner;
    this._family = inner.localAddr.startsWith('[') ? 6 : 4;
    this._names = new Map();
    this._next = 0;
    // homa-io's warnings (e.g. a peer sending longer messages than allowed), said once. The
    // timer holds the socket weakly: a socket nobody holds is collected (and closed).
    const self = new WeakRef(this);
    this._warnings = setInterval(() => {
      const sock = self.deref();
      if (sock === undefined) clearInterval(this._warnings);
      else sock._warn();
    }, 1000);
    this._warnings.unref();
  }

  /** Where peers reach this socket, "ip:port". */
  get localAddr() { return this._inner.localAddr; }
  /** The Homa port (the server's, or the client's ephemeral one). */
  get port() { return this._inner.port; }
  /** The transport in use. */
  get transport() { return this._inner.transport; }
  /** The largest IP packet this socket sends: `mtu` as given, or the interface's. */
  get mtu() { return this._inner.mtu; }
  /** The link rate the pacer keeps to, Mbit/s: `link_mbps` as given, or the interface's. */
  get linkMbps() { return this._inner.linkMbps; }
  /** Whether `close` was called. */
  get closed() { return this._inner.closed; }

  _warn() {
    for (const w of this._inner.takeWarnings()) process.emitWarning(w, 'HomaWarning');
  }

  /**
   * Sends `data` (Buffer, Uint8Array or ArrayBuffer) to the server at `dest` ("host:port")
   * and resolves to its response, a Buffer. A message of 64 KiB or more is read in place,
   * not copied: do not modify, transfer or resize it until the call settles. `timeoutMs` bounds the call
   * (HomaError ETIMEDOUT, kind 'timed_out'); a server silent for Homa's own timeout fails
   * it sooner (kind 'peer_silent'). `signal` (an AbortSignal) aborts it (EABORTED). While
   * the send buffer is full the call waits for room; `block: false` fails at once instead
   * (ENOBUFS).
   */
  async call(dest, data, { timeoutMs, signal, block = true } = {}) {
    const buf = bytes(data, 'the message');
    if (buf.length === 0) throw new RangeError('the message is empty: Homa messages hold at least 1 byte');
    if (timeoutMs !== undefined && timeoutMs !== null) {
      if (typeof timeoutMs !== 'number' || Number.isNaN(timeoutMs)) {
        throw new TypeError(`timeoutMs must be a number, not ${describe(timeoutMs)}`);
      }
      if (!(timeoutMs >= 0 && timeoutMs <= 1e12)) {
        throw new RangeError(`timeoutMs must be between 0 and 1e12 (or null for none), not ${timeoutMs}`);
      }
    }
    if (signal !== undefined && !(signal instanceof AbortSignal)) {
      throw new TypeError(`signal must be an AbortSignal, not ${describe(signal)}`);
    }
    if (typeof block !== 'boolean') throw new TypeError(`block must be a boolean, not ${describe(block)}`);
    const to = this._names.get(dest) ?? (await this._address(dest));
    if (signal?.aborted) throw new HomaError('the call was aborted', 'aborted');
    const token = this._token();
    const onAbort = () => this._inner.cancel(token);
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      return await native_(() => this._inner.call(token, to, buf, timeoutMs ?? null, block));
    } catch (e) {
      throw translate(e);
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /** A name for the next native operation, unique among the pending ones. */
  _token() {
    this._next = (this._next + 1) >>> 0;
    return this._next;
  }

  /** `dest` as the native side takes it ("ip:port"), remembered: calls repeat addresses. */
  async _address(dest) {
    const [host, port] = splitAddress(dest);
    const ip = net.isIP(host) ? host : await resolve(host, this._family);
    const to = net.isIPv6(ip) ? `[${ip}]:${port}` : `${ip}:${port}`;
    if (this._names.size >= 1024) this._names.clear();
    this._names.set(dest, to);
    return to;
  }

  /** The next request; rejects with ESHUTDOWN once the socket is closed. */
  async recvRequest() {
    try {
      return new Request(await native_(() => this._inner.recvRequest(this._token())));
    } catch (e) {
      throw translate(e);
    }
  }

  /** Requests as they arrive: `for await (const req of sock.requests())`; ends at close. */
  async *requests() {
    for (let req; (req = await this._nextRequest()) !== null;) yield req;
  }

  /** The next request, or null once the socket is closed. */
  async _nextRequest() {
    try {
      return await this.recvRequest();
    } catch (e) {
      if (e instanceof HomaError && e.kind === 'shutdown') return null;
      throw e;
    }
  }

  /**
   * Serves until the socket is closed: `handler(req)` (may be async) runs for each request
   * and what it returns is the reply. A handler that throws is logged and the server keeps
   * serving; `onError(req, err)` may return a reply for such requests instead of the
   * request being dropped (the client then waits until its timeout).
   */
  async serve(handler, { onError } = {}) {
    if (typeof handler !== 'function') {
      throw new TypeError(`serve needs a function of the request, not ${describe(handler)}`);
    }
    for (let req; (req = await this._nextRequest()) !== null;) this._handle(req, handler, onError);
  }

  /** Runs `handler` for `req` and replies; a synchronous handler's reply goes at once. */
  _handle(req, handler, onError) {
    let out;
    try {
      out = handler(req);
    } catch (e) {
      return this._failed(req, e, onError);
    }
    if (typeof out?.then !== 'function') return this._reply(req, out, onError);
    Promise.resolve(out).then((value) => this._reply(req, value, onError), (e) => this._failed(req, e, onError));
  }

  /** Sends a handler's answer: what is not bytes counts as the handler failing; a reply
   * homa refuses (too long, closed socket) is logged, the request being spent. */
  _reply(req, value, onError) {
    let buf;
    try {
      buf = bytes(value, 'the reply');
    } catch (e) {
      return this._failed(req, e, onError);
    }
    try {
      native_(() => req._inner.reply(buf));
    } catch (e) {
      if (!(e instanceof HomaError && e.kind === 'shutdown')) {
        console.error(`homa: the reply to request ${req.id} from ${req.peer} failed:`, e);
      }
    }
  }

  _failed(req, e, onError) {
    if (e instanceof HomaError && e.kind === 'shutdown') return;
    console.error(`homa: the handler failed for request ${req.id} from ${req.peer}:`, e);
    let answer;
    try {
      answer = onError?.(req, e);
    } catch (e2) {
      console.error('homa: onError failed:', e2);
    }
    if (answer === undefined) return req.discard();
    try {
      req._send(answer);
    } catch (e2) {
      console.error('homa: the onError reply failed:', e2);
    }
  }

  /** Counters: the endpoint's (`core`), the transport's, the driver's; latency histograms
   * (`calls`, `served`). */
  metrics() {
    return native_(() => this._inner.metrics());
  }

  /** The metrics in Prometheus' text format, labelled `socket="<address>"` and `labels`. */
  metricsText(labels) {
    return native_(() => this._inner.metricsText(labels));
  }

  /** Closes the socket: pending calls fail with ESHUTDOWN, `requests()` ends. Idempotent. */
  close() {
    clearInterval(this._warnings);
    this._inner.close();
  }

  async [Symbol.asyncDispose ?? Symbol.for('nodejs.asyncDispose')]() {
    this.close();
  }
}

/** The packet fields codec: the conformance suite's field objects. */
const wire = {
  /** The fields of the packet in `data` (HomaError EPROTO for bytes that are not one). */
  decode(data) {
    return native_(() => native.wireDecode(bytes(data, 'the packet')));
  },
  /** The bytes of the packet `fields` names. */
  encode(fields) {
    if (typeof fields !== 'object' || fields === null) {
      throw new TypeError(`the fields must be an object, not ${describe(fields)}`);
    }
    return native_(() => native.wireEncode(fields));
  },
};

/** The Config fields `open` takes: name, kind, bounds and what each does. */
const configFields = native.configFields();

/**
 * One host's Homa stack as a state machine (homa-core's Endpoint), for embedding and for
 * the conformance suite: no clock, no sockets. Times, ids and cookies are BigInts
 * (nanoseconds from any origin); Numbers are accepted where they are taken. Messages are
 * Buffers (from 64 KiB on read in place until sent); addresses "ip:port".
 */
class Endpoint extends native.Endpoint {
  constructor(config = {}) {
    if (typeof config !== 'object' || config === null) {
      throw new TypeError(`the config must be an object, not ${describe(config)}`);
    }
    try {
      super(config);
    } catch (e) {
      throw translate(e);
    }
  }
}

// The native methods, with their errors as HomaError / TypeError / RangeError and their
// messages taken as Buffer, Uint8Array or ArrayBuffer.
for (const name of Object.getOwnPropertyNames(native.Endpoint.prototype)) {
  const d = Object.getOwnPropertyDescriptor(native.Endpoint.prototype, name);
  if (name === 'constructor' || typeof d.value !== 'function') continue;
  const f = d.value;
  const takes = { sendRequest: 4, sendResponse: 2, handlePacket: 2 }[name];
  Endpoint.prototype[name] = function (...args) {
    if (takes !== undefined && takes < args.length) args[takes] = bytes(args[takes], 'the message');
    try {
      return f.apply(this, args);
    } catch (e) {
      throw translate(e);
    }
  };
}

module.exports = { open, Socket, Request, Endpoint, HomaError, wire, configFields };
