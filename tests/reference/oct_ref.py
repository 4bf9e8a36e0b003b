# SPDX-License-Identifier: MIT
"""An independent float64 reference of docs/algorithms.md (§1 preprocessing, §2 VolRec
reconstruction) in numpy, written from the text of the page and docs/algorithms.md, used to
check the backends. Configurations are plain dicts shaped like the YAML schema."""
import math

import numpy as np


def _get(cfg, path, default=None):
    node = cfg
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node


# ---- §1 preprocessing ----------------------------------------------------------------------

def unpack12(raw, sample_type):
    """Packed 12-bit samples (docs/algorithms.md §0), bytes [..., 3K/2] -> integers [..., K]:
    u12p (PFNC Mono12p) s0 = b0 | (b1 & 0xF) << 8, s1 = b1 >> 4 | b2 << 4; u12gv (GigE Vision
    Mono12Packed) s0 = b0 << 4 | (b1 & 0xF), s1 = b2 << 4 | b1 >> 4."""
    b = np.asarray(raw, dtype=np.uint8).astype(np.int64)
    b = b.reshape(b.shape[:-1] + (b.shape[-1] // 3, 3))
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    if sample_type == "u12p":
        s0, s1 = b0 | (b1 & 0xF) << 8, b1 >> 4 | b2 << 4
    elif sample_type == "u12gv":
        s0, s1 = b0 << 4 | (b1 & 0xF), b2 << 4 | b1 >> 4
    else:
        raise ValueError(f"not a packed sample type: {sample_type}")
    return np.stack([s0, s1], axis=-1).reshape(b.shape[:-2] + (2 * b.shape[-2],))


def pack12(values, sample_type):
    """The inverse of unpack12: integers 0..4095 [..., K] (K even) -> bytes [..., 3K/2]."""
    v = np.asarray(values, dtype=np.int64)
    v = v.reshape(v.shape[:-1] + (v.shape[-1] // 2, 2))
    s0, s1 = v[..., 0], v[..., 1]
    if sample_type == "u12p":
        b = (s0 & 0xFF, s0 >> 8 | (s1 & 0xF) << 4, s1 >> 4)
    elif sample_type == "u12gv":
        b = (s0 >> 4, (s0 & 0xF) | (s1 & 0xF) << 4, s1 >> 4)
    else:
        raise ValueError(f"not a packed sample type: {sample_type}")
    out = np.stack(b, axis=-1).astype(np.uint8)
    return out.reshape(out.shape[:-2] + (3 * out.shape[-2],))


def convert(raw, sample_type, bit_shift):
    """Samples to float64; integers divided by 2**bit_shift with floor. Packed 12-bit types
    come as bytes [..., 3K/2] and are unpacked first."""
    if sample_type in ("u12p", "u12gv"):
        raw = unpack12(raw, sample_type)
    s = raw.astype(np.float64)
    if sample_type != "f32" and bit_shift:
        s = np.floor(s / float(2 ** bit_shift))
    return s


def window(kind, K, param=None):
    n = np.arange(K, dtype=np.float64)
    M = K - 1
    if kind == "none":
        return np.ones(K)
    if kind == "hann":
        return 0.5 - 0.5 * np.cos(2 * np.pi * n / M)
    if kind == "hamming":
        return 0.54 - 0.46 * np.cos(2 * np.pi * n / M)
    if kind == "blackman":
        return 0.42 - 0.5 * np.cos(2 * np.pi * n / M) + 0.08 * np.cos(4 * np.pi * n / M)
    if kind == "gauss":
        sigma = 0.4 if param is None else param
        half = M / 2.0
        return np.exp(-0.5 * ((n - half) / (sigma * half)) ** 2)
    if kind == "tukey":
        alpha = 0.5 if param is None else param
        if alpha <= 0:
            return np.ones(K)
        w = np.ones(K)
        edge = alpha * M / 2.0
        lo = n < edge
        hi = n > M - edge
        w[lo] = 0.5 * (1 + np.cos(np.pi * (n[lo] / edge - 1)))
        w[hi] = 0.5 * (1 + np.cos(np.pi * ((M - n[hi]) / edge - 1)))
        return w
    raise ValueError(kind)


def positions(rs, K):
    """Fractional input positions p[j], clamped to [0, K-1]."""
    j = np.arange(K, dtype=np.float64)
    if "table" in rs:
        p = np.asarray(rs["table"], dtype=np.float64)
    elif "poly" in rs:
        c = rs["poly"]
        u = j / (K - 1)
        p = c[0] + c[1] * u + c[2] * u ** 2 + c[3] * u ** 3
    elif "wavelength_nm" in rs:
        l0, l1, l2, l3 = rs["wavelength_nm"]
        lam = l0 + l1 * j + l2 * j ** 2 + l3 * j ** 3
        kappa = 2 * np.pi / lam
        target = np.linspace(kappa[0], kappa[-1], K)
        if kappa[-1] > kappa[0]:
            p = np.interp(target, kappa, j)
        else:
            p = np.interp(target, kappa[::-1], j[::-1])
    else:
        raise ValueError("no positions")
    return np.clip(p, 0, K - 1)


def interp_linear(x, p):
    K = x.shape[-1]
    i = np.floor(p).astype(int)
    t = p - i
    i1 = np.minimum(i + 1, K - 1)
    return (1 - t) * x[..., i] + t * x[..., i1]


def interp_cubic(x, p):
    K = x.shape[-1]
    i = np.floor(p).astype(int)
    t = p - i
    w = [-t * (t - 1) * (t - 2) / 6, (t + 1) * (t - 1) * (t - 2) / 2,
         -(t + 1) * t * (t - 2) / 2, (t + 1) * t * (t - 1) / 6]
    out = np.zeros(x.shape[:-1] + (len(p),))
    for q in range(4):
        idx = np.clip(i - 1 + q, 0, K - 1)
        out += w[q] * x[..., idx]
    return out


def interp_spline(x, p):
    """Natural cubic spline through (i, x[i]), i = 0..K-1 (unit spacing)."""
    K = x.shape[-1]
    flat = x.reshape(-1, K)
    # second derivatives: dense solve of the interior system, M[0] = M[K-1] = 0
    n = K - 2
    A = np.zeros((n, n))
    for r in range(n):
        A[r, r] = 4.0
        if r > 0:
            A[r, r - 1] = 1.0
        if r < n - 1:
            A[r, r + 1] = 1.0
    rhs = 6.0 * (flat[:, 2:] - 2 * flat[:, 1:-1] + flat[:, :-2])
    M = np.zeros_like(flat)
    M[:, 1:-1] = np.linalg.solve(A, rhs.T).T
    i = np.minimum(np.floor(p).astype(int), K - 2)
    t = p - i
    a, b = 1 - t, t
    y = (a * flat[:, i] + b * flat[:, i + 1] +
         ((a ** 3 - a) * M[:, i] + (b ** 3 - b) * M[:, i + 1]) / 6.0)
    return y.reshape(x.shape[:-1] + (len(p),))


def partial_median(X, threshold):
    """docs/algorithms.md §1b on the spectra X [ny][nx][N/2] (complex): per B-scan and depth the
    complex mean over the A-scans, sigma = sqrt(var Re + var Im) (population), sigma_bg = the
    median of sigma over depth; where sigma > threshold * sigma_bg the medians of Re and Im over
    the A-scans are subtracted, elsewhere the mean. Returns (X - C, depths that took the median
    per B-scan)."""
    mean = X.mean(axis=1)
    sigma = np.sqrt(X.real.var(axis=1) + X.imag.var(axis=1))
    sigma_bg = np.median(sigma, axis=1)
    use_median = sigma > threshold * sigma_bg[:, None]
    median = np.median(X.real, axis=1) + 1j * np.median(X.imag, axis=1)
    C = np.where(use_median, median, mean)
    return X - C[:, None, :], use_median.sum(axis=1)


def spectra(raw, cfg, stats=None):
    """Steps 1-5 (and §1b) of every raw B-scan: raw [ny * M][nx][K] -> X [ny * M][nx][N/2],
    complex. With background mode partial_median, stats (a dict, if given) receives
    "median_depths" [ny] (the most over a position's repeats)."""
    g = cfg["geometry"]
    pp = cfg.get("preprocess", {})
    K = g["samples_per_ascan"]
    s = convert(raw, g.get("sample_type", "u16"), g.get("bit_shift", 0))

    mode = _get(pp, "background.mode", "ascan_mean")
    if mode == "ascan_mean":
        x = s - s.mean(axis=2, keepdims=True)
    elif mode == "bscan_mean":
        x = s - s.mean(axis=1, keepdims=True)
    elif mode == "bscan_median":
        x = s - np.median(s, axis=1, keepdims=True)
    elif mode == "reference":
        x = s - np.asarray(_get(pp, "background.reference_data"), dtype=np.float64)
    elif mode in ("none", "partial_median"):
        x = s
    else:
        raise ValueError(mode)

    rs = pp.get("resample", {})
    method = rs.get("method", "none")
    if method != "none":
        p = positions(rs, K)
        x = {"linear": interp_linear, "cubic": interp_cubic, "spline": interp_spline}[method](x, p)

    w = window(_get(pp, "window.type", "hann"), K, _get(pp, "window.param"))
    y = x * w
    disp = pp.get("dispersion", {})
    if "coeffs" in disp or "table" in disp:
        if "table" in disp:
            phi = np.asarray(disp["table"], dtype=np.float64)
        else:
            a2, a3 = disp["coeffs"]
            v = np.arange(K) / (K - 1) - 0.5
            phi = a2 * v ** 2 + a3 * v ** 3
        y = y * np.exp(-1j * phi)

    N = K * pp.get("zero_pad", 1)
    X = np.fft.fft(y, n=N, axis=-1)[..., : N // 2]
    M = g.get("repeats", 1)
    if mode == "partial_median":
        X, counts = partial_median(X, _get(pp, "background.threshold", 10.0))
        if stats is not None:
            stats["median_depths"] = counts.reshape(-1, M).max(axis=1)
    return X


def flip_crop(v, cfg):
    """§1 step 7 of per-position values v [ny][nx][N/2] (any dtype): flip z, the depth range,
    flip x, the bidirectional reversal of odd positions."""
    g = cfg["geometry"]
    pp = cfg.get("preprocess", {})
    N = g["samples_per_ascan"] * pp.get("zero_pad", 1)
    flip = pp.get("flip", {})
    if flip.get("z", False):
        v = v[..., ::-1]
    z0, z1 = g.get("depth_range", [0, N // 2])
    v = v[..., z0:z1]
    if flip.get("x", False):
        v = v[:, ::-1, :]
    if g.get("bidirectional", False):
        v = v.copy()
        v[1::2] = v[1::2, ::-1, :]
    return v


def structure_db(X, M):
    """§5 step 1: d [ny][nx][N/2] of the spectra X [ny * M][nx][N/2]."""
    if M == 1:
        mag = np.abs(X)
    else:
        mag = np.sqrt((np.abs(X) ** 2).reshape((-1, M) + X.shape[1:]).mean(axis=1))
    return 20 * np.log10(mag + 1e-12)


def preprocess(raw, cfg, stats=None):
    """One epoch: raw [ny * M][nx][K] -> L [ny][nx][nz], float64 in [0, 1]; M =
    geometry.repeats, raw B-scan b * M + m is repeat m of position b, each repeat its own
    B-scan through steps 1-5 (and §1b), the structure their mean power (docs/algorithms.md §5
    step 1)."""
    pp = cfg.get("preprocess", {})
    d = structure_db(spectra(raw, cfg, stats), cfg["geometry"].get("repeats", 1))
    lo, hi = pp.get("db_range", [0, 100])
    return flip_crop(np.clip((d - lo) / (hi - lo), 0, 1), cfg)


# ---- §5 functional channels ----------------------------------------------------------------

def axial_sum(x, h):
    """The sum over j in [z - h, z + h] within [0, n) along the last axis."""
    n = x.shape[-1]
    c = np.concatenate([np.zeros(x.shape[:-1] + (1,), dtype=x.dtype), np.cumsum(x, axis=-1)],
                       axis=-1)
    z = np.arange(n)
    lo, hi = np.maximum(z - h, 0), np.minimum(z + h + 1, n)
    return c[..., hi] - c[..., lo]


def phase(R):
    """Δφ = atan2(Im R, Re R) in (-π, π]; R = 0 gives 0."""
    p = np.angle(R)
    p = np.where(p <= -np.pi, np.pi, p)
    return np.where(R == 0, 0.0, p)


def doppler_v(R):
    return (phase(R) + np.pi) / (2 * np.pi)


def functional(raw, cfg):
    """docs/algorithms.md §5 of one epoch: a dict of per-position low-resolution volumes
    [ny][nx][nz] after flip and crop: "structure" (v), "angio" (normalized v, when M >= 2)
    and "doppler" (the complex Kasai sum R)."""
    g = cfg["geometry"]
    pp = cfg.get("preprocess", {})
    fn = cfg.get("functional", {})
    M = g.get("repeats", 1)
    ny, nx = g["bscans_per_volume"], g["ascans_per_bscan"]
    N = g["samples_per_ascan"] * pp.get("zero_pad", 1)
    nh = N // 2
    X = spectra(raw, cfg)
    lo, hi = pp.get("db_range", [0, 100])
    d = structure_db(X, M)
    out = {"structure": flip_crop(np.clip((d - lo) / (hi - lo), 0, 1), cfg)}
    keep = d >= fn.get("mask_db", lo + 0.3 * (hi - lo))
    Xm = X.reshape(ny, M, nx, nh)
    h = fn.get("axial_half_window", 2)

    if M >= 2:
        method = _get(fn, "angio.method", "cdv")
        if method == "svar":
            D = 20 * np.log10(np.abs(Xm) + 1e-12)
            A = ((D - D.mean(axis=1, keepdims=True)) ** 2).mean(axis=1)
        else:
            a, b = Xm[:, :-1], Xm[:, 1:]
            num = np.abs(axial_sum(a * np.conj(b), h)).sum(axis=1)
            den = axial_sum(0.5 * (np.abs(a) ** 2 + np.abs(b) ** 2), h).sum(axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                A = np.where(den > 0, 1 - num / np.where(den > 0, den, 1.0), 0.0)
        A = np.where(keep, A, 0.0)
        alo, ahi = _get(fn, "angio.range", [0.0, 100.0 if method == "svar" else 1.0])
        out["angio"] = flip_crop(np.clip((A - alo) / (ahi - alo), 0, 1), cfg)

    # the depth range in bins before the flip: the output's depths
    z0, z1 = g.get("depth_range", [0, nh])
    if pp.get("flip", {}).get("z", False):
        z0, z1 = nh - z1, nh - z0
    inrange = np.zeros(nh, dtype=bool)
    inrange[z0:z1] = True
    axis = _get(fn, "doppler.axis", "bscan" if M >= 2 else "ascan")
    bulk = _get(fn, "doppler.bulk", True)

    def pair_sum(later, earlier, keep_e):
        prod = later * np.conj(earlier)
        if bulk:
            s = np.where(keep_e & inrange, prod, 0).sum(axis=-1, keepdims=True)
            beta = np.where(s == 0, 0.0, np.angle(s))
        else:
            beta = 0.0
        return axial_sum(prod, h) * np.exp(-1j * beta)

    R = np.zeros((ny, nx, nh), dtype=complex)
    if axis == "bscan":
        for m in range(M - 1):
            R += pair_sum(Xm[:, m + 1], Xm[:, m], keep)
        R = np.where(keep, R, 0)
    elif nx > 1:
        for m in range(M):
            R[:, :-1] += pair_sum(Xm[:, m, 1:], Xm[:, m, :-1], keep[:, :-1])
        R = np.where(keep, R, 0)
        R[:, -1] = R[:, -2]
    out["doppler"] = flip_crop(R, cfg)
    return out


def quantize(v):
    return np.floor(255 * v + 0.5).astype(np.uint8)


# ---- §2 reconstruction ---------------------------------------------------------------------

class Reconstructor:
    def __init__(self, cfg):
        g = cfg["geometry"]
        rc = cfg.get("reconstruct", {})
        self.mode = rc.get("mode", "noncumulative")
        self.sigma = rc.get("spatial_sigma", 1.0)
        self.temporal = rc.get("temporal", "linear")
        self.tau = rc.get("tau", 5.0)
        self.combine = rc.get("combine", "sum")
        self.sx, self.sy = g.get("stride", [1, 1])
        self.S = self.sx * self.sy
        self.ny, self.nx = g["bscans_per_volume"], g["ascans_per_bscan"]
        self.Y, self.X = self.ny * self.sy, self.nx * self.sx
        self.E = None
        self.M = None
        self.prev = None

    def offset(self, e):
        q = e % self.S
        return q % self.sx, q // self.sx

    def __call__(self, e, L):
        if self.mode == "none":
            return L
        Z = L.shape[2]
        if self.E is None:
            self.E = np.full((self.Y, self.X), -1, dtype=np.int64)
            self.M = np.zeros((self.Y, self.X, Z))
            self.prev = np.zeros((self.Y, self.X, Z))
        ox, oy = self.offset(e)
        if self.mode == "noncumulative":
            self.M[oy::self.sy, ox::self.sx, :] = L
            B = self.M
        else:
            B = self.prev.copy()
            B[oy::self.sy, ox::self.sx, :] = L
        self.E[oy::self.sy, ox::self.sx] = e

        age = e - self.E
        if self.temporal == "linear":
            t = np.maximum(self.S - age, 0) / self.S
        else:
            t = np.exp(-age / self.tau)
        t = np.where(self.E < 0, 0.0, t)

        d = np.array([-1, 0, 1])
        g = np.exp(-(d[:, None, None] ** 2 + d[None, :, None] ** 2 + d[None, None, :] ** 2)
                   / (2 * self.sigma ** 2))
        g = g / g.sum()

        Bp = np.pad(B, 1)
        Tp = np.pad(np.broadcast_to(t[:, :, None], B.shape), 1)
        inside = np.pad(np.ones(B.shape, dtype=bool), 1)
        Y, X = self.Y, self.X
        shifts = []
        for iy, dy in enumerate(d):
            for ix, dx in enumerate(d):
                for iz, dz in enumerate(d):
                    sl = (slice(1 + dy, 1 + dy + Y), slice(1 + dx, 1 + dx + X),
                          slice(1 + dz, 1 + dz + Z))
                    valid = inside[sl] & (Tp[sl] > 0)
                    shifts.append((g[iy, ix, iz], Tp[sl], Bp[sl], valid))
        num = np.zeros(B.shape)
        den = np.zeros(B.shape)
        if self.combine == "sum":
            sum_g = sum(np.where(v, gn, 0.0) for gn, _, _, v in shifts)
            sum_t = sum(np.where(v, tn, 0.0) for _, tn, _, v in shifts)
            with np.errstate(invalid="ignore", divide="ignore"):
                for gn, tn, bn, v in shifts:
                    w = np.where(v, gn / sum_g + tn / sum_t, 0.0)
                    num += w * bn
                    den += w
        else:
            for gn, tn, bn, v in shifts:
                w = np.where(v, gn * tn, 0.0)
                num += w * bn
                den += w
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)
        if self.mode == "cumulative":
            self.prev = out
        return out
