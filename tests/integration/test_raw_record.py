# SPDX-License-Identifier: MIT
"""Raw recordings (docs/recording.md): volrecd records raw spectra into record.dir, `volrec
process --source` processes them again with the configuration they carry, bit for bit as live;
a file cut short stays readable up to its last complete epoch; a damaged epoch is named by its
CRC-32C (stop or skip); a full disk stops the recording, never acquisition; names are checked."""
import json
import os
import pathlib
import re
import shutil
import signal
import struct
import subprocess
import time

import h5py
import numpy as np
import pytest

from ctlwire import Wire, ctl_path
from ptykit import run_on_pty
from test_tools import TIMEOUT, Daemon

HEADER_EPOCHS = 32  # byte offset of the header's epoch count (0 while being written)


def raw_daemon(bin_dir, rec_dir, **record):
    """A daemon (test_tools' synthetic retina, never dropping) with record.* set."""
    d = Daemon.__new__(Daemon)
    Daemon.__init__(d, bin_dir)  # started; restarted below with the record keys
    d.cfg["record"] = {"dir": str(rec_dir), "min_free_gb": 0, **record}
    d.restart(d.cfg)
    return d


def status(d):
    with Wire(ctl_path(d.run_dir, d.instance)) as w:
        r = w.request({"op": "status"})
    assert r["ok"], r
    return r["status"]


def wait_recording_done(d, what="finished"):
    deadline = time.monotonic() + TIMEOUT
    while True:
        rec = status(d)["recording"]
        if rec["state"] == what:
            return rec
        assert time.monotonic() < deadline, (rec, d.log_text())
        time.sleep(0.2)


def frames(path):
    """(header_size, frame_size, header epoch count) of a recording."""
    data = open(path, "rb").read(64)
    assert data[:8] == b"VOLRECRP" and struct.unpack_from("<I", data, 8)[0] == 2
    hsize, st, k, nx, ny = struct.unpack_from("<IIIII", data, 12)
    epoch_bytes = ny * nx * k * 2  # u16
    frame = 4096 + (epoch_bytes + 4095) // 4096 * 4096
    return hsize, frame, struct.unpack_from("<Q", data, HEADER_EPOCHS)[0]


def process(d, rec, out, *extra):
    return subprocess.run([str(d.bin / "volrec"), "process", "--source", str(rec), "-o",
                           str(out), *extra], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def recorded(bin_dir, tmp_path_factory):
    """One daemon run: 100 raw epochs from the start (record: keys) and, meanwhile, 12
    volumes recorded by `volrec record` (HDF5)."""
    tmp = tmp_path_factory.mktemp("raw")
    rec_dir = tmp / "rec"
    rec_dir.mkdir()
    d = raw_daemon(bin_dir, rec_dir, name="run1", epochs=100)
    try:
        live = tmp / "live.h5"
        r = d.volrec("record", "-o", str(live), "-n", "12")
        assert r.returncode == 0, (r.stdout, r.stderr)
        rec = wait_recording_done(d)
        assert rec["epochs_written"] == 100 and rec["skipped_epochs"] == 0, rec
        assert rec["failed"] is False and rec["file"] == str(rec_dir / "run1.vrr")
        drops = status(d)
        yield d, rec_dir / "run1.vrr", live, tmp, drops
    finally:
        d.close()


def test_processing_a_recording_gives_the_live_volumes_bit_for_bit(recorded):
    d, rec, live, tmp, _ = recorded
    out = tmp / "again.h5"
    r = process(d, rec, out)
    assert r.returncode == 0, (r.stdout, r.stderr)
    with h5py.File(live, "r") as a, h5py.File(out, "r") as b:
        ea, eb = list(a["epoch"][:]), list(b["epoch"][:])
        assert eb == list(range(100)), eb[:5]
        common = [e for e in ea if e in eb]
        assert len(common) >= 10, (ea, eb[-1])
        for e in common:
            va = a["volumes"][ea.index(e)]
            vb = b["volumes"][eb.index(e)]
            assert np.array_equal(va, vb), "epoch %d differs in %d voxels" % (
                e, int((va != vb).sum()))


def test_a_recording_cut_short_reads_up_to_its_last_complete_epoch(recorded):
    d, rec, _, tmp, _ = recorded
    hsize, frame, n = frames(rec)
    assert n == 100 and os.path.getsize(rec) == hsize + 100 * frame
    cut = tmp / "cut.vrr"
    shutil.copy(rec, cut)
    os.truncate(cut, hsize + 10 * frame + frame // 2)  # mid-epoch 10
    r = process(d, cut, tmp / "cut.h5")
    assert r.returncode == 0, (r.stdout, r.stderr)
    with h5py.File(tmp / "cut.h5", "r") as f:
        assert list(f["epoch"][:]) == list(range(10))
    # an unfinished recording (epoch count 0 in its header) too
    with open(cut, "r+b") as f:
        f.seek(HEADER_EPOCHS)
        f.write(b"\0" * 8)
    r = process(d, cut, tmp / "cut2.h5")
    assert r.returncode == 0, (r.stdout, r.stderr)
    with h5py.File(tmp / "cut2.h5", "r") as f:
        assert list(f["epoch"][:]) == list(range(10))


def test_a_damaged_epoch_stops_or_is_skipped_by_name(recorded):
    d, rec, _, tmp, _ = recorded
    hsize, frame, _ = frames(rec)
    bad = tmp / "bad.vrr"
    shutil.copy(rec, bad)
    with open(bad, "r+b") as f:
        at = hsize + 5 * frame + 4096 + 1000
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x40]))
    r = process(d, bad, tmp / "stop.h5")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "CRC-32C mismatch in epoch 5" in r.stderr, r.stderr
    r = process(d, bad, tmp / "skip.h5", "--on-crc-error", "skip")
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "CRC-32C mismatch in epoch 5" in r.stderr, r.stderr
    with h5py.File(tmp / "skip.h5", "r") as f:
        got = list(f["epoch"][:])
    assert 5 not in got and 4 in got and 6 in got, got


