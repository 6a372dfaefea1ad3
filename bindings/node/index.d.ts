/// <reference types="node" />
// Types of index.js (kept in step with it by test/types.ts, checked with tsc --noEmit).

/** Bytes `call` and `reply` take: a Buffer, a Uint8Array or an ArrayBuffer. */
export type Bytes = Buffer | Uint8Array | ArrayBuffer;

/** The transports `open` takes. */
export type Transport = 'udp' | 'ip' | 'uring' | 'uring-ip';

export interface OpenOptions {
  /** A server's Homa port, 1-32767 (with UDP also the UDP port); none for a client. */
  port?: number | null;
  /** An IP address or a host name; default '0.0.0.0'. */
  host?: string;
  /** Default 'udp'. */
  transport?: Transport;
  /** Busy-poll this long (ms, up to 1000) after a call starts or a packet arrives, while
   * anything is pending, instead of sleeping; default 0.05, backing off while it does not
   * pay; 0: off. */
  busyPollMs?: number;
  /** Share the UDP port with other server sockets (SO_REUSEPORT): the kernel spreads clients
   * over them. Such a socket cannot make calls (HomaError kind 'shared_port'). */
  reusePort?: boolean;
  /** Config fields by name (`max_message_length`, `timeout_ticks`, ...; see `configFields`). */
  [config: string]: number | number[] | string | boolean | null | undefined;
}

export interface CallOptions {
  /** Bounds the call: HomaError ETIMEDOUT, kind 'timed_out'. */
  timeoutMs?: number | null;
  /** Aborts the call: HomaError EABORTED. */
  signal?: AbortSignal;
  /** false: fail at once (ENOBUFS) when the send buffer is full, instead of waiting. */
  block?: boolean;
}

export interface ServeOptions {
  /** A reply for a request whose handler threw; undefined drops the request. */
  onError?: (req: Request, err: unknown) => Bytes | undefined;
}

/** An error of Homa or of its socket. */
export class HomaError extends Error {
  /** The kind every binding shares: 'timed_out', 'peer_silent', 'unreachable', ... */
  readonly kind: string;
  /** A Node-style code: 'ETIMEDOUT', 'ECONNREFUSED', 'EABORTED', 'EMSGSIZE', ... */
  readonly code: string;
}

/** A request a server received. */
export class Request {
  /** The request's message, a Buffer (over the received bytes from 16 KiB on, else a copy). */
  readonly message: Buffer;
  /** The client's address, "ip:port". */
  readonly peer: string;
  /** The RPC's id (a u64). */
  readonly id: bigint;
  /** Sends the response; resolves at once. From 64 KiB on its bytes are read in place until the client has them. */
  reply(data: Bytes): Promise<void>;
  /** Drops the request unanswered. */
  discard(): void;
}

/** A Homa socket. */
export class Socket {
  readonly localAddr: string;
  readonly port: number;
  readonly transport: Transport;
  /** The largest IP packet this socket sends: `mtu` as given, or the interface's (65,535 on loopback). */
  readonly mtu: number;
  /** The link rate the pacer keeps to, Mbit/s: `link_mbps` as given, or the interface's (unpaced on loopback). */
  readonly linkMbps: number;
  readonly closed: boolean;
  /** Sends `data` to `dest` ("host:port") and resolves to the response. From 64 KiB on, `data` is read in place until the call settles. */
  call(dest: string, data: Bytes, options?: CallOptions): Promise<Buffer>;
  /** The next request. */
  recvRequest(): Promise<Request>;
  /** Requests as they arrive, until the socket is closed. */
  requests(): AsyncGenerator<Request, void, undefined>;
  /** Runs `handler` for each request until the socket is closed. */
  serve(handler: (req: Request) => Bytes | Promise<Bytes>, options?: ServeOptions): Promise<void>;
  /** Counters, as plain data, with the latency histograms `calls` and `served`. */
  metrics(): Record<string, any>;
  /** The metrics in Prometheus' text format (for prom-client users), every sample labelled
   * `socket="<local address>"` and with `labels`. */
  metricsText(labels?: Record<string, string>): string;
  /** Fails pending calls (ESHUTDOWN) and ends `requests()`. */
  close(): void;
  [Symbol.asyncDispose](): Promise<void>;
}

