'use strict';
// The README's example, as a newcomer pastes it: it must print its answer and then let the
// process exit by itself (no handle left open once the sockets are closed).

const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

test('the README example runs and the process exits by itself', () => {
  const readme = fs.readFileSync(path.join(__dirname, '..', 'README.md'), 'utf8');
  const code = readme.split('```js\n')[1].split('```')[0];
  assert.equal(code, fs.readFileSync(path.join(__dirname, '..', 'examples', 'echo.js'), 'utf8')
    .split('\n').slice(1).join('\n'), 'README.md and examples/echo.js differ');
  const port = String(23000 + (process.pid % 5000));
  const script = code.replaceAll('4000', port).replace("require('homa')", 'require(process.argv[1])');
  const out = execFileSync(process.execPath, ['-e', script, path.join(__dirname, '..')], {
    timeout: 30_000,
    encoding: 'utf8',
  });
  assert.equal(out.trim(), 'ping');
});
