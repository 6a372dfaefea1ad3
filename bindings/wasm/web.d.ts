// Types of web.js: the core module for browsers (await the default export first).
export { default, Endpoint, ServerRpc, Transmit, EndpointEvent } from './pkg/web/homa_wasm';

/** The packet fields codec, as in index.d.ts. */
export const wire: {
  decode(packet: Uint8Array | ArrayBuffer): Record<string, any>;
  encode(fields: Record<string, any>): Uint8Array;
};
