# SPDX-License-Identifier: MIT
"""`volrec sim`: the replay file it writes (layout of docs/replay-format.md), its ground truth,
determinism for a seed, and that processing with the scanner's own corrections reproduces the
truth better than processing without them."""
import struct
import subprocess

import numpy as np
import pytest

from simkit import scanner_corrections, truth_correlation

h5py = pytest.importorskip("h5py")

GEOMETRY = """
geometry:
  samples_per_ascan: 256
  ascans_per_bscan: 8
  bscans_per_volume: 6
  stride: [2, 2]
  depth_range: [0, 128]
"""


def synth_cfg(tmp_path, seed=5, name="synth.yaml"):
    p = tmp_path / name
    p.write_text(f"source:\n  type: synth\n  rate: 25\n  synth: {{seed: {seed}, motion: "
                 f"{{deg_per_s: 2}}, snr_db: 40}}\n" + GEOMETRY)
    return p


def run(bin_dir, *args):
    return subprocess.run([str(bin_dir / "volrec"), *map(str, args)], capture_output=True,
                          text=True, timeout=60)


def read_header(path):
    b = path.read_bytes()
    fixed = struct.unpack("<8sIIIIIIQIIIIQ", b[:64])
    keys = ("magic version header_size sample_type K nx ny epochs sx sy flags meta_len "
            "reserved").split()
    h = dict(zip(keys, fixed))
    table = b[64:64 + 8 * h["epochs"]] if h["flags"] & 2 else b""
    h["offsets"] = [struct.unpack("<II", table[i:i + 8]) for i in range(0, len(table), 8)]
    start = 64 + len(table)
    h["meta"] = b[start:start + h["meta_len"]].decode()
    h["data"] = b[h["header_size"]:]
    return h


def test_sim_writes_the_documented_header(bin_dir, tmp_path):
    cfg = synth_cfg(tmp_path)
    r = run(bin_dir, "sim", "-c", cfg, "-o", tmp_path / "a.rp", "-n", 5)
    assert r.returncode == 0, r.stderr
    h = read_header(tmp_path / "a.rp")
    assert h["magic"] == b"VOLRECRP" and h["version"] == 1 and h["reserved"] == 0
    assert h["header_size"] % 4096 == 0
    assert (h["sample_type"], h["K"], h["nx"], h["ny"], h["epochs"]) == (0, 256, 8, 6, 5)
    assert (h["sx"], h["sy"], h["flags"]) == (2, 2, 2)
    assert h["offsets"] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 0)]
    assert "resample_poly: [" in h["meta"] and "dispersion_coeffs: [30, -12]" in h["meta"]
    assert len(h["data"]) == 5 * 6 * 8 * 256 * 2


def test_sim_records_every_motion_key_in_the_metadata(bin_dir, tmp_path):
    yaml = pytest.importorskip("yaml")
    cfg = tmp_path / "moving.yaml"
    cfg.write_text("source:\n  type: synth\n  rate: 25\n  synth: {seed: 2, motion: {deg_per_s: "
                   "1.5, shift_mm_per_s: [0.25, -0.125, 0.5], jump: {epoch: 3, shift_mm: "
                   "[0.3, 0.1, 0.05], deg: 5}}}\n" + GEOMETRY)
    r = run(bin_dir, "sim", "-c", cfg, "-o", tmp_path / "m.rp", "-n", 2)
    assert r.returncode == 0, r.stderr
    meta = yaml.safe_load(read_header(tmp_path / "m.rp")["meta"])
    assert meta["deg_per_s"] == 1.5
    assert meta["shift_mm_per_s"] == [0.25, -0.125, 0.5]
    assert meta["jump"] == {"epoch": 3, "shift_mm": [0.3, 0.1, 0.05], "deg": 5}
    # without motion the keys are there with zeros (a reader needs no defaults)
    r = run(bin_dir, "sim", "-c", synth_cfg(tmp_path, name="still.yaml"), "-o",
            tmp_path / "s.rp", "-n", 1)
    assert r.returncode == 0, r.stderr
    meta = yaml.safe_load(read_header(tmp_path / "s.rp")["meta"])
    assert meta["shift_mm_per_s"] == [0, 0, 0] and meta["jump"]["epoch"] == 0


