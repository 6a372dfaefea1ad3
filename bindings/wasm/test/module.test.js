'use strict';
// The module itself: what it imports, its size, and that bad input from JavaScript or a
// peer throws a clear Error (never a trap or a panic).

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const zlib = require('node:zlib');
const homa = require('..');

const wasmFile = path.join(__dirname, '..', 'pkg', 'node', 'homa_wasm_bg.wasm');

test('the modules import only their wasm-bindgen glue, and the core stays small', () => {
  for (const dir of ['node', 'web', 'sim-node', 'sim-web']) {
    const file = path.join(__dirname, '..', 'pkg', dir, 'homa_wasm_bg.wasm');
    const imports = WebAssembly.Module.imports(new WebAssembly.Module(fs.readFileSync(file)));
    const modules = [...new Set(imports.map((i) => i.module))];
    assert.deepEqual(modules, ['./homa_wasm_bg.js'], dir);
  }
  const bytes = fs.readFileSync(wasmFile);
  const gzipped = zlib.gzipSync(bytes, { level: 9 }).length;
  console.log(`homa_wasm_bg.wasm: ${bytes.length} bytes, ${gzipped} gzipped`);
  assert.ok(gzipped <= 150 * 1024, `${gzipped} bytes gzipped: over the 150 KiB target`);
});

test('bad arguments throw TypeError or RangeError saying what was expected', () => {
  const ep = new homa.Endpoint();
  const port = ep.bindEphemeral();
  assert.throws(() => ep.bind('1'), { name: 'TypeError', message: /port must be a Number/ });
  assert.throws(() => ep.bind(70000), { name: 'RangeError', message: /between 0 and 65535/ });
  assert.throws(() => ep.bind(1.5), { name: 'RangeError', message: /whole number/ });
  assert.throws(() => ep.handleTimeout(-1), RangeError);
  assert.throws(() => ep.sendRequest(0, port, 'nowhere', 99, new Uint8Array(1)), { name: 'TypeError', message: /ip:port/ });
  // Addresses that are not strings (dgram's rinfo, a number, nothing) are TypeErrors too.
  for (const bad of [12345, { address: '10.0.0.1', port: 1 }, undefined, null]) {
    assert.throws(() => ep.handlePacket(0, bad, new Uint8Array(40)), { name: 'TypeError', message: /source/ });
    assert.throws(() => ep.sendRequest(0, port, bad, 99, new Uint8Array(1)), { name: 'TypeError', message: /dest/ });
    assert.throws(() => ep.handleUnreachable(bad), { name: 'TypeError', message: /peer/ });
  }
  assert.throws(() => ep.handleTimeout(2 ** 60), { name: 'RangeError', message: /BigInt/ });
  assert.throws(() => ep.sendRequest(0, port, '10.0.0.1:1', 99, 'text'), { name: 'TypeError', message: /Uint8Array/ });
  assert.throws(() => ep.sendRequest(0, port, '10.0.0.1:1', 99, new Uint8Array(1), 'cookie'), TypeError);
  assert.throws(() => ep.sendResponse(0, 'rpc', new Uint8Array(1)), { name: 'TypeError', message: /rpc/ });
  assert.throws(() => ep.abort(-1n), RangeError);
  assert.throws(() => new homa.Endpoint({ mtu: 10 }), (e) => e.kind === 'config');
  assert.throws(() => new homa.Endpoint({ no_such_field: 1 }), /unknown option/);
  assert.throws(() => homa.wire.encode('fields'), TypeError);
  assert.throws(() => homa.simulate({ workload: 'w9' }), { name: 'RangeError', message: /w1/ });
  assert.throws(() => homa.simulate({ load: 2 }), RangeError);
  assert.throws(() => homa.simulate({ hosts: 'many' }), TypeError);
});

