// SPDX-License-Identifier: MIT
// A line-oriented driver of Debian's chromium through playwright-core, for the viewer's tests
// (tests/integration/test_view_browser.py) and benchmark (bench/view_bench.py). It reads one
// JSON command per line on stdin and answers each with one JSON line on stdout:
//   {"op": "open", "url": U, "width": W, "height": H}  -> {"ok": true, "page": N}
//   {"op": "eval", "page": N, "expr": JS}               -> {"ok": true, "value": ...}
//   {"op": "wait", "page": N, "expr": JS, "timeout_ms": T} (until expr is truthy)
//   {"op": "click", "page": N, "selector": S, "x": fx, "y": fy}   (fractions of the element,
//     scrolled into view first)
//   {"op": "drag", "page": N, "selector": S, "from": [fx, fy], "to": [fx, fy]}
//   {"op": "select", "page": N, "selector": S, "value": V}
//   {"op": "fill", "page": N, "selector": S, "value": V}  (a range input, then "change")
//   {"op": "screenshot", "page": N, "path": P}
//   {"op": "resize", "page": N, "width": W, "height": H}  (the window: a "resize" event)
//   {"op": "press", "page": N, "key": K}  (a key, as the keyboard sends it to the page)
//   {"op": "wheel", "page": N, "selector": S, "dy": D}  (the mouse over the element, a wheel turn)
//   {"op": "move", "page": N, "selector": S, "x": fx, "y": fy}  (the mouse moved over the
//     element to fractions of it, no button)
//   {"op": "reload", "page": N}  (the same page loaded again, its storage kept)
//   {"op": "close", "page": N}, {"op": "quit"}
//   {"op": "errors", "pages": [N, ...]}  -> the page errors and console errors seen since the
//     last such call, of those pages only (open or closed since), or of every page without
//     "pages"
// A command may carry "id": its answer carries the same id, so that a caller that gave up
// waiting for one answer (a test's time limit) can tell a late answer from the next one's.
// Playwright's own limit on an action (click, fill, select, ...) is 60 s times
// VOLREC_TEST_TIMEOUT_SCALE: a generous bound for a loaded machine, not an expected time.
// The browser: /usr/bin/chromium (CHROMIUM overrides), headless, no sandbox (a container), no
// GPU, no network beyond the page, a new empty profile; nothing is downloaded. Each page opens
// in its own browser context (its own window, cookies and storage), as if each were another
// person's browser. A page that fails to load (a refused connection, a timeout) is closed
// with its context before the error is answered: it leaves nothing running behind.
'use strict';

const readline = require('readline');
const { chromium } = require('playwright-core');

const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
  '--no-proxy-server', '--ignore-certificate-errors', '--use-angle=swiftshader',
  // every page is drawn as if it were on its own screen: no throttled animation frames or
  // timers for the windows behind the newest
  '--disable-background-timer-throttling', '--disable-backgrounding-occluded-windows',
  '--disable-renderer-backgrounding'];