def test_sim_is_deterministic_for_a_seed_and_raw_holds_the_same_samples(bin_dir, tmp_path):
    cfg = synth_cfg(tmp_path)
    for name, fmt in (("a.rp", "volrec"), ("b.rp", "volrec"), ("c.raw", "raw")):
        r = run(bin_dir, "sim", "-c", cfg, "-o", tmp_path / name, "-n", 3, "--format", fmt)
        assert r.returncode == 0, r.stderr
    a, b = (tmp_path / "a.rp").read_bytes(), (tmp_path / "b.rp").read_bytes()
    assert a == b
    assert read_header(tmp_path / "a.rp")["data"] == (tmp_path / "c.raw").read_bytes()
    other = synth_cfg(tmp_path, seed=6, name="other.yaml")
    assert run(bin_dir, "sim", "-c", other, "-o", tmp_path / "d.rp", "-n", 3).returncode == 0
    assert read_header(tmp_path / "d.rp")["data"] != read_header(tmp_path / "a.rp")["data"]


def test_sim_rejects_bad_usage(bin_dir, tmp_path):
    cfg = synth_cfg(tmp_path)
    assert run(bin_dir, "sim", "--help").returncode == 0
    assert run(bin_dir, "sim", "-c", cfg).returncode == 2
    r = run(bin_dir, "sim", "-c", cfg, "-o", tmp_path / "x", "--format", "tiff")
    assert r.returncode == 2 and "--format tiff" in r.stderr
    r = run(bin_dir, "sim", "-c", cfg, "-o", tmp_path / "x", "-n", 0)
    assert r.returncode == 2
    r = run(bin_dir, "sim", "-c", tmp_path / "missing.yaml", "-o", tmp_path / "x")
    assert r.returncode == 2 and "missing.yaml" in r.stderr
    assert not (tmp_path / "x").exists()


def test_truth_has_the_full_resolution_shape(bin_dir, tmp_path):
    cfg = synth_cfg(tmp_path)
    r = run(bin_dir, "sim", "-c", cfg, "-o", tmp_path / "a.rp", "-n", 4, "--truth",
            tmp_path / "t.h5")
    assert r.returncode == 0, r.stderr
    with h5py.File(tmp_path / "t.h5", "r") as f:
        t = f["truth"][:]
        assert t.shape == (4, 12, 16, 128) and t.dtype == np.float32
        assert t.min() >= 0 and t.max() <= 1 and t.max() > 0.5
        assert f["offset"][:].tolist() == [[0, 0], [1, 0], [0, 1], [1, 1]]
        assert list(f["truth"].attrs["stride"]) == [2, 2]
        f_attrs = {k: (v.decode() if isinstance(v, bytes) else v)
                   for k, v in f["truth"].attrs.items()}
    # the truth is an image: above 0.55 mm of the 2 mm depth range (bin 35 of 128) only the
    # point-spread function's tail (Hann window, Gaussian source: below -60 dB 5 bins away)
    assert t[..., :30].max() < 1e-3
    assert f_attrs["window"] == "hann"
    # the phantom turns at 2 deg/s: epochs differ, apart from their scan positions
    assert not np.array_equal(t[0], t[3])


def correlation_with_truth(bin_dir, tmp_path, corrections):
    poly, dispersion = scanner_corrections(tmp_path / "a.rp")
    pre = "preprocess:\n  db_range: [40, 110]\n"
    if corrections:
        pre += f"  resample: {{method: cubic, poly: {poly}}}\n"
        pre += f"  dispersion: {{coeffs: {dispersion}}}\n"
    cfg = tmp_path / f"p{int(corrections)}.yaml"
    cfg.write_text("backend: cpu\nsource:\n  type: replay\n  rate: 0\n  replay: {path: "
                   f"{tmp_path / 'a.rp'}}}\n" + GEOMETRY + pre + "reconstruct: {mode: none}\n")
    out = tmp_path / f"p{int(corrections)}.h5"
    r = run(bin_dir, "process", "-c", cfg, "-o", out, "--lowres")
    if r.returncode != 0:
        pytest.fail(r.stderr)
    with h5py.File(out, "r") as f, h5py.File(tmp_path / "t.h5", "r") as g:
        low, off, t = f["lowres"][:], f["offset"][:], g["truth"][:]
    return truth_correlation(low, off, t, 2)


