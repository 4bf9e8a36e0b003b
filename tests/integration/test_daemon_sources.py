# SPDX-License-Identifier: MIT
"""volrecd when its source misbehaves: a replay file truncated, restored or rewritten under the
running daemon (by copy and zero-copy), a shim returning a positive value, an acquire() hung past
its timeout, a stop() hung past it, a shim whose texts are not UTF-8, and shim files that are not loadable (volrecd --check and start). Each is a
source fault or an error message, never a crash."""
import json
import os
import pathlib
import shutil
import signal
import subprocess
import time

import pytest

from test_daemon import TIMEOUT, daemons, shim_daemon  # noqa: F401  (fixtures used by name)
from test_daemon_zerocopy import replay_daemon


def env(zero_copy):
    return {} if zero_copy is None else {"VOLRECD_ZERO_COPY": zero_copy}


def published(d):
    return d.status()["volumes_published"]


def serving_shim(daemons, build_dir, **args):
    """A daemon on the fault shim with these args, serving, its first volume published."""
    d, control = shim_daemon(daemons, build_dir)
    d.cfg["source"]["shim"]["args"].update(args)
    d.write_config(d.cfg)
    d.serve()
    d.status(lambda m: m["volumes_published"] >= 1)
    return d, control


@pytest.mark.parametrize("zero_copy", [None, "0"])
def test_replay_file_truncated_under_the_daemon_is_a_fault_then_recovers(daemons, bin_dir,
                                                                         zero_copy):
    d = replay_daemon(daemons, bin_dir, **{"source.rate": 20}).serve(env(zero_copy))
    st = d.status(lambda m: m["volumes_published"] >= 2)
    assert st["source"]["acquisition"] == ("zero-copy" if zero_copy is None else "copy")
    path = pathlib.Path(d.cfg["source"]["replay"]["path"])
    original = path.read_bytes()
    # zero-copy: the kernel holds the truncation back until the daemon lets go of the file
    t0 = time.monotonic()
    os.truncate(path, 5000)
    assert time.monotonic() - t0 < 20
    ev = d.event("source_fault")
    want = ("another process opened the file for writing or truncated it"
            if zero_copy is None else "while being replayed")
    assert want in ev["message"] and str(path) in ev["message"], ev
    # the replay source names itself (and its file) once; the call it failed in comes first
    assert ev["message"].startswith(("acquire: replay ", "acquire_ref: replay ")), ev
    assert ev["message"].count(str(path)) == 1 and "source replay" not in ev["message"], ev
    st = d.status(lambda m: m["state"] == "degraded")
    assert st["faults"]["degraded"] is True
    # reopening fails, saying what is wrong with the file now
    st = d.status(lambda m: "reopening failed" in m["faults"]["message"])
    assert "truncated" in st["faults"]["message"], st["faults"]
    assert d.proc.poll() is None
    # restored: the daemon recovers on its own
    path.write_bytes(original)
    d.event("source_recovered")
    before = published(d)
    d.status(lambda m: m["state"] == "running" and m["volumes_published"] >= before + 2)
    assert f"acquisition: zero-copy" in d.log_text() or zero_copy == "0"
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0, d.log_text()[-3000:]


