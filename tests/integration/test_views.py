# SPDX-License-Identifier: MIT
"""The CPU views (cpu/views.c through tests/views/views_dump) against the independent numpy
implementation of docs/algorithms.md §4 in tests/reference/views_ref.py: exact for the projections,
slices and the reduced volume (§4.5, maxima and means), within 1 LSB for the render, on random
volumes of odd sizes, several angles and anisotropic spacing; and the parameter checks'
messages."""
import random
import subprocess
import sys

import numpy as np
import pytest

from conftest import SRC

sys.path.insert(0, str(SRC / "tests" / "reference"))
import views_ref  # noqa: E402

NAMES = ["enface_mean", "enface_max", "bscan", "slice", "plane", "render"]


def run_views(build_dir, tmp_path, V, slab, pos, size, spacing, angles, step, volume=None):
    """views_dump on V; volume=(max_side, "max" | "mean") asks for the reduced volume too."""
    Y, X, Z = V.shape
    vol = tmp_path / "v.u8"
    V.tofile(vol)
    args = [str(build_dir / "tests" / "views_dump"), str(vol), str(Y), str(X), str(Z),
            str(slab[0]), str(slab[1]), *map(str, pos), str(size[0]), str(size[1]),
            *map(repr, spacing), repr(angles[0]), repr(angles[1]), repr(step), str(tmp_path)]
    if volume is not None:
        args += [str(volume[0]), volume[1]]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        return r, None
    shapes = {"enface_mean": (Y, X), "enface_max": (Y, X), "bscan": (X, Z), "slice": (Y, Z),
              "plane": (Y, X), "render": tuple(size)}
    got = {n: np.fromfile(tmp_path / f"{n}.u8", dtype=np.uint8).reshape(shapes[n])
           for n in NAMES}
    if volume is not None and volume[0]:
        rs = tuple(-(-n // -(-n // volume[0])) for n in (Y, X, Z))
        got["volume"] = np.fromfile(tmp_path / "volume.u8", dtype=np.uint8).reshape(rs)
    return r, got


def smooth_volume(rng, Y, X, Z):
    """Random but spatially correlated, so the render's interpolation matters."""
    v = rng.random((Y + 2, X + 2, Z + 2))
    v = sum(np.roll(np.roll(np.roll(v, a, 0), b, 1), c, 2)
            for a in (0, 1) for b in (0, 1) for c in (0, 1))[1:-1, 1:-1, 1:-1]
    v = (v - v.min()) / (v.max() - v.min())
    return np.floor(255 * v ** 3 + 0.5).astype(np.uint8)


CASES = [
    # shape, slab, position, render size, spacing, angles, step
    ((17, 23, 31), (0, 31), (8, 11, 15), (40, 50), (1.0, 1.0, 1.0), (0.0, 0.0), 0.5),
    ((9, 13, 64), (5, 40), (0, 12, 63), (33, 31), (1.0, 1.0, 1.0), (30.0, 15.0), 0.5),
    ((12, 7, 40), (39, 40), (11, 0, 0), (48, 48), (2.0, 3.0, 0.5), (-60.0, 40.0), 0.25),
    ((5, 5, 5), (0, 5), (2, 2, 2), (16, 24), (1.0, 1.0, 1.0), (90.0, 90.0), 0.5),
    ((10, 11, 12), (2, 9), (3, 4, 5), (21, 19), (1.5, 0.7, 1.1), (137.0, -75.0), 0.3),
    ((1, 9, 20), (0, 20), (0, 4, 10), (16, 16), (1.0, 1.0, 1.0), (20.0, 10.0), 0.5),
    # a slab of the first depth only, the last index of every axis, exact quarter turns
    ((6, 8, 10), (0, 1), (5, 7, 9), (9, 40), (0.5, 2.0, 1.0), (-90.0, 0.0), 0.5),
    ((7, 9, 11), (10, 11), (6, 0, 10), (24, 12), (1.0, 1.0, 1.0), (0.0, -90.0), 0.5),
    ((4, 1, 6), (5, 6), (3, 0, 5), (7, 3), (1.0, 1.0, 1.0), (180.0, 90.0), 0.25),
]


def check_views(build_dir, tmp_path, V, slab, pos, size, spacing, angles, step):
    r, got = run_views(build_dir, tmp_path, V, slab, pos, size, spacing, angles, step)
    assert r.returncode == 0, r.stderr
    mean, mx = views_ref.enface(V, *slab)
    bscan, slc, plane = views_ref.slices(V, *pos)
    for name, want in (("enface_mean", mean), ("enface_max", mx), ("bscan", bscan),
                       ("slice", slc), ("plane", plane)):
        np.testing.assert_array_equal(got[name], want, err_msg=name)
    ref = views_ref.render(V, *size, spacing, angles, step)
    diff = np.abs(got["render"].astype(int) - ref.astype(int))
    assert diff.max() <= 1, f"render differs by up to {diff.max()} at {np.argwhere(diff > 1)[:5]}"
    assert (diff > 0).mean() < 0.01, "the render should almost everywhere be exact"
    return ref


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[5]}" for c in CASES])
def test_cpu_views_equal_the_reference(build_dir, tmp_path, case):
    shape, slab, pos, size, spacing, angles, step = case
    rng = np.random.default_rng(sum(shape) * 7 + int(angles[0]))
    for V in (rng.integers(0, 256, shape, dtype=np.uint8), smooth_volume(rng, *shape)):
        ref = check_views(build_dir, tmp_path, V, slab, pos, size, spacing, angles, step)
        if min(shape) > 1:  # a volume one voxel thin is (correctly) almost invisible
            assert (ref > 0).sum() > 0.05 * ref.size, "the render sees the volume"


@pytest.mark.parametrize("seed", range(12))
def test_cpu_views_equal_the_reference_on_random_parameters(build_dir, tmp_path, seed):
    """Sizes from one voxel up, any slab and position, render sizes from one pixel, spacing,
    angles (quarter turns among them) and steps drawn at random."""
    r = random.Random(seed)
    Y, X, Z = r.randint(1, 24), r.randint(1, 24), r.randint(1, 48)
    za = r.randrange(Z)
    slab = (za, r.randrange(za + 1, Z + 1))
    pos = (r.randrange(Y), r.randrange(X), r.randrange(Z))
    size = (r.randint(1, 48), r.randint(1, 48))
    spacing = tuple(r.choice([1.0, r.uniform(0.3, 3.0)]) for _ in range(3))
    angles = (r.choice([0.0, 90.0, -90.0, 180.0, r.uniform(-180, 180)]),
              r.choice([0.0, 90.0, -90.0, r.uniform(-90, 90)]))
    step = r.choice([0.5 * min(spacing), r.uniform(0.1, 1.0)])
    rng = np.random.default_rng(seed)
    for V in (rng.integers(0, 256, (Y, X, Z), dtype=np.uint8), smooth_volume(rng, Y, X, Z)):
        check_views(build_dir, tmp_path, V, slab, pos, size, spacing, angles, step)


def test_enface_render_at_zero_angles_is_an_enface_mip(build_dir, tmp_path):
    """At [0, 0] with unit spacing the render looks along depth: where a pixel's ray runs down a
    voxel column exactly, it is that column's maximum."""
    rng = np.random.default_rng(3)
    V = rng.integers(0, 256, (8, 8, 8), dtype=np.uint8)
    # D = sqrt(192), image spans D: choose W = H so that a pixel is one voxel wide exactly
    # is impossible in general; check the centre pixel, which lies between the four centre columns
    r, got = run_views(build_dir, tmp_path, V, (0, 8), (4, 4, 4), (64, 64), (1.0, 1.0, 1.0),
                       (0.0, 0.0), 0.5)
    assert r.returncode == 0, r.stderr
    assert got["render"].max() <= V.max()
    assert got["render"][0, 0] == 0  # the corners of the image see nothing


@pytest.mark.parametrize("slab,pos,size,spacing,step,message", [
    ((4, 4), (0, 0, 0), (8, 8), (1, 1, 1), 0.5, "view.slab: [4, 4] is not a depth range"),
    ((0, 9), (0, 0, 0), (8, 8), (1, 1, 1), 0.5, "view.slab: [0, 9]"),
    ((0, 8), (8, 0, 0), (8, 8), (1, 1, 1), 0.5, "view.position: [8, 0, 0] is outside the volume"),
    ((0, 8), (0, 0, 8), (8, 8), (1, 1, 1), 0.5, "view.position"),
    ((0, 8), (0, 0, 0), (0, 8), (1, 1, 1), 0.5, "view.render.size: [0, 8]"),
    ((0, 8), (0, 0, 0), (8, 8), (1, 0, 1), 0.5, "view.render.spacing"),
    ((0, 8), (0, 0, 0), (8, 8), (1, 1, 1), 0.0, "view.render.step: 0"),
    ((0, 8), (0, 0, 0), (8, 8), (1, 1, 1), 1e-9, "view.render.step"),
])
def test_view_parameters_outside_the_volume_are_errors(build_dir, tmp_path, slab, pos, size,
                                                      spacing, step, message):
    V = np.zeros((8, 8, 8), dtype=np.uint8)
    r, got = run_views(build_dir, tmp_path, V, slab, pos, size, spacing, (0.0, 0.0), step)
    assert r.returncode == 2 and got is None
    assert message in r.stderr, r.stderr


VOLUME_CASES = [
    # shape, max_side: factors 1 (max_side above every side), exact multiples, odd factors with
    # partial blocks at the far edges, one voxel thin, and one block for the whole volume
    ((9, 13, 31), 64),
    ((16, 24, 64), 8),
    ((17, 23, 31), 5),
    ((10, 11, 257), 128),
    ((1, 9, 20), 3),
    ((7, 5, 6), 1),
    ((37, 13, 256), 11),
]


@pytest.mark.parametrize("reduce", ["max", "mean"])
@pytest.mark.parametrize("case", VOLUME_CASES, ids=[f"{c[0]}-{c[1]}" for c in VOLUME_CASES])
def test_reduced_volume_equals_the_reference(build_dir, tmp_path, case, reduce):
    """§4.5 exactly, maxima and means rounded half up, on random and smooth volumes."""
    shape, max_side = case
    rng = np.random.default_rng(sum(shape) + max_side)
    for V in (rng.integers(0, 256, shape, dtype=np.uint8), smooth_volume(rng, *shape)):
        r, got = run_views(build_dir, tmp_path, V, (0, shape[2]), (0, 0, 0), (4, 4),
                           (1.0, 1.0, 1.0), (0.0, 0.0), 0.5, volume=(max_side, reduce))
        assert r.returncode == 0, r.stderr
        want, f = views_ref.volume(V, max_side, reduce)
        assert got["volume"].shape == want.shape and max(want.shape) <= max_side
        diff = np.argwhere(got["volume"] != want)
        assert diff.size == 0, (f"{reduce} in blocks {f}: first differences at {diff[:5]}: got "
                                f"{[got['volume'][tuple(d)] for d in diff[:5]]}, want "
                                f"{[want[tuple(d)] for d in diff[:5]]}")


def test_reduced_mean_rounds_half_up(build_dir, tmp_path):
    """A block of 1 and 2 (mean 1.5) gives 2, of 0 and 1 (0.5) gives 1; the far block of an odd
    side holds one voxel (its own value)."""
    V = np.array([[[1, 2, 0, 1, 7]]], dtype=np.uint8)
    r, got = run_views(build_dir, tmp_path, V, (0, 5), (0, 0, 0), (4, 4), (1.0, 1.0, 1.0),
                       (0.0, 0.0), 0.5, volume=(3, "mean"))
    assert r.returncode == 0, r.stderr
    assert got["volume"].tolist() == [[[2, 1, 7]]]


def test_reduced_volume_off_writes_nothing(build_dir, tmp_path):
    """view.volume.max_side: 0 computes no volume (an empty picture)."""
    V = np.full((4, 4, 4), 9, dtype=np.uint8)
    r, got = run_views(build_dir, tmp_path, V, (0, 4), (0, 0, 0), (4, 4), (1.0, 1.0, 1.0),
                       (0.0, 0.0), 0.5, volume=(0, "max"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "volume.u8").stat().st_size == 0
