'use strict';
// node bench.js [--rounds 5] [--calls 2000] [--inflight 64] [--sporadic 200] [--one-process] [--json]
//
// Homa against Node's `net` (TCP, the same echo, length-framed), interleaved in one run so
// all see the same machine: 100-byte RPC latency (one in flight, p50/p99), calls/s with
// `--inflight` in flight (TCP: that many connections), and 1,000,000-byte RPC throughput
// (4 in flight), each with the CPU time both processes spent per RPC (user + system, all
// threads), and the CPU per RPC of `--sporadic` calls 5 ms apart (where busy polling cannot
// pay). Homa runs twice: with default settings (busy-polling 50 µs, adaptive), and
// without busy polling (`busyPollMs: 0`, client and server). The echo servers run in a
// child process, as a client and its server would; `--one-process` puts them in this one.

const net = require('node:net');
const { fork } = require('node:child_process');
const homa = require('.');

function option(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
}
const ROUNDS = option('rounds', 5);
const CALLS = option('calls', 2000);
const INFLIGHT = option('inflight', 64);
const SPORADIC = option('sporadic', 200);
// The child serves on its parent's ports (--serve-for BASE).
const BASE = option('serve-for', 24000 + (process.pid % 4000));

/** The echo servers: Homa on BASE (defaults) and BASE + 1 (no busy polling), TCP on BASE + 2. */
async function serve() {
  const plain = await homa.open({ port: BASE, host: '127.0.0.1' });
  const spinning = await homa.open({ port: BASE + 1, host: '127.0.0.1', busyPollMs: 0 });
  const serving = [plain, spinning].map((s) => s.serve((req) => req.message));
  const tcp = net.createServer((sock) => {
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
  await new Promise((r) => tcp.listen(BASE + 2, '127.0.0.1', r));
  return async () => {
    plain.close();
    spinning.close();
    await Promise.all(serving);
    tcp.close();
  };
}

/** `connections` TCP connections to the echo server, each a function sending one RPC. */
async function tcpClients(connections) {
  const conns = [];
  const socks = [];
  for (let i = 0; i < connections; i++) {
    const sock = net.connect(BASE + 2, '127.0.0.1');
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
  return { conns, close: () => socks.forEach((s) => s.destroy()) };
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

/** `n` calls `gapMs` apart (sporadic: nothing for busy polling to catch). */
async function sporadic(call, data, n, gapMs) {
  for (let i = 0; i < n; i++) {
    await call(data);
    await new Promise((r) => setTimeout(r, gapMs));
  }
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

/** CPU time (user + system, all threads) a process has used, in microseconds. */
function cpu() {
  const u = process.cpuUsage();
  return u.user + u.system;
}

/** Runs `phase` and returns [its result, the CPU both processes spent in it, µs]. */
async function measured(cpuBoth, phase) {
  const before = await cpuBoth();
  const result = await phase();
  return [result, (await cpuBoth()) - before];
}

async function main() {
  let stop;
  let cpuBoth = async () => cpu();
  if (process.argv.includes('--one-process')) {
    stop = await serve();
  } else {
    const child = fork(__filename, ['--serve-for', String(BASE)]);
    await new Promise((r) => child.once('message', r));
    cpuBoth = async () => {
      const theirs = new Promise((r) => child.once('message', r));
      child.send('cpu');
      return cpu() + (await theirs);
    };
    stop = async () => {
      child.send('stop');
      await new Promise((r) => child.once('exit', r));
    };
  }
  const plain = await homa.open({ host: '127.0.0.1' });
  const spinning = await homa.open({ host: '127.0.0.1', busyPollMs: 0 });
  const homaCall = (sock, port) => (d) => sock.call(`127.0.0.1:${port}`, d);
  const tcp = await tcpClients(INFLIGHT);
  const small = Buffer.alloc(100, 1);
  const big = Buffer.alloc(1_000_000, 2);
  const contenders = [
    ['homa', homaCall(plain, BASE)],
    ['homa no poll', homaCall(spinning, BASE + 1)],
    ['tcp', tcp.conns[0], tcp.conns],
  ];
  const r = Object.fromEntries(contenders.map(([name]) => [name, {
    lat: [], rate: [], gbps: [], cpuLat: [], cpuRate: [], cpuSporadic: [],
  }]));
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, one, many = Array(INFLIGHT).fill(one)] of contenders) {
      const [lat, cpuLat] = await measured(cpuBoth, () => latency(one, small, CALLS));
      r[name].lat.push(...lat);
      r[name].cpuLat.push(cpuLat / CALLS);
      const [calls, cpuRate] = await measured(cpuBoth, () => rate(many, small, CALLS * 4));
      r[name].rate.push(calls);
      r[name].cpuRate.push(cpuRate / (CALLS * 4));
      // Each RPC moves 1 MB each way.
      r[name].gbps.push(((await rate(many.slice(0, 4), big, 40)) * big.length * 8 * 2) / 1e9);
    }
  }
  // Last: sporadic calls teach busy polling to back off, for the phases after them too.
  for (const [name, one] of contenders) {
    const [, cpuSporadic] = await measured(cpuBoth, () => sporadic(one, small, SPORADIC, 5));
    r[name].cpuSporadic.push(cpuSporadic / SPORADIC);
  }
  plain.close();
  spinning.close();
  tcp.close();
  await stop();
  const rows = Object.fromEntries(Object.entries(r).map(([name, x]) => [name, {
    p50_us: pct(x.lat, 0.5),
    p99_us: pct(x.lat, 0.99),
    cpu_us_per_rpc_one: pct(x.cpuLat, 0.5),
    calls_per_s: pct(x.rate, 0.5),
    cpu_us_per_rpc_many: pct(x.cpuRate, 0.5),
    gbps: pct(x.gbps, 0.5),
    cpu_us_per_rpc_sporadic: pct(x.cpuSporadic, 0.5),
  }]));
  const where = process.argv.includes('--one-process') ? 'client and servers in one process' : 'servers in a child process';
  console.log(`100-byte RPCs (${CALLS} x ${ROUNDS} rounds, one in flight; calls/s with ${INFLIGHT} in flight) and 1 MB RPCs (4 in flight), loopback, ${where}; CPU: both processes, µs per RPC`);
  console.log(`CPU sporadic: ${SPORADIC} calls 5 ms apart, one at a time`);
  console.log('                  p50 us    p99 us  CPU one   calls/s CPU many  1MB Gbit/s CPU sporadic');
  const f = (v, d = 1) => v.toFixed(d).padStart(9);
  for (const [name, x] of Object.entries(rows)) {
    console.log(`${name.padEnd(16)}${f(x.p50_us)} ${f(x.p99_us)} ${f(x.cpu_us_per_rpc_one)} ${f(x.calls_per_s, 0)} ${f(x.cpu_us_per_rpc_many)} ${f(x.gbps, 2)} ${f(x.cpu_us_per_rpc_sporadic)}`);
  }
  const t = rows.tcp;
  const ratio = (a, b) => `${(a / b).toFixed(2)}x`;
  for (const name of ['homa', 'homa no poll']) {
    const h = rows[name];
    console.log(`${name}/tcp: p50 ${ratio(h.p50_us, t.p50_us)}, p99 ${ratio(h.p99_us, t.p99_us)}, `
      + `CPU/RPC one in flight ${ratio(h.cpu_us_per_rpc_one, t.cpu_us_per_rpc_one)}, `
      + `calls/s ${ratio(h.calls_per_s, t.calls_per_s)}, CPU/RPC ${INFLIGHT} in flight ${ratio(h.cpu_us_per_rpc_many, t.cpu_us_per_rpc_many)}, `
      + `1 MB throughput ${ratio(h.gbps, t.gbps)}, CPU/RPC sporadic ${ratio(h.cpu_us_per_rpc_sporadic, t.cpu_us_per_rpc_sporadic)}`);
  }
  if (process.argv.includes('--json')) console.log(JSON.stringify(rows));
}

if (process.argv.includes('--serve-for')) {
  serve().then((stop) => {
    process.send('ready');
    process.on('message', async (m) => {
      if (m === 'cpu') {
        process.send(cpu());
        return;
      }
      await stop();
      process.exit(0);
    });
  });
} else {
  main();
}
