// Compiled with `tsc --noEmit -p test` (scripts/test): the types wasm-bindgen generates,
// with index.d.ts, must type what a user writes, and what they say is wrong must be.
import { Endpoint, wire, simulate, Transmit, EndpointEvent } from '..';

const ep = new Endpoint({ mtu: 1500 });
const port: number = ep.bindEphemeral();
const id: bigint = ep.sendRequest(0, port, '10.0.0.2:4000', 99, new Uint8Array([1]), 1n);
const t: Transmit | null = ep.pollTransmit(0);
if (t !== null) {
  const fields: Record<string, any> = wire.decode(t.data);
  const again: Uint8Array = wire.encode(fields);
  void again;
}
const e: EndpointEvent | null = ep.pollEvent();
if (e?.type === 'request_received') ep.sendResponse(1, e.rpc, e.message);
if (e?.type === 'rpc_failed') {
  const reason: 'timeout' | 'unreachable' | 'port_closed' = e.reason;
  void reason;
}
const next: number | null = ep.pollTimeout();
ep.handleUnreachable('10.0.0.2:4000');
const report: Record<string, any> = simulate({ workload: 'w1', load: 0.5, hosts: 16 }, (p) => void p.done);
void id, next, report;
// @ts-expect-error a time is a number
ep.handleTimeout('soon');
// @ts-expect-error not a workload
simulate({ workload: 'w9' });

// The browser modules' types.
import initWeb, { Endpoint as WebEndpoint, wire as webWire } from '../web.js';
import initSim, { simulate as webSimulate } from '../sim.js';
async function browser(): Promise<void> {
  await initWeb();
  const e = new WebEndpoint();
  const f: Record<string, any> = webWire.decode(new Uint8Array(0));
  await initSim();
  const r: Record<string, any> = webSimulate({ workload: { cdf: '100 1' } });
  void e, f, r;
}
void browser;
