# SPDX-License-Identifier: MIT
"""output.channels in volrecd (docs/protocol.md §2.7): the daemon publishes the structure,
angiography and Doppler of each volume in its slot, each described (kind, units, the value of
its u8 range, Doppler's velocities); libvolrec (a C reader), the Python client and the slots
read channels equal to `volrec process`'s /volumes, /angio and /doppler of the same replay file
and configuration; a reader that knows the structure alone still reads it; the live
functional.* keys change the description from the next volumes on; configurations the daemon
cannot serve are refused with precise messages."""
import json
import math
import mmap
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

import volrec
from volrec._protocol import (CHANNEL_DESC, FLAG_CHANNEL_VIEWS, FLAG_VIEWS, SHM_HEADER,
                              SLOT_HEADER, voxel_size)
from volrec.channels import attach_channel_views, read_channels
from volrec.views import read_views
from daemonkit import slot_volumes
from test_daemon import daemons, read_records  # noqa: F401  (fixtures used by name)
from test_daemon_zerocopy import replay_daemon
from conftest import SRC

sys.path.insert(0, str(SRC / "tests" / "reference"))
import views_ref  # noqa: E402

TIMEOUT = 120
ALL = ["structure", "angio", "doppler"]
# repeats with times and optics, so that Doppler's velocities are known
FUNCTIONAL = {"geometry.repeats": 2, "output.channels": ALL,
              "geometry.bscan_period_us": 500.0, "geometry.ascan_period_us": 20.0,
              "geometry.center_wavelength_nm": 840.0, "geometry.refractive_index": 1.4,
              "functional.mask_db": 40.0}


