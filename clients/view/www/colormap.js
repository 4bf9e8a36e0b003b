// SPDX-License-Identifier: MIT
// volrec view: colour maps and the display window (docs/viewer.md "The page"). Everything here
// belongs to one browser: the daemon's u8 pictures are mapped to colours on the browser's side,
// through a 256-entry lookup table made from a window [lo, hi] (u8 values) and a colour map.
//
// A colour map is an entry of COLORMAPS: `kind` says what values it is meant for, `rgb(t)` gives
// [r, g, b] (0..255) for t in [0, 1]. Intensity maps ('intensity') apply to every structural
// picture. The functional pictures bring their own: the angiography slab is an intensity of
// decorrelation ('angio': sequential maps, with its own window), the Doppler overlay a signed
// velocity ('signed': t = 0.5 is zero flow, t < 0.5 towards the probe in reds and yellows, t > 0.5
// away from it in blues and cyans, drawn where |v| exceeds the browser's threshold); mapsFor(kind)
// lists the maps of a kind.
'use strict';

function clamp01(t) {
  return t < 0 ? 0 : t > 1 ? 1 : t;
}
const u8 = (v) => Math.max(0, Math.min(255, Math.round(v * 255)));

// matplotlib's viridis as a polynomial fit (max error < 1 %, CC0)
const VIRIDIS = [[0.2777273272234177, 0.005407344544966578, 0.3340998053353061],
  [0.1050930431085774, 1.404613529898575, 1.384590162594685],
  [-0.3308618287255563, 0.214847559468213, 0.09509516302823659],
  [-4.634230498983486, -5.799100973351585, -19.33244095627987],
  [6.228269936347081, 14.17993336680509, 56.69055260068105],
  [4.776384997670288, -13.74514537774601, -65.35303263337234],
  [-5.435455855934631, 4.645852612178535, 26.3124352495832]];

function viridis(t) {
  const out = [0, 0, 0];
  for (let a = 0; a < 3; a++) {
    let v = VIRIDIS[6][a];
    for (let k = 5; k >= 0; k--) v = VIRIDIS[k][a] + t * v;
    out[a] = u8(v);
  }
  return out;
}

export const COLORMAPS = {
  gray: { label: 'grey', kind: 'intensity', rgb: (t) => { const v = u8(t); return [v, v, v]; } },
  inverted: { label: 'inverted grey', kind: 'intensity', rgb: (t) => { const v = u8(1 - t); return [v, v, v]; } },
  // black → red → yellow → white, each third of the range one channel
  hot: { label: 'hot', kind: 'intensity', rgb: (t) => [u8(3 * t), u8(3 * t - 1), u8(3 * t - 2)] },
  viridis: { label: 'viridis (perceptual)', kind: 'intensity', rgb: viridis },
  // black → deep red → orange → pale yellow: flow bright on dark tissue, every step brighter
  angio: { label: 'angio (black–red–yellow)', kind: 'angio',
    rgb: (t) => [u8(Math.min(1, 1.6 * t)), u8(Math.max(0, 1.6 * t - 0.55)), u8(Math.max(0, 2.2 * t - 1.4))] },
  'angio-gray': { label: 'grey', kind: 'angio', rgb: (t) => { const v = u8(t); return [v, v, v]; } },
  // colour Doppler: towards the probe (negative v_z, t < 0.5) red to yellow, away from it
  // (positive v_z, deeper; t > 0.5) blue to cyan; the brighter, the faster
  doppler: { label: 'Doppler (red towards, blue away)', kind: 'signed',
    rgb: (t) => {
      const s = 2 * clamp01(t) - 1, a = Math.abs(s), hi = Math.max(0, 2 * a - 1);
      const main = u8(0.45 + 0.55 * Math.min(1, 2 * a)), g = u8(0.9 * hi);
      return s < 0 ? [main, g, 0] : [0, g, main];
    } },
};

export function mapsFor(kind) {
  return Object.entries(COLORMAPS).filter(([, m]) => m.kind === kind).map(([name]) => name);
}

// The grey level [0, 1] a u8 value v takes in the window [lo, hi] (lo < hi, u8 units).
export function windowed(v, lo, hi) {
  return clamp01((v - lo) / (hi - lo));
}

const lutCache = new Map();

// 256 colours as little-endian RGBA words (ImageData's memory order: 0xAABBGGRR), for the
// colour map `name` over the window [lo, hi]. Cached: a window dragged back and forth is free.
export function lut32(name, lo, hi) {
  const key = `${name}:${lo}:${hi}`;
  let lut = lutCache.get(key);
  if (lut) return lut;
  const map = (COLORMAPS[name] || COLORMAPS.gray).rgb;
  lut = new Uint32Array(256);
  for (let v = 0; v < 256; v++) {
    const [r, g, b] = map(windowed(v, lo, hi));
    lut[v] = (0xff000000 | (b << 16) | (g << 8) | r) >>> 0;
  }
  if (lutCache.size > 64) lutCache.clear();
  lutCache.set(key, lut);
  return lut;
}

// The same table as RGBA bytes (a WebGL texture of 256 × 1).
export function lutBytes(name, lo, hi) {
  return new Uint8Array(lut32(name, lo, hi).buffer.slice(0));
}

// The automatic first window: the p_lo and p_hi percentiles of the values of the pictures
// given (u8 arrays), widened to at least 16 levels so that a flat picture is not a step.
export function percentileWindow(pictures, pLo = 0.01, pHi = 0.995) {
  const hist = new Float64Array(256);
  let n = 0;
  for (const px of pictures) {
    // a large picture is sampled (every k-th value): the window needs the distribution only
    const k = Math.max(1, Math.floor(px.length / 200000));
    for (let i = 0; i < px.length; i += k) hist[px[i]]++;
    n += Math.ceil(px.length / k);
  }
  if (!n) return null;
  const at = (p) => {
    const want = p * n;
    let acc = 0;
    for (let v = 0; v < 256; v++) {
      acc += hist[v];
      if (acc >= want) return v;
    }
    return 255;
  };
  let lo = at(pLo), hi = at(pHi);
  if (hi - lo < 16) {
    const mid = (lo + hi) / 2;
    lo = Math.max(0, Math.round(mid - 8));
    hi = Math.min(255, lo + 16);
    lo = hi - 16;
  }
  return [lo, hi];
}