def test_names_other_than_plain_file_names_are_refused(recorded):
    d = recorded[0]
    with Wire(ctl_path(d.run_dir, d.instance)) as w:
        for name in ("../x", "/tmp/x", ".hidden", "a/b", "", "sp ace", "x" * 80):
            r = w.request({"op": "record_start", "raw": True, "name": name, "epochs": 1})
            assert not r["ok"] and "not allowed" in r["error"], (name, r)
        r = w.request({"op": "record_start", "raw": True, "name": "ok", "bogus": 1})
        assert not r["ok"] and "unknown field 'bogus'" in r["error"], r
        r = w.request({"op": "record_start", "raw": True, "name": "run1", "epochs": 1})
        assert not r["ok"] and "exists" in r["error"], r  # never over an existing recording
        r = w.request({"op": "record_stop"})
        assert not r["ok"] and "no raw recording" in r["error"], r


def test_record_start_and_stop_over_the_control_socket(recorded):
    d, _, _, tmp, _ = recorded
    with Wire(ctl_path(d.run_dir, d.instance)) as w:
        r = w.request({"op": "record_start", "raw": True, "name": "ctl-1.a"})
        assert r["ok"], r
        deadline = time.monotonic() + TIMEOUT
        while status(d)["recording"]["epochs_written"] < 3:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert w.request({"op": "record_stop"})["ok"]
    rec = wait_recording_done(d)
    assert rec["name"] == "ctl-1.a" and rec["epochs_written"] >= 3
    r = process(d, rec["file"], tmp / "ctl.h5")
    assert r.returncode == 0, (r.stdout, r.stderr)


def mount_tmpfs(path, size):
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s" % size, "tmpfs", str(path)],
                       capture_output=True, text=True)
    if r.returncode:
        pytest.skip("cannot mount a small tmpfs: " + r.stderr.strip())


def test_a_full_disk_stops_the_recording_never_acquisition(bin_dir, tmp_path):
    small = tmp_path / "small"
    mount_tmpfs(small, "2m")  # 13 frames of 151552 bytes fit, then the disk is full
    try:
        d = raw_daemon(bin_dir, small, name="full", epochs=1000)
        try:
            rec = wait_recording_done(d)
            assert rec["failed"] and "disk is full" in rec["error"], rec
            assert 5 <= rec["epochs_written"] < 1000, rec
            st = status(d)
            assert sum(st["drops"].values()) == 0, st["drops"]
            d.one_volume(TIMEOUT)  # the daemon goes on
            r = process(d, rec["file"], tmp_path / "full.h5")
            assert r.returncode == 0, (r.stdout, r.stderr)
            with h5py.File(tmp_path / "full.h5", "r") as f:
                assert f["epoch"].shape[0] == rec["epochs_written"]
        finally:
            d.close()
    finally:
        subprocess.run(["umount", str(small)])


