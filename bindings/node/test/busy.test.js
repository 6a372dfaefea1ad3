'use strict';
// A busy server loses no call: a handler that keeps the JavaScript thread busy (a long
// synchronous function) for longer than Homa's 100 ms timeout. The client runs in its own
// process with Homa's defaults, so a server whose Homa stops answering while JavaScript is
// busy fails these tests. Every call must succeed, and neither host may drop a datagram for
// want of buffer space.

const test = require('node:test');
const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const path = require('node:path');
const homa = require('..');

const LOCAL = '127.0.0.1';
let nextPort = 26000 + (process.pid % 5000);

// The client: `n` concurrent calls of `size` bytes; prints what failed and its host's drops.
const CLIENT = `
const homa = require(${JSON.stringify(path.resolve(__dirname, '..'))});
const [port, size, n] = process.argv.slice(1).map(Number);
(async () => {
  const client = await homa.open({ host: '127.0.0.1' });
  const message = Buffer.alloc(size, 7);
  const calls = [];
  for (let i = 0; i < n; i++) calls.push(client.call('127.0.0.1:' + port, message, { timeoutMs: 60_000 }));
  const results = await Promise.allSettled(calls);
  const bad = results.filter((r) => r.status === 'rejected' || !r.value.equals(message))
    .map((r) => (r.status === 'rejected' ? String(r.reason) : 'echo differs'));
  const drops = client.metrics().transport.rx_overflow;
  client.close();
  process.stdout.write(JSON.stringify({ bad, drops }));
})();
`;

function runClient(port, size, n) {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, ['-e', CLIENT, String(port), String(size), String(n)],
      { timeout: 120_000 }, (err, stdout) => (err ? reject(err) : resolve(JSON.parse(stdout))));
  });
}

/** Keeps this thread busy for `ms`, as synchronous work does: no callback runs meanwhile. */
function block(ms) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

async function serveWhileBusy(blockMs, size, n) {
  nextPort += 1;
  const server = await homa.open({ port: nextPort, host: LOCAL });
  let first = true;
  const serving = server.serve((req) => {
    if (first) {
      first = false;
      block(blockMs);
    }
    return req.message;
  });
  const result = await runClient(nextPort, size, n);
  const metrics = server.metrics();
  server.close();
  await serving;
  assert.deepEqual(result.bad, [], `${blockMs} ms, ${n} x ${size} B`);
  assert.equal(result.drops, 0, "the client's host dropped datagrams");
  assert.equal(metrics.transport.rx_overflow, 0, "the server's host dropped datagrams");
  assert.ok(metrics.loop_stalls > 0, 'the driver thread never received for the busy loop');
}

for (const size of [100, 1_000_000]) {
  for (const n of [1, 8]) {
    test(`a handler that blocks JavaScript loses no call: ${n} x ${size} B`, async () => {
      for (const ms of [150, 500, 2000]) await serveWhileBusy(ms, size, n);
    });
  }
}

test('a handler that blocks JavaScript for 10 s loses no call', async () => {
  await serveWhileBusy(10_000, 100, 8);
});
