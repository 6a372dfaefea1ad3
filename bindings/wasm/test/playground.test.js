'use strict';
// The browser playground (www/) in a real browser: Debian's chromium, headless, driven by
// puppeteer-core. A small run must chart every size bin (about 15) for Homa (p50, p99) and
// the oracle and say what load it carried, the RPC timeline must show DATA and GRANT packets, and the console must stay
// free of errors. Skipped, saying why, where chromium or puppeteer-core is missing.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');

const CHROMIUM = '/usr/bin/chromium';
const root = path.join(__dirname, '..');
let puppeteer;
try {
  puppeteer = require('puppeteer-core');
} catch {
  puppeteer = null;
}
const why = !fs.existsSync(CHROMIUM) ? `no browser at ${CHROMIUM} (apt-get install chromium)`
  : puppeteer === null ? 'puppeteer-core is not installed (npm install puppeteer-core@^24)' : null;

const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.wasm': 'application/wasm' };

/** Serves bindings/wasm as `python3 -m http.server` would. */
function serve() {
  const server = http.createServer((req, res) => {
    const file = path.join(root, decodeURIComponent(new URL(req.url, 'http://x').pathname));
    if (!file.startsWith(root) || !fs.existsSync(file) || fs.statSync(file).isDirectory()) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { 'content-type': TYPES[path.extname(file)] ?? 'application/octet-stream' });
    fs.createReadStream(file).pipe(res);
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

test('the playground charts a run and an RPC timeline in chromium', { skip: why ?? false }, async () => {
  const server = await serve();
  const browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu'],
  });
  try {
    const page = await browser.newPage();
    const errors = [];
    page.on('console', (m) => m.type() === 'error' && errors.push(m.text()));
    page.on('pageerror', (e) => errors.push(String(e)));
    await page.goto(`http://127.0.0.1:${server.address().port}/www/index.html`);
    await page.waitForSelector('#timeline .packet', { timeout: 30_000 });
    const packets = await page.$$eval('#timeline .packet', (ps) => ps.map((p) => p.classList[1]));
    assert.ok(packets.includes('DATA') && packets.includes('GRANT'), packets.join(' '));
    await page.select('select[name=workload]', 'w2');
    await page.$eval('input[name=messages]', (e) => { e.value = '1500'; });
    await page.click('#run');
    await page.waitForFunction(() => document.body.dataset.done === 'yes', { timeout: 180_000 });
    const chart = await page.$eval('#chart', (svg) => ({
      bins: Number(svg.dataset.bins),
      series: [...svg.querySelectorAll('.series')].map((s) => [s.classList[1], Number(s.dataset.points)]),
    }));
    // About 15 bins of equal message counts, not the paper's hundred.
    assert.ok(chart.bins >= 5 && chart.bins <= 16, `${chart.bins} bins`);
    const status = await page.$eval('#status', (p) => p.textContent);
    assert.match(status, /carried load [\d.]+ of the 0\.80 offered/);
    assert.deepEqual(chart.series, [['homa50', chart.bins], ['homa99', chart.bins], ['oracle99', chart.bins]]);
    assert.deepEqual(errors, []);
  } finally {
    await browser.close();
    server.close();
  }
});
