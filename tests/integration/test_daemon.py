# SPDX-License-Identifier: MIT
"""volrecd end to end: the real daemon on the CPU backend at a tiny geometry, its systemd notify
protocol read from a datagram socket (NOTIFY_SOCKET), its ZeroMQ status/event messages, and the
volumes read by the C client (libvolrec, through the vrd_reader test program) and the Python
client, compared with `volrec process` on the same configuration."""
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import uuid

import numpy as np
import pytest
import zmq

from conftest import TIMEOUT_SCALE
from daemonkit import remove_segments

TIMEOUT = 30.0 * TIMEOUT_SCALE  # generous: the test machine is small and loaded


def base_config(instance, run_dir, **over):
    """A tiny synthetic configuration (JSON is YAML) like config/examples/tiny.yaml."""
    cfg = {
        "instance": instance,
        "backend": "cpu",
        "cpu": {"threads": 1},
        "source": {
            "type": "synth",
            "rate": 40,
            "synth": {"seed": 7, "phantom": "retina", "motion": {"deg_per_s": 0.25},
                      "snr_db": 40},
        },
        "geometry": {"samples_per_ascan": 256, "sample_type": "u16",
                     "ascans_per_bscan": 12, "bscans_per_volume": 12, "stride": [3, 3]},
        "preprocess": {"db_range": [0, 100]},
        "reconstruct": {"mode": "noncumulative"},
        "output": {"slots": 4},
        "pipeline": {"ring_bscans": 48, "overflow": "block"},
        "ipc": {"run_dir": str(run_dir), "status_interval_ms": 100},
        "log": {"level": "debug"},
    }
    for key, value in over.items():
        node = cfg
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        if value is None:
            node.pop(parts[-1], None)
        else:
            node[parts[-1]] = value
    return cfg


