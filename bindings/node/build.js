'use strict';
// Builds the native module from source with cargo and puts it next to index.js as
// homa.node. HOMA_NODE_PROFILE picks the cargo profile (default release; scripts/test uses
// dev); CARGO_TARGET_DIR is honoured (default: the workspace's target directory).
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const profile = process.env.HOMA_NODE_PROFILE || 'release';
const target = process.env.CARGO_TARGET_DIR || path.resolve(__dirname, '..', '..', 'target');
execFileSync('cargo', ['build', '-p', 'homa-node', '--profile', profile, '--locked'], {
  cwd: __dirname,
  stdio: 'inherit',
  env: { ...process.env, CARGO_TARGET_DIR: target },
});
const built = path.join(target, profile === 'dev' ? 'debug' : profile, 'libhoma_node.so');
fs.copyFileSync(built, path.join(__dirname, 'homa.node'));
