// SPDX-License-Identifier: MIT
// volrec view: the page (docs/viewer.md "The page"). One WebSocket to the viewer: binary picture
// frames in, JSON messages both ways. Display (window, colour map, smoothing, layout, the 3-D
// camera, mode, transfer function and clipping) belongs to this browser alone, is applied here
// at once and kept in local storage; data settings go to the daemon and need the control token.
// A 2-D picture is drawn at its own resolution through the colour map into an off-screen canvas,
// then into its pane at its true aspect (geometry.js); the volume frame is ray-marched with
// WebGL2 (render3d.js). window.volrecView exposes what was drawn, for the tests and benchmark.
import { COLORMAPS, lut32, percentileWindow } from './colormap.js';
import * as geo from './geometry.js';
import { DEFAULT_CAMERA, DEFAULT_TF, MODE_LABELS, VolumeRenderer } from './render3d.js';

const KINDS = ['enface_mean', 'enface_max', 'bscan', 'slice', 'plane', 'render', 'volume',
  'angio_enface_mean', 'angio_enface_max', 'angio_bscan', 'doppler_enface_mean', 'doppler_enface_max', 'doppler_bscan'];
const CHANNEL_KINDS = ['structure', 'angio', 'doppler'];
const FRAME_MAGIC = 0x46565256; // "VRVF"
const $ = (id) => document.getElementById(id);

// ---- this browser's display, kept across reloads ---------------------------------------------
const STORE = 'volrec.view.display.v1';
const DISPLAY_DEFAULTS = {
  colormap: 'gray', window: null, smooth: false, layout: 'four', mode: 'mida',
  camera: { ...DEFAULT_CAMERA }, tf: DEFAULT_TF.map((p) => ({ ...p })), iso: 0.5, gamma: 0.5,
  clip: [[0, 1], [0, 1], [0, 1]],
  // the functional pictures: the angiography pane's picture, colour map and window (u8 levels);
  // the Doppler overlay on the B-scan and its threshold (mm/s, rad where the velocity is
  // unknown; null: a tenth of the channel's range)
  angio: { picture: 'angio_enface_mean', colormap: 'angio', window: null },
  doppler: { on: true, threshold: null },
};
function loadDisplay() {
  let saved = {};
  try { saved = JSON.parse(localStorage.getItem(STORE) || '{}') || {}; } catch (e) { saved = {}; }
  const d = { ...structuredClone(DISPLAY_DEFAULTS), ...saved };
  if (!COLORMAPS[d.colormap]) d.colormap = 'gray';
  if (!MODE_LABELS[d.mode]) d.mode = 'mida';
  if (!Array.isArray(d.window) || !(d.window[0] < d.window[1])) d.window = null;
  d.angio = { ...DISPLAY_DEFAULTS.angio, ...(saved.angio || {}) };
  d.doppler = { ...DISPLAY_DEFAULTS.doppler, ...(saved.doppler || {}) };
  if (!COLORMAPS[d.angio.colormap] || COLORMAPS[d.angio.colormap].kind === 'signed') d.angio.colormap = 'angio';
  if (!['angio_enface_mean', 'angio_enface_max'].includes(d.angio.picture)) d.angio.picture = 'angio_enface_mean';
  if (!Array.isArray(d.angio.window) || !(d.angio.window[0] < d.angio.window[1])) d.angio.window = null;
  if (!(Number.isFinite(d.doppler.threshold) && d.doppler.threshold >= 0)) d.doppler.threshold = null;
  return d;
}
function saveDisplay() {
  try { localStorage.setItem(STORE, JSON.stringify(state.display)); } catch (e) { /* private mode: not kept */ }
}

const state = {
  ws: null, connected: false, hello: null, control: false, daemon: 'connecting',
  nextId: 1, pending: new Map(), paused: false,
  panes: {}, latencies: [], received: {}, replies: [], errors: [], events: [],
  status: null, session: null, position: null, shape: null, voxelUm: null, slab: null, frameSeq: 0,
  display: loadDisplay(), autoWindow: null, dbRange: null, warning: null,
  volume3d: { shown: null, renderer: null, error: null, frameMs: [], draws: 0 },
  // the functional channels: each one's meaning from its newest frame (angio, doppler), whether
  // the angiography pane is shown, the Doppler B-scans held for the overlay and the read-out
  channels: {}, haveAngio: false, autoAngio: null,
  doppler: { frames: [], last: null, readout: null, hover: null },
};
window.volrecView = state;
// kept for the tests written against the first page
Object.defineProperty(state, 'colormap', { get: () => state.display.colormap });

// The three 2-D panes: which picture each shows; B-scans [X][Z] and slices [Y][Z] are drawn
// transposed (depth down, lateral across).
const PANES = {
  enface: { kind: () => $('enface-kind').value, transpose: false },
  bscan: { kind: () => 'bscan', transpose: true },
  slice: { kind: () => 'slice', transpose: true },
  angio: { kind: () => state.display.angio.picture, transpose: false },
};
for (const name of Object.keys(PANES)) {
  const canvas = document.querySelector(`canvas[data-pane=${name}]`);
  state.panes[name] = {
    name, canvas, ctx: canvas.getContext('2d'), native: document.createElement('canvas'),
    scalebarEl: canvas.parentElement.querySelector('.scalebar'),
    last: null, shown: null, held: null, dirty: false, arrivals: 0, rect: null, ruler: null, scaleBar: null,
  };
}
const paneVisible = (name) => {
  const el = $(`pane-${name}`);
  return el && getComputedStyle(el).display !== 'none';
};

// ---- frames ---------------------------------------------------------------------------------
function parseHeader(buf) {
  if (buf.byteLength < 128) return null;
  const d = new DataView(buf);
  if (d.getUint32(0, true) !== FRAME_MAGIC) return null;
  const version = d.getUint16(4, true), hs = d.getUint16(6, true);
  if ((version !== 1 && version !== 2) || hs > buf.byteLength || hs < 128) return { bad: `frame version ${version}` };
  const f = (o) => d.getFloat32(o, true);
  const h = {
    version, headerSize: hs, kind: KINDS[d.getUint8(8)],
    encoding: d.getUint8(9), rowStep: d.getUint8(10), colStep: d.getUint8(11),
    rows: d.getUint32(12, true), cols: d.getUint32(16, true), payload: d.getUint32(20, true),
    volumeId: Number(d.getBigUint64(24, true)), epoch: Number(d.getBigUint64(32, true)),
    tLastNs: d.getBigUint64(40, true), tPublishNs: d.getBigUint64(48, true),
    tReadNs: d.getBigUint64(56, true), session: d.getBigUint64(64, true).toString(16),
    shape: [d.getUint32(72, true), d.getUint32(76, true), d.getUint32(80, true)],
    slab: [d.getUint32(84, true), d.getUint32(88, true)],
    position: [d.getUint32(92, true), d.getUint32(96, true), d.getUint32(100, true)],
    angles: [f(104), f(108)], spacing: [f(112), f(116), f(120)], step: f(124),
    voxelUm: [0, 0, 0], pixelUm: [0, 0, 0], planes: 1, factors: null, reduce: 0,
  };
  if (version >= 2 && hs >= 193) {
    const g = (o) => d.getFloat64(o, true);
    h.voxelUm = [g(128), g(136), g(144)];
    h.pixelUm = [g(152), g(160), g(168)];
    h.planes = d.getUint32(176, true);
    h.factors = [d.getUint32(180, true), d.getUint32(184, true), d.getUint32(188, true)];
    h.reduce = d.getUint8(192);
  }
  // a channel's picture: what its u8 values mean (docs/viewer.md, offsets 193..256)
  if (d.getUint8(8) >= 7 && hs >= 256) {
    const g = (o) => d.getFloat64(o, true);
    const units = new Uint8Array(buf, 232, 16);
    const n = units.indexOf(0);
    h.channel = {
      kind: CHANNEL_KINDS[d.getUint8(193)], method: d.getUint8(194), flags: d.getUint8(195),
      halfWindow: d.getUint32(196, true), valueRange: [g(200), g(208)],
      velocityMmS: [g(216), g(224)], units: new TextDecoder().decode(units.subarray(0, n < 0 ? 16 : n)),
      maskDb: g(248),
    };
  }
  return h;
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
  if (!h || !h.kind || h.bad) { note(`a picture frame was ignored: ${h && h.bad ? h.bad : 'bad header'}`, 'error'); return; }
  // numbered as they arrive: a deflated picture is decoded asynchronously, a raw one at once,
  // so an older picture may finish after a newer one and must not replace it
  const seq = ++state.frameSeq;
  const rx = (state.received[h.kind] ||= { frames: 0, bytes: 0, t0: performance.now() });
  rx.frames++;
  rx.bytes += buf.byteLength;
  let pixels = new Uint8Array(buf, h.headerSize, h.payload);
  if (h.encoding === 1) pixels = await inflate(pixels);
  if (pixels.length !== h.rows * h.cols * (h.planes || 1)) {
    note(`${h.kind}: ${pixels.length} bytes for ${h.rows}×${h.cols}×${h.planes}`, 'error');
    return;
  }
  if (state.session && h.session !== state.session) return; // the session before's
  h.pixels = pixels;
  h.tArrived = performance.now();
  h.seq = seq;
  if (newest('shape', seq)) state.shape = h.shape;
  if (h.voxelUm && newest('voxel', seq)) state.voxelUm = h.voxelUm;
  if (h.kind !== 'render' && h.kind !== 'volume' && newest('position', seq) && !positionBusy) state.position = h.position;
  if ((h.kind === 'enface_mean' || h.kind === 'enface_max') && newest('slab', seq)) state.slab = h.slab;
  if (h.kind === 'volume') { onVolume(h); return; }
  if (h.channel) state.channels[h.channel.kind] = h.channel;
  if (h.kind === 'doppler_bscan') { onDoppler(h); return; }
  if (h.kind.startsWith('angio_') && !state.haveAngio) { state.haveAngio = true; showFunctional(); applyLayout(); }
  for (const p of Object.values(state.panes)) {
    if (PANES[p.name].kind() !== h.kind) continue;
    if (state.paused) { if (!p.held || p.held.seq < seq) p.held = h; continue; }
    if (p.last && p.last.seq > seq) continue; // a later one finished decoding first
    p.arrivals++;
    p.last = h;
    p.dirty = true;
  }
  if (h.channel) {
    if (h.channel.kind === 'angio' && !state.display.angio.window && !state.autoAngio) {
      const w = percentileWindow([h.pixels]);
      if (w) { state.autoAngio = w; showAngioWindow(); }
    }
  } else if (!state.display.window && !state.autoWindow) firstWindow(h);
  syncControls();
  requestDraw();
}

