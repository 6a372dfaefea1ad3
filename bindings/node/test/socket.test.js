'use strict';
// The socket API over UDP loopback: sizes, concurrency, abort, timeouts, close, handlers
// that throw, bad arguments. Nothing waits a fixed time: promises are the signals.

const test = require('node:test');
const assert = require('node:assert/strict');
const dgram = require('node:dgram');
const homa = require('..');

const LOCAL = '127.0.0.1';
// Not about Homa's own timeout: an unoptimised build on a busy 2-core machine can starve
// for longer than its 100 ms default.
const PATIENT = { timeout_ticks: 2000 };

let nextPort = 20000 + (process.pid % 5000);
function freePort() {
  nextPort += 1;
  return nextPort;
}

async function echoServer(options = {}) {
  const server = await homa.open({ port: freePort(), host: LOCAL, ...PATIENT, ...options });
  const serving = server.serve((req) => req.message);
  return { server, serving };
}

function pattern(size, seed) {
  const b = Buffer.alloc(size);
  for (let i = 0; i < size; i++) b[i] = (i * 31 + seed) & 0xff;
  return b;
}

test('messages of 1 B to 1,000,000 B arrive intact', async () => {
  const { server, serving } = await echoServer();
  const client = await homa.open({ host: LOCAL, ...PATIENT });
  for (const [i, size] of [1, 1423, 1424, 1425, 100_000, 1_000_000].entries()) {
    const message = pattern(size, i);
    const reply = await client.call(server.localAddr, message, { timeoutMs: 10_000 });
    assert.ok(Buffer.isBuffer(reply));
    assert.ok(reply.equals(message), `${size} bytes`);
  }
  // Uint8Array and ArrayBuffer too.
  const u8 = new Uint8Array([1, 2, 3]);
  assert.deepEqual([...(await client.call(server.localAddr, u8))], [1, 2, 3]);
  assert.deepEqual([...(await client.call(server.localAddr, u8.buffer))], [1, 2, 3]);
  client.close();
  server.close();
  await serving;
});

test('1,000 concurrent calls all complete', async () => {
  const { server, serving } = await echoServer();
  const client = await homa.open({ host: LOCAL, ...PATIENT });
  const calls = [];
  for (let i = 0; i < 1000; i++) calls.push(client.call(server.localAddr, Buffer.from(`call ${i}`)));
  const replies = await Promise.all(calls);
  replies.forEach((r, i) => assert.equal(r.toString(), `call ${i}`));
  assert.equal(client.metrics().pending_calls, 0);
  client.close();
  server.close();
  await serving;
});

test('an AbortSignal aborts a call', async () => {
  const server = await homa.open({ port: freePort(), host: LOCAL, ...PATIENT });
  const client = await homa.open({ host: LOCAL, ...PATIENT });
  const held = server.recvRequest(); // received, never answered
  const controller = new AbortController();
  const call = client.call(server.localAddr, Buffer.from('wait'), { signal: controller.signal });
  await held;
  controller.abort();
  await assert.rejects(call, { name: 'HomaError', code: 'EABORTED', kind: 'aborted' });
  await assert.rejects(
    client.call(server.localAddr, Buffer.from('x'), { signal: AbortSignal.abort() }),
    { code: 'EABORTED' },
  );
  assert.equal(client.metrics().pending_calls, 0);
  client.close();
  server.close();
});

test('timeouts: the caller\'s, and Homa\'s own for a silent peer', async () => {
  const silent = dgram.createSocket('udp4');
  await new Promise((resolve) => silent.bind(freePort(), LOCAL, resolve));
  const dest = `${LOCAL}:${silent.address().port}`;
  const client = await homa.open({ host: LOCAL });
  await assert.rejects(client.call(dest, Buffer.from('hello?'), { timeoutMs: 50 }), {
    code: 'ETIMEDOUT',
    kind: 'timed_out',
  });
  await assert.rejects(client.call(dest, Buffer.from('hello?')), (e) => {
    assert.equal(e.code, 'ETIMEDOUT');
    assert.equal(e.kind, 'peer_silent');
    assert.match(e.message, /went silent/);
    return true;
  });
  client.close();
  silent.close();
});