test('times never go back', () => {
  const ep = new homa.Endpoint();
  ep.handleTimeout(5_000_000);
  assert.throws(() => ep.handleTimeout(4_000_000), { name: 'RangeError', message: /time went backwards/ });
  ep.handleTimeout(5_000_000); // the same time again is fine
});

test('oversize messages and garbage packets are errors that lose nothing', () => {
  const ep = new homa.Endpoint();
  const port = ep.bindEphemeral();
  assert.throws(() => ep.sendRequest(0, port, '10.0.0.1:1', 99, new Uint8Array(1_000_001)), (e) => e.kind === 'message_length');
  assert.throws(() => ep.handlePacket(0, '10.0.0.1:1', new Uint8Array([1, 2, 3])), (e) => e.kind === 'truncated');
  assert.throws(() => ep.handlePacket(0, '10.0.0.1:1', new Uint8Array(70_000)), (e) => e.kind === 'too_long');
  // Random bytes of every length: an error with a kind, or accepted; never a trap.
  let seed = 12345;
  const rand = () => (seed = (seed * 1103515245 + 12345) >>> 0) >>> 24;
  for (let i = 0; i < 2000; i++) {
    const data = Uint8Array.from({ length: i % 200 }, rand);
    try {
      ep.handlePacket(i, '10.0.0.1:1', data);
    } catch (e) {
      assert.equal(typeof e.kind, 'string', String(e));
    }
  }
  // The endpoint still works.
  const id = ep.sendRequest(3000, port, '10.0.0.1:1', 99, new Uint8Array([7]), 1n);
  assert.equal(typeof id, 'bigint');
  assert.notEqual(ep.pollTransmit(3000), null);
});

test('two endpoints in one process complete an RPC (the README example)', () => {
  const readme = fs.readFileSync(path.join(__dirname, '..', 'README.md'), 'utf8');
  const code = readme.split('```js\n')[1].split('```')[0];
  const lines = [];
  const log = (...a) => lines.push(a.join(' '));
  new Function('require', 'console', code)((m) => (m === 'homa-wasm' ? homa : require(m)), { log });
  assert.deepEqual(lines, ['hello back']);
});

test('the simulator runs in wasm: slowdown per size bin, and the oracle beside it', () => {
  const seen = [];
  const report = homa.simulate({ workload: 'w1', load: 0.5, hosts: 16, messages: 2000, oracle: true }, (p) => seen.push(p));
  assert.ok(seen.length > 0 && seen.at(-1).done <= seen.at(-1).total);
  const bins = report.bins.filter((b) => b.messages > 0);
  assert.ok(bins.length > 0);
  for (const b of bins) {
    assert.ok(b.median >= 1 && b.p99 >= b.median, JSON.stringify(b));
    assert.ok(b.oracle_p99 >= 1, JSON.stringify(b));
  }
  assert.equal(report.measured.completed, 2000);
  // A workload given as data: half 100-byte, half 10,000-byte messages.
  const custom = homa.simulate({ workload: { name: 'two', cdf: '100 0.5\n10000 1\n' }, load: 0.5, hosts: 4, messages: 300 });
  assert.equal(custom.workload, 'two');
  assert.equal(custom.measured.completed, 300);
  assert.throws(() => homa.simulate({ workload: { cdf: '100 0.5\n' } }), (e) => e.kind === 'workload');
});

test('the simulator takes a warm-up share and a number of size bins', () => {
  const report = homa.simulate({ workload: 'w3', load: 0.8, hosts: 16, messages: 2000, warmup: 0.8, bins: 15 });
  assert.equal(report.warmup, 0.8);
  assert.ok(report.bins.length >= 5 && report.bins.length <= 16, `${report.bins.length} bins`);
  assert.equal(report.bins.reduce((n, b) => n + b.messages, 0), report.measured.completed);
  assert.throws(() => homa.simulate({ warmup: 1 }), RangeError);
  assert.throws(() => homa.simulate({ bins: 0 }), RangeError);
  assert.throws(() => homa.simulate({ bins: 'many' }), TypeError);
});
