// The playground page: runs simulations in worker.js and draws their slowdowns, and draws
// the packets of one RPC between two endpoints run here.
import init, { Endpoint, wire } from '../web.js';

const SVG = 'http://www.w3.org/2000/svg';
const $ = (id) => document.getElementById(id);
const worker = new Worker(new URL('./worker.js', import.meta.url), { type: 'module' });

function el(name, attrs, parent) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  parent?.appendChild(e);
  return e;
}

/** Slowdown per size bin, Homa's p50 and p99 and the oracle's p99. As in the paper's
 * figures, a bin stands at the share of messages up to its largest size (so bins of equal
 * message counts are evenly spaced), labelled with that size; slowdown on a log scale. */
function chart(report) {
  const svg = $('chart');
  svg.replaceChildren();
  const bins = report.bins.filter((b) => b.messages > 0);
  const [w, h, left, bottom] = [800, 360, 50, 40];
  const ys = bins.flatMap((b) => [b.median, b.p99, b.oracle_p99 ?? 1]).filter((v) => v > 0);
  const ymax = Math.max(2, ...ys);
  const x = (b) => left + b.cum_fraction * (w - left - 10);
  const y = (s) => h - bottom - (Math.log10(Math.max(1, s)) / Math.log10(ymax)) * (h - bottom - 10);
  const size = (n) => n < 1e3 ? `${n} B` : n < 1e6 ? `${+(n / 1e3).toPrecision(2)} KB` : `${+(n / 1e6).toPrecision(2)} MB`;
  el('line', { x1: left, y1: h - bottom, x2: w - 10, y2: h - bottom, stroke: '#999' }, svg);
  el('line', { x1: left, y1: 10, x2: left, y2: h - bottom, stroke: '#999' }, svg);
  let labelled = Infinity; // from the largest size down, so the last bin is always named
  for (const b of [...bins].reverse()) {
    if (labelled - x(b) < 45) continue;
    labelled = x(b);
    const anchor = x(b) > w - 40 ? 'end' : 'middle';
    el('text', { x: x(b), y: h - bottom + 18, 'text-anchor': anchor, 'font-size': 12 }, svg).textContent = size(b.upper);
  }
  for (const s of [1, 2, 5, 10, 20, 50, 100].filter((s) => s <= ymax)) {
    el('text', { x: left - 6, y: y(s) + 4, 'text-anchor': 'end', 'font-size': 12 }, svg).textContent = s;
  }
  el('text', { x: w / 2, y: h - 4, 'text-anchor': 'middle', 'font-size': 12 }, svg).textContent =
    'message size (placed by the share of messages up to it)';
  for (const [key, color, cls] of [['median', '#1f77b4', 'homa50'], ['p99', '#d62728', 'homa99'], ['oracle_p99', '#2ca02c', 'oracle99']]) {
    const shown = bins.filter((b) => b[key] > 0);
    const pts = shown.map((b) => `${x(b).toFixed(1)},${y(b[key]).toFixed(1)}`);
    el('polyline', { points: pts.join(' '), fill: 'none', stroke: color, 'stroke-width': 2, class: `series ${cls}`, 'data-points': pts.length }, svg);
    for (const b of shown) el('circle', { cx: x(b), cy: y(b[key]), r: 3, fill: color }, svg);
  }
  svg.dataset.bins = bins.length;
}

worker.onmessage = ({ data }) => {
  if (data.type === 'progress') {
    $('progress').value = data.total ? data.done / data.total : 0;
  } else if (data.type === 'done') {
    const r = data.report;
    const [carried, offered] = [r.measured.load, r.offered.load];
    // SRPT sends short messages first, so at high load the longest ones queue up for a
    // while before the network carries all that is offered.
    const filling = carried < 0.95 * offered
      ? ' (the longest messages were still queueing up behind shorter ones: a longer run carries more)'
      : '';
    $('progress').value = 1;
    $('status').textContent = `${r.measured.completed} messages measured; short messages' p99 slowdown ${r.summary.short.p99.toFixed(2)}; carried load ${carried.toFixed(2)} of the ${offered.toFixed(2)} offered${filling}`;
    chart(r);
    $('run').disabled = false;
    document.body.dataset.done = 'yes';
  } else {
    $('status').textContent = `error: ${data.message}`;
    $('run').disabled = false;
  }
};

