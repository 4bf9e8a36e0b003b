// SPDX-License-Identifier: MIT
// volrec view: the 3-D pane, WebGL2 ray marching of the reduced volume view (docs/algorithms.md
// §4.5; the `volume` frame of docs/viewer.md) on the browser's side. Every browser has its own
// camera, mode, transfer function and clipping box; nothing here reaches the daemon.
//
// Space: the volume's voxel (y, x, z) sits in a box of [X·px, Z·pz, Y·py] (µm, or voxels when
// a size is unknown), drawn with x to the right, depth down and y towards the viewer, scaled
// so that its longest side is 1. The camera orbits the box's centre (azimuth about the
// vertical, elevation above the horizontal) at a distance set by the zoom; rays are cast per
// pixel from the eye (perspective, 30° vertical field of view) through the clipping box.
//
// Modes (uniform `mode`):
//   mip    maximum intensity along the ray;
//   dmip   depth-weighted MIP: samples weighed down linearly with their distance from the eye
//          (to 40 % at the far side of the box), so what is in front wins a tie;
//   mida   maximum intensity difference accumulation (Bruckner & Gröller 2009): compositing
//          through the transfer function whose accumulated colour is kept only in proportion
//          to how little a new maximum exceeds the one before (MIP-like, with occlusion); its
//          γ goes from alpha compositing (−1) through MIDA (0) to MIP (1), as in the paper
//          (below 0 the weight of a new maximum shrinks, above 0 the result is blended with
//          the MIP); the page's default is 0.5;
//   dvr    front-to-back alpha compositing through the transfer function (opacity per
//          windowed value, colour from the colour map), opacity corrected for the step;
//   iso    shaded isosurface: the first point where the windowed value reaches `iso`, found
//          to a sixteenth of a step, lit (Blinn-Phong, a head light) by its gradient;
//   depth  depth-coloured MIP: the maximum's brightness, its hue the tissue depth at which it
//          lies (red near the surface of the box, through green, to blue at its bottom).
'use strict';

import { lutBytes } from './colormap.js';

export const MODES = {
  mip: 0, dmip: 1, mida: 2, dvr: 3, iso: 4, depth: 5,
};
export const MODE_LABELS = {
  mip: 'MIP', dmip: 'depth-weighted MIP', mida: 'MIDA', dvr: 'alpha compositing', iso: 'shaded isosurface',
  depth: 'depth-coloured MIP',
};
export const DEFAULT_CAMERA = { az: -35, el: 28, zoom: 1 };

const VS = `#version 300 es
out vec2 ndc;
void main() {
  vec2 p = vec2(float((gl_VertexID << 1) & 2), float(gl_VertexID & 2)) * 2.0 - 1.0;
  ndc = p;
  gl_Position = vec4(p, 0.0, 1.0);
}`;

