'use strict';
// What `npm install homa` gets: `npm pack` makes the tarball (with the Rust crates it is
// built from), which installs into a fresh directory, building the native module with
// cargo, and runs the README example there as `require('homa')`.

const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const pkg = path.join(__dirname, '..');
const target = process.env.CARGO_TARGET_DIR ?? path.join(pkg, '..', '..', 'target');
const npm = (args, cwd, env = {}) =>
  execFileSync('npm', [...args, '--no-audit', '--no-fund', '--loglevel=error'], {
    cwd,
    encoding: 'utf8',
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });

test('npm pack gives a tarball that installs from source and runs the README example', () => {
  // A fixed place, so that cargo finds its earlier build of the packaged crates there.
  const dir = path.join(target, 'npm-package');
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(dir, { recursive: true });
  try {
    const [packed] = JSON.parse(npm(['pack', '--json', '--pack-destination', dir], pkg));
    const files = packed.files.map((f) => f.path);
    for (const f of ['index.js', 'index.d.ts', 'build.js', 'README.md', 'rust/Cargo.toml',
      'rust/Cargo.lock', 'rust/homa-core/src/lib.rs', 'rust/io-backends/src/lib.rs',
      'rust/bindings/node/src/lib.rs']) {
      assert.ok(files.includes(f), `the tarball lacks ${f}`);
    }
    assert.ok(!files.some((f) => f.startsWith('test/') || f.includes('/target/') || f === 'homa.node'),
      'the tarball holds tests, build output or a prebuilt module');
    assert.ok(!fs.existsSync(path.join(pkg, 'rust')), 'postpack left rust/ behind');

    const app = path.join(dir, 'app');
    fs.mkdirSync(app);
    fs.writeFileSync(path.join(app, 'package.json'), '{"name": "app", "private": true}\n');
    // Built unoptimised in the workspace's target directory, so the dependencies compiled
    // by the other steps are reused.
    npm(['install', '--offline', path.join(dir, packed.filename)], app, {
      HOMA_NODE_PROFILE: 'dev',
      CARGO_TARGET_DIR: target,
    });
    const readme = fs.readFileSync(path.join(pkg, 'README.md'), 'utf8');
    const port = String(22000 + (process.pid % 5000));
    const example = readme.split('```js\n')[1].split('```')[0].replaceAll('4000', port);
    fs.writeFileSync(path.join(app, 'example.js'), example);
    const out = execFileSync(process.execPath, ['example.js'], { cwd: app, encoding: 'utf8', timeout: 30_000 });
    assert.equal(out.trim(), 'ping');
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
