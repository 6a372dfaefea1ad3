'use strict';
// The conformance suite for JavaScript bindings: every wire and scenario vector of
// conformance/vectors (read in place) through a binding's `wire` and `Endpoint`, judged
// against expected-failures/<impl>.txt as conformance/README.md says: a listed case must
// fail, an unlisted one must pass, a listed id must exist. The Node binding
// (bindings/node/test/conformance.test.js) and the wasm one (bindings/wasm/test/) run it.
//
// runConformance({ impl, homa, time }): `impl` names the expected-failures file; `homa`
// has `Endpoint` and `wire`; `time(ns)` turns a vector's time (a Number) into what the
// binding's Endpoint takes.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const CONFORMANCE = path.join(__dirname, '..');
const MIN_LEN = {
  DATA: 56, GRANT: 33, RESEND: 37, RPC_UNKNOWN: 28, BUSY: 28,
  CUTOFFS: 62, FREEZE: 28, NEED_ACK: 28, ACK: 80,
};

/** JSON with integers beyond Number.MAX_SAFE_INTEGER as BigInts, as homa.wire gives them. */
function parseJson(text) {
  const marked = text.replace(/"(?:[^"\\]|\\.)*"|-?\d{16,}/g, (m) => (m[0] === '"' ? m : `"\\u0000${m}"`));
  return JSON.parse(marked, (_, v) => {
    if (typeof v !== 'string' || v[0] !== '\u0000') return v;
    const n = BigInt(v.slice(1));
    return n > BigInt(Number.MAX_SAFE_INTEGER) || n < -BigInt(Number.MAX_SAFE_INTEGER) ? n : Number(n);
  });
}

const read = (name) => parseJson(fs.readFileSync(path.join(CONFORMANCE, 'vectors', name), 'utf8'));
const WIRE = read('wire.json');
const SCENARIOS = read('scenarios.json');

/** expected-failures/<impl>.txt: case key -> reason. */
function expectedFailures(impl) {
  const expected = new Map();
  for (const line of fs.readFileSync(path.join(CONFORMANCE, 'expected-failures', `${impl}.txt`), 'utf8').split('\n')) {
    const [entry, reason = ''] = line.split('#');
    if (entry.trim()) expected.set(entry.trim(), reason.trim());
  }
  return expected;
}

const cases = (doc) => doc.groups.flatMap((g) => g.cases);

