// SPDX-License-Identifier: MIT
// N WebSocket clients of `volrec view` that subscribe to the four panes' pictures and only count
// them (no decoding, no drawing): the viewer's own load without a browser's, for
// bench/view_bench.py. Prints "ready" once every socket has had a picture, then, after SECONDS,
// one JSON line: per socket, per picture kind, frames and bytes received.
//
//   node --experimental-websocket bench/view_sockets.js ws://127.0.0.1:PORT/ws N SECONDS
'use strict';

const KINDS = ['enface_mean', 'enface_max', 'bscan', 'slice', 'plane', 'render'];
const [url, n, seconds] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4])];
if (!url || !(n > 0) || !(seconds > 0)) {
  process.stderr.write('usage: view_sockets.js WS_URL N SECONDS\n');
  process.exit(2);
}

const counts = [];
let ready = 0;
let started = false;

function start() {
  started = true;
  process.stdout.write('ready\n');
  for (const c of counts) for (const k of Object.keys(c)) c[k] = { frames: 0, bytes: 0 };
  const t0 = performance.now();
  setTimeout(() => {
    const dt = (performance.now() - t0) / 1000;
    process.stdout.write(`${JSON.stringify({ seconds: dt, sockets: counts })}\n`);
    process.exit(0);
  }, seconds * 1000);
}

for (let i = 0; i < n; i++) {
  const c = {};
  counts.push(c);
  const ws = new WebSocket(url, 'volrec-view');
  ws.binaryType = 'arraybuffer';
  let first = true;
  ws.onmessage = (ev) => {
    if (typeof ev.data === 'string') {
      if (JSON.parse(ev.data).type === 'hello') {
        ws.send(JSON.stringify({ type: 'subscribe', views: ['enface_mean', 'bscan', 'slice', 'render'] }));
      }
      return;
    }
    const kind = KINDS[new Uint8Array(ev.data, 8, 1)[0]];
    c[kind] = c[kind] || { frames: 0, bytes: 0 };
    c[kind].frames++;
    c[kind].bytes += ev.data.byteLength;
    if (first) {
      first = false;
      if (++ready === n && !started) start();
    }
  };
  ws.onerror = (e) => {
    process.stderr.write(`socket ${i}: ${e.message || 'error'}\n`);
    process.exit(1);
  };
}
