'use strict';
// The embedding example (examples/dgram.js) as two processes: Homa's core in wasm, the
// I/O and timers in JavaScript over dgram, every 10th packet dropped by the glue. Every
// RPC of 1 B to 1,000,000 B must come back intact.

const test = require('node:test');
const assert = require('node:assert/strict');
const { spawn, execFileSync } = require('node:child_process');
const path = require('node:path');

const example = path.join(__dirname, '..', 'examples', 'dgram.js');

test('two processes over dgram, 10 % of packets dropped: every RPC completes intact', async () => {
  const server = spawn(process.execPath, [example, 'server'], { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    const port = await new Promise((resolve, reject) => {
      server.stdout.once('data', (d) => resolve(Number(String(d).trim())));
      server.once('exit', (code) => reject(new Error(`the server exited (${code})`)));
    });
    const out = execFileSync(process.execPath, [example, 'client', String(port)], { encoding: 'utf8', timeout: 120_000 });
    const { results, sent, dropped, retransmitted } = JSON.parse(out);
    assert.deepEqual(results.map((r) => r.size).sort((a, b) => a - b), [1, 100, 1400, 1500, 10000, 100000, 1000000]);
    for (const r of results) assert.equal(r.intact, true, `${r.size} B: ${JSON.stringify(r)}`);
    assert.ok(dropped > 0 && dropped === Math.floor(sent / 10), `dropped ${dropped} of ${sent}`);
    assert.ok(retransmitted > 0, 'the client resent nothing');
  } finally {
    server.kill();
  }
});
