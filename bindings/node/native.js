'use strict';
// Where the native module comes from: homa.node next to this file when it was built from
// source (a checkout, `npm install --build-from-source`, or a platform without a prebuilt
// package), else the prebuilt package for this platform that npm installed as an optional
// dependency (homa-linux-x64-gnu, ...; scripts/dist builds them).
const fs = require('node:fs');
const path = require('node:path');

const built = path.join(__dirname, 'homa.node');

/** The prebuilt package's name for this platform, e.g. `homa-linux-x64-gnu`. */
function prebuiltName() {
  const glibc = process.report?.getReport().header.glibcVersionRuntime;
  return `homa-${process.platform}-${process.arch}-${glibc ? 'gnu' : 'musl'}`;
}

/** Whether the prebuilt package for this platform is installed. */
function hasPrebuilt() {
  try {
    require.resolve(prebuiltName());
    return true;
  } catch {
    return false;
  }
}

/** The native module. */
function load() {
  if (fs.existsSync(built)) return require(built);
  if (hasPrebuilt()) return require(prebuiltName());
  throw new Error(
    `homa: the native module is missing: no prebuilt package for this platform ` +
      `(${prebuiltName()}) is installed, and none was built from source. With Rust ` +
      `(https://rustup.rs), build it: node ${path.join(__dirname, 'build.js')}`,
  );
}

module.exports = { load, hasPrebuilt, prebuiltName };
