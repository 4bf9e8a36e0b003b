# SPDX-License-Identifier: MIT
"""Processed recordings written by volrecd itself (docs/recording.md): record_start with raw
false writes every volume the daemon publishes into <record.dir>/NAME.h5, the file `volrec
record` writes, by the daemon's own thread: the same volumes bit for bit (channels included),
the generations of live changes, names and limits checked, ended by count, seconds, record_stop,
the daemon's stop or a full disk; `volrec record --in-daemon` asks for one and follows it."""
import os
import re
import signal
import subprocess
import time

import h5py
import numpy as np
import pytest

from ctlwire import Wire, ctl_path
from ptykit import run_on_pty
from test_raw_record import mount_tmpfs, raw_daemon, status
from test_tools import STRICT, TIMEOUT, Daemon

COLUMNS = ("sequence", "session", "volume_id", "epoch", "offset", "t_first_ns", "t_last_ns",
           "t_publish_ns", "latency_ns", "flags", "generation")


def request(d, req):
    with Wire(ctl_path(d.run_dir, d.instance)) as w:
        return w.request(req)


def processed(d):
    return status(d)["recording"]["processed"]


def wait_processed(d, cond, what):
    deadline = time.monotonic() + TIMEOUT
    while True:
        rec = processed(d)
        if cond(rec):
            return rec
        assert time.monotonic() < deadline, (what, rec, d.log_text())
        time.sleep(0.1)


def wait_finished(d, name):
    return wait_processed(d, lambda r: r.get("name") == name and r["state"] == "finished",
                          name + " finished")


def published(d):
    return status(d)["volumes_published"]


def set_and_wait(d, assignment, volumes=4):
    """volrec set ASSIGNMENT, then until `volumes` more volumes are out."""
    r = d.volrec("set", assignment)
    assert r.returncode == 0, r.stderr
    n0, deadline = published(d), time.monotonic() + TIMEOUT
    while published(d) < n0 + volumes:
        assert time.monotonic() < deadline, "the daemon stopped publishing"
        time.sleep(0.05)


def check_consecutive(f):
    """Every volume the daemon published in the window, in order, none left out."""
    ids = f["volume_id"][:].astype(np.int64)
    seqs = f["sequence"][:].astype(np.int64)
    assert len(ids) >= 2, ids
    assert (np.diff(ids) == 1).all() and (np.diff(seqs) == 1).all(), (ids, seqs)
    assert len(set(f["session"][:])) == 1
    assert f["missed"].shape[0] == 0 and int(f.attrs["missed_volumes"]) == 0


def same_volumes(daemon_file, client_file, datasets):
    """Every volume of the client's file is in the daemon's, bit for bit, with its columns."""
    with h5py.File(daemon_file, "r") as a, h5py.File(client_file, "r") as b:
        ia = {int(v): i for i, v in enumerate(a["volume_id"][:])}
        ib = list(b["volume_id"][:])
        common = [v for v in ib if int(v) in ia]
        assert len(common) == len(ib) >= 3, (sorted(ia), ib)
        for k, v in enumerate(ib):
            i = ia[int(v)]
            for name in datasets:
                va, vb = a[name][i], b[name][k]
                assert np.array_equal(va, vb), "volume %d %s: %d voxels differ" % (
                    v, name, int((va != vb).sum()))
            for col in COLUMNS:
                assert np.array_equal(a[col][i], b[col][k]), (v, col, a[col][i], b[col][k])
        for name in datasets:
            for key in ("units", "channel", "voxel_size_um", "value_range"):
                if key in b[name].attrs:
                    x, y = a[name].attrs[key], b[name].attrs[key]
                    same = np.array_equal(x, y, equal_nan=True) if np.asarray(x).dtype.kind \
                        == "f" else np.array_equal(x, y)
                    assert same, (name, key, x, y)
        if "channel_range" in b:
            for k, v in enumerate(ib):
                assert np.array_equal(a["channel_range"][ia[int(v)]], b["channel_range"][k])