def test_volrec_sim_over_a_replayed_file_switches_the_daemon_to_it(daemons, bin_dir):
    d = replay_daemon(daemons, bin_dir, **{"source.rate": 20}).serve()
    d.status(lambda m: m["volumes_published"] >= 2)
    path = pathlib.Path(d.cfg["source"]["replay"]["path"])
    inode = path.stat().st_ino
    sim = json.loads(json.dumps(d.cfg))
    sim["source"] = {"type": "synth", "rate": 0, "synth": {"seed": 99}}
    (d.dir / "sim2.yaml").write_text(json.dumps(sim))
    r = subprocess.run([str(bin_dir / "volrec"), "sim", "-c", str(d.dir / "sim2.yaml"), "-o",
                        str(path), "-n", "9"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert path.stat().st_ino != inode  # a new file renamed over the old one
    assert not list(d.dir.glob("in.vrr.tmp-*"))
    ev = d.event("source_fault")
    assert "the path now names another file" in ev["message"], ev
    d.event("source_recovered")
    before = published(d)
    d.status(lambda m: m["state"] == "running" and m["volumes_published"] >= before + 2)
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0, d.log_text()[-3000:]


def test_shim_returning_a_positive_value_is_a_source_fault(daemons, build_dir):
    d, control = serving_shim(daemons, build_dir)
    control.write_text("return 5 3\n")
    ev = d.event("source_fault")
    assert ("shim fault-shim: acquire() returned 5: positive values are not allowed "
            "(0 or a negative errno)") in ev["message"], ev
    d.event("source_recovered")
    d.status(lambda m: m["state"] == "running" and m["drops"]["source_error"] == 3)
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0


def test_a_shims_error_names_the_shim_once_in_the_event_and_the_log(daemons, build_dir):
    # the shim's text names the shim ("fault shim: ..."): volrecd adds the call, not the name
    # again ("source fault-shim: acquire: fault shim: ..." before)
    d, control = serving_shim(daemons, build_dir)
    control.write_text("error 1\n")
    ev = d.event("source_fault")
    want = "acquire: fault shim: injected error (control file; 0 more)"
    assert ev["message"] == want, ev
    assert d.status(lambda m: m["state"] == "degraded")["faults"]["message"] == want
    assert f"warning: {want}" in d.log_text(), d.log_text()[-3000:]
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0


def test_an_acquire_hung_past_its_timeout_degrades_the_daemon_until_it_returns(daemons,
                                                                              build_dir):
    # a hung driver: acquire() blocks, ignoring its 300 ms timeout, until released below
    d, control = serving_shim(daemons, build_dir)
    control.write_text("hold\n")
    ev = d.event("source_fault")
    assert "source fault-shim: acquire() has not returned" in ev["message"], ev
    assert "after its timeout (300 ms)" in ev["message"], ev
    st = d.status(lambda m: m["state"] == "degraded")
    assert st["faults"]["source"] == 1, st["faults"]
    assert "acquire() has not returned" in st["faults"]["message"], st["faults"]
    # it returns with data: running again, no further fault
    control.write_text("ok\n")
    d.event("source_recovered")
    st = d.status(lambda m: m["state"] == "running")
    assert st["faults"]["source"] == 1 and st["drops"]["source_timeout"] == 0, st
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0


def test_status_is_utf8_when_the_shims_texts_are_not(daemons, build_dir):
    d, control = shim_daemon(daemons, build_dir)
    d.cfg["source"]["shim"]["args"].update({"device_hex": "41 ff c3 28 42", "text_hex": "fe"})
    d.write_config(d.cfg)
    d.serve()
    # wait_message decodes every status as strict UTF-8 JSON
    st = d.status(lambda m: m["volumes_published"] >= 1)
    assert st["source"]["device"] == "A\ufffd\ufffd(B", st["source"]
    control.write_text("error 2\n")
    ev = d.event("source_fault")
    assert "injected error" in ev["message"] and "\ufffd" in ev["message"], ev
    st = d.status(lambda m: m["state"] == "degraded")
    assert "\ufffd" in st["faults"]["message"]
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0


def check(bin_dir, config_path):
    return subprocess.run([str(pathlib.Path(bin_dir) / "volrecd"), "--check", "-c",
                           str(config_path)], capture_output=True, text=True, timeout=60)


def test_broken_shim_files_are_reported_by_check_and_at_start(daemons, bin_dir, build_dir):
    good = pathlib.Path(build_dir) / "lib" / "libvolrec_fault_shim.so"
    d, _ = shim_daemon(daemons, build_dir)
    assert check(bin_dir, d.config_path).returncode == 0
    data = good.read_bytes()
    broken = {
        "truncated.so": (data[:len(data) // 2], "truncated:"),
        "text.so": (b"INPUT(-lvolrec)\n", "not an ELF shared object"),
        "other.so": (data[:18] + (183 if os.uname().machine != "aarch64" else 62).to_bytes(
            2, "little") + data[20:], "another architecture"),
    }
    for name, (content, frag) in broken.items():
        lib = d.dir / name
        lib.write_bytes(content)
        d.cfg["source"]["shim"]["library"] = str(lib)
        d.write_config(d.cfg)
        r = check(bin_dir, d.config_path)
        assert r.returncode == 2 and frag in r.stderr and str(lib) in r.stderr, (name, r)
        # the daemon refuses to start with the same message, without a crash
        p = subprocess.run([str(pathlib.Path(bin_dir) / "volrecd"), "-c", str(d.config_path)],
                           capture_output=True, text=True, timeout=60,
                           env={**os.environ, "NOTIFY_SOCKET": ""})
        assert p.returncode > 0 and frag in p.stderr, (name, p.returncode, p.stderr)
        assert not (d.run_dir / f"{d.instance}.pid").exists()
        assert not pathlib.Path(f"/dev/shm/volrec.{d.instance}").exists()
    # a shim that kills whatever loads it: --check survives and says so
    d.cfg["source"]["shim"]["library"] = str(pathlib.Path(build_dir) / "lib" /
                                             "libvolrec_test_bad_crash.so")
    d.write_config(d.cfg)
    r = check(bin_dir, d.config_path)
    assert r.returncode == 2 and "killed the loading process with signal 7" in r.stderr, r


def test_shim_texts_stay_on_one_line_of_the_log(daemons, build_dir):
    """A newline in a shim's text started a log line that seemed volrecd's own."""
    d, control = shim_daemon(daemons, build_dir)
    fake = "volrecd[x]: error: FAKE LINE".encode().hex(" ")
    d.cfg["source"]["shim"]["args"].update({"device_hex": f"41 0a {fake}",
                                             "text_hex": f"0a {fake} 09 0d"})
    d.write_config(d.cfg)
    d.serve()
    st = d.status(lambda m: m["volumes_published"] >= 1)
    assert st["source"]["device"].startswith("A volrecd[x]: error: FAKE LINE"), st["source"]
    control.write_text("error 2\n")
    ev = d.event("source_fault")
    assert "\n" not in ev["message"] and "injected error" in ev["message"], ev
    assert " volrecd[x]: error: FAKE LINE" in ev["message"], ev
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0
    lines = d.log_text().splitlines()
    assert not [ln for ln in lines if ln.startswith("volrecd[x]")], lines


def test_a_failing_stop_is_logged_and_the_shim_closed_all_the_same(daemons, build_dir):
    d, _ = serving_shim(daemons, build_dir, fail_stop=True)
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0, d.log_text()[-3000:]
    log = d.log_text()
    assert ("stop: fault shim: stop failed on request (fail_stop: true) (closed all the same)"
            in log), log[-3000:]


def test_a_stop_hung_past_its_timeout_holds_neither_reload_nor_sigterm(daemons, build_dir):
    # a driver whose stop() blocks 60 s, ignoring its 300 ms timeout
    d, _ = serving_shim(daemons, build_dir, stall_stop_ms=60000)
    first = d.vol()
    # a structural reload stops the source: it goes on without it after 300 ms + 1 s
    new = json.loads(json.dumps(d.cfg))
    new["geometry"]["ascans_per_bscan"] = 15
    d.write_config(new)
    t0 = time.monotonic()
    d.signal(signal.SIGHUP)
    # (the old publisher is closed by then: the warning is in the log)
    d.vol(lambda m: m["session"] != first["session"])
    assert time.monotonic() - t0 < 20  # not the 60 s stall
    assert ("warning: stopping: source fault-shim has not returned from stop()/close() 1300 ms"
            in d.log_text()), d.log_text()[-3000:]
    assert d.status()["reload"]["result"] == "ok"
    # and SIGTERM too
    t0 = time.monotonic()
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0, d.log_text()[-3000:]
    assert time.monotonic() - t0 < 20  # not the 60 s stall
    assert d.log_text().count("has not returned from stop()/close()") == 2, d.log_text()[-3000:]


def test_meta_the_daemon_cannot_take_is_a_fault_or_replaced(daemons, build_dir):
    d, control = serving_shim(daemons, build_dir)
    # a flag shim.h does not define: a fault naming it, the B-scan not used
    control.write_text("flags 64\n")
    ev = d.event("source_fault")
    assert "meta.flags 0x40 has bits 0x40 that volrec does not know" in ev["message"], ev
    d.event("source_recovered")
    st = d.status(lambda m: m["state"] == "running")
    assert st["faults"]["source"] >= 1 and st["drops"]["source_error"] >= 1, st
    # timestamps in microseconds: the clock is used, counted, one warning for the series, no
    # fault
    control.write_text("timestamp 1700000000000000 5\n")
    st = d.status(lambda m: m["faults"]["timestamps"] == 5)
    vol = d.vol()
    assert abs(vol["t_first_ns"] / 1e9 - time.time()) < 60, vol
    log = d.log_text()
    assert log.count("warning: source fault-shim: epoch") == 2, log[-3000:]  # flags, series
    assert log.count("meta.timestamp_ns 1700000000000000 is") == 5, log[-3000:]
    assert "the clock is used" in log and "timestamp_ns" not in st["faults"]["message"]
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0


def test_reload_while_a_hung_call_holds_an_exclusive_device_exits_1_and_says_why(daemons,
                                                                                 build_dir):
    # a device that opens once, whose driver hangs in acquire(): the stop leaves it inside the
    # call, so neither the new nor the old configuration can open it again
    d, control = serving_shim(daemons, build_dir, exclusive=True)
    control.write_text("hold\n")
    d.event("source_fault")
    new = json.loads(json.dumps(d.cfg))
    new["geometry"]["ascans_per_bscan"] = 15
    d.write_config(new)
    d.signal(signal.SIGHUP)
    assert d.wait_exit() == 1, d.log_text()[-3000:]
    log = d.log_text()
    assert "has not returned from acquire()" in log, log[-3000:]
    assert "device busy: another handle has it open (exclusive: true)" in log, log[-3000:]
    assert ("error: cannot rebuild with the previous configuration either: " in log
            and "the previous source never returned from a call and may still hold its device"
            in log), log[-3000:]


def stale_leftovers(d):
    """The dead daemon's pid, and what it left: run_dir files and /dev/shm segments."""
    shm = sorted(n for n in os.listdir("/dev/shm") if n.startswith(f"volrec.{d.instance}"))
    files = sorted(p.name for p in d.run_dir.iterdir() if p.name.startswith(d.instance + "."))
    return files, shm


@pytest.mark.parametrize("sig", ["SEGV", "ABRT"])
def test_a_shim_crashing_after_start_leaves_nothing_a_restart_trips_on(daemons, build_dir, sig):
    """A shim is in-process: when it crashes, volrecd dies of the signal (what the unit's exit
    status tells the journal) and leaves its lock, socket, pid file and segments; a second
    volrecd of the same instance starts cleanly over them and publishes."""
    d, _ = shim_daemon(daemons, build_dir)
    d.cfg["source"]["shim"]["args"].update(crash_after=40, crash_signal=sig)
    d.write_config(d.cfg)
    d.start()
    rc = d.wait_exit()
    if not os.environ.get("VOLREC_SANITIZER"):  # ASan reports a SEGV itself, then exits 1
        assert rc == -getattr(signal, "SIG" + sig), (rc, d.log_text()[-2000:])
    assert rc != 0, d.log_text()[-2000:]
    dead_pid = d.proc.pid
    files, shm = stale_leftovers(d)
    assert {f"{d.instance}.{x}" for x in ("lock", "pid")} <= set(files), files
    assert int((d.run_dir / f"{d.instance}.pid").read_text()) == dead_pid
    assert f"volrec.{d.instance}" in shm, shm
    # the same instance again, the shim no longer crashing
    del d.cfg["source"]["shim"]["args"]["crash_after"]
    d.write_config(d.cfg)
    d.serve()
    st = d.status(lambda m: m["volumes_published"] >= 2)
    assert st["state"] == "running", st
    assert int((d.run_dir / f"{d.instance}.pid").read_text()) == d.proc.pid != dead_pid
    files, shm = stale_leftovers(d)
    assert shm == [f"volrec.{d.instance}", f"volrec.{d.instance}.readers"], shm
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0, d.log_text()[-2000:]
    assert stale_leftovers(d) == ([], []), d.log_text()[-2000:]
