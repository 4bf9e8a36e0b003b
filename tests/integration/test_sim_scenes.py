# SPDX-License-Identifier: MIT
"""`volrec sim`'s solid phantoms and motions (docs/algorithms.md "The motion bench",
docs/configuration.md source.synth): the truth that `volrec sim --truth` writes moves as the
motion says (a still phantom stays, a jump moves by exactly its offset at its epoch, a tilt's and
a roll's angles come back out of the truth volumes, the axial bounce, the periodic motion and the
warp displace by their amplitudes), and bad parameters are refused with a message that names
them."""
import subprocess

import numpy as np
import pytest

pytestmark = pytest.mark.numerics  # not in the TSan stage (docs/testing.md)

h5py = pytest.importorskip("h5py")
ndimage = pytest.importorskip("scipy.ndimage")

K, NX, NY, ST = 256, 8, 8, 5  # 40 x 40 x 128 truth volumes, 75 um lateral pitch
PITCH_MM = 3.0 / (NX * ST)  # lateral field of view 3 mm (SIM_FOV_MM)
DZ_MM = 2.0 / (K // 2)  # the truth's depth bin (zero_pad 1)


def sim(bin_dir, tmp_path, phantom, motion, epochs, seed=1, name="s", ok=True):
    """The truth volumes [epoch][y][x][z] of `volrec sim --truth`, or the failed run."""
    if not (bin_dir / "volrec").exists():
        pytest.skip("volrec not built")
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(f"source:\n  type: synth\n  rate: 25\n  synth: {{seed: {seed}, phantom: "
                   f"{phantom}, motion: {{{motion}}}, snr_db: 40, beam_um: 150}}\n"
                   f"geometry:\n  samples_per_ascan: {K}\n  ascans_per_bscan: {NX}\n"
                   f"  bscans_per_volume: {NY}\n  stride: [{ST}, {ST}]\n"
                   f"  depth_range: [0, {K // 2}]\n")
    truth = tmp_path / f"{name}-truth.h5"
    r = subprocess.run([str(bin_dir / "volrec"), "sim", "-c", str(cfg), "-o",
                        str(tmp_path / f"{name}.rp"), "-n", str(epochs), "--truth", str(truth)],
                       capture_output=True, text=True, timeout=600)
    if not ok:
        return r
    assert r.returncode == 0, r.stderr
    with h5py.File(truth, "r") as f:
        return f["truth"][:].astype(np.float64)


def surface(v, thr=0.12):
    """Depth (bins) of the tissue's top per column of one truth volume [y][x][z]: the first bin
    where the amplitude, smoothed over 5 bins along z, exceeds thr; NaN where it never does."""
    s = ndimage.uniform_filter1d(v, 5, axis=2)
    above = s > thr
    top = np.argmax(above, axis=2).astype(np.float64)
    top[~above.any(axis=2)] = np.nan
    return top


def lowered(before, after):
    """How far (bins) the tissue's top went down between two truth volumes, the mean over the
    columns where both surfaces were found."""
    return float(np.nanmean(surface(after) - surface(before)))


def tilt_about_y(before, after):
    """Degrees the tissue turned about the y axis (+x side up, docs/configuration.md) between
    two truth volumes: the slope along x of the change in surface depth, fitted over the
    columns where both surfaces were found."""
    d = (surface(after) - surface(before)) * DZ_MM
    x = (np.arange(NX * ST) + 0.5) * PITCH_MM - 1.5
    xx = np.broadcast_to(x, d.shape)
    ok = np.isfinite(d)
    slope = np.polyfit(xx[ok], d[ok], 1)[0]
    return float(np.degrees(np.arctan(-slope)))


@pytest.mark.parametrize("phantom", ["curved", "anterior", "skin"])
def test_static_stays(bin_dir, tmp_path, phantom):
    t = sim(bin_dir, tmp_path, phantom, "deg_per_s: 0", 3)
    assert t.max() > 0.5  # the phantom is there
    head = (tmp_path / "s.rp").read_bytes()[:65536]  # the replay says how it was made
    assert f"phantom: {phantom}\n".encode() in head
    assert b"motion_solid: {tilt_deg_per_s: [0, 0], tilt_max_deg: 5," in head
    changed = np.abs(t[2] - t[0]) > 1e-6
    if phantom == "anterior":  # nothing flows in it
        assert not changed.any()
    else:  # only blood's speckle changes from epoch to epoch
        assert 0 < changed.mean() < 0.05
    other = sim(bin_dir, tmp_path, phantom, "deg_per_s: 0", 1, seed=2, name="seed2")
    assert np.abs(other[0] - t[0]).mean() > 0.01  # another seed, another phantom


def test_jump_moves_by_its_offset_at_its_epoch(bin_dir, tmp_path):
    # 2 pixels along x, 1 along y and 2 depth bins: the truth of the jump's epoch is that of the
    # epoch before moved by exactly that (but for the depth range's edges and blood)
    t = sim(bin_dir, tmp_path, "anterior",
            f"deg_per_s: 0, jump: {{epoch: 2, shift_mm: [{2 * PITCH_MM}, {PITCH_MM}, "
            f"{2 * DZ_MM}]}}", 3)
    assert np.array_equal(t[0], t[1])
    a = t[1][4:-4, 4:-4, 40:90]
    b = t[2][5:-3, 6:-2, 42:92]
    assert np.abs(a - b).max() < 2e-3, np.abs(a - b).max()
    assert np.abs(t[1][4:-4, 4:-4, 40:90] - t[2][4:-4, 4:-4, 40:90]).max() > 0.1
    assert np.array_equal(t[2], sim(bin_dir, tmp_path, "anterior",
                                    f"deg_per_s: 0, jump: {{epoch: 2, shift_mm: [{2 * PITCH_MM}, "
                                    f"{PITCH_MM}, {2 * DZ_MM}]}}", 3, name="again")[2])


def test_drift_moves_by_its_speed(bin_dir, tmp_path):
    # 1 pixel an epoch along x, half a pixel along y: epoch 2 is epoch 0 moved by (2, 1) pixels
    t = sim(bin_dir, tmp_path, "anterior",
            f"deg_per_s: 0, shift_mm_per_s: [{25 * PITCH_MM}, {12.5 * PITCH_MM}, 0]", 3)
    a, b = t[0][4:-4, 4:-4, 40:90], t[2][5:-3, 6:-2, 40:90]
    assert np.abs(a - b).max() < 2e-3, np.abs(a - b).max()
    assert np.abs(a - t[2][4:-4, 4:-4, 40:90]).max() > 0.1


def test_tilt_angle_comes_back_out_of_the_truth(bin_dir, tmp_path):
    # 7.5 deg/s at 25 epochs/s: 3 deg at epoch 10, within tilt_max_deg 5; then back: the turn
    # at 5 deg (epoch 16.7), 6 deg of travel at epoch 20 is 5 - 1 = 4 deg
    t = sim(bin_dir, tmp_path, "curved", "deg_per_s: 0, tilt_deg_per_s: [0, 7.5], tilt_max_deg: 5",
            21)
    for e, want in ((10, 3.0), (20, 4.0)):
        got = tilt_about_y(t[0], t[e])
        assert abs(got - want) < 0.05 * want + 0.1, (e, got, want)  # measured 3.03, 4.02
    assert abs(tilt_about_y(t[0], t[1]) - 0.3) < 0.15  # one epoch: 0.3 deg
    # about x: nothing turns about y
    tx = sim(bin_dir, tmp_path, "curved", "deg_per_s: 0, tilt_deg_per_s: [7.5, 0]", 11, name="x")
    assert abs(tilt_about_y(tx[0], tx[10])) < 0.3


def test_roll_angle_comes_back_out_of_the_truth(bin_dir, tmp_path):
    # 3 deg/epoch about depth: the en-face image of epoch 2 is epoch 0's turned by 6 deg
    t = sim(bin_dir, tmp_path, "curved", "deg_per_s: 75", 3)
    a, b = t[0].mean(axis=2), t[2].mean(axis=2)
    m = slice(8, -8)

    def err(deg):
        r = ndimage.rotate(a, deg, reshape=False, order=1)
        return float(((r[m, m] - b[m, m]) ** 2).mean())

    angles = np.arange(-12, 12.01, 0.5)
    best = angles[np.argmin([err(d) for d in angles])]
    assert abs(abs(best) - 6) <= 0.5, best


def test_axial_bounce_periodic_and_warp_displace_by_their_amplitudes(bin_dir, tmp_path):
    # the axial bounce: 0.5 mm/s reaches +0.1 mm (6.4 bins) at epoch 5, is back at 0 at 10
    t = sim(bin_dir, tmp_path, "anterior", "deg_per_s: 0, shift_mm_per_s: [0, 0, 0.5]", 11)
    assert abs(lowered(t[0], t[5]) - 0.1 / DZ_MM) < 0.3
    assert abs(lowered(t[0], t[10])) < 0.2
    # periodic: 0.3125 Hz is 80 epochs a period, a quarter of it (20) is the peak, 40 is back
    p = sim(bin_dir, tmp_path, "anterior",
            "deg_per_s: 0, periodic: {hz: 0.3125, shift_mm: [0, 0, 0.05]}", 41, name="p")
    assert abs(lowered(p[0], p[20]) - 0.05 / DZ_MM) < 0.3
    assert abs(lowered(p[0], p[40])) < 0.2
    # warp: a fixed bump of 0.06 mm (radius 0.3 mm) at (0.4, -0.3) mm pushes the tissue under
    # its centre down (deeper) by about its amplitude and leaves the far corner as it was
    w = sim(bin_dir, tmp_path, "skin",
            "deg_per_s: 0, warp: {mm: 0.06, radius_mm: 0.3, hz: 0, centre_mm: [0.4, -0.3]}",
            1, name="w")[0]
    s = sim(bin_dir, tmp_path, "skin", "deg_per_s: 0", 1, name="s0")[0]
    cx, cy = int((0.4 + 1.5) / PITCH_MM), int((-0.3 + 1.5) / PITCH_MM)
    near = np.nanmean(surface(w)[cy - 1:cy + 2, cx - 1:cx + 2] -
                      surface(s)[cy - 1:cy + 2, cx - 1:cx + 2])
    assert abs(near * DZ_MM - 0.06) < 0.02, near * DZ_MM
    # far from it the displacement is ~1e-14 mm: the surface stays, and the speckle but where
    # a depth sits on a scatterer cell's boundary (z = 48, 0.75 mm, and what its PSF reaches)
    assert abs(lowered(s[:6, :6], w[:6, :6])) < 0.05
    c = (slice(cy - 3, cy + 4), slice(cx - 3, cx + 4))
    far, centre = np.abs(w[:6, :6] - s[:6, :6]).mean(), np.abs(w[c] - s[c]).mean()
    assert far < 0.2 * centre, (far, centre)


@pytest.mark.parametrize("phantom, motion, message", [
    ("retina", "tilt_deg_per_s: [1, 0]",
     "motion tilt_deg_per_s moves only the solid phantoms (curved, anterior, skin, flow), not "
     "'retina'"),
    ("tilted", "periodic: {hz: 1, shift_mm: [0, 0, 0.01]}", "motion periodic moves only"),
    ("mirror", "warp: {mm: 0.01}", "motion warp moves only"),
    ("retina", "jump: {epoch: 3, tilt_deg: [1, 0]}", "motion jump.tilt_deg moves only"),
    ("curved", "periodic: {shift_mm: [0, 0, 0.01]}",
     "motion periodic has an amplitude but hz 0 (needs > 0)"),
    ("curved", "periodic: {hz: 0.5}", "motion periodic.hz 0.5 without an amplitude"),
    ("curved", "periodic: {hz: 13, deg: [1, 0, 0]}",
     "motion periodic.hz 13 above half the motion clock (25 epochs/s)"),
    ("skin", "warp: {mm: 0.3, radius_mm: 0.5}",
     "motion warp.mm 0.3 more than half warp.radius_mm 0.5"),
    ("skin", "warp: {mm: 0.1, hz: 20}", "motion warp.hz 20 out of range"),
    ("curved", "tilt_max_deg: 45", "tilt_max_deg"),
    ("curved", "tilt_deg_per_s: [1]", "tilt_deg_per_s"),
    ("anterior", "warp: {radius_mm: 0}", "warp.radius_mm"),
    ("eye", "deg_per_s: 0", "source.synth.phantom: 'eye' is not allowed (one of: retina, mirror, "
     "tilted, blocked, curved, anterior, skin, bowl, flow)"),
])
def test_bad_parameters_are_refused(bin_dir, tmp_path, phantom, motion, message):
    r = sim(bin_dir, tmp_path, phantom, motion, 1, ok=False)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert message in r.stderr, r.stderr