@pytest.fixture(scope="module")
def proc(bin_dir, tmp_path_factory):
    """One daemon, and one processed recording of it ("win") during which `volrec record` wrote
    8 volumes and two live changes were made."""
    tmp = tmp_path_factory.mktemp("proc")
    rec_dir = tmp / "rec"
    rec_dir.mkdir()
    d = raw_daemon(bin_dir, rec_dir)
    try:
        r = request(d, {"op": "record_start", "raw": False, "name": "win"})
        assert r["ok"], r
        wait_processed(d, lambda r: r["volumes_written"] >= 2, "2 volumes written")
        client = tmp / "client.h5"
        r = d.volrec("record", "-o", str(client), "-n", "8")
        assert r.returncode == 0, (r.stdout, r.stderr)
        set_and_wait(d, "preprocess.db_range=[70, 100]")
        set_and_wait(d, "reconstruct.mode=cumulative")
        r = request(d, {"op": "record_stop", "raw": False})
        assert r["ok"], r
        rec = wait_finished(d, "win")
        yield d, rec, client, tmp
    finally:
        d.close()


def test_the_daemons_file_holds_the_volumes_volrec_record_read_bit_for_bit(proc):
    d, rec, client, _ = proc
    assert rec["file"] == str(rec["file"]).rsplit("/", 1)[0] + "/win.h5"
    assert rec["end"] == "record_stop" and not rec["failed"], rec
    if STRICT:
        assert rec["skipped_volumes"] == 0, rec
    same_volumes(rec["file"], client, ["volumes"])
    with h5py.File(rec["file"], "r") as f:
        if STRICT:
            check_consecutive(f)
        assert f["volumes"].shape[0] == rec["volumes_written"]
        assert rec["bytes"] == rec["volumes_written"] * 36 * 36 * 256
        assert f.attrs["end"] in (b"record_stop", "record_stop")
        assert int(f.attrs["complete"]) == (1 if rec["skipped_volumes"] == 0 else 0)
        assert f.attrs["recorded_by"] in (b"volrecd", "volrecd")
        yaml = f.attrs["config_yaml"]
        text = yaml if isinstance(yaml, str) else yaml.decode()
        assert "instance: \"%s\"" % d.instance in text, text[:200]


def test_the_generations_say_which_volume_had_which_live_values(proc):
    rec = proc[1]
    with h5py.File(rec["file"], "r") as f:
        gen, idx = f["generation"][:], f["generation_index"][:]
        rows = [__import__("json").loads(t) for t in f["generations"][:]]
        numbers = list(f["generation_numbers"][:])
    assert numbers == [1, 2, 3], numbers
    assert list(np.unique(gen)) == [1, 2, 3] and (np.diff(gen.astype(int)) >= 0).all()
    assert all(numbers[i] == g for g, i in zip(gen, idx))
    seen = [(r["preprocess.db_range"], r["reconstruct.mode"]) for r in rows]
    assert seen == [([0, 100], "noncumulative"), ([70, 100], "noncumulative"),
                    ([70, 100], "cumulative")], seen


def test_names_existing_files_and_wrong_fields_are_refused(proc):
    d = proc[0]
    for name in ("../x", "/tmp/x", ".hidden", "a/b", "", "sp ace", "x" * 80):
        r = request(d, {"op": "record_start", "raw": False, "name": name, "volumes": 1})
        assert not r["ok"] and "not allowed" in r["error"], (name, r)
    r = request(d, {"op": "record_start", "raw": False, "name": "win", "volumes": 1})
    assert not r["ok"] and "win.h5 exists (a recording is never replaced" in r["error"], r
    r = request(d, {"op": "record_start", "raw": False, "name": "e", "epochs": 3})
    assert not r["ok"] and "epochs with raw false" in r["error"], r
    r = request(d, {"op": "record_start", "raw": True, "name": "e", "volumes": 3})
    assert not r["ok"] and "volumes with raw true" in r["error"], r
    r = request(d, {"op": "record_start", "raw": False, "name": "e", "volumes": 3,
                    "seconds": 1})
    assert not r["ok"] and "volumes and seconds given together" in r["error"], r
    r = request(d, {"op": "record_start", "raw": "no", "name": "e"})
    assert not r["ok"] and "raw must be true" in r["error"], r
    r = request(d, {"op": "record_stop", "raw": False})
    assert not r["ok"] and "no processed recording in progress" in r["error"], r
    r = request(d, {"op": "record_stop", "raw": 0})
    assert not r["ok"] and "raw must be true" in r["error"], r
    assert not os.path.exists(os.path.join(d.cfg["record"]["dir"], "e.h5"))


