// The simulator for browsers (an ES module): `await init()` loads its module (the core's
// code and homa-sim), then `simulate(options, onProgress)` as in Node.
export { default, simulate } from './pkg/sim-web/homa_wasm.js';
