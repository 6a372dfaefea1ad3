// Runs the simulator off the page's thread: options in, progress and the report out.
import init, { simulate } from '../sim.js';

const ready = init();
self.onmessage = async ({ data: options }) => {
  await ready;
  try {
    const report = simulate(options, (p) => self.postMessage({ type: 'progress', ...p }));
    self.postMessage({ type: 'done', report });
  } catch (e) {
    self.postMessage({ type: 'error', message: String(e.message ?? e) });
  }
};