def test_in_daemon_n_volumes_and_s_seconds(proc):
    d = proc[0]
    r = d.volrec("record", "--in-daemon", "cli-n", "-n", "5")
    assert r.returncode == 0, (r.stdout, r.stderr)
    f = os.path.join(d.cfg["record"]["dir"], "cli-n.h5")
    assert r.stdout.startswith(f"{f}: 5 volumes, 0 left out, "), r.stdout
    assert "(volumes reached)" in r.stdout, r.stdout
    with h5py.File(f, "r") as h:
        assert h["volumes"].shape == (5, 36, 36, 256)
        ids = h["volume_id"][:].astype(np.int64)
        assert (np.diff(ids) == 1).all(), ids
        assert int(h.attrs["complete"]) == 1 and int(h.attrs["volumes"]) == 5
    r = d.volrec("record", "--in-daemon", "cli-s.h5", "-s", "0.5")
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "cli-s.h5: " in r.stdout and "(seconds reached)" in r.stdout, r.stdout
    assert not os.path.exists(os.path.join(d.cfg["record"]["dir"], "cli-s.h5.h5"))


def test_in_daemon_errors_are_clear(proc):
    d = proc[0]
    r = d.volrec("record", "--in-daemon", "/tmp/x")
    assert r.returncode == 2 and "a NAME, not a path" in r.stderr and "NAME.h5" in r.stderr
    r = d.volrec("record", "--in-daemon", "x", "-n", "3", "-s", "1")
    assert r.returncode == 2 and "-n VOLUMES or -s SECONDS, not both" in r.stderr, r.stderr
    r = d.volrec("record", "--in-daemon", "x", "--raw", "y")
    assert r.returncode == 2 and "two recordings" in r.stderr, r.stderr
    r = d.volrec("record", "--in-daemon", "win")
    assert r.returncode == 5 and "win.h5 exists" in r.stderr, r.stderr


def test_raw_and_processed_record_at_once_and_status_shows_both(proc):
    d = proc[0]
    p = d.volrec_popen("record", "--in-daemon", "both-p")
    try:
        wait_processed(d, lambda r: r.get("name") == "both-p" and r["volumes_written"] >= 2,
                       "both-p recording")
        r = d.volrec("record", "--raw", "both-r", "-n", "3")
        assert r.returncode == 0, (r.stdout, r.stderr)
        r = d.volrec("record", "--in-daemon", "both-q", "-n", "1")
        assert r.returncode == 5 and "a processed recording" in r.stderr and \
            "is in progress" in r.stderr, r.stderr
        s = d.volrec("status")
        assert re.search(r"processed recording both-p recording: \S+both-p\.h5, [0-9.]+ MB, "
                         r"[0-9.]+ MB/s, \d+ volumes, \d+ left out", s.stdout), s.stdout
        assert re.search(r"  recording both-r finished \(epochs reached\)", s.stdout), s.stdout
    finally:
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=TIMEOUT)
    assert p.returncode in ((0,) if STRICT else (0, 4)), (out, err)
    assert "both-p.h5: " in out and "(record_stop)" in out, out


def test_in_daemon_on_a_terminal_shows_progress_and_ctrl_c_stops_it(proc):
    d = proc[0]
    rc, out, _ = run_on_pty([str(d.bin / "volrec"), "record", "--in-daemon", "cli-int", "-i",
                             d.instance, "-r", str(d.run_dir)], TIMEOUT,
                            interrupt_on=rb"cli-int: [0-9.]+ MB, [0-9.]+ MB/s, [1-9][0-9]* "
                                         rb"volumes, \d+ left out")
    assert rc in ((0,) if STRICT else (0, 4)), out
    assert re.search(r"cli-int\.h5: [1-9][0-9]* volumes, \d+ left out, .*\(record_stop\)",
                     out), out
    rec = processed(d)
    assert rec["state"] == "finished" and rec["name"] == "cli-int", rec
    with h5py.File(rec["file"], "r") as f:
        assert f["volumes"].shape[0] == rec["volumes_written"]