def test_processing_with_the_scanners_corrections_recovers_the_truth(bin_dir, tmp_path):
    if not (bin_dir / "volrec").exists():
        pytest.skip("volrec not built")
    cfg = synth_cfg(tmp_path)
    r = run(bin_dir, "sim", "-c", cfg, "-o", tmp_path / "a.rp", "-n", 4, "--truth",
            tmp_path / "t.h5")
    assert r.returncode == 0, r.stderr
    good = correlation_with_truth(bin_dir, tmp_path, True)
    bad = correlation_with_truth(bin_dir, tmp_path, False)
    # measured: 0.976 corrected, 0.485 uncorrected (the truth is the image of the same chain)
    print(f"correlation with the truth: corrected {good:.3f}, uncorrected {bad:.3f}")
    assert good > 0.9, (good, bad)
    assert good > bad + 0.15, (good, bad)


def neighbour_correlation(a, b):
    """Lateral correlation of speckle: a and b are truths of the same phantom with two seeds
    (the same structure, independent speckle), so a - b holds speckle alone; its correlation
    between positions one full-resolution pitch apart along x, over the voxels with tissue."""
    d = a - b
    x0, x1 = d[:, :, :-1, :].ravel(), d[:, :, 1:, :].ravel()
    m = (a[:, :, :-1, :].ravel() > 0.02) & (a[:, :, 1:, :].ravel() > 0.02)
    return float(np.corrcoef(x0[m], x1[m])[0, 1])


def test_beam_correlates_speckle_between_neighbours(bin_dir, tmp_path):
    """source.synth.beam_um: a Gaussian beam of that FWHM sums the scatterer cells under it,
    so speckle is shared by positions closer than the beam (docs/shim.md); 0 is the pencil
    beam, whose neighbours one pitch (3 mm / 16 = 188 um) apart are independent."""
    yaml = pytest.importorskip("yaml")
    corr, mean = {}, {}
    for beam in (0, 200, 400):
        t = []
        for seed in (5, 6):
            cfg = tmp_path / f"b{beam}-{seed}.yaml"
            cfg.write_text("source:\n  type: synth\n  rate: 25\n  synth: {seed: "
                           f"{seed}, motion: {{deg_per_s: 0}}, snr_db: 40, beam_um: {beam}}}\n"
                           + GEOMETRY)
            rp, h5 = tmp_path / f"b{beam}-{seed}.rp", tmp_path / f"b{beam}-{seed}.h5"
            r = run(bin_dir, "sim", "-c", cfg, "-o", rp, "-n", 2, "--truth", h5)
            assert r.returncode == 0, r.stderr
            assert yaml.safe_load(read_header(rp)["meta"])["beam_um"] == beam
            with h5py.File(h5, "r") as f:
                t.append(f["truth"][:].astype(np.float64))
        corr[beam] = neighbour_correlation(*t)
        mean[beam] = t[0].mean(axis=(0, 1, 2))
    print("speckle correlation one pitch apart, by beam:", corr)
    assert abs(corr[0]) < 0.1, corr
    # measured: -0.01, 0.18, 0.54 (a Gaussian beam predicts |mu|^2 = 0.29 and 0.74 there)
    assert corr[200] > 0.1 and corr[400] > corr[200] + 0.2, corr
    # the same structure: the mean depth profile of the layers hardly depends on the beam
    for beam in (200, 400):
        assert np.corrcoef(mean[beam], mean[0])[0, 1] > 0.9


def test_beam_out_of_range_is_refused_by_the_scanner(bin_dir, tmp_path):
    cfg = tmp_path / "wide.yaml"
    cfg.write_text("source:\n  type: synth\n  synth: {beam_um: 501}\n" + GEOMETRY)
    r = run(bin_dir, "sim", "-c", cfg, "-o", tmp_path / "w.rp", "-n", 1)
    assert r.returncode == 2
    assert "source.synth.beam_um: 501 is out of range (a number from 0 to 500)" in r.stderr
    assert not (tmp_path / "w.rp").exists()
