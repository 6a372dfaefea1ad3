'use strict';
// Every conformance vector through the wasm module's wire and Endpoint, by the shared
// JavaScript runner (conformance/js/runner.js), judged against
// conformance/expected-failures/wasm.txt. Times go in as Numbers.

const homa = require('..');
const { runConformance } = require('../../../conformance/js/runner.js');

runConformance({ impl: 'wasm', homa, time: Number });