def process(bin_dir, d, name="process"):
    """`volrec process` of the daemon's configuration: {dataset: array} of every channel."""
    path = d.dir / f"{name}.yaml"
    path.write_text(json.dumps(d.cfg))
    out = d.dir / f"{name}.h5"
    r = subprocess.run([str(bin_dir / "volrec"), "process", "-c", str(path), "-o", str(out)],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    with h5py.File(out, "r") as f:
        chans = f.attrs["channels"]
        chans = chans.decode() if isinstance(chans, bytes) else chans
        assert chans == ",".join(d.cfg["output"]["channels"])
        return {k: np.array(f[k]) for k in ("volumes", "angio", "doppler") if k in f}, \
            list(f["epoch"][:])


def slot_channels(instance):
    """Every volume in the slots (a daemon done publishing, more slots than volumes): [(epoch,
    [c][Y][X][Z] copy, [descriptor dict per channel])], read straight from the segment."""
    with open(f"/dev/shm/volrec.{instance}", "rb") as f:
        m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    try:
        h = SHM_HEADER.unpack(m, 0)
        n, vb = h["channels"], h["volume_bytes"]
        out = []
        for slot in range(h["slot_count"]):
            at = h["slot_table_offset"] + slot * h["slot_header_size"]
            sh = SLOT_HEADER.unpack(m, at)
            if sh["sequence"] == 0:
                continue
            off = h["data_offset"] + slot * h["slot_stride"]
            vol = np.frombuffer(m, np.uint8, n * vb, off).reshape(
                n, h["ny"], h["nx"], h["nz"]).copy()
            descs = [CHANNEL_DESC.unpack(m, h["channel_table_offset"]
                                         + (slot * n + c) * h["channel_desc_size"])
                     for c in range(n)]
            assert SLOT_HEADER.unpack(m, at) == sh, f"slot {slot} rewritten while read"
            assert sh["channels"] == n
            out.append((sh["epoch"], vol, descs))
        return sorted(out, key=lambda r: r[0])
    finally:
        m.close()


def slot_channel_pictures(instance):
    """Every volume's channels in the slots with their pictures (a daemon done publishing):
    [(epoch, {name: (channel copy, {picture kind: copy})})], through the client's own readers
    of the segment (docs/protocol.md §2.7, §2.8)."""
    with open(f"/dev/shm/volrec.{instance}", "rb") as f:
        buf = f.read()
    h = SHM_HEADER.unpack(buf, 0)
    out = []
    for slot in range(h["slot_count"]):
        sh = SLOT_HEADER.unpack(buf, h["slot_table_offset"] + slot * h["slot_header_size"])
        if sh["sequence"] == 0:
            continue
        off = h["data_offset"] + slot * h["slot_stride"]
        assert sh["flags"] & FLAG_VIEWS and sh["flags"] & FLAG_CHANNEL_VIEWS, sh["flags"]
        views = read_views(buf, off + h["views_offset"], h["views_bytes"],
                           (h["ny"], h["nx"], h["nz"]), voxel_size(sh))
        ch = read_channels(buf, h, slot, off)
        attach_channel_views(ch, views, buf, h, off, True)
        out.append((sh["epoch"], {name: (np.array(ch[name]),
                                         {k: (np.array(v), v.slab, v.position)
                                          for k, v in ch[name].views.items()})
                                  for name in ch}))
    return sorted(out, key=lambda r: r[0])


def velocity(cfg):
    g = cfg["geometry"]
    return g["center_wavelength_nm"] / (4 * g["refractive_index"] * g["bscan_period_us"])


def test_slots_hold_the_channels_volrec_process_writes(daemons, bin_dir):
    # VolRec with its temporal history: the whole volume of every epoch, from the slots
    epochs = 5
    d = replay_daemon(daemons, bin_dir, epochs=epochs,
                      **FUNCTIONAL, **{"source.rate": 20, "source.replay.loop": False,
                                       "output.slots": epochs + 2})
    d.start()
    d.subscribe()
    d.ready()
    st = d.status(lambda m: m["volumes_published"] >= epochs and m["bscans"]["in_ring"] == 0)
    assert [c["name"] for c in st["channels"]] == ALL
    assert st["channels"][1] == {"name": "angio", "units": "1", "range": [0, 1],
                                 "method": "cdv", "mask_db": 40}
    dop = st["channels"][2]
    assert dop["axis"] == "bscan" and dop["period_us"] == 500 and dop["bulk"] is True
    assert dop["velocity_mm_s"] == pytest.approx([-velocity(d.cfg), velocity(d.cfg)])
    ref, ref_epochs = process(bin_dir, d)
    assert ref_epochs == list(range(epochs))
    recs = slot_channels(d.instance)
    assert [e for e, _, _ in recs] == list(range(epochs))
    # a reader of the 2.0 layout (daemonkit's: the volume at the slot's start, volume_bytes
    # long) reads the structure
    old = slot_volumes(d.instance)
    assert [h["epoch"] for h, _ in old] == list(range(epochs))
    for h, vol in old:
        assert np.array_equal(vol, ref["volumes"][h["epoch"]]), h
    for e, vol, descs in recs:
        for c, name in enumerate(("volumes", "angio", "doppler")):
            assert np.array_equal(vol[c], ref[name][e]), f"epoch {e}: {name}"
        assert [x["kind"] for x in descs] == [0, 1, 2]
        assert [x["offset"] for x in descs] == [c * vol[0].size for c in range(3)]
        assert (descs[0]["value_lo"], descs[0]["value_hi"], descs[0]["units"][:3]) == \
            (0.0, 100.0, b"dB\0")
        assert descs[2]["value_lo"] == -math.pi and descs[2]["value_hi"] == math.pi
    # the angiography and Doppler are not the structure, nor flat
    assert not np.array_equal(ref["angio"], ref["volumes"]) and ref["angio"].std() > 0
    assert ref["doppler"].std() > 0
    snapshot_of_the_last_volume(bin_dir, d, ref, epochs - 1)
    d.signal(15)
    assert d.wait_exit() == 0, d.log_text()


def stretch(a):
    """volrec snapshot's default contrast: the picture's minimum..maximum to 0..255."""
    a = a.astype(np.float64)
    lo, hi = a.min(), a.max()
    return np.clip(np.rint((a - lo) / (hi - lo if hi > lo else 1.0) * 255), 0, 255)


def snapshot_of_the_last_volume(bin_dir, d, ref, e):
    """`volrec snapshot` of a daemon done publishing: the angiography's en-face mean and
    maximum and the Doppler B-scan over the structure (RGB) are those of the channels of
    `volrec process`'s epoch e."""
    from PIL import Image

    out = d.dir / "snap"
    r = volrec_cmd(bin_dir, d, "snapshot", "-o", str(out), "--scale", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    side = json.loads((out / "snapshot.json").read_text())
    assert side["epoch"] == e
    files = {f["file"]: f for f in side["files"]}
    za, zb = d.cfg.get("view", {}).get("slab", [0, ref["angio"].shape[-1]])
    mean, mx = views_ref.enface(ref["angio"][e], za, zb)
    Y, X, Z = ref["angio"].shape[1:]
    for name, want in ((f"angio-enface-mean_x{X}y{Y}.png", mean),
                       (f"angio-enface-max_x{X}y{Y}.png", mx)):
        assert files[name]["channel"] == "angio", files[name]
        got = np.array(Image.open(out / name))[::2, ::2]
        np.testing.assert_array_equal(got, stretch(want), err_msg=name)
    y0 = Y // 2
    name = f"doppler-bscan-y{y0}_x{X}z{Z}.png"
    f = files[name]
    assert f["channel"] == "doppler" and "blue -pi" in f["colour_map"]
    assert f["velocity_mm_s"] == pytest.approx([-velocity(d.cfg), velocity(d.cfg)])
    img = Image.open(out / name)
    assert img.mode == "RGB"
    got = np.array(img)[::2, ::2].astype(np.float64)
    grey = stretch(ref["volumes"][e][y0].T)  # depth down
    ph = 2.0 * ref["doppler"][e][y0].T.astype(np.float64) / 255 - 1
    a = np.minimum(np.abs(ph), 1)[..., None]
    end = np.where(ph[..., None] < 0, [33, 102, 172], [178, 24, 43])
    want = grey[..., None] * (1 - a) + end * a
    assert np.abs(got - want).max() <= 1, np.abs(got - want).max()
    assert (np.abs(ph) > 0.1).any()  # colours there to see


def test_c_and_python_clients_read_each_channel_and_its_meaning(daemons, bin_dir, build_dir):
    # reconstruct.mode none at stride 1: each volume is its own epoch's, so a looping file's
    # epoch e is `volrec process`'s volume of file epoch e mod its length
    epochs = 3
    d = replay_daemon(daemons, bin_dir, epochs=epochs,
                      **FUNCTIONAL, **{"geometry.stride": [1, 1], "reconstruct.mode": "none",
                                       "source.rate": 10,
                                       "functional.angio.method": "svar"})
    d.start()
    d.subscribe()
    d.ready()
    ref, _ = process(bin_dir, d)
    names = ("volumes", "angio", "doppler")
    # libvolrec
    out = d.dir / "channels.bin"
    r = subprocess.run([str(build_dir / "tests" / "vrd_channels"), d.instance, str(d.run_dir),
                        "3", str(TIMEOUT), str(out)], capture_output=True, text=True,
                       timeout=TIMEOUT + 10)
    assert r.returncode == 0, r.stdout + r.stderr
    data = out.read_bytes()
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(lines) == 3
    size = int(np.prod(lines[0]["shape"]))
    for i, line in enumerate(lines):
        vol = np.frombuffer(data, np.uint8, 3 * size, i * 3 * size).reshape(
            3, *line["shape"])
        e = line["epoch"] % epochs
        for c in range(3):
            assert np.array_equal(vol[c], ref[names[c]][e]), f"epoch {line['epoch']}"
        s, a, dp = line["channels"]
        assert (s["kind"], s["units"], s["range"]) == (0, "dB", [0, 100])
        assert (a["kind"], a["method"], a["units"], a["range"], a["mask_db"]) == \
            (1, 0, "dB^2", [0, 100], 40)
        assert (dp["kind"], dp["method"], dp["units"], dp["period_us"], dp["flags"]) == \
            (2, 0, "rad", 500, 1)
        assert dp["range"] == pytest.approx([-math.pi, math.pi])
        assert dp["velocity_mm_s"] == pytest.approx([-velocity(d.cfg), velocity(d.cfg)])
        assert s["velocity_mm_s"] == [None, None]
    # a reader that knows the structure alone (the view's data) reads the structure
    reader_out = d.dir / "structure.bin"
    r = subprocess.run([str(build_dir / "tests" / "vrd_reader"), d.instance, str(d.run_dir),
                        "2", str(TIMEOUT), str(reader_out)], capture_output=True, text=True,
                       timeout=TIMEOUT + 10)
    assert r.returncode == 0, r.stdout + r.stderr
    for h, vol in read_records(reader_out):
        assert np.array_equal(vol, ref["volumes"][h["epoch"] % epochs])
    # Python: arrays on the slot (no copy), the meaning as attributes
    c = volrec.Client(d.instance, run_dir=str(d.run_dir))
    try:
        for _ in range(2):
            with c.next_volume(TIMEOUT) as v:
                ch = v.channels
                assert list(ch) == ["structure", "angio", "doppler"]
                assert np.shares_memory(ch["structure"], v) and not ch["angio"].flags.owndata
                assert not ch["angio"].flags.writeable
                e = v.epoch % epochs
                for name, ds in zip(ch, names):
                    assert np.array_equal(ch[name], ref[ds][e]), name
                assert np.array_equal(v, ref["volumes"][e])
                a, dp = ch["angio"], ch["doppler"]
                assert (a.kind, a.units, a.value_range, a.method, a.mask_db) == \
                    ("angio", "dB^2", (0.0, 100.0), "svar", 40.0)
                assert (dp.units, dp.method, dp.period_us, dp.bulk) == \
                    ("rad", "bscan", 500.0, True)
                assert dp.velocity_mm_s == pytest.approx((-velocity(d.cfg), velocity(d.cfg)))
                assert ch["structure"].velocity_mm_s is None
                q = np.array(dp[:1, :1, :4], dtype=np.float64)
                np.testing.assert_allclose(dp.values()[:1, :1, :4],
                                           2 * math.pi * q / 255 - math.pi)
                np.testing.assert_allclose(dp.velocities_mm_s()[:1, :1, :4],
                                           velocity(d.cfg) * (2 * q / 255 - 1))
                # each channel's pictures (docs/protocol.md §2.8): of its own voxels, with the
                # views' slab and position
                for name in ch:
                    views = ch[name].views
                    mean = views["enface_mean"]
                    za, zb = mean.slab
                    want_mean, want_max = views_ref.enface(np.array(ch[name]), za, zb)
                    np.testing.assert_array_equal(mean, want_mean, err_msg=name)
                    np.testing.assert_array_equal(views["enface_max"], want_max, err_msg=name)
                    y0 = views["bscan"].position[0]
                    np.testing.assert_array_equal(views["bscan"], ch[name][y0], err_msg=name)
                    assert not views["bscan"].flags.writeable
                assert set(ch["doppler"].views) == {"enface_mean", "enface_max", "bscan"}
                assert ch["structure"].views is v.views
                with pytest.raises(KeyError, match="not in this volume"):
                    ch["nothing"] if False else volrec.Channels(
                        {"structure": ch["structure"]})["angio"]
    finally:
        c.close()
    d.signal(15)
    assert d.wait_exit() == 0, d.log_text()


def test_volrec_record_writes_the_channels_as_volrec_process_does(daemons, bin_dir):
    epochs = 3
    d = replay_daemon(daemons, bin_dir, epochs=epochs,
                      **FUNCTIONAL, **{"geometry.stride": [1, 1], "reconstruct.mode": "none",
                                       "source.rate": 10})
    d.start()
    d.subscribe()
    d.ready()
    ref, _ = process(bin_dir, d)
    out = d.dir / "rec.h5"
    r = volrec_cmd(bin_dir, d, "record", "-o", str(out), "-n", "4")
    # 4: a volume overwritten before a slow recorder (ThreadSanitizer) got it, listed in
    # /missed; the 4 volumes recorded are still compared below
    assert r.returncode == 0 or (r.returncode == 4 and "missed" in r.stderr), \
        r.stdout + r.stderr
    with h5py.File(out, "r") as f, h5py.File(d.dir / "process.h5", "r") as p:
        assert f.attrs["channels"] == p.attrs["channels"]
        epochs_read = [int(e) for e in f["epoch"][:]]
        assert len(epochs_read) == 4
        for name in ("volumes", "angio", "doppler"):
            for k in ("axes", "voxel_size_um"):
                np.testing.assert_array_equal(f[name].attrs[k], p[name].attrs[k])
            for i, e in enumerate(epochs_read):
                assert np.array_equal(f[name][i], ref[name][e % epochs]), (name, e)
        # what each channel's values mean: the attributes `volrec process` writes, the same
        for name in ("volumes", "angio", "doppler"):
            want, got = dict(p[name].attrs), dict(f[name].attrs)
            assert "value_range" in want, (name, want)
            for k, v in want.items():
                assert k in got, (name, k)
                if isinstance(v, bytes) or isinstance(v, str):
                    assert got[k] == v, (name, k, got[k], v)
                else:
                    np.testing.assert_allclose(got[k], v, rtol=1e-12, err_msg=f"{name} {k}")
        assert f["doppler"].attrs["velocity_range_mm_s"] == pytest.approx(
            [-velocity(d.cfg), velocity(d.cfg)])
        rng = f["channel_range"][:]
        assert rng.shape == (4, 3, 2)
        assert rng[:, 0].tolist() == [[0, 100]] * 4 and rng[:, 1].tolist() == [[0, 1]] * 4
    # volrec export finds every channel of the recording as of `volrec process`'s file
    nibabel = pytest.importorskip("nibabel")
    r = subprocess.run([str(bin_dir / "volrec"), "export", str(out), "-o",
                        str(d.dir / "rec.nii"), "--series"], capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    for name, file in (("volumes", "rec.nii"), ("angio", "rec_angio.nii"),
                       ("doppler", "rec_doppler.nii")):
        img = nibabel.load(str(d.dir / file))
        want = np.stack([ref[name][e % epochs] for e in epochs_read])
        assert np.array_equal(img.dataobj.get_unscaled(), want.transpose(3, 2, 1, 0)), name
    d.signal(15)
    assert d.wait_exit() == 0, d.log_text()


def volrec_cmd(bin_dir, d, *args):
    return subprocess.run([str(bin_dir / "volrec"), *args, "-i", d.instance, "-r",
                           str(d.run_dir)], capture_output=True, text=True, timeout=TIMEOUT)


def test_a_live_set_of_functional_keys_makes_volrec_process_volumes_of_the_new_values(
        daemons, bin_dir):
    """Each volume is `volrec process`'s of the values of its generation: before a set the
    file's, from the new generation on the set's (mode none at stride 1: every volume is its
    own epoch's, the history holds no older epoch)."""
    epochs = 3
    d = replay_daemon(daemons, bin_dir, epochs=epochs,
                      **FUNCTIONAL, **{"geometry.stride": [1, 1], "reconstruct.mode": "none",
                                       "source.rate": 10})
    d.start()
    d.subscribe()
    d.ready()
    before, _ = process(bin_dir, d, "before")
    new = json.loads(json.dumps(d.cfg))
    new["functional"] = {"angio": {"method": "svar", "range": [5.0, 60.0]}, "mask_db": 45.0,
                         "axial_half_window": 1, "doppler": {"bulk": False}}
    saved, d.cfg = d.cfg, new
    after, _ = process(bin_dir, d, "after")
    d.cfg = saved
    names = ("volumes", "angio", "doppler")
    assert not np.array_equal(before["angio"], after["angio"])
    assert not np.array_equal(before["doppler"], after["doppler"])
    c = volrec.Client(d.instance, run_dir=str(d.run_dir))
    try:
        with c.next_volume(TIMEOUT) as v:
            gen0 = v.generation
            for ch, ds in zip(v.channels, names):
                assert np.array_equal(v.channels[ch], before[ds][v.epoch % epochs]), ch
        r = volrec_cmd(bin_dir, d, "set", "functional.angio.method=svar",
                       "functional.angio.range=[5,60]", "functional.mask_db=45",
                       "functional.axial_half_window=1", "functional.doppler.bulk=false")
        assert r.returncode == 0, r.stdout + r.stderr
        seen_new = 0
        for _ in range(400):
            with c.next_volume(TIMEOUT) as v:
                ref = before if v.generation == gen0 else after
                for ch, ds in zip(v.channels, names):
                    assert np.array_equal(v.channels[ch], ref[ds][v.epoch % epochs]), \
                        (ch, v.generation, v.epoch)
                if v.generation != gen0:
                    assert v.channels["angio"].value_range == (5.0, 60.0)
                    seen_new += 1
            if seen_new == 3:
                break
        assert seen_new == 3
    finally:
        c.close()
    d.signal(15)
    assert d.wait_exit() == 0, d.log_text()


def test_live_functional_keys_change_the_meaning_from_the_next_volumes(daemons, bin_dir):
    d = daemons(**FUNCTIONAL, **{"source.synth.phantom": "flow"}).serve()
    c = volrec.Client(d.instance, run_dir=str(d.run_dir), open_timeout=TIMEOUT)
    try:
        with c.next_volume(TIMEOUT) as v:
            assert v.channels["angio"].value_range == (0.0, 1.0)
            gen0 = v.generation
        r = volrec_cmd(bin_dir, d, "set", "functional.angio.range=[0.1,0.6]",
                       "functional.doppler.bulk=false", "functional.mask_db=55",
                       "preprocess.db_range=[10,90]")
        assert r.returncode == 0, r.stdout + r.stderr
        # wait for a volume of the new generation; every volume carries its own
        for _ in range(200):
            with c.next_volume(TIMEOUT) as v:
                a, dp = v.channels["angio"], v.channels["doppler"]
                if v.generation == gen0:
                    assert a.value_range == (0.0, 1.0) and dp.bulk
                    continue
                assert a.value_range == (0.1, 0.6) and a.mask_db == 55.0
                assert not dp.bulk and dp.mask_db == 55.0
                assert v.channels["structure"].value_range == (10.0, 90.0)
                break
        else:
            raise AssertionError("no volume of the new generation")
        r = volrec_cmd(bin_dir, d, "status", "--json")
        assert r.returncode == 0, r.stderr
        st = json.loads(r.stdout)
        assert st["channels"][1]["range"] == [0.1, 0.6], st["channels"]
        assert st["channels"][2]["bulk"] is False
        r = volrec_cmd(bin_dir, d, "status")
        assert r.returncode == 0, r.stderr
        assert ("channels  structure dB [10, 90], angio cdv 1 [0.1, 0.6] (mask 55 dB), "
                "doppler bscan rad [-3.142, 3.142] = [-0.3, 0.3] mm/s (mask 55 dB)\n") in r.stdout, \
            r.stdout
        # watch's lines name the channels once a status message came (every 100 ms)
        for _ in range(30):
            r = volrec_cmd(bin_dir, d, "watch", "-n", "20")
            assert r.returncode == 0, r.stderr
            if "; channels structure+angio+doppler\n" in r.stdout:
                break
        else:
            raise AssertionError(r.stdout)
        # a reload applies the file's values between volumes the same way
        cfg = json.loads(json.dumps(d.cfg))
        cfg["functional"]["angio"] = {"method": "svar", "range": [0, 50]}
        d.write_config(cfg)
        r = volrec_cmd(bin_dir, d, "reload")
        assert r.returncode == 0, r.stdout + r.stderr
        for _ in range(200):
            with c.next_volume(TIMEOUT) as v:
                a = v.channels["angio"]
                if a.method == "svar":
                    assert a.value_range == (0.0, 50.0) and a.units == "dB^2"
                    break
        else:
            raise AssertionError("no volume after the reload")
        # a bad value is refused, naming the key; the channels are structural
        r = volrec_cmd(bin_dir, d, "set", "functional.angio.range=[1,0]")
        assert r.returncode != 0 and "functional.angio.range" in r.stdout + r.stderr
        r = volrec_cmd(bin_dir, d, "set", "output.channels=[structure]")
        assert r.returncode != 0 and "output.channels" in r.stderr and \
            "structural" in r.stderr, r.stderr
    finally:
        c.close()
    d.signal(15)
    assert d.wait_exit() == 0, d.log_text()


@pytest.mark.parametrize("over,words", [
    ({"output.channels": ["structure", "angio"]},
     "angio needs geometry.repeats of 2 or more (it is 1)"),
    ({"geometry.repeats": 2, "output.channels": ["structure", "angio"],
      "reconstruct.mode": "adaptive"},
     "reconstruct.mode: adaptive with output.channels other than [structure] is not available"),
    ({"geometry.repeats": 2, "output.channels": ["doppler", "structure"]}, "output.channels"),
    # the CUDA backend's own check refuses channels over several devices (built without
    # CUDA: it says so)
    ({"geometry.repeats": 2, "output.channels": ["structure", "angio"], "backend": "cuda",
      "gpu.devices": [0, 1]},
     "output.channels: channels other than [structure] run on one CUDA device, not over the 2 "
     "of gpu.devices" if os.environ.get("VOLREC_HAVE_CUDA") == "1" else "built without CUDA"),
])
def test_configurations_volrecd_cannot_serve_are_refused_precisely(daemons, bin_dir, over,
                                                                   words):
    d = daemons(**over)
    # volrecd --check says the configuration's own faults; the daemon refuses all of them
    check = subprocess.run([str(bin_dir / "volrecd"), "--check", "-c", str(d.config_path)],
                           capture_output=True, text=True, timeout=TIMEOUT)
    if "backend" not in over:
        assert check.returncode == 2 and words in check.stderr, check.stderr
    d.start()
    assert d.wait_exit() != 0
    assert words in d.log_text(), d.log_text()


def test_cuda_daemon_publishes_the_channels_volrec_process_makes(daemons, bin_dir):
    """On a CUDA device (the lead's GPU run; skipped elsewhere): volrecd on the CUDA backend
    publishes the channels `volrec process --backend cuda` makes of the same replay file, and
    each channel's pictures (docs/protocol.md §2.8: en-face mean and maximum, B-scan) computed
    on the device from that channel's own voxels, as the CPU backend computes them."""
    if os.environ.get("VOLREC_HAVE_CUDA") != "1":
        pytest.skip("built without CUDA")
    epochs = 5
    d = replay_daemon(daemons, bin_dir, epochs=epochs,
                      **FUNCTIONAL, **{"source.rate": 20, "source.replay.loop": False,
                                       "output.slots": epochs + 2, "backend": "cuda"})
    path = d.dir / "cuda.yaml"
    path.write_text(json.dumps(d.cfg))
    out = d.dir / "cuda.h5"
    r = subprocess.run([str(bin_dir / "volrec"), "process", "-c", str(path), "-o", str(out)],
                       capture_output=True, text=True, timeout=TIMEOUT)
    if r.returncode != 0 and ("cudaGetDeviceCount" in r.stderr or "no CUDA device" in r.stderr
                              or "device" in r.stderr.lower() and "cuda" in r.stderr.lower()):
        pytest.skip("no CUDA device: " + r.stderr.strip()[-200:])
    assert r.returncode == 0, r.stderr
    with h5py.File(out, "r") as f:
        ref = {k: np.array(f[k]) for k in ("volumes", "angio", "doppler")}
    d.start()
    d.subscribe()
    d.ready()
    d.status(lambda m: m["volumes_published"] >= epochs and m["bscans"]["in_ring"] == 0)
    recs = slot_channels(d.instance)
    assert [e for e, _, _ in recs] == list(range(epochs))
    for e, vol, _ in recs:
        for c, name in enumerate(("volumes", "angio", "doppler")):
            diff = np.abs(vol[c].astype(int) - ref[name][e].astype(int))
            if name == "doppler":
                diff = np.minimum(diff, 255 - diff)  # the phase's circle
            assert (diff <= 1).mean() >= 0.999, (e, name, diff.max())
    with open(f"/dev/shm/volrec.{d.instance}", "rb") as f:
        h = SHM_HEADER.unpack(f.read(SHM_HEADER.size), 0)
    assert h["channels"] == 3 and h["channel_views_bytes"] > 0
    pics = slot_channel_pictures(d.instance)
    assert [e for e, _ in pics] == list(range(epochs))
    for e, chans in pics:
        assert list(chans) == ALL
        for name, (vol, views) in chans.items():
            assert {"enface_mean", "enface_max", "bscan"} <= set(views), (e, name, views)
            mean, za_zb, _ = views["enface_mean"]
            want_mean, want_max = views_ref.enface(vol, *za_zb)
            np.testing.assert_array_equal(mean, want_mean, err_msg=f"{e} {name}")
            np.testing.assert_array_equal(views["enface_max"][0], want_max,
                                          err_msg=f"{e} {name}")
            bscan, _, pos = views["bscan"]
            np.testing.assert_array_equal(bscan, vol[pos[0]], err_msg=f"{e} {name}")
    d.signal(15)
    assert d.wait_exit() == 0, d.log_text()
