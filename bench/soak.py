#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Endurance run of volrecd (`make soak`, never part of `make test` or CI).

    bench/soak.py [--build DIR] [--seconds S] [--calibrate-seconds S] [--headroom F] [-o FILE]

volrecd replays a looping file of the test geometry (tiny: 12 x 12 A-scans of 256 samples,
stride 3, noncumulative -> 36 x 36 x 128 u8) on the CPU backend, read by four readers and a
recorder at once:

  c-next      tests/progs/soak_reader next     every volume announced (libvolrec)
  c-latest    tests/progs/soak_reader latest   polls the newest volume (libvolrec)
  py-next     this file, --reader next         every volume announced (clients/python)
  py-latest   this file, --reader latest       polls the newest volume (clients/python)
  recorder    volrec record -n N, again and again into a tmpfs; each file is opened with
              h5py, its volumes counted against its attributes and the next file started

Every reader compares each volume with the first one it saw of the same epoch modulo the
file's length (a replay of S = 9 epochs, one interlacing cycle, loops: those volumes must be
equal byte for byte) and counts any difference or unexpected error.

Calibration (the "highest rate"): first volrecd runs with source.rate 0 (as fast as the
pipeline takes epochs, never dropping) with all readers and the recorder attached for
--calibrate-seconds; the rate it reaches (published volumes / s) times --headroom (0.8) is
the rate of the soak, which then runs with the default overflow drop_epoch, so any epoch the
machine cannot keep up with shows as a drop by cause.

