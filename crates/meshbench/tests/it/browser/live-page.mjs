// Opens meshbench's live page in headless Chromium (Debian's, driven by playwright-core: no
// browser is downloaded) and checks it against the run's own stream, /api/board:
//  - the page loads and fills in, with no console error, page error or failed request;
//  - twice while the run goes, the numbers it shows (requests of the last second, p50, p99,
//    the step line) are those of the same frame in /api/board, fetched at that moment;
//  - at the end it says the run ended, with the outcome, and (with --expect-report) links
//    the HTML report, which /report serves;
//  - a screenshot is saved.
// Usage: node live-page.mjs URL SCREENSHOT.png [--expect-report] [--timeout-ms N]
// Prints one JSON line with what it saw; exits 1 with the reasons when a check fails.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const [url, shot, ...rest] = process.argv.slice(2);
if (!url || !shot) {
  console.error('usage: node live-page.mjs URL SCREENSHOT.png [--expect-report] [--timeout-ms N]');
  process.exit(2);
}
const expectReport = rest.includes('--expect-report');
const timeoutAt = rest.indexOf('--timeout-ms');
const timeoutMs = timeoutAt >= 0 ? Number(rest[timeoutAt + 1]) : 90000;
const deadline = Date.now() + timeoutMs;
const base = new URL(url);

const failures = [];
const seen = { consoleErrors: [], pageErrors: [], failedRequests: [], samples: [], end: null };
const fail = (msg) => failures.push(msg);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function board() {
  const r = await fetch(new URL('/api/board?since=0', base));
  if (!r.ok) throw new Error(`/api/board answered ${r.status}`);
  return r.json();
}

// Waits until the server answers (the run may still be starting).
async function serverUp() {
  for (;;) {
    try {
      await board();
      return;
    } catch (e) {
      if (Date.now() > deadline) throw new Error(`no answer from ${url}: ${e.message}`);
      await sleep(200);
    }
  }
}

const stepText = (s) => `step ${s.number}/${s.steps} · ${s.scope.variant} · ${s.load}`;

// What the page shows now, as numbers where it keeps them.
function shown(page) {
  return page.evaluate(() => {
    const num = (id) => Number(document.getElementById(id).dataset.value);
    return {
      seq: Number(document.body.dataset.seq),
      boardSeq: Number(document.body.dataset.boardSeq),
      rps: num('rps'),
      rpsText: document.getElementById('rps').textContent,
      p50: num('p50'),
      p99: num('p99'),
      p99Text: document.getElementById('p99').textContent,
      step: document.getElementById('step').textContent,
      status: document.getElementById('status').textContent,
      leftStep: document.getElementById('left-step').textContent,
      leftAll: document.getElementById('left-all').textContent,
      paths: document.querySelectorAll('svg.chart path').length,
    };
  });
}

// The page and the stream at the same moment: the stream's answer, and the page once it
// shows that same answer (the page asks on its own, so it may be a change behind or ahead).
async function sample(page) {
  for (let i = 0; i < 10; i++) {
    const v = await board();
    try {
      await page.waitForFunction((seq) => Number(document.body.dataset.boardSeq) >= seq, v.seq, { timeout: 3000 });
    } catch {
      continue;
    }
    const s = await shown(page);
    if (s.boardSeq === v.seq) return [s, v];
  }
  throw new Error('the page never showed the answer the stream gave at the same time');
}

// The page's figures against the stream's answer it shows.
function compare(label, s, v) {
  const frame = v.frames[v.frames.length - 1];
  if (!frame || frame.seq !== s.seq) {
    fail(`${label}: the page shows frame ${s.seq}, the stream's last is ${frame && frame.seq}`);
    return;
  }
  if (s.rps !== frame.requests) fail(`${label}: page rps ${s.rps}, stream ${frame.requests}`);
  if (s.p50 !== frame.p50_us) fail(`${label}: page p50 ${s.p50} µs, stream ${frame.p50_us}`);
  if (s.p99 !== frame.p99_us) fail(`${label}: page p99 ${s.p99} µs, stream ${frame.p99_us}`);
  // The text is the same number, formatted.
  const text = Number(s.rpsText.replace(/,/g, ''));
  if (text !== frame.requests) fail(`${label}: page shows "${s.rpsText}" for ${frame.requests} req/s`);
  const ms = parseFloat(s.p99Text) * (s.p99Text.endsWith(' s') ? 1000 : 1);
  if (!(Math.abs(ms - frame.p99_us / 1000) <= Math.max(0.0011, (frame.p99_us / 1000) * 0.01))) {
    fail(`${label}: page shows p99 "${s.p99Text}" for ${frame.p99_us} µs`);
  }
  const step = v.current || v.steps[v.steps.length - 1];
  if (s.step !== stepText(step)) fail(`${label}: page shows "${s.step}", stream says "${stepText(step)}"`);
  if (s.paths < 3) fail(`${label}: only ${s.paths} lines drawn in the charts`);
  seen.samples.push({ label, seq: s.seq, rps: s.rps, p99_us: s.p99, step: s.step });
}

