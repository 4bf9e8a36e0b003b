# SPDX-License-Identifier: MIT
"""`volrec calibrate` on data with known answers: the simulator's mirror (known non-linear k and
dispersion: the recovered corrections must give a point spread within 10 % of the one the exact
corrections give), the simulator's tilted reflector (dispersion coefficients, the pixel order
of a wavelength polynomial), a synthetic blocked-arm recording (reference spectrum and its shape
check), the real sample of tests/data/oct-calibration-example (dispersion against the shipped
table), and inputs that cannot support a calibration, each refused with its message."""
import re
import struct
import subprocess

import numpy as np
import pytest

from simkit import mirror_fwhm, scanner_corrections

pytestmark = pytest.mark.numerics  # not in the TSan stage (docs/testing.md)

h5py = pytest.importorskip("h5py")

K = 512
DB = (0.0, 160.0)


def run(bin_dir, *args):
    return subprocess.run([str(bin_dir / "volrec"), *map(str, args)], capture_output=True,
                          text=True, timeout=300)


def ok(p):
    assert p.returncode == 0, f"stdout: {p.stdout}\nstderr: {p.stderr}"
    return p.stdout


def geometry(k, nx, ny):
    return (f"geometry:\n  samples_per_ascan: {k}\n  ascans_per_bscan: {nx}\n"
            f"  bscans_per_volume: {ny}\n  stride: [1, 1]\n")


def simulate(bin_dir, tmp_path, name, phantom, geo, extra=()):
    cfg = tmp_path / f"{name}-sim.yaml"
    cfg.write_text(f"source:\n  type: synth\n  rate: 25\n  synth: {{seed: 11, phantom: "
                   f"{phantom}, snr_db: 40}}\n" + geo)
    rp = tmp_path / f"{name}.rp"
    ok(run(bin_dir, "sim", "-c", cfg, "-o", rp, "-n", 1, *extra))
    return (rp, *scanner_corrections(rp))


def process(bin_dir, tmp_path, rp, geo, name, pre):
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(f"backend: cpu\nsource:\n  type: replay\n  rate: 0\n  replay: {{path: {rp}}}\n"
                   + geo + f"preprocess:\n  db_range: [{DB[0]}, {DB[1]}]\n" + pre
                   + "reconstruct: {mode: none}\n")
    out = tmp_path / f"{name}.h5"
    ok(run(bin_dir, "process", "-c", cfg, "-o", out, "--lowres"))
    with h5py.File(out, "r") as f:
        return f["lowres"][:]


def replay(path, spectra):
    """Write spectra [ny][nx][K] (u16 or f32) as a one-epoch volrec replay file
    (docs/replay-format.md: a 64-byte header, no metadata)."""
    ny, nx, k = spectra.shape
    code = {np.dtype("<u2"): 0, np.dtype("<f4"): 2}[spectra.dtype]
    path.write_bytes(b"VOLRECRP" + struct.pack("<6IQ4I8x", 1, 64, code, k, nx, ny, 1, 1, 1, 0, 0)
                     + spectra.tobytes())
    return path


def spectra(k, nx, ny, dtype="<u2"):
    """[ny][nx][k] spectra of a reflector over noise, well inside the digitizer's range."""
    rng = np.random.default_rng(3)
    j = np.arange(k)
    env = 20000 * np.exp(-0.5 * ((j - k / 2) / (0.3 * k)) ** 2) + 1000
    s = env * (1 + 0.3 * np.cos(2 * np.pi * 0.2 * j)) + rng.normal(0, 30, (ny, nx, k))
    return s.astype(dtype)


def number(pattern, text):
    m = re.search(pattern, text)
    assert m, f"'{pattern}' not in:\n{text}"
    return [float(g) for g in m.groups()]