Every --sample-seconds: volrecd's RSS (VmRSS) and open fd count, the status message's drops
and rates, the load average. The result (bench/results/soak-<host>-<date>.json) has the first
sample after the warm-up (--warmup-seconds) and the last, and says whether RSS and fds stayed
flat. Exit status 0 when no reader reported an error or a difference, every recorder file
was readable, RSS and fds were flat and volrecd stopped cleanly; 1 otherwise.
"""
import argparse
import datetime
import hashlib
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import benchkit  # bench/, beside this script

SRC = pathlib.Path(__file__).resolve().parents[1]

GEOMETRY = {"samples_per_ascan": 256, "sample_type": "u16", "ascans_per_bscan": 12,
            "bscans_per_volume": 12, "stride": [3, 3]}
PERIOD = 9  # epochs in the replay file: stride 3 x 3, one interlacing cycle
RSS_SLACK_KIB = 4096  # RSS may grow this much (allocator, page cache of the map) and be flat


def run_reader(instance, run_dir, seconds, period, mode):
    """A Python reader (--reader): the same checks as tests/progs/soak_reader."""
    sys.path.insert(0, str(SRC / "clients" / "python"))
    import volrec  # noqa: E402

    seen = {}
    checked = mismatches = errors = polls = 0
    first_mismatch = 0
    last_error = ""
    reset_epoch = 0
    last_seq = last_epoch = last_session = 0
    deadline = time.monotonic() + seconds
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    c = None
    while c is None:
        try:
            c = volrec.Client(instance, run_dir=run_dir, open_timeout=1.0)
        except volrec.VolrecError as e:
            if time.monotonic() > deadline:
                print("py reader: cannot connect: %s" % e, file=sys.stderr)
                return 1
            time.sleep(0.05)
    while not stop and time.monotonic() < deadline:
        try:
            if mode == "latest":
                polls += 1
                try:
                    lease = c.latest()
                except BlockingIOError:
                    time.sleep(0.001)
                    continue
            else:
                lease = c.next_volume(0.2)
            with lease as vol:
                if (mode == "latest" and vol.sequence == last_seq and
                        vol.session_id == last_session):
                    h = None
                else:
                    h = hashlib.blake2b(memoryview(vol).cast("B"), digest_size=8).digest()
                    seq, epoch, flags, session = (vol.sequence, vol.epoch, vol.volume_flags,
                                                  vol.session_id)
        except (volrec.Timeout, volrec.TornRead):
            continue
        except volrec.VolrecError as e:
            errors += 1
            last_error = "%s: %s" % (type(e).__name__, e)
            time.sleep(0.02)
            continue
        if h is None:
            time.sleep(0.001)
            continue
        if (flags & (volrec.FLAG_RESET | volrec.FLAG_DROPPED_BEFORE) or
                session != last_session or epoch - last_epoch != seq - last_seq):
            reset_epoch = epoch  # a reset or dropped epochs: the history refills
        last_seq, last_epoch, last_session = seq, epoch, session
        if epoch < reset_epoch + period:
            continue
        key = epoch % period
        if key not in seen:
            seen[key] = h
        elif seen[key] != h:
            if not mismatches:
                first_mismatch = epoch
            mismatches += 1
        checked += 1
    print(json.dumps({"reader": "py-" + mode, "received": c.received, "missed": c.missed,
                      "torn": c.torn, "remaps": c.remaps, "rejected": c.rejected,
                      "checked": checked, "mismatches": mismatches,
                      "first_mismatch_epoch": first_mismatch, "errors": errors,
                      "polls": polls, "last_error": last_error}))
    c.close()
    return 1 if mismatches or errors else 0


def proc_sample(pid):
    rss = None
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return {"rss_kib": rss, "fds": len(os.listdir("/proc/%d/fd" % pid)),
            "threads": len(os.listdir("/proc/%d/task" % pid))}


def loadavg():
    return [float(x) for x in open("/proc/loadavg").read().split()[:3]]


class Daemon:
    def __init__(self, build, work, instance, replay, rate, overflow):
        self.run_dir = work / "run"
        self.run_dir.mkdir(exist_ok=True)
        self.instance = instance
        cfg = {
            "instance": instance, "backend": "cpu", "cpu": {"threads": 0},
            "source": {"type": "replay", "rate": rate,
                       "replay": {"path": str(replay), "format": "auto", "loop": True}},
            "geometry": GEOMETRY, "reconstruct": {"mode": "noncumulative"},
            "output": {"slots": 8},
            "pipeline": {"ring_bscans": 8 * GEOMETRY["bscans_per_volume"],
                         "overflow": overflow},
            "ipc": {"run_dir": str(self.run_dir), "status_interval_ms": 1000, "hwm": 1000,
                    "max_readers": 16},
            "log": {"level": "warning"},
        }
        self.cfg_path = work / ("volrecd-%s.yaml" % overflow)
        self.cfg_path.write_text(json.dumps(cfg))
        self.log_path = work / ("volrecd-%s.log" % overflow)
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([str(build / "bin" / "volrecd"), "-c", str(self.cfg_path)],
                                     stdout=self.log, stderr=self.log)
        import zmq
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"status")
        self.sub.setsockopt(zmq.SUBSCRIBE, b"event")
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.connect("ipc://%s/%s.pub" % (self.run_dir, instance))
        self.events = []
        self.status = None

    def poll_status(self, timeout_s):
        """Take every message that came; wait up to timeout_s for a status one."""
        end = time.monotonic() + timeout_s
        got = False
        while True:
            left = end - time.monotonic()
            if not self.sub.poll(max(0, int(left * 1000)) if not got else 0):
                return got
            topic, body = self.sub.recv_multipart()
            m = json.loads(body)
            if topic == b"status":
                self.status = m
                got = True
            else:
                self.events.append(m)

    def wait_running(self, timeout_s=60):
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError("volrecd exited with %d: %s" %
                                   (self.proc.returncode, self.log_path.read_text()[-2000:]))
            if self.poll_status(0.5) and self.status.get("volumes_published", 0) > 0:
                return
        raise RuntimeError("volrecd published nothing within %d s" % timeout_s)

    def stop(self):
        benchkit.stop(self.proc)
        self.sub.close()
        self.ctx.term()
        self.log.close()
        return self.proc.returncode


class Consumers:
    """The four readers and the recorder loop, for `seconds` (the readers until finish())."""

    def __init__(self, build, work, d, seconds, record_count):
        self.procs = []
        rd = str(d.run_dir)
        for mode in ("next", "latest"):
            self.procs.append(("c-" + mode, subprocess.Popen(
                [str(build / "tests" / "soak_reader"), d.instance, rd, str(seconds + 300),
                 str(PERIOD), mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True)))
            self.procs.append(("py-" + mode, subprocess.Popen(
                [sys.executable, str(pathlib.Path(__file__).resolve()), "--reader", mode,
                 "--instance", d.instance, "--run-dir", rd, "--seconds", str(seconds + 300)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
        self.build, self.work, self.d = build, work, d
        self.record_count = record_count
        self.end = time.monotonic() + seconds
        self.rec = None
        self.rec_files = 0
        self.rec_volumes = 0
        self.rec_missed = 0
        self.rec_errors = []
        self.rec_incomplete = 0  # files that list missed volumes (record exit 4)
        self.rec_path = None
        self.rec_since = None

    def all_attached(self):
        """Whether every reader and the recorder still run."""
        return (self.rec is not None and self.rec.poll() is None and
                all(p.poll() is None for _, p in self.procs))

    def recording_for(self):
        """Seconds the current recorder file has been written (0 between files)."""
        return 0 if self.rec is None else time.monotonic() - self.rec_since

    def _check_recording(self, rc, err):
        import h5py
        try:
            with h5py.File(self.rec_path, "r") as f:
                n = f["volumes"].shape[0]
                attrs = dict(f.attrs)
                if n != int(attrs["volumes"]) or len(f["sequence"]) != n:
                    self.rec_errors.append("%s: %d volumes, attribute says %d" %
                                           (self.rec_path.name, n, int(attrs["volumes"])))
                if n:
                    f["volumes"][n - 1]  # the last chunk reads back
                self.rec_volumes += n
                self.rec_missed += int(attrs.get("missed_volumes", 0))
        except (OSError, KeyError) as e:
            self.rec_errors.append("%s: %s" % (self.rec_path.name, e))
        # exit 4: complete, but volumes were missed (it fell behind): they are in /missed and
        # counted above, not an error
        if rc not in (0, 4):
            self.rec_errors.append("record exit %d: %s" % (rc, err.strip()[-300:]))
        elif rc == 4:
            self.rec_incomplete += 1
        self.rec_files += 1
        self.rec_path.unlink(missing_ok=True)

    def tick(self):
        """Keep one recorder running until the end: check each finished file."""
        if self.rec is not None and self.rec.poll() is not None:
            _, err = self.rec.communicate()
            self._check_recording(self.rec.returncode, err)
            self.rec = None
        if self.rec is None and time.monotonic() < self.end - 5:
            self.rec_path = self.work / ("rec-%d.h5" % self.rec_files)
            self.rec_since = time.monotonic()
            self.rec = subprocess.Popen(
                [str(self.build / "bin" / "volrec"), "record", "-o", str(self.rec_path),
                 "-n", str(self.record_count), "-s", str(max(1, int(self.end - time.monotonic()))),
                 "-w", "0", "-i", self.d.instance, "-r", str(self.d.run_dir)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def finish(self):
        readers = []
        for _, p in self.procs:
            p.send_signal(signal.SIGTERM)
        for name, p in self.procs:
            try:
                out, err = p.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
            try:
                r = json.loads(out.strip().splitlines()[-1])
            except (ValueError, IndexError):
                r = {"reader": name, "errors": 1, "last_error": "no result: " + err[-300:]}
            r["exit_status"] = p.returncode
            if err.strip():
                r["stderr"] = err.strip()[-300:]
            readers.append(r)
        if self.rec is not None:
            self.rec.send_signal(signal.SIGINT)
            _, err = self.rec.communicate(timeout=60)
            self._check_recording(self.rec.returncode, err)
            self.rec = None
        recorder = {"files": self.rec_files, "volumes": self.rec_volumes,
                    "missed_volumes": self.rec_missed, "files_with_missed": self.rec_incomplete,
                    "errors": self.rec_errors,
                    "volumes_per_file": self.record_count}
        return readers, recorder


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.environ.get("VOLREC_BUILD", str(SRC / "build")))
    ap.add_argument("--seconds", type=float,
                    default=float(os.environ.get("SOAK_SECONDS", 1800)))
    ap.add_argument("--calibrate-seconds", type=float, default=30.0)
    ap.add_argument("--headroom", type=float, default=0.8,
                    help="fraction of the calibrated rate the soak runs at (0.8)")
    ap.add_argument("--warmup-seconds", type=float, default=60.0)
    ap.add_argument("--sample-seconds", type=float, default=30.0)
    ap.add_argument("--record-count", type=int, default=2000,
                    help="volumes per recorder file (each ~166 KB)")
    ap.add_argument("--tmp", default="/dev/shm", help="tmpfs for the replay and recordings")
    ap.add_argument("-o", "--output")
    ap.add_argument("--reader", choices=("next", "latest"), help=argparse.SUPPRESS)
    ap.add_argument("--instance", help=argparse.SUPPRESS)
    ap.add_argument("--run-dir", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.reader:
        return run_reader(a.instance, a.run_dir, a.seconds, PERIOD, a.reader)

    build = pathlib.Path(a.build).resolve()
    work = pathlib.Path(tempfile.mkdtemp(prefix="vrsoak", dir=a.tmp))
    instance = "soak" + uuid.uuid4().hex[:8]
    replay = work / "soak.vrr"
    doc = {"benchmark": "volrecd soak: replay at the calibrated highest rate, 4 readers "
                        "(2 libvolrec, 2 Python: next and latest each) and volrec record",
           "host": socket.gethostname().split(".")[0],
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ"),
           "commit": subprocess.run(["git", "-C", str(SRC), "rev-parse", "--short", "HEAD"],
                                    capture_output=True, text=True).stdout.strip() or "unknown",
           "backend": "cpu", "cpus": os.cpu_count(), "geometry": GEOMETRY,
           "mode": "noncumulative", "replay_epochs": PERIOD}
    ok = True
    try:
        sim = {"instance": instance, "backend": "cpu", "geometry": GEOMETRY,
               "source": {"type": "synth", "rate": 25, "synth": {"seed": 1}},
               "reconstruct": {"mode": "noncumulative"}}
        (work / "sim.yaml").write_text(json.dumps(sim))
        subprocess.run([str(build / "bin" / "volrec"), "sim", "-c", str(work / "sim.yaml"),
                        "-o", str(replay), "-n", str(PERIOD)], check=True,
                       capture_output=True, timeout=600)

        # calibration: rate 0, everything attached
        print("soak: calibrating for %.0f s (rate 0, 4 readers and the recorder)"
              % a.calibrate_seconds, flush=True)
        d = Daemon(build, work, instance, replay, 0, "block")
        d.wait_running()
        cons = Consumers(build, work, d, a.calibrate_seconds + 5, a.record_count)
        time.sleep(3)  # the readers connect, the recorder starts
        d.poll_status(2)
        p0, t0 = d.status["volumes_published"], time.monotonic()
        la0 = loadavg()
        while time.monotonic() < t0 + a.calibrate_seconds:
            cons.tick()
            d.poll_status(1)
        p1, t1 = d.status["volumes_published"], time.monotonic()
        cal_readers, cal_rec = cons.finish()
        cal_rc = d.stop()
        measured = (p1 - p0) / (t1 - t0)
        rate = max(1, int(measured * a.headroom))
        doc["calibration"] = {
            "seconds": round(t1 - t0, 1), "rate": 0, "overflow": "block",
            "volumes_per_s": round(measured, 1), "headroom": a.headroom, "soak_rate": rate,
            "loadavg_start": la0, "loadavg_end": loadavg(), "readers": cal_readers,
            "recorder": cal_rec, "exit_status": cal_rc,
            "how": "published volumes/s of volrecd at source.rate 0 (never drops) with the "
                   "four readers and the recorder attached, times the headroom"}
        print("soak: calibration %.1f volumes/s -> soak rate %d/s for %.0f s" %
              (measured, rate, a.seconds), flush=True)
        for r in cal_readers:
            if r.get("mismatches") or r.get("errors"):
                ok = False
                print("soak: calibration reader %s: %s" % (r["reader"], r), flush=True)

        # the soak
        d = Daemon(build, work, instance, replay, rate, "drop_epoch")
        d.wait_running()
        cons = Consumers(build, work, d, a.seconds, a.record_count)
        t_start = time.monotonic()
        samples = []
        next_sample = t_start + a.warmup_seconds
        while time.monotonic() < t_start + a.seconds:
            cons.tick()
            d.poll_status(1)
            if d.proc.poll() is not None:
                ok = False
                print("soak: volrecd exited with %d" % d.proc.returncode, flush=True)
                break
            # sampled while the recorder writes a file: the same subscribers every time
            if time.monotonic() >= next_sample and cons.recording_for() > 2:
                s = proc_sample(d.proc.pid)
                if not cons.all_attached():
                    continue  # a subscriber came or went meanwhile: sample again
                st = d.status or {}
                s.update(t_s=round(time.monotonic() - t_start, 1), loadavg=loadavg(),
                         volumes_published=st.get("volumes_published"),
                         drops=st.get("drops"), rates=st.get("rates"),
                         readers=st.get("readers"), publisher=st.get("publisher"),
                         state=st.get("state"))
                samples.append(s)
                print("soak: t=%6.0f s  volumes %s  drops %s  rss %s KiB  fds %s  load %s" %
                      (s["t_s"], s["volumes_published"], (s["drops"] or {}).get("total"),
                       s["rss_kib"], s["fds"], s["loadavg"][0]), flush=True)
                next_sample += a.sample_seconds
        st = d.status or {}
        final = dict(proc_sample(d.proc.pid)) if d.proc.poll() is None else {}
        readers, rec = cons.finish()
        elapsed = time.monotonic() - t_start
        rc = d.stop()
        first, last = (samples[0], samples[-1]) if samples else ({}, {})
        flat_rss = bool(samples) and last["rss_kib"] <= first["rss_kib"] + RSS_SLACK_KIB
        flat_fds = bool(samples) and last["fds"] == first["fds"]
        doc["soak"] = {
            "seconds": round(elapsed, 1), "rate": rate, "overflow": "drop_epoch",
            "volumes_published": st.get("volumes_published"),
            "volumes_per_s": round((st.get("volumes_published") or 0) / elapsed, 1),
            "drops": st.get("drops"), "bscans": st.get("bscans"), "faults": st.get("faults"),
            "publisher": st.get("publisher"), "latency_ms": st.get("latency_ms"),
            "volrecd": {"start": {k: first.get(k) for k in ("t_s", "rss_kib", "fds", "threads")},
                        "end": {k: last.get(k) for k in ("t_s", "rss_kib", "fds", "threads")},
                        "at_stop": final, "rss_flat": flat_rss, "fds_flat": flat_fds,
                        "rss_slack_kib": RSS_SLACK_KIB, "exit_status": rc},
            "readers": readers, "recorder": rec,
            "events": [e.get("event") for e in d.events],
            "loadavg_start": first.get("loadavg"), "loadavg_end": loadavg(),
            "samples": samples}
        print("soak: %d volumes in %.0f s (%.1f/s), drops %s, volrecd RSS %s -> %s KiB, "
              "fds %s -> %s, exit %d" % (st.get("volumes_published") or 0, elapsed,
                                         doc["soak"]["volumes_per_s"], st.get("drops"),
                                         first.get("rss_kib"), last.get("rss_kib"),
                                         first.get("fds"), last.get("fds"), rc), flush=True)
        for r in readers:
            print("soak: reader %-9s received %s missed %s torn %s checked %s mismatches %s "
                  "errors %s %s" % (r["reader"], r.get("received"), r.get("missed"),
                                    r.get("torn"), r.get("checked"), r.get("mismatches"),
                                    r.get("errors"), r.get("last_error", "")), flush=True)
            if r.get("mismatches") or r.get("errors") or r.get("exit_status"):
                ok = False
        print("soak: recorder %d files, %d volumes, %d missed, errors %s" %
              (rec["files"], rec["volumes"], rec["missed_volumes"], rec["errors"]), flush=True)
        ok = ok and not rec["errors"] and flat_rss and flat_fds and rc == 0
        doc["ok"] = ok
    finally:
        out = pathlib.Path(a.output) if a.output else \
            SRC / "bench" / "results" / ("soak-%s-%s.json" % (doc["host"], doc["date"]))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=1) + "\n")
        print("soak: wrote %s" % out, flush=True)
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