const profile = mkdtempSync(join(tmpdir(), 'meshbench-chromium-'));
let context;
try {
  await serverUp();
  context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.MESHBENCH_CHROMIUM || '/usr/bin/chromium',
    headless: true,
    viewport: { width: 1280, height: 1000 },
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  const page = context.pages()[0] || (await context.newPage());
  page.on('console', (m) => {
    if (m.type() === 'error' || m.type() === 'warning') seen.consoleErrors.push(`${m.type()}: ${m.text()}`);
  });
  page.on('pageerror', (e) => seen.pageErrors.push(String(e)));
  page.on('requestfailed', (r) => seen.failedRequests.push(`${r.url()}: ${r.failure()?.errorText}`));
  page.setDefaultTimeout(Math.max(1000, deadline - Date.now()));

  await page.goto(url, { waitUntil: 'load' });
  // Data: at least three frames on the page.
  await page.waitForFunction(() => Number(document.body.dataset.seq) > 0 && document.querySelectorAll('svg.chart path').length >= 3);

  // Twice while the run goes (unless it ended already), a second apart.
  for (const label of ['running-1', 'running-2']) {
    const [s, v] = await sample(page);
    if (v.done) break;
    compare(label, s, v);
    if (!/running|between/.test(s.status)) fail(`${label}: status "${s.status}" while the run goes`);
    if (!/^\d+(s|m\d\ds|h\d\dm)$|^between steps$/.test(s.leftStep)) fail(`${label}: time left in step "${s.leftStep}"`);
    await sleep(1100);
  }

  // The end.
  await page.waitForSelector('#ended:not([hidden])');
  const [s, v] = await sample(page);
  compare('ended', s, v);
  const end = await page.evaluate(() => ({
    outcome: document.getElementById('outcome').textContent,
    status: document.getElementById('status').textContent,
    link: document.getElementById('report-link').hidden ? null : document.getElementById('report-link').getAttribute('href'),
    linkText: document.getElementById('report-link').textContent,
    title: document.title,
  }));
  seen.end = end;
  if (!v.done) fail('the page says the run ended; the stream does not');
  else if (end.outcome !== v.done.outcome) fail(`page outcome "${end.outcome}", stream "${v.done.outcome}"`);
  if (!/^ended/.test(end.status)) fail(`status "${end.status}" after the end`);
  if (expectReport) {
    if (end.link !== '/report') fail(`no report link at the end (${JSON.stringify(end)})`);
    else {
      const r = await page.request.get(new URL(end.link, base).href);
      const bytes = await r.body();
      const body = bytes.toString('utf8');
      if (r.status() !== 200 || !/<html/i.test(body) || !/<svg/i.test(body)) {
        fail(`the report link answered ${r.status()} with ${body.length} bytes, not the HTML report`);
      }
      seen.end.reportBytes = bytes.length;
    }
  }
  await page.screenshot({ path: shot, fullPage: true });
} catch (e) {
  fail(String(e && e.stack ? e.stack : e));
} finally {
  if (context) await context.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
}
for (const e of seen.consoleErrors) fail(`console ${e}`);
for (const e of seen.pageErrors) fail(`page error: ${e}`);
for (const e of seen.failedRequests) fail(`request failed: ${e}`);
console.log(JSON.stringify(seen));
if (failures.length) {
  console.error(failures.map((f) => 'FAIL ' + f).join('\n'));
  process.exit(1);
}
