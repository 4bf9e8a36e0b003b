# SPDX-License-Identifier: MIT
"""The synthetic scanner's k non-linearity and dispersion, undone by `volrec process` with the
corrections the scanner reports (ALGORITHMS.md §1: resample, window, exp(-i·phi) on the linear-k
index): each correction narrows a single reflector's peak (the `mirror` phantom, FWHM of |X|)
and raises the retina image's correlation with the ground truth of `volrec sim --truth`."""
import struct
import subprocess

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

K = 512
DB = (0.0, 160.0)  # wide enough that the lowres values hold every |X| in play unclipped


def run(bin_dir, *args):
    return subprocess.run([str(bin_dir / "volrec"), *map(str, args)], capture_output=True,
                          text=True, timeout=60)


def geometry(k, nx, ny, stride):
    return (f"geometry:\n  samples_per_ascan: {k}\n  ascans_per_bscan: {nx}\n"
            f"  bscans_per_volume: {ny}\n  stride: [{stride}, {stride}]\n")


def simulate(bin_dir, tmp_path, phantom, geo, epochs, truth=False):
    cfg = tmp_path / f"{phantom}.yaml"
    cfg.write_text(f"source:\n  type: synth\n  rate: 25\n  synth: {{seed: 11, phantom: "
                   f"{phantom}, motion: {{deg_per_s: 2}}, snr_db: 40}}\n" + geo)
    rp = tmp_path / f"{phantom}.rp"
    args = ["sim", "-c", cfg, "-o", rp, "-n", epochs]
    if truth:
        args += ["--truth", tmp_path / f"{phantom}-truth.h5"]
    r = run(bin_dir, *args)
    assert r.returncode == 0, r.stderr
    # the corrections the scanner reports, from the replay file's YAML metadata
    b = rp.read_bytes()
    # docs/replay-format.md: epochs u64 at 32, flags u32 at 48, metadata_len u32 at 52
    epochs_, = struct.unpack_from("<Q", b, 32)
    flags, meta_len = struct.unpack_from("<II", b, 48)
    start = 64 + (8 * epochs_ if flags & 2 else 0)
    meta = dict(line.split(":", 1) for line in b[start:start + meta_len].decode().splitlines()
                if line and not line.startswith("#"))
    return rp, meta["resample_poly"].strip(), meta["dispersion_coeffs"].strip()


def process(bin_dir, tmp_path, rp, geo, name, resample=None, dispersion=None, db=DB):
    pre = f"preprocess:\n  window: {{type: hann}}\n  db_range: [{db[0]}, {db[1]}]\n"
    if resample:
        pre += f"  resample: {{method: cubic, poly: {resample}}}\n"
    if dispersion:
        pre += f"  dispersion: {{coeffs: {dispersion}}}\n"
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(f"backend: cpu\nsource:\n  type: replay\n  rate: 0\n  replay: {{path: {rp}}}\n"
                   + geo + pre + "reconstruct: {mode: none}\n")
    out = tmp_path / f"{name}.h5"
    r = run(bin_dir, "process", "-c", cfg, "-o", out, "--lowres")
    if r.returncode != 0:
        pytest.fail(f"volrec process ({name}): {r.stderr}")
    with h5py.File(out, "r") as f:
        return f["lowres"][:], f["offset"][:]


def fwhm(a, lo, hi):
    """Full width at half maximum (bins) of the highest peak of |X| = a within [lo, hi),
    linearly interpolated between bins at both half-maximum crossings."""
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


def mirror_fwhm(low):
    """Mean FWHM and the peak bins of every A-scan of lowres [n][ny][nx][nz] (dB-normalized)."""
    amp = 10.0 ** ((DB[0] + low.astype(np.float64) * (DB[1] - DB[0])) / 20.0)
    amp = amp.reshape(-1, amp.shape[-1])
    # the mirror sits at bin K/4; the fixed coherent artefact at K/64 and the DC stay below K/8
    w = [fwhm(a, K // 8, K // 2) for a in amp]
    return float(np.mean([x[0] for x in w])), sorted({x[1] for x in w})


def test_each_correction_narrows_a_single_reflector(bin_dir, tmp_path):
    if not (bin_dir / "volrec").exists():
        pytest.skip("volrec not built")
    geo = geometry(K, 6, 2, 1)
    rp, poly, disp = simulate(bin_dir, tmp_path, "mirror", geo, 2)
    none, _ = mirror_fwhm(process(bin_dir, tmp_path, rp, geo, "none")[0])
    rs, _ = mirror_fwhm(process(bin_dir, tmp_path, rp, geo, "rs", poly)[0])
    both, bins = mirror_fwhm(process(bin_dir, tmp_path, rp, geo, "both", poly, disp)[0])
    print(f"mirror FWHM (bins): no correction {none:.3f}, resampling only {rs:.3f}, "
          f"resampling and dispersion {both:.3f} (corrections {poly}, {disp})")
    # measured (K = 512, Hann): 14.7, 4.5, 2.39; the ideal of a Hann window times the
    # scanner's Gaussian source envelope is 2.36 bins
    assert rs < 0.75 * none, (none, rs)
    assert both < 0.75 * rs, (rs, both)
    assert both < 2.5, both
    assert bins == [K // 4], bins  # fully corrected, the mirror is at its depth (1.0 mm)


def truth_correlation(low, off, truth, stride):
    """Worst over epochs of the correlation of lowres (dB scale) with log10 of the truth at the
    epoch's scan positions, over the voxels where the truth is non-zero."""
    cs = []
    for e in range(low.shape[0]):
        ox, oy = off[e]
        t = truth[e, oy::stride, ox::stride, :]
        m = t > 0
        cs.append(np.corrcoef(low[e][m], np.log10(t[m]))[0, 1])
    return min(cs)


def test_each_correction_brings_the_retina_closer_to_the_truth(bin_dir, tmp_path):
    if not (bin_dir / "volrec").exists():
        pytest.skip("volrec not built")
    geo = geometry(K, 8, 6, 2) + f"  depth_range: [0, {K // 2}]\n"
    rp, poly, disp = simulate(bin_dir, tmp_path, "retina", geo, 4, truth=True)
    with h5py.File(tmp_path / "retina-truth.h5", "r") as f:
        truth = f["truth"][:]
    c = []
    for name, args in (("none", ()), ("rs", (poly,)), ("both", (poly, disp))):
        low, off = process(bin_dir, tmp_path, rp, geo, "r-" + name, *args, db=(40, 110))
        c.append(truth_correlation(low, off, truth, 2))
    print(f"retina correlation with the truth: no correction {c[0]:.3f}, resampling only "
          f"{c[1]:.3f}, resampling and dispersion {c[2]:.3f}")
    assert c[1] > c[0] + 0.05, c
    assert c[2] > c[1] + 0.05, c
