// Types of sim.js: the simulator's module for browsers (await the default export first).
export { default, simulate, SimulateOptions } from './pkg/sim-web/homa_wasm';
