'use strict';
// Builds the WebAssembly modules and their JavaScript glue into pkg/: cargo for
// wasm32-unknown-unknown (profile `wasm`: optimised for size), then wasm-bindgen for Node
// (CommonJS) and for browsers (ES modules), then wasm-opt (npm's binaryen) when installed.
// Two modules: the core (Endpoint, wire: pkg/node, pkg/web) and, with the `sim` feature,
// the core and the simulator (pkg/sim-node, pkg/sim-web), which is most of the size.
// Prints each module's size, gzipped. CARGO_TARGET_DIR is honoured (default: the
// workspace's target directory).
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const zlib = require('node:zlib');

const root = path.resolve(__dirname, '..', '..');
const target = process.env.CARGO_TARGET_DIR || path.join(root, 'target');
const run = (cmd, args) =>
  execFileSync(cmd, args, { cwd: root, stdio: 'inherit', env: { ...process.env, CARGO_TARGET_DIR: target } });
const wasmOpt = path.join(__dirname, 'node_modules', '.bin', 'wasm-opt');
// What rustc's wasm32-unknown-unknown emits by default (and engines since 2022 run).
const FEATURES = ['bulk-memory', 'nontrapping-float-to-int', 'sign-ext', 'mutable-globals', 'multivalue', 'reference-types']
  .map((f) => `--enable-${f}`);

for (const [features, prefix] of [[[], ''], [['--features', 'sim'], 'sim-']]) {
  run('cargo', ['build', '-p', 'homa-wasm', '--target', 'wasm32-unknown-unknown', '--profile', 'wasm', '--locked', ...features]);
  const wasm = path.join(target, 'wasm32-unknown-unknown', 'wasm', 'homa_wasm.wasm');
  for (const [kind, dir] of [['nodejs', 'node'], ['web', 'web']]) {
    const out = path.join(__dirname, 'pkg', prefix + dir);
    fs.rmSync(out, { recursive: true, force: true });
    try {
      run('wasm-bindgen', [wasm, '--target', kind, '--out-dir', out, '--out-name', 'homa_wasm']);
    } catch (e) {
      if (e.code !== 'ENOENT') throw e;
      console.error("build.js: wasm-bindgen was not found: cargo install wasm-bindgen-cli --version <the lock file's wasm-bindgen>");
      process.exit(1);
    }
    const module = path.join(out, 'homa_wasm_bg.wasm');
    if (fs.existsSync(wasmOpt)) run(wasmOpt, ['-Os', ...FEATURES, '--strip-debug', '--strip-producers', module, '-o', module]);
    fs.rmSync(path.join(out, '.gitignore'), { force: true });
    if (dir === 'node') {
      const bytes = fs.readFileSync(module);
      const kib = (n) => `${(n / 1024).toFixed(0)} KiB`;
      console.log(`pkg/${prefix}node: ${kib(bytes.length)}, ${kib(zlib.gzipSync(bytes, { level: 9 }).length)} gzipped`);
    }
  }
}
