// Compiled with `tsc --noEmit -p test` (scripts/test): index.d.ts must type what a user
// writes, and what it says must be wrong is.
import * as homa from '..';

async function main(): Promise<void> {
  const server: homa.Socket = await homa.open({ port: 4000, host: '127.0.0.1', timeout_ticks: 2000 });
  const serving: Promise<void> = server.serve(async (req: homa.Request) => req.message);
  const client = await homa.open({ host: 'localhost', transport: 'udp' });
  const worker = await homa.open({ port: 4001, reusePort: true, busyPollMs: 0 });
  worker.close();
  const packet: number = client.mtu + client.linkMbps;
  const controller = new AbortController();
  const reply: Buffer = await client.call(server.localAddr, Buffer.from('hi'), {
    timeoutMs: 1000,
    signal: controller.signal,
    block: false,
  });
  for await (const req of server.requests()) {
    await req.reply(new Uint8Array([1]));
    const peer: string = req.peer;
    void peer;
  }
  try {
    await client.call('127.0.0.1:4000', new ArrayBuffer(8));
  } catch (e) {
    if (e instanceof homa.HomaError) {
      const code: string = e.code;
      const kind: string = e.kind;
      void code, kind;
    }
  }
  const fields: Record<string, any> = homa.wire.decode(reply);
  const again: Buffer = homa.wire.encode(fields);
  const names: string[] = homa.configFields.map((f) => f.name);
  void again, names;
  const ep = new homa.Endpoint({ mtu: 1500 });
  const id: bigint = ep.sendRequest(0n, ep.bindEphemeral(), '10.0.0.2:4000', 99, Buffer.from('x'), 1);
  const t: homa.Transmit | null = ep.pollTransmit(0);
  const e = ep.pollEvent();
  if (e?.type === 'request_received') ep.sendResponse(1n, e.rpc, e.message);
  const next: bigint | null = ep.pollTimeout();
  void id, t, next;
  // @ts-expect-error an address is a string
  ep.handlePacket(0n, ['10.0.0.2', 4000], Buffer.alloc(0));
  // @ts-expect-error a string is not bytes
  await client.call('127.0.0.1:4000', 'text');
  // @ts-expect-error not a transport
  await homa.open({ transport: 'tcp' });
  client.close();
  server.close();
  await serving;
}

void main;
