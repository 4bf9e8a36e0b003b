# SPDX-License-Identifier: MIT
"""output.channels (docs/algorithms.md §5): `volrec process` writes angiography and Doppler,
each reconstructed with the structure's weights, and they equal the float64 reference of
tests/reference/oct_ref.py within the tolerances of docs/algorithms.md "Test tolerances"
(Doppler phases compared on the circle). Input: replay files whose repeats share a base
spectrum and differ by noise of a strength drawn per A-scan (static tissue and flow side by
side), so that angiography and phases span their ranges."""
import json
import re
import pathlib
import subprocess
import sys
import zlib

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "reference"))
import oct_ref  # noqa: E402
from test_algorithms import REL_TOL, U8_FRACTION, build_case, merge, rel_error  # noqa: E402

h5py = pytest.importorskip("h5py")

PHASE_TOL = 1e-3  # radians, largest difference of a Doppler phase on the circle

ALL = {"output": {"channels": ["structure", "angio", "doppler"]}}

# name -> (overrides, epochs); the geometry of test_algorithms.build_case unless given
CASES = {
    "svar_m2": (merge(ALL, {"geometry": {"repeats": 2},
                            "functional": {"angio": {"method": "svar"}}}), 2),
    "cdv_m2_bulk_off": (merge(ALL, {"geometry": {"repeats": 2},
                                    "functional": {"doppler": {"bulk": False}}}), 2),
    "cdv_m4_odd_sizes_mask": (merge(ALL, {
        "geometry": {"repeats": 4, "samples_per_ascan": 34, "depth_range": [2, 15],
                     "ascans_per_bscan": 5, "bscans_per_volume": 3},
        "functional": {"mask_db": 68.0, "axial_half_window": 1}}), 1),
    "svar_m3_range_flips_bidirectional": (merge(ALL, {
        "geometry": {"repeats": 3, "bidirectional": True, "depth_range": [3, 29]},
        "preprocess": {"flip": {"x": True, "z": True}},
        "functional": {"angio": {"method": "svar", "range": [0.0, 40.0]}, "mask_db": 70.0}}), 1),
    "ascan_m1_doppler": ({"output": {"channels": ["structure", "doppler"]},
                          "geometry": {"ascans_per_bscan": 7},
                          "functional": {"mask_db": 72.0}}, 2),
    "ascan_m3_bulk_flip_z_crop": (merge(ALL, {
        "geometry": {"repeats": 3, "depth_range": [4, 20]},
        "preprocess": {"flip": {"z": True}, "zero_pad": 2},
        "functional": {"doppler": {"axis": "ascan"}, "axial_half_window": 3}}), 1),
    "noncumulative_2x2_m2": (merge(ALL, {
        "geometry": {"repeats": 2, "stride": [2, 2]},
        "reconstruct": {"mode": "noncumulative"}}), 6),
    "cumulative_2x1_m4_svar": (merge(ALL, {
        "geometry": {"repeats": 4, "stride": [2, 1], "ascans_per_bscan": 5},
        "reconstruct": {"mode": "cumulative", "temporal": "exp", "tau": 2.0,
                        "combine": "product"},
        "functional": {"angio": {"method": "svar"}}}), 4),
    "angio_alone_noncumulative_1x3": ({
        "output": {"channels": ["angio"]},
        "geometry": {"repeats": 2, "stride": [1, 3]},
        "reconstruct": {"mode": "noncumulative"}}, 4),
    "cdv_m2_dispersion_odd_nx": (merge(ALL, {
        "geometry": {"repeats": 2, "ascans_per_bscan": 11},
        "preprocess": {"dispersion": {"coeffs": [25.0, -12.0]}}}), 1),
    # more A-scans than the CPU backend's chunk of 32 (cpu/functional.c): ascan Doppler across
    # chunk boundaries, a last chunk not a whole FFT batch
    "ascan_m2_bulk_chunks": (merge(ALL, {
        "geometry": {"repeats": 2, "ascans_per_bscan": 75, "bscans_per_volume": 2},
        "functional": {"doppler": {"axis": "ascan"}}}), 1),
    "cdv_m2_chunks_flip_x": (merge(ALL, {
        "geometry": {"repeats": 2, "ascans_per_bscan": 70, "bscans_per_volume": 2,
                     "bidirectional": True}}), 1),
    "doppler_alone_partial_median": ({
        "output": {"channels": ["doppler"]},
        "geometry": {"repeats": 2},
        "preprocess": {"background": {"mode": "partial_median", "threshold": 3.0}}}, 1),
}


