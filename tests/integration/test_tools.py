# SPDX-License-Identifier: MIT
"""The operator's tools against the real daemon: `volrec status`, `watch`, `record`, `snapshot`,
`reload` and `stop` on a volrecd running the synthetic retina on the CPU backend at a small
geometry, with its own instance name and run_dir."""
import json
import os
import pathlib
import re
import resource
import shutil
import signal
import struct
import subprocess
import tempfile
import threading
import time
import uuid
import zlib

import h5py
import numpy as np
import pytest

import volrec
from conftest import TIMEOUT_SCALE
from daemonkit import remove_segments

TIMEOUT = 60.0 * TIMEOUT_SCALE  # generous: the test machine is small and loaded
VOLUME_BYTES = 36 * 36 * 256  # one u8 output volume of config(): 36 x 36 x 256
# output slots: a recorder may fall up to 0.64 s behind the daemon before it misses a volume
SLOTS = 16
# a sanitized recorder (several times slower) may still fall behind on a loaded machine: it
# must then list each volume it missed in /missed; unsanitized, a test requires none missed
STRICT = not os.environ.get("VOLREC_SANITIZER")


def config(instance, run_dir, slots=SLOTS):
    """36 x 36 x 256 volumes at 25 per second (JSON is YAML)."""
    return {
        "instance": instance,
        "backend": "cpu",
        "cpu": {"threads": 1},
        "source": {"type": "synth", "rate": 25,
                   "synth": {"seed": 3, "phantom": "retina", "motion": {"deg_per_s": 0.25},
                             "snr_db": 40}},
        "geometry": {"samples_per_ascan": 512, "sample_type": "u16", "ascans_per_bscan": 12,
                     "bscans_per_volume": 12, "stride": [3, 3]},
        "reconstruct": {"mode": "noncumulative"},
        # the en-face views leave out the zero-delay line (bright at every position)
        "view": {"slab": [8, 256]},
        "output": {"slots": slots},
        "pipeline": {"ring_bscans": 48, "overflow": "block"},
        "ipc": {"run_dir": str(run_dir), "status_interval_ms": 200},
        "log": {"level": "info"},
    }


