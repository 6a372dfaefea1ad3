'use strict';
// npm pack's prepack step: copies the Rust crates the native module is built from into
// rust/ (the repository's layout, with a workspace of just those crates and the
// repository's Cargo.lock), so the tarball builds anywhere cargo runs. `--clean` (postpack)
// removes the copy again.
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const out = path.join(__dirname, 'rust');
fs.rmSync(out, { recursive: true, force: true });
if (process.argv.includes('--clean')) process.exit(0);

const root = path.resolve(__dirname, '..', '..');
const crates = ['homa-core', 'io-backends', 'bindings/node'];
const tracked = execFileSync('git', ['ls-files', '--', ...crates], { cwd: root, encoding: 'utf8' })
  .split('\n')
  .filter((f) => f && (!f.startsWith('bindings/node/') || /^bindings\/node\/(Cargo\.toml|build\.rs|src\/)/.test(f)));
for (const file of tracked) {
  fs.mkdirSync(path.join(out, path.dirname(file)), { recursive: true });
  fs.copyFileSync(path.join(root, file), path.join(out, file));
}
const manifest = fs.readFileSync(path.join(root, 'Cargo.toml'), 'utf8');
const members = JSON.stringify(crates).replace(/,/g, ', ');
const workspace = manifest
  .replace(/^members = .*$/m, `members = ${members}`)
  .replace(/^default-members = .*$/m, `default-members = ${members}`);
if (workspace === manifest) throw new Error('the workspace members line was not found in Cargo.toml');
fs.writeFileSync(path.join(out, 'Cargo.toml'), workspace);
fs.copyFileSync(path.join(root, 'Cargo.lock'), path.join(out, 'Cargo.lock'));
console.error(`vendor.js: ${tracked.length} files of ${crates.join(', ')} in rust/`);