$('form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const f = new FormData($('form'));
  document.body.dataset.done = 'no';
  $('run').disabled = true;
  $('status').textContent = 'running...';
  // The first 80 % of the messages fill the network's queues and are not measured; 15 size
  // bins of equal message counts hold enough messages each for a steady p99.
  worker.postMessage({
    workload: f.get('workload'), load: Number(f.get('load')), hosts: Number(f.get('hosts')),
    messages: Number(f.get('messages')), warmup: 0.8, bins: 15, oracle: true,
  });
});

/** One RPC between two endpoints over a simulated link: every packet, in time order. */
function oneRpc() {
  const client = new Endpoint();
  const server = new Endpoint();
  server.bind(99);
  const port = client.bindEphemeral();
  const addr = { c: '10.0.0.1:4000', s: '10.0.0.2:4000' };
  const link = { bps: 10e9, delay: 1000 };
  const inFlight = []; // [arrival ns, to, from, bytes]
  const log = [];
  let now = 0;
  let wireFree = { c: 0, s: 0 };
  const send = (ep, side) => {
    for (let p; (p = ep.pollTransmit(now)) !== null;) {
      const start = Math.max(now, wireFree[side]);
      wireFree[side] = start + (p.data.length * 8 * 1e9) / link.bps;
      const f = wire.decode(p.data);
      log.push({ t: start, side, type: f.type, offset: f.offset ?? f.effective_offset ?? 0, len: f.payload_len ?? 0 });
      inFlight.push([wireFree[side] + link.delay, side === 'c' ? 's' : 'c', addr[side], p.data]);
    }
  };
  client.sendRequest(now, port, addr.s, 99, new Uint8Array(300_000), 1n);
  send(client, 'c');
  let done = false;
  for (let guard = 0; !done && guard < 100000; guard++) {
    inFlight.sort((a, b) => a[0] - b[0]);
    const due = [inFlight[0]?.[0], client.pollTimeout(), server.pollTimeout()].filter((t) => t != null);
    if (due.length === 0) break;
    now = Math.max(now, Math.ceil(Math.min(...due)));
    while (inFlight.length && inFlight[0][0] <= now) {
      const [, to, from, data] = inFlight.shift();
      (to === 'c' ? client : server).handlePacket(now, from, data);
    }
    for (const ep of [client, server]) {
      const t = ep.pollTimeout();
      if (t !== null && t <= now) ep.handleTimeout(now);
    }
    for (let e; (e = server.pollEvent()) !== null;) {
      if (e.type === 'request_received') server.sendResponse(now, e.rpc, new Uint8Array(1));
    }
    for (let e; (e = client.pollEvent()) !== null;) done ||= e.type === 'response_received';
    send(server, 's');
    send(client, 'c');
  }
  return log;
}

function timeline(log) {
  const svg = $('timeline');
  const [w, h] = [800, 220];
  const tmax = Math.max(...log.map((p) => p.t)) || 1;
  const x = (t) => 60 + (t / tmax) * (w - 80);
  for (const [side, yy, label] of [['c', 60, 'client'], ['s', 160, 'server']]) {
    el('line', { x1: 60, y1: yy, x2: w - 20, y2: yy, stroke: '#999' }, svg);
    el('text', { x: 4, y: yy + 4, 'font-size': 12 }, svg).textContent = label;
  }
  for (const p of log) {
    const yy = p.side === 'c' ? 60 : 160;
    const color = p.type === 'DATA' ? '#1f77b4' : p.type === 'GRANT' ? '#ff7f0e' : '#777';
    el('line', { x1: x(p.t), y1: yy - 14, x2: x(p.t), y2: yy + 14, stroke: color, 'stroke-width': 2, class: `packet ${p.type}` }, svg);
  }
  el('text', { x: w - 20, y: 200, 'text-anchor': 'end', 'font-size': 12 }, svg).textContent =
    `${log.filter((p) => p.type === 'DATA').length} DATA (blue), ${log.filter((p) => p.type === 'GRANT').length} GRANT (orange) in ${(tmax / 1000).toFixed(1)} us`;
}

await init();
timeline(oneRpc());