class Daemon:
    """One volrecd under test: its own instance, run_dir, notify socket and log."""

    def __init__(self, bin_dir, build_dir, **over):
        self.bin_dir = pathlib.Path(bin_dir)
        self.build_dir = pathlib.Path(build_dir)
        # short paths: AF_UNIX names are limited to 107 bytes
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="vrd", dir="/tmp"))
        self.run_dir = self.dir / "run"
        self.run_dir.mkdir()
        self.instance = "t" + uuid.uuid4().hex[:12]
        self.config_path = self.dir / "volrecd.yaml"
        self.cfg = base_config(self.instance, self.run_dir, **over)
        self.write_config(self.cfg)
        self.notify_path = self.dir / "notify"
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(str(self.notify_path))
        self.notify.settimeout(0.1)
        self.notes = []  # every notify datagram, parsed into a dict
        self._marks = self._marked = 0  # read_notes' markers sent, and read
        # read the socket all the time, as systemd does: a full socket would block the daemon
        self._reading = True
        self._reader = threading.Thread(target=self._read_notify, daemon=True)
        self._reader.start()
        self.log_path = self.dir / "volrecd.log"
        self.proc = None
        self.ctx = zmq.Context.instance()
        self.sub = None
        self.messages = []  # (topic, body) received on the subscriber

    # -- process ---------------------------------------------------------------------------
    def write_config(self, cfg):
        self.config_path.write_text(json.dumps(cfg, indent=1) + "\n")

    def start(self, env_extra=None):
        env = dict(os.environ)
        env["NOTIFY_SOCKET"] = str(self.notify_path)
        for k in ("WATCHDOG_USEC", "WATCHDOG_PID", "JOURNAL_STREAM", "INVOCATION_ID"):
            env.pop(k, None)
        env.update(env_extra or {})
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([str(self.bin_dir / "volrecd"), "-c", str(self.config_path)],
                                     env=env, stdout=self.log, stderr=self.log)
        return self

    def serve(self, env_extra=None):
        """Start, subscribe to the publisher and wait for READY=1: a daemon publishing."""
        return self.start(env_extra).subscribe().ready()

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait_exit(self, timeout=TIMEOUT):
        return self.proc.wait(timeout=timeout)

    def log_text(self):
        return self.log_path.read_text(errors="replace")

    def close(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.sub is not None:
            self.sub.close(linger=0)
        self._reading = False
        self._reader.join()
        self.notify.close()
        remove_segments(self.instance)
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- sd_notify ---------------------------------------------------------------------------
    def read_notes(self, timeout=TIMEOUT):
        """Until every notification sent so far is in self.notes: a marker datagram sent to the
        socket now is read after all of them (a datagram socket keeps their order), and the
        reader thread takes it out of the list."""
        self._marks += 1
        mark = f"X_TEST_MARK={self._marks}"
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.sendto(mark.encode(), str(self.notify_path))
        end = time.monotonic() + timeout
        while self._marked < self._marks:
            assert time.monotonic() < end, f"the notify reader did not read {mark}"
            time.sleep(0.01)

    def _read_notify(self):
        while self._reading:
            try:
                data = self.notify.recv(65536)
            except (socket.timeout, BlockingIOError):
                continue
            fields = {}
            for line in data.decode().split("\n"):
                if "=" in line:
                    k, v = line.split("=", 1)
                    fields[k] = v
            if "X_TEST_MARK" in fields:
                self._marked = int(fields["X_TEST_MARK"])
                continue
            self.notes.append(fields)

    def wait_note(self, key, value=None, timeout=TIMEOUT, after=0):
        """First notification (index >= after) carrying key (=value); returns its index."""
        end = time.monotonic() + timeout
        while True:
            for i in range(after, len(self.notes)):
                if key in self.notes[i] and (value is None or self.notes[i][key] == value):
                    return i
            if time.monotonic() > end:
                raise AssertionError(f"no {key}={value} notification in {timeout} s; got "
                                     f"{self.notes[-10:]}\nlog:\n{self.log_text()[-3000:]}")
            if self.proc.poll() is not None:
                self.read_notes()  # the last datagrams
                if not any(key in x and (value is None or x[key] == value)
                           for x in self.notes[after:]):
                    raise AssertionError(f"volrecd exited ({self.proc.returncode}) before "
                                         f"{key}={value}\nlog:\n{self.log_text()[-3000:]}")
            time.sleep(0.02)

    def ready(self):
        self.wait_note("READY", "1")
        return self

    # -- ZeroMQ ------------------------------------------------------------------------------
    def subscribe(self):
        self.sub = self.ctx.socket(zmq.SUB)
        for t in (b"status", b"event", b"vol"):
            self.sub.setsockopt(zmq.SUBSCRIBE, t)
        self.sub.connect(f"ipc://{self.run_dir}/{self.instance}.pub")
        return self

    def wait_message(self, topic, pred=lambda m: True, timeout=TIMEOUT):
        """Next message of topic (JSON decoded for status/event) for which pred holds."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.sub.poll(200):
                t, body = self.sub.recv_multipart()
                t = t.decode()
                msg = json.loads(body) if t in ("status", "event") else body
                self.messages.append((t, msg))
                if t == topic and pred(msg):
                    return msg
            elif self.proc.poll() is not None:
                break
        raise AssertionError(f"no matching {topic} message in {timeout} s; last: "
                             f"{[m for m in self.messages[-5:]]}\nlog:\n{self.log_text()[-3000:]}")

    def event(self, name, timeout=TIMEOUT):
        return self.wait_message("event", lambda m: m.get("event") == name, timeout)

    def status(self, pred=lambda m: True, timeout=TIMEOUT):
        return self.wait_message("status", pred, timeout)

    def vol(self, pred=lambda v: True, timeout=TIMEOUT):
        """Next `vol` message, decoded (protocol.h struct volrec_vol_msg)."""
        def dec(b):
            f = struct.unpack_from("<IHHII QQQQ IIII ii QQQQ I", b, 0)
            return {"slot": f[4], "session": f[5], "sequence": f[6], "volume_id": f[7],
                    "epoch": f[8], "ny": f[9], "nx": f[10], "nz": f[11], "offset": (f[13], f[14]),
                    "t_first_ns": f[15], "t_last_ns": f[16], "latency_ns": f[18],
                    "flags": f[19]}
        raw = self.wait_message("vol", lambda b: pred(dec(b)), timeout)
        return dec(raw)

    # -- C client ----------------------------------------------------------------------------
    def reader(self, count, seconds, name="reader"):
        out = self.dir / f"{name}.bin"
        proc = subprocess.Popen([str(self.build_dir / "tests" / "vrd_reader"), self.instance,
                                 str(self.run_dir), str(count), str(seconds), str(out)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return proc, out


def wait_records(reader, out, pred, timeout=TIMEOUT):
    """Until the records a running vrd_reader wrote so far satisfy pred."""
    end = time.monotonic() + timeout
    while not pred(read_records(out, growing=True)):
        if reader.poll() is not None:
            raise AssertionError(f"the reader exited ({reader.returncode}): "
                                 f"{reader.communicate()}")
        assert time.monotonic() < end, f"{out}: {len(read_records(out, growing=True))} records"
        time.sleep(0.05)


def read_records(path, growing=False):
    """The vrd_reader output: a list of (header dict, numpy volume). growing: the reader is
    still writing it, so a last record may be cut short (it is left out); otherwise every
    record must be whole."""
    if not pathlib.Path(path).exists():
        return []
    data = pathlib.Path(path).read_bytes()
    recs, off = [], 0
    while off + 64 <= len(data):
        ses, seq, epoch, vid, nbytes, ny, nx, nz, flags = struct.unpack_from("<QQQQQIIII", data, off)
        off += 64
        if off + nbytes > len(data):
            assert growing, f"{path}: record {len(recs)} cut short ({len(data) - off} of {nbytes} bytes)"
            break
        vol = np.frombuffer(data, np.uint8, nbytes, off).reshape(ny, nx, nz)
        off += nbytes
        recs.append(({"session": ses, "sequence": seq, "epoch": epoch, "flags": flags}, vol))
    return recs


@pytest.fixture
def daemons(bin_dir, build_dir):
    made = []

    def make(**over):
        d = Daemon(bin_dir, build_dir, **over)
        made.append(d)
        return d

    yield make
    for d in made:
        d.close()


def drops_identity(st):
    """acquired == processed + in ring + every drop of an acquired B-scan."""
    b, d = st["bscans"], st["drops"]
    return b["acquired"] == (b["processed"] + b["in_ring"] + d["ring_full"]
                             + d["incomplete_epoch"] + d["processing_error"])


# ---- start, notify protocol, status --------------------------------------------------------

def test_ready_status_and_pid_file(daemons):
    d = daemons().serve()
    i = d.wait_note("STATUS")
    assert d.notes[i]["STATUS"].startswith(("running", "starting", "degraded")), d.notes[i]
    # rates cover the last status interval: on a slow machine the first interval can end
    # before a volume is out, so wait for one that saw volumes
    st = d.status(lambda m: m["volumes_published"] >= 2 and m["rates"]["volumes_per_s"] > 0)
    assert st["state"] == "running"
    assert st["instance"] == d.instance
    assert st["backend"]["name"] == "cpu" and st["backend"]["device"]
    assert st["source"]["type"] == "synth"
    assert st["geometry"]["volume"] == [36, 36, 128]
    for stage in ("acquire_to_publish", "preprocess", "reconstruct", "publish"):
        assert st["latency_ms"][stage]["p50"] is not None
        assert st["latency_ms"][stage]["p99"] >= st["latency_ms"][stage]["p50"]
    assert st["rates"]["volumes_per_s"] > 0
    assert set(st["drops"]) >= {"ring_full", "incomplete_epoch", "source_error",
                                "source_timeout", "total"}
    assert st["ring"]["size"] == 48
    assert drops_identity(st), st
    pid = int((d.run_dir / f"{d.instance}.pid").read_text())
    assert pid == d.proc.pid
    assert pathlib.Path(f"/proc/{pid}/comm").read_text().strip() == "volrecd"
    # one-line STATUS= with the main figures, once per status interval
    d.wait_note("STATUS", after=i + 1)
    line = [n["STATUS"] for n in d.notes if "STATUS" in n][-1]
    assert "volumes/s" in line and "\n" not in line


def test_sigterm_stops_cleanly_and_unlinks_shm(daemons):
    d = daemons().serve()
    d.vol()
    assert os.path.exists(f"/dev/shm/volrec.{d.instance}")
    # the effective configuration for clients, as `volrecd --check` prints it
    eff = (d.run_dir / f"{d.instance}.yaml").read_text()
    assert f'instance: "{d.instance}"' in eff and "depth_range:" in eff
    t0 = time.monotonic()
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0, d.log_text()
    elapsed = time.monotonic() - t0
    d.read_notes()
    assert any(n.get("STOPPING") == "1" for n in d.notes)
    # published before the exit: in the subscriber's queue if not read yet
    assert any(t == "event" and m["event"] == "stopping" for t, m in d.messages) or \
        d.event("stopping")
    assert not os.path.exists(f"/dev/shm/volrec.{d.instance}")
    assert not os.path.exists(f"/dev/shm/volrec.{d.instance}.readers")
    assert not (d.run_dir / f"{d.instance}.pid").exists()
    assert not (d.run_dir / f"{d.instance}.yaml").exists()
    # the contract is 2 s at this geometry; allow for a loaded test machine
    assert elapsed < 6.0 * TIMEOUT_SCALE, elapsed


def instance_files(d):
    return sorted(p.name for p in d.run_dir.iterdir() if p.name.startswith(d.instance + "."))


def test_graceful_stop_leaves_nothing_in_run_dir(daemons):
    d = daemons().start()
    d.ready()
    assert {f"{d.instance}.{x}" for x in ("lock", "pub", "pid", "yaml")} <= set(instance_files(d))
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0, d.log_text()
    assert instance_files(d) == []


def test_start_removes_the_files_a_crashed_daemon_left(daemons, build_dir):
    """After SIGKILL the lock, socket, pid file and effective configuration stay; the next
    start removes them even when it fails, so no client reads a dead daemon's pid."""
    d = daemons().start()
    d.ready()
    d.signal(signal.SIGKILL)
    d.wait_exit()
    left = instance_files(d)
    assert {f"{d.instance}.{x}" for x in ("lock", "pub", "pid", "yaml")} <= set(left), left
    # valid, but the start fails: the shim refuses to open
    d.cfg["source"] = {"type": "shim", "shim": {
        "library": str(pathlib.Path(build_dir) / "lib" / "libvolrec_fault_shim.so"),
        "args": {"fail_open": True}}}
    d.cfg["pipeline"]["overflow"] = "drop_epoch"
    d.write_config(d.cfg)
    d.start()
    assert d.wait_exit() == 1, d.log_text()
    assert "cannot start" in d.log_text()
    assert instance_files(d) == [], d.log_text()


def test_sigint_stops_and_keep_shm_leaves_segments(daemons):
    d = daemons(**{"ipc.keep_shm": True}).start()
    d.ready()
    d.signal(signal.SIGINT)
    assert d.wait_exit() == 0, d.log_text()
    assert os.path.exists(f"/dev/shm/volrec.{d.instance}")


# ---- volumes equal `volrec process` -------------------------------------------------------

def process_volumes(d, bin_dir, epochs, cfg=None):
    """`volrec process` on the daemon's configuration (or cfg): /volumes [n][Y][X][Z]."""
    import h5py
    path = d.config_path
    if cfg is not None:
        path = d.dir / "process.yaml"
        path.write_text(json.dumps(cfg))
    out = d.dir / "process.h5"
    r = subprocess.run([str(pathlib.Path(bin_dir) / "volrec"), "process", "-c", str(path),
                        "-o", str(out), "-n", str(epochs)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    with h5py.File(out, "r") as f:
        return np.array(f["/volumes"])


def test_c_and_python_clients_match_volrec_process(daemons, bin_dir):
    d = daemons().start()
    d.ready()
    reader, out = d.reader(6, TIMEOUT)
    import volrec
    py = []
    with volrec.Client(d.instance, run_dir=str(d.run_dir), open_timeout=TIMEOUT) as c:
        while len(py) < 4:
            with c.next_volume(timeout=TIMEOUT) as v:
                py.append((int(v.epoch), np.array(v, copy=True)))
    stdout, stderr = reader.communicate(timeout=TIMEOUT + 10)
    assert reader.returncode == 0, stdout + stderr
    recs = read_records(out)
    assert len(recs) == 6
    last = max([h["epoch"] for h, _ in recs] + [e for e, _ in py])
    ref = process_volumes(d, bin_dir, last + 1)
    for h, vol in recs:
        assert vol.shape == ref.shape[1:]
        assert np.array_equal(vol, ref[h["epoch"]]), f"C client, epoch {h['epoch']}"
    for epoch, vol in py:
        assert np.array_equal(vol, ref[epoch]), f"Python client, epoch {epoch}"


# ---- reload -------------------------------------------------------------------------------

def test_live_reload_changes_the_next_volumes(daemons, bin_dir):
    d = daemons().serve()
    d.vol()
    new = json.loads(json.dumps(d.cfg))
    new["preprocess"]["db_range"] = [0, 60]
    d.write_config(new)
    first_session = d.vol()["session"]
    n = len(d.notes)
    d.signal(signal.SIGHUP)
    ev = d.event("reloaded")
    assert ev["structural"] is False
    i = d.wait_note("RELOADING", "1", after=n)
    assert int(d.notes[i]["MONOTONIC_USEC"]) > 0
    d.wait_note("READY", "1", after=i)
    # volumes announced after the event were made with the new range; once S = 9 epochs
    # passed they hold only new-range data and equal `volrec process` with the new config
    v = d.vol()
    assert v["session"] == first_session
    later = d.vol(lambda m: m["epoch"] >= v["epoch"] + 9)
    reader, out = d.reader(1, TIMEOUT)
    reader.communicate(timeout=TIMEOUT + 10)
    (h, vol), = read_records(out)
    assert h["epoch"] >= later["epoch"]
    old_ref = process_volumes(d, bin_dir, h["epoch"] + 1, cfg=d.cfg)[h["epoch"]]
    new_ref = process_volumes(d, bin_dir, h["epoch"] + 1, cfg=new)
    new_ref_vol = new_ref[h["epoch"]]
    assert not np.array_equal(old_ref, new_ref_vol)
    # a smaller dB range brightens the image; the daemon's volume equals the new reference
    # except where history from before the change could still contribute (none after S epochs)
    assert vol.mean() > old_ref.mean()
    assert np.array_equal(vol, new_ref_vol)


def test_invalid_reload_is_rejected_and_publishing_goes_on(daemons):
    d = daemons().serve()
    before = d.vol()
    bad = json.loads(json.dumps(d.cfg))
    bad["preprocess"]["db_range"] = [50, 10]
    d.write_config(bad)
    n = len(d.notes)
    d.signal(signal.SIGHUP)
    ev = d.event("reload_rejected")
    assert "db_range" in ev["message"], ev
    d.wait_note("RELOADING", "1", after=n)
    d.wait_note("READY", "1", after=n)
    st = d.status(lambda m: m["reload"]["result"] == "rejected")
    assert "db_range" in st["reload"]["message"]
    assert st["state"] == "running"
    end = time.monotonic() + TIMEOUT
    while not any("reload rejected" in x.get("STATUS", "") for x in d.notes[n:]):
        assert time.monotonic() < end, d.notes[n:]
        d.wait_note("STATUS", after=len(d.notes))
    after = d.vol(lambda m: m["sequence"] > before["sequence"] + 3)
    assert after["session"] == before["session"]
    assert d.proc.poll() is None
    # the log carries the message too
    assert "db_range" in d.log_text()


def test_structural_reload_starts_a_new_session_clients_follow(daemons):
    d = daemons().serve()
    reader, out = d.reader(1000, 4 * TIMEOUT, name="follow")
    first = d.vol()
    new = json.loads(json.dumps(d.cfg))
    new["geometry"]["ascans_per_bscan"] = 15  # 45 x 36 x 128 output
    d.write_config(new)
    # the reader has a volume of the first session before the reload
    wait_records(reader, out, lambda recs: any(h["session"] == first["session"]
                                               for h, _ in recs))
    d.signal(signal.SIGHUP)
    # subscribers reconnect to the rebuilt publisher: the event itself may pass before they
    # are back, and the status repeats it as last_event
    v = d.vol(lambda m: m["session"] != first["session"])
    assert (v["ny"], v["nx"], v["nz"]) == (36, 45, 128)
    st = d.status(lambda m: m["session"] == v["session"])
    assert st["geometry"]["volume"] == [36, 45, 128]
    assert st["last_event"]["event"] == "reloaded", st["last_event"]
    assert st["reload"]["result"] == "ok"
    d.read_notes()
    assert any(n.get("RELOADING") == "1" for n in d.notes)
    import volrec
    with volrec.Client(d.instance, run_dir=str(d.run_dir), open_timeout=TIMEOUT) as c:
        with c.next_volume(timeout=TIMEOUT) as pv:
            assert pv.shape == (36, 45, 128)
    # and one of the new session, then it is done
    wait_records(reader, out, lambda recs: any(h["session"] == v["session"] for h, _ in recs))
    reader.terminate()
    stdout, _ = reader.communicate(timeout=TIMEOUT)
    recs = read_records(out, growing=True)
    sessions = {h["session"] for h, _ in recs}
    assert first["session"] in sessions and v["session"] in sessions, stdout
    shapes = {vol.shape for _, vol in recs}
    assert shapes == {(36, 36, 128), (36, 45, 128)}


def test_sigkill_then_restart_clients_recover(daemons):
    d = daemons().start()
    d.ready()
    reader, out = d.reader(1000, 4 * TIMEOUT, name="survivor")
    wait_records(reader, out, lambda recs: recs)
    import volrec
    c = volrec.Client(d.instance, run_dir=str(d.run_dir), open_timeout=TIMEOUT)
    with c.next_volume(timeout=TIMEOUT) as v:
        s1 = v.session_id
    d.proc.kill()
    d.proc.wait()
    d.start().wait_note("READY", "1", after=len(d.notes))
    deadline = time.monotonic() + TIMEOUT
    while True:
        assert time.monotonic() < deadline
        try:
            with c.next_volume(timeout=1.0) as v:
                if v.session_id != s1:
                    break
        except volrec.VolrecError:
            continue  # a timeout or the segment being replaced: it remaps by itself
    c.close()
    wait_records(reader, out, lambda recs: any(h["session"] != s1 for h, _ in recs))
    reader.terminate()
    reader.communicate(timeout=TIMEOUT)
    sessions = [h["session"] for h, _ in read_records(out, growing=True)]
    assert sessions[0] == s1 and sessions[-1] != s1, sessions


# ---- history reset, statistics -------------------------------------------------------------

def test_sigusr2_resets_history_and_sigusr1_logs_statistics(daemons):
    d = daemons().serve()
    d.vol()
    d.signal(signal.SIGUSR2)
    d.event("history_reset")
    v = d.vol(lambda m: m["flags"] & 0x2)
    assert v["flags"] & 0x2
    d.signal(signal.SIGUSR1)
    end = time.monotonic() + TIMEOUT
    while "statistics:" not in d.log_text():
        assert time.monotonic() < end, d.log_text()
        time.sleep(0.1)
    assert "ring_full" in d.log_text()


def test_partial_median_counts_in_status_statistics_and_the_status_screen(daemons, bin_dir):
    """The median depths of the last volume: in the status message (mean, max, of N/2 depths)
    while the mode is partial_median, in the SIGUSR1 statistics and on `volrec status`; gone
    from the status after a live switch to bscan_mean."""
    d = daemons(**{"source.synth.phantom": "tilted",
                   "preprocess.background": {"mode": "partial_median"}}).serve()
    d.vol()
    st = d.status(lambda m: m.get("preprocess", {}).get("median_depths", {})
                  .get("mean_per_bscan") is not None)
    md = st["preprocess"]["median_depths"]
    # the tilted reflector crosses about 50 of the 128 depths along each B-scan
    assert md["depths"] == 128, md
    assert 5 <= md["mean_per_bscan"] <= md["max_per_bscan"] < 128, md
    d.signal(signal.SIGUSR1)
    end = time.monotonic() + TIMEOUT
    while "partial_median: median depths per B-scan" not in d.log_text():
        assert time.monotonic() < end, d.log_text()[-3000:]
        time.sleep(0.1)
    r = subprocess.run([str(bin_dir / "volrec"), "status", "--instance", d.instance,
                        "--run-dir", str(d.run_dir)], capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    assert re.search(r"median    partial_median: [0-9.]+ median depths per B-scan, at most "
                     r"[0-9]+, of 128", r.stdout), r.stdout
    new = json.loads(json.dumps(d.cfg))
    new["preprocess"]["background"] = {"mode": "bscan_mean"}
    d.write_config(new)
    d.signal(signal.SIGHUP)
    assert d.event("reloaded")["structural"] is False
    st = d.status(lambda m: "preprocess" not in m)
    assert st["reload"]["result"] == "ok"


def test_nonfinite_ascans_count_in_status_statistics_and_the_status_screen(daemons, bin_dir,
                                                                           tmp_path):
    """A replayed f32 recording with one A-scan holding a NaN in each epoch (docs/algorithms.md
    §1.0): bscans.missing_ascans counts one per published volume, the SIGUSR1 statistics and
    `volrec status` show it."""
    K, nx, ny, epochs = 256, 12, 12, 4
    k = np.arange(K)
    raw = np.empty((epochs, ny, nx, K), "<f4")
    for e in range(epochs):
        for b in range(ny):
            for a in range(nx):
                raw[e, b, a] = 2000 + 500 * np.cos(2 * np.pi * (0.05 + 0.01 * (a + b)) * k)
        raw[e, e % ny, (3 * e) % nx, (7 * e) % K] = np.nan
    rp = tmp_path / "nan.raw"
    raw.tofile(rp)
    d = daemons(**{"source.type": "replay", "source.synth": None,
                   "source.replay": {"path": str(rp), "format": "raw", "loop": True},
                   "geometry.sample_type": "f32"}).serve()
    d.vol()
    st = d.status(lambda m: m["bscans"]["missing_ascans"] >= 2)
    assert st["bscans"]["missing_ascans"] == st["epochs"]["published"], st["bscans"]
    d.signal(signal.SIGUSR1)
    end = time.monotonic() + TIMEOUT
    while not re.search(r"A-scans missing \(non-finite\) [1-9]", d.log_text()):
        assert time.monotonic() < end, d.log_text()[-3000:]
        time.sleep(0.1)
    r = subprocess.run([str(bin_dir / "volrec"), "status", "--instance", d.instance,
                        "--run-dir", str(d.run_dir)], capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    assert re.search(r"missing   [1-9][0-9]* A-scans with a non-finite sample", r.stdout), \
        r.stdout


# ---- journald ------------------------------------------------------------------------------

JOURNAL_SOCKET = pathlib.Path("/run/systemd/journal/socket")


def test_under_systemd_it_logs_structured_fields_to_the_journal(daemons):
    """With stderr connected to the journal (JOURNAL_STREAM names it), every line goes to
    journald's native socket with PRIORITY, SYSLOG_IDENTIFIER, VOLREC_INSTANCE and, for
    lifecycle messages, VOLREC_EVENT. The test stands in for journald on its real socket."""
    if os.geteuid() != 0:
        pytest.skip("needs root to stand in for journald at /run/systemd/journal/socket")
    if JOURNAL_SOCKET.exists():
        pytest.skip("a journald runs here; not standing in for it")
    made = [p for p in (JOURNAL_SOCKET.parent.parent, JOURNAL_SOCKET.parent) if not p.exists()]
    JOURNAL_SOCKET.parent.mkdir(parents=True, exist_ok=True)
    journal = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        journal.bind(str(JOURNAL_SOCKET))
        journal.settimeout(0.2)
        d = daemons()
        d.log_path.touch()
        st = os.stat(d.log_path)  # the daemon's stderr: "systemd connected it to the journal"
        d.start(env_extra={"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"})
        d.ready()
        d.signal(signal.SIGUSR1)
        entries, end = [], time.monotonic() + TIMEOUT
        while time.monotonic() < end and not (
                any(e.get("VOLREC_EVENT") == "started" for e in entries)
                and any("statistics:" in e.get("MESSAGE", "") for e in entries)):
            try:
                raw = journal.recv(65536)
            except socket.timeout:
                continue
            entries.append(dict(line.split("=", 1) for line in raw.decode().splitlines()
                                if "=" in line))
        started = [e for e in entries if e.get("VOLREC_EVENT") == "started"]
        assert started, entries
        assert started[0]["VOLREC_INSTANCE"] == d.instance
        assert started[0]["SYSLOG_IDENTIFIER"] == "volrecd"
        assert started[0]["PRIORITY"] in {"5", "6"}  # notice or info
        assert any("statistics:" in e.get("MESSAGE", "") for e in entries), entries
        assert all("PRIORITY" in e and "MESSAGE" in e for e in entries)
        # CODE_FILE/CODE_LINE/CODE_FUNC name the line that logged, not the logging function
        src = (pathlib.Path(__file__).resolve().parents[2] / "daemon/vrd_service.c").read_text()
        started_line = 1 + src.splitlines().index(
            next(x for x in src.splitlines() if 'vrd_event("started"' in x))
        assert (started[0].get("CODE_FILE"), started[0].get("CODE_LINE"),
                started[0].get("CODE_FUNC")) == ("daemon/vrd_service.c", str(started_line),
                                                 "service_start"), started[0]
        stats = next(e for e in entries if "statistics:" in e["MESSAGE"])
        assert stats.get("CODE_FUNC") == "log_statistics", stats
        assert not [e for e in entries if "vrd_log" in e.get("CODE_FILE", "") + e.get("CODE_FUNC", "")]
        d.signal(signal.SIGTERM)
        assert d.wait_exit() == 0
        assert "volrecd[" not in d.log_text()  # nothing printed as plain lines meanwhile
    finally:
        journal.close()
        JOURNAL_SOCKET.unlink(missing_ok=True)
        for p in reversed(made):  # only the folders this test made
            p.rmdir()


# ---- overflow ------------------------------------------------------------------------------

def test_source_faster_than_processing_drops_are_counted_exactly(daemons):
    # a source paced far faster than processing (rate 0 would block: see the next test), the
    # smallest ring (two epochs): acquisition outruns processing
    d = daemons(**{"source.rate": 100000, "pipeline.ring_bscans": 24,
                   "pipeline.overflow": "drop_epoch"}).serve()
    st = d.status(lambda m: m["drops"]["ring_full"] > 0 and m["volumes_published"] >= 3)
    for _ in range(5):
        st = d.status()
        assert drops_identity(st), st
        assert st["drops"]["ring_full"] % 1 == 0
        assert st["bscans"]["processed"] % 12 == 0
    assert st["drops"]["total"] == sum(v for k, v in st["drops"].items() if k != "total")
    assert st["state"] == "running"
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0


@pytest.mark.parametrize("source", ["synth", "replay"])
def test_unpaced_synth_and_replay_wait_for_processing_instead_of_dropping(daemons, bin_dir,
                                                                          source):
    # source.rate 0 means "as fast as processing takes them": with the default overflow
    # drop_epoch, synth and replay must wait for ring room, never drop (before, a replay raced
    # ahead and dropped millions of B-scans)
    d = daemons(**{"source.rate": 0, "pipeline.ring_bscans": 24,
                   "pipeline.overflow": "drop_epoch"})
    if source == "replay":
        sim = json.loads(json.dumps(d.cfg))
        path = d.dir / "sim.yaml"
        path.write_text(json.dumps(sim))
        rp = d.dir / "in.vrr"
        r = subprocess.run([str(pathlib.Path(bin_dir) / "volrec"), "sim", "-c", str(path),
                            "-o", str(rp), "-n", "9"], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        d.cfg["source"] = {"type": "replay", "rate": 0,
                           "replay": {"path": str(rp), "loop": True}}
        d.write_config(d.cfg)
    d.serve()
    first = d.vol()
    st = d.status(lambda m: m["volumes_published"] >= 10)
    assert st["drops"]["total"] == 0, st["drops"]
    assert drops_identity(st), st
    # epochs follow each other without gaps
    epochs = [d.vol()["epoch"] for _ in range(5)]
    assert epochs == list(range(epochs[0], epochs[0] + 5)), epochs
    assert epochs[0] > first["epoch"]
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0


# ---- volrecd --check -----------------------------------------------------------------------

def test_check_rejects_what_the_daemon_rejects(daemons, bin_dir):
    d = daemons()
    bad = json.loads(json.dumps(d.cfg))
    bad["geometry"]["depth_range"] = [0, 4096]
    d.write_config(bad)
    r = subprocess.run([str(pathlib.Path(bin_dir) / "volrecd"), "--check", "-c",
                        str(d.config_path)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "depth_range" in r.stderr
    d.start()
    assert d.wait_exit() == 2
    assert "depth_range" in d.log_text()
    d.read_notes()
    assert not any("READY" in n for n in d.notes)
    # and a good one passes both
    d.write_config(d.cfg)
    r = subprocess.run([str(pathlib.Path(bin_dir) / "volrecd"), "--check", "-c",
                        str(d.config_path)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr


# ---- source faults and the watchdog (the fault-injecting shim) -----------------------------

def test_sigusr1_statistics_say_n_a_for_stages_without_samples(daemons, build_dir):
    d, control = shim_daemon(daemons, build_dir)
    control.write_text("error 1000000\n")  # no B-scan ever arrives: no latency sample
    d.start()
    d.ready()
    d.signal(signal.SIGUSR1)
    end = time.monotonic() + TIMEOUT
    while "statistics:" not in d.log_text():
        assert time.monotonic() < end, d.log_text()
        time.sleep(0.1)
    line = next(x for x in d.log_text().splitlines() if "statistics:" in x)
    assert "acquire->publish n/a/n/a, preprocess n/a/n/a, reconstruct n/a/n/a, publish n/a/n/a" \
        in line, line
    assert "-1.00" not in line, line
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0


def shim_daemon(daemons, build_dir, timeout_ms=300, **over):
    lib = pathlib.Path(build_dir) / "lib" / "libvolrec_fault_shim.so"
    d = daemons(**{"pipeline.overflow": "drop_epoch", **over})
    control = d.dir / "control"
    control.write_text("ok\n")
    d.cfg["source"] = {"type": "shim", "rate": 40,
                       "shim": {"library": str(lib), "timeout_ms": timeout_ms,
                                "args": {"control_file": str(control)}}}
    d.write_config(d.cfg)
    return d, control


def test_shim_errors_and_stalls_degrade_then_recover(daemons, build_dir):
    d, control = shim_daemon(daemons, build_dir)
    d.serve()
    st = d.status(lambda m: m["volumes_published"] >= 1)
    assert st["source"]["type"] == "shim" and st["source"]["name"]
    control.write_text("error 4\n")
    ev = d.event("source_fault")
    assert ev["message"], ev
    st = d.status(lambda m: m["state"] == "degraded")
    assert st["faults"]["degraded"] is True and st["faults"]["message"]
    n = len(d.notes)
    d.event("source_recovered")
    st = d.status(lambda m: m["state"] == "running" and m["drops"]["source_error"] == 4)
    assert st["drops"]["source_timeout"] == 0
    assert drops_identity(st), st
    assert any(x.get("STATUS", "").startswith("degraded") for x in d.notes[:n] + d.notes[n:]) \
        or d.wait_note("STATUS", after=0) >= 0
    before = d.vol()["sequence"]
    # timeouts: acquire waits timeout_ms and fails; the daemon retries and recovers
    control.write_text("timeout 2\n")
    d.event("source_fault")
    d.event("source_recovered")
    st = d.status(lambda m: m["drops"]["source_timeout"] == 2 and m["state"] == "running")
    assert d.vol(lambda m: m["sequence"] > before + 2)
    d.read_notes()
    assert any(x.get("STATUS", "").startswith("degraded") for x in d.notes), d.notes[-20:]
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0


def test_stalled_stage_stops_watchdog_pings(daemons, build_dir):
    d, control = shim_daemon(daemons, build_dir)
    d.serve(env_extra={"WATCHDOG_USEC": "300000"})
    d.wait_note("WATCHDOG", "1")
    i = d.wait_note("WATCHDOG", "1", after=len(d.notes))
    st = d.status(lambda m: m["watchdog"]["pings"] >= 2)
    assert st["watchdog"]["enabled"] is True and st["watchdog"]["usec"] == 300000
    # a hung driver: acquire() blocks, ignoring its timeout, until the test releases it
    control.write_text("hold\n")
    # Epochs already in the ring are still processed, and an epoch finished is progress (a
    # ping); under a slow build one may be busy for several ticks. So: settle (two pings in a
    # row withheld), then watch a window of three ticks; a window in which an epoch finished
    # (published or dropped) proves nothing and is watched again.
    def settled(m):
        nonlocal base
        w = m["watchdog"]
        if w["pings"] != base["pings"]:
            base = w
            return False
        return w["withheld"] >= base["withheld"] + 2

    def epochs_done(m):
        return m["volumes_published"] + m["drops"]["total"]

    for _ in range(20):
        base = d.status(lambda m: m["watchdog"]["withheld"] >= 1)["watchdog"]
        before = epochs_done(d.status(settled))
        d.read_notes()
        n = len(d.notes)
        time.sleep(1.0)  # a window in which nothing may come (three ticks), not a wait for it
        d.read_notes()
        if epochs_done(d.status()) != before:
            continue
        assert not any(x.get("WATCHDOG") == "1" for x in d.notes[n:]), d.notes[n:]
        break
    else:
        raise AssertionError("epochs kept finishing with the source held: " + d.log_text()[-3000:])
    # once the source returns, progress and pings resume
    control.write_text("ok\n")
    d.wait_note("WATCHDOG", "1", after=n)
    assert i >= 0
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0


def test_sigterm_with_a_hung_acquire_stops_within_a_second_past_its_timeout(daemons,
                                                                           build_dir):
    # a hung driver: acquire() blocks for good, ignoring its 300 ms timeout; SIGTERM must not
    # wait for it: the daemon stops within timeout + 1 s (plus draining) and says so in its log
    d, control = shim_daemon(daemons, build_dir)
    d.serve()
    d.vol()
    control.write_text("hold\n")
    # the shim reads the control file before an acquire and stalls in it: the daemon says so
    # once the call is late
    d.wait_message("event", lambda m: m.get("event") == "source_fault"
                   and "has not returned" in m.get("message", ""))
    t0 = time.monotonic()
    d.signal(signal.SIGTERM)
    assert d.wait_exit(timeout=15) == 0, d.log_text()
    elapsed = time.monotonic() - t0
    assert elapsed < 4.0 * TIMEOUT_SCALE, elapsed  # 1.3 s expected; not the hung call
    log = d.log_text()
    assert "has not returned from acquire()" in log and "stopping without it" in log, log
    assert not os.path.exists(f"/dev/shm/volrec.{d.instance}")