test('MTU and link rate come from the interface unless given', async () => {
  const opened = [];
  for (const options of [{}, { mtu: 1500, link_mbps: 25000 }, { mtu: 9000 }]) {
    const sock = await homa.open({ host: LOCAL, ...options });
    opened.push([sock.mtu, sock.linkMbps]);
    sock.close();
  }
  // Loopback: 64 KB packets, unpaced; given values win, the module's defaults included.
  assert.deepEqual(opened, [[65535, 1000000], [1500, 25000], [9000, 1000000]]);
});

test('busy polling: calls complete; the option is checked', async () => {
  const { server, serving } = await echoServer({ busyPollMs: 0.2 });
  const client = await homa.open({ host: LOCAL, busyPollMs: 0.2, ...PATIENT });
  for (let i = 0; i < 200; i++) {
    assert.equal((await client.call(server.localAddr, Buffer.from(`spin ${i}`))).toString(), `spin ${i}`);
  }
  client.close();
  server.close();
  await serving;
  await assert.rejects(homa.open({ busyPollMs: -1 }), RangeError);
  await assert.rejects(homa.open({ busyPollMs: '1' }), TypeError);
});

test('a closed port is refused at once, and the socket goes on', async () => {
  const client = await homa.open({ host: LOCAL, ...PATIENT });
  for (let i = 0; i < 3; i++) {
    await assert.rejects(client.call(`${LOCAL}:${freePort()}`, Buffer.from('anyone?'), { timeoutMs: 5000 }), {
      code: 'ECONNREFUSED',
      kind: 'unreachable',
    });
  }
  // The refusals left error conditions on the socket; it still receives at once (the
  // event loop, not the driver thread's timer, takes the response: a minute-long tick
  // would leave it waiting).
  const { server, serving } = await echoServer();
  const slow = await homa.open({ host: LOCAL, tick_usecs: 60_000_000 });
  await assert.rejects(slow.call(`${LOCAL}:${freePort()}`, Buffer.from('x'), { timeoutMs: 5000 }), { kind: 'unreachable' });
  assert.equal((await slow.call(server.localAddr, Buffer.from('still here'), { timeoutMs: 5000 })).toString(), 'still here');
  slow.close();
  client.close();
  server.close();
  await serving;
});

test('reusePort: two servers share a port and serve; they cannot call', async () => {
  const port = freePort();
  const servers = [];
  for (const n of [0, 1]) {
    const server = await homa.open({ port, host: LOCAL, reusePort: true, ...PATIENT });
    servers.push({ server, serving: server.serve(() => Buffer.from([n])) });
  }
  await assert.rejects(homa.open({ port, host: LOCAL, ...PATIENT }), { kind: 'port_in_use' });
  // 32 clients, each its own UDP port: the kernel's hash gives each server some.
  const answered = new Set();
  for (let i = 0; i < 32; i++) {
    const client = await homa.open({ host: LOCAL, ...PATIENT });
    answered.add((await client.call(`${LOCAL}:${port}`, Buffer.from('who'), { timeoutMs: 5000 }))[0]);
    client.close();
  }
  assert.deepEqual([...answered].sort(), [0, 1]);
  await assert.rejects(servers[0].server.call(`${LOCAL}:${port}`, Buffer.from('x')), {
    code: 'EINVAL',
    kind: 'shared_port',
  });
  await assert.rejects(homa.open({ host: LOCAL, reusePort: 'yes' }), TypeError);
  for (const { server, serving } of servers) {
    server.close();
    await serving;
  }
});

test('close fails pending calls and ends requests()', async () => {
  const server = await homa.open({ port: freePort(), host: LOCAL, ...PATIENT });
  const client = await homa.open({ host: LOCAL, ...PATIENT });
  const held = server.recvRequest();
  const call = client.call(server.localAddr, Buffer.from('pending'));
  await held;
  client.close();
  await assert.rejects(call, { code: 'ESHUTDOWN' });
  assert.ok(client.closed);
  await assert.rejects(client.call(server.localAddr, Buffer.from('x')), { code: 'ESHUTDOWN' });
  const iterating = (async () => {
    const seen = [];
    for await (const req of server.requests()) seen.push(req);
    return seen;
  })();
  server.close();
  assert.deepEqual(await iterating, []);
  client.close(); // idempotent
});