def test_record_min_free_gb_refuses_and_stops_before_the_disk_fills(bin_dir, tmp_path):
    small = tmp_path / "small"
    mount_tmpfs(small, "4m")
    try:
        d = raw_daemon(bin_dir, small)
        try:
            d.cfg["record"]["min_free_gb"] = 0.0025  # 2.5 MB of the 4 MiB stay free
            d.restart(d.cfg)
            with Wire(ctl_path(d.run_dir, d.instance)) as w:
                r = w.request({"op": "record_start", "raw": True, "name": "mf"})
                assert r["ok"], r
            rec = wait_recording_done(d)
            assert rec["failed"] and "min_free_gb" in rec["error"], rec
            free = shutil.disk_usage(small).free
            assert free >= 2.5e6, free
            d.cfg["record"]["min_free_gb"] = 1000
            d.restart(d.cfg)
            with Wire(ctl_path(d.run_dir, d.instance)) as w:
                r = w.request({"op": "record_start", "raw": True, "name": "mf2"})
            assert not r["ok"] and "min_free_gb" in r["error"], r
        finally:
            d.close()
    finally:
        subprocess.run(["umount", str(small)])


# ---- volrec record --raw ---------------------------------------------------------------------


def test_record_raw_n_epochs_then_the_file_processes(recorded):
    d, _, _, tmp, _ = recorded
    r = d.volrec("record", "--raw", "cli-n", "-n", "7")
    assert r.returncode == 0, (r.stdout, r.stderr)
    f = pathlib.Path(d.cfg["record"]["dir"]) / "cli-n.vrr"
    assert r.stdout.startswith(f"{f}: 7 epochs, 0 left out, "), r.stdout
    assert "(epochs reached)" in r.stdout, r.stdout
    assert frames(f)[2] == 7
    p = process(d, f, tmp / "cli-n.h5")
    assert p.returncode == 0, (p.stdout, p.stderr)
    with h5py.File(tmp / "cli-n.h5", "r") as h:
        e = [int(x) for x in h["epoch"][:]]
    assert len(e) == 7 and e == list(range(e[0], e[0] + 7)), e


def test_export_processes_a_raw_recording_with_its_own_configuration(recorded):
    """volrec export REC.vrr: the volumes volrec process --source REC makes, in the format the
    suffix names (read back by nibabel and tifffile), and nothing left beside the output."""
    d, _, _, tmp, _ = recorded
    r = d.volrec("record", "--raw", "exp", "-n", "4")
    assert r.returncode == 0, (r.stdout, r.stderr)
    rec = pathlib.Path(d.cfg["record"]["dir"]) / "exp.vrr"
    p = process(d, rec, tmp / "exp.h5")
    assert p.returncode == 0, (p.stdout, p.stderr)
    with h5py.File(tmp / "exp.h5", "r") as h:
        want = h["volumes"][:]  # [t][y][x][z]
    assert want.shape[0] == 4 and want.std() > 0
    out = tmp / "exp-out"
    out.mkdir()
    e = subprocess.run([str(d.bin / "volrec"), "export", str(rec), "-o", str(out / "v.ome.tif")],
                       capture_output=True, text=True, timeout=300)
    assert e.returncode == 0, (e.stdout, e.stderr)
    assert "is a raw recording: processing it" in e.stderr, e.stderr
    tifffile = pytest.importorskip("tifffile")
    got = tifffile.imread(str(out / "v.ome.tif"))
    assert got.size == want.size, (got.shape, want.shape)
    # the same voxels whatever axis order the reader gives (NIfTI below checks the order)
    assert np.array_equal(np.sort(got, axis=None), np.sort(want, axis=None))
    e = subprocess.run([str(d.bin / "volrec"), "export", str(rec), "-o", str(out / "v.nii"),
                        "--series"], capture_output=True, text=True, timeout=300)
    assert e.returncode == 0, (e.stdout, e.stderr)
    nibabel = pytest.importorskip("nibabel")
    img = np.asanyarray(nibabel.load(str(out / "v.nii")).dataobj)
    assert np.array_equal(img, want.transpose(3, 2, 1, 0))
    assert sorted(x.name for x in out.iterdir()) == ["v.nii", "v.ome.tif"]
    # an existing output without -f: refused before anything is processed
    e = subprocess.run([str(d.bin / "volrec"), "export", str(rec), "-o", str(out / "v.nii")],
                       capture_output=True, text=True, timeout=300)
    assert e.returncode == 1 and "exists" in e.stderr, (e.returncode, e.stderr)
    assert "processing it" not in e.stderr
    # a recording that is not one: the helper's precise message, nothing written
    bad = tmp / "bad.vrr"
    bad.write_bytes(b"VOLRECRP" + b"\0" * 100)
    e = subprocess.run([str(d.bin / "volrec"), "export", str(bad), "-o", str(out / "b.nii")],
                       capture_output=True, text=True, timeout=300)
    assert e.returncode != 0 and "processing " in e.stderr, e.stderr
    assert sorted(x.name for x in out.iterdir()) == ["v.nii", "v.ome.tif"]


