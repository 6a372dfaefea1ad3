'use strict';
// homa-wasm for Node (CommonJS): the core module built by wasm-bindgen (pkg/node), with
// the packet codec under `wire`; `simulate` loads the simulator's module (pkg/sim-node)
// when first called.
const core = require('./pkg/node/homa_wasm.js');

let sim = null;

module.exports = {
  Endpoint: core.Endpoint,
  wire: { decode: core.wireDecode, encode: core.wireEncode },
  simulate(options, onProgress) {
    sim ??= require('./pkg/sim-node/homa_wasm.js');
    return sim.simulate(options, onProgress);
  },
};
