# SPDX-License-Identifier: MIT
"""`volrec export` of the functional channels (docs/formats.md "Channels"): every channel of a
processed recording (/volumes, /angio, /doppler) reads back with python3-zarr, python3-tifffile
and python3-nibabel equal to its HDF5 dataset, under its name, with the voxel sizes and with what
its 8-bit values mean (taken from the dataset's attributes: angiography's method and range,
Doppler's phase and velocity range); --channels picks and orders them, and a channel the file
lacks is a precise error."""
import json
import math
import subprocess

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")
nibabel = pytest.importorskip("nibabel")
tifffile = pytest.importorskip("tifffile")

VOXEL = [7.5, 6.0, 3.25]  # y, x, z in micrometres
ALL = ["structure", "angio", "doppler"]
DATASET = {"structure": "volumes", "angio": "angio", "doppler": "doppler"}
# what `volrec process` writes on each dataset (tools/process_h5.c, formats/h5attr.c)
MEANING = {
    "structure": {"quantity": "structure: 20 log10 of the OCT magnitude", "value_unit": "dB",
                  "value_range": [0.0, 100.0]},
    "angio": {"quantity": "angiography: speckle variance (the variance of the repeats' dB)",
              "angio_method": "svar", "value_unit": "dB^2", "value_range": [0.0, 40.0]},
    "doppler": {"quantity": "Doppler: the phase difference of successive acquisitions",
                "value_unit": "rad", "value_range": [-math.pi, math.pi],
                "doppler_axis": "bscan", "doppler_interval_us": 700.0,
                "center_wavelength_nm": 840.0, "refractive_index": 1.38,
                "velocity_mm_s_per_rad": 840 / (4 * math.pi * 1.38 * 700),
                "velocity_range_mm_s": [-840 / (4 * 1.38 * 700), 840 / (4 * 1.38 * 700)]},
}