const FS = `#version 300 es
precision highp float;
precision highp sampler3D;
in vec2 ndc;
out vec4 outColor;
uniform sampler3D vol;
uniform sampler2D lut;       // colour map over the window, indexed by the raw value
uniform sampler2D tf;        // opacity (alpha) per raw value
uniform vec3 eye, right, up, fwd;
uniform float tanHalf, aspect;
uniform vec3 half_;          // the box's half sizes (world x, y, z)
uniform vec3 clipLo, clipHi; // the clipping box in unit-box coordinates
uniform vec3 texSize;        // voxels of the volume along world x, y, z
uniform float wlo, whi;      // the window, raw units 0..1
uniform float iso;
uniform float gamma;         // MIDA: -1 alpha compositing .. 0 MIDA .. 1 MIP
uniform int mode;
uniform int maxSteps;

// unit box u in [0,1]^3 (x right, y up, z away) -> texture (s: depth, t: x, r: y); the scan's
// y runs towards the viewer (-z), so that x, y and depth keep the en-face's handedness: seen
// from above, x runs right and y down, as on the en-face pane
vec3 texOf(vec3 u) { return vec3(1.0 - u.y, u.x, 1.0 - u.z); }
float sampleAt(vec3 u) { return texture(vol, texOf(u)).r; }
float win(float v) { return clamp((v - wlo) / max(whi - wlo, 1e-6), 0.0, 1.0); }
vec4 lutOf(float v) { return texture(lut, vec2(v * (255.0 / 256.0) + 0.5 / 256.0, 0.5)); }
float alphaOf(float v) { return texture(tf, vec2(v * (255.0 / 256.0) + 0.5 / 256.0, 0.5)).a; }
vec3 hue(float t) {
  // red (0) -> yellow -> green -> cyan -> blue (1)
  t = clamp(t, 0.0, 1.0) * 4.0;
  return clamp(vec3(2.0 - t, t < 2.0 ? t : 4.0 - t, t - 2.0), 0.0, 1.0);
}

void main() {
  vec3 dir = normalize(fwd + ndc.x * tanHalf * aspect * right + ndc.y * tanHalf * up);
  vec3 lo = -half_ + clipLo * 2.0 * half_, hi = -half_ + clipHi * 2.0 * half_;
  vec3 inv = 1.0 / dir;
  vec3 t0 = (lo - eye) * inv, t1 = (hi - eye) * inv;
  vec3 tmin = min(t0, t1), tmax = max(t0, t1);
  float tn = max(max(tmin.x, tmin.y), max(tmin.z, 0.0));
  float tf_ = min(min(tmax.x, tmax.y), tmax.z);
  vec3 bg = vec3(0.0);
  if (tf_ <= tn) { outColor = vec4(bg, 1.0); return; }
  // one sample per voxel of the finest axis (the trilinear texture fills in between)
  vec3 vox = 2.0 * half_ / texSize;
  float h = min(vox.x, min(vox.y, vox.z));
  int n = int(min(float(maxSteps), ceil((tf_ - tn) / h)));
  h = (tf_ - tn) / float(max(n, 1));
  float span = tf_ - tn;
  vec3 toU = 1.0 / (2.0 * half_);
  float m = 0.0, mt = 0.0, vmax = 0.0;
  vec3 C = vec3(0.0);
  float A = 0.0;
  float alphaScale = h / min(vox.x, min(vox.y, vox.z));
  for (int k = 0; k < 2048; k++) {
    if (k >= n) break;
    float t = tn + (float(k) + 0.5) * h;
    vec3 p = eye + t * dir;
    vec3 u = (p + half_) * toU;
    float v = sampleAt(u);
    if (mode == 0) {
      if (v > m) { m = v; mt = u.y; }
    } else if (mode == 1) {
      float w = v * (1.0 - 0.6 * (t - tn) / span);
      m = max(m, w);
    } else if (mode == 5) {
      if (v > m) { m = v; mt = 1.0 - u.y; }
    } else if (mode == 2 || mode == 3) {
      float a = 1.0 - pow(1.0 - alphaOf(v), alphaScale);
      vec3 c = lutOf(v).rgb;
      if (mode == 2) {
        float wv = win(v);
        float beta = 1.0;
        m = max(m, v);
        if (wv > vmax) { beta = 1.0 - (wv - vmax) * (1.0 + min(gamma, 0.0)); vmax = wv; }
        C = beta * C + (1.0 - beta * A) * a * c;
        A = beta * A + (1.0 - beta * A) * a;
      } else {
        C += (1.0 - A) * a * c;
        A += (1.0 - A) * a;
        if (A > 0.985) break;
      }
    } else if (mode == 4) {
      if (win(v) >= iso) {
        // refine between the previous sample and this one
        float ta = t - h, tb = t;
        for (int r = 0; r < 4; r++) {
          float tm = 0.5 * (ta + tb);
          if (win(sampleAt((eye + tm * dir + half_) * toU)) >= iso) tb = tm; else ta = tm;
        }
        vec3 q = (eye + tb * dir + half_) * toU;
        vec3 e = 1.0 / texSize;
        vec3 g = vec3(
          sampleAt(q + vec3(e.x, 0, 0)) - sampleAt(q - vec3(e.x, 0, 0)),
          sampleAt(q + vec3(0, e.y, 0)) - sampleAt(q - vec3(0, e.y, 0)),
          sampleAt(q + vec3(0, 0, e.z)) - sampleAt(q - vec3(0, 0, e.z))) / (2.0 * vox);
        vec3 nrm = length(g) > 1e-6 ? -normalize(g) : -dir;
        if (dot(nrm, dir) > 0.0) nrm = -nrm;
        vec3 L = -dir;
        float diff = max(dot(nrm, L), 0.0);
        float spec = pow(max(dot(nrm, normalize(L - dir)), 0.0), 32.0);
        vec3 base = vec3(0.95, 0.78, 0.62);
        C = base * (0.18 + 0.72 * diff) + vec3(0.35 * spec);
        A = 1.0;
        break;
      }
    }
  }
  if (mode == 0 || mode == 1) outColor = vec4(lutOf(m).rgb, 1.0);
  else if (mode == 5) outColor = vec4(hue(mt) * win(m), 1.0);
  else if (mode == 2) outColor = vec4(mix(C + (1.0 - A) * bg, lutOf(m).rgb, max(gamma, 0.0)), 1.0);
  else outColor = vec4(C + (1.0 - A) * bg, 1.0);
}`;

