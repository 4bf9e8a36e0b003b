# SPDX-License-Identifier: MIT
"""`volrec quality`: its C metric (docs/algorithms.md §3) against the numpy reference
tests/reference/quality_ref.py on the same volumes (those `volrec process` writes for the same
replay and configuration on the CPU backend, which is deterministic), and its refusals."""
import json
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.numerics  # not in the TSan stage (docs/testing.md)

h5py = pytest.importorskip("h5py")
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "reference"))
import quality_ref as q  # noqa: E402

K, NX, NY, ST = 128, 8, 8, 3  # 24 x 24 x 64 output, S = 9
S = ST * ST
EPOCHS = 2 * S + 2
DB = (70.0, 100.0)
POLY, DISP = "[0, 137.16, 0, -10.16]", "[30, -12]"  # the scanner's corrections for K = 128
# tolerances of the comparison (measured: 4e-6 dB of gain, 2e-6 dB of PSNR, 2e-8 of SSIM): the
# reference computes the gain's samples in float32 (numpy's casting of a float32 array with
# Python floats) and the linear baseline separably in float64, volrec quality in double and as
# the adaptive mode's C (float32)
PSNR_TOL, SSIM_TOL, GAIN_TOL = 1e-4, 1e-6, 1e-4


def run(bin_dir, *args, ok=True):
    r = subprocess.run([str(bin_dir / "volrec"), *map(str, args)], capture_output=True,
                       text=True, timeout=120)
    if ok:
        assert r.returncode == 0, r.stderr
    return r


def geometry(nx=NX):
    return (f"geometry:\n  samples_per_ascan: {K}\n  ascans_per_bscan: {nx}\n"
            f"  bscans_per_volume: {NY}\n  stride: [{ST}, {ST}]\n")


def config(tmp_path, rp, name, mode=None, nx=NX):
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(f"backend: cpu\nsource:\n  type: replay\n  rate: 0\n  replay: {{path: {rp}}}\n"
                   + geometry(nx) + "preprocess:\n  background: {mode: bscan_mean}\n"
                   f"  resample: {{method: cubic, poly: {POLY}}}\n"
                   f"  dispersion: {{coeffs: {DISP}}}\n  db_range: [{DB[0]}, {DB[1]}]\n"
                   + (f"reconstruct: {{mode: {mode}}}\n" if mode else ""))
    return cfg


@pytest.fixture
def scene(bin_dir, tmp_path):
    if not (bin_dir / "volrec").exists():
        pytest.skip("volrec not built")
    cfg = tmp_path / "sim.yaml"
    cfg.write_text("source:\n  type: synth\n  rate: 25\n  synth: {seed: 4, phantom: retina, "
                   "motion: {deg_per_s: 30, shift_mm_per_s: [0.3, 0, 0.2]}, snr_db: 40}\n"
                   + geometry())
    rp, truth = tmp_path / "scene.rp", tmp_path / "truth.h5"
    run(bin_dir, "sim", "-c", cfg, "-o", rp, "-n", EPOCHS, "--truth", truth)
    return rp, truth


def process(bin_dir, tmp_path, rp, mode):
    out = tmp_path / f"{mode}.h5"
    run(bin_dir, "process", "-c", config(tmp_path, rp, f"p-{mode}", mode), "-o", out,
        "--lowres", "--full")
    with h5py.File(out, "r") as f:
        return f["full"][:], f["lowres"][:], f["offset"][:]