def test_stopping_the_daemon_closes_the_file_whole(bin_dir, tmp_path):
    d = raw_daemon(bin_dir, tmp_path)
    try:
        r = request(d, {"op": "record_start", "raw": False, "name": "stopped"})
        assert r["ok"], r
        wait_processed(d, lambda r: r["volumes_written"] >= 3, "3 volumes")
        d.stop()
        with h5py.File(tmp_path / "stopped.h5", "r") as f:
            assert f.attrs["end"] in (b"volrecd stopping", "volrecd stopping")
            n = int(f.attrs["volumes"])
            assert n >= 3 and f["volumes"].shape[0] == n
    finally:
        d.close()


def test_min_free_gb_refuses_and_a_full_disk_stops_it_readable(bin_dir, tmp_path):
    small = tmp_path / "small"
    mount_tmpfs(small, "3m")  # about 8 volumes of 331776 bytes, then the disk is full
    try:
        d = raw_daemon(bin_dir, small)
        try:
            r = request(d, {"op": "record_start", "raw": False, "name": "full"})
            assert r["ok"], r
            rec = wait_finished(d, "full")
            assert rec["failed"] and rec["end"] == "disk full", rec
            assert rec["volumes_written"] >= 2, rec
            d.one_volume(TIMEOUT)  # the daemon goes on
            with h5py.File(small / "full.h5", "r") as f:
                assert f["volumes"].shape[0] == rec["volumes_written"]
                assert f["volume_id"].shape[0] == rec["volumes_written"]
            os.remove(small / "full.h5")
            d.cfg["record"]["min_free_gb"] = 1000
            d.restart(d.cfg)
            r = request(d, {"op": "record_start", "raw": False, "name": "mf"})
            assert not r["ok"] and "record.min_free_gb 1000" in r["error"], r
            assert not (small / "mf.h5").exists()
        finally:
            d.close()
    finally:
        subprocess.run(["umount", str(small)])


def test_a_flow_daemons_channels_are_recorded_as_volrec_record_reads_them(bin_dir, tmp_path):
    d = Daemon.__new__(Daemon)
    Daemon.__init__(d, bin_dir)
    try:
        d.cfg["geometry"]["repeats"] = 2
        d.cfg["pipeline"]["ring_bscans"] = 96
        d.cfg["output"]["channels"] = ["structure", "angio", "doppler"]
        d.cfg["record"] = {"dir": str(tmp_path), "min_free_gb": 0}
        d.restart(d.cfg)
        r = request(d, {"op": "record_start", "raw": False, "name": "flow"})
        assert r["ok"], r
        wait_processed(d, lambda r: r["volumes_written"] >= 1, "a volume")
        r = d.volrec("record", "-o", str(tmp_path / "client.h5"), "-n", "4")
        assert r.returncode == 0, (r.stdout, r.stderr)
        assert request(d, {"op": "record_stop", "raw": False})["ok"]
        rec = wait_finished(d, "flow")
        same_volumes(rec["file"], tmp_path / "client.h5", ["volumes", "angio", "doppler"])
        with h5py.File(rec["file"], "r") as f:
            assert f.attrs["channels"] in (b"structure,angio,doppler", "structure,angio,doppler")
    finally:
        d.close()


SLOW_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
/* A disk that stalls: every pwrite of VR_SLOW_BYTES or more (a volume's chunk) to a file whose
 * name ends in VR_SLOW_SUFFIX waits while the file VR_SLOW_GATE exists. */
static void slow(int fd, size_t n)
{
	const char *suffix = getenv("VR_SLOW_SUFFIX");
	char link[64], path[PATH_MAX];
	ssize_t len;

	if (!suffix || n < strtoul(getenv("VR_SLOW_BYTES"), NULL, 10))
		return;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	len = readlink(link, path, sizeof(path) - 1);
	if (len < (ssize_t)strlen(suffix))
		return;
	path[len] = 0;
	if (strcmp(path + len - strlen(suffix), suffix))
		return;
	while (access(getenv("VR_SLOW_GATE"), F_OK) == 0)
		nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
}