test('sockets in a worker thread: left open, they go with the worker', async () => {
  const { Worker } = require('node:worker_threads');
  const port = freePort();
  const worker = new Worker(`
    const homa = require(${JSON.stringify(require.resolve('..'))});
    const { parentPort } = require('node:worker_threads');
    (async () => {
      const server = await homa.open({ port: ${port}, host: '127.0.0.1', timeout_ticks: 2000 });
      server.serve((req) => req.message);
      const client = await homa.open({ host: '127.0.0.1' });
      const reply = await client.call(server.localAddr, Buffer.from('from a worker'));
      parentPort.postMessage(reply.toString());
      // Neither socket is closed: the worker's exit must close them.
      process.exit(0);
    })();
  `, { eval: true });
  const [reply] = await Promise.all([
    new Promise((resolve) => worker.once('message', resolve)),
    new Promise((resolve) => worker.once('exit', resolve)),
  ]);
  assert.equal(reply, 'from a worker');
  // The port is free again.
  const again = await homa.open({ port, host: LOCAL });
  again.close();
});

test('a handler that throws is logged and the server keeps serving', async (t) => {
  const errors = [];
  t.mock.method(console, 'error', (...args) => errors.push(args.join(' ')));
  const server = await homa.open({ port: freePort(), host: LOCAL, ...PATIENT });
  const serving = server.serve(
    async (req) => {
      if (req.message.toString() === 'boom') throw new Error('model exploded');
      return Buffer.concat([Buffer.from('ok: '), req.message]);
    },
    { onError: (req, e) => (req.message.toString() === 'boom' ? undefined : Buffer.from(e.message)) },
  );
  const client = await homa.open({ host: LOCAL, ...PATIENT });
  // Homa has no error responses: the request is dropped, the call runs to its timeout.
  await assert.rejects(client.call(server.localAddr, Buffer.from('boom'), { timeoutMs: 300 }), {
    kind: 'timed_out',
  });
  assert.equal((await client.call(server.localAddr, Buffer.from('next'))).toString(), 'ok: next');
  assert.ok(errors.some((e) => e.includes('model exploded')), errors.join('\n'));
  client.close();
  server.close();
  await serving;
});

test('a synchronous handler: its reply goes at once, its errors are logged', async (t) => {
  const errors = [];
  t.mock.method(console, 'error', (...args) => errors.push(args.join(' ')));
  const server = await homa.open({ port: freePort(), host: LOCAL, ...PATIENT });
  const serving = server.serve((req) => {
    const text = req.message.toString();
    if (text === 'throw') throw new Error('sync failure');
    if (text === 'bad') return 42; // not bytes: a TypeError, logged
    return req.message;
  }, { onError: (req) => Buffer.from(`error for ${req.message}`) });
  const client = await homa.open({ host: LOCAL, ...PATIENT });
  const call = async (text) => (await client.call(server.localAddr, Buffer.from(text))).toString();
  assert.equal(await call('throw'), 'error for throw');
  assert.equal(await call('bad'), 'error for bad');
  assert.equal(await call('fine'), 'fine');
  assert.ok(errors.some((e) => e.includes('sync failure')), errors.join('\n'));
  assert.ok(errors.some((e) => e.includes('TypeError')), errors.join('\n'));
  client.close();
  server.close();
  await serving;
});

