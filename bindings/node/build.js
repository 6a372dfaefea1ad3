'use strict';
// Builds the native module from source with cargo and puts it next to index.js as
// homa.node: in a checkout, in the repository's workspace; in an installed package, in the
// crates npm pack put in rust/ (vendor.js), unless npm installed the prebuilt module for
// this platform (native.js) and no build from source was asked for. HOMA_NODE_PROFILE
// picks the cargo profile (default release; scripts/test uses dev); CARGO_TARGET_DIR is
// honoured (default: the workspace's target directory).
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { hasPrebuilt, prebuiltName } = require('./native.js');

const vendored = path.join(__dirname, 'rust');
const packaged = fs.existsSync(path.join(vendored, 'Cargo.toml'));
if (packaged && hasPrebuilt() && !process.env.npm_config_build_from_source) process.exit(0);
const workspace = packaged ? vendored : path.resolve(__dirname, '..', '..');
const profile = process.env.HOMA_NODE_PROFILE || 'release';
const target = process.env.CARGO_TARGET_DIR || path.join(workspace, 'target');
// A checkout's lock file is exact (--locked); a package's workspace holds fewer crates, so
// cargo prunes its copy of the lock (same versions).
const args = ['build', '-p', 'homa-node', '--profile', profile, ...(packaged ? [] : ['--locked'])];
try {
  execFileSync('cargo', args, {
    cwd: workspace,
    stdio: 'inherit',
    env: { ...process.env, CARGO_TARGET_DIR: target },
  });
} catch (e) {
  const why = e.code === 'ENOENT' ? 'cargo was not found: install Rust (https://rustup.rs)' : e.message;
  const prebuilt = packaged ? `no prebuilt module for this platform (${prebuiltName()}), and ` : '';
  console.error(`homa: ${prebuilt}building the native module from source failed: ${why}`);
  process.exit(1);
}
const built = path.join(target, profile === 'dev' ? 'debug' : profile, 'libhoma_node.so');
fs.copyFileSync(built, path.join(__dirname, 'homa.node'));
