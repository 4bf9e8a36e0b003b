# SPDX-License-Identifier: MIT
"""Independent float64 numpy implementation of docs/algorithms.md §4 (the views of a u8 volume),
written from the page alone: the reference the CPU and CUDA views are compared with."""
import math

import numpy as np


def enface(V, za, zb):
    """(mean rounded half up in integers, max) over z in [za, zb)."""
    s = V[:, :, za:zb].astype(np.int64).sum(axis=2)
    n = zb - za
    return ((2 * s + n) // (2 * n)).astype(np.uint8), V[:, :, za:zb].max(axis=2)


def slices(V, y0, x0, z0):
    return V[y0, :, :].copy(), V[:, x0, :].copy(), V[:, :, z0].copy()


def render(V, H, W, spacing, angles_deg, step=None):
    """MIP render of §4.4: every sample of every ray, no clipping shortcut."""
    Y, X, Z = V.shape
    dx, dy, dz = spacing
    h = step if step is not None else 0.5 * min(dx, dy, dz)
    ph, th = (math.radians(a) for a in angles_deg)
    Ry = np.array([[math.cos(ph), 0, math.sin(ph)], [0, 1, 0], [-math.sin(ph), 0, math.cos(ph)]])
    Rx = np.array([[1, 0, 0], [0, math.cos(th), -math.sin(th)], [0, math.sin(th), math.cos(th)]])
    R = Rx @ Ry
    e_r, e_d, e_v = R.T @ np.array([1.0, 0, 0]), R.T @ np.array([0, 1.0, 0]), R.T @ np.array([0, 0, 1.0])
    D = math.sqrt((X * dx) ** 2 + (Y * dy) ** 2 + (Z * dz) ** 2)
    c = np.array([(X - 1) * dx / 2, (Y - 1) * dy / 2, (Z - 1) * dz / 2])
    nk = math.ceil(D / h)
    t = -D / 2 + (np.arange(nk) + 0.5) * h
    jj = D * ((np.arange(W) + 0.5) / W - 0.5)
    ii = D * ((np.arange(H) + 0.5) / H - 0.5)
    # p[i, j, k, axis]
    p = (c[None, None, None, :] + jj[None, :, None, None] * e_r + ii[:, None, None, None] * e_d
         + t[None, None, :, None] * e_v)
    q = p / np.array([dx, dy, dz])
    lim = np.array([X - 1, Y - 1, Z - 1], dtype=np.float64)
    inside = np.all((q >= -1e-4) & (q <= lim + 1e-4), axis=3)
    q = np.clip(q, 0, lim)
    x, y, z = q[..., 0], q[..., 1], q[..., 2]
    x0 = np.minimum(np.floor(x).astype(np.int64), X - 1)
    y0 = np.minimum(np.floor(y).astype(np.int64), Y - 1)
    z0 = np.minimum(np.floor(z).astype(np.int64), Z - 1)
    x1, y1, z1 = np.minimum(x0 + 1, X - 1), np.minimum(y0 + 1, Y - 1), np.minimum(z0 + 1, Z - 1)
    fx, fy, fz = x - x0, y - y0, z - z0
    Vf = V.astype(np.float64)
    val = np.zeros(x.shape)
    for yy, wy in ((y0, 1 - fy), (y1, fy)):
        for xx, wx in ((x0, 1 - fx), (x1, fx)):
            for zz, wz in ((z0, 1 - fz), (z1, fz)):
                val += wy * wx * wz * Vf[yy, xx, zz]
    val = np.where(inside, val, -1.0)
    best = val.max(axis=2)
    return np.where(best < 0, 0, np.floor(best + 0.5)).astype(np.uint8)


def volume(V, max_side, reduce="max"):
    """The reduced volume of §4.5 in float64: block factors f_a = ceil(n_a / max_side), each
    block (the far ones over the voxels they hold) to its maximum or its mean rounded half up.
    Returns (the u8 volume [Yr][Xr][Zr], the factors (f_y, f_x, f_z))."""
    f = tuple(-(-n // max_side) for n in V.shape)
    r = tuple(-(-n // fa) for n, fa in zip(V.shape, f))
    out = np.zeros(r, dtype=np.uint8)
    for i in range(r[0]):
        for j in range(r[1]):
            for k in range(r[2]):
                b = V[i * f[0]:(i + 1) * f[0], j * f[1]:(j + 1) * f[1],
                      k * f[2]:(k + 1) * f[2]].astype(np.float64)
                out[i, j, k] = b.max() if reduce == "max" else math.floor(b.mean() + 0.5)
    return out, f