test('more calls than the send buffer holds wait for room; block: false fails fast', async () => {
  const server = await homa.open({ port: freePort(), host: LOCAL, ...PATIENT });
  const client = await homa.open({ host: LOCAL, wmem_max: 5_000_000, ...PATIENT });
  const big = Buffer.alloc(1_000_000, 7);
  const calls = [];
  for (let i = 0; i < 5; i++) calls.push(client.call(server.localAddr, big));
  const held = [];
  for (let i = 0; i < 5; i++) held.push(await server.recvRequest());
  await assert.rejects(client.call(server.localAddr, Buffer.from('one more'), { block: false }), {
    code: 'ENOBUFS',
    kind: 'tx_buffer_full',
  });
  const waiting = client.call(server.localAddr, Buffer.from('waits'));
  for (const req of held) await req.reply(Buffer.from('done'));
  (await server.recvRequest()).reply(Buffer.from('room'));
  assert.equal((await waiting).toString(), 'room');
  assert.deepEqual((await Promise.all(calls)).map(String), Array(5).fill('done'));
  client.close();
  server.close();
});

test('host names are resolved', async () => {
  const port = freePort();
  const { server, serving } = await echoServer({ port, host: 'localhost' });
  assert.equal(server.localAddr, `127.0.0.1:${port}`);
  const client = await homa.open({ host: 'localhost', ...PATIENT });
  assert.equal((await client.call(`localhost:${port}`, Buffer.from('by name'))).toString(), 'by name');
  await assert.rejects(client.call(`no-such-host.invalid:${port}`, Buffer.from('x')), /cannot resolve/);
  client.close();
  server.close();
  await serving;
});

test('bad arguments throw TypeError or RangeError saying what was expected', async () => {
  const client = await homa.open({ host: LOCAL });
  const dest = `${LOCAL}:4000`;
  await assert.rejects(client.call(dest, 'a string'), { name: 'TypeError', message: /Buffer, Uint8Array or ArrayBuffer/ });
  await assert.rejects(client.call(dest, Buffer.alloc(0)), { name: 'RangeError', message: /empty/ });
  await assert.rejects(client.call(1234, Buffer.from('x')), { name: 'TypeError', message: /"host:port"/ });
  await assert.rejects(client.call('nowhere', Buffer.from('x')), { name: 'TypeError' });
  await assert.rejects(client.call(`${LOCAL}:70000`, Buffer.from('x')), { name: 'RangeError' });
  await assert.rejects(client.call(dest, Buffer.from('x'), { timeoutMs: 'soon' }), { name: 'TypeError' });
  await assert.rejects(client.call(dest, Buffer.from('x'), { timeoutMs: -1 }), { name: 'RangeError' });
  await assert.rejects(client.call(dest, Buffer.from('x'), { timeoutMs: Infinity }), { name: 'RangeError' });
  await assert.rejects(client.call(dest, Buffer.from('x'), { signal: 'stop' }), { name: 'TypeError' });
  await assert.rejects(client.call(dest, Buffer.alloc(1_000_001)), { name: 'HomaError', code: 'EMSGSIZE', message: /max_message_length/ });
  for (const port of [0, -1, 32768, 70000]) {
    await assert.rejects(homa.open({ port, host: LOCAL }), { name: 'RangeError', message: /between 1 and 32767/ });
  }
  await assert.rejects(homa.open({ port: 1.5 }), { name: 'TypeError' });
  await assert.rejects(homa.open({ transport: 'tcp' }), { name: 'RangeError', message: /udp, ip, uring, uring-ip/ });
  await assert.rejects(homa.open({ mtu: 'big' }), { name: 'TypeError', message: /option mtu/ });
  await assert.rejects(homa.open({ mtu: 10 }), { name: 'HomaError', kind: 'config' });
  await assert.rejects(homa.open({ no_such_option: 1 }), { name: 'HomaError', message: /unknown option/ });
  await assert.rejects(client.serve('not a function'), { name: 'TypeError' });
  client.close();
});

test('the wire codec decodes and encodes packets', () => {
  const packet = Buffer.from('13889c400000000000000017500600008c4ab97d00000000000003e9', 'hex');
  const fields = homa.wire.decode(packet);
  assert.equal(fields.type, 'NEED_ACK');
  assert.ok(homa.wire.encode(fields).equals(packet));
  assert.throws(() => homa.wire.decode(Buffer.from('00', 'hex')), { name: 'HomaError', code: 'EPROTO', kind: 'truncated' });
  assert.ok(homa.configFields.some((f) => f.name === 'max_message_length'));
});
