// homa-wasm for browsers (an ES module): `await init()` loads the core module, then use
// Endpoint and wire as in Node. The simulator is a separate module: sim.js.
import init, { Endpoint, wireDecode, wireEncode } from './pkg/web/homa_wasm.js';

export default init;
export { Endpoint };
export const wire = { decode: wireDecode, encode: wireEncode };