/** Opens a socket. */
export function open(options?: OpenOptions): Promise<Socket>;

/** A time in nanoseconds, an id or a cookie: u64 values, given as a bigint or a Number. */
export type U64 = bigint | number;

/** The handle of a received request, for `sendResponse` and `discard`. */
export interface ServerRpc {
  /** The client's address, "ip:port". */
  client: string;
  /** The server's id for the RPC (odd). */
  id: U64;
}

/** A packet to send: `data` to `to` ("ip:port") at priority level `priority` (0-7). */
export interface Transmit {
  to: string;
  priority: number;
  data: Buffer;
}

/** What `pollEvent` returns. */
export type EndpointEvent =
  | { type: 'request_received'; rpc: { client: string; id: bigint }; client: string; id: bigint;
      port: number; clientPort: number; message: Buffer }
  | { type: 'response_received'; id: bigint; cookie: bigint; message: Buffer }
  | { type: 'rpc_failed'; id: bigint; cookie: bigint; reason: 'timeout' | 'unreachable' | 'port_closed' };

/**
 * One host's Homa stack as a state machine (homa-core's Endpoint): no clock, no sockets.
 * Feed it packets and time, call the API, then drain `pollTransmit` and `pollEvent` until
 * null and sleep until `pollTimeout`. Times are nanoseconds from any origin.
 */
export class Endpoint {
  /** Config fields by the module's tunable names (`mtu`, `unsched_bytes`, ...). */
  constructor(config?: Record<string, number | number[]>);
  /** The configuration in force. */
  readonly config: Record<string, number | number[]>;
  /** Binds server port `port` (1-32767). */
  bind(port: number): void;
  /** Takes a free ephemeral port (32768-65535) and returns it. */
  bindEphemeral(): number;
  /** Releases a port: its pending client RPCs fail ('port_closed'). */
  unbind(port: number): void;
  /** Starts an RPC from `port` to Homa port `destPort` at `dest`; returns its id. */
  sendRequest(now: U64, port: number, dest: string, destPort: number, message: Bytes, cookie?: U64): bigint;
  /** Sends the response to a received request. */
  sendResponse(now: U64, rpc: ServerRpc, message: Bytes): void;
  /** Abandons client RPC `id` without an event. */
  abort(id: U64): void;
  /** Forgets a received request without answering it. */
  discard(rpc: ServerRpc): void;
  /** The transport found `peer` (or only its Homa port `port`) unreachable. */
  handleUnreachable(peer: string, port?: number): void;
  /** Handles one received packet from `source` (HomaError of a wire kind if malformed). */
  handlePacket(now: U64, source: string, data: Bytes): void;
  /** Runs the timer work due at `now`. */
  handleTimeout(now: U64): void;
  /** The next packet to send, or null. */
  pollTransmit(now: U64): Transmit | null;
  /** The next event, or null. */
  pollEvent(): EndpointEvent | null;
  /** When `handleTimeout` must next run, or null if nothing is pending. */
  pollTimeout(): bigint | null;
  /** The counters (the conformance suite's names). */
  metrics(): Record<string, any>;
}

/** The packet fields codec (the conformance suite's field objects; 64-bit fields beyond
 * Number.MAX_SAFE_INTEGER are bigints). */
export const wire: {
  decode(data: Bytes): Record<string, any>;
  encode(fields: Record<string, any>): Buffer;
};

/** The Config fields `open` takes. */
export const configFields: ReadonlyArray<{
  name: string;
  kind: 'u8' | 'u16' | 'u32' | 'u64' | 'cutoffs';
  min: number;
  max: number;
  doc: string;
}>;