def volrec(bin_dir, *args, timeout=120):
    return subprocess.run([str(bin_dir / "volrec"), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


def export(bin_dir, src, out, *extra):
    r = volrec(bin_dir, "export", src, "-o", out, *extra)
    assert r.returncode == 0, r.stderr
    return r


def recording(path, chans=ALL, shape=(2, 12, 10, 40), meaning=True, seed=7):
    """A processed recording with the channels chans, each [t, y, x, z] u8 with axes and
    voxel_size_um (and, with meaning, the attributes `volrec process` writes), per-volume
    columns and file attributes. Returns {channel: values}."""
    rng = np.random.default_rng(seed)
    out = {}
    with h5py.File(path, "w") as f:
        for c in chans:
            v = rng.integers(0, 256, size=shape, dtype=np.uint8)
            d = f.create_dataset(DATASET[c], data=v, chunks=(1, *shape[1:]))
            d.attrs["axes"] = "t,y,x,z"
            d.attrs["voxel_size_um"] = np.array(VOXEL)
            for k, val in (MEANING[c].items() if meaning else ()):
                d.attrs[k] = np.array(val) if isinstance(val, list) else val
            out[c] = v
        f["epoch"] = np.arange(shape[0], dtype=np.uint64)
        f["t_first_ns"] = np.arange(shape[0], dtype=np.uint64) * 40_000_000 + 10**12
        f.attrs["volrec_version"] = "0.1.0"
        f.attrs["channels"] = ",".join(chans)
    return out


def u8_value(c, u8):
    lo, hi = MEANING[c]["value_range"]
    return lo + (hi - lo) * u8.astype(np.float64) / 255


def circular_mean_u8(v):
    """Level 1 of Doppler's channel: the circular mean of 2x2x2 phases (u8 q is the phase
    2π q / 255 − π), 128 where they cancel; v [t, y, x, z] of even sizes."""
    a = 2 * np.pi * v.astype(np.float64) / 255 - np.pi
    t, Y, X, Z = v.shape
    c = np.cos(a).reshape(t, Y // 2, 2, X // 2, 2, Z // 2, 2).sum(axis=(2, 4, 6))
    s = np.sin(a).reshape(t, Y // 2, 2, X // 2, 2, Z // 2, 2).sum(axis=(2, 4, 6))
    q = np.floor(255 * (np.arctan2(s, c) + np.pi) / (2 * np.pi) + 0.5)
    return np.where(c * c + s * s < 1e-12, 128, q).astype(np.uint8)


def test_ome_zarr_channel_axis_labels_values_and_meaning(bin_dir, tmp_path):
    src = tmp_path / "rec.h5"
    want = recording(src, shape=(2, 12, 10, 600))
    d = want["doppler"]
    d[:, :2, :2, :2] = 128  # no flow: stays 128
    d[:, 2:4, :2, :2] = np.array([0, 255] * 4, dtype=np.uint8).reshape(2, 2, 2)  # ±π: ±π
    with h5py.File(src, "a") as f:
        f["doppler"][:] = d
    out = tmp_path / "rec.ome.zarr"
    export(bin_dir, src, out)
    g = zarr.open_group(str(out), mode="r")
    ms = g.attrs["multiscales"][0]
    assert [a["name"] for a in ms["axes"]] == ["t", "c", "y", "x", "z"]
    assert [a["type"] for a in ms["axes"]] == ["time", "channel", "space", "space", "space"]
    assert "unit" not in ms["axes"][1]
    assert [c["label"] for c in g.attrs["omero"]["channels"]] == ALL
    for level, d in enumerate(ms["datasets"]):
        scale = d["coordinateTransformations"][0]["scale"]
        assert scale == pytest.approx([0.04, 1.0] + [v * 2 ** level for v in VOXEL])
    a = g["0"]
    assert a.shape == (2, 3, 12, 10, 600) and a.chunks[:2] == (1, 1)
    for i, c in enumerate(ALL):
        assert np.array_equal(a[:, i], want[c]), c
    chans = g.attrs["volrec"]["channels"]
    assert [c["name"] for c in chans] == ALL and g.attrs["volrec"]["axes"] == "t,c,y,x,z"
    for c in chans:
        m = MEANING[c["name"]]
        assert c["dataset"] == DATASET[c["name"]]
        assert c["value_unit"] == m["value_unit"]
        assert c["value_range"] == pytest.approx(m["value_range"])
        for k, v in m.items():
            assert c["attributes"][k] == (pytest.approx(v) if not isinstance(v, str) else v), k
    assert chans[1]["attributes"]["angio_method"] == "svar"
    assert chans[2]["attributes"]["velocity_range_mm_s"][1] == pytest.approx(0.21739, rel=1e-4)
    # level 1: the 2x2x2 mean of structure and angiography, the circular mean of Doppler
    l1 = g["1"][:]
    for i, c in enumerate(ALL[:2]):
        v = want[c].astype(np.uint32).reshape(2, 6, 2, 5, 2, 300, 2)
        assert np.array_equal(l1[:, i], ((v.sum(axis=(2, 4, 6)) + 4) // 8).astype(np.uint8))
    assert (l1[:, 2, 0, 0, 0] == 128).all()
    assert np.isin(l1[:, 2, 1, 0, 0], [0, 255]).all(), l1[:, 2, 1, 0, 0]  # not 128, the mean
    cm = circular_mean_u8(want["doppler"])
    d = np.abs(l1[:, 2].astype(int) - cm)
    d = np.minimum(d, 255 - d)  # 0 and 255 are both ±π
    assert d.max() <= 1 and np.mean(d == 0) > 0.99, (d.max(), np.mean(d == 0))


def test_ome_tiff_channels_are_the_c_dimension_with_names_and_meaning(bin_dir, tmp_path):
    src = tmp_path / "rec.h5"
    want = recording(src)
    out = tmp_path / "rec.ome.tif"
    export(bin_dir, src, out)
    with tifffile.TiffFile(str(out)) as tif:
        s = tif.series[0]
        assert s.axes == "TCZYX" and s.shape == (2, 3, 12, 40, 10)
        a = s.asarray()
        ome = tifffile.xml2dict(tif.ome_metadata)["OME"]
    for i, c in enumerate(ALL):  # pages are B-scans: rows depth z, columns x
        assert np.array_equal(a[:, i], want[c].transpose(0, 1, 3, 2)), c
    px = ome["Image"]["Pixels"]
    assert px["SizeC"] == 3 and px["DimensionOrder"] == "XYZCT"
    assert px["PhysicalSizeX"] == pytest.approx(VOXEL[1])
    assert px["PhysicalSizeY"] == pytest.approx(VOXEL[2])
    assert px["PhysicalSizeZ"] == pytest.approx(VOXEL[0])
    assert [ch["Name"] for ch in px["Channel"]] == ALL
    maps = {m["ID"]: {e["K"]: e["value"] for e in m["Value"]["M"]}
            for m in ome["StructuredAnnotations"]["MapAnnotation"]}
    for ch in px["Channel"]:
        m = maps[ch["AnnotationRef"]["ID"]]
        assert m["name"] == ch["Name"] and m["value_unit"] == MEANING[ch["Name"]]["value_unit"]
        assert json.loads(m["value_range"]) == pytest.approx(MEANING[ch["Name"]]["value_range"])
    angio = maps[px["Channel"][1]["AnnotationRef"]["ID"]]
    assert angio["angio_method"] == "svar" and angio["quantity"].startswith("angiography")
    dop = maps[px["Channel"][2]["AnnotationRef"]["ID"]]
    assert dop["doppler_axis"] == "bscan"
    assert json.loads(dop["velocity_range_mm_s"]) == pytest.approx(
        MEANING["doppler"]["velocity_range_mm_s"])


@pytest.mark.parametrize("suffix", [".nii", ".nii.gz"])
def test_nifti_one_file_per_channel_scaled_to_its_quantity(bin_dir, tmp_path, suffix):
    src = tmp_path / "rec.h5"
    want = recording(src)
    export(bin_dir, src, tmp_path / f"rec{suffix}")
    names = {"structure": "rec_{t:05d}", "angio": "rec_angio_{t:05d}",
             "doppler": "rec_doppler_{t:05d}"}
    assert sorted(p.name for p in tmp_path.glob("rec_*")) == sorted(
        names[c].format(t=t) + suffix for c in ALL for t in range(2))
    for c in ALL:
        for t in range(2):
            img = nibabel.load(str(tmp_path / (names[c].format(t=t) + suffix)))
            raw = img.dataobj.get_unscaled()
            assert raw.dtype == np.uint8
            assert np.array_equal(raw, want[c][t].transpose(2, 1, 0)), (c, t)
            assert img.header.get_zooms()[:3] == pytest.approx([VOXEL[2], VOXEL[1], VOXEL[0]])
            meta = json.loads(img.header.extensions[0].get_content().rstrip(b"\0"))
            assert meta["channel"]["name"] == c
            assert meta["channel"]["value_range"] == pytest.approx(MEANING[c]["value_range"])
            if c == "structure":  # its 8-bit image as ever, unscaled
                slope, inter = img.header.get_slope_inter()
                assert slope in (None, 1.0) and inter in (None, 0.0)
                assert np.array_equal(img.get_fdata(), raw)
                continue
            assert img.get_fdata() == pytest.approx(u8_value(c, raw), abs=1e-5)
            assert img.header.get_intent()[2] == f"{c} {MEANING[c]['value_unit']}"
            assert f" {c} " in img.header["descrip"].item().decode()


def test_nifti_series_one_4d_file_per_channel(bin_dir, tmp_path):
    src = tmp_path / "rec.h5"
    want = recording(src)
    export(bin_dir, src, tmp_path / "s.nii.gz", "--series")
    for c, name in (("structure", "s.nii.gz"), ("angio", "s_angio.nii.gz"),
                    ("doppler", "s_doppler.nii.gz")):
        img = nibabel.load(str(tmp_path / name))
        assert img.shape == (40, 10, 12, 2)
        assert np.array_equal(img.dataobj.get_unscaled(), want[c].transpose(3, 2, 1, 0)), c
    d = nibabel.load(str(tmp_path / "s_doppler.nii.gz")).get_fdata()
    assert d.min() >= -math.pi - 1e-6 and d.max() <= math.pi + 1e-6
    assert sorted(p.name for p in tmp_path.glob("s*.nii.gz")) == [
        "s.nii.gz", "s_angio.nii.gz", "s_doppler.nii.gz"]


def test_channels_option_picks_and_orders(bin_dir, tmp_path):
    src = tmp_path / "rec.h5"
    want = recording(src)
    out = tmp_path / "d.zarr"
    export(bin_dir, src, out, "--channels", "doppler,structure")
    g = zarr.open_group(str(out), mode="r")
    assert [c["label"] for c in g.attrs["omero"]["channels"]] == ["doppler", "structure"]
    assert np.array_equal(g["0"][:, 0], want["doppler"])
    assert np.array_equal(g["0"][:, 1], want["structure"])
    # one channel other than the structure keeps its axis and name
    export(bin_dir, src, tmp_path / "a.ome.tif", "--channels", "angio")
    with tifffile.TiffFile(str(tmp_path / "a.ome.tif")) as tif:
        # tifffile leaves out the C of size 1
        assert np.array_equal(tif.series[0].asarray(), want["angio"].transpose(0, 1, 3, 2))
        px = tifffile.xml2dict(tif.ome_metadata)["OME"]["Image"]["Pixels"]
    assert px["SizeC"] == 1 and px["Channel"]["Name"] == "angio"


def test_structure_alone_has_no_channel_axis(bin_dir, tmp_path):
    """--channels structure of a file with every channel is the structure-only layout (that of
    a file with /volumes alone, which is main's, byte for byte: docs/formats.md)."""
    src, alone = tmp_path / "rec.h5", tmp_path / "alone.h5"
    want = recording(src)
    recording(alone, chans=["structure"])
    for s, o in ((src, tmp_path / "a.zarr"), (alone, tmp_path / "b.zarr")):
        export(bin_dir, s, o, "--channels", "structure")
        g = zarr.open_group(str(o), mode="r")
        assert [a["name"] for a in g.attrs["multiscales"][0]["axes"]] == ["t", "y", "x", "z"]
        assert "omero" not in g.attrs and "channels" not in g.attrs["volrec"]
        assert np.array_equal(g["0"][:], want["structure"])
    a = (tmp_path / "a.zarr" / "0" / "1" / "0" / "0" / "0").read_bytes()
    assert a == (tmp_path / "b.zarr" / "0" / "1" / "0" / "0" / "0").read_bytes()


@pytest.mark.parametrize("chans,args,code,msg", [
    (["structure"], ["--channels", "angio"], 1,
     "no channel angio (dataset /angio); the file has structure"),
    (["angio", "doppler"], ["--channels", "structure,doppler"], 1,
     "no channel structure (dataset /volumes); the file has angio, doppler"),
    (ALL, ["--channels", "flow"], 2, "'flow' is not a channel"),
    (ALL, ["--channels", "angio,angio"], 2, "'angio' is named twice"),
    (ALL, ["--channels", ""], 2, "'' is not a channel"),
])
def test_channel_errors_are_precise(bin_dir, tmp_path, chans, args, code, msg):
    src = tmp_path / "rec.h5"
    recording(src, chans=chans)
    r = volrec(bin_dir, "export", src, "-o", tmp_path / "x.zarr", *args)
    assert r.returncode == code, (r.returncode, r.stderr)
    assert msg in r.stderr, r.stderr
    assert not (tmp_path / "x.zarr").exists() and not (tmp_path / "x.zarr.partial").exists()


def test_channel_of_another_shape_is_refused(bin_dir, tmp_path):
    src = tmp_path / "rec.h5"
    recording(src, chans=["structure"])
    with h5py.File(src, "a") as f:
        f["angio"] = np.zeros((2, 12, 10, 39), dtype=np.uint8)
    r = volrec(bin_dir, "export", src, "-o", tmp_path / "x.ome.tif")
    assert r.returncode == 1
    assert "/angio is [2, 12, 10, 39] but /volumes is [2, 12, 10, 40]" in r.stderr, r.stderr


def test_file_without_meaning_attributes(bin_dir, tmp_path):
    """Channels written without their meaning (another writer's file): Doppler's −π..π is the
    contract's (docs/algorithms.md §5), angiography's range is unknown: null, and its NIfTI
    file is not scaled."""
    src = tmp_path / "rec.h5"
    want = recording(src, meaning=False)
    export(bin_dir, src, tmp_path / "r.zarr")
    chans = zarr.open_group(str(tmp_path / "r.zarr"), mode="r").attrs["volrec"]["channels"]
    assert chans[1]["value_range"] == [None, None] and chans[1]["value_unit"] is None
    assert chans[2]["value_range"] == pytest.approx([-math.pi, math.pi])
    assert chans[2]["value_unit"] == "rad"
    export(bin_dir, src, tmp_path / "r.nii", "--series")
    img = nibabel.load(str(tmp_path / "r_angio.nii"))
    assert np.array_equal(img.get_fdata(), want["angio"].transpose(3, 2, 1, 0))
    img = nibabel.load(str(tmp_path / "r_doppler.nii"))
    assert img.get_fdata() == pytest.approx(
        -math.pi + 2 * math.pi * want["doppler"].transpose(3, 2, 1, 0) / 255, abs=1e-5)


def test_flow_phantom_processed_exports_every_channel(bin_dir, tmp_path):
    """End to end: the flow phantom recorded by `volrec sim`, processed by `volrec process`
    (structure, angio, doppler), exported into each format: values equal the datasets, and the
    meaning is the configuration's (cdv over [0, 1], Doppler's velocity range from λ0, n and T)."""
    body = ("geometry:\n  samples_per_ascan: 256\n  ascans_per_bscan: 16\n"
            "  bscans_per_volume: 8\n  repeats: 2\n  depth_range: [32, 96]\n"
            "  ascan_period_us: 10\n  bscan_period_us: 200\n  center_wavelength_nm: 840\n"
            "output:\n  channels: [structure, angio, doppler]\n")
    sim_cfg, rp, cfg, h5 = (tmp_path / n for n in ("s.yaml", "s.rp", "p.yaml", "p.h5"))
    sim_cfg.write_text("source:\n  type: synth\n  rate: 0\n  synth: {seed: 3, phantom: flow, "
                       "snr_db: 40, flow: {peak_mm_per_s: 1.0}}\n" + body)
    r = volrec(bin_dir, "sim", "-c", sim_cfg, "-o", rp, "-n", "2", timeout=600)
    assert r.returncode == 0, r.stderr
    cfg.write_text(f"backend: cpu\nsource:\n  type: replay\n  rate: 0\n  replay: {{path: {rp}}}\n"
                   + body)
    r = volrec(bin_dir, "process", "-c", cfg, "-o", h5, "--lowres", timeout=600)
    assert r.returncode == 0, r.stderr
    with h5py.File(h5, "r") as f:
        want = {c: f[DATASET[c]][:] for c in ALL}
        assert f["angio"].attrs["angio_method"] == b"cdv"
        assert list(f["angio"].attrs["value_range"]) == [0.0, 1.0]
        assert f["lowres_doppler"].attrs["value_unit"] == b"rad"
        vmax = 840 / (4 * 1.38 * 200)  # λ0 / (4 n T) in mm/s at Δφ = π
        assert f["doppler"].attrs["velocity_range_mm_s"] == pytest.approx([-vmax, vmax])
    assert 0 < np.mean(want["angio"] > 128) < 0.5  # vessels decorrelate, tissue does not
    export(bin_dir, h5, tmp_path / "p.ome.zarr")
    g = zarr.open_group(str(tmp_path / "p.ome.zarr"), mode="r")
    for i, c in enumerate(ALL):
        assert np.array_equal(g["0"][:, i], want[c]), c
    chans = g.attrs["volrec"]["channels"]
    assert chans[1]["attributes"]["angio_method"] == "cdv"
    assert chans[2]["attributes"]["velocity_range_mm_s"] == pytest.approx([-vmax, vmax])
    export(bin_dir, h5, tmp_path / "p.ome.tif")
    with tifffile.TiffFile(str(tmp_path / "p.ome.tif")) as tif:
        a = tif.series[0].asarray()
    for i, c in enumerate(ALL):
        assert np.array_equal(a[:, i], want[c].transpose(0, 1, 3, 2)), c
    export(bin_dir, h5, tmp_path / "p.nii.gz", "--series")
    for c, name in (("structure", "p.nii.gz"), ("angio", "p_angio.nii.gz"),
                    ("doppler", "p_doppler.nii.gz")):
        img = nibabel.load(str(tmp_path / name))
        assert np.array_equal(img.dataobj.get_unscaled(), want[c].transpose(3, 2, 1, 0)), c
    d = nibabel.load(str(tmp_path / "p_doppler.nii.gz")).get_fdata()
    assert d == pytest.approx(2 * np.pi * want["doppler"].transpose(3, 2, 1, 0) / 255 - np.pi,
                              abs=1e-5)


def test_process_meaning_follows_the_configuration(bin_dir, tmp_path):
    """svar over a given range, Doppler along the A-scans with a given index and no wavelength:
    the attributes say so, and the velocity is unknown (NaN, null once exported)."""
    body = ("geometry:\n  samples_per_ascan: 128\n  ascans_per_bscan: 8\n"
            "  bscans_per_volume: 4\n  repeats: 3\n  depth_range: [16, 48]\n"
            "  ascan_period_us: 12.5\n  refractive_index: 1.35\n"
            "functional:\n  angio: {method: svar, range: [0, 40]}\n  doppler: {axis: ascan}\n"
            "output:\n  channels: [angio, doppler]\n")
    sim_cfg, rp, cfg, h5 = (tmp_path / n for n in ("s.yaml", "s.rp", "p.yaml", "p.h5"))
    # the scanner needs a wavelength to make its phases; the processing is not told it
    sim_cfg.write_text("source:\n  type: synth\n  rate: 0\n  synth: {seed: 5, phantom: flow}\n"
                       + body.replace("geometry:\n", "geometry:\n  center_wavelength_nm: 840\n"))
    r = volrec(bin_dir, "sim", "-c", sim_cfg, "-o", rp, "-n", "1", timeout=600)
    assert r.returncode == 0, r.stderr
    cfg.write_text(f"backend: cpu\nsource:\n  type: replay\n  rate: 0\n  replay: {{path: {rp}}}\n"
                   + body)
    r = volrec(bin_dir, "process", "-c", cfg, "-o", h5, "--lowres", timeout=600)
    assert r.returncode == 0, r.stderr
    with h5py.File(h5, "r") as f:
        assert "volumes" not in f
        a, d = f["angio"].attrs, f["doppler"].attrs
        assert a["angio_method"] == b"svar" and a["value_unit"] == b"dB^2"
        assert list(a["value_range"]) == [0.0, 40.0]
        assert list(f["lowres_angio"].attrs["value_range"]) == [0.0, 40.0]
        assert d["doppler_axis"] == b"ascan" and d["doppler_interval_us"] == 12.5
        assert d["refractive_index"] == 1.35
        assert math.isnan(d["center_wavelength_nm"]) and math.isnan(d["velocity_mm_s_per_rad"])
        want = {c: f[c][:] for c in ("angio", "doppler")}
    export(bin_dir, h5, tmp_path / "p.zarr")
    g = zarr.open_group(str(tmp_path / "p.zarr"), mode="r")
    assert [c["label"] for c in g.attrs["omero"]["channels"]] == ["angio", "doppler"]
    chans = g.attrs["volrec"]["channels"]
    assert chans[0]["value_range"] == [0.0, 40.0] and chans[0]["value_unit"] == "dB^2"
    assert chans[1]["attributes"]["velocity_range_mm_s"] == [None, None]
    assert chans[1]["attributes"]["doppler_interval_us"] == 12.5
    for i, c in enumerate(("angio", "doppler")):
        assert np.array_equal(g["0"][:, i], want[c]), c
