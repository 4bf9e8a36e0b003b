# SPDX-License-Identifier: MIT
"""Quality of a reconstruction against the ground truth of `volrec sim --truth`, and the
current-epoch baselines (docs/algorithms.md §3): an independent numpy implementation used by
the tests of the motion-adaptive mode.

PSNR and SSIM (docs/algorithms.md §3) are means over B-scans (planes of constant y) with data range
1; SSIM is Wang et al. 2004 with a 7 x 7 uniform window, K1 = 0.01, K2 = 0.03 and the sample
covariance, over the valid region (scikit-image's defaults). The reconstruction is compared in
the truth's own unit, the image amplitude: a normalized value v > 0 becomes
10^((lo + v (hi - lo) - G) / 20) clipped to [0, 1], v = 0 (at or below the dB range) becomes 0;
the system gain G (dB) is the median of lowres dB - 20 log10(truth) over the voxels each epoch
sampled where the truth exceeds 0.05 and lowres is above the range's floor. The second unit
is the output's own, the normalized dB image: the truth becomes (20 log10 t + G - lo) / (hi - lo)
clipped to [0, 1] (0 where t = 0) and the output is clipped to [0, 1]."""
import numpy as np


def _box(a, w):
    c = np.cumsum(np.cumsum(np.pad(a, ((1, 0), (1, 0))), 0), 1)
    return (c[w:, w:] - c[:-w, w:] - c[w:, :-w] + c[:-w, :-w]) / (w * w)


def ssim2(x, y, w=7, k1=0.01, k2=0.03):
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    cn = w * w / (w * w - 1)
    ux, uy = _box(x, w), _box(y, w)
    vx = cn * (_box(x * x, w) - ux * ux)
    vy = cn * (_box(y * y, w) - uy * uy)
    vxy = cn * (_box(x * y, w) - ux * uy)
    c1, c2 = k1 ** 2, k2 ** 2
    s = (2 * ux * uy + c1) * (2 * vxy + c2) / ((ux * ux + uy * uy + c1) * (vx + vy + c2))
    return float(s.mean())


def psnr2(x, y):
    mse = np.mean((np.asarray(x, np.float64) - np.asarray(y, np.float64)) ** 2)
    return float(10 * np.log10(1.0 / mse)) if mse > 0 else float("inf")


def volume_metrics(a, t):
    """(PSNR, SSIM): means over the planes of constant y of a and t [Y][X][Z]."""
    return (float(np.mean([psnr2(a[y], t[y]) for y in range(a.shape[0])])),
            float(np.mean([ssim2(a[y], t[y]) for y in range(a.shape[0])])))


def _axis(n_full, off, s, n):
    p = np.clip((np.arange(n_full) - off) / s, 0, n - 1)
    if n < 2:
        return np.zeros(n_full, int), np.zeros(n_full, int), np.zeros(n_full)
    i0 = np.minimum(np.floor(p).astype(int), n - 2)
    return i0, i0 + 1, p - i0


def current_linear(low, ox, oy, sx, sy):
    """The epoch's low-resolution volume [ny][nx][Z] linearly interpolated to full resolution
    (docs/algorithms.md §2b)."""
    ny, nx, _ = low.shape
    y0, y1, ty = _axis(ny * sy, oy, sy, ny)
    x0, x1, tx = _axis(nx * sx, ox, sx, nx)
    a = low[y0] * (1 - ty)[:, None, None] + low[y1] * ty[:, None, None]
    return a[:, x0] * (1 - tx)[None, :, None] + a[:, x1] * tx[None, :, None]


def current_nearest(low, ox, oy, sx, sy):
    """The epoch's low-resolution volume, nearest sample (ties to the lower index)."""
    ny, nx, _ = low.shape
    ys = np.clip(np.floor((np.arange(ny * sy) - oy) / sy + 0.5).astype(int), 0, ny - 1)
    xs = np.clip(np.floor((np.arange(nx * sx) - ox) / sx + 0.5).astype(int), 0, nx - 1)
    return low[ys][:, xs]


def gain_db(low, off, truth, db, sx, sy):
    lo, hi = db
    d = []
    for e in range(low.shape[0]):
        ox, oy = off[e]
        t = truth[e, oy::sy, ox::sx]
        m = (t > 0.05) & (low[e] > 0)
        d.append(low[e][m] * (hi - lo) + lo - 20 * np.log10(t[m]))
    return float(np.median(np.concatenate(d)))


def amplitude(v, db, gain):
    lo, hi = db
    v = np.asarray(v, np.float64)
    return np.where(v > 0, np.clip(10 ** ((lo + v * (hi - lo) - gain) / 20), 0, 1), 0.0)


def truth_image(t, db, gain):
    """The truth in the output's unit, the normalized dB image: (20 log10 t + G - lo) /
    (hi - lo) clipped to [0, 1], 0 where t = 0."""
    lo, hi = db
    t = np.asarray(t, np.float64)
    with np.errstate(divide="ignore"):
        v = np.where(t > 0, (20 * np.log10(np.where(t > 0, t, 1)) + gain - lo) / (hi - lo), 0)
    return np.clip(v, 0, 1).astype(np.float32).astype(np.float64)


def per_epoch(full, truth, db, gain, first=0, unit="amplitude"):
    """[(PSNR, SSIM)] of each epoch from `first` on, in the truth's amplitude (unit
    "amplitude") or in the output's normalized dB image ("image")."""
    if unit == "image":
        return [volume_metrics(np.clip(np.asarray(full[e], np.float64), 0, 1),
                               truth_image(truth[e], db, gain))
                for e in range(first, full.shape[0])]
    return [volume_metrics(amplitude(full[e], db, gain), truth[e])
            for e in range(first, full.shape[0])]
