'use strict';
// node bench.js [--rounds 5] [--calls 2000] [--inflight 64]
//
// Homa against Node's `net` (TCP, the same echo, length-framed), interleaved in one run so
// both see the same machine: 100-byte RPC latency (one in flight, p50/p99), calls/s with
// `--inflight` in flight, and 1,000,000-byte RPC throughput (4 in flight). Servers and
// client share this process, as a gateway's would.

const net = require('node:net');
const homa = require('.');

function option(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
}
const ROUNDS = option('rounds', 5);
const CALLS = option('calls', 2000);
const INFLIGHT = option('inflight', 64);

/** A length-framed TCP echo server and a client that sends framed requests on connections. */
async function tcpPair(connections) {
  const server = net.createServer((sock) => {
    sock.setNoDelay(true);
    let buf = Buffer.alloc(0);
    sock.on('data', (chunk) => {
      buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
      while (buf.length >= 4 && buf.length >= 4 + buf.readUInt32LE(0)) {
        const n = buf.readUInt32LE(0);
        sock.write(buf.subarray(0, 4 + n));
        buf = buf.subarray(4 + n);
      }
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const conns = [];
  const socks = [];
  for (let i = 0; i < connections; i++) {
    const sock = net.connect(server.address().port, '127.0.0.1');
    socks.push(sock);
    await new Promise((r) => sock.once('connect', r));
    sock.setNoDelay(true);
    const waiting = [];
    let buf = Buffer.alloc(0);
    sock.on('data', (chunk) => {
      buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
      while (buf.length >= 4 && buf.length >= 4 + buf.readUInt32LE(0)) {
        const n = buf.readUInt32LE(0);
        waiting.shift()(buf.subarray(4, 4 + n));
        buf = buf.subarray(4 + n);
      }
    });
    const header = Buffer.alloc(4);
    conns.push((data) => new Promise((resolve) => {
      waiting.push(resolve);
      header.writeUInt32LE(data.length, 0);
      sock.write(Buffer.concat([header, data]));
    }));
  }
  const close = () => {
    for (const sock of socks) sock.destroy();
    server.close();
  };
  return { conns, close };
}

async function latency(call, data, n) {
  const t = [];
  for (let i = 0; i < n; i++) {
    const start = process.hrtime.bigint();
    await call(data);
    t.push(Number(process.hrtime.bigint() - start) / 1000);
  }
  return t;
}

async function rate(calls, data, total) {
  let started = 0;
  const start = process.hrtime.bigint();
  await Promise.all(calls.map(async (call) => {
    while (started < total) {
      started++;
      await call(data);
    }
  }));
  return total / (Number(process.hrtime.bigint() - start) / 1e9);
}

const pct = (xs, q) => xs.slice().sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))];
const median = (xs) => pct(xs, 0.5);

async function main() {
  const server = await homa.open({ port: 24000 + (process.pid % 5000), host: '127.0.0.1' });
  const serving = server.serve((req) => req.message);
  const client = await homa.open({ host: '127.0.0.1' });
  const homaCall = (d) => client.call(server.localAddr, d);
  const tcp = await tcpPair(INFLIGHT);
  const small = Buffer.alloc(100, 1);
  const big = Buffer.alloc(1_000_000, 2);
  const r = { homa: { lat: [], rate: [], mbps: [] }, tcp: { lat: [], rate: [], mbps: [] } };
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, one, many] of [
      ['homa', homaCall, Array(INFLIGHT).fill(homaCall)],
      ['tcp', tcp.conns[0], tcp.conns],
    ]) {
      r[name].lat.push(...(await latency(one, small, CALLS)));
      r[name].rate.push(await rate(many, small, CALLS * 4));
      // Each RPC moves 1 MB each way.
      r[name].mbps.push(((await rate(many.slice(0, 4), big, 40)) * big.length * 8 * 2) / 1e9);
    }
  }
  client.close();
  server.close();
  await serving;
  tcp.close();
  const row = (name) => {
    const x = r[name];
    return { p50_us: median(x.lat), p99_us: pct(x.lat, 0.99), calls_per_s: median(x.rate), gbps: median(x.mbps) };
  };
  const h = row('homa');
  const t = row('tcp');
  const f = (v, d = 1) => v.toFixed(d).padStart(9);
  console.log(`100-byte RPCs (${CALLS} x ${ROUNDS} rounds, one in flight; calls/s with ${INFLIGHT} in flight) and 1 MB RPCs (4 in flight), loopback`);
  console.log('            p50 us    p99 us   calls/s  1MB Gbit/s');
  for (const [name, x] of [['homa', h], ['tcp', t]]) {
    console.log(`${name.padEnd(8)}${f(x.p50_us)} ${f(x.p99_us)} ${f(x.calls_per_s, 0)} ${f(x.gbps, 2)}`);
  }
  console.log(`homa/tcp: p50 ${(h.p50_us / t.p50_us).toFixed(2)}x, calls/s ${(h.calls_per_s / t.calls_per_s).toFixed(2)}x, 1 MB throughput ${(h.gbps / t.gbps).toFixed(2)}x`);
  if (process.argv.includes('--json')) console.log(JSON.stringify({ homa: h, tcp: t }));
}

main();
