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
  /** Config fields by name (`max_message_length`, `timeout_ticks`, ...; see `configFields`). */
  [config: string]: number | number[] | string | null | undefined;
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
  /** The request's message, a Buffer over the received bytes. */
  readonly message: Buffer;
  /** The client's address, "ip:port". */
  readonly peer: string;
  /** The RPC's id. */
  readonly id: number;
  /** Sends the response; resolves at once. Its bytes are read in place until the client has them. */
  reply(data: Bytes): Promise<void>;
  /** Drops the request unanswered. */
  discard(): void;
}

/** A Homa socket. */
export class Socket {
  readonly localAddr: string;
  readonly port: number;
  readonly transport: Transport;
  readonly closed: boolean;
  /** Sends `data` to `dest` ("host:port"), read in place until the call settles, and resolves to the response. */
  call(dest: string, data: Bytes, options?: CallOptions): Promise<Buffer>;
  /** The next request. */
  recvRequest(): Promise<Request>;
  /** Requests as they arrive, until the socket is closed. */
  requests(): AsyncGenerator<Request, void, undefined>;
  /** Runs `handler` for each request until the socket is closed. */
  serve(handler: (req: Request) => Bytes | Promise<Bytes>, options?: ServeOptions): Promise<void>;
  /** Counters, as plain data. */
  metrics(): Record<string, any>;
  /** Fails pending calls (ESHUTDOWN) and ends `requests()`. */
  close(): void;
  [Symbol.asyncDispose](): Promise<void>;
}

/** Opens a socket. */
export function open(options?: OpenOptions): Promise<Socket>;

/** The packet fields codec (the conformance suite's field objects). */
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
