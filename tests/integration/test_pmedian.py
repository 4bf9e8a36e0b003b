# SPDX-License-Identifier: MIT
"""Partial median subtraction (docs/algorithms.md §1b) through `volrec process` on the CPU backend
against the independent float64 reference (tests/reference/oct_ref.py): random spectra with
strong lines, a configuration with resampling, dispersion and zero padding, and the simulator's
tilted strong reflector; /median_depths equal to the reference's counts; without depths above
the threshold the output is bscan_mean's, bit for bit."""
import json
import pathlib
import struct
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "reference"))
import oct_ref  # noqa: E402

h5py = pytest.importorskip("h5py")

REL_TOL = 1e-4


def rel_error(a, b):
    return float(np.max(np.abs(a.astype(np.float64) - b)) / max(float(np.max(np.abs(b))), 1e-6))


def lines_raw(rng, epochs, ny, nx, K, sample_type):
    """Noise around mid-scale, three fringes at fixed depths with an amplitude that changes
    from A-scan to A-scan, and a strong fringe whose depth moves with the A-scan (a tilted
    reflector) in every other A-scan."""
    k = np.arange(K)
    out = np.empty((epochs, ny, nx, K))
    for e in range(epochs):
        for b in range(ny):
            for a in range(nx):
                v = rng.uniform(-200, 200, K)
                for q, f in enumerate((0.061, 0.137, 0.29)):
                    v += rng.uniform(0, 3000) * np.cos(2 * np.pi * f * k + q)
                if a % 2:
                    v += 8000 * np.cos(2 * np.pi * (0.05 + 0.1 * a / nx) * k)
                out[e, b, a] = v
    if sample_type == "u16":
        return np.clip(out + 30000, 0, 65535).astype("<u2")
    return (out + 500).astype("<f4")


def run(bin_dir, *args, ok=True):
    p = subprocess.run([str(bin_dir / "volrec"), *map(str, args)], capture_output=True,
                       text=True, timeout=120)
    if ok:
        assert p.returncode == 0, f"{args}: {p.stderr}"
    return p


def process(bin_dir, tmp_path, cfg, name):
    path = tmp_path / f"{name}.yaml"
    path.write_text(json.dumps(cfg) + "\n")
    out = tmp_path / f"{name}.h5"
    p = run(bin_dir, "process", "-c", path, "-o", out, "--lowres")
    with h5py.File(out, "r") as f:
        md = f["median_depths"][:] if "median_depths" in f else None
        return f["lowres"][:], md, p.stdout


