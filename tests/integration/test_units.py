# SPDX-License-Identifier: MIT
"""Physical units and per-volume live parameters (docs/algorithms.md §6, docs/control.md
"Generations", docs/tools.md): the voxel size a volume carries to the Python client, the
status, HDF5 files and PNG snapshots; the generation of live parameters each volume carries,
its values over the control socket, and a recording with live changes that says which volumes
had which."""
import json
import struct
import time

import h5py
import numpy as np
import pytest

import volrec
from test_tools import TIMEOUT, Daemon, read_png, wait_published


@pytest.fixture
def units_daemon(bin_dir):
    """A daemon with a known lateral field of view and axial pixel size: 36 x 36 output
    voxels over 3.6 x 1.8 mm, 3.5 um per depth bin."""
    d = Daemon(bin_dir)
    d.cfg["geometry"].update(scan_size_um=[3600, 1800], axial_um_per_pixel=3.5)
    d.restart(d.cfg)
    yield d
    d.close()


def test_python_client_and_status_give_the_voxel_size(units_daemon):
    d = units_daemon
    c = volrec.Client(d.instance, run_dir=str(d.run_dir))
    try:
        with c.next_volume(TIMEOUT) as v:
            assert v.voxel_size_um == (100.0, 50.0, 3.5)
            assert v.generation == 1
        values = c.generation_values(1)
        assert values["preprocess.db_range"] == [0, 100]
        with pytest.raises(volrec.VolrecError, match="generation 99 is not kept"):
            c.generation_values(99)
    finally:
        c.close()
    st = json.loads(d.volrec("status", "--json").stdout)
    assert st["geometry"]["voxel_size_um"] == [100, 50, 3.5] and st["generation"] == 1


def test_unknown_sizes_stay_unknown(bin_dir):
    d = Daemon(bin_dir)  # no units in its configuration
    try:
        c = volrec.Client(d.instance, run_dir=str(d.run_dir))
        try:
            with c.next_volume(TIMEOUT) as v:
                assert v.voxel_size_um == (None, None, None)
        finally:
            c.close()
        st = json.loads(d.volrec("status", "--json").stdout)
        assert st["geometry"]["voxel_size_um"] == [None, None, None]
    finally:
        d.close()


def png_chunks(path):
    data = open(path, "rb").read()
    pos, out = 8, {}
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        out.setdefault(kind.decode(), data[pos + 8:pos + 8 + n])
        pos += 12 + n
    return out


def runs_of_white(img, rows):
    """(row, first column, length) of each run of 255 bounded by 0 on both sides."""
    out = []
    for y in rows:
        line = img[y]
        x = 0
        while x < len(line):
            if line[x] == 255 and x > 0 and line[x - 1] == 0:
                e = x
                while e < len(line) and line[e] == 255:
                    e += 1
                if e < len(line) and line[e] == 0:
                    out.append((y, x, e - x))
                x = e
            else:
                x += 1
    return out