def test_quality_metric_equals_the_numpy_reference(bin_dir, tmp_path, scene):
    rp, truth_path = scene
    out = tmp_path / "q.json"
    r = run(bin_dir, "quality", "-c", config(tmp_path, rp, "q"), "-t", truth_path, "--json",
            out, "--name", "small")
    assert "adaptive" in r.stdout and "newest epoch, linear" in r.stdout
    got = json.loads(out.read_text())
    assert got["name"] == "small" and got["epochs"] == EPOCHS and got["first_scored_epoch"] == S
    assert got["volume_shape"] == [NY * ST, NX * ST, K // 2]
    with h5py.File(truth_path, "r") as f:
        truth = f["truth"][:]

    full, low, off = process(bin_dir, tmp_path, rp, "noncumulative")
    gain = q.gain_db(low, off, truth, DB, ST, ST)
    print(f"gain: volrec quality {got['gain_db']:.6f} dB, reference {gain:.6f} dB")
    assert abs(got["gain_db"] - gain) < GAIN_TOL

    def compare(key, vols):
        compare_unit(key, vols, "amplitude", got["modes"][key])
        compare_unit(key, vols, "image", got["modes"][key]["image"])

    def compare_unit(key, vols, unit, m):
        ref = q.per_epoch(vols, truth, DB, gain, unit=unit)
        p_ref = np.array([p for p, _ in ref])
        s_ref = np.array([s for _, s in ref])
        p_got = np.array(m["psnr_db_per_epoch"], float)
        s_got = np.array(m["ssim_per_epoch"], float)
        print(f"{key} ({unit}): PSNR {m['psnr_db']:.4f} (ref {p_ref[S:].mean():.4f}), SSIM "
              f"{m['ssim']:.5f} (ref {s_ref[S:].mean():.5f}); worst epoch: "
              f"{np.abs(p_got - p_ref).max():.2e} dB, {np.abs(s_got - s_ref).max():.2e}")
        assert np.abs(p_got - p_ref).max() < PSNR_TOL
        assert np.abs(s_got - s_ref).max() < SSIM_TOL
        assert abs(m["psnr_db"] - p_ref[S:].mean()) < PSNR_TOL
        assert abs(m["ssim"] - s_ref[S:].mean()) < SSIM_TOL

    compare("noncumulative", full)
    compare("current_linear", np.stack([q.current_linear(low[e], off[e][0], off[e][1], ST, ST)
                                        for e in range(EPOCHS)]))
    compare("current_nearest", np.stack([q.current_nearest(low[e], off[e][0], off[e][1], ST, ST)
                                         for e in range(EPOCHS)]))
    compare("adaptive", process(bin_dir, tmp_path, rp, "adaptive")[0])
    compare("cumulative", process(bin_dir, tmp_path, rp, "cumulative")[0])
    # the rows differ: a metric that ignored its input would pass the comparisons above only
    # if every row were equal
    for unit in ("amplitude", "image"):
        psnr = {k: (v["image"] if unit == "image" else v)["psnr_db"]
                for k, v in got["modes"].items()}
        assert len({round(v, 3) for v in psnr.values()}) == len(psnr), (unit, psnr)
    # and the units differ: the dB image is not the amplitude under another name (cumulative
    # mode's smoothed speckle keeps the dB image's structure, not the amplitude's)
    m = got["modes"]["cumulative"]
    assert m["image"]["ssim"] - m["ssim"] > 0.1, (m["ssim"], m["image"]["ssim"])


def test_quality_refuses_a_truth_of_another_geometry(bin_dir, tmp_path, scene):
    rp, truth_path = scene
    r = run(bin_dir, "quality", "-c", config(tmp_path, rp, "wide", nx=NX + 1), "-t",
            truth_path, ok=False)
    assert r.returncode == 2 and "/truth is [" in r.stderr, r.stderr


def test_quality_refuses_a_missing_truth_and_bad_options(bin_dir, tmp_path, scene):
    rp, _ = scene
    cfg = config(tmp_path, rp, "q")
    r = run(bin_dir, "quality", "-c", cfg, "-t", tmp_path / "none.h5", ok=False)
    assert r.returncode == 2 and "none.h5" in r.stderr, r.stderr
    r = run(bin_dir, "quality", "-c", cfg, ok=False)
    assert r.returncode == 2 and "-t TRUTH.h5 are required" in r.stderr, r.stderr
    r = run(bin_dir, "quality", "-c", cfg, "-t", "x.h5", "--skip", "-1", ok=False)
    assert r.returncode == 2 and "--skip -1" in r.stderr, r.stderr
    r = run(bin_dir, "quality", "-c", cfg, "-t", tmp_path / "truth.h5", "--skip", EPOCHS,
            ok=False)
    assert r.returncode == 2 and "leaves none" in r.stderr, r.stderr


def corrupt_truth(truth, out, change):
    """A copy of the truth file with change(f) applied to it."""
    out.write_bytes(truth.read_bytes())
    with h5py.File(out, "r+") as f:
        change(f)
    return out


def test_quality_refuses_a_truth_that_does_not_belong_to_the_replay(bin_dir, tmp_path, scene):
    """Values outside [0, 1], another type, another epoch count or another recording's settings
    scored nonsense (inf/nan dB, or a better figure for the wrong truth) with exit 0."""
    rp, truth = scene
    cfg = config(tmp_path, rp, "q")

    def refused(name, change, want, *args):
        bad = corrupt_truth(truth, tmp_path / f"{name}.h5", change)
        r = run(bin_dir, "quality", "-c", cfg, "-t", bad, *args, ok=False)
        assert r.returncode == 2 and want in r.stderr, (name, r.returncode, r.stderr)
        assert "HDF5-DIAG" not in r.stderr, r.stderr  # the message says it, not HDF5's stack
        assert f"{name}.h5" in r.stderr, r.stderr

    def value(v, e=3, at=(1, 2, 5)):
        def change(f):
            f["truth"][(e,) + at] = v
        return change

    refused("nan", value(np.nan), "/truth[3][1][2][5] is nan")
    refused("inf", value(np.inf), "is inf")
    refused("above", value(1.5), "is 1.5: the truth is an amplitude from 0 to 1")
    refused("below", value(-0.25, e=EPOCHS - 1), f"/truth[{EPOCHS - 1}][1][2][5] is -0.25")

    def to_u8(f):
        data = f["truth"][:]
        attrs = dict(f["truth"].attrs)
        del f["truth"]
        f["truth"] = (data * 255).astype(np.uint8)
        for k, v in attrs.items():
            f["truth"].attrs[k] = v
    refused("u8", to_u8, "/truth is not floating point")

    def fewer(f):
        data, off = f["truth"][: EPOCHS - 2], f["offset"][: EPOCHS - 2]
        attrs = dict(f["truth"].attrs)
        del f["truth"], f["offset"]
        f["truth"], f["offset"] = data, off
        for k, v in attrs.items():
            f["truth"].attrs[k] = v
    refused("fewer", fewer, f"holds {EPOCHS - 2} epochs, the replay {EPOCHS}")
    # -n scores the first N of both
    bad = corrupt_truth(truth, tmp_path / "fewer-n.h5", fewer)
    r = run(bin_dir, "quality", "-c", cfg, "-t", bad, "-n", EPOCHS - 2)
    assert f"{EPOCHS - 2} epochs of 24 x 24 x 64" in r.stdout, r.stdout

    def attr(k, v):
        def change(f):
            f["truth"].attrs[k] = v
        return change
    refused("depth", attr("depth_range", np.array([32, 96], np.uint32)),
            "made with depth_range [32, 96], the configuration's geometry.depth_range is "
            "[0, 64]")
    refused("pad", attr("zero_pad", np.array([2], np.uint32)), "zero_pad [2]")
    refused("param", attr("window_param", 0.5), "made with window_param 0.5")
    refused("window", attr("window", np.bytes_(b"tukey")),
            "made with window 'tukey', the configuration's preprocess.window.type is 'hann'")

    def offset(f):
        f["offset"][5] = [0, 0]  # epoch 5 of stride 3 x 3 is scanned at (2, 1)
    refused("offset", offset, "epoch 5 was scanned at offset (2, 1), the truth's /offset has "
            "(0, 0) there: not the truth of this recording")

    def empty(f):
        del f["truth"]
        f.create_dataset("truth", (0, 24, 24, 64), np.float32)
    refused("empty", empty, "/truth holds no epochs")
