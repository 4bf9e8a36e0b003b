# SPDX-License-Identifier: MIT
"""`volrec export`: processed HDF5 recordings into OME-Zarr, NIfTI-2 and OME-TIFF, each opened by
the reader its users use (python3-zarr, python3-nibabel, python3-tifffile), values compared bit
for bit with /volumes and voxel sizes with voxel_size_um (docs/formats.md)."""
import json
import math
import os
import subprocess

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")
nibabel = pytest.importorskip("nibabel")
tifffile = pytest.importorskip("tifffile")

VOXEL = [7.5, 6.0, 3.25]  # y, x, z in micrometres


def volrec(bin_dir, *args, timeout=120):
    return subprocess.run([str(bin_dir / "volrec"), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


def recording(path, shape=(3, 20, 30, 600), voxel=VOXEL, seed=1):
    """A processed recording of the documented layout: /volumes [t, y, x, z] u8 with axes and
    voxel_size_um, per-volume columns and file attributes as `volrec record` writes them."""
    rng = np.random.default_rng(seed)
    vols = rng.integers(0, 256, size=shape, dtype=np.uint8)
    vols[:, :, :, : shape[3] // 3] //= 4  # some structure for the compressor
    with h5py.File(path, "w") as f:
        d = f.create_dataset("volumes", data=vols, chunks=(1, *shape[1:]))
        d.attrs["axes"] = "t,y,x,z"
        if voxel is not None:
            d.attrs["voxel_size_um"] = np.array(voxel, dtype=np.float32)
        f["epoch"] = np.arange(shape[0], dtype=np.uint64)
        f["offset"] = np.zeros((shape[0], 2), dtype=np.int32)
        f["t_first_ns"] = np.arange(shape[0], dtype=np.uint64) * 40_000_000 + 10**12
        f["generation"] = np.array([0] + [1] * (shape[0] - 1), dtype=np.uint32)[: shape[0]]
        f["generations"] = np.array([json.dumps({"gain": 1}), json.dumps({"gain": 2})],
                                    dtype=h5py.string_dtype())
        f.attrs["volrec_version"] = "0.1.0"
        f.attrs["config"] = "geometry:\n  stride: [2, 2]\n"
        f.attrs["volume_shape"] = np.array(shape[1:], dtype=np.uint32)
    return vols


def export(bin_dir, src, out, *extra):
    r = volrec(bin_dir, "export", src, "-o", out, *extra)
    assert r.returncode == 0, r.stderr
    return r


def ngff_check(attrs, nlevels_expected, voxel):
    """The NGFF 0.4 rules this writer keeps: axes time then space with types and units, one
    scale per axis per level, datasets '0', '1', ... from the highest resolution."""
    ms = attrs["multiscales"]
    assert len(ms) == 1 and ms[0]["version"] == "0.4"
    axes = ms[0]["axes"]
    assert [a["name"] for a in axes] == ["t", "y", "x", "z"]
    assert [a["type"] for a in axes] == ["time", "space", "space", "space"]
    for a in axes[1:]:
        if voxel is None:
            assert "unit" not in a
        else:
            assert a["unit"] == "micrometer"
    assert axes[0]["unit"] == "second"
    sets = ms[0]["datasets"]
    assert [d["path"] for d in sets] == [str(i) for i in range(nlevels_expected)]
    for level, d in enumerate(sets):
        ts = d["coordinateTransformations"]
        assert ts[0]["type"] == "scale" and len(ts[0]["scale"]) == len(axes)
        assert [t["type"] for t in ts].count("scale") == 1
        assert all(len(t.get("translation", ts[0]["scale"])) == len(axes) for t in ts)
        want = [1.0] * 3 if voxel is None else voxel
        assert ts[0]["scale"][1:] == pytest.approx([v * 2 ** level for v in want])
        assert ts[0]["scale"][0] == pytest.approx(0.04)


def test_ome_zarr_values_voxel_sizes_and_ngff_metadata(bin_dir, tmp_path):
    src = tmp_path / "rec.h5"
    vols = recording(src)
    out = tmp_path / "rec.ome.zarr"
    export(bin_dir, src, out)
    g = zarr.open_group(str(out), mode="r")
    ngff_check(g.attrs.asdict(), 3, VOXEL)  # 600 -> 300 -> 150: three levels
    assert g["0"].shape == vols.shape and g["0"].dtype == np.uint8
    assert np.array_equal(g["0"][:], vols)
    comp = g["0"].compressor.get_config()
    # zstd 5 in 32 KiB blocks; the pyramid's means at zstd 1 (docs/formats.md)
    assert comp == {"id": "blosc", "cname": "zstd", "clevel": 5, "shuffle": 1,
                    "blocksize": 32768}
    assert g["1"].compressor.get_config() == dict(comp, clevel=1)
    # the default chunk: as many along each axis as 16x512x128 makes, of even sizes
    assert g["0"].chunks == (1, 10, 30, 120) and g["1"].chunks == (1, 10, 15, 100), (
        g["0"].chunks, g["1"].chunks)
    assert g["1"].shape == (3, 10, 15, 300) and g["2"].shape == (3, 5, 8, 150)
    # level 1: the 2x2x2 mean of level 0, rounded half up
    v = vols.astype(np.uint32)
    want = (v[:, 0::2, 0::2, 0::2] + v[:, 1::2, 0::2, 0::2] + v[:, 0::2, 1::2, 0::2]
            + v[:, 1::2, 1::2, 0::2] + v[:, 0::2, 0::2, 1::2] + v[:, 1::2, 0::2, 1::2]
            + v[:, 0::2, 1::2, 1::2] + v[:, 1::2, 1::2, 1::2] + 4) // 8
    assert np.array_equal(g["1"][:], want.astype(np.uint8))
    prov = g.attrs["volrec"]
    assert prov["voxel_size_um"] == pytest.approx(VOXEL)
    assert prov["volumes"]["epoch"] == [0, 1, 2]
    assert prov["volumes"]["generation"] == [0, 1, 1]
    assert prov["attributes"]["generations"] == [{"gain": 1}, {"gain": 2}]
    assert not (tmp_path / "rec.ome.zarr.partial").exists()


@pytest.mark.parametrize("codec,compressor", [
    ("zstd", {"id": "blosc", "cname": "zstd", "clevel": 5, "shuffle": 1, "blocksize": 32768}),
    ("lz4", {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 32768}),
    ("none", None),
])
def test_ome_zarr_codecs_store_the_same_values(bin_dir, tmp_path, codec, compressor):
    """--codec: each codec's store, opened with python3-zarr (numcodecs' blosc, or the raw
    chunks of compressor null), holds every level's values of the default (zstd) store and
    /volumes at level 0; its .zarray names the codec."""
    src = tmp_path / "rec.h5"
    vols = recording(src)
    export(bin_dir, src, tmp_path / "default.ome.zarr")
    out = tmp_path / f"{codec}.ome.zarr"
    export(bin_dir, src, out, "--codec", codec)
    ref = zarr.open_group(str(tmp_path / "default.ome.zarr"), mode="r")
    g = zarr.open_group(str(out), mode="r")
    assert np.array_equal(g["0"][:], vols)
    for level in ("0", "1", "2"):
        assert np.array_equal(g[level][:], ref[level][:]), level
        assert g[level].chunks == ref[level].chunks
    if compressor is None:
        assert g["0"].compressor is None and g["1"].compressor is None
        # a raw chunk is the chunk's bytes: [1, 10, 30, 120]
        assert (out / "0/0/0/0/0").stat().st_size == 10 * 30 * 120
        assert json.loads((out / "1/.zarray").read_text())["compressor"] is None
    else:
        assert g["0"].compressor.get_config() == compressor
        assert g["1"].compressor.get_config() == dict(compressor, clevel=1)
    ms, ref_ms = g.attrs["multiscales"][0], ref.attrs["multiscales"][0]
    assert ms["datasets"] == ref_ms["datasets"] and ms["axes"] == ref_ms["axes"]


@pytest.mark.parametrize("layout", ["contiguous", "userblock", "gzip", "small-chunks",
                                    "unwritten-volume"])
def test_every_hdf5_layout_exports_bit_for_bit(bin_dir, tmp_path, layout):
    """Whatever the HDF5 layout of /volumes (chunked by volumes as volrec writes it,
    contiguous, after a user block, filtered, smaller chunks, a volume never written: its fill
    value), the exported values are the file's."""
    shape = (3, 10, 12, 64)
    rng = np.random.default_rng(5)
    vols = rng.integers(0, 256, size=shape, dtype=np.uint8)
    src = tmp_path / "rec.h5"
    kw = {"contiguous": {}, "userblock": {"chunks": (1, *shape[1:])},
          "gzip": {"chunks": (1, *shape[1:]), "compression": "gzip"},
          "small-chunks": {"chunks": (1, 5, 6, 32)},
          "unwritten-volume": {"chunks": (1, *shape[1:]), "fillvalue": 7}}[layout]
    with h5py.File(src, "w", userblock_size=1024 if layout == "userblock" else 0) as f:
        d = f.create_dataset("volumes", shape=shape, dtype=np.uint8, **kw)
        for t in range(shape[0]):
            if layout == "unwritten-volume" and t == 1:
                vols[t] = 7
                continue
            d[t] = vols[t]
        d.attrs["axes"] = "t,y,x,z"
        f["epoch"] = np.arange(shape[0], dtype=np.uint64)
    export(bin_dir, src, tmp_path / "out.zarr")
    assert np.array_equal(zarr.open_group(str(tmp_path / "out.zarr"), mode="r")["0"][:], vols)
    export(bin_dir, src, tmp_path / "out.nii", "--series")
    got = np.asanyarray(nibabel.load(str(tmp_path / "out.nii")).dataobj)
    assert np.array_equal(got, vols.transpose(3, 2, 1, 0))


def test_ome_zarr_unknown_voxel_size_has_no_unit_and_unit_scale(bin_dir, tmp_path):
    src = tmp_path / "rec.h5"
    vols = recording(src, shape=(2, 8, 9, 40), voxel=None)
    out = tmp_path / "rec.zarr"
    export(bin_dir, src, out, "--chunks", "4,4,16", "-t", "2")
    g = zarr.open_group(str(out), mode="r")
    ngff_check(g.attrs.asdict(), 1, None)
    assert g["0"].chunks == (1, 4, 4, 16)
    assert np.array_equal(g["0"][:], vols)
    assert g.attrs["volrec"]["voxel_size_known"] is False


@pytest.mark.parametrize("suffix", [".nii", ".nii.gz"])
def test_nifti_one_file_per_volume(bin_dir, tmp_path, suffix):
    src = tmp_path / "rec.h5"
    vols = recording(src)
    export(bin_dir, src, tmp_path / f"rec{suffix}")
    for t in range(vols.shape[0]):
        img = nibabel.load(str(tmp_path / f"rec_{t:05d}{suffix}"))
        assert isinstance(img, nibabel.Nifti2Image)
        # voxel axes i, j, k = z, x, y
        assert np.array_equal(np.asanyarray(img.dataobj), vols[t].transpose(2, 1, 0))
        assert img.header.get_zooms()[:3] == pytest.approx([VOXEL[2], VOXEL[1], VOXEL[0]])
        assert img.header.get_xyzt_units()[0] == "micron"
        aff = img.affine
        assert aff[2, 0] == pytest.approx(VOXEL[2]) and aff[0, 1] == pytest.approx(VOXEL[1])
        assert aff[1, 2] == pytest.approx(VOXEL[0])
    assert not list(tmp_path.glob("*.partial"))


def test_nifti_series_is_one_4d_file(bin_dir, tmp_path):
    src = tmp_path / "rec.h5"
    vols = recording(src)
    out = tmp_path / "series.nii.gz"
    export(bin_dir, src, out, "--series")
    img = nibabel.load(str(out))
    assert img.shape == (600, 30, 20, 3)
    assert np.array_equal(np.asanyarray(img.dataobj), vols.transpose(3, 2, 1, 0))
    assert img.header.get_zooms() == pytest.approx([VOXEL[2], VOXEL[1], VOXEL[0], 0.04])
    ext = img.header.extensions[0].get_content()
    assert json.loads(ext.rstrip(b"\0"))["volumes"]["epoch"] == [0, 1, 2]


def test_ome_tiff_values_and_physical_sizes(bin_dir, tmp_path):
    src = tmp_path / "rec.h5"
    vols = recording(src)
    out = tmp_path / "rec.ome.tif"
    export(bin_dir, src, out)
    with tifffile.TiffFile(str(out)) as tif:
        assert tif.is_ome
        s = tif.series[0]
        assert s.axes == "TZYX" and s.shape == (3, 20, 600, 30)
        # pages are B-scans: rows depth z, columns x
        assert np.array_equal(s.asarray(), vols.transpose(0, 1, 3, 2))
        px = tifffile.xml2dict(tif.ome_metadata)["OME"]["Image"]["Pixels"]
    assert px["PhysicalSizeX"] == pytest.approx(VOXEL[1])
    assert px["PhysicalSizeY"] == pytest.approx(VOXEL[2])
    assert px["PhysicalSizeZ"] == pytest.approx(VOXEL[0])
    assert px["PhysicalSizeXUnit"] == "µm"


def test_a_real_process_recording_exports(bin_dir, tmp_path):
    """The layout `volrec process -o` writes today (no voxel_size_um yet): exported as unknown."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("geometry:\n  samples_per_ascan: 32\n  ascans_per_bscan: 4\n"
                   "  bscans_per_volume: 3\n  stride: [2, 2]\n  depth_range: [2, 14]\n"
                   "source:\n  type: synth\n")
    h5 = tmp_path / "p.h5"
    r = volrec(bin_dir, "process", "-c", cfg, "-o", h5, "-n", "3")
    if r.returncode != 0:
        pytest.skip(f"volrec process: {r.stderr.strip()}")
    with h5py.File(h5, "r") as f:
        vols = f["volumes"][:]
    out = tmp_path / "p.ome.tiff"
    export(bin_dir, h5, out)
    with tifffile.TiffFile(str(out)) as tif:
        assert np.array_equal(tif.series[0].asarray(), vols.transpose(0, 1, 3, 2))
        assert "PhysicalSizeX" not in tif.ome_metadata


@pytest.mark.parametrize("args,code,msg", [
    (["IN", "-o", "out.png"], 2, "unknown format"),
    (["IN"], 2, "-o OUT is required"),
    (["-o", "x.zarr"], 2, "input"),
    (["missing.h5", "-o", "x.zarr"], 1, "No such file"),
    (["IN", "-o", "x.ome.tif", "--series"], 2, "--series"),
    (["IN", "-o", "x.zarr", "--codec", "gzip"], 2,
     "--codec gzip: unknown codec (zstd, lz4, none)"),
    (["IN", "-o", "x.ome.tif", "--codec", "lz4"], 2, "--codec is for OME-Zarr outputs"),
])
def test_usage_and_input_errors(bin_dir, tmp_path, args, code, msg):
    src = tmp_path / "rec.h5"
    recording(src, shape=(1, 4, 4, 8))
    args = [str(src) if a == "IN" else str(tmp_path / a) if a.startswith(("out", "x.", "missing"))
            else a for a in args]
    r = volrec(bin_dir, "export", *args)
    assert r.returncode == code, (r.returncode, r.stderr)
    assert msg in r.stderr


def test_not_a_recording_is_a_clear_error(bin_dir, tmp_path):
    bad = tmp_path / "bad.h5"
    with h5py.File(bad, "w") as f:
        f["other"] = np.zeros(3)
    r = volrec(bin_dir, "export", bad, "-o", tmp_path / "x.zarr")
    assert r.returncode == 1 and "no /volumes" in r.stderr
    assert not (tmp_path / "x.zarr").exists() and not (tmp_path / "x.zarr.partial").exists()


def test_existing_output_needs_force(bin_dir, tmp_path):
    src = tmp_path / "rec.h5"
    vols = recording(src, shape=(1, 4, 4, 8))
    out = tmp_path / "a.ome.tif"
    out.write_bytes(b"old")
    r = volrec(bin_dir, "export", src, "-o", out)
    assert r.returncode == 1 and "exists" in r.stderr and out.read_bytes() == b"old"
    export(bin_dir, src, out, "-f")
    assert np.array_equal(tifffile.imread(str(out)).reshape(vols.shape[0], 4, 8, 4),
                          vols.transpose(0, 1, 3, 2))


def test_full_disk_leaves_no_output(bin_dir, tmp_path):
    """A file size limit stands in for a full disk: exit 8, neither OUT nor OUT.partial left."""
    import resource
    src = tmp_path / "rec.h5"
    recording(src, shape=(4, 20, 30, 600))
    out = tmp_path / "big.nii"

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
    import signal
    r = subprocess.run([str(bin_dir / "volrec"), "export", str(src), "-o", str(out), "--series"],
                       capture_output=True, text=True, timeout=60,
                       preexec_fn=lambda: (signal.signal(signal.SIGXFSZ, signal.SIG_IGN), limit()))
    assert r.returncode == 8, r.stderr
    assert "File too large" in r.stderr or "No space" in r.stderr
    assert not out.exists() and not (tmp_path / "big.nii.partial").exists()
