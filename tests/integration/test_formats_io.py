# SPDX-License-Identifier: MIT
"""Processed recordings in and out of the formats (docs/formats.md): `volrec record --compress`
(HDF5's own shuffle + deflate filters) read back equal by h5py, `volrec process -o` writing any
format by its suffix, and `volrec export` on a terminal (progress) and interrupted (Ctrl-C
leaves nothing behind)."""
import os
import signal
import subprocess

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

from ptykit import run_on_pty  # noqa: E402
from test_formats import recording  # noqa: E402
from test_tools import STRICT, TIMEOUT, Daemon, record_end, record_proc, wait_for_size  # noqa: E402,E501


@pytest.fixture(scope="module")
def daemon(bin_dir):
    d = Daemon(bin_dir)
    yield d
    d.close()


# ---- volrec record --compress -------------------------------------------------------------

def test_record_compress_reads_back_equal(daemon, tmp_path):
    """Two recorders of the same daemon, one with --compress: h5py reads the compressed file's
    volumes equal to the plain file's, matched by (session, sequence). The plain recorder
    records from before the compressed one starts until after it ends (however late either
    process runs on a loaded machine), so every volume of the compressed file is in both."""
    plain, packed = tmp_path / "plain.h5", tmp_path / "packed.h5"
    a, a_err = record_proc(daemon, plain, "-s", "600")
    try:
        wait_for_size(plain, 36 * 36 * 256, a)  # its first volume is written
        b = daemon.volrec_popen("record", "-o", str(packed), "-n", "8", "--compress")
        out, err = b.communicate(timeout=TIMEOUT)
        assert b.returncode == 0 or (not STRICT and b.returncode == 4), (b.returncode, err)
    finally:
        a.send_signal(signal.SIGINT)
    record_end(a, a_err)
    assert a.returncode == 0 or (not STRICT and a.returncode == 4), (a.returncode, a_err.text())
    with h5py.File(plain, "r") as f, h5py.File(packed, "r") as g:
        v = g["volumes"]
        assert v.compression == "gzip" and v.compression_opts == 1 and v.shuffle
        assert v.chunks == (1, 36, 36, 256) and v.shape[0] == 8
        assert f["volumes"].compression is None
        # the per-volume columns are stored as they were
        assert g["sequence"].compression is None and g["sequence"].shape == (8,)
        where = {(int(s), int(q)): i for i, (s, q) in
                 enumerate(zip(f["session"][:], f["sequence"][:]))}
        same = 0
        for j, key in enumerate(zip(g["session"][:], g["sequence"][:])):
            i = where.get((int(key[0]), int(key[1])))
            if i is not None:
                np.testing.assert_array_equal(v[j], f["volumes"][i], err_msg=str(key))
                same += 1
        assert same >= 4, f"only {same} volumes in both files"
        assert os.path.getsize(packed) < 8 * 36 * 36 * 256
        want = v[:]
    # volrec export reads the compressed file as any other
    nibabel = pytest.importorskip("nibabel")
    r = subprocess.run([str(daemon.bin / "volrec"), "export", str(packed), "-o",
                        str(tmp_path / "p.nii"), "--series"], capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    img = nibabel.load(str(tmp_path / "p.nii"))
    assert np.array_equal(np.asanyarray(img.dataobj), want.transpose(3, 2, 1, 0))


def test_record_compress_level_and_range(daemon, tmp_path):
    out = tmp_path / "l9.h5"
    r = daemon.volrec("record", "-o", str(out), "-n", "2", "--compress=9")
    assert r.returncode == 0 or (not STRICT and r.returncode == 4), r.stderr
    with h5py.File(out, "r") as f:
        assert f["volumes"].compression_opts == 9 and f["volumes"].shape[0] == 2
    r = daemon.volrec("record", "-o", str(tmp_path / "x.h5"), "-n", "1", "--compress=10")
    assert r.returncode == 2 and "1 to 9" in r.stderr


# ---- volrec process -o OUT in any format ----------------------------------------------------

PROCESS_CFG = ("geometry:\n  samples_per_ascan: 32\n  ascans_per_bscan: 4\n"
               "  bscans_per_volume: 3\n  stride: [2, 2]\n  depth_range: [2, 14]\n"
               "source:\n  type: synth\n")


def process(bin_dir, cfg, out, *extra):
    return subprocess.run([str(bin_dir / "volrec"), "process", "-c", str(cfg), "-o", str(out),
                           "-n", "3", *extra], capture_output=True, text=True, timeout=120)


def processed_h5(bin_dir, tmp_path):
    """The configuration written for `volrec process` and the volumes it writes to HDF5
    (skipped where process cannot run)."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(PROCESS_CFG)
    r = process(bin_dir, cfg, tmp_path / "p.h5")
    if r.returncode != 0:
        pytest.skip(f"volrec process: {r.stderr.strip()}")
    with h5py.File(tmp_path / "p.h5", "r") as f:
        return cfg, f["volumes"][:]


def test_process_writes_any_format_by_suffix(bin_dir, tmp_path):
    """process -o OUT.ome.tif / .nii / .ome.zarr holds the volumes process -o OUT.h5 holds (the
    synthetic source is the same each run), with nothing left beside it."""
    tifffile = pytest.importorskip("tifffile")
    nibabel = pytest.importorskip("nibabel")
    zarr = pytest.importorskip("zarr")
    cfg, vols = processed_h5(bin_dir, tmp_path)
    assert vols.shape[0] == 3
    for name in ("p.ome.tif", "p.nii", "p.ome.zarr"):
        r = process(bin_dir, cfg, tmp_path / name)
        assert r.returncode == 0, (name, r.stderr)
        assert not (tmp_path / (name + ".partial.h5")).exists()
        assert not (tmp_path / (name + ".partial")).exists()
    with tifffile.TiffFile(str(tmp_path / "p.ome.tif")) as tif:
        assert tif.is_ome
        assert np.array_equal(tif.series[0].asarray(), vols.transpose(0, 1, 3, 2))
    for t in range(3):
        img = nibabel.load(str(tmp_path / f"p_{t:05d}.nii"))
        assert np.array_equal(np.asanyarray(img.dataobj), vols[t].transpose(2, 1, 0))
    g = zarr.open_group(str(tmp_path / "p.ome.zarr"), mode="r")
    assert np.array_equal(g["0"][:], vols)
    assert g.attrs["volrec"]["source"] == str(cfg)
    assert g.attrs["volrec"]["volumes"]["epoch"] == [0, 1, 2]


def test_process_zarr_codec(bin_dir, tmp_path):
    """process -o OUT.zarr --codec: the volumes process -o OUT.h5 holds, in chunks of that
    codec; --codec with another format, or an unknown codec, is a usage error."""
    zarr = pytest.importorskip("zarr")
    cfg, vols = processed_h5(bin_dir, tmp_path)
    for codec in ("lz4", "none"):
        out = tmp_path / f"{codec}.zarr"
        r = process(bin_dir, cfg, out, "--codec", codec)
        assert r.returncode == 0, (codec, r.stderr)
        a = zarr.open_group(str(out), mode="r")["0"]
        assert np.array_equal(a[:], vols)
        assert (a.compressor is None) == (codec == "none")
        assert codec == "none" or a.compressor.cname == codec
    r = process(bin_dir, cfg, tmp_path / "q.h5", "--codec", "lz4")
    assert r.returncode == 2 and "--codec is for OME-Zarr outputs" in r.stderr, r.stderr
    r = process(bin_dir, cfg, tmp_path / "q.zarr", "--codec", "LZ4")
    assert r.returncode == 2 and "--codec LZ4: unknown codec (zstd, lz4, none)" in r.stderr
    assert not list(tmp_path.glob("q.*"))


def test_process_other_format_refuses_lowres(bin_dir, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(PROCESS_CFG)
    r = process(bin_dir, cfg, tmp_path / "p.ome.tif", "--lowres")
    assert r.returncode == 2 and "HDF5 only" in r.stderr
    assert not list(tmp_path.glob("p.*"))


# ---- volrec export on a terminal, and interrupted ----------------------------------------------

def export_on_pty(bin_dir, src, out, *extra, interrupt=False, timeout=120):
    """Run `volrec export` with stdout and stderr on a pseudo-terminal; interrupt: SIGINT once
    the first progress line shows (a volume written, more to come). (returncode, output)."""
    rc, text, sent = run_on_pty([str(bin_dir / "volrec"), "export", str(src), "-o", str(out),
                                 *extra], timeout, rb"volumes/s" if interrupt else None)
    assert not interrupt or sent, text
    return rc, text


def test_export_shows_progress_on_a_terminal(bin_dir, tmp_path):
    src = tmp_path / "rec.h5"
    recording(src, shape=(12, 20, 30, 600))
    rc, text = export_on_pty(bin_dir, src, tmp_path / "r.ome.tif")
    assert rc == 0, text
    lines = [s for s in text.replace("\r", "\n").split("\n") if "volumes/s" in s]
    assert lines, text
    last = lines[-1]
    assert "100%" in last and "12/12 volumes" in last and " left" in last, last
    assert all(("%" in s and " left" in s) for s in lines)
    # the time left is m:ss
    assert any(part.count(":") == 1 for part in last.split()), last


def test_export_without_a_terminal_shows_no_progress(bin_dir, tmp_path):
    src = tmp_path / "rec.h5"
    recording(src, shape=(2, 4, 4, 8))
    r = subprocess.run([str(bin_dir / "volrec"), "export", str(src), "-o",
                        str(tmp_path / "r.nii")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "volumes/s" not in r.stderr and "\r" not in r.stderr


# the slow writers (zlib, blosc on one thread), so that the signal comes before the end: per
# volume files, one file, a folder
@pytest.mark.parametrize("name,extra", [("r.nii.gz", []), ("r.nii.gz", ["--series"]),
                                        ("r.ome.zarr", ["-t", "1"])])
def test_ctrl_c_mid_export_leaves_nothing(bin_dir, tmp_path, name, extra):
    """SIGINT after the first volume: exit 1, and neither OUT, OUT.partial nor any per-volume
    file is left."""
    src = tmp_path / "rec.h5"
    recording(src, shape=(60, 40, 60, 600))
    out = tmp_path / "o" / name
    out.parent.mkdir()
    rc, text = export_on_pty(bin_dir, src, out, *extra, interrupt=True)
    assert rc == 1, text
    assert "interrupted" in text and "nothing written" in text, text
    assert sorted(os.listdir(out.parent)) == []
