# SPDX-License-Identifier: MIT
"""numpy prototype: VolRec noncumulative and the motion-adaptive variants, on lowres from
`volrec process --lowres` (mode none) and truth from `volrec sim --truth`."""
import numpy as np, h5py, sys, json
# the prototype the ablation of docs/algorithms.md §2b was measured with (helpers in quality_ref)
from quality_ref import volume_metrics as vol_metrics, current_nearest, current_linear


def nearest(L, ox, oy, Y, X):
    return current_nearest(L, ox, oy, 5, 5)


def linear(L, ox, oy, Y, X):
    return current_linear(L, ox, oy, 5, 5)

def gz3(sigma=1.0):
    return np.exp(-np.arange(-1, 2) ** 2 / (2 * sigma * sigma))

def zsmooth(V, w):
    """sum over dz of w[dz+1] V[..., z+dz] / sum of w over valid dz"""
    num = w[1] * V.copy(); den = np.full(V.shape[-1], w[1])
    num[..., 1:] += w[0] * V[..., :-1]; den[1:] += w[0]
    num[..., :-1] += w[2] * V[..., 1:]; den[:-1] += w[2]
    return num / den

def zbox(V, n):
    if n <= 1: return V
    c = np.cumsum(np.pad(V, [(0, 0)] * (V.ndim - 1) + [(1, 0)]), axis=-1)
    Z = V.shape[-1]; h = n // 2
    lo = np.clip(np.arange(Z) - h, 0, Z); hi = np.clip(np.arange(Z) + h + 1, 0, Z)
    return (c[..., hi] - c[..., lo]) / (hi - lo)

def volrec(B, t, sigma=1.0, combine='sum'):
    """docs/algorithms.md §2.3-4 given B [Y][X][Z] and per-column temporal weights t [Y][X]."""
    Y, X, Z = B.shape
    g = lambda d2: np.exp(-d2 / (2 * sigma * sigma))
    num_g = np.zeros_like(B, dtype=np.float64); num_t = np.zeros_like(num_g)
    G = np.zeros(Z); cnt = np.zeros(Z)
    gz = gz3(sigma)
    Bg = np.zeros_like(num_g); B1 = np.zeros_like(num_g)
    # z parts
    Bg += gz[1] * B; B1 += B
    Bg[..., 1:] += gz[0] * B[..., :-1]; B1[..., 1:] += B[..., :-1]
    Bg[..., :-1] += gz[2] * B[..., 1:]; B1[..., :-1] += B[..., 1:]
    sgz = np.full(Z, gz[1]); sgz[1:] += gz[0]; sgz[:-1] += gz[2]
    nz = np.full(Z, 1.0); nz[1:] += 1; nz[:-1] += 1
    SG = np.zeros((Y, X)); ST = np.zeros((Y, X)); SGT = np.zeros((Y, X))
    NG = np.zeros_like(num_g); NT = np.zeros_like(num_g); NGT = np.zeros_like(num_g)
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            ys = slice(max(0, -dy), Y - max(0, dy)); yd = slice(max(0, dy), Y - max(0, -dy))
            xs = slice(max(0, -dx), X - max(0, dx)); xd = slice(max(0, dx), X - max(0, -dx))
            tn = np.zeros((Y, X)); tn[ys, xs] = t[yd, xd]
            bg = np.zeros_like(Bg); bg[ys, xs] = Bg[yd, xd]
            b1 = np.zeros_like(B1); b1[ys, xs] = B1[yd, xd]
            v = tn > 0
            gxy = g(dx * dx + dy * dy)
            SG += gxy * v; ST += tn; SGT += gxy * tn
            NG += (gxy * v)[..., None] * bg; NT += tn[..., None] * b1; NGT += (gxy * tn)[..., None] * bg
    with np.errstate(invalid='ignore', divide='ignore'):
        if combine == 'sum':
            out = 0.5 * (NG / SG[..., None] / sgz + NT / ST[..., None] / nz)
        else:
            out = NGT / SGT[..., None] / sgz
    return np.nan_to_num(out), SGT

