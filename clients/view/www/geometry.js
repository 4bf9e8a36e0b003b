// SPDX-License-Identifier: MIT
// volrec view: true geometry of the 2-D panes (docs/viewer.md "The page"). A picture is drawn
// at the aspect of its pixels in µm (frame version 2 carries the size of a sent pixel along its
// rows and columns, docs/algorithms.md §6), fitted into its pane without stretching; where a
// size is unknown the picture is drawn in voxels (square voxels) and labelled "vox", never in a
// guessed unit. Axes, scale bar and ruler read their numbers from the same mapping.
'use strict';

// Room around the picture for the axes' labels, CSS pixels.
export const MARGIN = { left: 44, right: 8, top: 6, bottom: 22 };

// How a pane's picture maps to the page: `across` and `down` are the picture's axes on the
// screen (B-scans and slices are drawn transposed: depth down), each with the number of sent
// pixels, the size of one in `unit` (µm, or voxels when unknown) and the axis' name.
export function pictureAxes(h, transpose) {
  const rowsUm = h.pixelUm ? h.pixelUm[0] : 0, colsUm = h.pixelUm ? h.pixelUm[1] : 0;
  const known = rowsUm > 0 && colsUm > 0;
  const rowF = h.factors ? h.factors[0] : h.rowStep || 1, colF = h.factors ? h.factors[1] : h.colStep || 1;
  const rows = { n: h.rows, size: known ? rowsUm : rowF, factor: rowF };
  const cols = { n: h.cols, size: known ? colsUm : colF, factor: colF };
  const names = {
    enface_mean: ['y', 'x'], enface_max: ['y', 'x'], plane: ['y', 'x'], bscan: ['x', 'z'], slice: ['y', 'z'],
  }[String(h.kind).replace(/^(angio|doppler)_/, '')] || ['row', 'col']; // a channel's as its kind's
  rows.name = names[0];
  cols.name = names[1];
  const [across, down] = transpose ? [rows, cols] : [cols, rows];
  return { across, down, unit: known ? 'µm' : 'vox', known };
}

// The rectangle (CSS pixels, within a pane of w × h) the picture is drawn in: as large as fits
// inside the margins at its true aspect. scale: CSS pixels per unit.
export function fitRect(axes, w, h) {
  const aw = Math.max(1, w - MARGIN.left - MARGIN.right), ah = Math.max(1, h - MARGIN.top - MARGIN.bottom);
  const pw = axes.across.n * axes.across.size, ph = axes.down.n * axes.down.size;
  const scale = Math.min(aw / pw, ah / ph);
  const rw = pw * scale, rh = ph * scale;
  return {
    x: MARGIN.left + (aw - rw) / 2, y: MARGIN.top + (ah - rh) / 2, w: rw, h: rh, scale,
    physW: pw, physH: ph,
  };
}

// 1, 2 or 5 × 10^k: the nicest step not below x.
export function niceStep(x) {
  if (!(x > 0)) return 1;
  const e = Math.pow(10, Math.floor(Math.log10(x)));
  const m = x / e;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * e;
}

// 1, 2 or 5 × 10^k: the largest not above x (a scale bar never longer than asked).
export function niceFloor(x) {
  if (!(x > 0)) return 1;
  const e = Math.pow(10, Math.floor(Math.log10(x)));
  const m = x / e;
  return (m >= 5 ? 5 : m >= 2 ? 2 : 1) * e;
}

// A length in the pane's unit as text: µm below 1 mm, mm from 1 mm on; voxels as "N vox".
export function formatLength(v, unit) {
  if (unit !== 'µm') return `${+v.toFixed(v < 10 ? 1 : 0)} vox`;
  if (Math.abs(v) >= 1000) return `${+(v / 1000).toFixed(Math.abs(v) >= 10000 ? 1 : 2)} mm`;
  return `${+v.toFixed(Math.abs(v) < 10 ? 1 : 0)} µm`;
}

// The unit an axis of span `span` (µm) is labelled in, and the factor from µm to it.
function axisUnit(span, unit) {
  if (unit !== 'µm') return { label: 'vox', f: 1 };
  return span >= 2000 ? { label: 'mm', f: 1e-3 } : { label: 'µm', f: 1 };
}

// Tick positions along an axis of `span` units drawn over `px` CSS pixels (about one per 60 px).
export function ticks(span, px, unit) {
  const u = axisUnit(span, unit);
  const step = niceStep((span * u.f) / Math.max(1, px / 60));
  const out = [];
  for (let t = 0; t <= span * u.f + 1e-9; t += step) out.push({ at: t / u.f, label: +t.toFixed(6) });
  return { unit: u.label, list: out };
}

// The scale bar: the nicest length at most a quarter of the picture's width, its length in CSS
// pixels and its label.
export function scaleBar(rect, unit) {
  const len = niceFloor(rect.physW / 4);
  return { len, px: len * rect.scale, label: formatLength(len, unit) };
}

// A point of the pane (CSS pixels) as a position in the picture: the fraction across and down
// (0..1) and the physical offset (unit) from its top left corner; null outside the picture.
export function pointIn(rect, x, y, clampInside) {
  let u = (x - rect.x) / rect.w, v = (y - rect.y) / rect.h;
  if (!clampInside && (u < 0 || u > 1 || v < 0 || v > 1)) return null;
  u = Math.min(1, Math.max(0, u));
  v = Math.min(1, Math.max(0, v));
  return { u, v, a: u * rect.physW, d: v * rect.physH };
}

// The distance between two points of the picture (their physical offsets), in the pane's unit.
export function distance(p, q) {
  return Math.hypot(q.a - p.a, q.d - p.d);
}