def test_record_raw_seconds_and_a_trailing_vrr(recorded):
    d = recorded[0]
    r = d.volrec("record", "--raw", "cli-s.vrr", "-s", "0.5")
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "cli-s.vrr: " in r.stdout and "(seconds reached)" in r.stdout, r.stdout
    assert not (pathlib.Path(d.cfg["record"]["dir"]) / "cli-s.vrr.vrr").exists()


def test_record_raw_on_a_terminal_shows_progress_and_ctrl_c_stops_it(recorded):
    d = recorded[0]
    rc, out, _ = run_on_pty([str(d.bin / "volrec"), "record", "--raw", "cli-int", "-i",
                             d.instance, "-r", str(d.run_dir)], TIMEOUT,
                            interrupt_on=rb"cli-int: [0-9.]+ MB, [0-9.]+ MB/s, [1-9][0-9]* epochs, "
                                         rb"0 left out")
    assert rc == 0, out
    assert re.search(r"cli-int\.vrr: [1-9][0-9]* epochs, 0 left out, .*\(record_stop\)", out), out
    rec = status(d)["recording"]
    assert rec["state"] == "finished" and rec["name"] == "cli-int", rec
    assert frames(rec["file"])[2] == rec["epochs_written"]


def test_record_raw_errors_are_clear(recorded):
    d = recorded[0]
    r = d.volrec("record", "--raw", "/tmp/x")
    assert r.returncode == 2 and "a NAME, not a path" in r.stderr, r.stderr
    r = d.volrec("record", "--raw", "x", "-o", "x.h5")
    assert r.returncode == 2 and "record.dir" in r.stderr, r.stderr
    r = d.volrec("record", "--raw", "x", "-w", "5")
    assert r.returncode == 2 and "--restart-wait are for HDF5" in r.stderr, r.stderr
    r = d.volrec("record", "--raw", "x", "-n", "3", "-s", "1")
    assert r.returncode == 2 and "not both" in r.stderr, r.stderr
    r = d.volrec("record", "--raw", ".x")
    assert r.returncode == 5 and "not allowed" in r.stderr, r.stderr
    r = d.volrec("record", "--raw", "run1")
    assert r.returncode == 5 and "run1.vrr exists" in r.stderr, r.stderr
    # one at a time: a second while the first records
    p = d.volrec_popen("record", "--raw", "cli-busy")
    try:
        deadline = time.monotonic() + TIMEOUT
        while status(d)["recording"].get("name") != "cli-busy":
            assert time.monotonic() < deadline and p.poll() is None, p.communicate()
            time.sleep(0.1)
        r = d.volrec("record", "--raw", "cli-busy2", "-n", "1")
        assert r.returncode == 5 and "is in progress" in r.stderr, r.stderr
        # volrec status shows it
        s = d.volrec("status")
        assert re.search(r"recording cli-busy recording: \S+cli-busy\.vrr, [0-9.]+ MB, "
                         r"[0-9.]+ MB/s, \d+ epochs, 0 left out", s.stdout), s.stdout
    finally:
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=TIMEOUT)
    assert p.returncode == 0, (out, err)
    assert "(record_stop)" in out, out


