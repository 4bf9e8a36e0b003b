# SPDX-License-Identifier: MIT
"""The flow phantom of the synthetic scanner (docs/algorithms.md "The flow phantom"): its truth
is what its parameters say (laminar profile: the peak on each vessel's axis, zero at the wall,
the direction's sign), the Doppler phase of its raw spectra (§1 and §5 in float64 here,
tests/integration/flowkit.py) is 4π n v_z T / λ0 of that truth with and without bulk motion,
cdv tells its vessels from its tissue, and `volrec quality --functional` scores angiography
and Doppler volumes against it."""
import math
import subprocess

import numpy as np
import pytest

import flowkit

pytestmark = pytest.mark.numerics  # not in the TSan stage (docs/testing.md)

h5py = pytest.importorskip("h5py")
ndimage = pytest.importorskip("scipy.ndimage")

K, NX, NY, M = 1024, 64, 16, 4
TA, TB, LAMBDA, N_TISSUE = 10.0, 700.0, 840.0, 1.38
DZ_MM = 2.0 / (K // 2)  # the scanner's depth bin (SIM_DEPTH_MM over K/2 bins), zero_pad 1
# the phantom's vessels (sources/sim_scene.c flow_vessels): a point on the axis (x, y, depth),
# azimuth and elevation in degrees, outer radius; the lumen is 6 um narrower
VESSELS = [((0.00, -0.70, 0.95), 0, 8, 0.075),
           ((0.60, 0.00, 1.05), 90, -12, 0.065),
           ((-0.50, 0.50, 1.15), 45, 6, 0.055)]
WALL_MM = 0.006
# the corrections that undo the scanner's k non-linearity and dispersion (sim.c NL_A, NL_B,
# DISP_A2, DISP_A3; the same as a replay file's metadata reports)
_K1, _A, _B = K - 1, 0.12, 0.04
REF_CFG = {"geometry": {"samples_per_ascan": K, "sample_type": "f32", "repeats": M},
           "preprocess": {"background": {"mode": "ascan_mean"},
                          "resample": {"method": "cubic",
                                       "poly": [0, _K1 * (1 + _A - _B), _K1 * (-_A + 3 * _B),
                                                _K1 * (-2 * _B)]},
                          "dispersion": {"coeffs": [30, -12]}}}


def config(tmp_path, name, flow="", repeats=M, seed=3, geometry_extra="", phantom="flow",
           stride=1, nx=NX, ny=NY, beam_um=0):
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(f"source:\n  type: synth\n  rate: 25\n  synth: {{seed: {seed}, phantom: "
                   f"{phantom}, snr_db: 40, beam_um: {beam_um}, flow: {{{flow}}}}}\n"
                   f"geometry:\n  samples_per_ascan: {K}\n  sample_type: f32\n"
                   f"  ascans_per_bscan: {nx}\n  bscans_per_volume: {ny}\n"
                   f"  repeats: {repeats}\n  stride: [{stride}, {stride}]\n{geometry_extra}")
    return cfg


def sim(bin_dir, tmp_path, name, ok=True, times=True, epochs=1, tb=TB, **kw):
    """(raw [ny * M][nx][K] f32, labels [Y][X][Z], velocities [Y][X][Z]) of one epoch of
    `volrec sim --format raw --truth`, or the failed run."""
    if not (bin_dir / "volrec").exists():
        pytest.skip("volrec not built")
    extra = (f"  ascan_period_us: {TA}\n  bscan_period_us: {tb}\n"
             f"  center_wavelength_nm: {LAMBDA}\n") if times else ""
    cfg = config(tmp_path, name, geometry_extra=extra, **kw)
    out, truth = tmp_path / f"{name}.raw", tmp_path / f"{name}-truth.h5"
    r = subprocess.run([str(bin_dir / "volrec"), "sim", "-c", str(cfg), "-o", str(out),
                        "--format", "raw", "-n", str(epochs), "--truth", str(truth)],
                       capture_output=True, text=True, timeout=600)
    if not ok:
        return r
    assert r.returncode == 0, r.stderr
    raw = np.fromfile(out, dtype="<f4").reshape(-1, kw.get("nx", NX), K)
    with h5py.File(truth, "r") as f:
        if epochs > 1:
            return f["vessel"][:], f["offset"][:], cfg, truth
        return raw, f["vessel"][0], f["velocity"][0].astype(np.float64), cfg, truth


def expected(peak, direction):
    """The truth as the parameters define it, from the vessel table: labels 2 in the lumens,
    and v_z = direction · peak · (1 − ρ²/r²) · sin(elevation) there, on the truth's grid."""
    Y, X, Z = NY, NX, K // 2
    x = ((np.arange(X) + 0.5) / X - 0.5) * 3.0
    y = ((np.arange(Y) + 0.5) / Y - 0.5) * 3.0
    z = np.arange(Z) * DZ_MM
    P = np.stack(np.meshgrid(y, x, z, indexing="ij"), axis=-1)[..., [1, 0, 2]]
    blood = np.zeros((Y, X, Z), bool)
    vz = np.zeros((Y, X, Z))
    profiles = []  # each vessel's lumen, 1 − ρ²/r² and the axial part of its direction
    for c, az, el, r in VESSELS:
        a, e = math.radians(az), math.radians(el)
        d = np.array([math.cos(e) * math.cos(a), math.cos(e) * math.sin(a), math.sin(e)])
        w = P - np.array(c)
        rho2 = (w ** 2).sum(-1) - (w @ d) ** 2
        rl = r - WALL_MM
        inside = rho2 < rl * rl
        vz = np.where(inside, direction * peak * (1 - rho2 / rl ** 2) * d[2], vz)
        blood |= inside
        profiles.append((inside, 1 - rho2 / rl ** 2, d[2]))
    return blood, vz, profiles


def test_truth_is_the_parameters(bin_dir, tmp_path):
    """Lumens where the vessel table puts them, v_z = peak (1 − ρ²/r²) sin(elevation) with the
    direction's sign: the peak on the axis, zero at the wall; the reverse direction negates
    every velocity and moves no vessel."""
    _, lab, vz, _, _ = sim(bin_dir, tmp_path, "fwd", flow="peak_mm_per_s: 2.5")
    blood, want, profiles = expected(2.5, 1)
    # the lumen's boundary may differ by a rounding on the grid, nowhere else
    assert (lab == 2).sum() > 2000
    assert ((lab == 2) != blood).sum() <= 0.01 * blood.sum()
    both = (lab == 2) & blood
    np.testing.assert_allclose(vz[both], want[both], atol=1e-5 * 2.5)
    assert (vz[lab != 2] == 0).all()
    # the peak on the axis: v_z / (1 − ρ²/r²) is peak · d_z in every vessel, which the grid
    # samples from near its wall inwards (and near the axis in some)
    for inside, fac, dz in profiles:
        s = inside & (lab == 2)
        assert s.sum() > 100 and fac[s].max() > 0.5 and fac[s].min() < 0.2
        np.testing.assert_allclose(vz[s] / (2.5 * dz), fac[s], atol=1e-4)
    assert max(f[i & (lab == 2)].max() for i, f, _ in profiles) > 0.95
    # zero at the wall: the lumen's outermost voxels are slow
    edge = (lab == 2) & ~ndimage.binary_erosion(lab == 2, np.ones((1, 1, 3)))
    assert np.median(np.abs(vz[edge])) < 0.35 * 2.5 * math.sin(math.radians(12))
    _, lab_r, vz_r, _, _ = sim(bin_dir, tmp_path, "rev",
                               flow="peak_mm_per_s: 2.5, direction: -1")
    assert (lab_r == lab).all()
    np.testing.assert_array_equal(vz_r, -vz)


def doppler_case(bin_dir, tmp_path, name, bulk_um):
    raw, lab, vz, _, _ = sim(bin_dir, tmp_path, name,
                             flow=f"peak_mm_per_s: 1.0, bulk_um_per_repeat: {bulk_um}")
    X = flowkit.complex_spectra(raw, REF_CFG)
    d = flowkit.structure_db(X, M)
    keep = d >= d.max() - 45  # the structure's mask (§5 step 2, mask_db)
    # bulk phase over the depths that hold the sample (depth_range [K/8, 3K/8): 0.5-1.5 mm)
    return X, lab, vz, keep, (K // 8, 3 * K // 8)


@pytest.mark.parametrize("bulk_um", [0.0, 0.05])
def test_doppler_phase_is_the_velocity(bin_dir, tmp_path, bulk_um):
    """Kasai's phase (§5 step 3, inter-B-scan, bulk corrected) inside the vessels is
    4π n v_z T / λ0 of the truth within 10 % where |Δφ| < 2.5 rad (the lumens' inner voxels,
    away from the wall that the axial window mixes in; least squares over them), and the bulk
    motion turns the tissue's phase by 4π n b / λ0 when it is not corrected."""
    X, lab, vz, keep, depths = doppler_case(bin_dir, tmp_path, f"dop{bulk_um}", bulk_um)
    true = flowkit.phase(vz, LAMBDA, N_TISSUE, TB)
    dphi = flowkit.kasai(X, M, 2, bulk=True, depth_range=depths, keep=keep)
    inner = ndimage.binary_erosion(lab == 2, np.ones((1, 1, 9)))
    sel = inner & keep & (np.abs(true) < 2.5) & (np.abs(true) > 0.3)
    assert sel.sum() > 1000
    slope = (dphi[sel] * true[sel]).sum() / (true[sel] ** 2).sum()
    assert abs(slope - 1) < 0.10, slope
    for sign in (1, -1):  # both directions of flow (the phantom has both)
        s = sel & (np.sign(true) == sign)
        assert s.sum() > 100
        assert abs(dphi[s].mean() / true[s].mean() - 1) < 0.10
    # the bulk motion is there: the static tissue's uncorrected phase step is 4π n b / λ0
    raw_phase = flowkit.kasai(X, M, 2, bulk=False, keep=keep)
    tissue = (lab == 1) & keep
    want = 4 * math.pi * N_TISSUE * bulk_um * 1e-6 / (LAMBDA * 1e-9)
    got = np.angle(np.exp(1j * raw_phase[tissue]).mean())
    assert abs(got - want) < 0.05, (got, want)
    # cdv: blood decorrelates between repeats, static tissue does not
    c = flowkit.cdv(X, M, 2)
    auc = flowkit.auc(c, (lab == 2) & keep, (lab == 1) & keep)
    assert auc >= 0.95, auc


def test_doppler_between_a_scans(bin_dir, tmp_path):
    """With M = 1 and a beam that neighbouring A-scans share (30 µm, 5.9 µm pitch), Kasai's
    phase between A-scans (T = ascan_period_us) follows 4π n v_z T / λ0 of the truth in sign
    and, within the beam's averaging of the parabola over the lumen (measured 0.89), in size:
    least-squares slope 0.75-1.05."""
    raw, lab, vz, _, _ = sim(bin_dir, tmp_path, "ascan", repeats=1, nx=512, ny=8, beam_um=30,
                             tb=0, flow="peak_mm_per_s: 30")
    X = flowkit.complex_spectra(raw, {**REF_CFG, "geometry": {**REF_CFG["geometry"],
                                                              "repeats": 1}})
    d = flowkit.structure_db(X, 1)
    keep = d >= d.max() - 45
    # pairs of neighbouring A-scans as the pairs of repeats (§5 step 3, axis ascan)
    pair = np.stack([X[:, :-1], X[:, 1:]], axis=1).reshape(-1, X.shape[1] - 1, X.shape[2])
    dphi = flowkit.kasai(pair, 2, 2, bulk=True, depth_range=(K // 8, 3 * K // 8),
                         keep=keep[:, :-1])
    true = flowkit.phase(vz, LAMBDA, N_TISSUE, TA)[:, :-1]
    inner = ndimage.binary_erosion(lab == 2, np.ones((1, 1, 9)))[:, :-1]
    sel = inner & keep[:, :-1] & (np.abs(true) < 2.5) & (np.abs(true) > 0.3)
    assert sel.sum() > 1000
    slope = (dphi[sel] * true[sel]).sum() / (true[sel] ** 2).sum()
    assert 0.75 < slope < 1.05, slope
    for sign in (1, -1):
        s = sel & (np.sign(true) == sign)
        assert s.sum() > 100 and dphi[s].mean() * sign > 0.5 * abs(true[s].mean())


def test_seed_and_single_repeat(bin_dir, tmp_path):
    """The same seed gives the same spectra, another seed others; with M = 1 the phantom gives
    repeat 0 of the same scan byte for byte."""
    a = sim(bin_dir, tmp_path, "s3", repeats=2)[0]
    b = sim(bin_dir, tmp_path, "s3b", repeats=2)[0]
    c = sim(bin_dir, tmp_path, "s4", repeats=2, seed=4)[0]
    one = sim(bin_dir, tmp_path, "m1", repeats=1)[0]
    assert (a == b).all() and not (a == c).all()
    np.testing.assert_array_equal(one, a[0::2])
    # repeats differ in blood more than in tissue is the cdv test's; here: they differ at all
    assert not (a[0::2] == a[1::2]).all()


def test_flow_refuses_bad_parameters(bin_dir, tmp_path):
    r = sim(bin_dir, tmp_path, "notimes", ok=False, times=False)
    assert r.returncode == 2
    assert "phantom flow needs geometry.center_wavelength_nm" in r.stderr
    r = sim(bin_dir, tmp_path, "dir0", ok=False, flow="direction: 0")
    assert r.returncode == 2 and "flow.direction 0" in r.stderr


def quality(bin_dir, cfg, truth, *args):
    return subprocess.run([str(bin_dir / "volrec"), "quality", "--functional", *map(str, args),
                           "-c", str(cfg), "-t", str(truth), "--json", "-"],
                          capture_output=True, text=True, timeout=600)


def test_quality_scores_functional_volumes(bin_dir, tmp_path):
    """volrec quality --functional: a perfect angiography has ROC area 1, a random one about
    0.5; a Doppler volume made from the truth (radians, or u8 as §5 stores it) has no error;
    one of twice the velocity has relative error 1; missing datasets and shapes are refused."""
    import json
    _, lab, vz, cfg, truth = sim(bin_dir, tmp_path, "q", flow="peak_mm_per_s: 1.0")
    true = flowkit.phase(vz, LAMBDA, N_TISSUE, TB)
    rng = np.random.default_rng(5)
    p = tmp_path / "vols.h5"
    with h5py.File(p, "w") as f:
        f["angio"] = ((lab == 2) * 200 + rng.integers(0, 50, lab.shape))[None].astype(np.uint8)
        f["angio_random"] = rnd = rng.random(lab.shape, dtype=np.float32)[None]
        f["angio_flat"] = np.full((1,) + lab.shape, 7, np.uint8)
        f["lowres_doppler"] = true[None].astype(np.float32)
        f["doppler"] = np.floor(255 * (true + np.pi) / (2 * np.pi) + 0.5)[None].astype(np.uint8)
        f["double"] = (2 * true)[None].astype(np.float32)
        f["short"] = true[None, :, :, :-1].astype(np.float32)
    r = quality(bin_dir, cfg, truth, p, "--angio", "angio", "--angio", "angio_random",
                "--doppler", "lowres_doppler")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout.splitlines()[-1])
    assert j["angio"][0]["auc"] == 1.0 and j["angio"][0]["contrast"] > 5
    assert abs(j["angio"][1]["auc"] - 0.5) < 0.03
    # the figures as defined: contrast over the tissue's population deviation, the ROC area
    # as the rank statistic (ties a half)
    v, t = rnd[0][lab == 2].astype(np.float64), rnd[0][lab == 1].astype(np.float64)
    assert j["angio"][1]["contrast"] == pytest.approx((v.mean() - t.mean()) / t.std(), rel=1e-9)
    assert j["angio"][1]["auc"] == pytest.approx(flowkit.auc(rnd[0], lab == 2, lab == 1),
                                                 rel=1e-12)
    r = quality(bin_dir, cfg, truth, p, "--angio", "angio_flat")
    assert json.loads(r.stdout.splitlines()[-1])["angio"][0]["auc"] == 0.5
    sel = (lab == 2) & (np.abs(true) < 2.5)
    assert j["angio"][0]["vessel_voxels"] == (lab == 2).sum()
    assert j["angio"][0]["tissue_voxels"] == (lab == 1).sum()
    d = j["doppler"]
    assert d["voxels"] == sel.sum() and d["mae_mm_s"] < 1e-6 and d["relative_error"] < 1e-5
    # the u8 volume: within its quantization (2π/255 rad)
    r = quality(bin_dir, cfg, truth, p, "--doppler", "doppler")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout.splitlines()[-1])["doppler"]
    step = flowkit.phase(1.0, LAMBDA, N_TISSUE, TB)  # rad per mm/s
    assert d["mae_mm_s"] <= math.pi / 255 / step and d["relative_error"] < 0.05
    r = quality(bin_dir, cfg, truth, p, "--doppler", "double")
    d = json.loads(r.stdout.splitlines()[-1])["doppler"]
    assert abs(d["relative_error"] - 1) < 1e-4 and d["bias_mm_s"] * vz[sel].mean() > 0
    # the default datasets /angio and /doppler
    r = quality(bin_dir, cfg, truth, p)
    j = json.loads(r.stdout.splitlines()[-1])
    assert [a["dataset"] for a in j["angio"]] == ["angio"] and j["doppler"]["dataset"] == "doppler"
    r = quality(bin_dir, cfg, truth, p, "--angio", "nothere")
    assert r.returncode == 2 and "no dataset /nothere" in r.stderr
    r = quality(bin_dir, cfg, truth, p, "--doppler", "short")
    assert r.returncode == 2 and "neither the truth's" in r.stderr


def test_quality_maps_low_resolution_rows(bin_dir, tmp_path):
    """A low-resolution dataset [n][ny][nx][Z] meets the truth at each row's offset: the
    vessel mask sampled there scores ROC area 1 in every row, and pooled; sampled at the
    wrong offsets (each row's neighbour) it does not."""
    import json
    lab, off, cfg, truth = sim(bin_dir, tmp_path, "lr", epochs=4, stride=2, repeats=2)
    rows = np.stack([lab[i, off[i][1]::2, off[i][0]::2] for i in range(4)])
    wrong = np.stack([lab[i, off[(i + 1) % 4][1]::2, off[(i + 1) % 4][0]::2] for i in range(4)])
    p = tmp_path / "lr.h5"
    with h5py.File(p, "w") as f:
        f["lowres_angio"] = (rows == 2).astype(np.float32)
        f["shifted"] = (wrong == 2).astype(np.float32)
    r = quality(bin_dir, cfg, truth, p, "--angio", "lowres_angio", "--angio", "shifted")
    assert r.returncode == 0, r.stderr
    a = json.loads(r.stdout.splitlines()[-1])["angio"]
    assert a[0]["lowres"] and a[0]["rows"] == 4 and a[0]["auc"] == 1.0
    assert a[0]["vessel_voxels"] == (rows == 2).sum()
    assert a[1]["auc"] < 0.9


def test_doppler_follows_the_pose(bin_dir, tmp_path):
    """A motion turns the vessels with the tissue: after a jump that tilts the phantom 10°
    about y (raising the +x side: vessel 1, 8° deeper along +x, now rises 2°), the truth's
    velocities are the turned vessels' and Kasai's phase of the new spectra still follows
    them (least-squares slope within 10 %)."""
    if not (bin_dir / "volrec").exists():
        pytest.skip("volrec not built")
    extra = (f"  ascan_period_us: {TA}\n  bscan_period_us: {TB}\n"
             f"  center_wavelength_nm: {LAMBDA}\n")
    cfg = config(tmp_path, "tilt", flow="peak_mm_per_s: 1.0", geometry_extra=extra)
    cfg.write_text(cfg.read_text().replace(
        "flow: {", "motion: {deg_per_s: 0, jump: {epoch: 1, tilt_deg: [0, 10]}}, flow: {"))
    out, truth = tmp_path / "tilt.raw", tmp_path / "tilt-truth.h5"
    subprocess.run([str(bin_dir / "volrec"), "sim", "-c", str(cfg), "-o", str(out), "--format",
                    "raw", "-n", "2", "--truth", str(truth)], check=True, capture_output=True,
                   timeout=600)
    raw = np.fromfile(out, dtype="<f4").reshape(2, NY * M, NX, K)[1]
    with h5py.File(truth, "r") as f:
        lab, vz = f["vessel"][1], f["velocity"][1].astype(np.float64)
        vz0 = f["velocity"][0]
    # vessel 1 alone (y = -0.7 mm: row 4 of 16; x < 0: columns 0-31) receded before and
    # rises now (at most peak sin(8°) and peak sin(2°), on the axis)
    a, b = vz0[4, :32], vz[4, :32]
    assert (a != 0).sum() > 100 and (b != 0).sum() > 100
    assert a.max() > 0.05 and a.min() >= 0 and b.max() <= 0 and -0.035 < b.min() < -0.005
    X = flowkit.complex_spectra(raw, REF_CFG)
    d = flowkit.structure_db(X, M)
    keep = d >= d.max() - 45
    true = flowkit.phase(vz, LAMBDA, N_TISSUE, TB)
    dphi = flowkit.kasai(X, M, 2, bulk=True, depth_range=(K // 8, 3 * K // 8), keep=keep)
    inner = ndimage.binary_erosion(lab == 2, np.ones((1, 1, 9)))
    sel = inner & keep & (np.abs(true) < 2.5) & (np.abs(true) > 0.3)
    assert sel.sum() > 500
    slope = (dphi[sel] * true[sel]).sum() / (true[sel] ** 2).sum()
    assert abs(slope - 1) < 0.10, slope


@pytest.mark.parametrize("bulk_um", [0.0, 0.05])
def test_process_and_score_the_phantom(bin_dir, tmp_path, bulk_um):
    """End to end: the flow phantom recorded by `volrec sim`, processed by `volrec process`
    with output.channels [structure, angio, doppler] on the CPU backend, scored by `volrec
    quality --functional`: cdv's ROC area of vessel against tissue ≥ 0.95 (low resolution and
    reconstructed), and the low-resolution Doppler's velocities unbiased inside the vessels
    (mean signed error within 10 % of the mean true speed; measured 3 %), bulk motion or not."""
    import json
    if not (bin_dir / "volrec").exists():
        pytest.skip("volrec not built")
    pp = REF_CFG["preprocess"]
    body = (f"geometry:\n  samples_per_ascan: {K}\n  ascans_per_bscan: {NX}\n"
            f"  bscans_per_volume: {NY}\n  repeats: {M}\n  stride: [1, 1]\n"
            f"  depth_range: [{K // 8}, {3 * K // 8}]\n  ascan_period_us: {TA}\n"
            f"  bscan_period_us: {TB}\n  center_wavelength_nm: {LAMBDA}\n"
            f"preprocess:\n  background: {{mode: ascan_mean}}\n"
            f"  resample: {{method: cubic, poly: {pp['resample']['poly']}}}\n"
            f"  dispersion: {{coeffs: {pp['dispersion']['coeffs']}}}\n"
            f"output:\n  channels: [structure, angio, doppler]\n")
    synth = (f"  synth: {{seed: 3, phantom: flow, snr_db: 40, flow: {{peak_mm_per_s: 1.0, "
             f"bulk_um_per_repeat: {bulk_um}}}}}\n")
    sim_cfg, rp, truth = tmp_path / "s.yaml", tmp_path / "s.rp", tmp_path / "t.h5"
    sim_cfg.write_text("source:\n  type: synth\n  rate: 0\n" + synth + body)
    subprocess.run([str(bin_dir / "volrec"), "sim", "-c", str(sim_cfg), "-o", str(rp), "-n",
                    "1", "--truth", str(truth)], check=True, capture_output=True, timeout=600)
    cfg, out = tmp_path / "p.yaml", tmp_path / "p.h5"
    cfg.write_text(f"backend: cpu\nsource:\n  type: replay\n  rate: 0\n  replay: {{path: {rp}}}\n"
                   + body)
    r = subprocess.run([str(bin_dir / "volrec"), "process", "-c", str(cfg), "-o", str(out),
                        "--lowres"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    r = quality(bin_dir, cfg, truth, out, "--angio", "angio", "--angio", "lowres_angio",
                "--doppler", "lowres_doppler")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout.splitlines()[-1])
    assert [a["dataset"] for a in j["angio"]] == ["angio", "lowres_angio"]
    assert all(a["auc"] >= 0.95 and a["contrast"] > 3 for a in j["angio"]), j["angio"]
    d = j["doppler"]
    assert d["voxels"] > 2000
    assert abs(d["bias_mm_s"]) < 0.10 * d["mean_true_mm_s"], d
    assert d["relative_error"] < 0.4, d
