# SPDX-License-Identifier: MIT
"""Non-finite f32 samples (docs/algorithms.md §1.0) through `volrec process` on the CPU backend:
the A-scans that hold a NaN or an infinity are counted (stdout and --report), every output is
finite, and the volumes equal those of the same recording where the bad A-scans are all +inf
instead (the A-scan is missing, whatever its samples)."""
import json
import subprocess

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

K, NX, NY, EPOCHS = 64, 10, 6, 6


def raw_epochs(rng):
    k = np.arange(K)
    out = np.empty((EPOCHS, NY, NX, K))
    for e in range(EPOCHS):
        for b in range(NY):
            for a in range(NX):
                out[e, b, a] = (2000 + 700 * np.cos(2 * np.pi * (0.1 + 0.01 * a) * k + b)
                                + rng.uniform(-30, 30, K))
    return out.astype("<f4")


# (epoch, B-scan, A-scan, sample, value)
BAD = [(1, 2, 4, 10, np.nan), (1, 2, 5, 0, -np.inf), (3, 0, 0, 63, np.inf),
       (4, 5, 9, 7, np.nan)]


def process(bin_dir, tmp_path, raw, name, background, mode):
    rp = tmp_path / f"{name}.raw"
    raw.tofile(rp)
    cfg = {"backend": "cpu", "cpu": {"threads": 2},
           "source": {"type": "replay", "rate": 0,
                      "replay": {"path": str(rp), "format": "raw", "loop": False}},
           "geometry": {"samples_per_ascan": K, "sample_type": "f32", "ascans_per_bscan": NX,
                        "bscans_per_volume": NY, "stride": [2, 2], "depth_range": [0, K // 2]},
           "preprocess": {"background": {"mode": background}, "db_range": [20, 90]},
           "reconstruct": {"mode": mode},
           "pipeline": {"ring_bscans": 64}}
    cp = tmp_path / f"{name}.yaml"
    cp.write_text(json.dumps(cfg) + "\n")
    out, rep = tmp_path / f"{name}.h5", tmp_path / f"{name}.json"
    p = subprocess.run([str(bin_dir / "volrec"), "process", "-c", str(cp), "-o", str(out),
                        "--lowres", "--full", "--report", str(rep)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    with h5py.File(out, "r") as f:
        return f["volumes"][:], f["lowres"][:], f["full"][:], p.stdout, json.loads(
            rep.read_text())


@pytest.mark.parametrize("background,mode", [("bscan_mean", "cumulative"),
                                             ("ascan_mean", "noncumulative"),
                                             ("bscan_median", "adaptive")])
def test_nonfinite_ascans_are_missing_and_counted(tmp_path, bin_dir, background, mode):
    raw = raw_epochs(np.random.default_rng(7))
    one = raw.copy()
    whole = raw.copy()
    for e, b, a, k, v in BAD:
        one[e, b, a, k] = v
        whole[e, b, a, :] = np.inf
    vol1, low1, full1, out1, rep1 = process(bin_dir, tmp_path, one, "one", background, mode)
    vol2, low2, full2, _, rep2 = process(bin_dir, tmp_path, whole, "whole", background, mode)
    assert np.isfinite(low1).all() and np.isfinite(full1).all()
    assert np.array_equal(vol1, vol2) and np.array_equal(full1, full2)
    assert np.array_equal(low1, low2)
    assert rep1["missing_ascans"] == len(BAD) and rep2["missing_ascans"] == len(BAD)
    assert f"{len(BAD)} A-scans held a NaN or an infinity" in out1
    # the clean recording counts nothing and says nothing
    _, _, _, out0, rep0 = process(bin_dir, tmp_path, raw, "clean", background, mode)
    assert rep0["missing_ascans"] == 0 and "NaN" not in out0
