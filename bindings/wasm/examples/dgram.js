'use strict';
// Homa over a transport its core knows nothing about: the wasm Endpoint does the protocol,
// this file does the I/O (Node's dgram sockets) and the timers. Every 10th packet is
// dropped here on purpose, and Homa recovers.
//
//   node examples/dgram.js server            prints the UDP port it listens on
//   node examples/dgram.js client PORT       echo RPCs of 1 B to 1,000,000 B to that port
const dgram = require('node:dgram');
const { Endpoint } = require('..');

const HOMA_PORT = 99;
const DROP_EVERY = 10;
const start = process.hrtime.bigint();
const now = () => Number(process.hrtime.bigint() - start);

/** Runs `ep` over a UDP socket: feeds it datagrams and time, sends what it says. */
function attach(ep, onEvent) {
  const sock = dgram.createSocket('udp4');
  let timer = null;
  let stopped = false;
  let sent = 0;
  let dropped = 0;
  // The driving rule: after any input, drain packets and events until both run dry (an
  // event's handler may send), then sleep until the endpoint's next deadline.
  const drive = () => {
    for (let busy = true; busy && !stopped;) {
      busy = false;
      for (let p; (p = ep.pollTransmit(now())) !== null;) {
        busy = true;
        if (++sent % DROP_EVERY === 0) {
          dropped++;
          continue;
        }
        const [host, port] = p.to.split(':');
        sock.send(p.data, Number(port), host);
      }
      for (let e; !stopped && (e = ep.pollEvent()) !== null;) {
        busy = true;
        onEvent(e);
      }
    }
    clearTimeout(timer);
    const next = stopped ? null : ep.pollTimeout();
    if (next !== null) {
      timer = setTimeout(() => {
        ep.handleTimeout(now());
        drive();
      }, Math.max(0, (next - now()) / 1e6));
    }
  };
  sock.on('message', (data, from) => {
    try {
      ep.handlePacket(now(), `${from.address}:${from.port}`, data);
    } catch (e) {
      console.error(`dropped a packet from ${from.address}:${from.port}: ${e.message}`);
    }
    drive();
  });
  const stop = () => {
    stopped = true;
    clearTimeout(timer);
    sock.close();
  };
  return { sock, drive, stats: () => ({ sent, dropped }), stop };
}

function server() {
  const ep = new Endpoint();
  ep.bind(HOMA_PORT);
  const io = attach(ep, (e) => {
    if (e.type === 'request_received') ep.sendResponse(now(), e.rpc, e.message);
  });
  io.sock.bind(0, '127.0.0.1', () => console.log(io.sock.address().port));
}

function client(udpPort) {
  const ep = new Endpoint();
  const port = ep.bindEphemeral();
  const sizes = [1, 100, 1_400, 1_500, 10_000, 100_000, 1_000_000];
  const sentMessages = new Map();
  const results = [];
  const io = attach(ep, (e) => {
    const message = sentMessages.get(e.cookie);
    if (e.type === 'response_received') {
      results.push({ size: message.length, intact: Buffer.compare(Buffer.from(e.message), message) === 0 });
    } else {
      results.push({ size: message.length, failed: e.reason });
    }
    if (results.length === sizes.length) {
      io.stop();
      const m = ep.metrics();
      console.log(JSON.stringify({ results, ...io.stats(), retransmitted: m.retransmitted_packets }));
    }
  });
  io.sock.bind(0, '127.0.0.1', () => {
    sizes.forEach((size, i) => {
      const message = Buffer.alloc(size);
      for (let k = 0; k < size; k++) message[k] = (k * 7 + i) & 0xff;
      sentMessages.set(BigInt(i), message);
      ep.sendRequest(now(), port, `127.0.0.1:${udpPort}`, HOMA_PORT, message, i);
    });
    io.drive();
  });
}

if (process.argv[2] === 'server') server();
else if (process.argv[2] === 'client') client(Number(process.argv[3]));
else console.error('usage: node examples/dgram.js server | client PORT');
