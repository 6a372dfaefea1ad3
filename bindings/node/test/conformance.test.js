'use strict';
// Every conformance vector through homa.wire and homa.Endpoint, by the shared JavaScript
// runner (conformance/js/runner.js), judged against conformance/expected-failures/node.txt.
// Times go in as BigInts.

const test = require('node:test');
const assert = require('node:assert/strict');
const homa = require('..');
const { runConformance } = require('../../../conformance/js/runner.js');

runConformance({ impl: 'node', homa, time: BigInt });

test('Endpoint arguments are checked in JavaScript terms', () => {
  const ep = new homa.Endpoint();
  assert.throws(() => ep.bind('1'), TypeError);
  assert.throws(() => ep.bind(70000), RangeError);
  assert.throws(() => ep.handleTimeout(-1n), RangeError);
  assert.throws(() => ep.sendRequest(0, 32768, 'nowhere', 1, Buffer.from('x')), TypeError);
  assert.throws(() => ep.sendRequest(0, 32768, '10.0.0.1:1', 1, 'text'), TypeError);
  assert.throws(() => ep.handlePacket(0, 1234, Buffer.alloc(40)), TypeError);
  assert.throws(() => ep.discard('not an rpc'), TypeError);
  assert.throws(() => new homa.Endpoint({ mtu: 10 }), (e) => e instanceof homa.HomaError && e.kind === 'config');
  assert.throws(() => new homa.Endpoint({ no_such_field: 1 }), /unknown option/);
  const port = ep.bindEphemeral();
  const id = ep.sendRequest(0, port, '10.0.0.1:4000', 99, new Uint8Array([1, 2, 3]), 7n);
  assert.equal(typeof id, 'bigint');
  assert.throws(() => ep.abort(id + 2n), (e) => e.kind === 'unknown_rpc');
  ep.abort(id);
});