@pytest.fixture
def mirrors(bin_dir, tmp_path):
    geo = geometry(K, 16, 4)
    rp1, poly, disp = simulate(bin_dir, tmp_path, "mirror1", "mirror", geo)
    rp2, _, _ = simulate(bin_dir, tmp_path, "mirror2", "mirror", geo, ("--mirror-mm", 0.6))
    ideal, bins = mirror_fwhm(process(bin_dir, tmp_path, rp1, geo, "ideal",
                                      f"  resample: {{method: cubic, poly: {poly}}}\n"
                                      f"  dispersion: {{coeffs: {disp}}}\n"), DB, K)
    assert bins == [K // 4]
    return geo, rp1, rp2, ideal


def test_klin_two_depths_recover_the_point_spread(bin_dir, tmp_path, mirrors):
    geo, rp1, rp2, ideal = mirrors
    out = tmp_path / "klin2"
    out.mkdir()
    text = ok(run(bin_dir, "calibrate", "--klin", "-o", out, rp1, rp2))
    a2, a3 = number(r"\[a2, a3\] = \[(\S+), (\S+)\] rad", text)
    got, bins = mirror_fwhm(process(
        bin_dir, tmp_path, rp1, geo, "klin2",
        f"  resample: {{method: cubic, table: {out / 'resample_table.txt'}}}\n"
        f"  dispersion: {{table: {out / 'dispersion_table.txt'}}}\n"), DB, K)
    print(f"mirror FWHM: ideal {ideal:.3f} bins, from --klin at two depths {got:.3f}; "
          f"dispersion [{a2}, {a3}] (simulator: [30, -12])")
    assert bins == [K // 4]
    assert abs(got - ideal) <= 0.1 * ideal, (got, ideal)
    assert abs(a2 - 30) < 5, a2
    # the fragment is a valid configuration
    frag = (out / "klin.yaml").read_text()
    assert "table: resample_table.txt" in frag and "table: dispersion_table.txt" in frag
    cfg = out / "check.yaml"
    cfg.write_text(geo + frag)
    ok(subprocess.run([str(bin_dir / "volrecd"), "--check", "-c", str(cfg)],
                      capture_output=True, text=True, timeout=30))
    assert (out / "klin.png").stat().st_size > 0


def test_klin_one_depth_is_sharp_at_that_depth(bin_dir, tmp_path, mirrors):
    geo, rp1, _, ideal = mirrors
    out = tmp_path / "klin1"
    out.mkdir()
    text = ok(run(bin_dir, "calibrate", "--klin", "-o", out, rp1))
    assert "one depth" in text and "dispersion_table" not in text
    got, _ = mirror_fwhm(process(
        bin_dir, tmp_path, rp1, geo, "klin1",
        f"  resample: {{method: cubic, table: {out / 'resample_table.txt'}}}\n"), DB, K)
    print(f"mirror FWHM: ideal {ideal:.3f} bins, from --klin at one depth {got:.3f}")
    assert abs(got - ideal) <= 0.1 * ideal, (got, ideal)


@pytest.fixture
def tilted(bin_dir, tmp_path):
    geo = geometry(1024, 64, 4)
    rp, poly, disp = simulate(bin_dir, tmp_path, "tilted", "tilted", geo)
    return geo, rp, poly, disp


def calibrate_dispersion(bin_dir, tmp_path, geo, rp, poly, name):
    """volrec calibrate --dispersion of rp, resampled with poly (config tmp_path/name):
    (sharpness before, a2, a3, sharpness after)."""
    cfg = tmp_path / name
    cfg.write_text(geo + f"preprocess:\n  background: {{mode: bscan_mean}}\n"
                   f"  resample: {{method: cubic, poly: {poly}}}\n")
    text = ok(run(bin_dir, "calibrate", "--dispersion", "-c", cfg, "-o", tmp_path, rp))
    before, = number(r"sharpness .*: (\S+) with the configured dispersion \(none\)", text)
    a2, a3, after = number(r"\[a2, a3\] = \[(\S+), (\S+)\] rad: sharpness (\S+)", text)
    return before, a2, a3, after


def test_dispersion_on_the_tilted_reflector(bin_dir, tmp_path, tilted):
    geo, rp, poly, _ = tilted
    before, a2, a3, after = calibrate_dispersion(bin_dir, tmp_path, geo, rp, poly, "disp.yaml")
    print(f"tilted reflector: [a2, a3] = [{a2}, {a3}] (simulator: [30, -12]), sharpness "
          f"{before} -> {after}")
    assert abs(a2 - 30) < 1.5 and abs(a3 + 12) < 3, (a2, a3)
    assert after > 1.5 * before
    assert "coeffs: [" in (tmp_path / "dispersion.yaml").read_text()
    assert len((tmp_path / "dispersion_table.txt").read_text().splitlines()) == 1024 + 1


@pytest.mark.parametrize("sample_type", ["u12p", "u12gv"])
def test_dispersion_on_packed_12bit_recordings(bin_dir, tmp_path, sample_type):
    # a camera's packed 12-bit samples (docs/algorithms.md §0), read from the replay file
    geo = geometry(1024, 64, 4) + f"  sample_type: {sample_type}\n"
    rp, poly, _ = simulate(bin_dir, tmp_path, "tilted12", "tilted", geo)
    before, a2, a3, after = calibrate_dispersion(bin_dir, tmp_path, geo, rp, poly, "disp12.yaml")
    print(f"tilted reflector, {sample_type}: [a2, a3] = [{a2}, {a3}] (simulator: [30, -12])")
    assert abs(a2 - 30) < 1.5 and abs(a3 + 12) < 3, (a2, a3)
    assert after > 1.5 * before


def wavelength_poly(rp_poly, k):
    """A cubic wavelength polynomial (nm) whose linear-k resampling undoes the simulator's
    non-linearity: kappa linear in the simulator's linear-k coordinate u, 800 to 880 nm."""
    c = [float(v) for v in rp_poly.strip("[]").split(",")]
    j = np.arange(k)
    pos = c[0] + c[1] * (j / (k - 1)) + c[2] * (j / (k - 1)) ** 2 + c[3] * (j / (k - 1)) ** 3
    u = np.interp(np.arange(k), pos, j)  # linear-k coordinate of each pixel
    kap = 2 * np.pi / 800 - (2 * np.pi / 800 - 2 * np.pi / 880) * u / (k - 1)
    lam = 2 * np.pi / kap
    return np.polynomial.polynomial.polyfit(j, lam, 3)


@pytest.mark.parametrize("phantom", ["tilted", "retina"])
def test_orientation_picks_the_sharper_pixel_order(bin_dir, tmp_path, phantom):
    geo = geometry(1024, 64, 4)
    rp, poly, disp = simulate(bin_dir, tmp_path, phantom, phantom, geo)
    lam = wavelength_poly(poly, 1024)
    M = 1023.0
    rev = [lam[0] + lam[1] * M + lam[2] * M ** 2 + lam[3] * M ** 3,
           -lam[1] - 2 * lam[2] * M - 3 * lam[3] * M ** 2, lam[2] + 3 * lam[3] * M, -lam[3]]
    cfg = tmp_path / "orient.yaml"
    cfg.write_text(geo + f"preprocess:\n  background: {{mode: bscan_mean}}\n"
                   f"  dispersion: {{coeffs: {disp}}}\n")
    for given, want in ((lam, "as given"), (rev, "reversed")):
        arg = ",".join(f"{v:.12g}" for v in given)
        text = ok(run(bin_dir, "calibrate", "--orientation", "-c", cfg, "--wavelength-nm", arg,
                      "-o", tmp_path, rp))
        print(text)
        assert f"pixel order: {want}" in text
        gain, = number(r"sharper by (\S+) %", text)
        assert gain > 5
        written = number(r"wavelength_nm: \[(\S+), (\S+), (\S+), (\S+)\]",
                         (tmp_path / "orientation.yaml").read_text())
        assert np.allclose(written, lam, rtol=1e-6, atol=1e-9)


def test_reference_and_its_shape_check(bin_dir, tmp_path):
    k, nx = 256, 32
    rng = np.random.default_rng(1)
    j = np.arange(k)
    env = 20000 * np.exp(-0.5 * ((j - k / 2) / (0.3 * k)) ** 2) + 1000
    blocked = (env + rng.normal(0, 30, (4 * nx, k))).astype("<u2")
    blocked.tofile(tmp_path / "blocked.raw")
    fringe = 800 * np.cos(2 * np.pi * 40 * j / k + rng.uniform(0, 6.3, (4 * nx, 1)))
    (1.1 * env + fringe).astype("<u2").tofile(tmp_path / "same.raw")
    shifted = 20000 * np.exp(-0.5 * ((j - 0.6 * k) / (0.3 * k)) ** 2) + 1000
    (shifted + fringe).astype("<u2").tofile(tmp_path / "other.raw")
    cfg = tmp_path / "ref.yaml"
    cfg.write_text(geometry(k, nx, 4))
    text = ok(run(bin_dir, "calibrate", "--reference", "-c", cfg, "-o", tmp_path,
                  "--check", tmp_path / "same.raw", tmp_path / "blocked.raw"))
    assert "matches the data's spectral shape" in text and "warning" not in text
    ref = np.loadtxt(tmp_path / "reference.txt")
    assert np.allclose(ref, blocked.astype(float).mean(axis=0), rtol=1e-6)
    assert "mode: reference" in (tmp_path / "reference.yaml").read_text()
    text = ok(run(bin_dir, "calibrate", "--reference", "-c", cfg, "-o", tmp_path,
                  "--check", tmp_path / "other.raw", tmp_path / "blocked.raw"))
    assert "warning: the reference does not match the data's spectral shape" in text


REAL = "tests/data/oct-calibration-example"


def test_dispersion_on_the_real_sample(bin_dir, tmp_path, src_dir):
    d = src_dir / REAL
    base = (f"geometry: {{samples_per_ascan: 1024, sample_type: f32, ascans_per_bscan: 100, "
            f"bscans_per_volume: 10, stride: [1, 1], depth_range: [20, 300]}}\n"
            f"preprocess:\n  background: {{mode: bscan_mean}}\n"
            f"  resample: {{method: cubic, table: {d / 'klinear_indices.txt'}}}\n")
    cfg = tmp_path / "real.yaml"
    cfg.write_text(base + f"  dispersion: {{table: {d / 'dispersion_phase.txt'}}}\n")
    text = ok(run(bin_dir, "calibrate", "--dispersion", "-c", cfg, "-n", 500, "-o", tmp_path,
                  d / "volume_10x100x1024_f32le.raw"))
    shipped, = number(r"sharpness .*: (\S+) with the configured dispersion \(table\)", text)
    a2, a3, ours = number(r"\[a2, a3\] = \[(\S+), (\S+)\] rad: sharpness (\S+)", text)
    table, = number(r"table with .*: (\S+) \(", text)
    print(f"real sample: sharpness with the shipped table {shipped}, with [a2, a3] = "
          f"[{a2}, {a3}] {ours}, with the a2..a5 table {table}")
    assert ours >= shipped * 0.999
    assert table >= ours


# ---- refusals ------------------------------------------------------------------------------

def test_klin_refuses_data_without_a_reflector(bin_dir, tmp_path):
    geo = geometry(K, 16, 4)
    rp, _, _ = simulate(bin_dir, tmp_path, "retina", "retina", geo)
    p = run(bin_dir, "calibrate", "--klin", "-o", tmp_path, rp)
    assert p.returncode == 1 and "no reflector peak" in p.stderr, p.stderr


def test_klin_refuses_saturated_data(bin_dir, tmp_path, mirrors):
    geo, rp1, _, _ = mirrors
    b = rp1.read_bytes()
    header_size, = struct.unpack_from("<I", b, 12)
    s = np.frombuffer(b[header_size:], dtype="<u2").astype(float)
    np.clip(s * 2.5, 0, 65535).astype("<u2").tofile(tmp_path / "sat.raw")
    cfg = tmp_path / "g.yaml"
    cfg.write_text(geo)
    p = run(bin_dir, "calibrate", "--klin", "-c", cfg, "-o", tmp_path, tmp_path / "sat.raw")
    assert p.returncode == 1 and "saturated" in p.stderr and "65535" in p.stderr, p.stderr


def test_refusals_name_the_problem(bin_dir, tmp_path, mirrors):
    geo, rp1, _, _ = mirrors
    cfg = tmp_path / "g.yaml"
    cfg.write_text(geo)
    np.zeros((20, K), dtype="<u2").tofile(tmp_path / "few.raw")
    cases = [
        (["--dispersion", "-c", cfg, tmp_path / "few.raw"], 1, "too few A-scans"),
        (["--klin", tmp_path / "few.raw"], 2 - 1, "give its geometry"),
        (["--dispersion", rp1, rp1], 2, "two inputs only with --klin"),
        ([rp1], 2, "say what to calibrate"),
        (["--klin"], 2, "no input"),
        (["--orientation", rp1], 2, "needs a wavelength polynomial"),
        (["--klin", "--dispersion", rp1], 2, "choose one of"),
        (["--klin", tmp_path / "missing.rp"], 1, "No such file"),
        (["--klin", "--zmin", "0", rp1], 2, "--zmin 0"),
        (["--dispersion", "--range", "-3", rp1], 2, "--range -3"),
    ]
    for args, code, msg in cases:
        p = run(bin_dir, "calibrate", "-o", tmp_path, *args)
        assert p.returncode == code and msg in p.stderr, (args, p.returncode, p.stderr)


def test_hdf5_input(bin_dir, tmp_path, mirrors):
    geo, rp1, _, _ = mirrors
    b = rp1.read_bytes()
    header_size, = struct.unpack_from("<I", b, 12)
    s = np.frombuffer(b[header_size:], dtype="<u2").reshape(1, 4, 16, K)
    with h5py.File(tmp_path / "raw.h5", "w") as f:
        f["raw"] = s
    text = ok(run(bin_dir, "calibrate", "--klin", "-o", tmp_path, tmp_path / "raw.h5"))
    assert "hdf5, 512 samples x 16 A-scans, 4 B-scans" in text
    assert "mirror at depth bin" in text
    with h5py.File(tmp_path / "vol.h5", "w") as f:
        f["volumes"] = np.zeros((1, 2, 2, 2), dtype="u1")
    p = run(bin_dir, "calibrate", "--klin", "-o", tmp_path, tmp_path / "vol.h5")
    assert p.returncode == 1 and "no dataset /raw" in p.stderr, p.stderr
    assert "it holds /volumes, processed volumes" in p.stderr, p.stderr
    # a group named raw is not called processed volumes
    with h5py.File(tmp_path / "group.h5", "w") as f:
        f.create_group("raw")
    p = run(bin_dir, "calibrate", "--klin", "-o", tmp_path, tmp_path / "group.h5")
    assert p.returncode == 1 and "/raw is not a dataset" in p.stderr, p.stderr
    assert "processed" not in p.stderr, p.stderr


@pytest.mark.parametrize("poly, msg", [
    ("-5,0,0,0", "gives a wavelength of -5 nm at pixel 0"),
    ("0,0,0,0", "gives a wavelength of 0 nm at pixel 0"),
    ("800,1,-0.01,0", "is not strictly monotone at pixel 51"),  # its maximum at pixel 50
])
def test_orientation_refuses_an_unusable_wavelength_polynomial(bin_dir, tmp_path, poly, msg):
    rp = replay(tmp_path / "s.rp", spectra(64, 16, 4))
    out = tmp_path / "out"
    out.mkdir()
    p = run(bin_dir, "calibrate", "--orientation", "--wavelength-nm", poly, "-o", out, rp)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert f"--wavelength-nm {poly}: {msg}" in p.stderr, p.stderr
    assert not list(out.iterdir())


@pytest.mark.parametrize("op", ["--reference", "--dispersion"])
@pytest.mark.parametrize("fmt, bad", [("replay", np.inf), ("replay", np.nan), ("hdf5", np.nan)])
def test_non_finite_samples_are_refused_naming_the_sample(bin_dir, tmp_path, op, fmt, bad):
    s = spectra(64, 16, 4, "<f4")
    s[2, 5, 7] = bad
    if fmt == "replay":
        path = replay(tmp_path / "s.rp", s)
    else:
        path = tmp_path / "s.h5"
        with h5py.File(path, "w") as f:
            f["raw"] = s
    out = tmp_path / "out"
    out.mkdir()
    p = run(bin_dir, "calibrate", op, "-o", out, path)
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    assert f"{path}: sample 7 of A-scan 5 of B-scan 2 (counted from 0) is {bad}" in p.stderr, \
        p.stderr
    assert not list(out.iterdir())


def test_reference_writes_nothing_when_the_backend_cannot_take_it(bin_dir, tmp_path):
    # the reference is computed, then the picture's run fails (depths beyond N/2 = 32): no
    # reference.txt or reference.yaml may be left behind
    rp = replay(tmp_path / "s.rp", spectra(64, 16, 4))
    out = tmp_path / "out"
    out.mkdir()
    p = run(bin_dir, "calibrate", "--reference", "--depth", "40,50", "-o", out, rp)
    assert p.returncode == 2 and "--depth: [40, 50) is empty or beyond 32" in p.stderr, \
        (p.returncode, p.stderr)
    assert not list(out.iterdir())


@pytest.mark.parametrize("fmt, shape, what", [
    ("replay", (4, 16, 1), "1 samples per A-scan, outside 16..65536"),
    ("replay", (4, 16, 2), "2 samples per A-scan, outside 16..65536"),
    ("replay", (4, 16, 15), "15 samples per A-scan, outside 16..65536"),
    ("replay", (1, 16, 131072), "131072 samples per A-scan, outside 16..65536"),
    ("replay", (1, 65537, 16), "65537 A-scans per B-scan, outside 1..65536"),
    ("hdf5", (2, 16, 2**32 + 64), "4294967360 samples per A-scan, outside 16..65536"),
    ("hdf5", (2, 2**32 + 1, 64), "4294967297 A-scans per B-scan, outside 1..65536"),
    ("hdf5", (2**60, 16, 64), "/raw holds 2^64 samples or more"),
])
def test_geometry_beyond_the_configuration_is_refused(bin_dir, tmp_path, fmt, shape, what):
    # volrecd cannot be configured with such a K or nx: no table of that length may be written
    if fmt == "replay":
        path = replay(tmp_path / "s.rp", spectra(shape[2], shape[1], shape[0]))
    else:
        path = tmp_path / "s.h5"
        with h5py.File(path, "w") as f:  # chunked and never written: no storage
            f.create_dataset("raw", shape=shape, dtype="<u2", chunks=(1, 1, 64))
    out = tmp_path / "out"
    out.mkdir()
    p = run(bin_dir, "calibrate", "--reference", "-o", out, path)
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    assert f"{path}: {what}" in p.stderr, p.stderr
    assert not list(out.iterdir())


def test_reference_check_of_a_dark_recording_is_refused(bin_dir, tmp_path):
    # a --check recording without light: its fit to the reference was 0/0, reported as
    # "shape differs by -nan % rms (correlation -nan)", and the reference was written
    rp = replay(tmp_path / "s.rp", spectra(64, 16, 4))
    dark = replay(tmp_path / "dark.rp", np.zeros((4, 16, 64), "<f4"))
    out = tmp_path / "out"
    out.mkdir()
    p = run(bin_dir, "calibrate", "--reference", "--check", dark, "-o", out, rp)
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    assert f"--check {dark}: the spectrum is zero: no light reached the detector" in p.stderr, \
        p.stderr
    assert "nan" not in p.stdout
    assert not list(out.iterdir())


def test_samples_at_zero_are_not_called_too_much_light(bin_dir, tmp_path):
    # u16 samples stuck at 0 were "saturated ... lower the source power or the exposure": the
    # opposite of what a recording without light needs
    s = spectra(64, 16, 4)
    s[:, :, :8] = 0
    path = replay(tmp_path / "low.rp", s)
    p = run(bin_dir, "calibrate", "--reference", "-o", tmp_path, path)
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    assert f"{path}: 12.50 % of the samples sit at 0, the bottom of the digitizer's range" \
        in p.stderr, p.stderr
    assert "lower the source power" not in p.stderr, p.stderr


def test_a_run_that_fails_late_leaves_the_previous_outputs_as_they_were(bin_dir, tmp_path):
    # the outputs were written one by one in place: when the picture could not be written (here
    # a directory stands where reference.png goes), reference.txt had already been replaced and
    # reference.yaml written. A run now writes under temporary names and puts its files in place
    # only once all of them are written.
    rp = replay(tmp_path / "s.rp", spectra(64, 16, 4))
    out = tmp_path / "out"
    out.mkdir()
    (out / "reference.txt").write_text("# the previous reference\n")
    (out / "reference.png").mkdir()
    p = run(bin_dir, "calibrate", "--reference", "-o", out, rp)
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    assert f"{out / 'reference.png'} is a directory: nothing written" in p.stderr, p.stderr
    assert (out / "reference.txt").read_text() == "# the previous reference\n"
    assert sorted(x.name for x in out.iterdir()) == ["reference.png", "reference.txt"]
    (out / "reference.png").rmdir()
    p = run(bin_dir, "calibrate", "--reference", "-o", out, rp)
    assert p.returncode == 0, p.stderr
    assert sorted(x.name for x in out.iterdir()) == ["reference.png", "reference.txt",
                                                     "reference.yaml"]
    assert (out / "reference.txt").read_text().startswith("# volrec calibrate --reference")
    assert f"wrote {out / 'reference.png'} (B-scan 0: before | after" in p.stdout, p.stdout