def repeats_raw(name, cfg, epochs):
    """Raw u16 [epochs][ny * M][nx][K]: per position and A-scan a base spectrum, each repeat
    the base plus noise of a strength drawn per A-scan (0 to all noise)."""
    g = cfg["geometry"]
    rng = np.random.default_rng(zlib.crc32(name.encode()) + 1)
    M, ny, nx, K = g.get("repeats", 1), g["bscans_per_volume"], g["ascans_per_bscan"], \
        g["samples_per_ascan"]
    base = rng.integers(0, 4096, size=(epochs, ny, 1, nx, K)).astype(np.float64)
    noise = rng.integers(0, 4096, size=(epochs, ny, M, nx, K)).astype(np.float64)
    w = rng.choice([0.0, 0.02, 0.2, 1.0], size=(epochs, ny, 1, nx, 1))
    raw = np.rint((1 - w) * base + w * noise).astype("<u2")
    return raw.reshape(epochs, ny * M, nx, K)


def run(bin_dir, tmp_path, epochs):
    cmd = [str(bin_dir / "volrec"), "process", "-c", str(tmp_path / "config.yaml"),
           "-o", str(tmp_path / "out.h5"), "-n", str(epochs), "--lowres", "--full"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"{' '.join(cmd)}\nstdout: {p.stdout}\nstderr: {p.stderr}"
    return h5py.File(tmp_path / "out.h5", "r")


def make_case(tmp_path, name, over, epochs):
    cfg, ref, _ = build_case(tmp_path, name, over, epochs)
    raw = repeats_raw(name, cfg, epochs)
    raw.tofile(tmp_path / "input.raw")
    return cfg, ref, raw


def circle(a, b, period):
    d = np.abs(a.astype(np.float64) - b) % period
    return np.minimum(d, period - d)


def u8_bad(what, got, want, circular=False):
    diff = circle(got, want, 255) if circular else np.abs(got.astype(int) - want.astype(int))
    frac = float(np.mean(diff <= 1))
    if frac < U8_FRACTION or diff.max() > 2:
        return [f"{what}: u8 within 1 LSB on {100 * frac:.3f} %, differs by up to {diff.max()}"]
    return []


def compare(name, f, ref, raw, epochs):
    """Every dataset of the channels against the reference: a list of failures."""
    chans = ref.get("output", {}).get("channels", ["structure"])
    names = {"structure": "volumes", "angio": "angio", "doppler": "doppler"}
    fulls = {"structure": "full", "angio": "full_angio", "doppler": "full_doppler"}
    for c in chans:
        assert names[c] in f and fulls[c] in f, (name, c, list(f))
    assert ("volumes" in f) == ("structure" in chans)
    rs, ra, rre, rim = (oct_ref.Reconstructor(ref) for _ in range(4))
    bad = []
    for e in range(epochs):
        want = oct_ref.functional(raw[e], ref)
        at = f"{name} epoch {e}"
        low = want["structure"]
        s = rs(e, low)
        if rel_error(f["lowres"][e], low) > REL_TOL:
            bad.append(f"{at}: /lowres relative error {rel_error(f['lowres'][e], low):.3g}")
        if "structure" in chans:
            if rel_error(f["full"][e], s) > REL_TOL:
                bad.append(f"{at}: /full relative error {rel_error(f['full'][e], s):.3g}")
            bad += u8_bad(f"{at} /volumes", f["volumes"][e], oct_ref.quantize(s))
        if "angio" in chans:
            a = ra(e, want["angio"])
            for k, w in (("lowres_angio", want["angio"]), ("full_angio", a)):
                if rel_error(f[k][e], w) > REL_TOL:
                    bad.append(f"{at}: /{k} relative error {rel_error(f[k][e], w):.3g}")
            bad += u8_bad(f"{at} /angio", f["angio"][e], oct_ref.quantize(a))
        if "doppler" in chans:
            R = want["doppler"]
            Rf = rre(e, R.real) + 1j * rim(e, R.imag)
            d = circle(f["lowres_doppler"][e], oct_ref.phase(R), 2 * np.pi).max()
            if d > PHASE_TOL:
                bad.append(f"{at}: /lowres_doppler differs by {d:.3g} rad")
            v = oct_ref.doppler_v(Rf)
            d = circle(f["full_doppler"][e], v, 1.0).max()
            if d > PHASE_TOL / (2 * np.pi):
                bad.append(f"{at}: /full_doppler differs by {d:.3g}")
            bad += u8_bad(f"{at} /doppler", f["doppler"][e], oct_ref.quantize(v), True)
    return bad


@pytest.mark.parametrize("name", sorted(CASES))
def test_channels_match_reference(name, tmp_path, bin_dir):
    over, epochs = CASES[name]
    cfg, ref, raw = make_case(tmp_path, name, over, epochs)
    with run(bin_dir, tmp_path, epochs) as f:
        assert compare(name, f, ref, raw, epochs) == []


def test_channels_span_their_ranges(tmp_path, bin_dir):
    """The input is not trivial: angiography has static (low) and decorrelated (high) voxels,
    the mask removes some, and Doppler phases take many values."""
    over, epochs = CASES["cdv_m4_odd_sizes_mask"]
    cfg, ref, raw = make_case(tmp_path, "span", over, epochs)
    with run(bin_dir, tmp_path, epochs) as f:
        a, d = f["lowres_angio"][0], f["lowres_doppler"][0]
    assert np.mean(a == 0) > 0.05 and np.mean(a > 0.3) > 0.05, np.histogram(a)
    assert np.mean(d == 0) > 0.05 and len(np.unique(np.round(d, 2))) > 50


def test_reference_detects_a_wrong_method(tmp_path, bin_dir):
    """The comparison can fail: svar output against a cdv reference, and Doppler with the bulk
    phase removed against a reference without it."""
    over, epochs = CASES["svar_m2"]
    cfg, ref, raw = make_case(tmp_path, "svar_m2", over, epochs)
    with run(bin_dir, tmp_path, epochs) as f:
        other = json.loads(json.dumps(ref))
        other["functional"] = {"angio": {"method": "cdv"}, "doppler": {"bulk": False}}
        bad = compare("svar_m2", f, other, raw, epochs)
    assert any("angio" in b for b in bad) and any("doppler" in b for b in bad), bad


@pytest.mark.parametrize("over", [
    {"geometry": {"repeats": 2}},
    {"geometry": {"repeats": 3, "stride": [2, 2]}, "reconstruct": {"mode": "cumulative"}},
], ids=["none_m2", "cumulative_m3"])
def test_structure_is_the_same_with_channels(over, tmp_path, bin_dir):
    """The structure does not depend on the other channels, bit for bit."""
    epochs = 4
    cfg, ref, raw = make_case(tmp_path, "same", over, epochs)
    with run(bin_dir, tmp_path, epochs) as f:
        want = {k: f[k][:] for k in ("volumes", "lowres", "full")}
    cfg["output"] = {"channels": ["structure", "angio", "doppler"]}
    (tmp_path / "config.yaml").write_text(json.dumps(cfg, indent=1) + "\n")
    with run(bin_dir, tmp_path, epochs) as f:
        for k, v in want.items():
            assert np.array_equal(f[k][:], v), k


def test_channels_go_into_other_formats(tmp_path, bin_dir):
    """`volrec process -o OUT.zarr` writes every channel, through the export engine
    (docs/formats.md "Channels"): the same values as its HDF5 output."""
    zarr = pytest.importorskip("zarr")
    over, epochs = CASES["svar_m2"]
    make_case(tmp_path, "zarr", over, epochs)
    with run(bin_dir, tmp_path, epochs) as f:
        want = [f[k][:] for k in ("volumes", "angio", "doppler")]
    p = subprocess.run([str(bin_dir / "volrec"), "process", "-c", str(tmp_path / "config.yaml"),
                        "-o", str(tmp_path / "out.zarr"), "-n", str(epochs)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, (p.stdout, p.stderr)
    g = zarr.open_group(str(tmp_path / "out.zarr"), mode="r")
    assert [c["label"] for c in g.attrs["omero"]["channels"]] == ["structure", "angio", "doppler"]
    for i, w in enumerate(want):
        assert np.array_equal(g["0"][:, i], w), i


def test_channels_are_refused_where_not_available(tmp_path, bin_dir):
    """Formats other than HDF5 refuse channels with a precise message; volrecd takes them
    (tests/integration/test_daemon_channels.py reads what it publishes)."""
    over, epochs = CASES["svar_m2"]
    make_case(tmp_path, "refuse", over, epochs)
    p = subprocess.run([str(bin_dir / "volrecd"), "--check", "-c",
                        str(tmp_path / "config.yaml")], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert re.search(r'channels:\s*\n\s*- "structure"\s*\n\s*- "angio"\s*\n\s*- "doppler"',
                     p.stdout), p.stdout


@pytest.mark.parametrize("seed", range(200, 212))
def test_random_configuration_with_channels_matches_reference(seed, tmp_path, bin_dir):
    """test_algorithms' random configurations (edge geometry, every option, repeats 1 to 4)
    with random channels and functional keys, on its random input."""
    import random

    from test_algorithms import random_configuration
    over, epochs = random_configuration(seed, repeats=True)
    r = random.Random(seed)
    M = over["geometry"]["repeats"]
    chans = [c for c in ("structure", "angio", "doppler")
             if r.random() < 0.7 and (c != "angio" or M >= 2)] or ["doppler"]
    lo, hi = over["preprocess"]["db_range"]
    fn = {"angio": {"method": r.choice(["svar", "cdv"])},
          "axial_half_window": r.randint(0, 4),
          "mask_db": r.uniform(lo, hi) if r.random() < 0.5 else lo,
          "doppler": {"bulk": r.random() < 0.5,
                      "axis": r.choice(["bscan", "ascan"]) if M >= 2 else "ascan"}}
    over = merge(over, {"output": {"channels": chans}, "functional": fn})
    name = f"random-channels-{seed}"
    cfg, ref, raw = build_case(tmp_path, name, over, epochs)
    with run(bin_dir, tmp_path, epochs) as f:
        assert compare(name, f, ref, raw, epochs) == [], json.dumps(over)