// The automatic first window: percentiles of the first pictures, once a cross-section (a B-scan
// or a slice: air and tissue both) is among them or four pictures came; then kept (and stored)
// until this browser changes it.
const firstPictures = new Map();
function firstWindow(h) {
  if (h.kind === 'render') return;
  firstPictures.set(h.kind, h.pixels);
  const section = firstPictures.has('bscan') || firstPictures.has('slice');
  if (!section && firstPictures.size < 4) return;
  const w = percentileWindow([...firstPictures.values()]);
  firstPictures.clear();
  if (w) setWindow(w, true);
}

// ---- drawing the 2-D panes --------------------------------------------------------------------
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
  const [lo, hi] = windowOf(p);
  const out = new Uint32Array(img.data.buffer), lut = lut32(colormapOf(p), lo, hi), src = h.pixels;
  if (!tr) {
    for (let i = 0; i < src.length; i++) out[i] = lut[src[i]];
  } else {
    // picture [rows][cols] -> canvas (x = row, y = col)
    for (let r = 0; r < h.rows; r++) {
      const base = r * h.cols;
      for (let c = 0; c < h.cols; c++) out[c * w + r] = lut[src[base + c]];
    }
  }
  if (p.name === 'bscan') dopplerOverlay(p, out, w);
  nctx.putImageData(img, 0, 0);
  p.paintedWith = displayKey(p);
  p.overlayKey = overlayKey(p);
}

const windowNow = () => state.display.window || state.autoWindow || [0, 255];
const angioWindow = () => state.display.angio.window || state.autoAngio || [0, 255];
const windowOf = (p) => (p && p.name === 'angio' ? angioWindow() : windowNow());
const colormapOf = (p) => (p && p.name === 'angio' ? state.display.angio.colormap : state.display.colormap);
const displayKey = (p) => `${colormapOf(p)}:${windowOf(p).join(':')}`;

// ---- the Doppler overlay ------------------------------------------------------------------------
// What a Doppler u8 q means (docs/protocol.md §2.7): the phase step Δφ = lo + (hi − lo)·q/255
// (rad, [−π, π]) and the axial velocity v_z = v_lo + (v_hi − v_lo)·(Δφ − lo)/(hi − lo) (mm/s,
// positive deeper: away from the probe), null where the daemon does not know it.
function dopplerMeaning(ch) {
  if (!ch) return null;
  const [lo, hi] = ch.valueRange, [vlo, vhi] = ch.velocityMmS;
  const phaseOk = Number.isFinite(lo) && Number.isFinite(hi) && lo !== hi;
  const velOk = phaseOk && Number.isFinite(vlo) && Number.isFinite(vhi) && vlo !== vhi;
  const phase = (q) => (phaseOk ? lo + (hi - lo) * q / 255 : null);
  const velocity = (q) => (velOk ? vlo + (vhi - vlo) * (phase(q) - lo) / (hi - lo) : null);
  const span = velOk ? Math.max(Math.abs(vlo), Math.abs(vhi)) : phaseOk ? Math.max(Math.abs(lo), Math.abs(hi)) : null;
  return { phase, velocity, phaseOk, velOk, unit: velOk ? 'mm/s' : 'rad', span, range: velOk ? [vlo, vhi] : [lo, hi] };
}
state.dopplerMeaning = dopplerMeaning;
const dopplerThreshold = (m) => {
  const t = state.display.doppler.threshold;
  return t === null || t === undefined ? (m && m.span ? m.span / 10 : 0) : t;
};

// A Doppler B-scan: kept (the newest few) so that the overlay pairs each structural B-scan with
// the Doppler B-scan of the same volume, else the newest at the same position.
function onDoppler(h) {
  const d = state.doppler;
  // paused: the overlay stays that of the frozen B-scan; the newest are taken on resuming
  if (state.paused) { d.held = (d.held || []).concat([h]).slice(-8); return; }
  d.frames = d.frames.filter((f) => f.seq < h.seq).concat([h]).slice(-8);
  if (!d.last || d.last.seq < h.seq) d.last = h;
  showFunctional();
  const b = state.panes.bscan;
  if (b.last) b.dirty = true;
  requestDraw();
}
function dopplerFor(bscan) {
  if (!bscan) return null;
  const same = (f) => f.rows === bscan.rows && f.cols === bscan.cols && f.session === bscan.session &&
    f.position[0] === bscan.position[0];
  const fr = state.doppler.frames;
  return fr.find((f) => same(f) && f.volumeId === bscan.volumeId) ||
    [...fr].reverse().find(same) || null;
}
const overlayKey = (p) => {
  if (p.name !== 'bscan') return '';
  const f = state.display.doppler.on ? dopplerFor(p.last) : null;
  return f ? `${f.seq}:${dopplerThreshold(dopplerMeaning(f.channel))}` : 'none';
};

// Over the structure (out: the B-scan painted transposed, depth down, w pixels a row): the
// Doppler colour where |v| (|Δφ| where the velocity is unknown) exceeds this browser's threshold.
function dopplerOverlay(p, out, w) {
  const f = state.display.doppler.on ? dopplerFor(p.last) : null;
  p.overlay = { volumeId: f ? f.volumeId : null, count: 0, threshold: null };
  if (!f) return;
  const m = dopplerMeaning(f.channel);
  if (!m || !m.phaseOk) return;
  const thr = dopplerThreshold(m), lut = lut32('doppler', 0, 255), show = new Uint8Array(256);
  for (let q = 0; q < 256; q++) show[q] = Math.abs(m.velOk ? m.velocity(q) : m.phase(q)) > thr ? 1 : 0;
  const src = f.pixels;
  let count = 0;
  for (let r = 0; r < f.rows; r++) {
    const base = r * f.cols;
    for (let c = 0; c < f.cols; c++) {
      const q = src[base + c];
      if (show[q]) { out[c * w + r] = lut[q]; count++; }
    }
  }
  p.overlay = { volumeId: f.volumeId, count, threshold: thr, unit: m.unit };
}

// The read-out: Δφ and v_z of the Doppler B-scan at the cursor over the B-scan pane, else at
// the crosshair.
function dopplerReadout() {
  const el = $('doppler-readout'), d = state.doppler, b = state.panes.bscan;
  const f = dopplerFor(b.last) || d.last;
  if (!f) { el.hidden = true; d.readout = null; return; }
  el.hidden = false;
  const m = dopplerMeaning(f.channel);
  let row, col, source;
  if (d.hover) {
    row = Math.min(f.rows - 1, Math.max(0, Math.floor(d.hover.u * f.rows)));
    col = Math.min(f.cols - 1, Math.max(0, Math.floor(d.hover.v * f.cols)));
    source = 'cursor';
  } else if (state.position) {
    const fac = f.factors || [1, 1, 1];
    row = Math.min(f.rows - 1, Math.floor(state.position[1] / fac[0]));
    col = Math.min(f.cols - 1, Math.floor(state.position[2] / fac[1]));
    source = 'crosshair';
  } else { el.textContent = 'Doppler: –'; d.readout = null; return; }
  const fac = f.factors || [1, 1, 1];
  const q = f.pixels[row * f.cols + col];
  const phase = m ? m.phase(q) : null, v = m ? m.velocity(q) : null;
  d.readout = { source, row, col, x: row * fac[0], z: col * fac[1], q, phaseRad: phase, velocityMmS: v,
    volumeId: f.volumeId, y: f.position[0] };
  const where = `${source} x ${row * fac[0]} · z ${col * fac[1]}`;
  let text;
  if (v !== null) {
    const dir = v > 0 ? 'away from the probe' : v < 0 ? 'towards the probe' : 'no axial flow';
    text = `Doppler at ${where}: v ${v.toFixed(4)} mm/s (${dir}) · Δφ ${phase.toFixed(3)} rad`;
  } else if (phase !== null) {
    text = `Doppler at ${where}: Δφ ${phase.toFixed(3)} rad (velocity unknown: the daemon has no wavelength or period)`;
  } else text = `Doppler at ${where}: meaning unknown (u8 ${q})`;
  d.readout.text = text;
  if (el.textContent !== text) el.textContent = text;
}

function fitCanvas(canvas) {
  const r = canvas.getBoundingClientRect(), dpr = window.devicePixelRatio || 1;
  const w = Math.max(1, Math.round(r.width * dpr)), h = Math.max(1, Math.round(r.height * dpr));
  if (canvas.width !== w || canvas.height !== h) { canvas.width = w; canvas.height = h; }
  return { w: r.width, h: r.height, dpr };
}

