# SPDX-License-Identifier: MIT
"""Multi-process tests of volume publishing: the test writer (tests/ipc/ipc_testwriter.c)
against C readers (libvolrec, tests/ipc/ipc_testreader.c) and Python readers (the volrec
package, tests/ipc/ipc_pyreader.py), each in its own process."""
import itertools
import json
import os
import pathlib
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import TIMEOUT_SCALE

PY = "/usr/bin/python3"
_names = itertools.count()


class Env:
    def __init__(self, build_dir, src_dir):
        self.tests = pathlib.Path(build_dir) / "tests"
        self.src = pathlib.Path(src_dir)
        for b in ("ipc_testwriter", "ipc_testreader"):
            assert (self.tests / b).exists(), "%s not built (make tests-build)" % b
        self.instance = "pt%d-%d" % (os.getpid(), next(_names))
        self.run_dir = tempfile.mkdtemp(prefix="vripc")
        self.procs = []
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = str(self.src / "clients/python") + (
            ":" + self.env["PYTHONPATH"] if self.env.get("PYTHONPATH") else "")

    def spawn(self, argv, stdin=None):
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             stdin=stdin, text=True, env=self.env)
        self.procs.append(p)
        return p

    def writer(self, *args):
        p = self.spawn([str(self.tests / "ipc_testwriter"), "-i", self.instance,
                        "-r", self.run_dir, *args])
        line = p.stdout.readline()
        assert line.startswith("ready"), "writer failed: %s%s" % (line, p.stderr.read())
        return p

    def c_reader(self, *args, stdin=None):
        return self.spawn([str(self.tests / "ipc_testreader"), "-i", self.instance,
                           "-r", self.run_dir, *args], stdin=stdin)

    def py_reader(self, *args, stdin=None):
        return self.spawn([PY, str(self.src / "tests/ipc/ipc_pyreader.py"), "-i",
                           self.instance, "-r", self.run_dir, *args], stdin=stdin)

    def shm(self, suffix=""):
        return pathlib.Path("/dev/shm/volrec." + self.instance + suffix)

    def cleanup(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            for f in (p.stdout, p.stderr, p.stdin):
                if f:
                    f.close()
        for s in ("", ".readers"):
            try:
                self.shm(s).unlink()
            except FileNotFoundError:
                pass
        shutil.rmtree(self.run_dir, ignore_errors=True)


@pytest.fixture
def ipc(build_dir, src_dir):
    e = Env(build_dir, src_dir)
    yield e
    e.cleanup()


def finish(p, timeout=30):
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, "reader failed (%d): %s" % (p.returncode, err)
    return json.loads(out.strip().splitlines()[-1])


def slot_sequence(ipc, slot):
    data = ipc.shm().read_bytes()[:4096]
    table, hsize = struct.unpack_from("<QI", data, 48)[0], struct.unpack_from("<I", data, 44)[0]
    return struct.unpack_from("<Q", data, table + slot * hsize)[0]


def latest_sequence(ipc):
    return struct.unpack_from("<Q", ipc.shm().read_bytes()[:256], 88)[0]


def test_eight_mixed_readers_get_intact_or_counted_volumes_never_wrong_data(ipc):
    w = ipc.writer("-n", "300", "-w", "8", "-s", "4", "-g", "16x64x64")
    readers = [ipc.c_reader() for _ in range(4)] + [ipc.py_reader() for _ in range(4)]
    results = [finish(r) for r in readers]
    w.send_signal(signal.SIGTERM)
    assert w.wait(10) == 0
    for i, r in enumerate(results):
        who = "reader %d (%s): %r" % (i, "C" if i < 4 else "Python", r)
        assert r["bad"] == 0, who
        assert r["done"] == 300, who
        assert r["intact"] >= 1, who
        assert r["rejected"] == 0, who
        # every volume from the first one seen to the last is accounted for exactly once
        assert r["intact"] + r["torn"] + r["missed"] == r["last"] - r["first"] + 1, who
        assert r["last"] <= 300, who


def test_killed_reader_lease_is_reclaimed_within_one_second(ipc):
    w = ipc.writer("-n", "0", "-R", "500", "-s", "4")
    r = ipc.c_reader("-m", "hold")
    held = r.stdout.readline().split()
    assert held and held[0] == "held", r.stderr.read()
    slot, seq = int(held[1]), int(held[2])
    # while the holder lives, the writer keeps off its slot although it cycles the others
    start = latest_sequence(ipc)
    while latest_sequence(ipc) < start + 20:
        time.sleep(0.01)
    assert slot_sequence(ipc, slot) == 2 * seq
    r.kill()
    r.wait()
    t0 = time.monotonic()
    # protocol.md §3: within 1 s (scaled with the other bounds for the sanitizer stages)
    while slot_sequence(ipc, slot) == 2 * seq and time.monotonic() - t0 < 1.0 * TIMEOUT_SCALE:
        time.sleep(0.005)
    assert slot_sequence(ipc, slot) != 2 * seq, "slot still untouched 1 s after the kill"
    assert w.poll() is None


def test_stalled_readers_on_every_slot_do_not_stop_the_writer_and_see_torn_reads(ipc):
    w = ipc.writer("-n", "0", "-R", "50", "-s", "3")
    stalled, seqs = [], set()
    for make in (ipc.c_reader, ipc.py_reader, ipc.c_reader):
        while True:
            p = make("-m", "stall", stdin=subprocess.PIPE)
            held = p.stdout.readline().split()
            assert held and held[0] == "held", p.stderr.read()
            if int(held[2]) not in seqs:
                break
            p.stdin.close()
            p.wait(10)
        seqs.add(int(held[2]))
        stalled.append(p)
    # every slot is now leased by a live, stalled reader; the writer must keep publishing
    start = latest_sequence(ipc)
    t0 = time.monotonic()
    while latest_sequence(ipc) < start + 10:
        assert time.monotonic() - t0 < 10, "the writer stopped publishing"
        time.sleep(0.02)
    verdicts = []
    for p in stalled:
        out, err = p.communicate("look\n", timeout=10)
        assert p.returncode == 0, err
        verdicts.append(out.split()[-1])
    assert verdicts.count("torn") >= 2, verdicts
    assert w.poll() is None


def test_readers_follow_a_killed_and_restarted_writer(ipc):
    w = ipc.writer("-n", "0", "-R", "200", "-s", "4")
    readers = [ipc.c_reader("-m", "follow", "-k", "20"), ipc.py_reader("-m", "follow", "-k", "20")]
    lease_table = ipc.shm(".readers")
    t0 = time.monotonic()
    while True:  # both readers hold a lease entry (opened) before the writer dies
        data = lease_table.read_bytes()
        pids = {struct.unpack_from("<I", data, 64 + 64 * i)[0] for i in range(64)}
        if all(r.pid in pids for r in readers):
            break
        assert time.monotonic() - t0 < 10, "readers did not connect"
        time.sleep(0.02)
    time.sleep(0.2)
    w.kill()
    w.wait()
    w2 = ipc.writer("-n", "0", "-R", "200", "-s", "4", "-g", "8x32x64")
    for r in readers:
        res = finish(r)
        assert res["remaps"] >= 1 and res["intact_after"] >= 20 and res["bad"] == 0, res
    w2.send_signal(signal.SIGTERM)
    assert w2.wait(10) == 0
    assert not ipc.shm().exists(), "a clean stop unlinks the segments"


def test_second_writer_on_the_same_instance_is_refused(ipc):
    w = ipc.writer("-n", "0", "-R", "10")
    p = subprocess.run([str(ipc.tests / "ipc_testwriter"), "-i", ipc.instance, "-r",
                        ipc.run_dir], capture_output=True, text=True, timeout=10)
    assert p.returncode == 1
    assert "already has a live writer (pid %d" % w.pid in p.stderr
    assert w.poll() is None


def test_malformed_messages_rejected_by_c_and_python_readers(ipc):
    w = ipc.writer("-n", "50", "-w", "2", "-G")
    readers = [ipc.c_reader(), ipc.py_reader()]
    results = [finish(r) for r in readers]
    for r in results:
        # short, wrong major, and one announcing a volume never published
        assert r["rejected"] == 3 and r["bad"] == 0 and r["intact"] >= 1, r
    w.send_signal(signal.SIGTERM)
    w.wait(10)


def _import_volrec(src_dir):
    sys.path.insert(0, str(pathlib.Path(src_dir) / "clients/python"))
    import volrec
    return volrec


def test_python_rejects_wrong_version_and_foreign_segments(ipc, src_dir):
    volrec = _import_volrec(src_dir)
    w = ipc.writer("-n", "0", "-R", "100")
    w.kill()
    w.wait()
    seg = ipc.shm()
    data = bytearray(seg.read_bytes()[:256])
    with open(seg, "r+b") as f:
        f.write(struct.pack("<Q", struct.unpack_from("<Q", data, 0)[0]) +
                struct.pack("<H", 1))
        f.flush()
        # a segment of the major before (an older volrecd): both versions named
        with pytest.raises(volrec.ProtocolError,
                           match=r"protocol version 1\.\d+; this client supports major version "
                                 r"2 only \(protocol 2\.\d+\)"):
            volrec.Client(ipc.instance, run_dir=ipc.run_dir)
        f.seek(0)
        f.write(b"NOTVOLRC")
        f.flush()
        with pytest.raises(volrec.ProtocolError, match="bad magic"):
            volrec.Client(ipc.instance, run_dir=ipc.run_dir)
    with pytest.raises(volrec.ProtocolError, match="major version 3"):
        volrec.decode_vol(struct.pack("<IHHI", volrec.VOL_MAGIC, 3, 0, 128) + bytes(116))
    with pytest.raises(volrec.ProtocolError, match="too short"):
        volrec.decode_vol(b"abc")
    with pytest.raises(volrec.NoDaemon):
        volrec.Client("no-such-instance-%d" % os.getpid(), run_dir=ipc.run_dir)
    with pytest.raises(ValueError):
        volrec.Client("bad/name")


def test_python_volume_is_a_read_only_zero_copy_view(ipc, src_dir):
    volrec = _import_volrec(src_dir)
    ipc.writer("-n", "0", "-R", "100", "-s", "4", "-g", "4x8x16")
    with volrec.Client(ipc.instance, run_dir=ipc.run_dir) as client:
        t0 = time.monotonic()
        while True:
            try:
                lease = client.latest()
                break
            except BlockingIOError:
                assert time.monotonic() - t0 < 5
                time.sleep(0.01)
        try:
            with lease as vol:
                assert vol.shape == (4, 8, 16) and not vol.flags.writeable
                assert vol.sequence >= 1 and vol.missed == 0
                with pytest.raises(ValueError):
                    vol[0, 0, 0] = 1
                addr = vol.__array_interface__["data"][0]
                # writing through the raw address faults: the mapping itself is PROT_READ
                code = ("import ctypes,mmap,os\n"
                        "fd=os.open('/dev/shm/volrec.%s',os.O_RDONLY)\n"
                        "m=mmap.mmap(fd,0,mmap.MAP_SHARED,mmap.PROT_READ)\n"
                        "import numpy as np\n"
                        "v=np.frombuffer(m,dtype=np.uint8)\n"
                        "ctypes.memset(v.__array_interface__['data'][0]+%d,0,1)\n"
                        % (ipc.instance, 2 << 20))
                p = subprocess.run([PY, "-c", code], capture_output=True, timeout=20)
                assert p.returncode == -signal.SIGSEGV, p.stderr
                assert addr % 4096 == 0
        except volrec.TornRead:
            pass  # overwritten while we looked: reported, which is what must happen
        assert client.received == 1


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_socket_and_run_dir_modes_do_not_depend_on_the_umask(ipc, umask):
    """The pub socket is 0660 and a run_dir the writer creates 0770, whatever the umask (with
    022 the socket was srwxr-xr-x and group members could not connect)."""
    run_dir = os.path.join(ipc.run_dir, "sub")
    p = subprocess.Popen([str(ipc.tests / "ipc_testwriter"), "-i", ipc.instance, "-r", run_dir,
                          "-n", "0", "-R", "10"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, umask=umask)
    ipc.procs.append(p)
    line = p.stdout.readline()
    assert line.startswith("ready"), p.stderr.read()
    sock = os.path.join(run_dir, ipc.instance + ".pub")
    st = os.stat(sock)
    assert stat.S_ISSOCK(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o660, oct(st.st_mode)
    assert stat.S_IMODE(os.stat(run_dir).st_mode) == 0o770, oct(os.stat(run_dir).st_mode)
    # and a reader connects through it
    r = ipc.spawn([str(ipc.tests / "ipc_testreader"), "-i", ipc.instance, "-r", run_dir,
                   "-m", "hold"])
    held = r.stdout.readline().split()
    assert held and held[0] == "held", r.stderr.read()


def _daemon_config(instance, run_dir, max_readers):
    """A small CPU daemon (as tests/integration/test_tools.py), JSON being YAML."""
    return {
        "instance": instance, "backend": "cpu", "cpu": {"threads": 1},
        "source": {"type": "synth", "rate": 25,
                   "synth": {"seed": 3, "phantom": "retina", "snr_db": 40}},
        "geometry": {"samples_per_ascan": 512, "sample_type": "u16", "ascans_per_bscan": 12,
                     "bscans_per_volume": 12, "stride": [3, 3]},
        "reconstruct": {"mode": "noncumulative"},
        "output": {"slots": 4},
        "pipeline": {"ring_bscans": 48, "overflow": "block"},
        "ipc": {"run_dir": str(run_dir), "status_interval_ms": 200,
                "max_readers": max_readers},
        "log": {"level": "info"},
    }


def test_status_and_reload_work_with_a_full_reader_table(ipc, build_dir):
    """ipc.max_readers: 1, taken by a reader: `volrec status` (no lease needed) and `volrec
    reload` (listening needs no lease) work; `volrec snapshot` (needs one) says why not."""
    bin_dir = pathlib.Path(build_dir) / "bin"
    cfg = _daemon_config(ipc.instance, ipc.run_dir, 1)
    conf = pathlib.Path(ipc.run_dir) / "volrecd.yaml"
    conf.write_text(json.dumps(cfg) + "\n")
    log = open(pathlib.Path(ipc.run_dir) / "volrecd.log", "wb")
    d = subprocess.Popen([str(bin_dir / "volrecd"), "-c", str(conf)], stdout=log, stderr=log,
                         umask=0o022)
    ipc.procs.append(d)
    try:
        t0 = time.monotonic()
        while True:  # the holder retries until a volume is published, once the segment exists
            holder = ipc.c_reader("-m", "hold")
            held = holder.stdout.readline().split()
            if held and held[0] == "held":
                break
            err = holder.stderr.read()
            assert "no volrec daemon" in err and time.monotonic() - t0 < 60, err
            assert d.poll() is None, (pathlib.Path(ipc.run_dir) / "volrecd.log").read_text()
            time.sleep(0.1)

        def volrec(*args):
            return subprocess.run([str(bin_dir / "volrec"), *args, "-i", ipc.instance,
                                   "-r", ipc.run_dir], capture_output=True, text=True,
                                  timeout=60)

        r = volrec("status", "--json")
        assert r.returncode == 0, r.stderr
        st = json.loads(r.stdout)
        assert st["readers"] == 1
        assert "send_dropped" not in st["publisher"]  # libzmq never reports HWM drops
        assert st["publisher"]["send_errors"] == 0
        t0 = time.monotonic()
        r = volrec("reload")
        assert r.returncode == 0, (r.returncode, r.stdout, r.stderr, time.monotonic() - t0)
        assert "reloaded" in r.stdout
        r = volrec("snapshot", "-o", str(pathlib.Path(ipc.run_dir) / "snap"))
        assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
        assert "ipc.max_readers" in r.stderr, r.stderr
        sock = pathlib.Path(ipc.run_dir) / (ipc.instance + ".pub")
        assert stat.S_IMODE(sock.stat().st_mode) == 0o660  # the daemon ran with umask 022
    finally:
        d.terminate()
        d.wait(30)
        log.close()


def test_volumes_after_dropped_epochs_carry_dropped_before(ipc, build_dir):
    """volrecd with a source that fails every 30th acquire (the fault shim): the epoch it was in
    is dropped, and the next published volume, and only it, has VOLREC_FLAG_DROPPED_BEFORE."""
    zmq = pytest.importorskip("zmq")
    bin_dir = pathlib.Path(build_dir) / "bin"
    cfg = _daemon_config(ipc.instance, ipc.run_dir, 4)
    cfg["pipeline"]["overflow"] = "drop_epoch"
    cfg["source"] = {"type": "shim", "rate": 50,
                     "shim": {"library": str(pathlib.Path(build_dir) / "lib" /
                                             "libvolrec_fault_shim.so"),
                              "timeout_ms": 300, "args": {"fail_every": 30}}}
    conf = pathlib.Path(ipc.run_dir) / "volrecd.yaml"
    conf.write_text(json.dumps(cfg) + "\n")
    log = open(pathlib.Path(ipc.run_dir) / "volrecd.log", "wb")
    d = subprocess.Popen([str(bin_dir / "volrecd"), "-c", str(conf)], stdout=log, stderr=log)
    ipc.procs.append(d)
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"vol")
    sub.setsockopt(zmq.RCVHWM, 100000)
    sub.connect("ipc://%s/%s.pub" % (ipc.run_dir, ipc.instance))
    vols = []
    try:
        end = time.monotonic() + 60
        while time.monotonic() < end and len(vols) < 40:
            assert d.poll() is None, (pathlib.Path(ipc.run_dir) / "volrecd.log").read_text()
            if sub.poll(200):
                _, body = sub.recv_multipart()
                # protocol.h struct volrec_vol_msg: sequence @24, epoch @40, flags @104
                seq, = struct.unpack_from("<Q", body, 24)
                epoch, = struct.unpack_from("<Q", body, 40)
                flags, = struct.unpack_from("<I", body, 104)
                vols.append((seq, epoch, flags))
    finally:
        sub.close(0)
        ctx.term()
        d.terminate()
        d.wait(30)
        log.close()
    assert len(vols) >= 40, vols
    pairs = [(a, b) for a, b in zip(vols, vols[1:]) if b[0] == a[0] + 1]
    gaps = [(a, b) for a, b in pairs if b[1] != a[1] + 1]
    assert gaps, "no epoch was dropped: %r" % vols
    for a, b in pairs:
        assert bool(b[2] & 0x4) == (b[1] != a[1] + 1), (a, b)
        assert not b[2] & 0x1, (a, b)  # bit 0 is reserved, never set