function compile(gl, type, src) {
  const s = gl.createShader(type);
  gl.shaderSource(s, src);
  gl.compileShader(s);
  if (!gl.getShaderParameter(s, gl.COMPILE_STATUS)) throw new Error(`3-D shader: ${gl.getShaderInfoLog(s)}`);
  return s;
}

// Opacity per u8 value from transfer-function points [{t, a}] (t the windowed value 0..1, in
// increasing order; a the opacity 0..1), linear between them, over the window [lo, hi].
export function tfAlpha(points, lo, hi) {
  const out = new Uint8Array(256 * 4);
  for (let v = 0; v < 256; v++) {
    const t = Math.min(1, Math.max(0, (v - lo) / (hi - lo)));
    let a = points[points.length - 1].a;
    for (let i = 1; i < points.length; i++) {
      if (t <= points[i].t) {
        const p = points[i - 1], q = points[i];
        a = q.t > p.t ? p.a + (q.a - p.a) * (t - p.t) / (q.t - p.t) : q.a;
        break;
      }
    }
    if (t <= points[0].t) a = points[0].a;
    out[4 * v + 3] = Math.round(255 * Math.min(1, Math.max(0, a)));
  }
  return out;
}

export const DEFAULT_TF = [{ t: 0, a: 0 }, { t: 0.35, a: 0 }, { t: 0.7, a: 0.08 }, { t: 1, a: 0.6 }];