function runConformance({ impl, homa, time }) {
  const EXPECTED = expectedFailures(impl);
  /** Runs `body` as case `key`: it must pass, or if listed as an expected failure, fail. */
  const judge = (key, body) => {
    const reason = EXPECTED.get(key);
    if (reason === undefined) return body();
    assert.throws(body, undefined, `${key} is listed as failing (${reason}) but passed: remove it from ${impl}.txt`);
  };
  const isHoma = (e) => e instanceof Error && typeof e.kind === 'string';
  const hex = (bytes) => Buffer.from(bytes).toString('hex');

  test('the vectors are all there and expected failures name existing cases', () => {
    assert.ok(cases(WIRE).length >= 60);
    assert.ok(cases(SCENARIOS).length >= 15);
    const ids = new Set([
      ...cases(WIRE).map((c) => `wire/${c.id}`),
      ...cases(SCENARIOS).map((c) => `scenario/${c.id}`),
    ]);
    for (const key of EXPECTED.keys()) assert.ok(ids.has(key), `${impl}.txt lists unknown case ${key}`);
  });

  // ------------------------------------------------------------------------------ wire

  /** What a prefix of `length` bytes decodes to: the same fields, a DATA payload cut. */
  function truncatedView(fields, length) {
    if (fields.type !== 'DATA') return fields;
    const n = length - MIN_LEN.DATA;
    return { ...fields, payload: fields.payload.slice(0, 2 * n), payload_len: n };
  }

  function wireCase(c) {
    const data = Buffer.from(c.hex, 'hex');
    if (c.result === 'invalid') {
      assert.throws(() => homa.wire.decode(data), (e) => isHoma(e) && e.kind === c.error);
      return;
    }
    const fields = c.fields;
    assert.deepEqual(homa.wire.decode(data), fields);
    assert.deepEqual(Buffer.from(homa.wire.encode(fields)), data.subarray(0, c.parsed_len));
    // Every strict prefix: truncated below the type's minimum, the same fields above it.
    const minimum = MIN_LEN[fields.type];
    for (let n = 0; n < data.length; n++) {
      const prefix = data.subarray(0, n);
      if (n < minimum) {
        assert.throws(() => homa.wire.decode(prefix), (e) => e.kind === 'truncated', `prefix of ${n}`);
      } else {
        assert.deepEqual(homa.wire.decode(prefix), truncatedView(fields, n), `prefix of ${n}`);
      }
    }
    // A plain Uint8Array decodes the same as a Buffer.
    assert.deepEqual(homa.wire.decode(new Uint8Array(data)), fields);
  }

  test('wire vectors', async (t) => {
    for (const c of cases(WIRE)) await t.test(c.id, () => judge(`wire/${c.id}`, () => wireCase(c)));
  });

  // ------------------------------------------------------------------------------ scenarios

  function generate(spec, offset, length) {
    if ('fill' in spec && !('pattern' in spec)) return Buffer.alloc(length, spec.fill);
    if (spec.pattern === 'mod251' && !('fill' in spec)) {
      return Buffer.from(Array.from({ length }, (_, k) => (offset + k) % 251));
    }
    throw new Error(`bad generated bytes ${JSON.stringify(spec)}`);
  }

  const message = (m) => (typeof m === 'string' ? Buffer.from(m, 'hex') : generate(m, 0, m.len));

  function withPayload(fields) {
    const p = fields.payload;
    if (p === null || typeof p !== 'object') return fields;
    return { ...fields, payload: generate(p, fields.effective_offset ?? 0, fields.payload_len).toString('hex') };
  }

  /** Differences where `got` lacks or differs from what `want` names. */
  function subsetDiff(want, got, at = '') {
    if (want !== null && typeof want === 'object' && !Array.isArray(want)) {
      if (got === null || typeof got !== 'object') return [`${at}: want an object, got ${show(got)}`];
      return Object.entries(want).flatMap(([k, v]) => {
        const p = at ? `${at}.${k}` : k;
        return k in got ? subsetDiff(v, got[k], p) : [`${p}: want ${show(v)}, got (absent)`];
      });
    }
    try {
      assert.deepEqual(got, want);
      return [];
    } catch {
      return [`${at}: want ${show(want)}, got ${show(got)}`];
    }
  }

  const show = (v) => JSON.stringify(v, (_, x) => (typeof x === 'bigint' ? `${x}n` : x));
  /** A BigInt as the vectors' JSON holds it. */
  const num = (n) => (n <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(n) : n);

  function eventJson(e) {
    switch (e.type) {
      case 'request_received':
        assert.deepEqual(e.rpc, { client: e.client, id: e.id });
        return { type: e.type, client: e.client, id: num(e.id), port: e.port, client_port: e.clientPort,
          message: hex(e.message) };
      case 'response_received':
        return { type: e.type, id: num(e.id), cookie: num(e.cookie), message: hex(e.message) };
      default:
        return { type: e.type, id: num(e.id), cookie: num(e.cookie), reason: e.reason };
    }
  }

  const expectedEvent = (e) => ('message' in e ? { ...e, message: message(e.message).toString('hex') } : e);

  /** An API call: it must return `expect_return` (if given) or fail with `expect_error`. */
  function api(step, call) {
    const wantError = step.expect_error;
    let got;
    try {
      got = call();
    } catch (e) {
      if (!isHoma(e)) throw e;
      assert.equal(wantError !== undefined, true, `failed with ${e.kind} (${e.message}), want success`);
      assert.equal(e.kind, wantError, `failed with ${e.kind} (${e.message}), want ${wantError}`);
      return;
    }
    assert.equal(wantError, undefined, `returned ${show(got)}, want error ${wantError}`);
    if ('expect_return' in step) {
      assert.deepEqual(typeof got === 'bigint' ? num(got) : got, step.expect_return);
    }
  }

  function runStep(ep, step) {
    const at = time(step.at);
    switch (step.op) {
      case 'bind': return api(step, () => ep.bind(step.port));
      case 'unbind': return api(step, () => ep.unbind(step.port));
      case 'bind_ephemeral': return api(step, () => ep.bindEphemeral());
      case 'send_request': {
        const msg = message(step.message);
        return api(step, () => ep.sendRequest(at, step.port, step.dest, step.dest_port, msg, step.cookie));
      }
      case 'send_response': {
        const msg = message(step.message);
        return api(step, () => ep.sendResponse(at, { client: step.client, id: step.id }, msg));
      }
      case 'abort': return api(step, () => ep.abort(step.id));
      case 'handle_unreachable': return ep.handleUnreachable(step.peer, step.port ?? undefined);
      case 'packet': {
        const data = 'fields' in step ? homa.wire.encode(withPayload(step.fields)) : Buffer.from(step.hex, 'hex');
        let kind;
        try {
          ep.handlePacket(at, step.from, data);
        } catch (e) {
          if (!isHoma(e)) throw e;
          kind = e.kind;
        }
        return assert.equal(kind, step.expect_error, `rejected as ${kind ?? 'accepted'}, want ${step.expect_error ?? 'accepted'}`);
      }
      case 'timeout': return ep.handleTimeout(at);
      case 'expect_transmits': {
        const got = [];
        for (let t; (t = ep.pollTransmit(at)) !== null;) {
          got.push({ to: t.to, priority: t.priority, fields: homa.wire.decode(t.data) });
          assert.ok(got.length <= 10000, 'pollTransmit never ran dry');
        }
        const listing = got.map((g, i) => `\n  [${i}] ${show(g)}`).join('') || ' (none)';
        assert.equal(got.length, step.transmits.length, `want ${step.transmits.length} packets, got ${got.length}:${listing}`);
        step.transmits.forEach((w, i) => {
          const diffs = [
            ...subsetDiff({ to: w.to, priority: w.priority }, { to: got[i].to, priority: got[i].priority }),
            ...subsetDiff(withPayload(w.packet), got[i].fields),
          ];
          assert.deepEqual(diffs, [], `transmit ${i} differs; all:${listing}`);
        });
        return;
      }
      case 'expect_events': {
        const events = [];
        for (let e; (e = ep.pollEvent()) !== null;) events.push(eventJson(e));
        return assert.deepEqual(events, step.events.map(expectedEvent));
      }
      case 'expect_timeout': {
        const t = ep.pollTimeout();
        let ok;
        if ('deadline' in step) ok = (t === null ? null : BigInt(t)) === (step.deadline === null ? null : BigInt(step.deadline));
        else if (t === null) ok = step.not_after === undefined || step.not_after === null;
        else {
          const lo = step.not_before ?? null;
          const hi = step.not_after ?? null;
          ok = (lo === null || BigInt(t) >= BigInt(lo)) && (hi === null || BigInt(t) <= BigInt(hi));
        }
        return assert.ok(ok, `pollTimeout is ${t}, want ${show(step)}`);
      }
      case 'expect_metrics':
        return assert.deepEqual(subsetDiff(step.metrics, ep.metrics()), []);
      default:
        throw new Error(`unknown op ${step.op}`);
    }
  }

  function scenario(c) {
    const ep = new homa.Endpoint(c.config ?? {});
    let last = 0;
    c.steps.forEach((step, i) => {
      assert.ok(step.at >= last, 'time goes back');
      last = step.at;
      try {
        runStep(ep, step);
      } catch (e) {
        e.message = `step ${i} (${step.op} at ${step.at} ns): ${e.message}`;
        throw e;
      }
    });
  }

  test('scenario vectors', async (t) => {
    for (const c of cases(SCENARIOS)) await t.test(c.id, () => judge(`scenario/${c.id}`, () => scenario(c)));
  });
}

module.exports = { runConformance, parseJson };
