'use strict';
// What `npm install homa-wasm` gets: `npm pack` makes the tarball (with the built module),
// which installs into a fresh directory and runs the README example as
// `require('homa-wasm')`.

const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const pkg = path.join(__dirname, '..');
const dir = path.join(process.env.CARGO_TARGET_DIR ?? path.join(pkg, '..', '..', 'target'), 'npm-package-wasm');
const npm = (args, cwd) =>
  execFileSync('npm', [...args, '--no-audit', '--no-fund', '--loglevel=error'], {
    cwd,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
    // The pack step would rebuild the module: the tests run on the one just built.
    env: { ...process.env, npm_config_ignore_scripts: 'true' },
  });

test('npm pack gives a tarball that installs and runs the README example', () => {
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(dir, { recursive: true });
  try {
    const [packed] = JSON.parse(npm(['pack', '--json', '--pack-destination', dir], pkg));
    const files = packed.files.map((f) => f.path);
    for (const f of ['index.js', 'index.d.ts', 'web.js', 'README.md', 'pkg/node/homa_wasm.js',
      'pkg/node/homa_wasm_bg.wasm', 'pkg/web/homa_wasm.js', 'pkg/web/homa_wasm_bg.wasm', 'sim.js', 'web.d.ts', 'sim.d.ts',
      'pkg/sim-node/homa_wasm_bg.wasm', 'pkg/sim-web/homa_wasm_bg.wasm']) {
      assert.ok(files.includes(f), `the tarball lacks ${f}`);
    }
    assert.ok(!files.some((f) => f.startsWith('test/') || f.startsWith('src/')), 'the tarball holds tests or sources');
    const app = path.join(dir, 'app');
    fs.mkdirSync(app);
    fs.writeFileSync(path.join(app, 'package.json'), '{"name": "app", "private": true}\n');
    npm(['install', '--offline', path.join(dir, packed.filename)], app);
    const readme = fs.readFileSync(path.join(pkg, 'README.md'), 'utf8');
    fs.writeFileSync(path.join(app, 'example.js'), readme.split('```js\n')[1].split('```')[0]);
    const out = execFileSync(process.execPath, ['example.js'], { cwd: app, encoding: 'utf8', timeout: 30_000 });
    assert.equal(out.trim(), 'hello back');
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