function line(ctx, x0, y0, x1, y1, color, dash, width) {
  ctx.save();
  ctx.strokeStyle = color; ctx.lineWidth = width || 1; ctx.setLineDash(dash || []);
  ctx.beginPath(); ctx.moveTo(x0, y0); ctx.lineTo(x1, y1); ctx.stroke();
  ctx.restore();
}

// Axes with ticks in µm or mm (voxels when the size is unknown) along the left and bottom.
function axes(ctx, p) {
  const r = p.rect, ax = p.axes;
  ctx.save();
  ctx.fillStyle = '#8a949e';
  ctx.strokeStyle = '#8a949e';
  ctx.font = '10px system-ui, sans-serif';
  const tx = geo.ticks(r.physW, r.w, ax.unit), ty = geo.ticks(r.physH, r.h, ax.unit);
  ctx.textAlign = 'center'; ctx.textBaseline = 'top';
  for (const t of tx.list) {
    const x = r.x + t.at * r.scale;
    line(ctx, x, r.y + r.h, x, r.y + r.h + 4, '#8a949e');
    ctx.fillText(String(t.label), x, r.y + r.h + 5);
  }
  ctx.textAlign = 'right'; ctx.textBaseline = 'middle';
  for (const t of ty.list) {
    const y = r.y + t.at * r.scale;
    line(ctx, r.x - 4, y, r.x, y, '#8a949e');
    ctx.fillText(String(t.label), r.x - 6, y);
  }
  ctx.textAlign = 'left'; ctx.textBaseline = 'top';
  ctx.fillText(`${ax.down.name}, ${ty.unit}`, 2, 0);
  ctx.textAlign = 'right'; ctx.textBaseline = 'bottom';
  ctx.fillText(`${ax.across.name}, ${tx.unit}`, r.x + r.w, r.y + r.h + 22);
  ctx.restore();
}

// Crosshair and slab lines, in picture fractions across (u) and down (v).
function overlay(ctx, p) {
  const pos = state.position, sh = state.shape, r = p.rect;
  if (!pos || !sh) return;
  const [Y, X, Z] = sh;
  const U = (u) => r.x + u * r.w, V = (v) => r.y + v * r.h;
  const cross = 'rgba(255, 64, 64, 0.85)', slab = 'rgba(79, 195, 247, 0.8)';
  if (p.name === 'enface' || p.name === 'angio') {
    line(ctx, U((pos[1] + 0.5) / X), r.y, U((pos[1] + 0.5) / X), r.y + r.h, cross);
    line(ctx, r.x, V((pos[0] + 0.5) / Y), r.x + r.w, V((pos[0] + 0.5) / Y), cross);
  } else {
    const n = p.name === 'bscan' ? X : Y, at = p.name === 'bscan' ? pos[1] : pos[0];
    line(ctx, U((at + 0.5) / n), r.y, U((at + 0.5) / n), r.y + r.h, cross);
    line(ctx, r.x, V((pos[2] + 0.5) / Z), r.x + r.w, V((pos[2] + 0.5) / Z), cross, [4, 4]);
    if (state.slab) {
      line(ctx, r.x, V(state.slab[0] / Z), r.x + r.w, V(state.slab[0] / Z), slab, [2, 3]);
      line(ctx, r.x, V(state.slab[1] / Z), r.x + r.w, V(state.slab[1] / Z), slab, [2, 3]);
    }
  }
  if (p.ruler) {
    const a = p.ruler.a, b = p.ruler.b;
    line(ctx, U(a.u), V(a.v), U(b.u), V(b.v), '#ffee58', [], 1.5);
    ctx.save();
    ctx.font = '12px system-ui, sans-serif';
    ctx.fillStyle = '#ffee58';
    ctx.textBaseline = 'bottom';
    ctx.fillText(p.ruler.label, U(b.u) + 6, V(b.v) - 4);
    ctx.restore();
  }
}

function drawPane(p) {
  const { w, h, dpr } = fitCanvas(p.canvas);
  const ctx = p.ctx;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  if (!p.last) { p.scalebarEl.hidden = true; return; }
  if (p.dirty || p.shown !== p.last || p.paintedWith !== displayKey(p) || p.overlayKey !== overlayKey(p)) paintNative(p);
  p.axes = geo.pictureAxes(p.last, PANES[p.name].transpose);
  p.rect = geo.fitRect(p.axes, w, h);
  ctx.imageSmoothingEnabled = !!state.display.smooth;
  ctx.drawImage(p.native, p.rect.x, p.rect.y, p.rect.w, p.rect.h);
  axes(ctx, p);
  overlay(ctx, p);
  // the scale bar is an element (its width in CSS pixels is the length it says)
  const sb = geo.scaleBar(p.rect, p.axes.unit);
  p.scaleBar = { ...sb, unit: p.axes.unit };
  const el = p.scalebarEl;
  el.hidden = false;
  el.style.width = `${sb.px}px`;
  el.style.left = `${p.rect.x + p.rect.w - sb.px - 8}px`;
  el.style.top = `${p.rect.y + p.rect.h - 22}px`;
  el.dataset.length = String(sb.len);
  el.dataset.unit = p.axes.unit;
  el.firstElementChild.textContent = sb.label;
}

function draw() {
  drawQueued = false;
  for (const p of Object.values(state.panes)) {
    if (!paneVisible(p.name)) continue;
    const fresh = p.dirty;
    drawPane(p);
    if (!p.last) continue;
    if (fresh && p.last.tLastNs > 0n) {
      const ms = Number(nowNs() - p.last.tLastNs) / 1e6;
      p.last.drawnLatencyMs = ms;
      const pubMs = p.last.tPublishNs > 0n ? Number(nowNs() - p.last.tPublishNs) / 1e6 : null;
      state.latencies.push({ kind: p.last.kind, volumeId: p.last.volumeId, ms, pubMs,
        arrivedToDrawnMs: performance.now() - p.last.tArrived, t: performance.now() });
      if (state.latencies.length > 20000) state.latencies.splice(0, 10000);
    }
    p.dirty = false;
    p.shown = p.last;
    p.cmap = state.display.colormap;
    foot(p);
  }
  draw3d();
  crosshairText();
  dopplerReadout();
}

// The daemon reads another session now: pictures of the one before are no longer shown (a
// daemon restarted without views, or with another geometry, sends none or others).
function clearPanes(session) {
  for (const p of Object.values(state.panes)) {
    if (!p.last || p.last.session === session) continue;
    p.last = null; p.shown = null; p.held = null; p.dirty = false; p.ruler = null;
    p.ctx.setTransform(1, 0, 0, 1, 0, 0);
    p.ctx.clearRect(0, 0, p.canvas.width, p.canvas.height);
    p.scalebarEl.hidden = true;
    $(`foot-${p.name}`).textContent = '–';
  }
  // the channels of the session before: the angiography pane and the overlay go until this
  // session's come (a daemon without channels sends none)
  const d = state.doppler;
  d.frames = d.frames.filter((f) => f.session === session);
  if (d.last && d.last.session !== session) d.last = null;
  if (state.haveAngio && !(state.panes.angio.last)) { state.haveAngio = false; state.channels = {}; applyLayout(); }
  if (!d.last && !state.haveAngio) { state.channels = {}; $('functional').hidden = true; $('doppler-readout').hidden = true; }
  const v = state.volume3d;
  if (v.shown && v.shown.session !== session) {
    v.shown = null;
    if (v.renderer) v.renderer.volume = null;
    $('foot-volume3d').textContent = '–';
    document.querySelector('#pane-volume3d .empty3d').hidden = false;
    request3d();
  }
}

function ageText(h) {
  // a picture of a daemon that stopped has no age to show: it is the last one, not live
  if (state.daemon !== 'connected') return `– (volrecd ${state.daemon})`;
  return h.tLastNs > 0n ? `${(Number(nowNs() - h.tLastNs) / 1e6).toFixed(0)} ms` : '–';
}

function foot(p) {
  const h = p.last;
  const red = h.rowStep > 1 || h.colStep > 1 ? ` (÷${h.rowStep}×${h.colStep})` : '';
  let extra = '';
  if (h.kind.endsWith('enface_mean') || h.kind.endsWith('enface_max')) extra = ` · slab ${h.slab[0]}–${h.slab[1]}`;
  if (h.channel) {
    const [a, b] = h.channel.valueRange;
    if (Number.isFinite(a) && Number.isFinite(b)) extra += ` · ${+a.toPrecision(3)}–${+b.toPrecision(3)} ${h.channel.units}`;
  }
  if (h.kind === 'plane') extra = ` · z ${h.position[2]}`;
  if (p.ruler) extra += ` · ruler ${p.ruler.label}`;
  $(`foot-${p.name}`).textContent = `${state.paused ? 'PAUSED · ' : ''}volume ${h.volumeId} · age ${ageText(h)} · ` +
    `${h.rows}×${h.cols}${red} · ${p.axes && p.axes.known ? 'µm' : 'voxels (size unknown)'}${extra}`;
}

function crosshairText() {
  const pos = state.position, um = state.voxelUm;
  if (!pos) { $('s-cross').textContent = '–'; return; }
  const known = um && um[0] > 0 && um[1] > 0 && um[2] > 0;
  const f = (i, name) => (known ? `${name} ${geo.formatLength(pos[i] * um[i], 'µm')}` : `${name} ${pos[i]}`);
  $('s-cross').textContent = `${f(0, 'y')} · ${f(1, 'x')} · ${f(2, 'z')}${known ? '' : ' (voxels)'}`;
}

// A resize draws the same pictures again at the new size: no new picture, no latency.
window.addEventListener('resize', () => { requestDraw(); request3d(); });