#define REAL(name) static __typeof__(name) *real; if (!real) real = dlsym(RTLD_NEXT, #name)
ssize_t pwrite(int fd, const void *b, size_t n, off_t o)
{ REAL(pwrite); slow(fd, n); return real(fd, b, n, o); }
ssize_t pwrite64(int fd, const void *b, size_t n, off_t o)
{ REAL(pwrite64); slow(fd, n); return real(fd, b, n, o); }
"""


@pytest.mark.skipif(os.environ.get("VOLREC_SANITIZER") == "address",
                    reason="LD_PRELOAD does not go with AddressSanitizer's runtime")
def test_a_disk_slower_than_the_daemon_leaves_whole_volumes_out_and_the_file_says_which(
        bin_dir, tmp_path):
    so, src = tmp_path / "slow.so", tmp_path / "slow.c"
    src.write_text(SLOW_C)
    r = subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(src), "-ldl"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    gate = tmp_path / "gate"
    env = dict(os.environ, LD_PRELOAD=str(so), VR_SLOW_SUFFIX="/slow.h5",
               VR_SLOW_BYTES=str(36 * 36 * 256), VR_SLOW_GATE=str(gate))
    d = Daemon.__new__(Daemon)
    Daemon.__init__(d, bin_dir, env=env)
    try:
        # 2 volumes queued at most, and the disk stalls until the gate goes
        d.cfg["record"] = {"dir": str(tmp_path / "rec"), "min_free_gb": 0, "queue_mb": 1}
        (tmp_path / "rec").mkdir()
        d.restart(d.cfg)
        gate.touch()
        p = d.volrec_popen("record", "--in-daemon", "slow", "-n", "12")
        try:
            wait_processed(d, lambda r: r.get("name") == "slow" and r["skipped_volumes"] >= 5,
                           "5 volumes left out while the disk stalls")
        finally:
            gate.unlink()
        out, err = p.communicate(timeout=TIMEOUT)
        assert p.returncode == 4, (out, err)
        assert "volumes left out (the disk fell behind; its /missed lists them)" in err, err
        rec = processed(d)
        assert rec["volumes_written"] == 12 and rec["skipped_volumes"] > 0, rec
        assert sum(status(d)["drops"].values()) == 0  # processing never waited
        with h5py.File(tmp_path / "rec" / "slow.h5", "r") as f:
            seqs = [int(s) for s in f["sequence"][:]]
            rows = [(int(m["first"]), int(m["last"]), int(m["reason"])) for m in f["missed"][:]]
            assert int(f.attrs["complete"]) == 0
            assert int(f.attrs["missed_volumes"]) == rec["skipped_volumes"]
            assert "3 left out" in str(f.attrs["missed_reasons"])
            ids = [int(v) for v in f["volume_id"][:]]
    finally:
        d.close()
    # every gap between the volumes written is one row of /missed (reason 3), and the ids
    # show the same gaps
    gaps = [(a + 1, b - 1, 3) for a, b in zip(seqs, seqs[1:]) if b != a + 1]
    assert gaps and rows == gaps, (seqs, rows)
    assert [b - a for a, b in zip(ids, ids[1:])] == [b - a for a, b in zip(seqs, seqs[1:])]
    assert sum(last - first + 1 for first, last, _ in rows) == rec["skipped_volumes"]


def test_a_structural_reload_ends_it_whole_and_a_live_one_does_not(bin_dir, tmp_path):
    d = raw_daemon(bin_dir, tmp_path)
    try:
        p = d.volrec_popen("record", "--in-daemon", "during")
        wait_processed(d, lambda r: r.get("name") == "during" and r["volumes_written"] >= 2,
                       "2 volumes written")
        set_and_wait(d, "preprocess.db_range=[60, 100]")  # live: it goes on
        assert processed(d)["state"] == "recording"
        d.cfg["output"] = {"slots": 5}  # structural
        d.write(d.cfg)
        r = d.volrec("reload")
        assert r.returncode == 0, (r.stdout, r.stderr)
        out, err = p.communicate(timeout=TIMEOUT)
        assert p.returncode == 1, (out, err)
        assert "(structural reload)" in out and "a structural reload of volrecd ended it" in err
        rec = processed(d)
        assert rec["state"] == "finished" and rec["end"] == "structural reload", rec
        with h5py.File(tmp_path / "during.h5", "r") as f:
            assert f.attrs["end"] in (b"structural reload", "structural reload")
            assert f["volumes"].shape[0] == rec["volumes_written"] >= 2
            assert list(f["generation_numbers"][:]) == [1, 2]
        # and a new one records from the rebuilt pipeline
        r = d.volrec("record", "--in-daemon", "after", "-n", "2")
        assert r.returncode == 0, (r.stdout, r.stderr)
    finally:
        d.close()
