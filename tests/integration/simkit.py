# SPDX-License-Identifier: MIT
"""What the tests of the synthetic scanner, of `volrec calibrate` and of the reconstruction
modes share: the corrections a replay file's metadata reports, the width of a reflector's
peak, how well processed volumes agree with the simulator's ground truth, and scenes recorded
by `volrec sim --truth` and processed by `volrec process`."""
import struct
import subprocess

import numpy as np


def volrec(bin_dir, *args, timeout=300):
    """Run `volrec ARGS...`, which must succeed."""
    r = subprocess.run([str(bin_dir / "volrec"), *map(str, args)], capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr
    return r


def newest_linear(low, off, stride):
    """The newest epoch alone, interpolated linearly (docs/algorithms.md §2b step 6), of
    every epoch of lowres [n][ny][nx][nz] with offsets off."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reference"))
    import quality_ref
    return np.stack([quality_ref.current_linear(low[e], off[e][0], off[e][1], stride, stride)
                     for e in range(low.shape[0])])


def geometry_yaml(k, nx, ny, stride, depth_range=None):
    """The geometry section of a configuration: K samples, nx x ny A-scans, square stride."""
    return (f"geometry:\n  samples_per_ascan: {k}\n  ascans_per_bscan: {nx}\n"
            f"  bscans_per_volume: {ny}\n  stride: [{stride}, {stride}]\n"
            + (f"  depth_range: [{depth_range[0]}, {depth_range[1]}]\n" if depth_range else ""))


def record_scene(bin_dir, tmp_path, name, geometry, synth):
    """`volrec sim --truth` of a configuration with YAML geometry and the source.synth
    mapping contents synth (rate 25): the replay file and the truth array."""
    import h5py
    epochs = synth.pop("epochs")
    cfg = tmp_path / f"{name}-sim.yaml"
    cfg.write_text("source:\n  type: synth\n  rate: 25\n  synth: {"
                   + ", ".join(f"{k}: {v}" for k, v in synth.items()) + "}\n" + geometry)
    rp, truth = tmp_path / f"{name}.rp", tmp_path / f"{name}-truth.h5"
    volrec(bin_dir, "sim", "-c", cfg, "-o", rp, "-n", epochs, "--truth", truth)
    with h5py.File(truth, "r") as f:
        return rp, f["truth"][:]


def process_scene(bin_dir, tmp_path, rp, geometry, corrections, db, reconstruct, tag):
    """`volrec process --lowres --full` of replay rp on the CPU backend: background
    bscan_mean, cubic resampling and dispersion from corrections (poly, coeffs), db_range db,
    reconstruct mapping contents; (full, lowres, offset)."""
    import h5py
    poly, disp = corrections
    cfg = tmp_path / f"{rp.stem}-{tag}.yaml"
    cfg.write_text(f"backend: cpu\nsource:\n  type: replay\n  rate: 0\n  replay: {{path: {rp}}}\n"
                   + geometry + "preprocess:\n  background: {mode: bscan_mean}\n"
                   f"  resample: {{method: cubic, poly: {poly}}}\n"
                   f"  dispersion: {{coeffs: {disp}}}\n  db_range: [{db[0]}, {db[1]}]\n"
                   f"reconstruct: {{{reconstruct}}}\n")
    out = tmp_path / f"{rp.stem}-{tag}.h5"
    volrec(bin_dir, "process", "-c", cfg, "-o", out, "--lowres", "--full")
    with h5py.File(out, "r") as f:
        return f["full"][:], f["lowres"][:], f["offset"][:]


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
