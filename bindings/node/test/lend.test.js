'use strict';
// Received messages of 16 KiB and more are Buffers over the very memory Homa received them
// into, lent by the socket: while a Buffer lives its bytes count against max_rx_bytes
// (metrics().lent_bytes), so a response that does not fit beside the held ones waits, past
// Homa's timeout, until the garbage collector frees one; held Buffers stay readable after
// the socket closes. Run in a child process with --expose-gc, to free Buffers at will.

const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const path = require('node:path');

const script = `
const homa = require(process.argv[1]);
const port = Number(process.argv[2]);
const collect = async () => { global.gc(); await new Promise(setImmediate); global.gc(); await new Promise(setImmediate); };
(async () => {
  const server = await homa.open({ port, host: '127.0.0.1' });
  const serving = server.serve((req) => req.message);
  const client = await homa.open({ host: '127.0.0.1', max_rx_bytes: 2500000 });
  const dest = '127.0.0.1:' + port;
  const held = [await client.call(dest, Buffer.alloc(1e6, 0)), await client.call(dest, Buffer.alloc(1e6, 1))];
  const out = { held: client.metrics().lent_bytes };
  let done = false;
  const third = client.call(dest, Buffer.alloc(1e6, 2)).then((r) => { done = true; return r; });
  await new Promise((r) => setTimeout(r, 300)); // three times Homa's timeout
  out.waited = !done;
  out.rxMemory = client.metrics().core.drops.rx_memory;
  held.pop();
  await collect();
  const r = await third;
  out.third = r.length === 1e6 && r[999999] === 2;
  out.both = client.metrics().lent_bytes;
  client.close();
  server.close();
  await serving;
  out.readable = held[0].length === 1e6 && held[0][999999] === 0;
  console.log(JSON.stringify(out));
})();
`;

test('held messages are lent: they bound what new ones may take', () => {
  const port = String(28000 + (process.pid % 2000));
  const out = execFileSync(process.execPath, ['--expose-gc', '-e', script, path.join(__dirname, '..'), port], {
    encoding: 'utf8',
    timeout: 60_000,
  });
  const r = JSON.parse(out);
  assert.equal(r.held, 2_000_000);
  assert.ok(r.waited, 'the third call finished beside 2 MB held');
  assert.ok(r.rxMemory > 0);
  assert.ok(r.third, 'the third response, once a Buffer was freed');
  assert.equal(r.both, 2_000_000, 'the first and the third are held');
  assert.ok(r.readable, 'a held Buffer is readable after close');
});