// ---- the 3-D pane -------------------------------------------------------------------------------
const v3 = state.volume3d;
const canvas3d = document.querySelector('canvas[data-pane=volume3d]');
try {
  v3.renderer = new VolumeRenderer(canvas3d);
} catch (e) {
  v3.error = String(e.message || e);
  document.querySelector('#pane-volume3d .empty3d').textContent = v3.error;
}

// A volume frame: uploaded as it comes (texImage3D of the payload), its box in µm (voxels when
// a size is unknown): [X·px, Z·pz, Y·py] from the sent pixel sizes (rows y, cols x, planes z).
// A software renderer (no GPU) takes a new volume at most every 500 ms (its frame takes
// hundreds of ms there; the 2-D panes keep their rate); a GPU every volume.
function onVolume(h) {
  if (state.paused) { v3.held = h; return; }
  if (v3.shown && v3.shown.seq > h.seq) return;
  const wait = v3.renderer && v3.renderer.software ? (v3.tShown || 0) + 500 - performance.now() : 0;
  if (wait > 0) {
    v3.next = h;
    if (!v3.timer) {
      v3.timer = setTimeout(() => {
        v3.timer = null;
        const n = v3.next;
        v3.next = null;
        if (n) onVolume(n);
      }, wait);
    }
    return;
  }
  v3.tShown = performance.now();
  showVolume(h);
}
function showVolume(h) {
  v3.shown = h;
  if (!v3.renderer) return;
  const shape = [h.rows, h.cols, h.planes];
  const um = h.pixelUm, known = um[0] > 0 && um[1] > 0 && um[2] > 0;
  const f = h.factors || [1, 1, 1];
  const size = known ? [um[1], um[2], um[0]] : [f[1], f[2], f[0]];
  v3.renderer.setVolume(h.pixels, shape, [shape[1] * size[0], shape[2] * size[1], shape[0] * size[2]]);
  document.querySelector('#pane-volume3d .empty3d').hidden = true;
  v3.fresh = true;
  request3d();
}
// A test hook (docs/viewer.md "Tests"): show a volume made by the test, as a volume frame would.
state.injectVolume = (bytes, shape, pixelUm) => {
  const h = {
    kind: 'volume', rows: shape[0], cols: shape[1], planes: shape[2], pixels: new Uint8Array(bytes),
    pixelUm: pixelUm || [0, 0, 0], factors: [1, 1, 1], seq: ++state.frameSeq, volumeId: 0, session: state.session,
    tLastNs: 0n, injected: true,
  };
  showVolume(h);
};

let queued3d = false, interacting = 0;
function request3d() {
  if (!queued3d) { queued3d = true; requestAnimationFrame(() => { queued3d = false; draw3d(true); }); }
}

// The 3-D pane draws when something changed: a volume, the camera, the display, the size. While
// the camera is dragged it renders at half the resolution, then once more at full.
function draw3d(force) {
  if (!v3.renderer || (!force && !v3.fresh) || !paneVisible('volume3d')) return;
  v3.fresh = false;
  const c = canvas3d, r = c.getBoundingClientRect(), dpr = window.devicePixelRatio || 1;
  // a software renderer (SwiftShader, llvmpipe) draws a quarter of the pixels, a sixteenth
  // while the camera moves; a GPU all of them, a quarter while it moves
  const q = v3.scale || (performance.now() < interacting ? 0.5 : 1) * (v3.renderer.software ? 0.5 : 1);
  const w = Math.max(1, Math.round(r.width * dpr * q)), h = Math.max(1, Math.round(r.height * dpr * q));
  if (c.width !== w || c.height !== h) { c.width = w; c.height = h; }
  const d = state.display;
  const ms = v3.renderer.draw({ ...d, window: windowNow() }, v3.measure);
  v3.draws++;
  if (v3.measure) { v3.frameMs.push({ ms, mode: d.mode, w, h }); if (v3.frameMs.length > 1000) v3.frameMs.shift(); }
  const s = v3.shown;
  if (s && !s.injected && (!v3.lastDrawn || v3.lastDrawn.volumeSeq !== s.seq) && s.tLastNs > 0n) {
    // a new volume drawn: acquisition -> drawn, as for the 2-D pictures
    const ms = Number(nowNs() - s.tLastNs) / 1e6;
    const pubMs = s.tPublishNs > 0n ? Number(nowNs() - s.tPublishNs) / 1e6 : null;
    state.latencies.push({ kind: 'volume', volumeId: s.volumeId, ms, pubMs,
      arrivedToDrawnMs: performance.now() - s.tArrived, t: performance.now() });
  }
  v3.lastDrawn = { mode: d.mode, camera: { ...d.camera }, w, h, volumeSeq: s ? s.seq : null };
  drawOutline();
  if (q < 1) setTimeout(request3d, 200);
  if (s) {
    $('foot-volume3d').textContent = `${state.paused ? 'PAUSED · ' : ''}${s.injected ? 'test volume' : `volume ${s.volumeId} · age ${ageText(s)}`}` +
      ` · ${s.rows}×${s.cols}×${s.planes}${s.factors && s.factors.some((x) => x > 1) ? ` (÷${s.factors.join('×')})` : ''}` +
      ` · ${MODE_LABELS[d.mode]} · az ${d.camera.az.toFixed(0)}° el ${d.camera.el.toFixed(0)}° ×${d.camera.zoom.toFixed(2)}`;
  }
}

// The box's edges and its axes (x red, y green, depth blue from the scan's origin) over the
// 3-D picture, so that the orientation reads at a glance.
const outline3d = document.querySelector('#pane-volume3d .outline');
function drawOutline() {
  const { w, h, dpr } = fitCanvas(outline3d);
  const ctx = outline3d.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  const o = v3.renderer && v3.shown ? v3.renderer.outline() : null;
  if (!o) return;
  const P = (q) => [q[0] * w, q[1] * h];
  for (const [a, b] of o.edges) line(ctx, ...P(a), ...P(b), 'rgba(138, 148, 158, 0.45)');
  ctx.font = '11px system-ui, sans-serif';
  for (const [name, color] of [['x', '#ef5350'], ['y', '#81c784'], ['depth', '#4fc3f7']]) {
    line(ctx, ...P(o.axes.origin), ...P(o.axes[name]), color, [], 2);
    ctx.fillStyle = color;
    ctx.fillText(name, ...P(o.axes[name]));
  }
}

// Frame time of each mode (ms, the mean of n frames, each waited for), at the pane's full
// size (scale 1) or as the page draws it (scale omitted), for the benchmark and docs/viewer.md.
state.measure3d = (n = 5, scale) => {
  const out = { renderer: v3.renderer ? v3.renderer.rendererName : null, modes: {} }, mode0 = state.display.mode;
  v3.measure = true;
  v3.scale = scale;
  for (const m of Object.keys(MODE_LABELS)) {
    state.display.mode = m;
    const t = [];
    for (let i = 0; i < n; i++) { draw3d(true); t.push(v3.frameMs[v3.frameMs.length - 1].ms); }
    t.sort((a, b) => a - b);
    out.modes[m] = { ms_mean: t.reduce((a, b) => a + b, 0) / n, ms_min: t[0], width: canvas3d.width, height: canvas3d.height };
  }
  v3.measure = false;
  v3.scale = undefined;
  state.display.mode = mode0;
  draw3d(true);
  return out;
};
// The time (ms) to repaint every 2-D pane shown after a window change (the lookup table made
// and applied, the pictures drawn at their size), the mean of n changes; for the benchmark.
state.measureWindow = (n = 10) => {
  const w0 = state.display.window, t = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    state.display.window = [20 + i, 200 - i];
    draw();
    t.push(performance.now() - t0);
  }
  state.display.window = w0;
  requestDraw();
  return { ms_mean: t.reduce((a, b) => a + b, 0) / n, ms_max: Math.max(...t),
    pictures: Object.values(state.panes).filter((p) => p.last).map((p) => `${p.last.kind} ${p.last.rows}×${p.last.cols}`) };
};
state.pixels3d = () => (v3.renderer ? Array.from(v3.renderer.pixels()) : null);
// The 3-D pane as drawn, scaled to n × n RGB (the tests compare modes and cameras with it).
state.snapshot3d = (n = 64) => {
  const c = document.createElement('canvas');
  c.width = n; c.height = n;
  const ctx = c.getContext('2d');
  ctx.drawImage(canvas3d, 0, 0, n, n);
  const d = ctx.getImageData(0, 0, n, n).data, out = [];
  for (let i = 0; i < n * n; i++) out.push(d[4 * i], d[4 * i + 1], d[4 * i + 2]);
  return out;
};

