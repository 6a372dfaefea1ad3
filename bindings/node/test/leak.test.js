'use strict';
// 100,000 calls against a server in the same process keep memory steady: nothing a call
// touches (its promise, its parked future, the request objects, the Buffers sent in place)
// outlives it. Run in a child process with --expose-gc, so each measurement follows a full
// collection.

const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const path = require('node:path');

const script = `
const homa = require(process.argv[1]);
const port = Number(process.argv[2]);
const rss = () => { global.gc(); global.gc(); return process.memoryUsage().rss; };
(async () => {
  const server = await homa.open({ port, host: '127.0.0.1' });
  const serving = server.serve((req) => req.message);
  const client = await homa.open({ host: '127.0.0.1' });
  const dest = '127.0.0.1:' + port;
  const run = async (calls) => {
    let left = calls;
    await Promise.all(Array.from({ length: 50 }, async () => {
      while (left-- > 0) {
        const size = 100 + (left % 1000);
        const reply = await client.call(dest, Buffer.alloc(size, 7));
        if (reply.length !== size) throw new Error('wrong reply');
      }
    }));
  };
  await run(20000);
  const samples = [rss()];
  for (let i = 0; i < 8; i++) {
    await run(10000);
    samples.push(rss());
  }
  const m = client.metrics();
  client.close();
  server.close();
  await serving;
  console.log(JSON.stringify({ samples, pending: m.pending_calls }));
})();
`;

test('no leak over 100,000 calls: RSS steady', () => {
  const port = String(21000 + (process.pid % 5000));
  const out = execFileSync(process.execPath, ['--expose-gc', '-e', script, path.join(__dirname, '..'), port], {
    encoding: 'utf8',
    timeout: 300_000,
  });
  const { samples, pending } = JSON.parse(out);
  assert.equal(pending, 0);
  // A leak grows RSS in every stretch of 10,000 calls (100 bytes a call: 1 MB each); the
  // allocators grow it in steps, several in a row while they settle. So the lower quartile
  // of the stretches must not grow, and all of them together only boundedly.
  const mb = samples.map((s) => s / 1e6);
  const steps = mb.slice(1).map((x, i) => x - mb[i]).sort((a, b) => a - b);
  const shown = mb.map((x) => x.toFixed(1)).join(', ');
  assert.ok(steps[steps.length >> 2] < 0.5, `RSS grows steadily: ${shown} MB every 10,000 calls`);
  assert.ok(mb[mb.length - 1] - mb[0] < 32, `RSS grew too much: ${shown} MB every 10,000 calls`);
});