class Daemon:
    def __init__(self, bin_dir, slots=SLOTS, env=None):
        self.bin = pathlib.Path(bin_dir)
        self.env = env  # of the volrecd process, None: ours
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="vrt", dir="/tmp"))
        self.run_dir = self.dir / "run"
        self.run_dir.mkdir()
        self.instance = "tt" + uuid.uuid4().hex[:10]
        self.cfg = config(self.instance, self.run_dir, slots)
        self.config = self.dir / "volrecd.yaml"
        self.write(self.cfg)
        self.log = open(self.dir / "volrecd.log", "ab")
        self.start()

    def start(self):
        """Start volrecd on the configuration file; ready once a volume is published."""
        self.proc = subprocess.Popen([str(self.bin / "volrecd"), "-c", str(self.config)],
                                     stdout=self.log, stderr=self.log, env=self.env)
        deadline = time.monotonic() + TIMEOUT
        while True:
            assert self.proc.poll() is None, self.log_text()
            try:
                self.one_volume(5.0)
                break
            # TornRead: with 2 slots and a starved client the daemon may overwrite the
            # volume while it is held; it was published, but ask again for a whole one
            except (volrec.NoDaemon, volrec.Timeout, volrec.TornRead, BlockingIOError):
                assert time.monotonic() < deadline, self.log_text()
                time.sleep(0.1)

    def one_volume(self, timeout):
        """Connect a client and wait for the next volume (timeout seconds)."""
        c = volrec.Client(self.instance, run_dir=str(self.run_dir))
        try:
            with c.next_volume(timeout):
                pass
        finally:
            c.close()

    def stop(self):
        """SIGTERM, and wait until it is gone."""
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=TIMEOUT) == 0, self.log_text()

    def restart(self, cfg=None):
        """Stop, optionally write another configuration, start again (a new session)."""
        self.stop()
        if cfg is not None:
            self.write(cfg)
        self.start()

    def write(self, cfg):
        self.config.write_text(json.dumps(cfg) + "\n")

    def log_text(self):
        return (self.dir / "volrecd.log").read_text(errors="replace")

    def volrec(self, *args, timeout=TIMEOUT, **kw):
        """Run `volrec ARGS -i INSTANCE -r RUN_DIR`."""
        return subprocess.run([str(self.bin / "volrec"), *args, "-i", self.instance,
                               "-r", str(self.run_dir)], capture_output=True, text=True,
                              timeout=timeout, **kw)

    def volrec_popen(self, *args, **kw):
        """Start `volrec ARGS -i INSTANCE -r RUN_DIR`, its output piped as text."""
        return subprocess.Popen([str(self.bin / "volrec"), *args, "-i", self.instance,
                                 "-r", str(self.run_dir)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        remove_segments(self.instance)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def daemon(bin_dir):
    d = Daemon(bin_dir)
    yield d
    d.close()


@pytest.fixture
def own_daemon(bin_dir):
    """A daemon a test may stop or reconfigure."""
    d = Daemon(bin_dir)
    yield d
    d.close()


def read_png(path):
    """Decode an 8-bit greyscale, non-interlaced PNG into a numpy array (zlib + unfiltering)."""
    data = pathlib.Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, ihdr, text = 8, b"", None, {}
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        assert zlib.crc32(kind + body) == struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"tEXt":
            k, v = body.split(b"\0", 1)
            text[k.decode()] = v.decode("latin-1")
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = ihdr
    assert (depth, ctype, interlace) == (8, 0, 0), ihdr
    raw = zlib.decompress(idat)
    img = np.zeros((h, w), np.int32)
    prev = np.zeros(w, np.int32)
    for y in range(h):
        f = raw[y * (w + 1)]
        line = np.frombuffer(raw, np.uint8, w, y * (w + 1) + 1).astype(np.int32)
        out = np.zeros(w, np.int32)
        for x in range(w):
            a = out[x - 1] if x else 0
            b = prev[x]
            c = prev[x - 1] if x else 0
            if f == 0:
                pred = 0
            elif f == 1:
                pred = a
            elif f == 2:
                pred = b
            elif f == 3:
                pred = (a + b) // 2
            else:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            out[x] = (line[x] + pred) & 0xFF
        img[y] = out
        prev = out
    return img.astype(np.uint8), text


# ---- help, usage and no daemon ------------------------------------------------------------

TOOLS = ["status", "watch", "record", "snapshot", "reload", "stop"]


@pytest.mark.parametrize("cmd", TOOLS)
def test_help_documents_options_and_exit_codes(bin_dir, cmd):
    r = subprocess.run([str(bin_dir / "volrec"), cmd, "--help"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for word in ("--instance", "--run-dir", "--config", "Exit status", "3 no daemon"):
        assert word in r.stdout, f"{cmd} --help lacks {word!r}:\n{r.stdout}"


@pytest.mark.parametrize("cmd", TOOLS)
def test_no_daemon_exits_3(bin_dir, tmp_path, cmd):
    args = {"record": ["-o", str(tmp_path / "x.h5"), "-n", "1"],
            "snapshot": ["-o", str(tmp_path / "snap")]}.get(cmd, [])
    r = subprocess.run([str(bin_dir / "volrec"), cmd, *args, "-i", "nodaemon" + uuid.uuid4().hex[:8],
                        "-r", str(tmp_path)], capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    assert "no volrecd running" in r.stderr
    assert not (tmp_path / "x.h5").exists()


def test_bad_option_exits_2(bin_dir):
    r = subprocess.run([str(bin_dir / "volrec"), "record", "-n", "zero"], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "--count zero" in r.stderr, r.stderr


@pytest.mark.parametrize("option,value,need", [
    ("-s", "2e7", "need a decimal number of seconds > 0 and at most 10000000"),
    ("-s", "0x10", "need a decimal number of seconds > 0"),
    ("-s", " 5", "need a decimal number of seconds > 0"),
    ("-w", "inf", "need a decimal number of seconds >= 0 and at most 10000000"),
    ("-n", "0", "need a whole number >= 1"),
])
def test_bad_option_value_names_the_range(bin_dir, option, value, need):
    """A value out of range or in a spelling strtod takes but an operator would not mean
    (hexadecimal, a leading space) is a usage error that says what is needed."""
    r = subprocess.run([str(bin_dir / "volrec"), "record", "-o", "/nonexistent/x.h5", option,
                        value, "-i", "no-such-instance"], capture_output=True, text=True)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "%s: need" % value in r.stderr and need in r.stderr, r.stderr


# ---- the processing helper: the tools do not link the processing stack (issue 12.6) --------

PROCESSING = ["process", "sim", "bench", "calibrate"]


@pytest.fixture
def fake_daemon(tmp_path):
    """A process named volrecd (a copy of sleep) with a pid file, and a data segment of its
    instance written by the test: (instance, run_dir, pid)."""
    exe, run_dir = tmp_path / "volrecd", tmp_path / "run"
    shutil.copy("/bin/sleep", exe)
    run_dir.mkdir()
    p = subprocess.Popen([str(exe), "600"])
    instance = "tf" + uuid.uuid4().hex[:10]
    (run_dir / (instance + ".pid")).write_text("%d\n" % p.pid)
    yield instance, run_dir, p.pid
    p.kill()
    p.wait()
    remove_segments(instance)


def segment_header(pid, **over):
    """A data segment header of a live daemon pid: 4 x 4 x 4 u8 volumes in 2 slots."""
    from volrec import _protocol as proto
    mib2 = proto.SLOT_ALIGN
    fields = dict(magic=proto.SHM_MAGIC, major=proto.PROTO_MAJOR, minor=proto.PROTO_MINOR,
                  header_size=proto.SHM_HEADER.size, session_id=77, ny=4, nx=4, nz=4,
                  dtype=proto.DTYPE_U8, slot_count=2, slot_header_size=proto.SLOT_HEADER.size,
                  slot_table_offset=proto.SHM_HEADER.size, data_offset=mib2,
                  slot_stride=mib2, volume_bytes=64, segment_size=3 * mib2,
                  latest_slot=proto.SLOT_NONE, writer_pid=pid, state=proto.STATE_LIVE,
                  max_readers=4)
    fields.update(over)
    return proto.SHM_HEADER.pack(**fields)


@pytest.mark.parametrize("cmd", ["status", "watch", "record", "snapshot"])
@pytest.mark.parametrize("over,why", [
    (dict(major=1, minor=3), r"data segment speaks protocol version 1\.3; this client "
                             r"supports major version 2 only \(protocol 2\.\d+\): volrecd and "
                             r"its clients must be of the same major version"),
    (dict(major=3, minor=0), r"data segment speaks protocol version 3\.0; this client supports "
                    r"major version 2 only"),
    (dict(slot_stride=4096), r"data segment layout is inconsistent"),
])
def test_a_segment_of_another_version_or_corrupt_is_named(bin_dir, fake_daemon, tmp_path, cmd,
                                                          over, why):
    """A tool that meets a segment of another protocol major version, or with a layout that
    does not add up, says which (libvolrec's own words), not only "protocol error"."""
    instance, run_dir, pid = fake_daemon
    seg = pathlib.Path("/dev/shm/volrec." + instance)
    with open(seg, "wb") as f:
        f.truncate(3 * 2 * 1024 * 1024)
        f.write(segment_header(pid, **over))
    args = {"record": ["-o", str(tmp_path / "x.h5")], "snapshot": ["-o", str(tmp_path / "s")],
            "watch": ["-n", "1"]}.get(cmd, [])
    r = subprocess.run([str(bin_dir / "volrec"), cmd, *args, "-i", instance, "-r",
                        str(run_dir)], capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert re.search(r"volrec %s: cannot read instance '%s' \(/dev/shm/volrec\.%s\): %s"
                     % (cmd, instance, instance, why), r.stderr), r.stderr


def test_volrec_links_no_cuda_and_no_fftw(bin_dir):
    libs = subprocess.run(["ldd", str(bin_dir / "volrec")], capture_output=True, text=True,
                          check=True).stdout
    for lib in ("libcufft", "libcudart", "libcuda.", "libfftw3f"):
        assert lib not in libs, f"volrec links {lib}:\n{libs}"
    assert "libhdf5" in libs and "libpng" in libs and "libjson-c" in libs, libs
    # nor the backends, the sources or the simulator (the helper has them)
    syms = subprocess.run(["nm", "--defined-only", str(bin_dir / "volrec")], capture_output=True,
                          text=True, check=True).stdout
    own = [l.split()[-1] for l in syms.splitlines()
           if re.search(r" T (be|cpu|gpu|sim|src)_", l)]
    assert not own, own
    assert re.search(r" T cmd_record$", syms, re.M)


@pytest.mark.parametrize("cmd", PROCESSING)
def test_processing_subcommands_run_through_the_helper(bin_dir, cmd):
    r = subprocess.run([str(bin_dir / "volrec"), cmd, "--help"], capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"usage: volrec {cmd} "), r.stdout
    r = subprocess.run([str(bin_dir / "volrec"), cmd, "--no-such-option"], capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert r.returncode == 2, (r.returncode, r.stderr)  # the helper's exit status comes through


def test_bench_prints_a_case_of_the_one_table(bin_dir):
    """`volrec bench --print-case NAME` prints the case of tools/bench/cases.c as JSON, what the
    benchmarks in Python take their geometries from: the configuration keys it sets (the
    preprocessing only where it differs from the defaults), its end-to-end run, its targets."""
    r = subprocess.run([str(bin_dir / "volrec"), "bench", "--print-case", "classic-2048"],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    c = json.loads(r.stdout)
    assert c["name"] == "classic-2048", c
    assert c["config"]["geometry"] == {
        "samples_per_ascan": 2048, "sample_type": "u16", "ascans_per_bscan": 1024,
        "bscans_per_volume": 64, "stride": [1, 1], "depth_range": [0, 1024]}, c["config"]
    # background ascan_mean and window hann are the defaults
    assert c["config"]["preprocess"] == {"dispersion": {"coeffs": [2, -0.5]},
                                         "db_range": [20, 90]}, c["config"]
    assert c["config"]["reconstruct"] == {"mode": "none"}, c["config"]
    assert c["config"]["pipeline"] == {"ring_bscans": 256}, c["config"]
    assert c["e2e"] == {"epochs": 2, "paced_rate": 160}, c
    assert c["targets"] == {"ascans_per_s": 10e6}, c


def test_bench_print_case_of_an_unknown_name_lists_the_cases(bin_dir):
    r = subprocess.run([str(bin_dir / "volrec"), "bench", "--print-case", "classic"],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "volrec bench: --print-case classic: no such case (cases: tiny demo classic-2048 " \
        in r.stderr, r.stderr
    assert r.stdout == ""


def test_volrec_help_lists_the_helpers_commands(bin_dir):
    r = subprocess.run([str(bin_dir / "volrec"), "--help"], capture_output=True, text=True)
    assert r.returncode == 0
    tools, processing = r.stdout.split("processing (run by the helper volrec-process):")
    for cmd in TOOLS:
        assert f"  {cmd} " in tools, r.stdout
    for cmd in PROCESSING:
        assert f"  {cmd} " in processing, r.stdout


def test_sim_and_process_through_the_helper_of_an_installed_tree(bin_dir, tmp_path):
    """<prefix>/bin/volrec finds <prefix>/libexec/volrec/volrec-process, whatever the prefix."""
    prefix = tmp_path / "prefix"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "libexec/volrec").mkdir(parents=True)
    shutil.copy2(bin_dir / "volrec", prefix / "bin/volrec")
    shutil.copy2(bin_dir / "volrec-process", prefix / "libexec/volrec/volrec-process")
    cfg = config("helper", tmp_path)
    cfg["geometry"].update(samples_per_ascan=256)
    del cfg["view"]  # the default slab of a 128-deep volume
    (tmp_path / "c.yaml").write_text(json.dumps(cfg))
    env = {k: v for k, v in os.environ.items() if k != "VOLREC_EXEC_PATH"}
    r = subprocess.run([str(prefix / "bin/volrec"), "sim", "-c", str(tmp_path / "c.yaml"), "-o",
                        str(tmp_path / "s.raw"), "-n", "9"], capture_output=True, text=True,
                       timeout=TIMEOUT, env=env)
    assert r.returncode == 0, r.stderr
    cfg["source"] = {"type": "replay", "replay": {"path": str(tmp_path / "s.raw")}}
    (tmp_path / "p.yaml").write_text(json.dumps(cfg))
    r = subprocess.run([str(prefix / "bin/volrec"), "process", "-c", str(tmp_path / "p.yaml"),
                        "-o", str(tmp_path / "p.h5")], capture_output=True, text=True,
                       timeout=TIMEOUT, env=env)
    assert r.returncode == 0, r.stderr
    with h5py.File(tmp_path / "p.h5", "r") as f:
        assert f["volumes"].shape == (9, 36, 36, 128)


def test_missing_helper_is_a_clear_message(bin_dir, tmp_path):
    if os.path.exists("/usr/local/libexec/volrec/volrec-process"):
        pytest.skip("a volrec-process is installed in /usr/local on this machine")
    shutil.copy2(bin_dir / "volrec", tmp_path / "volrec")
    env = {k: v for k, v in os.environ.items() if k != "VOLREC_EXEC_PATH"}
    r = subprocess.run([str(tmp_path / "volrec"), "process", "--help"], capture_output=True,
                       text=True, env=env)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "volrec process: needs the processing helper volrec-process, which is not installed" \
        in r.stderr, r.stderr
    assert f"{tmp_path}/volrec-process" in r.stderr and "libexec/volrec/volrec-process" in r.stderr
    # VOLREC_EXEC_PATH names the helper's directory
    env["VOLREC_EXEC_PATH"] = str(bin_dir)
    r = subprocess.run([str(tmp_path / "volrec"), "process", "--help"], capture_output=True,
                       text=True, env=env)
    assert r.returncode == 0 and r.stdout.startswith("usage: volrec process"), r.stderr
    # the tools themselves need no helper
    r = subprocess.run([str(tmp_path / "volrec"), "status", "--help"], capture_output=True,
                       text=True, env={k: v for k, v in env.items() if k != "VOLREC_EXEC_PATH"})
    assert r.returncode == 0, r.stderr


# ---- status and watch --------------------------------------------------------------------

def test_status_screen(daemon):
    r = daemon.volrec("status")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert f"volrecd {daemon.instance}: running" in out, out
    assert f"volume    36 x 36 x 256 [Y][X][Z] u8, {SLOTS} slots" in out, out
    assert "backend   cpu" in out and "source    synth" in out, out
    assert re.search(r"rates     [0-9.]+ volumes/s", out), out
    assert re.search(r"acquire->publish [0-9.]+ / [0-9.]+", out), out
    assert "ring_full 0" in out and "readers" in out and "event     started" in out, out


def test_status_json_is_the_daemons_message(daemon):
    r = daemon.volrec("status", "--json")
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert st["instance"] == daemon.instance and st["state"] == "running"
    assert st["geometry"]["volume"] == [36, 36, 256]
    assert st["pid"] == daemon.proc.pid


def test_status_takes_instance_and_run_dir_from_config(daemon):
    r = subprocess.run([str(daemon.bin / "volrec"), "status", "--json", "-c",
                        str(daemon.config)], capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["instance"] == daemon.instance


def test_watch_plain_lines_and_count(daemon):
    r = daemon.volrec("watch", "--count", "30")
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stdout.splitlines() if "volume #" in l]
    assert lines, r.stdout
    assert re.search(r"seen 30, missed \d+, torn \d+$", lines[-1]), lines[-1]
    seqs = [int(m) for m in re.findall(r"volume #(\d+)", r.stdout)]
    assert seqs == sorted(seqs) and seqs[-1] > 0


def test_watch_ends_cleanly_on_sigint(daemon):
    p = subprocess.Popen([str(daemon.bin / "volrec"), "watch", "-i", daemon.instance, "-r",
                          str(daemon.run_dir)], stdout=subprocess.PIPE, text=True)
    out = Lines(p.stdout)
    out.wait_for("running")  # watching (its signal handling set up before it prints)
    p.send_signal(signal.SIGINT)
    p.wait(timeout=TIMEOUT)
    assert p.returncode == 0, out.finish()
    assert "running" in out.finish()


# ---- record -------------------------------------------------------------------------------

def test_record_equals_what_a_client_received(daemon, tmp_path):
    out = tmp_path / "rec.h5"
    got = {}
    c = volrec.Client(daemon.instance, run_dir=str(daemon.run_dir))
    try:
        rec = daemon.volrec_popen("record", "-o", str(out), "-n", "10")
        deadline = time.monotonic() + TIMEOUT
        while rec.poll() is None or len(got) < 5:
            assert time.monotonic() < deadline
            try:
                with c.next_volume(5.0) as v:
                    got[(int(v.session_id), int(v.sequence))] = np.array(v)
            except volrec.TornRead:
                pass
        stdout, stderr = rec.communicate(timeout=TIMEOUT)
    finally:
        c.close()
    assert rec.returncode == 0 or (not STRICT and rec.returncode == 4), (rec.returncode, stderr)
    assert "10 volumes of 36 x 36 x 256" in stdout
    with h5py.File(out, "r") as f:
        vols = f["volumes"]
        assert vols.shape == (10, 36, 36, 256) and vols.dtype == np.uint8
        assert vols.chunks == (1, 36, 36, 256)
        seq, ses = f["sequence"][:], f["session"][:]
        check_sequences(f, "record -n 10")
        if rec.returncode == 0:  # nothing missed
            assert list(np.diff(seq)) == [1] * 9 and f["missed"].shape == (0,)
        assert f.attrs["volumes"] == 10 and f.attrs["complete"] == (rec.returncode == 0)
        assert list(f.attrs["shape"]) == [36, 36, 256]
        assert f.attrs["samples_per_ascan"] == 512 and list(f.attrs["stride"]) == [3, 3]
        assert json.loads(f.attrs["status_json"])["instance"] == daemon.instance
        # the daemon's effective configuration, defaults filled in
        text = lambda v: v.decode() if isinstance(v, bytes) else v  # noqa: E731
        assert text(f.attrs["config_yaml_source"]) == "daemon"
        eff = text(f.attrs["config_yaml"])
        assert f"instance: \"{daemon.instance}\"" in eff and "samples_per_ascan: 512" in eff
        assert "zero_pad: 1" in eff  # a default the test's file does not set
        for k in ("epoch", "volume_id", "t_first_ns", "t_last_ns", "t_publish_ns", "latency_ns"):
            assert f[k].shape == (10,), k
        assert f["offset"].shape == (10, 2)
        assert (f["t_publish_ns"][:] >= f["t_last_ns"][:]).all()
        same = 0
        for i in range(10):
            key = (int(ses[i]), int(seq[i]))
            if key in got:
                np.testing.assert_array_equal(vols[i], got[key], err_msg=f"volume {key}")
                same += 1
    assert same >= 5, f"only {same} of the recorded volumes were seen by the client"


def published(daemon):
    """The data segment header's latest published sequence (docs/protocol.md: offset 88)."""
    with open(f"/dev/shm/volrec.{daemon.instance}", "rb") as shm:
        shm.seek(88)
        return struct.unpack("<Q", shm.read(8))[0]


def wait_published(daemon, n):
    """Until the daemon has published n more volumes, however fast or slow this machine is."""
    s0, deadline = published(daemon), time.monotonic() + TIMEOUT
    while published(daemon) < s0 + n:
        assert time.monotonic() < deadline, "the daemon stopped publishing"
        time.sleep(0.05)


def test_record_reports_missed_volumes_when_stalled(daemon, tmp_path):
    out = tmp_path / "stalled.h5"
    rec = daemon.volrec_popen("record", "-o", str(out), "-n", "60")  # no time limit
    wait_for_size(out, VOLUME_BYTES, rec)  # recording: its first volume is in the file
    rec.send_signal(signal.SIGSTOP)
    # stalled while the daemon publishes SLOTS + 8 volumes into its SLOTS slots: at least 7 of
    # them are overwritten before the recorder can copy them (however fast or slow this machine)
    wait_published(daemon, SLOTS + 8)
    rec.send_signal(signal.SIGCONT)
    stdout, stderr = rec.communicate(timeout=TIMEOUT)
    assert rec.returncode == 4, (rec.returncode, stdout, stderr)
    assert "missed" in stderr and "missed (see /missed)" in stdout
    with h5py.File(out, "r") as f:
        missed = f["missed"][:]
        assert len(missed) >= 1
        total = int(sum(m["last"] - m["first"] + 1 for m in missed))
        assert total == f.attrs["missed_volumes"] and total >= 7, missed
        assert f.attrs["complete"] == 0
        # written + missed cover every sequence number from the first to the last
        seq = set(int(s) for s in f["sequence"][:])
        for m in missed:
            rng = set(range(int(m["first"]), int(m["last"]) + 1))
            assert not rng & seq
            seq |= rng
        assert seq == set(range(min(seq), max(seq) + 1))
        assert f["volumes"].shape[0] == f.attrs["volumes"]


def test_record_stops_cleanly_when_the_file_cannot_grow(daemon, tmp_path):
    out = tmp_path / "full.h5"

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (3 << 20, 3 << 20))

    r = subprocess.run([str(daemon.bin / "volrec"), "record", "-o", str(out), "-n", "100",
                        "-i", daemon.instance, "-r", str(daemon.run_dir)], capture_output=True,
                       text=True, timeout=TIMEOUT, preexec_fn=limit)
    assert r.returncode == 8, (r.returncode, r.stdout, r.stderr)
    assert "file size limit" in r.stderr, r.stderr
    with h5py.File(out, "r") as f:  # closed properly: readable, consistent
        n = f.attrs["volumes"]
        assert 1 <= n < 100 and f["volumes"].shape[0] == n
        assert f.attrs["end"] == b"disk full" or f.attrs["end"] == "disk full"


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MiB tmpfs of its own: a disk another process can fill."""
    m = tmp_path / "small"
    m.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0755", "tmpfs", str(m)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (root in a namespace that allows mounts "
                    f"needed): {r.stderr.strip()}")
    try:
        yield m
    finally:
        subprocess.run(["umount", "-l", str(m)], capture_output=True)


def wait_for_size(path, size, proc):
    deadline = time.monotonic() + TIMEOUT
    while not (path.exists() and path.stat().st_size >= size):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} did not reach {size} bytes"
        time.sleep(0.05)


def test_record_keeps_every_volume_when_another_process_fills_the_disk(daemon, small_disk):
    """Issue 13.1: was SIGSEGV in HDF5's exit handlers and an unreadable file."""
    out = small_disk / "rec.h5"
    got = {}
    c = volrec.Client(daemon.instance, run_dir=str(daemon.run_dir))
    try:
        rec = daemon.volrec_popen("record", "-o", str(out), "-s", "120")
        hog = None
        deadline = time.monotonic() + TIMEOUT
        while rec.poll() is None:
            assert time.monotonic() < deadline, "the recorder did not stop on a full disk"
            if hog is None and out.exists() and out.stat().st_size > 3 * VOLUME_BYTES:
                # another process takes every byte left, at once
                hog = subprocess.run(["dd", "if=/dev/zero", f"of={small_disk / 'hog'}",
                                      "bs=64k"], capture_output=True, text=True)
                assert "No space left" in hog.stderr, hog.stderr
            try:
                with c.next_volume(1.0) as v:
                    got[(int(v.session_id), int(v.sequence))] = np.array(v)
            except (volrec.TornRead, volrec.Timeout):
                pass
        stdout, stderr = rec.communicate(timeout=TIMEOUT)
    finally:
        c.close()
    assert rec.returncode == 8, (rec.returncode, stdout, stderr)
    assert "disk full" in stderr and "(disk full)" in stdout, stderr
    n = int(re.search(r"(\d+) volumes of 36 x 36 x 256", stdout).group(1))
    assert n >= 3, stdout
    with h5py.File(out, "r") as f:  # readable; every completed volume is there
        vols = f["volumes"]
        assert vols.shape == (n, 36, 36, 256) and f.attrs["volumes"] == n
        assert f.attrs["end"] in (b"disk full", "disk full")
        for k in ("sequence", "session", "epoch", "t_publish_ns", "latency_ns", "flags"):
            assert f[k].shape == (n,), k
        seq, ses = f["sequence"][:], f["session"][:]
        check_sequences(f, "disk full")  # in order, nothing doubled, any gap listed
        if STRICT:  # nothing missed
            assert list(np.diff(seq)) == [1] * (n - 1) and f["missed"].shape == (0,), seq
        same = 0
        for i in range(n):
            assert vols[i].any(), f"volume {i} is empty"
            key = (int(ses[i]), int(seq[i]))
            if key in got:
                np.testing.assert_array_equal(vols[i], got[key], err_msg=f"volume {key}")
                same += 1
    assert same >= 1, "none of the recorded volumes was seen by the client"
    # the space reserved for volumes that did not come is given back
    st = os.stat(out)
    assert st.st_blocks * 512 < st.st_size + (1 << 20), (st.st_size, st.st_blocks * 512)


NO_RESERVATION_C = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/statvfs.h>
/* a file system that cannot reserve space and claims to have plenty */
int fallocate(int fd, int mode, off_t off, off_t len) { errno = EOPNOTSUPP; return -1; }
int fallocate64(int fd, int mode, off_t off, off_t len) { errno = EOPNOTSUPP; return -1; }
static void plenty(struct statvfs *v) {
    memset(v, 0, sizeof(*v)); v->f_bsize = v->f_frsize = 4096;
    v->f_blocks = v->f_bfree = v->f_bavail = 1ul << 30; }
int statvfs(const char *p, struct statvfs *v) { plenty(v); return 0; }
int statvfs64(const char *p, struct statvfs64 *v) { plenty((struct statvfs *)v); return 0; }
"""


@pytest.mark.skipif(os.environ.get("VOLREC_SANITIZER") == "address",
                    reason="LD_PRELOAD does not go with AddressSanitizer's runtime")
def test_record_without_reservation_keeps_its_flushed_volumes_when_a_write_fails(daemon,
                                                                                small_disk,
                                                                                tmp_path):
    """Where the disk space cannot be reserved, a write fails in the middle of a volume: the
    file stays as flushed after the volume before (not closed, never half-written)."""
    so = tmp_path / "noreserve.so"
    src = tmp_path / "noreserve.c"
    src.write_text(NO_RESERVATION_C)
    r = subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(src)], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    out = small_disk / "rec.h5"
    rec = daemon.volrec_popen("record", "-o", str(out), "-s", "120",
                              env=dict(os.environ, LD_PRELOAD=str(so)))
    wait_for_size(out, 3 * VOLUME_BYTES, rec)
    subprocess.run(["dd", "if=/dev/zero", f"of={small_disk / 'hog'}", "bs=64k"],
                   capture_output=True)
    stdout, stderr = rec.communicate(timeout=TIMEOUT)
    assert rec.returncode == 8, (rec.returncode, stdout, stderr)
    n = int(re.search(r"(\d+) volumes of 36 x 36 x 256", stdout).group(1))
    assert f"it holds the {n} volumes written before it" in stderr, stderr
    with h5py.File(out, "r") as f:
        assert f["volumes"].shape == (n, 36, 36, 256) and n >= 3
        assert f["sequence"].shape == (n,) and f["latency_ns"].shape == (n,)
        check_sequences(f, "no reservation")
        assert all(f["volumes"][i].any() for i in range(n))


FAULT_AT_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/*
 * Faults at the VR_FAULT_AT-th call that writes, reserves or resizes the file VR_FAULT_FILE
 * (pwrite, write, fallocate, ftruncate). VR_FAULT_MODE=fill: another process takes every byte
 * left on its file system right before that call (a file of its own, VR_FAULT_HOG); =fail:
 * the first write from that call on fails with ENOSPC, once (a file system that cannot keep
 * its promise, or one without fallocate where the other process came first); =kill: the
 * process is killed (SIGKILL) right before that call. At exit the number of calls goes to
 * VR_FAULT_CALLS.
 */
static long calls, at = -1;
static int armed;

static int target(int fd)
{
	char link[64], path[PATH_MAX];
	const char *want = getenv("VR_FAULT_FILE");
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof(path) - 1);
	if (!want || n < 0)
		return 0;
	path[n] = 0;
	return !strcmp(path, want);
}

static void fill(void)
{
	int (*real)(int, int, off_t, off_t) = dlsym(RTLD_NEXT, "fallocate");
	int fd = open(getenv("VR_FAULT_HOG"), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	off_t off = 0, step = 1 << 20;

	while (fd >= 0 && step >= 4096) {
		if (real(fd, 0, off, step) == 0)
			off += step;
		else
			step /= 2;
	}
	if (fd >= 0)
		close(fd);
}

/* 1: this call fails with ENOSPC */
static int fault(int fd, int writes)
{
	if (!target(fd))
		return 0;
	if (at < 0)
		at = getenv("VR_FAULT_AT") ? atol(getenv("VR_FAULT_AT")) : 0;
	if (++calls == at) {
		if (!strcmp(getenv("VR_FAULT_MODE"), "kill"))
			raise(SIGKILL);
		if (!strcmp(getenv("VR_FAULT_MODE"), "fill"))
			fill();
		else
			armed = 1;
	}
	if (armed && writes) {
		armed = 0;
		errno = ENOSPC;
		return 1;
	}
	return 0;
}

__attribute__((destructor)) static void report(void)
{
	FILE *f = getenv("VR_FAULT_CALLS") ? fopen(getenv("VR_FAULT_CALLS"), "w") : NULL;

	if (f) {
		fprintf(f, "%ld\n", calls);
		fclose(f);
	}
}

#define REAL(name, ...) static __typeof__(name) *real; if (!real) real = dlsym(RTLD_NEXT, #name)
ssize_t pwrite(int fd, const void *b, size_t n, off_t o)
{ REAL(pwrite); return fault(fd, 1) ? -1 : real(fd, b, n, o); }
ssize_t pwrite64(int fd, const void *b, size_t n, off_t o)
{ REAL(pwrite64); return fault(fd, 1) ? -1 : real(fd, b, n, o); }
ssize_t write(int fd, const void *b, size_t n)
{ REAL(write); return fault(fd, 1) ? -1 : real(fd, b, n); }
int fallocate(int fd, int m, off_t o, off_t l)
{ REAL(fallocate); fault(fd, 0); return real(fd, m, o, l); }
int fallocate64(int fd, int m, off_t o, off_t l)
{ REAL(fallocate64); fault(fd, 0); return real(fd, m, o, l); }
int ftruncate(int fd, off_t l)
{ REAL(ftruncate); fault(fd, 0); return real(fd, l); }
int ftruncate64(int fd, off_t l)
{ REAL(ftruncate64); fault(fd, 0); return real(fd, l); }
"""


def fault_shim(tmp_path):
    """FAULT_AT_C built as a preloadable library in tmp_path."""
    so, src = tmp_path / "fault.so", tmp_path / "fault.c"
    src.write_text(FAULT_AT_C)
    r = subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(src), "-ldl"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return so


@pytest.mark.skipif(os.environ.get("VOLREC_SANITIZER") == "address",
                    reason="LD_PRELOAD does not go with AddressSanitizer's runtime")
@pytest.mark.long  # every write call of a recording, twice (make test: the full disk once)
@pytest.mark.parametrize("mode", ["fill", "fail"])
def test_record_keeps_its_flushed_volumes_whichever_write_meets_the_full_disk(daemon, small_disk,
                                                                            tmp_path, mode):
    """Issue 13.1, in every timing: the disk fills (fill), or a write fails (fail), at each
    write, reservation or resize of a 3-volume recording in turn. Whatever was hit, the file is
    readable and holds every volume flushed before (a write failing half way through HDF5's
    flush left metadata rewritten in place that pointed past the file's end: "addr
    overflow"); only a failure while the file is being created may leave no file."""
    so = fault_shim(tmp_path)
    out, calls = small_disk / "rec.h5", tmp_path / "calls"

    def record(at):
        for p in small_disk.iterdir():
            p.unlink()
        env = dict(os.environ, LD_PRELOAD=str(so), VR_FAULT_FILE=str(out), VR_FAULT_AT=str(at),
                   VR_FAULT_MODE=mode, VR_FAULT_HOG=str(small_disk / "hog"),
                   VR_FAULT_CALLS=str(calls))
        return daemon.volrec("record", "-o", str(out), "-n", "3", env=env)

    r = record(0)
    # 4: it finished, having missed a volume it lists in /missed (fell behind under TSan)
    assert r.returncode in (0, 4), (r.returncode, r.stderr)
    total = int(calls.read_text())
    assert total >= 20, total  # a reservation, the data and the metadata of each volume
    kept = []
    for at in range(1, total + 1):
        r = record(at)
        what = f"fault at call {at} of {total} ({mode}): exit {r.returncode}: {r.stderr}"
        # this run took fewer calls: nothing was hit (4: it finished, a volume it missed on a
        # loaded machine listed in /missed, and its calls were others: under TSan)
        if r.returncode in (0, 4):
            n = 3
        else:
            assert r.returncode == 8, what
            if not out.exists():  # failed while creating it: nothing left behind
                assert "disk full" in r.stderr or f"{out}: " in r.stderr, what
                kept.append(None)
                continue
            m = re.search(r"it holds the (\d+) volumes", r.stderr)
            n = int(m.group(1)) if m else None
        try:
            with h5py.File(out, "r") as f:
                vols = f["volumes"]
                if n is None:  # closed properly after the disk filled
                    n = int(f.attrs["volumes"])
                    assert f.attrs["end"] in (b"disk full", "disk full"), what
                assert vols.shape == (n, 36, 36, 256), (vols.shape, what)
                for k in ("sequence", "session", "epoch", "t_publish_ns", "flags"):
                    assert f[k].shape == (n,), (k, what)
                check_sequences(f, what)
                assert all(vols[i].any() for i in range(n)), what
        except OSError as e:
            pytest.fail(f"unreadable: {e}; {what}")
        kept.append(n)
    # the faults met every stage: before the first volume (creating the file takes about 25
    # writes: one per metadata block, h5vol_vfd.c has no accumulator; 16 datasets), between, and after the last
    assert kept.count(None) <= 30, kept
    assert {0, 1, 2} <= set(kept), kept


def check_sequences(f, what):
    """The rows are in order; a volume the recorder missed (it fell behind on a loaded machine:
    under TSan) is a gap listed in /missed, which is flushed with the row after it, never a
    silent one."""
    seq = [int(x) for x in f["sequence"][:]]
    gaps = set(range(seq[0], seq[-1] + 1)) - set(seq) if seq else set()
    listed = set()
    for m in f["missed"][:] if "missed" in f else []:
        listed |= set(range(int(m["first"]), int(m["last"]) + 1))
    assert all(b > a for a, b in zip(seq, seq[1:])), (seq, what)
    assert gaps <= listed, (sorted(gaps - listed), what)


def check_killed_record(path, instance, what, least=1):
    """A recording whose recorder was killed: every row it counts is whole."""
    with h5py.File(path, "r") as f:
        n = f["volumes"].shape[0]
        assert n >= least, what
        for k in ("sequence", "session", "epoch", "t_publish_ns", "flags"):
            assert f[k].shape == (n,), (k, what)
        assert f["offset"].shape == (n, 2), what
        assert all(f["volumes"][i].any() for i in range(n)), what
        check_sequences(f, what)
        if n:  # (the attributes follow the file's creation)
            assert f.attrs["instance"] in (instance, instance.encode()), what
        return n


def test_record_file_is_readable_after_the_recorder_is_killed(daemon, tmp_path):
    """Flushed after every volume: a SIGKILL at any moment (inside a flush too) loses at most
    the volume being written; every row the file counts is whole."""
    rng = np.random.default_rng(18)
    counts = []
    for k in range(20):
        out = tmp_path / f"killed{k}.h5"
        rec = daemon.volrec_popen("record", "-o", str(out), "-s", "120")
        # every other kill after 4 volumes' bytes, so that some come after 3 whole volumes
        # however slowly volumes come (a sanitized build)
        wait_for_size(out, (2 if k % 2 else 4) * VOLUME_BYTES, rec)
        time.sleep(rng.uniform(0, 0.25))
        rec.kill()
        rec.communicate(timeout=TIMEOUT)
        counts.append(check_killed_record(out, daemon.instance, f"kill {k}"))
        out.unlink()
    assert max(counts) >= 3, counts


@pytest.mark.skipif(os.environ.get("VOLREC_SANITIZER") == "address",
                    reason="LD_PRELOAD does not go with AddressSanitizer's runtime")
@pytest.mark.long  # every write call of a recording (make test: 20 kills at random moments)
def test_record_file_is_whole_whichever_write_the_recorder_is_killed_before(daemon, tmp_path):
    """The SIGKILL above, in every timing: the recorder of 3 volumes is killed right before
    each of its writes in turn, the ones inside HDF5's flushes included (there a kill used to
    leave a dataset's extent counting a row whose chunk was not indexed yet: a row of zeros),
    and the close's (there HDF5 moves the root group's messages between the chunks of its
    header, which lie far apart: a kill between them used to leave the group without its
    symbol table, "message type not found"). Once the file has been created, it is readable
    whatever the moment, and every row it counts is whole. The close is swept 8 more times:
    where its writes fall differs from run to run (whether the first status message, and with
    it the root group's second chunk of attributes, comes before the first volume or after;
    about 4 runs in 10 lay the header out as it was when the kill left it without its symbol
    table)."""
    so = fault_shim(tmp_path)
    out, calls = tmp_path / "rec.h5", tmp_path / "calls"

    def record(at):
        out.unlink(missing_ok=True)
        env = dict(os.environ, LD_PRELOAD=str(so), VR_FAULT_FILE=str(out), VR_FAULT_AT=str(at),
                   VR_FAULT_MODE="kill", VR_FAULT_CALLS=str(calls))
        return daemon.volrec("record", "-o", str(out), "-n", "3", env=env)

    fewer = object()

    def killed(at, total, delay=0.0):
        """The recording killed before call at: the rows it kept, None if it left no file
        that can be read, fewer if the run took fewer calls."""
        time.sleep(delay)
        r = record(at)
        what = f"killed before call {at} of {total}"
        if r.returncode in (0, 4):  # finished (4: with a volume missed under load, listed)
            return fewer
        assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr, what)
        try:
            return check_killed_record(out, daemon.instance, what, least=0)
        except (OSError, KeyError) as e:
            # only while the file is being created, before anything was kept
            assert all(k is None for k in kept), (e, what, kept)
            return None

    r = record(0)
    # 4: it finished, having missed a volume it lists in /missed (fell behind under TSan)
    assert r.returncode in (0, 4), (r.returncode, r.stderr)
    total = int(calls.read_text())
    kept, close = [], None
    for at in range(1, total + 1):
        n = killed(at, total)
        if n is not fewer:
            kept.append(n)
        if n == 3 and close is None:
            close = at  # the rest is the close (its attributes, HDF5's last flush)
    assert kept.count(None) <= 30, kept
    # started at other moments of the daemon's status interval (200 ms); a run may take a few
    # calls more than the first one, or fewer: then the sweep's last kills found it finished
    # and none was killed after its third volume; the end is swept again until one is
    delays = iter(np.random.default_rng(7).uniform(0, 0.25, 1000))
    for _ in range(8):
        if close is not None:
            break
        for at in range(max(1, total - 8), total + 1):
            n = killed(at, total, next(delays))
            if n is not fewer:
                kept.append(n)
            if n == 3:
                close = at
                break
    assert {0, 1, 2, 3} <= set(kept), kept
    assert close is not None, kept
    for _ in range(8):
        for at in range(close - 3, total + 8):
            n = killed(at, total, next(delays))
            assert n is fewer or n >= 2, (n, at, total)


def test_record_output_errors_are_not_no_daemon(daemon, tmp_path):
    """Issue 13.4: -o in a missing directory exited 3 ("no daemon") while the daemon ran."""
    r = daemon.volrec("record", "-o", "/nonexistent/x.h5", "-n", "1")
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "cannot create /nonexistent/x.h5: No such file or directory" in r.stderr, r.stderr
    assert "no volrecd" not in r.stderr
    r = daemon.volrec("record", "-o", str(tmp_path), "-n", "1", "--force")
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "Is a directory" in r.stderr, r.stderr
    assert daemon.volrec("record", "-o", str(tmp_path / "x.h5"), "-w", "-1").returncode == 2


def test_snapshot_output_errors_are_not_no_daemon(daemon, tmp_path):
    (tmp_path / "file").write_text("x")
    r = daemon.volrec("snapshot", "-o", str(tmp_path / "file" / "sub"))
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "Not a directory" in r.stderr and "no volrecd" not in r.stderr, r.stderr
    r = daemon.volrec("snapshot", "-o", str(tmp_path / "file"))  # exists, is not a directory
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "Not a directory" in r.stderr and "no volrecd" not in r.stderr, r.stderr


def test_snapshot_without_a_daemon_leaves_no_directory_behind(bin_dir, tmp_path):
    # -o DIR is made first, so that an output error shows before any wait: a run that then
    # found no daemon left the empty DIR behind
    out = tmp_path / "shots"
    r = subprocess.run([str(bin_dir / "volrec"), "snapshot", "-o", str(out), "-i", "nosuch",
                        "-r", str(tmp_path)], capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 3, (r.returncode, r.stderr)
    assert not out.exists()
    out.mkdir()  # a DIR that was there stays
    r = subprocess.run([str(bin_dir / "volrec"), "snapshot", "-o", str(out), "-i", "nosuch",
                        "-r", str(tmp_path)], capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 3, (r.returncode, r.stderr)
    assert out.is_dir()


def test_record_refuses_to_replace_a_file(daemon, tmp_path):
    out = tmp_path / "exists.h5"
    out.write_bytes(b"precious")
    r = daemon.volrec("record", "-o", str(out), "-n", "1")
    assert r.returncode == 2 and "--force" in r.stderr, r.stderr
    assert out.read_bytes() == b"precious"


# ---- following a daemon restart (issue 13.10) ------------------------------------------------

class Lines:
    """The lines a process writes to a pipe, collected by a thread, waited for by pattern."""

    def __init__(self, pipe):
        self.lines, self.cond = [], threading.Condition()
        self.thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self.thread.start()

    def _read(self, pipe):
        for line in pipe:
            with self.cond:
                self.lines.append(line)
                self.cond.notify_all()

    def wait_for(self, pattern, timeout=TIMEOUT):
        deadline = time.monotonic() + timeout
        with self.cond:
            while not any(re.search(pattern, l) for l in self.lines):
                left = deadline - time.monotonic()
                assert left > 0, f"no line matching {pattern!r} in:\n{''.join(self.lines)}"
                self.cond.wait(left)

    def text(self):
        with self.cond:
            return "".join(self.lines)

    def finish(self):
        """Wait for the end of the pipe (the process exited): every line is in."""
        self.thread.join(TIMEOUT)
        return self.text()


def test_watch_follows_a_daemon_restart(own_daemon):
    d = own_daemon
    w = subprocess.Popen([str(d.bin / "volrec"), "watch", "-i", d.instance, "-r", str(d.run_dir)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out = Lines(w.stdout)
        out.wait_for(r"volume #\d+")
        session0 = json.loads(d.volrec("status", "--json").stdout)["session"]
        d.stop()
        # the daemon's event, its name said once
        out.wait_for(r"\d\d:\d\d:\d\d stopping: draining the pipeline")
        out.wait_for(r"volrecd stopped: waiting for it to come back")
        d.start()
        out.wait_for(r"volrecd is back \(pid \d+\)")
        # volumes of the new session: the sequence starts again from 1
        n0 = len(out.text().splitlines())
        deadline = time.monotonic() + TIMEOUT
        while True:
            new = out.text().splitlines()[n0:]
            seqs = [int(m) for l in new for m in re.findall(r"volume #(\d+)", l)]
            if len(set(seqs)) >= 3:
                break
            assert w.poll() is None, out.text()
            assert time.monotonic() < deadline, out.text()
            time.sleep(0.1)
        assert json.loads(d.volrec("status", "--json").stdout)["session"] != session0
        # and a restart quicker than its once-a-second look is followed all the same: once the
        # sequence is far enough from 1 that the new session's first volumes, printed once a
        # second however slowly it starts, are well below it
        deadline = time.monotonic() + TIMEOUT
        while max(int(m) for m in re.findall(r"volume #(\d+)", out.text())) < 40:
            assert w.poll() is None, out.text()
            assert time.monotonic() < deadline, out.text()
            time.sleep(0.1)
        lines = out.text().splitlines()
        before, last = len(lines), max(int(m) for m in re.findall(r"volume #(\d+)", out.text()))
        d.restart()
        deadline = time.monotonic() + TIMEOUT
        while not [l for l in out.text().splitlines()[before:]
                   if re.search(r"volume #(\d+)", l)
                   and int(re.search(r"volume #(\d+)", l).group(1)) < last - 5]:
            assert w.poll() is None, out.text()
            assert time.monotonic() < deadline, out.text()
            time.sleep(0.1)
    finally:
        w.send_signal(signal.SIGINT)
        w.wait(timeout=TIMEOUT)
    assert w.returncode == 0, out.text()


def test_watch_restart_wait_0_ends_when_the_daemon_stops(own_daemon):
    d = own_daemon
    w = subprocess.Popen([str(d.bin / "volrec"), "watch", "-w", "0", "-i", d.instance, "-r",
                          str(d.run_dir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    out, err = Lines(w.stdout), Lines(w.stderr)
    out.wait_for(r"volume #\d+")  # watching the daemon before it stops
    d.stop()
    w.wait(timeout=TIMEOUT)
    assert w.returncode == 0 and "stopped" in err.finish(), (w.returncode, err.finish())


def record_proc(d, out, *args):
    """`volrec record` in the background; its stderr read line by line (Lines)."""
    p = subprocess.Popen([str(d.bin / "volrec"), "record", "-o", str(out), *args, "-i",
                          d.instance, "-r", str(d.run_dir)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    return p, Lines(p.stderr)


def record_end(rec, err):
    """Wait for the recorder started by record_proc: its stdout, with all of stderr in err."""
    rec.wait(timeout=TIMEOUT)
    err.finish()
    return rec.stdout.read()


def test_record_continues_into_the_same_file_across_a_restart(own_daemon, tmp_path):
    d = own_daemon
    out = tmp_path / "restart.h5"
    rec, err = record_proc(d, out, "-s", "600")
    try:
        wait_for_size(out, 4 * VOLUME_BYTES, rec)
        d.stop()
        err.wait_for(r"volrecd of instance '\w+' stopped; waiting for it to come back")
        d.start()
        err.wait_for(r"the daemon restarted or rebuilt \(session [0-9a-f]+, same volume shape\): "
                     r"recording continues")
        # some volumes of the new session in the file, however slow this machine is
        wait_for_size(out, out.stat().st_size + 4 * VOLUME_BYTES, rec)
    finally:
        rec.send_signal(signal.SIGINT)
    stdout = record_end(rec, err)
    assert rec.returncode in (0, 4), (rec.returncode, stdout, err.text())
    with h5py.File(out, "r") as f:
        n = f.attrs["volumes"]
        ses, seq = f["session"][:], f["sequence"][:]
        assert f["volumes"].shape[0] == n and len(ses) == n
        assert f.attrs["sessions"] == 2 and len(set(ses)) == 2, ses
        assert f.attrs["end"] in (b"interrupted", "interrupted")
        second = seq[ses == ses[-1]]
        assert (ses == ses[0]).sum() >= 4 and len(second) >= 3, (ses, seq)
        assert (np.diff(second.astype(np.int64)) >= 1).all(), second  # in order, none twice
        # every volume of the new session up to the last recorded is in the file or listed in
        # /missed (those published before the recorder got its first one, and any it missed
        # falling behind on a loaded machine), never silent
        missed = f["missed"][:]
        listed = set(int(s) for s in second)
        for m in missed:
            if m["session"] == ses[-1]:
                rng = set(range(int(m["first"]), int(m["last"]) + 1))
                assert not rng & listed, (second, missed)
                listed |= rng
        assert listed == set(range(1, int(second[-1]) + 1)), (second, missed)
        assert all(f["volumes"][i].any() for i in range(n))


# volrecd's `vol` notifications vanish while the file $VOLREC_TEST_MUTE exists (the volumes are
# still published in the segment): what a daemon closing its socket (ZMQ_LINGER 0) or killed
# before they went out leaves a subscriber
MUTE_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static __thread int muting; /* the body of a muted vol message comes next */

int zmq_send(void *s, const void *buf, size_t len, int flags)
{
    static int (*real)(void *, const void *, size_t, int);
    const char *mute = getenv("VOLREC_TEST_MUTE");

    if (!real)
        real = (int (*)(void *, const void *, size_t, int))dlsym(RTLD_NEXT, "zmq_send");
    if (muting) {
        muting = 0;
        return (int)len;
    }
    if (mute && len == 3 && !memcmp(buf, "vol", 3) && (flags & 2 /* ZMQ_SNDMORE */) &&
        access(mute, F_OK) == 0) {
        muting = 1;
        return (int)len;
    }
    return real(s, buf, len, flags);
}
"""


@pytest.mark.skipif(os.environ.get("VOLREC_SANITIZER") == "address",
                    reason="LD_PRELOAD does not go with AddressSanitizer's runtime")
@pytest.mark.parametrize("how", ["restart", "gone", "geometry"])
def test_record_reports_volumes_published_but_never_announced_before_the_daemon_left(
        bin_dir, tmp_path, how):
    """The volumes a session published after the last one the recorder got, whose
    notifications never came before the daemon stopped (and came back with a new session, of
    the same geometry or not, or not within --restart-wait), are listed in /missed (reason 1)
    and said on stderr: they used to be lost without a trace, the recording complete (exit 0)."""
    so, src, mute = tmp_path / "mute.so", tmp_path / "mute.c", tmp_path / "mute"
    src.write_text(MUTE_C)
    r = subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(src), "-ldl"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    d = Daemon(bin_dir, env=dict(os.environ, LD_PRELOAD=str(so), VOLREC_TEST_MUTE=str(mute)))
    out = tmp_path / "tail.h5"
    try:
        rec, err = record_proc(d, out, "-s", "600", *(["-w", "2"] if how == "gone" else []))
        try:
            wait_for_size(out, 4 * VOLUME_BYTES, rec)
            mute.touch()
            wait_published(d, 12)  # published, none announced
            d.stop()
            mute.unlink()
            if how == "restart":
                err.wait_for(r"stopped; waiting for it to come back")
                d.start()
                err.wait_for(r"recording continues")
                size = out.stat().st_size  # and one more volume of the new session is in
                wait_for_size(out, size + VOLUME_BYTES, rec)
            elif how == "geometry":  # the same volumes, another reconstruction
                err.wait_for(r"stopped; waiting for it to come back")
                d.cfg["geometry"].update(ascans_per_bscan=18, bscans_per_volume=18,
                                         stride=[2, 2])
                d.write(d.cfg)
                d.start()
        finally:
            if how == "restart":
                rec.send_signal(signal.SIGINT)
        stdout = record_end(rec, err)
    finally:
        d.close()
    assert rec.returncode == {"restart": 4, "gone": 3, "geometry": 1}[how], (
        rec.returncode, stdout, err.text())
    with h5py.File(out, "r") as f:
        ses, seq, missed = f["session"][:], f["sequence"][:], f["missed"][:]
        last = seq[ses == ses[0]].max()
        tail = [m for m in missed if m["session"] == ses[0] and m["first"] == last + 1]
        assert len(tail) == 1 and tail[0]["reason"] == 1, (last, missed)
        assert tail[0]["last"] >= last + 10, (last, tail)
        assert f.attrs["missed_volumes"] >= tail[0]["last"] - last, f.attrs["missed_volumes"]
    assert re.search(r"volumes #%d-#%d of session [0-9a-f]+ missed \(published, but never "
                     r"announced" % (last + 1, tail[0]["last"]), err.text()), err.text()


@pytest.mark.parametrize("change", ["shape", "stride"])
def test_record_stops_when_the_daemon_comes_back_with_another_geometry(own_daemon, tmp_path,
                                                                       change):
    d = own_daemon
    cfg = json.loads(json.dumps(d.cfg))
    if change == "shape":  # 16 x 16 A-scans, stride 3: 48 x 48 x 256 volumes
        cfg["geometry"].update(ascans_per_bscan=16, bscans_per_volume=16)
        # seen in its first volume or its first status message, whichever comes first
        why = (r"the daemon now (publishes 48 x 48 x 256 volumes|runs another geometry "
               r"\(.*volume \[36,36,256\] -> \[48,48,256\])")
    else:  # 18 x 18 A-scans, stride 2: the same 36 x 36 x 256 volumes, another reconstruction
        cfg["geometry"].update(ascans_per_bscan=18, bscans_per_volume=18, stride=[2, 2])
        why = r"the daemon now runs another geometry \(.*stride \[3,3\] -> \[2,2\]"
    out = tmp_path / "geometry.h5"
    rec, err = record_proc(d, out, "-s", "600")
    try:
        wait_for_size(out, 4 * VOLUME_BYTES, rec)
        d.restart(cfg)
        err.wait_for(why)
        stdout = record_end(rec, err)
    finally:
        if rec.poll() is None:
            rec.kill()
    assert rec.returncode == 1, (rec.returncode, stdout, err.text())
    assert "stopping" in err.text() and "(geometry changed)" in stdout
    with h5py.File(out, "r") as f:
        n = f.attrs["volumes"]
        assert n >= 4 and f["volumes"].shape == (n, 36, 36, 256)
        assert f.attrs["end"] in (b"geometry changed", "geometry changed")
        assert len(set(f["session"][:])) == 1  # only the first geometry's volumes
        assert list(f.attrs["stride"]) == [3, 3]


def test_record_restart_wait_ends_a_recording_whose_daemon_is_gone(own_daemon, tmp_path):
    d = own_daemon
    out = tmp_path / "gone.h5"
    rec, err = record_proc(d, out, "-s", "600", "--restart-wait", "1")
    wait_for_size(out, 3 * VOLUME_BYTES, rec)
    d.stop()
    stdout = record_end(rec, err)
    assert rec.returncode == 3, (rec.returncode, stdout, err.text())
    assert "did not come back within --restart-wait" in err.text()
    with h5py.File(out, "r") as f:
        assert f.attrs["end"] in (b"the daemon stopped", "the daemon stopped")
        assert f["volumes"].shape[0] == f.attrs["volumes"] >= 3


# ---- snapshot -----------------------------------------------------------------------------

def test_snapshot_pictures_decode_and_show_the_retina(daemon, tmp_path):
    d = tmp_path / "snap"
    r = daemon.volrec("snapshot", "-o", str(d), "--scale", "1")
    assert r.returncode == 0, r.stderr
    side = json.loads((d / "snapshot.json").read_text())
    assert side["shape"] == {"Y": 36, "X": 36, "Z": 256} and side["sequence"] >= 1
    names = sorted(p.name for p in d.glob("*.png"))
    assert len(names) == 6 and sorted(f["file"] for f in side["files"]) == names
    sizes = {}
    for f in side["files"]:
        img, text = read_png(d / f["file"])
        assert img.shape == (f["height"], f["width"]), f
        assert img.min() == 0 and img.max() == 255, f  # the full u8 range
        assert "volume #" in text["Description"]
        sizes[f["kind"]] = img.shape
    assert sizes["bscan"] == (256, 36) and sizes["slice"] == (256, 36)
    assert sizes["enface-mean"] == (36, 36)
    assert "bscan-y18_x36z256.png" in names and "slice-x18_y36z256.png" in names
    assert "enface-z128_x36y36.png" in names and sizes["render"] == (256, 256)

    # the B-scan's depth profile: the retina is a bright region well above the background,
    # made of several bands (layers) separated by darker ones
    bscan, _ = read_png(d / next(f["file"] for f in side["files"] if f["kind"] == "bscan"))
    prof = bscan[:, 4:-4].mean(axis=1)
    prof = np.convolve(prof, np.ones(5) / 5, mode="same")
    background = np.median(prof)
    tissue = prof > background + 40
    assert tissue.sum() >= 20, prof.round()
    peaks = [z for z in range(3, 253) if prof[z] == prof[z - 3:z + 4].max() and tissue[z]]
    bands = []
    for z in peaks:
        if not bands or z - bands[-1] > 6:
            bands.append(z)
    # distinct: a dip of at least 10 grey levels between neighbouring bands
    distinct = [b for a, b in zip(bands, bands[1:]) if prof[a:b].min() < min(prof[a], prof[b]) - 10]
    assert len(distinct) >= 1, (bands, prof.round())


def test_snapshot_auto_contrast_and_scale(daemon, tmp_path):
    d = tmp_path / "snap2"
    r = daemon.volrec("snapshot", "-o", str(d), "--auto-contrast=2", "--scale", "2")
    assert r.returncode == 0, r.stderr
    side = json.loads((d / "snapshot.json").read_text())
    assert side["contrast"] == {"method": "percentile", "percent": 2}
    f = next(f for f in side["files"] if f["kind"] == "bscan")
    img, _ = read_png(d / f["file"])
    assert img.shape == (512, 72) and f["scale"] == 2
    assert (img == 255).mean() > 0.01  # the top 2 % saturate


# ---- reload and stop ----------------------------------------------------------------------

def test_reload_applied_then_rejected(own_daemon):
    d = own_daemon
    cfg = json.loads(json.dumps(d.cfg))
    cfg["preprocess"] = {"db_range": [0, 90]}
    d.write(cfg)
    r = d.volrec("reload")
    assert r.returncode == 0, r.stderr
    assert "reloaded" in r.stdout
    cfg["preprocess"] = {"db_range": [0, 5000]}
    d.write(cfg)
    r = d.volrec("reload")
    assert r.returncode == 5, (r.returncode, r.stdout, r.stderr)
    assert "rejected" in r.stderr and "db_range" in r.stderr
    assert d.proc.poll() is None  # still running on the previous configuration
    cfg["output"] = {"slots": 5}  # structural: a rebuild, a new session
    cfg["preprocess"] = {"db_range": [0, 90]}
    d.write(cfg)
    r = d.volrec("reload")
    assert r.returncode == 0, r.stderr
    st = json.loads(d.volrec("status", "--json").stdout)
    assert st["geometry"]["slots"] == 5


def test_stop_waits_until_the_daemon_is_gone(own_daemon):
    d = own_daemon
    r = d.volrec("stop")
    assert r.returncode == 0, r.stderr
    assert "stopped" in r.stdout
    assert d.proc.wait(timeout=TIMEOUT) == 0
    assert not os.path.exists(f"/dev/shm/volrec.{d.instance}")
    r = d.volrec("stop")
    assert r.returncode == 3


def test_stop_refuses_a_pid_that_is_not_volrecd(bin_dir, tmp_path):
    p = subprocess.Popen(["sleep", "30"])
    try:
        inst = "pf" + uuid.uuid4().hex[:8]
        (tmp_path / f"{inst}.pid").write_text(f"{p.pid}\n")
        r = subprocess.run([str(bin_dir / "volrec"), "stop", "-i", inst, "-r", str(tmp_path)],
                           capture_output=True, text=True, timeout=TIMEOUT)
        assert r.returncode == 3, r.stderr
        assert "not a running volrecd" in r.stderr
        assert p.poll() is None  # not signalled
    finally:
        p.kill()
        p.wait()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root to run the tool as another user")
def test_stop_as_another_user_is_permission_denied(daemon):
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        str(daemon.bin / "volrec"), "stop", "-i", daemon.instance, "-r",
                        str(daemon.run_dir)], capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 7, (r.returncode, r.stderr)
    assert "permission denied" in r.stderr.lower()
    assert daemon.proc.poll() is None


SLOW_COPY_C = r"""
/* The recorder's first copies of a whole volume wait, holding the volume's lease, until the
 * daemon has begun to overwrite it (it does when its other slot is leased too): until the
 * volume's bytes change, at most VR_SLOW_MS. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *(*real)(void *, const void *, size_t);
static atomic_int left = -1;
static size_t size;

__attribute__((constructor)) static void init(void)
{
    real = (void *(*)(void *, const void *, size_t))dlsym(RTLD_NEXT, "memcpy");
    size = (size_t)atol(getenv("VR_SLOW_BYTES") ? getenv("VR_SLOW_BYTES") : "0");
    atomic_store(&left, atoi(getenv("VR_SLOW_COPIES") ? getenv("VR_SLOW_COPIES") : "0"));
}

void *memcpy(void *d, const void *s, size_t n)
{
    if (!real) { /* before init: byte by byte (built without optimization) */
        for (size_t i = 0; i < n; i++)
            ((volatile char *)d)[i] = ((const char *)s)[i];
        return d;
    }
    if (n == size && atomic_fetch_sub(&left, 1) > 0) {
        const char *ms = getenv("VR_SLOW_MS");
        long limit = atol(ms ? ms : "0");
        void *before = malloc(n);
        if (before) {
            real(before, s, n);
            for (long t = 0; t < limit && !memcmp(before, s, n); t += 5)
                usleep(5000);
            free(before);
        }
    }
    return real(d, s, n);
}
"""


@pytest.mark.skipif(os.environ.get("VOLREC_SANITIZER") in ("address", "thread"),
                    reason="the sanitizer's runtime, not the preloaded library, has memcpy")
def test_record_lists_a_volume_overwritten_while_it_copied_it_as_torn(bin_dir, tmp_path):
    """The daemon has 2 slots; a reader keeps leasing the newest volume while the recorder's
    first copy of a volume waits, holding its lease, until the daemon overwrites it: both
    slots leased, the daemon
    overwrites the older one, the recorder's. record compared volrec_view_release's -ESTALE
    with VOLREC_ETORN, which was +ESTALE, and wrote the torn volume as a good one; it must go
    into /missed as torn (reason 2) and no row of /volumes may be it."""
    so, src = tmp_path / "slow.so", tmp_path / "slow.c"
    src.write_text(SLOW_COPY_C)
    r = subprocess.run(["cc", "-O0", "-shared", "-fPIC", "-o", str(so), str(src), "-ldl"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    d = Daemon(bin_dir, slots=2)
    stop = threading.Event()

    def hold_newest():
        c = volrec.Client(d.instance, run_dir=str(d.run_dir))
        try:
            while not stop.is_set():
                try:
                    with c.latest():
                        stop.wait(0.05)
                except (volrec.VolrecError, BlockingIOError):
                    stop.wait(0.01)
        finally:
            c.close()

    holder = threading.Thread(target=hold_newest)
    holder.start()
    try:
        out = tmp_path / "rec.h5"
        env = dict(os.environ, LD_PRELOAD=str(so), VR_SLOW_BYTES=str(VOLUME_BYTES),
                   VR_SLOW_COPIES="1", VR_SLOW_MS=str(int(1000 * TIMEOUT)))
        r = d.volrec("record", "-o", str(out), "-n", "3", env=env)
        assert r.returncode == 4, (r.returncode, r.stderr)
        assert "torn: overwritten while being copied" in r.stderr, r.stderr
        with h5py.File(out, "r") as f:
            torn = [m for m in f["missed"][:] if m["reason"] == 2]
            assert len(torn) == 1, f["missed"][:]
            assert torn[0]["first"] not in set(f["sequence"][:]), (torn, f["sequence"][:])
            assert f["volumes"].shape[0] == 3
    finally:
        stop.set()
        holder.join()
        d.close()
