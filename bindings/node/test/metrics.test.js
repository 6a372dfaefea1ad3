'use strict';
// metricsText(): Prometheus' text format, whose values match known traffic; metrics() holds
// the latency histograms of calls and served requests.

const test = require('node:test');
const assert = require('node:assert/strict');
const homa = require('..');

const LOCAL = '127.0.0.1';

/** Samples by `name{labels}` as written. */
function parse(text) {
  const samples = new Map();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    samples.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return samples;
}

test('metricsText counts known traffic in Prometheus format', async () => {
  const server = await homa.open({ port: 30000 + (process.pid % 2000), host: LOCAL });
  const serving = server.serve((req) => req.message);
  const client = await homa.open({ host: LOCAL });
  try {
    const dest = `${LOCAL}:${server.port}`;
    for (let i = 0; i < 6; i++) await client.call(dest, Buffer.alloc(100 + i * 5000, i));
    const text = client.metricsText({ job: 'test' });
    const me = `socket="${client.localAddr}",job="test"`;
    const s = parse(text);
    assert.equal(s.get(`homa_messages_received_total{${me},kind="response"}`), 6);
    assert.equal(s.get(`homa_call_duration_seconds_count{${me}}`), 6);
    assert.equal(s.get(`homa_call_duration_seconds_bucket{${me},le="+Inf"}`), 6);
    assert.match(text, /^# TYPE homa_call_duration_seconds histogram$/m);
    assert.match(text, /^# TYPE homa_packets_received_total counter$/m);
    const m = client.metrics();
    assert.equal(m.calls.count, 6);
    assert.equal(m.calls.buckets.reduce((a, b) => a + b, 0), 6);
    assert.equal(m.calls.buckets.length, m.calls.bounds.length + 1);
    assert.equal(server.metrics().served.count, 6);
    assert.throws(() => client.metricsText({ 'bad-name': 'x' }), { name: 'TypeError', message: /label name/ });
    assert.throws(() => client.metricsText({ le: 'x' }), { name: 'TypeError', message: /own samples/ });
  } finally {
    client.close();
    server.close();
  }
  await serving;
});