export class VolumeRenderer {
  constructor(canvas) {
    this.canvas = canvas;
    const gl = canvas.getContext('webgl2', { preserveDrawingBuffer: true, antialias: false });
    if (!gl) throw new Error('this browser has no WebGL2: the 3-D pane needs it');
    this.gl = gl;
    const prog = gl.createProgram();
    gl.attachShader(prog, compile(gl, gl.VERTEX_SHADER, VS));
    gl.attachShader(prog, compile(gl, gl.FRAGMENT_SHADER, FS));
    gl.linkProgram(prog);
    if (!gl.getProgramParameter(prog, gl.LINK_STATUS)) throw new Error(`3-D program: ${gl.getProgramInfoLog(prog)}`);
    this.prog = prog;
    this.loc = {};
    for (const n of ['vol', 'lut', 'tf', 'eye', 'right', 'up', 'fwd', 'tanHalf', 'aspect', 'half_', 'clipLo',
      'clipHi', 'texSize', 'wlo', 'whi', 'iso', 'gamma', 'mode', 'maxSteps']) this.loc[n] = gl.getUniformLocation(prog, n);
    this.vao = gl.createVertexArray();
    this.volTex = gl.createTexture();
    this.lutTex = gl.createTexture();
    this.tfTex = gl.createTexture();
    for (const t of [this.lutTex, this.tfTex]) {
      gl.bindTexture(gl.TEXTURE_2D, t);
      gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_MIN_FILTER, gl.NEAREST);
      gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_MAG_FILTER, gl.NEAREST);
      gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_WRAP_S, gl.CLAMP_TO_EDGE);
      gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_WRAP_T, gl.CLAMP_TO_EDGE);
    }
    this.volume = null;
    // what draws: a software renderer (no GPU) is told apart so the page can draw fewer pixels
    const info = gl.getExtension('WEBGL_debug_renderer_info');
    this.rendererName = String(gl.getParameter(info ? info.UNMASKED_RENDERER_WEBGL : gl.RENDERER));
    this.software = /swiftshader|llvmpipe|software|softpipe/i.test(this.rendererName);
    this.lutKey = '';
    this.tfKey = '';
  }

  // The volume frame's payload [Yr][Xr][Zr] (z fastest) and the box it fills (µm or voxels).
  setVolume(bytes, shape, box) {
    const gl = this.gl, [Y, X, Z] = shape;
    gl.bindTexture(gl.TEXTURE_3D, this.volTex);
    gl.pixelStorei(gl.UNPACK_ALIGNMENT, 1);
    gl.texImage3D(gl.TEXTURE_3D, 0, gl.R8, Z, X, Y, 0, gl.RED, gl.UNSIGNED_BYTE, bytes);
    gl.texParameteri(gl.TEXTURE_3D, gl.TEXTURE_MIN_FILTER, gl.LINEAR);
    gl.texParameteri(gl.TEXTURE_3D, gl.TEXTURE_MAG_FILTER, gl.LINEAR);
    for (const w of [gl.TEXTURE_WRAP_S, gl.TEXTURE_WRAP_T, gl.TEXTURE_WRAP_R]) gl.texParameteri(gl.TEXTURE_3D, w, gl.CLAMP_TO_EDGE);
    this.volume = { shape, box };
  }

  // Draw with the display `d`: {mode, window: [lo, hi], colormap, tf, iso, camera, clip}.
  // Returns the milliseconds the GPU (or SwiftShader) took, when `sync` waits for it.
  draw(d, sync) {
    const gl = this.gl, c = this.canvas;
    gl.viewport(0, 0, c.width, c.height);
    gl.clearColor(0, 0, 0, 1);
    gl.clear(gl.COLOR_BUFFER_BIT);
    if (!this.volume) return 0;
    const t0 = performance.now();
    const [lo, hi] = d.window;
    const lutKey = `${d.colormap}:${lo}:${hi}`;
    if (lutKey !== this.lutKey) {
      gl.bindTexture(gl.TEXTURE_2D, this.lutTex);
      gl.texImage2D(gl.TEXTURE_2D, 0, gl.RGBA8, 256, 1, 0, gl.RGBA, gl.UNSIGNED_BYTE, lutBytes(d.colormap, lo, hi));
      this.lutKey = lutKey;
    }
    const tfKey = `${JSON.stringify(d.tf)}:${lo}:${hi}`;
    if (tfKey !== this.tfKey) {
      gl.bindTexture(gl.TEXTURE_2D, this.tfTex);
      gl.texImage2D(gl.TEXTURE_2D, 0, gl.RGBA8, 256, 1, 0, gl.RGBA, gl.UNSIGNED_BYTE, tfAlpha(d.tf, lo, hi));
      this.tfKey = tfKey;
    }
    const [Y, X, Z] = this.volume.shape, [bx, by, bz] = this.volume.box; // world x, y (depth), z (y)
    const s = 1 / Math.max(bx, by, bz);
    const half = [bx * s / 2, by * s / 2, bz * s / 2];
    const cam = d.camera, az = cam.az * Math.PI / 180, el = cam.el * Math.PI / 180;
    const dist = 2.1 / Math.max(0.05, cam.zoom);
    const back = [Math.cos(el) * Math.sin(az), Math.sin(el), Math.cos(el) * Math.cos(az)];
    // eye at -z looking towards +z when az = el = 0
    const eye = [-back[0] * dist, back[1] * dist, -back[2] * dist];
    const fwd = norm([-eye[0], -eye[1], -eye[2]]);
    const right = norm(cross([0, 1, 0], fwd));
    const up = cross(fwd, right);
    const clip = d.clip; // [[x0, x1], [y0, y1], [z0, z1]] fractions of the scan's x, y and depth
    this.view = { eye, right, up, fwd, half, tanHalf: Math.tan(15 * Math.PI / 180), aspect: c.width / c.height };
    gl.useProgram(this.prog);
    gl.bindVertexArray(this.vao);
    gl.activeTexture(gl.TEXTURE0); gl.bindTexture(gl.TEXTURE_3D, this.volTex);
    gl.activeTexture(gl.TEXTURE1); gl.bindTexture(gl.TEXTURE_2D, this.lutTex);
    gl.activeTexture(gl.TEXTURE2); gl.bindTexture(gl.TEXTURE_2D, this.tfTex);
    const L = this.loc;
    gl.uniform1i(L.vol, 0); gl.uniform1i(L.lut, 1); gl.uniform1i(L.tf, 2);
    gl.uniform3fv(L.eye, eye); gl.uniform3fv(L.right, right); gl.uniform3fv(L.up, up); gl.uniform3fv(L.fwd, fwd);
    gl.uniform1f(L.tanHalf, Math.tan(15 * Math.PI / 180));
    gl.uniform1f(L.aspect, c.width / c.height);
    gl.uniform3fv(L.half_, half);
    // unit box: x = scan x, y = up (1 - depth), z = 1 - scan y
    gl.uniform3fv(L.clipLo, [clip[0][0], 1 - clip[2][1], 1 - clip[1][1]]);
    gl.uniform3fv(L.clipHi, [clip[0][1], 1 - clip[2][0], 1 - clip[1][0]]);
    gl.uniform3fv(L.texSize, [X, Z, Y]);
    gl.uniform1f(L.wlo, lo / 255); gl.uniform1f(L.whi, hi / 255);
    gl.uniform1f(L.iso, d.iso);
    gl.uniform1f(L.gamma, d.gamma ?? 0.5);
    gl.uniform1i(L.mode, MODES[d.mode] ?? 0);
    gl.uniform1i(L.maxSteps, 2 * Math.max(X, Y, Z) + 8); // the diagonal at one sample a voxel
    gl.drawArrays(gl.TRIANGLES, 0, 3);
    if (!sync) return 0;
    const px = new Uint8Array(4);
    gl.readPixels(0, 0, 1, 1, gl.RGBA, gl.UNSIGNED_BYTE, px); // waits for the frame
    return performance.now() - t0;
  }

  // The box's edges as seen by the last draw: [[x0, y0, x1, y1], ...] in fractions of the canvas
  // (0..1 across and down), and where its axes start and end (x, y, depth from the corner at
  // the scan's origin on the surface), for the overlay that tells which way is which.
  outline() {
    const v = this.view;
    if (!v || !this.volume) return null;
    const proj = (u) => { // unit box point -> canvas fraction
      const p = [(2 * u[0] - 1) * v.half[0], (2 * u[1] - 1) * v.half[1], (2 * u[2] - 1) * v.half[2]];
      const d = [p[0] - v.eye[0], p[1] - v.eye[1], p[2] - v.eye[2]];
      const z = d[0] * v.fwd[0] + d[1] * v.fwd[1] + d[2] * v.fwd[2];
      const x = (d[0] * v.right[0] + d[1] * v.right[1] + d[2] * v.right[2]) / (z * v.tanHalf * v.aspect);
      const y = (d[0] * v.up[0] + d[1] * v.up[1] + d[2] * v.up[2]) / (z * v.tanHalf);
      return [(x + 1) / 2, (1 - y) / 2];
    };
    const edges = [];
    for (const a of [0, 1]) {
      for (const b of [0, 1]) {
        edges.push([proj([0, a, b]), proj([1, a, b])]);
        edges.push([proj([a, 0, b]), proj([a, 1, b])]);
        edges.push([proj([a, b, 0]), proj([a, b, 1])]);
      }
    }
    // the scan's origin: x 0, y 0, depth 0 (the top of the box, unit y = 1; y = 0 at unit z = 1)
    const o = proj([0, 1, 1]);
    return { edges, axes: { origin: o, x: proj([1, 1, 1]), y: proj([0, 1, 0]), depth: proj([0, 0, 1]) } };
  }

  // The canvas' pixels (RGBA, bottom row first), for the tests.
  pixels() {
    const gl = this.gl, c = this.canvas, out = new Uint8Array(c.width * c.height * 4);
    gl.readPixels(0, 0, c.width, c.height, gl.RGBA, gl.UNSIGNED_BYTE, out);
    return out;
  }
}

function cross(a, b) {
  return [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]];
}
function norm(a) {
  const l = Math.hypot(a[0], a[1], a[2]) || 1;
  return [a[0] / l, a[1] / l, a[2] / l];
}
