// SPDX-License-Identifier: MIT
// volrec view: the page. One WebSocket to the viewer (docs/viewer.md): binary picture frames
// in, JSON messages both ways. Pictures are drawn at their own resolution into an off-screen
// canvas through a colormap, then scaled into the pane; the newest picture of a pane wins.
// window.volrecView exposes what was drawn, for the browser tests and the benchmark.
'use strict';

(function () {
  const KINDS = ['enface_mean', 'enface_max', 'bscan', 'slice', 'plane', 'render'];
  const FRAME_MAGIC = 0x46565256; // "VRVF"
  const $ = (id) => document.getElementById(id);

  // ---- state ---------------------------------------------------------------------------------
  const state = {
    ws: null, connected: false, hello: null, control: false, daemon: 'connecting',
    colormap: 'gray', nextId: 1, pending: new Map(),
    panes: {}, latencies: [], received: {}, replies: [], errors: [], events: [],
    status: null, session: null, position: null, shape: null, angles: [0, 0], slab: null, frameSeq: 0,
  };
  window.volrecView = state;

  // The four panes: which picture each shows and how its pixels map to the screen. A B-scan
  // [X][Z] and a slice [Y][Z] are drawn transposed: depth down, lateral across.
  const PANES = {
    enface: { kind: () => $('enface-kind').value, transpose: false },
    bscan: { kind: () => 'bscan', transpose: true },
    slice: { kind: () => 'slice', transpose: true },
    render: { kind: () => 'render', transpose: false },
  };
  for (const name of Object.keys(PANES)) {
    const canvas = document.querySelector(`canvas[data-pane=${name}]`);
    state.panes[name] = {
      name, canvas, ctx: canvas.getContext('2d'), native: document.createElement('canvas'),
      last: null, shown: null, dirty: false, arrivals: 0,
    };
  }

  // ---- colormaps ------------------------------------------------------------------------------
  function viridis(t) {
    // matplotlib's viridis as a polynomial fit (max error < 1 %, CC0)
    const c = [[0.2777273272234177, 0.005407344544966578, 0.3340998053353061],
      [0.1050930431085774, 1.404613529898575, 1.384590162594685],
      [-0.3308618287255563, 0.214847559468213, 0.09509516302823659],
      [-4.634230498983486, -5.799100973351585, -19.33244095627987],
      [6.228269936347081, 14.17993336680509, 56.69055260068105],
      [4.776384997670288, -13.74514537774601, -65.35303263337234],
      [-5.435455855934631, 4.645852612178535, 26.3124352495832]];
    const out = [0, 0, 0];
    for (let a = 0; a < 3; a++) {
      let v = c[6][a];
      for (let k = 5; k >= 0; k--) v = c[k][a] + t * v;
      out[a] = Math.max(0, Math.min(255, Math.round(v * 255)));
    }
    return out;
  }
  const LUTS = { gray: new Uint32Array(256), viridis: new Uint32Array(256) };
  for (let v = 0; v < 256; v++) {
    const [r, g, b] = viridis(v / 255);
    // ImageData is RGBA in memory: little-endian u32 0xAABBGGRR
    LUTS.gray[v] = (0xff000000 | (v << 16) | (v << 8) | v) >>> 0;
    LUTS.viridis[v] = (0xff000000 | (b << 16) | (g << 8) | r) >>> 0;
  }

  // ---- frames ---------------------------------------------------------------------------------
  function parseHeader(buf) {
    const d = new DataView(buf);
    if (buf.byteLength < 128 || d.getUint32(0, true) !== FRAME_MAGIC) return null;
    const hs = d.getUint16(6, true);
    const f = (o) => d.getFloat32(o, true);
    return {
      version: d.getUint16(4, true), headerSize: hs, kind: KINDS[d.getUint8(8)],
      encoding: d.getUint8(9), rowStep: d.getUint8(10), colStep: d.getUint8(11),
      rows: d.getUint32(12, true), cols: d.getUint32(16, true), payload: d.getUint32(20, true),
      volumeId: Number(d.getBigUint64(24, true)), epoch: Number(d.getBigUint64(32, true)),
      tLastNs: d.getBigUint64(40, true), tPublishNs: d.getBigUint64(48, true),
      tReadNs: d.getBigUint64(56, true), session: d.getBigUint64(64, true).toString(16),
      shape: [d.getUint32(72, true), d.getUint32(76, true), d.getUint32(80, true)],
      slab: [d.getUint32(84, true), d.getUint32(88, true)],
      position: [d.getUint32(92, true), d.getUint32(96, true), d.getUint32(100, true)],
      angles: [f(104), f(108)], spacing: [f(112), f(116), f(120)], step: f(124),
    };
  }

  async function inflate(bytes) {
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('deflate'));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }

  // Whether the picture numbered seq is the newest yet to give what it says of a field.
  const fieldSeq = {};
  const newest = (field, seq) => (seq > (fieldSeq[field] || 0) ? (fieldSeq[field] = seq) : 0);

  const nowNs = () => BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e3)) * 1000n;

  async function onFrame(buf) {
    const h = parseHeader(buf);
    if (!h || !h.kind) { note('a picture frame with a bad header was ignored'); return; }
    // numbered as they arrive: a deflated picture is decoded asynchronously, a raw one at once,
    // so an older picture may finish after a newer one and must not replace it
    const seq = ++state.frameSeq;
    const rx = (state.received[h.kind] ||= { frames: 0, bytes: 0, t0: performance.now() });
    rx.frames++;
    rx.bytes += buf.byteLength;
    let pixels = new Uint8Array(buf, h.headerSize, h.payload);
    if (h.encoding === 1) pixels = await inflate(pixels);
    if (pixels.length !== h.rows * h.cols) { note(`${h.kind}: ${pixels.length} bytes for ${h.rows}×${h.cols}`); return; }
    if (state.session && h.session !== state.session) return; // the session before's
    h.pixels = pixels;
    h.tArrived = performance.now();
    h.seq = seq;
    if (newest('shape', seq)) state.shape = h.shape;
    if (h.kind !== 'render' && newest('position', seq)) state.position = h.position;
    if ((h.kind === 'enface_mean' || h.kind === 'enface_max') && newest('slab', seq)) state.slab = h.slab;
    if (h.kind === 'render' && newest('angles', seq) && !dragging) state.angles = h.angles;
    for (const p of Object.values(state.panes)) {
      if (PANES[p.name].kind() !== h.kind) continue;
      if (p.last && p.last.seq > seq) continue; // a later one finished decoding first
      p.arrivals++;
      p.last = h;
      p.dirty = true;
    }
    syncControls();
    requestDraw();
  }

  // ---- drawing --------------------------------------------------------------------------------
  let drawQueued = false;
  function requestDraw() {
    if (!drawQueued) { drawQueued = true; requestAnimationFrame(draw); }
  }

  function paintNative(p) {
    const h = p.last, tr = PANES[p.name].transpose;
    const w = tr ? h.rows : h.cols, hh = tr ? h.cols : h.rows;
    if (p.native.width !== w || p.native.height !== hh) { p.native.width = w; p.native.height = hh; }
    const nctx = p.native.getContext('2d');
    const img = nctx.createImageData(w, hh);
    const out = new Uint32Array(img.data.buffer), lut = LUTS[state.colormap], src = h.pixels;
    if (!tr) {
      for (let i = 0; i < src.length; i++) out[i] = lut[src[i]];
    } else {
      // picture [rows][cols] -> canvas (x = row, y = col)
      for (let r = 0; r < h.rows; r++) {
        const base = r * h.cols;
        for (let c = 0; c < h.cols; c++) out[c * w + r] = lut[src[base + c]];
      }
    }
    nctx.putImageData(img, 0, 0);
  }

  function fitCanvas(p) {
    const r = p.canvas.getBoundingClientRect(), dpr = window.devicePixelRatio || 1;
    const w = Math.max(1, Math.round(r.width * dpr)), h = Math.max(1, Math.round(r.height * dpr));
    if (p.canvas.width !== w || p.canvas.height !== h) { p.canvas.width = w; p.canvas.height = h; }
  }

  function line(ctx, x0, y0, x1, y1, color, dash) {
    ctx.save();
    ctx.strokeStyle = color; ctx.lineWidth = 1; ctx.setLineDash(dash || []);
    ctx.beginPath(); ctx.moveTo(x0 + 0.5, y0 + 0.5); ctx.lineTo(x1 + 0.5, y1 + 0.5); ctx.stroke();
    ctx.restore();
  }

  // Overlays in picture coordinates u (across) and v (down), each in [0, 1].
  function overlay(p) {
    const ctx = p.ctx, W = p.canvas.width, H = p.canvas.height, h = p.last;
    const pos = state.position, sh = h.shape;
    if (!pos || !sh) return;
    const [Y, X, Z] = sh;
    const cross = 'rgba(255, 64, 64, 0.85)', slab = 'rgba(79, 195, 247, 0.8)';
    if (p.name === 'enface') {
      line(ctx, (pos[1] + 0.5) / X * W, 0, (pos[1] + 0.5) / X * W, H, cross);
      line(ctx, 0, (pos[0] + 0.5) / Y * H, W, (pos[0] + 0.5) / Y * H, cross);
    } else if (p.name === 'bscan' || p.name === 'slice') {
      const n = p.name === 'bscan' ? X : Y, at = p.name === 'bscan' ? pos[1] : pos[0];
      line(ctx, (at + 0.5) / n * W, 0, (at + 0.5) / n * W, H, cross);
      line(ctx, 0, (pos[2] + 0.5) / Z * H, W, (pos[2] + 0.5) / Z * H, cross, [4, 4]);
      if (state.slab) {
        line(ctx, 0, state.slab[0] / Z * H, W, state.slab[0] / Z * H, slab, [2, 3]);
        line(ctx, 0, state.slab[1] / Z * H, W, state.slab[1] / Z * H, slab, [2, 3]);
      }
    }
  }

  function draw() {
    drawQueued = false;
    for (const p of Object.values(state.panes)) {
      if (!p.last) continue;
      fitCanvas(p);
      if (p.dirty || p.shown !== p.last || p.cmap !== state.colormap) paintNative(p);
      p.ctx.imageSmoothingEnabled = true;
      p.ctx.drawImage(p.native, 0, 0, p.canvas.width, p.canvas.height);
      overlay(p);
      if (p.dirty && p.last.tLastNs > 0n) {
        const ms = Number(nowNs() - p.last.tLastNs) / 1e6;
        p.last.drawnLatencyMs = ms;
        const pubMs = p.last.tPublishNs > 0n ? Number(nowNs() - p.last.tPublishNs) / 1e6 : null;
        state.latencies.push({ kind: p.last.kind, volumeId: p.last.volumeId, ms, pubMs,
          arrivedToDrawnMs: performance.now() - p.last.tArrived, t: performance.now() });
        if (state.latencies.length > 20000) state.latencies.splice(0, 10000);
      }
      p.dirty = false;
      p.shown = p.last;
      p.cmap = state.colormap;
      foot(p);
    }
  }

  // The daemon reads another session now: pictures of the one before are no longer shown (a
  // daemon restarted without views, or with another geometry, sends none or others).
  function clearPanes(session) {
    for (const p of Object.values(state.panes)) {
      if (!p.last || p.last.session === session) continue;
      p.last = null; p.shown = null; p.dirty = false;
      p.ctx.clearRect(0, 0, p.canvas.width, p.canvas.height);
      $(`foot-${p.name}`).textContent = '–';
    }
  }

  function foot(p) {
    const h = p.last;
    // a picture of a daemon that stopped has no age to show: it is the last one, not live
    const age = state.daemon !== 'connected' ? `– (volrecd ${state.daemon})`
      : h.tLastNs > 0n ? `${(Number(nowNs() - h.tLastNs) / 1e6).toFixed(0)} ms` : '–';
    const red = h.rowStep > 1 || h.colStep > 1 ? ` (÷${h.rowStep}×${h.colStep})` : '';
    let extra = '';
    if (h.kind === 'render') extra = ` · az ${h.angles[0].toFixed(0)}° el ${h.angles[1].toFixed(0)}°`;
    if (h.kind === 'enface_mean' || h.kind === 'enface_max') extra = ` · slab ${h.slab[0]}–${h.slab[1]}`;
    if (h.kind === 'plane') extra = ` · z ${h.position[2]}`;
    $(`foot-${p.name}`).textContent =
      `volume ${h.volumeId} · age ${age} · ${h.rows}×${h.cols}${red}` +
      ` · ${h.encoding === 1 ? 'deflate' : 'raw'} ${(h.payload / 1024).toFixed(1)} KiB${extra}`;
  }

  // A resize draws the same pictures again at the new size: no new picture, no latency.
  window.addEventListener('resize', requestDraw);

  // ---- messages -------------------------------------------------------------------------------
  function note(text) {
    $('message').textContent = text;
  }

  // "name: message", except where the message begins with its name already ("set KEYS by
  // WHO", "stopping: draining the pipeline"): the daemon writes those for its log
  function eventText(ev) {
    const name = ev.event || 'event', msg = String(ev.message);
    const named = msg.startsWith(name) && (msg[name.length] === ':' || msg[name.length] === ' ');
    return named ? msg : `${name}: ${msg}`;
  }

  function send(obj) {
    if (state.ws && state.ws.readyState === WebSocket.OPEN) { state.ws.send(JSON.stringify(obj)); return true; }
    return false;
  }

  // A request with an id; resolves with the reply (ok or not).
  function request(obj) {
    const id = state.nextId++;
    return new Promise((resolve) => {
      if (!send({ ...obj, id })) { resolve({ ok: false, error: 'not connected to the viewer' }); return; }
      state.pending.set(id, resolve);
    });
  }

  function subscribe() {
    const views = Object.values(PANES).map((p) => p.kind());
    send({ type: 'subscribe', views: [...new Set(views)] });
  }

  function onText(text) {
    let m;
    try { m = JSON.parse(text); } catch (e) { note('the viewer sent a message that is not JSON'); return; }
    switch (m.type) {
      case 'hello':
        state.hello = m;
        state.control = !!m.control;
        $('instance').textContent = m.instance;
        $('s-access').textContent = m.control ? 'view + control' : 'view only';
        $('s-access').title = m.control ? '' : 'to control, open the address (with ?token=...) ' +
          'that volrec view printed at start, or its control token';
        document.body.classList.toggle('readonly', !m.control);
        subscribe();
        loadControls();
        break;
      case 'state': {
        state.daemon = m.state.state;
        setState(m.state.state, m.state.message);
        if (m.state.session) { state.session = m.state.session; clearPanes(m.state.session); }
        if (m.state.views === false) { $('state').textContent = 'live, no pictures'; note(m.state.message); }
        break;
      }
      case 'status':
        onStatus(m.status);
        break;
      case 'event':
        state.events.push(m.event);
        if (m.event && m.event.message) note(eventText(m.event));
        // another browser (or volrec set, a reload, a daemon started again perhaps with another
        // configuration) changed the dB range: the sliders show it
        if (m.event && (m.event.event === 'reloaded' || m.event.event === 'started' ||
            (m.event.event === 'set' && String(m.event.keys).includes('preprocess.db_range')))) loadControls();
        break;
      case 'reply':
      case 'error': {
        if (m.type === 'error') { state.errors.push(m); note(m.error); }
        else state.replies.push(m);
        if (m.type === 'reply' && !m.ok) note(m.error);
        const done = m.id !== undefined && state.pending.get(m.id);
        if (done) { state.pending.delete(m.id); done(m.type === 'error' ? { ...m, ok: false } : m); }
        break;
      }
      case 'pong':
        break;
      default:
        note(`the viewer sent an unknown message '${m.type}'`);
    }
  }

  function setState(s, text) {
    const el = $('state');
    el.className = `chip state-${s}`;
    el.textContent = s === 'connected' ? 'live' : s;
    el.title = text || '';
    if (s !== 'connected' && text) note(text);
    if (s === 'connected') return;
    // no daemon, no rates: the last figures would read as live ones
    for (const id of ['s-vps', 's-aps', 's-lat', 's-drawn']) $(id).textContent = '–';
    for (const p of Object.values(state.panes)) if (p.last) foot(p);
  }

  // ---- status and plots -------------------------------------------------------------------------
  const fmt = (v, unit) => {
    if (v === undefined || v === null || Number.isNaN(v)) return '–';
    if (v >= 1e6) return `${(v / 1e6).toFixed(2)} M${unit || ''}`;
    if (v >= 1e4) return `${(v / 1e3).toFixed(1)} k${unit || ''}`;
    return `${+v.toFixed(v < 10 ? 2 : 1)}${unit || ''}`;
  };
  const series = { t: [], vps: [], pics: [], lat99: [], drawn: [] };
  let plotRate = null, plotLat = null;

  function makePlots() {
    if (typeof uPlot === 'undefined') return;
    const w = $('plot-rate').clientWidth || 300;
    const axes = [{ stroke: '#8a949e', grid: { stroke: '#2c333b' }, values: (u, v) => v.map((s) => `${s.toFixed(0)}s`) },
      { stroke: '#8a949e', grid: { stroke: '#2c333b' }, space: 18 }]; // y: a tick every 18 px at least
    const plot = (id, ...lines) => new uPlot({ width: w, height: 110, scales: { x: { time: false } }, axes,
      legend: { live: false }, series: [{}, ...lines] }, [[], [], []], $(id));
    plotRate = plot('plot-rate', { label: 'volumes/s', stroke: '#4fc3f7' }, { label: 'pictures/s (4 panes)', stroke: '#81c784' });
    plotLat = plot('plot-lat', { label: 'acq→publish p99', stroke: '#ffb74d' }, { label: 'acq→drawn', stroke: '#ef5350' });
  }

  function recentDrawn() {
    const since = performance.now() - 1000, v = [];
    for (let i = state.latencies.length - 1; i >= 0 && state.latencies[i].t >= since; i--) v.push(state.latencies[i].ms);
    v.sort((a, b) => a - b);
    return v.length ? v[Math.floor(0.5 * (v.length - 1))] : null;
  }

  // Pictures drawn per second over the last 2 s: a status interval (a fraction of a second)
  // holds too few pictures for a steady figure.
  function recentPicturesPerS() {
    const spanMs = 2000, since = performance.now() - spanMs;
    let n = 0;
    for (let i = state.latencies.length - 1; i >= 0 && state.latencies[i].t >= since; i--) n++;
    return n / (spanMs / 1000);
  }

  function onStatus(st) {
    state.status = st;
    const r = st.rates || {}, lat = (st.latency_ms || {}).acquire_to_publish || {};
    $('s-vps').textContent = fmt(r.volumes_per_s);
    $('s-aps').textContent = fmt(r.ascans_per_s);
    $('s-lat').textContent = lat.p99 !== undefined && lat.p99 !== null
      ? `${fmt(lat.p50)} / ${fmt(lat.p99)} ms` : '–';
    $('s-drops').textContent = st.drops ? st.drops.total : '–';
    $('s-readers').textContent = st.readers ?? '–';
    const drawn = recentDrawn();
    $('s-drawn').textContent = drawn === null ? '–' : `${drawn.toFixed(0)} ms`;
    const now = performance.now() / 1000;
    const pps = recentPicturesPerS();
    series.t.push(now); series.vps.push(r.volumes_per_s ?? null); series.pics.push(pps);
    series.lat99.push(lat.p99 ?? null); series.drawn.push(drawn);
    while (series.t.length && series.t[0] < now - 60) for (const k of Object.keys(series)) series[k].shift();
    if (!plotRate) makePlots();
    if (plotRate) {
      const rel = series.t.map((t) => t - now);
      plotRate.setData([rel, series.vps, series.pics]);
      plotLat.setData([rel, series.lat99, series.drawn]);
    }
  }

  // ---- controls -----------------------------------------------------------------------------------
  let dragging = null, angleBusy = false, angleNext = null;

  async function loadControls() {
    const r = await request({ type: 'get', key: 'preprocess.db_range' });
    const held = document.activeElement === $('db-lo') || document.activeElement === $('db-hi');
    if (r.ok && r.reply && typeof r.reply.value === 'string' && !held) {
      try {
        const v = JSON.parse(r.reply.value);
        // the sliders reach the daemon's range whatever it is (the file allows -400..400 dB,
        // fractions too): a value beyond them or between their steps is never changed silently
        const fine = !Number.isInteger(v[0]) || !Number.isInteger(v[1]);
        for (const id of ['db-lo', 'db-hi']) {
          $(id).min = Math.min(0, Math.floor(v[0])); $(id).max = Math.max(150, Math.ceil(v[1]));
          $(id).step = fine ? 'any' : '1';
        }
        $('db-lo').value = v[0]; $('db-hi').value = v[1];
        $('db-text').textContent = `${v[0]}–${v[1]} dB`;
      } catch (e) { /* not a flow list: leave the sliders */ }
    }
  }

  function syncControls() {
    const sh = state.shape;
    if (sh) {
      for (const id of ['slab-a', 'slab-b']) $(id).max = sh[2];
    }
    if (state.slab && document.activeElement !== $('slab-a') && document.activeElement !== $('slab-b')) {
      $('slab-a').value = state.slab[0]; $('slab-b').value = state.slab[1];
      $('slab-text').textContent = `${state.slab[0]}–${state.slab[1]}`;
    }
  }

  // A set the daemon refused only because another change was being applied ("retry": true) is
  // sent again 50 ms later, for up to 5 s, unless a newer set of the same keys was made since.
  const setGeneration = new Map();
  let setSequence = 0;
  async function set(values) {
    const gen = ++setSequence, keys = Object.keys(values), deadline = performance.now() + 5000;
    keys.forEach((k) => setGeneration.set(k, gen));
    for (;;) {
      const r = await request({ type: 'set', values });
      const busy = !r.ok && r.reply && r.reply.retry === true;
      if (!busy || performance.now() > deadline) {
        if (!r.ok) note(r.error || 'refused');
        return r;
      }
      await new Promise((resolve) => setTimeout(resolve, 50));
      if (keys.some((k) => setGeneration.get(k) !== gen)) return { ok: false, superseded: true };
    }
  }

  function picturePoint(p, ev) {
    const r = p.canvas.getBoundingClientRect();
    return [(ev.clientX - r.left) / r.width, (ev.clientY - r.top) / r.height];
  }

  // A click on a picture moves the view's position: place(u, v, shape, position) gives the new
  // one from the point (0..1 across and down); cell(t, n) is the index of t of n.
  function onPictureClick(pane, place) {
    pane.canvas.addEventListener('click', (ev) => {
      const sh = state.shape, pos = state.position;
      if (!sh || !pos || !state.control) return;
      const [u, v] = picturePoint(pane, ev);
      const p = place(u, v, sh, pos);
      state.position = p;
      requestDraw();
      set({ 'view.position': [...p] });
    });
  }
  const cell = (t, n) => Math.min(n - 1, Math.max(0, Math.floor(t * n)));
  onPictureClick(state.panes.enface, (u, v, sh, pos) => [cell(v, sh[0]), cell(u, sh[1]), pos[2]]);
  onPictureClick(state.panes.bscan, (u, v, sh, pos) => [pos[0], cell(u, sh[1]), cell(v, sh[2])]);

  // Render rotation: one set in flight, the newest angles sent when it is answered.
  async function sendAngles(a) {
    if (angleBusy) { angleNext = a; return; }
    angleBusy = true;
    await set({ 'view.render.angles_deg': [Math.round(a[0] * 10) / 10, Math.round(a[1] * 10) / 10] });
    angleBusy = false;
    if (angleNext) { const n = angleNext; angleNext = null; sendAngles(n); }
  }

  const rc = state.panes.render.canvas;
  rc.addEventListener('pointerdown', (ev) => {
    if (!state.control) return;
    dragging = { x: ev.clientX, y: ev.clientY, a: [...state.angles] };
    rc.setPointerCapture(ev.pointerId);
    rc.style.cursor = 'grabbing';
  });
  rc.addEventListener('pointermove', (ev) => {
    if (!dragging) return;
    let az = dragging.a[0] + (ev.clientX - dragging.x) * 0.5;
    const el = Math.max(-90, Math.min(90, dragging.a[1] - (ev.clientY - dragging.y) * 0.5));
    az = ((az + 180) % 360 + 360) % 360 - 180;
    state.angles = [az, el];
    sendAngles([az, el]);
  });
  const endDrag = () => { dragging = null; rc.style.cursor = ''; };
  rc.addEventListener('pointerup', endDrag);
  rc.addEventListener('pointercancel', endDrag);

  // Two sliders of one range [lo, hi] of key: the one moved past the other pushes it along.
  function rangeInputs(loId, hiId, textId, unit, key) {
    function changed() {
      let lo = +$(loId).value, hi = +$(hiId).value;
      if (lo >= hi) { if (this === $(loId)) lo = hi - 1; else hi = lo + 1; }
      $(loId).value = lo; $(hiId).value = hi;
      $(textId).textContent = `${lo}–${hi}${unit}`;
      set({ [key]: [lo, hi] });
    }
    $(loId).addEventListener('change', changed);
    $(hiId).addEventListener('change', changed);
  }
  rangeInputs('db-lo', 'db-hi', 'db-text', ' dB', 'preprocess.db_range');
  rangeInputs('slab-a', 'slab-b', 'slab-text', '', 'view.slab');

  $('colormap').addEventListener('change', () => { state.colormap = $('colormap').value; requestDraw(); });
  $('enface-kind').addEventListener('change', () => { state.panes.enface.last = null; subscribe(); });

  // ---- the connection ---------------------------------------------------------------------------------
  const token = new URLSearchParams(location.search).get('token');
  let backoff = 500;

  function connect() {
    const url = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/ws` +
      (token ? `?token=${encodeURIComponent(token)}` : '');
    const ws = new WebSocket(url, 'volrec-view');
    ws.binaryType = 'arraybuffer';
    state.ws = ws;
    ws.onopen = () => { state.connected = true; backoff = 500; note(''); };
    ws.onmessage = (ev) => {
      if (typeof ev.data === 'string') onText(ev.data);
      else onFrame(ev.data);
    };
    ws.onclose = () => {
      state.connected = false;
      setState('offline', 'no connection to the viewer; retrying');
      for (const done of state.pending.values()) done({ ok: false, error: 'connection lost' });
      state.pending.clear();
      setTimeout(connect, backoff);
      backoff = Math.min(5000, backoff * 2);
    };
  }
  connect();
  state.request = request;
  state.set = set;
}());