async function main() {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium', headless: true, args: ARGS,
  });
  const pages = new Map();
  let next = 1;
  const errors = []; // {page, text}
  const scale = Number(process.env.VOLREC_TEST_TIMEOUT_SCALE) > 0 ? Number(process.env.VOLREC_TEST_TIMEOUT_SCALE) : 1;
  let id; // the id of the command being answered
  const out = (o) => process.stdout.write(`${JSON.stringify(id === undefined ? o : { id, ...o })}\n`);

  async function box(page, selector) {
    const b = await page.locator(selector).first().boundingBox();
    if (!b) throw new Error(`${selector}: not visible`);
    return b;
  }

  const rl = readline.createInterface({ input: process.stdin });
  for await (const line of rl) {
    if (!line.trim()) continue;
    let cmd;
    id = undefined;
    try { cmd = JSON.parse(line); } catch (e) { out({ ok: false, error: `not JSON: ${line}` }); continue; }
    id = cmd.id;
    try {
      const page = cmd.page !== undefined ? pages.get(cmd.page) : null;
      if (cmd.page !== undefined && !page) throw new Error(`no page ${cmd.page}`);
      switch (cmd.op) {
        case 'open': {
          const ctx = await browser.newContext({
            ignoreHTTPSErrors: true, bypassCSP: true, viewport: { width: 1280, height: 800 },
          });
          ctx.setDefaultTimeout(60000 * scale);
          const n = next++;
          let resp;
          try {
            const p = await ctx.newPage();
            if (cmd.width) await p.setViewportSize({ width: cmd.width, height: cmd.height || 800 });
            p.on('pageerror', (e) => errors.push({ page: n, text: String(e) }));
            p.on('console', (m) => { if (m.type() === 'error') errors.push({ page: n, text: m.text() }); });
            resp = await p.goto(cmd.url, { waitUntil: 'load', timeout: cmd.timeout_ms || 60000 });
            pages.set(n, p);
          } catch (e) {
            await ctx.close().catch(() => {});
            throw e;
          }
          out({ ok: true, page: n, status: resp ? resp.status() : null });
          break;
        }
        case 'eval':
          out({ ok: true, value: await page.evaluate(cmd.expr) });
          break;
        case 'wait':
          await page.waitForFunction(cmd.expr, null, { timeout: cmd.timeout_ms || 20000, polling: 50 });
          out({ ok: true });
          break;
        case 'click': {
          // an element below the fold (the side bar scrolls) is brought into view first
          await page.locator(cmd.selector).first().scrollIntoViewIfNeeded();
          const b = await box(page, cmd.selector);
          await page.mouse.click(b.x + b.width * cmd.x, b.y + b.height * cmd.y);
          out({ ok: true });
          break;
        }
        case 'drag': {
          const b = await box(page, cmd.selector);
          await page.mouse.move(b.x + b.width * cmd.from[0], b.y + b.height * cmd.from[1]);
          await page.mouse.down();
          await page.mouse.move(b.x + b.width * cmd.to[0], b.y + b.height * cmd.to[1], { steps: 8 });
          await page.mouse.up();
          out({ ok: true });
          break;
        }
        case 'select':
          await page.selectOption(cmd.selector, cmd.value);
          out({ ok: true });
          break;
        case 'fill':
          await page.$eval(cmd.selector, (el, v) => {
            el.value = v;
            el.dispatchEvent(new Event('change'));
          }, String(cmd.value));
          out({ ok: true });
          break;
        case 'resize':
          await page.setViewportSize({ width: cmd.width, height: cmd.height });
          out({ ok: true });
          break;
        case 'press':
          await page.keyboard.press(cmd.key);
          out({ ok: true });
          break;
        case 'wheel': {
          const b = await box(page, cmd.selector);
          await page.mouse.move(b.x + b.width / 2, b.y + b.height / 2);
          await page.mouse.wheel(0, cmd.dy);
          out({ ok: true });
          break;
        }
        case 'move': {
          const b = await box(page, cmd.selector);
          await page.mouse.move(b.x + b.width * cmd.x, b.y + b.height * cmd.y, { steps: 2 });
          out({ ok: true });
          break;
        }
        case 'reload':
          await page.reload({ waitUntil: 'load', timeout: cmd.timeout_ms || 60000 });
          out({ ok: true });
          break;
        case 'screenshot':
          await page.screenshot({ path: cmd.path });
          out({ ok: true });
          break;
        case 'close':
          await page.context().close();
          pages.delete(cmd.page);
          out({ ok: true });
          break;
        case 'errors': {
          const mine = (e) => !cmd.pages || cmd.pages.includes(e.page);
          const value = errors.filter(mine).map((e) => e.text);
          const rest = errors.filter((e) => !mine(e));
          errors.splice(0, errors.length, ...rest);
          out({ ok: true, value });
          break;
        }
        case 'quit':
          out({ ok: true });
          await browser.close();
          // the reader of stdin would keep node alive until the caller closes its end
          process.exit(0);
        default:
          throw new Error(`unknown op ${cmd.op}`);
      }
    } catch (e) {
      out({ ok: false, error: String(e && e.message ? e.message : e) });
    }
  }
  await browser.close();
}

main().catch((e) => { process.stderr.write(`driver: ${e.stack || e}\n`); process.exit(1); });