def test_snapshot_has_phys_and_a_scale_bar(units_daemon, tmp_path):
    d = units_daemon
    out = tmp_path / "snap"
    r = d.volrec("snapshot", "-o", str(out), "--scale", "8")
    assert r.returncode == 0, r.stderr
    side = json.loads((out / "snapshot.json").read_text())
    assert side["voxel_size_um"] == [100, 50, 3.5] and side["generation"] == 1
    files = {f["kind"]: f for f in side["files"]}
    en = files["enface-mean"]
    # 36 x 8 = 288 pixels across 3.6 mm: 12.5 um each; a quarter of the width is 900 um
    assert en["pixel_size_um"] == [12.5, 6.25] and en["scale_bar_um"] == 500
    phys = png_chunks(out / en["file"])["pHYs"]
    assert struct.unpack(">IIB", phys) == (80000, 160000, 1)  # pixels per metre
    img, text = read_png(out / en["file"])
    assert "scale bar 500 um" in text["Description"]
    bar = round(en["scale_bar_um"] / en["pixel_size_um"][0])  # 40 pixels
    found = [run for run in runs_of_white(img, range(img.shape[0] * 3 // 4, img.shape[0]))
             if run[2] == bar and run[1] < img.shape[1] // 4]
    assert len(found) >= 2, "no white bar of %d pixels at the bottom left" % bar
    bs = files["bscan"]  # x across, depth down
    assert bs["pixel_size_um"] == [12.5, 3.5 / 8] and bs["scale_bar_um"] > 0
    assert struct.unpack(">IIB", png_chunks(out / bs["file"])["pHYs"]) == (80000, 2285714, 1)
    # the render has no physical pixel: no pHYs, no bar
    rd = files["render"]
    assert rd["pixel_size_um"] == [None, None] and rd["scale_bar_um"] is None
    assert "pHYs" not in png_chunks(out / rd["file"])


def test_snapshot_without_units_has_no_bar_nor_phys(bin_dir, tmp_path):
    d = Daemon(bin_dir)
    try:
        r = d.volrec("snapshot", "-o", str(tmp_path / "s"), "--scale", "8")
        assert r.returncode == 0, r.stderr
        side = json.loads((tmp_path / "s" / "snapshot.json").read_text())
        assert side["voxel_size_um"] == [None, None, None]
        for f in side["files"]:
            assert f["scale_bar_um"] is None and "pHYs" not in png_chunks(tmp_path / "s" / f["file"])
    finally:
        d.close()


def set_and_wait(d, assignment, volumes=6):
    """volrec set ASSIGNMENT, then until `volumes` more volumes are out (made with it)."""
    r = d.volrec("set", assignment)
    assert r.returncode == 0, r.stderr
    wait_published(d, volumes)


def test_record_says_which_volumes_had_which_live_parameters(units_daemon, tmp_path):
    d = units_daemon
    out = tmp_path / "live.h5"
    rec = d.volrec_popen("record", "-o", str(out), "-s", "600")
    try:
        deadline = time.monotonic() + TIMEOUT
        while not out.exists() or out.stat().st_size < 6 * 36 * 36 * 256:
            assert rec.poll() is None and time.monotonic() < deadline, rec.stderr.read()
            time.sleep(0.05)
        set_and_wait(d, "preprocess.db_range=[70, 100]")
        set_and_wait(d, "preprocess.window.type=tukey")
        set_and_wait(d, "reconstruct.mode=cumulative")
        set_and_wait(d, "preprocess.db_range=[70, 100]", volumes=3)  # no change: no generation
    finally:
        rec.send_signal(2)
        stdout, stderr = rec.communicate(timeout=TIMEOUT)
    assert rec.returncode in (0, 4), stderr
    with h5py.File(out, "r") as f:
        vols = f["volumes"]
        assert vols.attrs["axes"] in (b"t,y,x,z", "t,y,x,z")
        assert list(vols.attrs["voxel_size_um"]) == [50.0, 100.0, 3.5]  # y, x, z
        gen, idx = f["generation"][:], f["generation_index"][:]
        rows = [json.loads(t) for t in f["generations"][:]]
        numbers = list(f["generation_numbers"][:])
        assert len(gen) == len(idx) == vols.shape[0]
        assert len(rows) == len(numbers) == 4 and numbers == [1, 2, 3, 4]
        assert list(np.unique(gen)) == [1, 2, 3, 4] and (np.diff(gen.astype(int)) >= 0).all()
        assert all(numbers[i] == g for g, i in zip(gen, idx))
        seen = [(r["preprocess.db_range"], r["preprocess.window.type"], r["reconstruct.mode"])
                for r in rows]
        assert seen == [([0, 100], "hann", "noncumulative"), ([70, 100], "hann", "noncumulative"),
                        ([70, 100], "tukey", "noncumulative"), ([70, 100], "tukey", "cumulative")]
        # the volumes say it too: the brighter floor of a higher dB range shows
        first, last = vols[int(np.argmax(gen == 1))], vols[int(np.argmax(gen == 2))]
        assert first.mean() != last.mean()
    # the daemon keeps the values: control get with a generation
    r = d.volrec("status", "--json")
    assert json.loads(r.stdout)["generation"] == 4