def base_cfg(raw_path, K, nx, ny, sample_type, pre):
    return {"backend": "cpu", "cpu": {"threads": 2},
            "source": {"type": "replay", "rate": 0,
                       "replay": {"path": str(raw_path), "format": "raw", "loop": False}},
            "geometry": {"samples_per_ascan": K, "sample_type": sample_type,
                         "ascans_per_bscan": nx, "bscans_per_volume": ny, "stride": [1, 1],
                         "depth_range": [0, K * pre.get("zero_pad", 1) // 2]},
            "preprocess": pre, "reconstruct": {"mode": "none"},
            "pipeline": {"ring_bscans": 64}}


def check_against_reference(low, md, raw, cfg, threshold):
    for e in range(raw.shape[0]):
        stats = {}
        want = oct_ref.preprocess(raw[e], cfg, stats)
        err = rel_error(low[e], want)
        assert err <= REL_TOL, f"epoch {e}: /lowres relative error {err:.3g}"
        assert list(md[e]) == list(stats["median_depths"]), (md[e], stats["median_depths"])
    return int(md.sum())


CASES = {
    "u16_lines": ("u16", 256, 32, 4, {"background": {"mode": "partial_median"},
                                      "db_range": [40.0, 140.0]}),
    "f32_lines_cubic_dispersion_zp2": ("f32", 192, 31, 3, {
        "background": {"mode": "partial_median", "threshold": 4.0},
        "resample": {"method": "cubic", "poly": [1.0, 185.0, 6.0, -3.0]},
        "dispersion": {"coeffs": [12.0, -5.0]}, "zero_pad": 2, "window": {"type": "hamming"},
        "db_range": [40.0, 140.0]}),
    # the smallest geometry: K = 16, three A-scans (an odd count: the median is the middle one)
    "u16_K16_nx3_ny1": ("u16", 16, 3, 1, {"background": {"mode": "partial_median",
                                                         "threshold": 0.5},
                                          "db_range": [40.0, 140.0]}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_partial_median_matches_reference(name, tmp_path, bin_dir):
    st, K, nx, ny, pre = CASES[name]
    rng = np.random.default_rng(17)
    raw = lines_raw(rng, 2, ny, nx, K, st)
    raw.tofile(tmp_path / "input.raw")
    cfg = base_cfg(tmp_path / "input.raw", K, nx, ny, st, pre)
    low, md, out = process(bin_dir, tmp_path, cfg, name)
    total = check_against_reference(low, md, raw, cfg, pre["background"].get("threshold", 10))
    assert total > 0, "no depth took the median: the case tests nothing"
    assert "median depths per B-scan" in out


def test_partial_median_of_repeats_matches_reference(tmp_path, bin_dir):
    """geometry.repeats 3 (docs/algorithms.md §5): each repeat takes its own statistics and
    medians, the structure is their mean power, /median_depths a position's largest count."""
    st, K, nx, ny, pre = CASES["u16_lines"]
    raw = lines_raw(np.random.default_rng(23), 2, ny * 3, nx, K, st)  # [e][b][m][a][k]
    raw.tofile(tmp_path / "input.raw")
    cfg = base_cfg(tmp_path / "input.raw", K, nx, ny, st, pre)
    cfg["geometry"]["repeats"] = 3
    low, md, _ = process(bin_dir, tmp_path, cfg, "repeats")
    assert low.shape[1] == ny and md.shape[1] == ny
    assert check_against_reference(low, md, raw, cfg, 10) > 0


def test_partial_median_on_the_tilted_reflector(tmp_path, bin_dir):
    K, nx, ny = 512, 64, 4
    sim = tmp_path / "sim.yaml"
    sim.write_text("source: {type: synth, rate: 25, synth: {seed: 5, phantom: tilted}}\n"
                   f"geometry: {{samples_per_ascan: {K}, ascans_per_bscan: {nx}, "
                   f"bscans_per_volume: {ny}, stride: [1, 1]}}\n")
    rp = tmp_path / "tilted.rp"
    run(bin_dir, "sim", "-c", sim, "-o", rp, "-n", 2)
    b = rp.read_bytes()
    header_size, = struct.unpack_from("<I", b, 12)
    raw = np.frombuffer(b[header_size:], dtype="<u2").reshape(2, ny, nx, K)
    # the lowest 75 dB hold the float32 noise of either side, not the image
    pre = {"background": {"mode": "partial_median"}, "db_range": [75.0, 125.0]}
    cfg = base_cfg(rp, K, nx, ny, "u16", pre)
    cfg["source"]["replay"] = {"path": str(rp), "loop": False}
    low, md, _ = process(bin_dir, tmp_path, cfg, "tilted")
    total = check_against_reference(low, md, raw, cfg, 10)
    assert total > 0
    # the mean leaves a line where the tilted reflector crosses; the median does not
    cfg_mean = json.loads(json.dumps(cfg))
    cfg_mean["preprocess"]["background"] = {"mode": "bscan_mean"}
    low_mean, _, _ = process(bin_dir, tmp_path, cfg_mean, "tilted-mean")
    assert not np.array_equal(low_mean, low)


def test_without_median_depths_it_is_bscan_mean(tmp_path, bin_dir):
    K, nx, ny = 128, 32, 4
    raw = lines_raw(np.random.default_rng(3), 1, ny, nx, K, "u16")
    raw.tofile(tmp_path / "input.raw")
    pm = base_cfg(tmp_path / "input.raw", K, nx, ny, "u16",
                  {"background": {"mode": "partial_median", "threshold": 1e6}})
    mean = base_cfg(tmp_path / "input.raw", K, nx, ny, "u16",
                    {"background": {"mode": "bscan_mean"}})
    low_pm, md, _ = process(bin_dir, tmp_path, pm, "pm")
    low_mean, md_mean, _ = process(bin_dir, tmp_path, mean, "mean")
    assert md_mean is None and int(md.sum()) == 0
    assert np.array_equal(low_pm, low_mean)


def test_the_comparison_can_fail(tmp_path, bin_dir):
    """The same output against a reference with another threshold differs."""
    st, K, nx, ny, pre = CASES["u16_lines"]
    raw = lines_raw(np.random.default_rng(17), 1, ny, nx, K, st)
    raw.tofile(tmp_path / "input.raw")
    cfg = base_cfg(tmp_path / "input.raw", K, nx, ny, st, pre)
    low, md, _ = process(bin_dir, tmp_path, cfg, "fail")
    other = json.loads(json.dumps(cfg))
    other["preprocess"]["background"] = {"mode": "bscan_mean"}
    assert rel_error(low[0], oct_ref.preprocess(raw[0], other)) > 1e-3


def test_benchmark_reports_the_median_depths_of_its_input(tmp_path, build_dir):
    """pmedian_bench on the CPU backend, 1024 samples per A-scan (depth 512, shallower than the
    default view positions): every case runs and counts the median depths its input was made
    for (bscan_mean none; partial_median 0, 64, 256 and all N/2)."""
    out = tmp_path / "pm.json"
    p = subprocess.run([str(build_dir / "tests" / "pmedian_bench"), "--backend", "cpu",
                        "--seconds", "0.05", "--bscans", "2", "--ascans", "64",
                        "--samples", "1024", "--json", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    got = {c["name"]: c["median_depths_per_bscan"] for c in json.loads(out.read_text())["cases"]}
    assert got == {"bscan_mean": 0, "partial_median_0": 0, "partial_median_64": 64,
                   "partial_median_256": 256, "partial_median_all": 512}
