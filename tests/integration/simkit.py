# SPDX-License-Identifier: MIT
"""What the tests of the synthetic scanner and of `volrec calibrate` share: the corrections a
replay file's metadata reports, the width of a reflector's peak, and how well processed volumes
agree with the simulator's ground truth."""
import struct

import numpy as np


def scanner_corrections(rp):
    """(resample_poly, dispersion_coeffs) as the replay file rp's YAML metadata gives them
    (docs/replay-format.md: epochs u64 at 32, flags u32 at 48, metadata_len u32 at 52)."""
    b = rp.read_bytes()
    epochs, = struct.unpack_from("<Q", b, 32)
    flags, meta_len = struct.unpack_from("<II", b, 48)
    start = 64 + (8 * epochs if flags & 2 else 0)
    meta = dict(line.split(":", 1) for line in b[start:start + meta_len].decode().splitlines()
                if line and not line.startswith("#"))
    return meta["resample_poly"].strip(), meta["dispersion_coeffs"].strip()


def fwhm(a, lo, hi):
    """Full width at half maximum (bins) of the highest peak of |X| = a within [lo, hi),
    linearly interpolated between bins at both half-maximum crossings; and the peak's bin."""
    b = lo + int(np.argmax(a[lo:hi]))
    half = a[b] / 2
    z = b
    while z > 0 and a[z - 1] >= half:
        z -= 1
    left = z - (a[z] - half) / (a[z] - a[z - 1]) if z > 0 else 0.0
    z = b
    while z + 1 < len(a) and a[z + 1] >= half:
        z += 1
    right = z + (a[z] - half) / (a[z] - a[z + 1]) if z + 1 < len(a) else len(a) - 1.0
    return right - left, b


def mirror_fwhm(low, db, k):
    """Mean FWHM and the peak bins of every A-scan of lowres [n][ny][nx][nz], normalized over
    the dB range db, for K = k samples: the mirror sits at bin k/4; the fixed coherent artefact
    at k/64 and the DC stay below k/8."""
    amp = 10.0 ** ((db[0] + low.astype(np.float64) * (db[1] - db[0])) / 20.0)
    w = [fwhm(a, k // 8, k // 2) for a in amp.reshape(-1, amp.shape[-1])]
    return float(np.mean([x[0] for x in w])), sorted({x[1] for x in w})


def truth_correlation(low, off, truth, stride):
    """Worst over epochs of the correlation of lowres (dB scale) with log10 of the truth at the
    epoch's scan positions (offsets off), over the voxels where the truth exceeds 0.01 (-40 dB
    of a unit reflector: tissue, not the point-spread function's tails)."""
    cs = []
    for e in range(low.shape[0]):
        ox, oy = off[e]
        t = truth[e, oy::stride, ox::stride, :]
        m = t > 0.01
        cs.append(np.corrcoef(low[e][m], np.log10(t[m]))[0, 1])
    return min(cs)
