'use strict';
// Node against the other implementations of this repository, as separate processes: a Node
// client against `homa server` (Rust) and a Python server, and `homa client` and a Python
// client against a Node server. HOMA_BIN and HOMA_PYTHON name the `homa` binary and a
// Python with the homa package (scripts/test sets both); without them the tests say so
// and skip.

const test = require('node:test');
const assert = require('node:assert/strict');
const { spawn, execFile } = require('node:child_process');
const readline = require('node:readline');
const homa = require('..');

const LOCAL = '127.0.0.1';
const { HOMA_BIN, HOMA_PYTHON } = process.env;
const SIZES = [1, 1424, 100_000, 1_000_000];

/** Starts `cmd args`, resolves with the child and its first stdout line. */
function startServer(cmd, args) {
  const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = readline.createInterface({ input: child.stdout });
  return new Promise((resolve, reject) => {
    lines.once('line', (line) => resolve({ child, line }));
    child.once('exit', (code) => reject(new Error(`${cmd} exited (${code}) before it was ready`)));
  });
}

function stop(child) {
  return new Promise((resolve) => {
    child.once('exit', (code, signal) => resolve({ code, signal }));
    child.kill('SIGTERM');
  });
}

function pattern(size) {
  const b = Buffer.alloc(size);
  for (let i = 0; i < size; i++) b[i] = (i * 7 + 3) & 0xff;
  return b;
}

const PY_ECHO = `
import asyncio, signal, sys, homa
async def main():
    async with homa.open(port=int(sys.argv[1]), host="127.0.0.1", timeout_ticks=2000) as s:
        print("listening", flush=True)
        stop = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set_result, None)
        serving = asyncio.ensure_future(s.serve(lambda req: req.message))
        await stop
        serving.cancel()
asyncio.run(main())
`;

const PY_CLIENT = `
import asyncio, sys, homa
async def main():
    async with homa.open(host="127.0.0.1", timeout_ticks=2000) as s:
        for size in [1, 1424, 100_000, 1_000_000]:
            data = bytes((i * 7 + 3) & 0xFF for i in range(size))
            assert await s.call(sys.argv[1], data, timeout=10) == data, size
    print("ok")
asyncio.run(main())
`;

test('a Node client against homa server (Rust)', { skip: !HOMA_BIN && 'HOMA_BIN is not set' }, async () => {
  const { child, line } = await startServer(HOMA_BIN, ['server', '--port', '0', '--addr', LOCAL]);
  const addr = line.split(' ')[2]; // "listening on ADDR transport udp"
  const client = await homa.open({ host: LOCAL, timeout_ticks: 2000 });
  for (const size of SIZES) {
    const message = pattern(size);
    assert.ok((await client.call(addr, message, { timeoutMs: 10_000 })).equals(message), `${size} B`);
  }
  client.close();
  await stop(child);
});

test('a Node client against a Python server', { skip: !HOMA_PYTHON && 'HOMA_PYTHON is not set' }, async () => {
  const port = 21000 + (process.pid % 5000);
  const { child } = await startServer(HOMA_PYTHON, ['-c', PY_ECHO, String(port)]);
  const client = await homa.open({ host: LOCAL, timeout_ticks: 2000 });
  for (const size of SIZES) {
    const message = pattern(size);
    assert.ok((await client.call(`${LOCAL}:${port}`, message, { timeoutMs: 10_000 })).equals(message));
  }
  client.close();
  await stop(child);
});

async function nodeEchoServer() {
  const server = await homa.open({ port: 22000 + (process.pid % 5000), host: LOCAL, timeout_ticks: 2000 });
  return { server, serving: server.serve((req) => req.message) };
}

function run(cmd, args) {
  return new Promise((resolve) => {
    execFile(cmd, args, { maxBuffer: 1 << 24 }, (err, stdout, stderr) =>
      resolve({ code: err ? err.code : 0, stdout, stderr }));
  });
}

test('homa client (Rust) against a Node server', { skip: !HOMA_BIN && 'HOMA_BIN is not set' }, async () => {
  const { server, serving } = await nodeEchoServer();
  const out = await run(HOMA_BIN, ['client', '--server', server.localAddr, '--workload', 'w4',
    '--requests', '200', '--concurrency', '50', '--verify', '--json', '-', '--quiet']);
  assert.equal(out.code, 0, out.stderr);
  const report = JSON.parse(out.stdout);
  assert.equal(report.requests.completed, 200, out.stdout);
  assert.equal(report.requests.failed, 0);
  server.close();
  await serving;
});

test('a Python client against a Node server', { skip: !HOMA_PYTHON && 'HOMA_PYTHON is not set' }, async () => {
  const { server, serving } = await nodeEchoServer();
  const out = await run(HOMA_PYTHON, ['-c', PY_CLIENT, server.localAddr]);
  assert.equal(out.code, 0, out.stderr);
  assert.equal(out.stdout.trim(), 'ok');
  server.close();
  await serving;
});