// Camera: drag rotates, wheel zooms, reset; this browser's own, kept with its display.
// Two fingers on a touch screen pinch to zoom.
let drag3d = null;
const touches = new Map();
let pinch = null;
canvas3d.addEventListener('pointerdown', (ev) => {
  touches.set(ev.pointerId, [ev.clientX, ev.clientY]);
  if (touches.size === 2) {
    const [a, b] = [...touches.values()];
    pinch = { d: Math.hypot(a[0] - b[0], a[1] - b[1]) || 1, zoom: state.display.camera.zoom };
    drag3d = null;
    return;
  }
  drag3d = { x: ev.clientX, y: ev.clientY, cam: { ...state.display.camera } };
  canvas3d.setPointerCapture(ev.pointerId);
  canvas3d.style.cursor = 'grabbing';
});
canvas3d.addEventListener('pointermove', (ev) => {
  if (touches.has(ev.pointerId)) touches.set(ev.pointerId, [ev.clientX, ev.clientY]);
  if (pinch && touches.size === 2) {
    const [a, b] = [...touches.values()];
    state.display.camera.zoom = Math.max(0.2, Math.min(8, pinch.zoom * Math.hypot(a[0] - b[0], a[1] - b[1]) / pinch.d));
    interacting = performance.now() + 150;
    request3d();
    return;
  }
  if (!drag3d) return;
  const cam = state.display.camera;
  cam.az = ((drag3d.cam.az + (ev.clientX - drag3d.x) * 0.5 + 180) % 360 + 360) % 360 - 180;
  cam.el = Math.max(-89, Math.min(89, drag3d.cam.el + (ev.clientY - drag3d.y) * 0.5));
  interacting = performance.now() + 150;
  request3d();
});
const end3d = (ev) => {
  touches.delete(ev.pointerId);
  if (touches.size < 2 && pinch) { pinch = null; saveDisplay(); request3d(); }
  if (drag3d) { drag3d = null; canvas3d.style.cursor = ''; saveDisplay(); request3d(); }
};
canvas3d.addEventListener('pointerup', end3d);
canvas3d.addEventListener('pointercancel', end3d);
canvas3d.addEventListener('wheel', (ev) => {
  ev.preventDefault();
  const cam = state.display.camera;
  cam.zoom = Math.max(0.2, Math.min(8, cam.zoom * Math.exp(-ev.deltaY * 0.001)));
  saveDisplay();
  request3d();
}, { passive: false });
$('reset-camera').addEventListener('click', () => {
  state.display.camera = { ...DEFAULT_CAMERA };
  saveDisplay();
  request3d();
});
$('mode3d').addEventListener('change', () => { state.display.mode = $('mode3d').value; saveDisplay(); request3d(); });
$('iso').addEventListener('input', () => { state.display.iso = +$('iso').value; saveDisplay(); request3d(); });
$('gamma').addEventListener('input', () => { state.display.gamma = +$('gamma').value; saveDisplay(); request3d(); });
for (const [i, axis] of ['x', 'y', 'z'].entries()) {
  for (const end of [0, 1]) {
    $(`clip-${axis}${end}`).addEventListener('input', (ev) => {
      const c = state.display.clip[i];
      c[end] = +ev.target.value;
      if (c[0] > c[1] - 0.01) { if (end === 0) c[0] = c[1] - 0.01; else c[1] = c[0] + 0.01; ev.target.value = c[end]; }
      saveDisplay();
      request3d();
    });
  }
}

// The transfer function editor: points (value across, opacity up) joined by lines.
const tfCanvas = $('tf');
function drawTf() {
  const ctx = tfCanvas.getContext('2d'), W = tfCanvas.width, H = tfCanvas.height, pts = state.display.tf;
  ctx.clearRect(0, 0, W, H);
  const g = ctx.createLinearGradient(0, 0, W, 0);
  const lut = lut32(state.display.colormap, 0, 255);
  for (let i = 0; i <= 8; i++) {
    const c = lut[Math.round(i * 255 / 8)];
    g.addColorStop(i / 8, `rgb(${c & 255},${(c >> 8) & 255},${(c >> 16) & 255})`);
  }
  ctx.fillStyle = g;
  ctx.fillRect(0, H - 6, W, 6);
  ctx.strokeStyle = '#4fc3f7';
  ctx.beginPath();
  pts.forEach((p, i) => { const x = p.t * W, y = (1 - p.a) * (H - 10) + 2; if (i) ctx.lineTo(x, y); else ctx.moveTo(x, y); });
  ctx.stroke();
  ctx.fillStyle = '#fff';
  for (const p of pts) ctx.fillRect(p.t * W - 3, (1 - p.a) * (H - 10) + 2 - 3, 6, 6);
}
let tfDrag = -1;
const tfPoint = (ev) => {
  const r = tfCanvas.getBoundingClientRect();
  return { t: Math.min(1, Math.max(0, (ev.clientX - r.left) / r.width)),
    a: Math.min(1, Math.max(0, 1 - ((ev.clientY - r.top) / r.height * tfCanvas.height - 2) / (tfCanvas.height - 10))) };
};
const tfNearest = (q) => {
  let best = -1, bd = 0.06;
  state.display.tf.forEach((p, i) => { const dd = Math.hypot(p.t - q.t, (p.a - q.a) * 0.5); if (dd < bd) { bd = dd; best = i; } });
  return best;
};
tfCanvas.addEventListener('pointerdown', (ev) => {
  if (ev.button !== 0) return;
  tfDrag = tfNearest(tfPoint(ev));
  if (tfDrag >= 0) tfCanvas.setPointerCapture(ev.pointerId);
});
tfCanvas.addEventListener('pointermove', (ev) => {
  if (tfDrag < 0) return;
  const pts = state.display.tf, q = tfPoint(ev), i = tfDrag;
  // the ends stay at 0 and 1; the others between their neighbours
  const t = i === 0 ? 0 : i === pts.length - 1 ? 1 : Math.min(pts[i + 1].t, Math.max(pts[i - 1].t, q.t));
  pts[i] = { t, a: q.a };
  drawTf();
  request3d();
});
tfCanvas.addEventListener('pointerup', () => { tfDrag = -1; saveDisplay(); });
tfCanvas.addEventListener('dblclick', (ev) => {
  const q = tfPoint(ev), pts = state.display.tf;
  const i = pts.findIndex((p) => p.t > q.t);
  if (i > 0) pts.splice(i, 0, q);
  drawTf(); saveDisplay(); request3d();
});
tfCanvas.addEventListener('contextmenu', (ev) => {
  ev.preventDefault();
  const i = tfNearest(tfPoint(ev)), pts = state.display.tf;
  if (i > 0 && i < pts.length - 1) pts.splice(i, 1);
  drawTf(); saveDisplay(); request3d();
});

// ---- display controls ---------------------------------------------------------------------------
for (const [name, m] of Object.entries(COLORMAPS)) {
  if (m.kind !== 'intensity') continue;
  const o = document.createElement('option');
  o.value = name; o.textContent = m.label;
  $('colormap').append(o);
}

// ---- the functional channels' controls (this browser only) -------------------------------------
for (const kind of ['angio', 'intensity']) {
  for (const [name, m] of Object.entries(COLORMAPS)) {
    if (m.kind !== kind || name === 'gray') continue;
    const o = document.createElement('option');
    o.value = name; o.textContent = m.label;
    $('angio-cmap').append(o);
  }
}
const angioInLayout = () => ['four', 'bscan-enface', 'one-angio'].includes(state.display.layout);

// The functional controls appear with the first channel picture; the threshold slider spans the
// Doppler channel's range (mm/s, or rad where the velocity is unknown).
function showFunctional() {
  $('functional').hidden = false;
  const m = dopplerMeaning(state.channels.doppler);
  const t = $('doppler-threshold');
  if (m && m.span) {
    const max = (Math.ceil(m.span * 1000) + 1) / 1000; // above the range: no overlay at all
    if (+t.max !== max) { t.max = String(max); t.step = '0.001'; }
    t.value = String(dopplerThreshold(m));
  }
  showDopplerText();
  showAngioWindow();
}
function showDopplerText() {
  const m = dopplerMeaning(state.channels.doppler);
  if (!m || !m.phaseOk) { $('doppler-text').textContent = state.channels.doppler ? 'meaning unknown' : 'no Doppler channel'; return; }
  const thr = dopplerThreshold(m), [a, b] = m.range;
  $('doppler-text').textContent = `|v| > ${thr.toFixed(3)} ${m.unit} (range ${a.toFixed(3)} to ${b.toFixed(3)} ${m.unit})` +
    (state.display.doppler.on ? '' : ', overlay off');
}
function showAngioWindow() {
  const [lo, hi] = angioWindow();
  $('angio-lo').value = lo; $('angio-hi').value = hi;
  let text = `${lo}–${hi} of 0–255`;
  const ch = state.channels.angio;
  if (ch && Number.isFinite(ch.valueRange[0]) && Number.isFinite(ch.valueRange[1])) {
    const [a, b] = ch.valueRange, val = (v) => +(a + (b - a) * v / 255).toPrecision(3);
    text += ` (${val(lo)}–${val(hi)} ${ch.units})`;
  }
  $('angio-win-text').textContent = state.display.angio.window ? text : `${text}, automatic`;
}
function setAngioWindow(w) {
  const lo = Math.max(0, Math.min(254, Math.round(w[0]))), hi = Math.max(lo + 1, Math.min(255, Math.round(w[1])));
  state.display.angio.window = [lo, hi];
  showAngioWindow();
  saveDisplay();
  requestDraw();
}
function angioWindowInput(ev) {
  let lo = +$('angio-lo').value, hi = +$('angio-hi').value;
  if (lo >= hi) { if (ev.target === $('angio-lo')) lo = hi - 1; else hi = lo + 1; }
  setAngioWindow([lo, hi]);
}
for (const id of ['angio-lo', 'angio-hi']) for (const e of ['input', 'change']) $(id).addEventListener(e, angioWindowInput);
$('angio-auto').addEventListener('click', () => {
  const p = state.panes.angio;
  state.display.angio.window = null;
  const w = p.last ? percentileWindow([p.last.pixels]) : null;
  if (w) state.autoAngio = w;
  showAngioWindow(); saveDisplay(); requestDraw();
});
$('angio-kind').addEventListener('change', () => {
  state.display.angio.picture = $('angio-kind').value;
  state.panes.angio.last = null; // the other picture comes next
  saveDisplay(); subscribe(); requestDraw();
});
$('angio-cmap').addEventListener('change', () => { state.display.angio.colormap = $('angio-cmap').value; saveDisplay(); requestDraw(); });
function thresholdInput() {
  const v = +$('doppler-threshold').value;
  if (!(v >= 0)) return;
  state.display.doppler.threshold = v;
  showDopplerText(); saveDisplay(); requestDraw();
}
$('doppler-threshold').addEventListener('input', thresholdInput);
$('doppler-threshold').addEventListener('change', thresholdInput);
$('doppler-on').addEventListener('change', () => {
  state.display.doppler.on = $('doppler-on').checked;
  showDopplerText(); saveDisplay(); requestDraw();
});
{
  // the read-out follows the cursor over the B-scan (fractions of the picture: across x, down z)
  const b = state.panes.bscan;
  b.canvas.addEventListener('pointermove', (ev) => {
    if (!b.rect) return;
    const r = b.canvas.getBoundingClientRect();
    const q = geo.pointIn(b.rect, ev.clientX - r.left, ev.clientY - r.top, false);
    state.doppler.hover = q ? { u: q.u, v: q.v } : null;
    dopplerReadout();
  });
  b.canvas.addEventListener('pointerleave', () => { state.doppler.hover = null; dopplerReadout(); });
}