class Recon:
    def __init__(self, Y, X, Z, sx, sy, mode='noncumulative', **kw):
        self.Y, self.X, self.Z, self.sx, self.sy = Y, X, Z, sx, sy
        self.S = sx * sy
        self.M = np.zeros((Y, X, Z)); self.E = np.full((Y, X), -1)
        self.O = np.zeros((Y, X, Z))
        self.mode = mode; self.kw = kw
        self.D = np.zeros((Y, X))   # motion measure per column
    def temporal(self, e, exp_tau=None):
        a = e - self.E
        if exp_tau: t = np.exp(-a / exp_tau)
        else: t = np.maximum(self.S - a, 0) / self.S
        return np.where(self.E >= 0, t, 0.0)
    def step(self, e, L):
        q = e % self.S; ox, oy = q % self.sx, q // self.sx
        kw = self.kw
        sl = (slice(oy, None, self.sy), slice(ox, None, self.sx))
        if self.mode == 'noncumulative':
            self.M[sl] = L; self.E[sl] = e
            return volrec(self.M, self.temporal(e))[0]
        if self.mode == 'cumulative':
            self.O[sl] = L; self.E[sl] = e
            self.O = volrec(self.O, self.temporal(e))[0]
            return self.O
        if self.mode == 'product_exp':
            self.M[sl] = L; self.E[sl] = e
            return volrec(self.M, self.temporal(e, kw.get('tau', 3)), combine='product')[0]
        if self.mode == 'linear':
            return linear(L, ox, oy, self.Y, self.X)
        if self.mode == 'nearest':
            return nearest(L, ox, oy, self.Y, self.X)
        if self.mode == 'adaptive':
            kappa = kw.get('kappa', 0.1); zb = kw.get('zbox', 9)
            old = self.M[sl]; oldE = self.E[sl]
            # change at the sampled positions: z-boxed difference, mean square over z
            d = np.mean(zbox(L - old, zb) ** 2, axis=-1)
            d = np.where(oldE >= 0, d, np.inf if kw.get('unknown_inf', True) else 0)
            self.M[sl] = L; self.E[sl] = e
            # full-res change map: bilinear interpolation of d (clamped)
            dd = np.where(np.isinf(d), 1e9, d)
            D = linear(dd[..., None], ox, oy, self.Y, self.X)[..., 0]
            if kw.get('dmax', False):
                D = np.maximum(D, nearest(dd[..., None], ox, oy, self.Y, self.X)[..., 0])
            a = e - self.E
            t = self.temporal(e)
            if kw.get('age_scale', True):
                t = t * np.exp(-D * a / self.S / kappa ** 2)
            H, _ = volrec(self.M, t, combine=kw.get('combine', 'sum'))
            C = linear(L, ox, oy, self.Y, self.X)
            if kw.get('csmooth', False): C = zsmooth(C, gz3(1.0))
            alpha = np.exp(-D / kappa ** 2)
            if kw.get('blend', True):
                return alpha[..., None] * H + (1 - alpha[..., None]) * C
            return H
        raise ValueError(self.mode)

def quality(full, truth, lo, hi, gain):
    amp = np.where(full > 0, np.clip(10 ** ((full * (hi - lo) + lo - gain) / 20), 0, 1), 0)
    return vol_metrics(amp, truth)

def calibrate(L, off, T, lo, hi, sx=5, sy=5):
    d = []
    for e in range(L.shape[0]):
        ox, oy = off[e]; t = T[e, oy::sy, ox::sx]; m = (t > 0.05) & (L[e] > 0)
        d.append((L[e][m] * (hi - lo) + lo) - 20 * np.log10(t[m]))
    return float(np.median(np.concatenate(d)))

def run(lowres_h5, truth_h5, lo, hi, variants, S=25, skip=None):
    with h5py.File(truth_h5) as f: T = f['truth'][:]
    with h5py.File(lowres_h5) as f: L = f['lowres'][:]; off = f['offset'][:]
    n, Y, X, Z = T.shape
    gain = calibrate(L, off, T, lo, hi)
    res = {}
    for name, (mode, kw) in variants.items():
        r = Recon(Y, X, Z, 5, 5, mode, **kw); ps = []; ss = []
        for e in range(n):
            out = np.clip(r.step(e, L[e].astype(np.float64)), 0, 1)
            if e >= (skip if skip is not None else S):
                p, s = quality(out, T[e], lo, hi, gain); ps.append(p); ss.append(s)
        res[name] = (float(np.mean(ps)), float(np.mean(ss)), ps)
    return res, gain