def test_record_raw_without_a_daemon_or_record_dir_or_free_space(bin_dir, tmp_path):
    r = subprocess.run([str(bin_dir / "volrec"), "record", "--raw", "x", "-i", "nobody",
                        "-r", str(tmp_path)], capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 3, r.stderr
    d = raw_daemon(bin_dir, tmp_path)
    try:
        d.cfg["record"]["dir"] = str(tmp_path / "none")
        d.restart(d.cfg)
        r = d.volrec("record", "--raw", "x", "-n", "1")
        assert r.returncode == 5, r.stderr
        assert "record.dir %s: No such file or directory (record.dir in the configuration" % (
            tmp_path / "none") in r.stderr, r.stderr
        d.cfg["record"]["dir"] = str(tmp_path)
        d.cfg["record"]["min_free_gb"] = 1e8  # more than any disk here
        d.restart(d.cfg)
        r = d.volrec("record", "--raw", "x", "-n", "1")
        assert r.returncode == 5 and "record.min_free_gb" in r.stderr, r.stderr
        assert not (tmp_path / "x.vrr").exists()
        s = d.volrec("status")
        assert "recording none" in s.stdout, s.stdout
    finally:
        d.close()


# ---- reloads (docs/recording.md, "Reloads") ------------------------------------------------

def wait_status(d, cond, what):
    deadline = time.monotonic() + TIMEOUT
    while True:
        rec = status(d)["recording"]
        if cond(rec):
            return rec
        assert time.monotonic() < deadline, (what, rec, d.log_text())
        time.sleep(0.1)


def test_a_structural_reload_ends_a_recording_whole_and_status_keeps_it(bin_dir, tmp_path):
    d = raw_daemon(bin_dir, tmp_path)
    try:
        p = d.volrec_popen("record", "--raw", "during", "-n", "100000")
        wait_status(d, lambda r: r.get("name") == "during" and r["epochs_written"] >= 3,
                    "3 epochs written")
        d.cfg["output"] = {"slots": 5}  # structural
        d.write(d.cfg)
        r = d.volrec("reload")
        assert r.returncode == 0, (r.stdout, r.stderr)
        out, err = p.communicate(timeout=TIMEOUT)
        assert p.returncode == 1, (out, err)
        assert "(structural reload)" in out, (out, err)
        assert "a structural reload of volrecd ended it" in err, err
        rec = status(d)["recording"]
        assert rec["state"] == "finished" and rec["end"] == "structural reload", rec
        assert not rec["failed"] and rec["skipped_epochs"] == 0, rec
        hsize, frame, n = frames(rec["file"])
        assert n == rec["epochs_written"] >= 3
        assert os.path.getsize(rec["file"]) == hsize + n * frame
        # and a new one can start on the rebuilt pipeline
        r = d.volrec("record", "--raw", "after", "-n", "2")
        assert r.returncode == 0, (r.stdout, r.stderr)
    finally:
        d.close()


def test_record_name_on_reloads_never_replaces_and_a_refused_reload_keeps_recording(bin_dir,
                                                                                   tmp_path):
    d = raw_daemon(bin_dir, tmp_path, name="head", epochs=3)
    try:
        wait_status(d, lambda r: r.get("name") == "head" and r["state"] == "finished",
                    "head recorded")
        size = os.path.getsize(tmp_path / "head.vrr")
        # the same record.name over a structural reload: the recording made already
        d.cfg["output"] = {"slots": 5}
        d.write(d.cfg)
        r = d.volrec("reload")
        assert r.returncode == 0, (r.stdout, r.stderr)
        rec = status(d)["recording"]
        assert rec["name"] == "head" and rec["state"] == "finished", rec
        assert os.path.getsize(tmp_path / "head.vrr") == size
        # another record.name: recorded from the rebuilt pipeline's first epoch
        d.cfg["record"].update(name="other", epochs=0)
        d.write(d.cfg)
        r = d.volrec("reload")
        assert r.returncode == 0, (r.stdout, r.stderr)
        wait_status(d, lambda r: r.get("name") == "other" and r["epochs_written"] >= 2,
                    "other recording")
        # back to an existing name: refused before anything stops
        d.cfg["record"]["name"] = "head"
        d.cfg["output"] = {"slots": 6}
        d.write(d.cfg)
        r = d.volrec("reload")
        assert r.returncode == 5, (r.stdout, r.stderr)
        assert "head.vrr exists (a recording is never replaced" in r.stderr, r.stderr
        was = status(d)["recording"]["epochs_written"]
        rec = wait_status(d, lambda r: r["epochs_written"] > was + 2, "other goes on")
        assert rec["name"] == "other" and rec["state"] == "recording", rec
        assert status(d)["geometry"]["slots"] == 5
        assert os.path.getsize(tmp_path / "head.vrr") == size
        # a name that is a path: refused the same way
        d.cfg["record"]["name"] = "../x"
        d.write(d.cfg)
        r = d.volrec("reload")
        assert r.returncode == 5 and "is not allowed" in r.stderr, r.stderr
        assert d.volrec("record", "--raw", "x", "-n", "1").returncode == 5  # other is busy
        with Wire(ctl_path(d.run_dir, d.instance)) as w:
            assert w.request({"op": "record_stop"})["ok"]
        rec = wait_recording_done(d)
        assert rec["name"] == "other" and rec["end"] == "record_stop", rec
    finally:
        d.close()


# ---- calibration from volrec's own recordings (docs/calibration.md) -------------------------

def test_calibration_walkthrough_with_volrecs_own_recordings(bin_dir, tmp_path):
    """docs/calibration.md, "The whole procedure with volrec alone", as written there."""
    d = Daemon.__new__(Daemon)
    Daemon.__init__(d, bin_dir)
    rec_dir, cal = tmp_path / "rec", tmp_path / "cal"
    rec_dir.mkdir()
    cal.mkdir()
    try:
        d.cfg.update(geometry={"samples_per_ascan": 512, "ascans_per_bscan": 16,
                               "bscans_per_volume": 4, "stride": [1, 1]},
                     reconstruct={"mode": "none"},
                     record={"dir": str(rec_dir), "min_free_gb": 0})
        d.cfg["source"]["synth"] = {"phantom": "mirror", "mirror_mm": 1.0}
        d.cfg.pop("view", None)
        d.restart(d.cfg)
        for name, synth in (("mirror-1.0mm", None),
                            ("mirror-0.6mm", {"phantom": "mirror", "mirror_mm": 0.6}),
                            ("blocked", {"phantom": "blocked"}),
                            ("sample", {"phantom": "tilted"})):
            if synth:
                d.cfg["source"]["synth"] = synth
                d.write(d.cfg)
                r = d.volrec("reload")
                assert r.returncode == 0, (r.stdout, r.stderr)
            r = d.volrec("record", "--raw", name, "-n", "20")
            assert r.returncode == 0 and "20 epochs, 0 left out" in r.stdout, (r.stdout,
                                                                                r.stderr)
        vol = lambda *a: subprocess.run([str(bin_dir / "volrec"), *map(str, a)],
                                        capture_output=True, text=True, timeout=300,
                                        cwd=tmp_path)
        r = vol("calibrate", "--reference", "-c", d.config, "-o", cal, "--check",
                rec_dir / "sample.vrr", rec_dir / "blocked.vrr")
        assert r.returncode == 0, (r.stdout, r.stderr)
        assert "blocked.vrr: raw recording, 512 samples x 16 A-scans" in r.stdout, r.stdout
        r = vol("calibrate", "--klin", "-c", d.config, "-o", cal, rec_dir / "mirror-1.0mm.vrr",
                rec_dir / "mirror-0.6mm.vrr")
        assert r.returncode == 0, (r.stdout, r.stderr)
        m = re.search(r"FWHM ([0-9.]+) bins at bin \d+ before, ([0-9.]+) bins at bin 128 after",
                      r.stdout)
        assert m and float(m[2]) < 3 < 10 < float(m[1]), r.stdout
        for t in ("reference.txt", "resample_table.txt", "dispersion_table.txt"):
            shutil.copy(cal / t, d.config.parent / t)
        d.cfg["preprocess"] = {"background": {"mode": "reference", "reference": "reference.txt"},
                               "resample": {"method": "cubic", "table": "resample_table.txt"},
                               "dispersion": {"table": "dispersion_table.txt"}}
        d.write(d.cfg)
        r = d.volrec("reload")
        assert r.returncode == 0, (r.stdout, r.stderr)
        # the mirror recorded before, processed again with the new configuration: sharp at
        # bin 128 (1 mm), where the configuration it was recorded with leaves it spread
        out = {}
        for name, extra in (("before", ()), ("after", ("-c", d.config))):
            r = vol("process", *extra, "--source", rec_dir / "mirror-1.0mm.vrr", "-o",
                    tmp_path / f"{name}.h5")
            assert r.returncode == 0, (r.stdout, r.stderr)
            with h5py.File(tmp_path / f"{name}.h5", "r") as f:
                out[name] = f["volumes"][0].astype(float).mean(axis=(0, 1))
        a, b = out["after"], out["before"]
        assert a[16:].argmax() + 16 == 128, a.argmax()
        assert (a[16:] > a.max() - 6).sum() < (b[16:] > b[16:].max() - 6).sum()
    finally:
        d.close()


def test_a_recording_of_repeats_says_m_and_processes_like_live(bin_dir, tmp_path):
    """geometry.repeats: 2 end to end (docs/algorithms.md §5): the synthetic scanner delivers two
    repeats of each position, status shows M, the recording's header and metadata say M, its
    frames hold ny x M B-scans, and processing it gives the live volumes bit for bit."""
    d = Daemon.__new__(Daemon)
    Daemon.__init__(d, bin_dir)
    rec_dir = tmp_path / "rec"
    rec_dir.mkdir()
    try:
        d.cfg["geometry"]["repeats"] = 2
        d.cfg["pipeline"]["ring_bscans"] = 96
        # recorded from the first epoch, so that processing it has the live history
        d.cfg["record"] = {"dir": str(rec_dir), "min_free_gb": 0, "name": "rep", "epochs": 60}
        d.restart(d.cfg)
        st = status(d)
        assert st["geometry"]["repeats"] == 2, st["geometry"]
        r = d.volrec("status")
        assert "12 x 12 A-scans (each B-scan 2 times) of 512 u16 samples" in r.stdout, r.stdout
        r = d.volrec("record", "-o", str(tmp_path / "live.h5"), "-n", "8")
        assert r.returncode == 0, (r.stdout, r.stderr)
        with h5py.File(tmp_path / "live.h5", "r") as h:
            assert int(h.attrs["repeats"]) == 2
        rec = wait_recording_done(d)
        assert rec["epochs_written"] == 60 and rec["skipped_epochs"] == 0, rec
        f = rec_dir / "rep.vrr"
        head = f.read_bytes()[:64]
        hsize, k, nx, ny = struct.unpack_from("<IIII", head, 12)[0], *struct.unpack_from(
            "<III", head, 20)
        assert struct.unpack_from("<I", head, 56)[0] == 2
        meta_len = struct.unpack_from("<I", head, 52)[0]
        assert b"repeats: 2\n" in f.read_bytes()[64:64 + meta_len]
        epoch_bytes = ny * 2 * nx * k * 2  # u16, two repeats of each position
        frame = 4096 + (epoch_bytes + 4095) // 4096 * 4096
        assert f.stat().st_size == hsize + 60 * frame
        p = process(d, f, tmp_path / "again.h5")
        assert p.returncode == 0, (p.stdout, p.stderr)
        with h5py.File(tmp_path / "live.h5", "r") as a, h5py.File(tmp_path / "again.h5") as b:
            ea, eb = list(a["epoch"][:]), list(b["epoch"][:])
            assert eb == list(range(60)), eb[:5]
            common = [e for e in ea if e in eb]
            assert len(common) >= 4, (ea, eb)
            for e in common:
                assert np.array_equal(a["volumes"][ea.index(e)], b["volumes"][eb.index(e)]), e
        # a configuration of another M refuses the recording, naming both
        one = dict(d.cfg, geometry=dict(d.cfg["geometry"], repeats=1))
        (tmp_path / "one.yaml").write_text(json.dumps(one) + "\n")
        p = process(d, f, tmp_path / "x.h5", "-c", str(tmp_path / "one.yaml"))
        assert p.returncode != 0
        assert "file has repeats 2" in p.stderr and "geometry.repeats is 1" in p.stderr, p.stderr
    finally:
        d.close()