function displayChanged() {
  saveDisplay();
  requestDraw();
  request3d();
  drawTf();
}

function setWindow(w, auto) {
  const lo = Math.max(0, Math.min(254, Math.round(w[0]))), hi = Math.max(lo + 1, Math.min(255, Math.round(w[1])));
  if (auto) state.autoWindow = [lo, hi];
  else state.display.window = [lo, hi];
  if (auto && state.display.window) return;
  showWindow();
  displayChanged();
}
function showWindow() {
  const [lo, hi] = windowNow();
  $('win-lo').value = lo; $('win-hi').value = hi;
  let text = `${lo}–${hi} of 0–255`;
  if (state.dbRange) {
    const [a, b] = state.dbRange, db = (v) => (a + (b - a) * v / 255).toFixed(1);
    text += ` (${db(lo)}–${db(hi)} dB)`;
  }
  $('win-text').textContent = state.display.window ? text : `${text}, automatic`;
}
function windowInput(ev) {
  let lo = +$('win-lo').value, hi = +$('win-hi').value;
  if (lo >= hi) { if (ev.target === $('win-lo')) lo = hi - 1; else hi = lo + 1; }
  setWindow([lo, hi], false);
}
$('win-lo').addEventListener('input', windowInput);
$('win-hi').addEventListener('input', windowInput);
$('win-lo').addEventListener('change', windowInput);
$('win-hi').addEventListener('change', windowInput);
$('win-auto').addEventListener('click', () => {
  const pics = Object.values(state.panes).filter((p) => p.last && p.name !== 'angio').map((p) => p.last.pixels);
  state.display.window = null;
  const w = percentileWindow(pics);
  if (w) state.autoWindow = w;
  setWindow(windowNow(), true);
  showWindow();
  displayChanged();
});
$('colormap').addEventListener('change', () => { state.display.colormap = $('colormap').value; displayChanged(); });
$('smooth').addEventListener('change', () => { state.display.smooth = $('smooth').checked; displayChanged(); });
$('layout').addEventListener('change', () => { state.display.layout = $('layout').value; applyLayout(); saveDisplay(); });

function applyLayout() {
  const l = state.display.layout;
  document.body.className = document.body.className.replace(/\blayout-[\w-]+/g, '').trim();
  document.body.classList.add(`layout-${l}`);
  document.body.classList.toggle('readonly', !state.control && !!state.hello);
  const show = {
    four: ['enface', 'bscan', 'slice', 'volume3d', 'angio'], 'bscan-enface': ['bscan', 'enface', 'angio'],
    'one-bscan': ['bscan'], 'one-enface': ['enface'], 'one-slice': ['slice'], 'one-volume3d': ['volume3d'],
    'one-angio': ['angio'],
  }[l] || ['enface', 'bscan', 'slice', 'volume3d', 'angio'];
  if (l === 'one-angio' && !state.haveAngio) show.push('enface'); // until angiography comes
  for (const name of ['enface', 'bscan', 'slice', 'volume3d']) $(`pane-${name}`).hidden = !show.includes(name);
  // the angiography pane only where the daemon publishes angiography
  $('pane-angio').hidden = !(show.includes('angio') && state.haveAngio);
  document.body.classList.toggle('has-angio', state.haveAngio);
  subscribe();
  requestDraw();
  request3d();
}

function pause(on) {
  state.paused = on;
  $('pause').setAttribute('aria-pressed', String(on));
  $('pause').textContent = on ? 'resume' : 'pause';
  document.body.classList.toggle('paused', on);
  if (!on) {
    for (const p of Object.values(state.panes)) {
      if (p.held && (!p.last || p.held.seq > p.last.seq)) { p.last = p.held; p.dirty = true; p.arrivals++; }
      p.held = null;
    }
    if (v3.held) { showVolume(v3.held); v3.held = null; }
    const held = state.doppler.held || [];
    state.doppler.held = null;
    for (const h of held) onDoppler(h);
  }
  requestDraw();
  request3d();
}
$('pause').addEventListener('click', () => pause(!state.paused));

// ---- messages -------------------------------------------------------------------------------
// Routine news (a setting applied, an event) is quiet; what went wrong is red and stays.
function note(text, level) {
  const el = $('message');
  el.textContent = text;
  el.className = level === 'error' ? 'error' : 'info';
}
function dataNote(text, level) {
  const el = $('data-message');
  el.textContent = text;
  el.className = level === 'error' ? 'error' : 'info';
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
  const views = Object.keys(PANES).filter((n) => n !== 'angio' && paneVisible(n)).map((n) => PANES[n].kind());
  if (paneVisible('volume3d')) views.push('volume');
  // the channels' pictures: the viewer sends them only where the daemon publishes the channels
  if (angioInLayout()) views.push(state.display.angio.picture);
  if (paneVisible('bscan')) views.push('doppler_bscan');
  const offered = state.hello && Array.isArray(state.hello.views) ? state.hello.views : null;
  send({ type: 'subscribe', views: [...new Set(views)].filter((v) => !offered || offered.includes(v)) });
}

const WARN_EVENTS = new Set(['reload_rejected', 'source_fault', 'fault', 'stopping']);
function onText(text) {
  let m;
  try { m = JSON.parse(text); } catch (e) { note('the viewer sent a message that is not JSON', 'error'); return; }
  switch (m.type) {
    case 'hello':
      state.hello = m;
      state.control = !!m.control;
      $('instance').textContent = m.instance;
      $('s-access').textContent = m.control ? 'view + control' : 'view only';
      $('s-access').title = m.control ? '' : 'to control, open the address (with ?token=...) ' +
        'that volrec view printed at start, or its control token';
      $('data-access').textContent = m.control ? ''
        : 'This browser may only view: open the address volrec view printed at start (with ?token=...) to change these.';
      applyLayout();
      loadControls();
      // a reconnection: this browser's own crosshair and slab again
      if (state.own.position || state.own.slab) moveView({ ...state.own });
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
    case 'event': {
      state.events.push(m.event);
      const ev = m.event || {};
      if (ev.message) note(eventText(ev), WARN_EVENTS.has(ev.event) ? 'error' : 'info');
      // another browser (or volrec set, a reload, a daemon started again perhaps with another
      // configuration) changed a data setting: the controls show it
      if (ev.event === 'reloaded' || ev.event === 'started' ||
          (ev.event === 'set' && Object.keys(DATA_KEYS).some((k) => String(ev.keys).includes(k)))) loadControls();
      break;
    }
    case 'view': // this browser's own crosshair and slab, as the viewer took them
    case 'reply':
    case 'error': {
      if (m.type === 'error') state.errors.push(m);
      else state.replies.push(m);
      const done = m.id !== undefined && state.pending.get(m.id);
      if (done) {
        state.pending.delete(m.id);
        done(m.type === 'error' ? { ...m, ok: false } : m.type === 'view' ? { ...m, ok: true } : m);
      }
      else if (m.type === 'error') {
        // the volume's shape changed and this browser's view lay outside it: the daemon's again
        if (/showing the daemon's crosshair and slab again$/.test(m.error)) {
          state.own = { position: null, slab: null };
          $('view-own').textContent = ownText();
        }
        note(m.error, 'error');
      }
      break;
    }
    case 'pong':
      break;
    default:
      note(`the viewer sent an unknown message '${m.type}'`, 'error');
  }
}

function setState(s, text) {
  const el = $('state');
  el.className = `chip state-${s}`;
  el.textContent = s === 'connected' ? 'live' : s;
  el.title = text || '';
  if (s !== 'connected' && text) note(text, 'error');
  if (s === 'connected') return;
  // no daemon, no figures: the last ones would read as live
  for (const id of ['s-vps', 's-aps', 's-lat', 's-drawn', 's-drops', 's-readers']) $(id).textContent = '–';
  $('rec-state').textContent = '–';
  $('rec-state-processed').textContent = '–';
  showWarning(null);
  lastDrops = null;
  for (const k of Object.keys(series)) series[k].length = 0;
  if (plotRate) { plotRate.setData([[], [], []]); plotLat.setData([[], [], []]); }
  for (const p of Object.values(state.panes)) if (p.last) foot(p);
  document.body.classList.add('stale');
}

// ---- status, drops and plots ---------------------------------------------------------------------
const fmt = (v, unit) => {
  if (v === undefined || v === null || Number.isNaN(v)) return '–';
  if (v >= 1e6) return `${(v / 1e6).toFixed(2)} M${unit || ''}`;
  if (v >= 1e4) return `${(v / 1e3).toFixed(1)} k${unit || ''}`;
  return `${+v.toFixed(v < 10 ? 2 : 1)}${unit || ''}`;
};
const series = { t: [], vps: [], pics: [], lat99: [], drawn: [] };
let plotRate = null, plotLat = null;

