# SPDX-License-Identifier: MIT
"""What the tests of the flow phantom and of `volrec quality --functional` share: the complex
spectra of docs/algorithms.md §1 steps 1-5 in float64 (tests/reference/oct_ref.py's steps, kept
complex), the angiography (cdv) and Doppler (Kasai, with the bulk-motion correction) of §5 on
them, the area under the ROC curve, and the phase of an axial velocity."""
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reference"))
import oct_ref  # noqa: E402


def complex_spectra(raw, cfg):
    """One epoch: raw [ny * M][nx][K] -> X [ny * M][nx][N / 2] complex, §1 steps 1-5 with the
    configuration's background (ascan_mean, bscan_mean or none), resampling, window and
    dispersion (the steps of oct_ref.preprocess before the magnitude)."""
    g, pp = cfg["geometry"], cfg.get("preprocess", {})
    K = g["samples_per_ascan"]
    s = oct_ref.convert(raw, g.get("sample_type", "u16"), g.get("bit_shift", 0))
    mode = oct_ref._get(pp, "background.mode", "ascan_mean")
    if mode == "ascan_mean":
        x = s - s.mean(axis=2, keepdims=True)
    elif mode == "bscan_mean":
        x = s - s.mean(axis=1, keepdims=True)
    elif mode == "none":
        x = s
    else:
        raise ValueError(mode)
    rs = pp.get("resample", {})
    if rs.get("method", "none") != "none":
        p = oct_ref.positions(rs, K)
        x = {"linear": oct_ref.interp_linear, "cubic": oct_ref.interp_cubic,
             "spline": oct_ref.interp_spline}[rs["method"]](x, p)
    y = x * oct_ref.window(oct_ref._get(pp, "window.type", "hann"), K,
                           oct_ref._get(pp, "window.param"))
    if "coeffs" in pp.get("dispersion", {}):
        a2, a3 = pp["dispersion"]["coeffs"]
        v = np.arange(K) / (K - 1) - 0.5
        y = y * np.exp(-1j * (a2 * v ** 2 + a3 * v ** 3))
    N = K * pp.get("zero_pad", 1)
    return np.fft.fft(y, n=N, axis=-1)[..., : N // 2]


def _axial_sum(a, h):
    """Sum over the window [z - h, z + h] clipped to the depth axis (the last)."""
    c = np.cumsum(np.pad(a, [(0, 0)] * (a.ndim - 1) + [(1, 0)]), axis=-1)
    n = a.shape[-1]
    z = np.arange(n)
    return c[..., np.minimum(z + h + 1, n)] - c[..., np.maximum(z - h, 0)]


def cdv(X, M, h=2):
    """§5 step 2 cdv of X [ny * M][nx][nz] -> [ny][nx][nz] (no mask)."""
    X = X.reshape((-1, M) + X.shape[1:])
    num = 0
    den = 0
    for m in range(M - 1):
        num = num + np.abs(_axial_sum(X[:, m] * np.conj(X[:, m + 1]), h))
        den = den + _axial_sum(0.5 * (np.abs(X[:, m]) ** 2 + np.abs(X[:, m + 1]) ** 2), h)
    return np.where(den > 0, 1 - num / np.where(den > 0, den, 1), 0)


def structure_db(X, M):
    """§5 step 1 structure in dB, 20 log10(√P + 1e-12), of X [ny * M][nx][nz]."""
    P = (np.abs(X) ** 2).reshape((-1, M) + X.shape[1:]).mean(axis=1)
    return 20 * np.log10(np.sqrt(P) + 1e-12)


def kasai(X, M, h=2, bulk=True, depth_range=None, keep=None):
    """§5 step 3 inter-B-scan Doppler phase Δφ of X [ny * M][nx][nz] -> [ny][nx][nz] (rad), with
    the bulk phase β of each A-scan and pair over the depths of depth_range where keep (a mask
    [ny][nx][nz], the structure at or above mask_db; None: everywhere) holds; R = 0, Δφ = 0
    where keep does not hold."""
    X = X.reshape((-1, M) + X.shape[1:])
    z0, z1 = depth_range or (0, X.shape[-1])
    keep = np.ones(X[:, 0].shape, bool) if keep is None else keep
    R = 0
    for m in range(M - 1):
        p = X[:, m + 1] * np.conj(X[:, m])
        beta = 0
        if bulk:
            beta = np.angle((p * keep)[..., z0:z1].sum(axis=-1, keepdims=True))
        R = R + _axial_sum(p * np.exp(-1j * beta), h)
    return np.angle(np.where(keep, R, 0))


def auc(score, positive, negative):
    """Area under the ROC curve of score, positives against negatives (ties count a half)."""
    a = np.asarray(score[positive], dtype=np.float64)
    b = np.asarray(score[negative], dtype=np.float64)
    _, inv, cnt = np.unique(np.concatenate([a, b]), return_inverse=True, return_counts=True)
    ranks = ((np.cumsum(cnt) - cnt) + (cnt + 1) / 2)[inv]
    return (ranks[: len(a)].sum() - len(a) * (len(a) + 1) / 2) / (len(a) * len(b))


def phase(vz_mm_s, wavelength_nm, n, period_us):
    """The Doppler phase (rad) of an axial velocity: 4π n v_z T / λ0."""
    return 4 * math.pi * n * vz_mm_s * 1e-3 * period_us * 1e-6 / (wavelength_nm * 1e-9)