// A tick label that always fits its axis: whole numbers, or k for thousands.
const tickText = (v) => (v === null ? '' : Math.abs(v) >= 1000 ? `${+(v / 1000).toFixed(1)}k` : `${+v.toFixed(Math.abs(v) < 10 ? 1 : 0)}`);

function makePlots() {
  if (typeof uPlot === 'undefined') return;
  const w = $('plot-rate').clientWidth || 300;
  const axes = [{ stroke: '#8a949e', grid: { stroke: '#2c333b' }, values: (u, v) => v.map((s) => `${s.toFixed(0)}s`) },
    { stroke: '#8a949e', grid: { stroke: '#2c333b' }, space: 18, size: 46, values: (u, v) => v.map(tickText) }];
  const plot = (id, ...lines) => new uPlot({ width: w, height: 110, scales: { x: { time: false } }, axes,
    legend: { live: false }, series: [{}, ...lines] }, [[], [], []], $(id));
  plotRate = plot('plot-rate', { label: 'volumes/s', stroke: '#4fc3f7' }, { label: 'pictures/s', stroke: '#81c784' });
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

// The pipeline dropping data: each status' drops by cause against the one before; the warning
// stays while drops go on and 5 s after the last.
let lastDrops = null, warnUntil = 0;
function checkDrops(st) {
  const d = st.drops, b = st.bscans;
  if (!d) return;
  const prev = lastDrops;
  lastDrops = { drops: { ...d }, acquired: b ? b.acquired : null };
  if (!prev) return;
  const causes = [];
  for (const [k, v] of Object.entries(d)) {
    if (k === 'total' || typeof v !== 'number') continue;
    const dv = v - (prev.drops[k] || 0);
    if (dv > 0) causes.push(`${k.replace(/_/g, ' ')} ${dv}`);
  }
  if (causes.length) {
    const dTotal = d.total - (prev.drops.total || 0);
    const dAcq = b && prev.acquired !== null ? b.acquired - prev.acquired : 0;
    // the causes counted among the acquired B-scans (docs/operations.md "Drop causes")
    const share = dAcq > 0 ? ` (${Math.min(100, 100 * dTotal / dAcq).toFixed(0)} % of the B-scans acquired)` : '';
    state.warning = { causes, dTotal, at: performance.now() };
    warnUntil = performance.now() + 5000;
    showWarning(`The pipeline is dropping data: ${causes.join(', ')} since the last status${share}. ` +
      'Pictures and recordings lack what was dropped.');
  } else if (st.faults && st.faults.degraded) {
    showWarning(`The source is degraded: ${st.faults.message || 'see the daemon\'s log'}.`);
  } else if (performance.now() > warnUntil) {
    showWarning(null);
  }
}
function showWarning(text) {
  const el = $('warning');
  if (!text) { el.hidden = true; el.textContent = ''; state.warning = null; return; }
  el.hidden = false;
  el.textContent = text;
}

function onStatus(st) {
  state.status = st;
  document.body.classList.remove('stale');
  const r = st.rates || {}, lat = (st.latency_ms || {}).acquire_to_publish || {};
  $('s-vps').textContent = fmt(r.volumes_per_s);
  $('s-aps').textContent = fmt(r.ascans_per_s);
  $('s-lat').textContent = lat.p99 !== undefined && lat.p99 !== null
    ? `${fmt(lat.p50)} / ${fmt(lat.p99)} ms` : '–';
  $('s-drops').textContent = st.drops ? st.drops.total : '–';
  $('s-readers').textContent = st.readers ?? '–';
  checkDrops(st);
  const rec = st.recording;
  if (rec && rec.state) $('rec-state').textContent = recordingText(rec, 'epochs');
  if (rec && rec.processed && rec.processed.state)
    $('rec-state-processed').textContent = recordingText(rec.processed, 'volumes');
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

// ---- data controls (the daemon's; control token) -------------------------------------------------
const DATA_KEYS = {
  'preprocess.db_range': (v) => {
    state.dbRange = v;
    const fine = !Number.isInteger(v[0]) || !Number.isInteger(v[1]);
    // the sliders reach the daemon's range whatever it is (the file allows -400..400 dB,
    // fractions too): a value beyond them or between their steps is never changed silently
    for (const id of ['db-lo', 'db-hi']) {
      $(id).min = Math.min(0, Math.floor(v[0])); $(id).max = Math.max(150, Math.ceil(v[1]));
      $(id).step = fine ? 'any' : '1';
    }
    $('db-lo').value = v[0]; $('db-hi').value = v[1];
    $('db-text').textContent = `${v[0]}–${v[1]} dB`;
    showWindow();
  },
  'preprocess.dispersion.coeffs': (v) => {
    if (Array.isArray(v)) { $('disp-a2').value = v[0]; $('disp-a3').value = v[1]; }
  },
  'preprocess.window.type': (v) => { $('win-type').value = v; },
  'preprocess.window.param': (v) => { $('win-param').value = v; },
  'preprocess.background.mode': (v) => { $('bg-mode').value = v; },
  'reconstruct.mode': (v) => { $('rec-mode').value = v; },
};
const DATA_INPUTS = {
  'preprocess.db_range': ['db-lo', 'db-hi'], 'preprocess.dispersion.coeffs': ['disp-a2', 'disp-a3'],
  'preprocess.window.type': ['win-type'], 'preprocess.window.param': ['win-param'],
  'preprocess.background.mode': ['bg-mode'], 'reconstruct.mode': ['rec-mode'],
};

// A value of the daemon's `get` (YAML flow: numbers, [lists], words) as JSON.
function parseValue(s) {
  try { return JSON.parse(s); } catch (e) { return String(s).trim(); }
}

// The daemon's data settings into the data panel: one get at a time (a browser has at most 8
// requests in flight), again once more when asked while it runs.
let loading = null, loadAgain = false;
async function loadControls() {
  if (loading) { loadAgain = true; return loading; }
  loading = (async () => {
    do {
      loadAgain = false;
      for (const [key, show] of Object.entries(DATA_KEYS)) {
        const r = await request({ type: 'get', key });
        const held = DATA_INPUTS[key].includes(document.activeElement && document.activeElement.id);
        if (r.ok && r.reply && r.reply.value !== undefined && !held) {
          const v = typeof r.reply.value === 'string' ? parseValue(r.reply.value) : r.reply.value;
          if (v !== null && v !== '') show(v);
        }
      }
    } while (loadAgain);
    loading = null;
  })();
  return loading;
}

function syncControls() {
  const sh = state.shape;
  if (sh) for (const id of ['slab-a', 'slab-b']) $(id).max = sh[2];
  if (state.slab && document.activeElement !== $('slab-a') && document.activeElement !== $('slab-b')) {
    $('slab-a').value = state.slab[0]; $('slab-b').value = state.slab[1];
    $('slab-text').textContent = `${state.slab[0]}–${state.slab[1]}`;
  }
}

// A set the daemon refused only because another change was being applied ("retry": true) is
// sent again 50 ms later, for up to 5 s, unless a newer set of the same keys was made since.
// Refusals are said where the control is: `where` 'data' (the data panel) or the page.
const setGeneration = new Map();
let setSequence = 0;
async function set(values, where) {
  const gen = ++setSequence, keys = Object.keys(values), deadline = performance.now() + 5000;
  keys.forEach((k) => setGeneration.set(k, gen));
  const say = where === 'data' ? dataNote : note;
  for (;;) {
    const r = await request({ type: 'set', values });
    const busy = !r.ok && r.reply && r.reply.retry === true;
    if (!busy || performance.now() > deadline) {
      if (!r.ok) say(r.error || 'refused', 'error');
      else say(`${keys.join(', ')} applied`, 'info');
      return r;
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
    if (keys.some((k) => setGeneration.get(k) !== gen)) return { ok: false, superseded: true };
  }
}

// Two sliders of one range [lo, hi] of key: the one moved past the other pushes it along.
function rangeInputs(loId, hiId, textId, unit, key, where) {
  function changed() {
    let lo = +$(loId).value, hi = +$(hiId).value;
    if (lo >= hi) { if (this === $(loId)) lo = hi - 1; else hi = lo + 1; }
    $(loId).value = lo; $(hiId).value = hi;
    $(textId).textContent = `${lo}–${hi}${unit}`;
    set({ [key]: [lo, hi] }, where);
  }
  $(loId).addEventListener('change', changed);
  $(hiId).addEventListener('change', changed);
}
rangeInputs('db-lo', 'db-hi', 'db-text', ' dB', 'preprocess.db_range', 'data');
// The slab is this browser's (no token): the viewer takes the en-face from the volume itself.
function slabChanged() {
  let lo = +$('slab-a').value, hi = +$('slab-b').value;
  if (lo >= hi) { if (this === $('slab-a')) lo = hi - 1; else hi = lo + 1; }
  $('slab-a').value = lo; $('slab-b').value = hi;
  $('slab-text').textContent = `${lo}–${hi}`;
  moveView({ slab: [lo, hi] });
}
$('slab-a').addEventListener('change', slabChanged);
$('slab-b').addEventListener('change', slabChanged);
$('view-daemon').addEventListener('click', () => moveView({ position: null, slab: null }));
const numberOf = (id) => ($(id).value === '' ? null : +$(id).value);
$('disp-a2').addEventListener('change', () => set({ 'preprocess.dispersion.coeffs': [numberOf('disp-a2'), numberOf('disp-a3')] }, 'data'));
$('disp-a3').addEventListener('change', () => set({ 'preprocess.dispersion.coeffs': [numberOf('disp-a2'), numberOf('disp-a3')] }, 'data'));
$('win-type').addEventListener('change', async () => {
  await set({ 'preprocess.window.type': $('win-type').value }, 'data');
  loadControls(); // the parameter the daemon takes for the new type
});
$('win-param').addEventListener('change', () => set({ 'preprocess.window.param': numberOf('win-param') }, 'data'));
$('bg-mode').addEventListener('change', () => set({ 'preprocess.background.mode': $('bg-mode').value }, 'data'));
$('rec-mode').addEventListener('change', () => set({ 'reconstruct.mode': $('rec-mode').value }, 'data'));

// A recording as the status shows it (docs/control.md): state, name, time, size, rate, count,
// what was left out and why it failed. unit: 'epochs' (raw) or 'volumes' (processed).
function recordingText(rec, unit) {
  if (rec.state === 'idle') return 'idle';
  const written = rec[unit === 'epochs' ? 'epochs_written' : 'volumes_written'];
  const skipped = rec[unit === 'epochs' ? 'skipped_epochs' : 'skipped_volumes'];
  const secs = rec.seconds ? ` · ${rec.seconds.toFixed(1)} s` : '';
  const mb = rec.bytes ? ` · ${(rec.bytes / 1e6).toFixed(1)} MB` : '';
  const rate = rec.rate_mb_s ? ` · ${rec.rate_mb_s.toFixed(1)} MB/s` : '';
  const n = written !== undefined ? ` · ${written} ${unit}` : '';
  const end = rec.end ? ` (${rec.end})` : '';
  return `${rec.state}${end}${rec.name ? ` '${rec.name}'` : ''}${secs}${mb}${rate}${n}` +
    `${skipped ? ` · ${skipped} ${unit} left out` : ''}${rec.error ? ` · ${rec.error}` : ''}`;
}

$('rec-start').addEventListener('click', async () => {
  const raw = $('rec-kind').value === 'raw';
  const req = { type: 'record_start', raw, name: $('rec-name').value.trim() };
  const s = numberOf('rec-seconds');
  if (s !== null) req.seconds = s;
  const n = numberOf('rec-count');
  if (n !== null) req[raw ? 'epochs' : 'volumes'] = n;
  const r = await request(req);
  const what = raw ? 'raw recording' : 'processed recording';
  dataNote(r.ok ? `${what} '${req.name}' started` : r.error || 'refused', r.ok ? 'info' : 'error');
});
$('rec-stop').addEventListener('click', async () => {
  const raw = $('rec-kind').value === 'raw';
  const r = await request({ type: 'record_stop', raw });
  const what = raw ? 'raw recording' : 'processed recording';
  dataNote(r.ok ? `${what} stopped` : r.error || 'refused', r.ok ? 'info' : 'error');
});

// ---- the crosshair: clicks, drags (ruler), keys and wheel ------------------------------------------
// The crosshair and the slab are this browser's own (docs/viewer.md, "view"): the viewer takes
// their pictures from the volume for this browser alone, with no token; the daemon's
// view.position and view.slab, and every other browser's pictures, stay as they are. `null`
// follows the daemon's again. One request in flight; the newest change is sent when it is
// answered, and is sent again after a reconnection.
let positionBusy = false, viewNext = null;
state.own = { position: null, slab: null };
async function moveView(v) {
  if (v.position) { state.position = v.position; requestDraw(); }
  if (positionBusy) { viewNext = { ...viewNext, ...v }; return undefined; }
  positionBusy = true;
  const r = await request({ type: 'view', ...v });
  if (r.ok) { state.own = { position: r.position, slab: r.slab }; $('view-own').textContent = ownText(); }
  else note(r.error || 'refused', 'error');
  positionBusy = false;
  if (viewNext) { const n = viewNext; viewNext = null; moveView(n); }
  return r;
}
const movePosition = (p) => moveView({ position: [...p] });
const ownText = () => (state.own.position || state.own.slab
  ? `this browser's${state.own.position ? ' crosshair' : ''}${state.own.position && state.own.slab ? ' and' : ''}${state.own.slab ? ' slab' : ''}`
  : "the daemon's crosshair and slab");
state.moveView = moveView;
const cell = (t, n) => Math.min(n - 1, Math.max(0, Math.floor(t * n)));
const PLACE = {
  enface: (u, v, sh, pos) => [cell(v, sh[0]), cell(u, sh[1]), pos[2]],
  angio: (u, v, sh, pos) => [cell(v, sh[0]), cell(u, sh[1]), pos[2]],
  bscan: (u, v, sh, pos) => [pos[0], cell(u, sh[1]), cell(v, sh[2])],
  slice: (u, v, sh, pos) => [cell(u, sh[0]), pos[1], cell(v, sh[2])],
};

for (const p of Object.values(state.panes)) {
  let down = null;
  const at = (ev) => {
    const r = p.canvas.getBoundingClientRect();
    return p.rect ? geo.pointIn(p.rect, ev.clientX - r.left, ev.clientY - r.top, !!down) : null;
  };
  // the right button dragged sets this browser's window: across its width, up and down its level
  let wl = null;
  p.canvas.addEventListener('contextmenu', (ev) => ev.preventDefault());
  p.canvas.addEventListener('pointerdown', (ev) => {
    if (ev.button !== 2) return;
    const [lo, hi] = windowOf(p);
    wl = { x: ev.clientX, y: ev.clientY, level: (lo + hi) / 2, width: hi - lo };
    p.canvas.setPointerCapture(ev.pointerId);
  });
  p.canvas.addEventListener('pointermove', (ev) => {
    if (!wl) return;
    const width = Math.max(2, Math.min(255, wl.width + (ev.clientX - wl.x) * 0.5));
    const level = Math.max(0, Math.min(255, wl.level - (ev.clientY - wl.y) * 0.5));
    if (p.name === 'angio') setAngioWindow([level - width / 2, level + width / 2]);
    else setWindow([level - width / 2, level + width / 2], false);
  });
  p.canvas.addEventListener('pointerup', () => { wl = null; });
  p.canvas.addEventListener('pointerdown', (ev) => {
    const q = at(ev);
    if (!q || ev.button !== 0) return;
    down = { q, x: ev.clientX, y: ev.clientY, moved: false };
    p.canvas.setPointerCapture(ev.pointerId);
  });
  p.canvas.addEventListener('pointermove', (ev) => {
    if (!down) return;
    if (!down.moved && Math.hypot(ev.clientX - down.x, ev.clientY - down.y) < 5) return;
    down.moved = true;
    const q = at(ev);
    const d = geo.distance(down.q, q);
    p.ruler = { a: down.q, b: q, length: d, unit: p.axes.unit, label: geo.formatLength(d, p.axes.unit) };
    requestDraw();
  });
  p.canvas.addEventListener('pointerup', (ev) => {
    if (!down) return;
    const d = down;
    down = null;
    if (d.moved) { foot(p); return; }
    p.ruler = null;
    const sh = state.shape, pos = state.position;
    if (!sh || !pos) return;
    movePosition(PLACE[p.name](d.q.u, d.q.v, sh, pos));
  });
  // a wheel's notch (100 pixels, or 3 lines) is one step; a touchpad's small deltas add up
  let acc = 0;
  p.canvas.addEventListener('wheel', (ev) => {
    ev.preventDefault();
    const d = ev.deltaMode === 1 ? ev.deltaY * 33.4 : ev.deltaMode === 2 ? ev.deltaY * 100 : ev.deltaY;
    if (Math.sign(d) !== Math.sign(acc)) acc = 0;
    acc += d;
    const n = Math.trunc(acc / 100);
    acc -= n * 100;
    step({ enface: 2, angio: 2, bscan: 0, slice: 1 }[p.name], n);
  }, { passive: false });
}

// Step the crosshair along axis a (0 y: B-scans, 1 x: slices, 2 z: the plane) by n voxels.
function step(a, n) {
  const sh = state.shape, pos = state.position;
  if (!sh || !pos || !n) return;
  const p = [...pos];
  p[a] = Math.min(sh[a] - 1, Math.max(0, p[a] + n));
  if (p[a] !== pos[a]) movePosition(p);
}
state.step = step;

document.addEventListener('keydown', (ev) => {
  const t = ev.target;
  if (t && ['INPUT', 'SELECT', 'TEXTAREA', 'BUTTON'].includes(t.tagName)) return;
  const big = ev.shiftKey ? 10 : 1;
  const keys = {
    ArrowUp: [0, -1], ArrowDown: [0, 1], PageUp: [0, -10], PageDown: [0, 10],
    ArrowLeft: [1, -1], ArrowRight: [1, 1], '[': [2, -1], ']': [2, 1],
  };
  if (ev.key === ' ') { ev.preventDefault(); pause(!state.paused); return; }
  if (ev.key === 'Escape') { for (const p of Object.values(state.panes)) p.ruler = null; requestDraw(); return; }
  const k = keys[ev.key];
  if (!k) return;
  ev.preventDefault();
  step(k[0], k[1] * big);
});

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

// the controls show this browser's stored display
$('colormap').value = state.display.colormap;
$('smooth').checked = !!state.display.smooth;
$('layout').value = state.display.layout;
$('mode3d').value = state.display.mode;
$('angio-kind').value = state.display.angio.picture;
$('angio-cmap').value = state.display.angio.colormap;
$('doppler-on').checked = !!state.display.doppler.on;
$('iso').value = state.display.iso;
$('gamma').value = state.display.gamma;
['x', 'y', 'z'].forEach((a, i) => { $(`clip-${a}0`).value = state.display.clip[i][0]; $(`clip-${a}1`).value = state.display.clip[i][1]; });
showWindow();
drawTf();
applyLayout();
connect();
state.request = request;
state.set = set;
state.pause = pause;
state.setWindow = (w) => setWindow(w, false);
