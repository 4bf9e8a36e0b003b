#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Raw recording against the file system it writes to (docs/recording.md, "Speed"; never a timed
test). For each --dir, in the same run:

1. The write path: the recorder's own writer (build/tests/raw_write_bench: one aligned write of a
   whole frame per epoch, O_DIRECT where the file system allows it, else buffered with
   sync_file_range, the final fdatasync included) against dd with the same block size (one frame)
   and flags (oflag=direct when the writer used O_DIRECT, conv=fdatasync), alternately, --reps
   times each; the ratio of the medians (target >= 0.9). The memory-copy rate of the same frames
   (the recorder's tap) beside them.
2. The daemon: volrecd on --case at each of --rates epochs/s: --seconds without recording, then
   --seconds recording with `volrec record --raw NAME -s SECONDS`; the drops of acquisition and
   processing in each window, the epochs written and left out, and whether the recording cost
   any drop (target: none at a rate the file system sustains; above it only epochs left out).

Python's standard library only: it runs on a GPU host without numpy.

  bench/raw_record_bench.py --build build --case demo --backend cpu --rates 10,25 \\
      --dir /dev/shm --dir /var/tmp
  bench/raw_record_bench.py --build build --case paper --backend cuda \\
      --rates 25,50,75,100,120 --seconds 10 --dir /dev/shm

The paper case replays a file `volrec sim` writes into --shm-dir (the synthetic scanner cannot
make 25 such epochs a second on one core), as bench/view_latency.py does. A rate whose recording
would not fit the free space of --dir (less 10 %) is recorded for fewer seconds, said in the
JSON. Results: bench/results/raw-record-<host>-<date>.json (or -o)."""
import argparse
import copy
import datetime
import json
import os
import pathlib
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import benchkit  # bench/, beside this script

SRC = pathlib.Path(__file__).resolve().parents[1]
REPLAY_CASES = {"paper", "paper-adaptive", "volrec-medium", "large-600"}


def log(msg):
    print(f"raw_record_bench.py: {msg}", file=sys.stderr, flush=True)


def epoch_bytes(g):
    return g["samples_per_ascan"] * 2 * g["ascans_per_bscan"] * g["bscans_per_volume"]


def frame_bytes(g):
    return 4096 + (epoch_bytes(g) + 4095) // 4096 * 4096


# ---- 1. the write path against dd ------------------------------------------------------------

def dd_rate(path, frame, frames, direct):
    flags = ["oflag=direct"] if direct else []
    t0 = time.monotonic()
    p = subprocess.run(["dd", "if=/dev/zero", f"of={path}", f"bs={frame}", f"count={frames}",
                        "conv=fdatasync", *flags], capture_output=True, text=True)
    dt = time.monotonic() - t0
    try:
        os.unlink(path)
    except OSError:
        pass
    if p.returncode:
        raise RuntimeError(f"dd failed: {p.stderr.strip()}")
    return frame * frames / dt / 1e6


def write_path(build, d, g, a):
    frame = frame_bytes(g)
    frames = a.frames or max(8, int(a.write_gb * 1e9 // frame))
    if shutil.disk_usage(d).free < 1.2 * frame * frames:
        frames = max(2, int(shutil.disk_usage(d).free * 0.4 // frame))
    tool = build / "tests" / "raw_write_bench"
    writer, dd, copies, direct = [], [], [], None
    for _ in range(a.reps):
        p = subprocess.run([str(tool), str(d), str(g["samples_per_ascan"]),
                            str(g["ascans_per_bscan"]), str(g["bscans_per_volume"]),
                            str(frames)], capture_output=True, text=True)
        if p.returncode:
            raise RuntimeError(f"raw_write_bench failed: {p.stderr.strip()}")
        r = json.loads(p.stdout)
        writer.append(r["writer_MBps"])
        copies.append(r["memcpy_MBps"])
        direct = r["direct"]
        dd.append(dd_rate(os.path.join(d, f"dd-{os.getpid()}.tmp"), frame, frames, direct))
    w, s = statistics.median(writer), statistics.median(dd)
    return {"frame_bytes": frame, "frames": frames, "direct": direct,
            "writer_MBps": writer, "dd_MBps": dd, "memcpy_MBps": copies,
            "writer_median_MBps": round(w, 1), "dd_median_MBps": round(s, 1),
            "ratio_writer_to_dd": round(w / s, 3), "target": 0.9, "pass": w / s >= 0.9}


# ---- 2. the daemon -----------------------------------------------------------------------------

def config(case, a, instance, run_dir, rec_dir, rate, replay=None):
    cfg = copy.deepcopy(case["config"])
    cfg.update({
        "instance": instance,
        "backend": a.backend,
        "source": {"type": "synth", "rate": rate,
                   "synth": {"seed": 1, "phantom": "retina", "motion": {"deg_per_s": 0.25},
                             "snr_db": 40}},
        "output": {"slots": 4},
        "ipc": {"run_dir": str(run_dir), "status_interval_ms": 500},
        "record": {"dir": str(rec_dir), "min_free_gb": 0},
        "log": {"level": "info"},
    })
    # a B-scan the ring has no room for drops its epoch (counted), never waits
    cfg.setdefault("pipeline", {})["overflow"] = "drop_epoch"
    if replay:
        cfg["source"] = {"type": "replay", "rate": rate,
                         "replay": {"path": str(replay), "format": "auto", "loop": True}}
    return cfg


def counts(st):
    """B-scans acquired and dropped so far: by acquisition (the source: source_*) and by
    processing (ring_full: processing behind, incomplete_epoch, processing_error)."""
    d = {k: v for k, v in st["drops"].items() if k != "total"}
    return {"acquired": st["bscans"]["acquired"], "drops": d, "time": st["time"],
            "acquisition": sum(v for k, v in d.items() if k.startswith("source_")),
            "processing": sum(v for k, v in d.items() if not k.startswith("source_"))}


def window(s0, s1, ny):
    dt = s1["time"] - s0["time"]
    return {"seconds": round(dt, 3),
            "epochs_per_s": round((s1["acquired"] - s0["acquired"]) / ny / dt, 3),
            "drops": {k: s1["drops"][k] - s0["drops"].get(k, 0) for k in s1["drops"]},
            "acquisition_drops": s1["acquisition"] - s0["acquisition"],
            "processing_drops": s1["processing"] - s0["processing"]}


def build_commit(build):
    """The commit the binaries were built from (BUILD/COMMIT, written where a build travels to
    another host, docs/gpu.md), else the checkout's."""
    f = pathlib.Path(build) / "COMMIT"
    if f.is_file():
        return f.read_text().strip()
    return subprocess.run(["git", "-C", str(SRC), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()


def make_replay(volrec, case, a, work, run_dir):
    g = case["config"]["geometry"]
    epochs = g["stride"][0] * g["stride"][1]  # one interlacing cycle, looped
    replay = pathlib.Path(a.shm_dir) / f"rrb{uuid.uuid4().hex[:8]}.vrr"
    need = epochs * epoch_bytes(g)
    if shutil.disk_usage(a.shm_dir).free < 1.1 * need:
        raise RuntimeError(f"{a.shm_dir}: the replay file needs {need / 1e9:.2f} GB")
    sim = work / "sim.yaml"
    sim.write_text(json.dumps(config(case, a, "rrbsim", run_dir, work, 10)) + "\n")
    took = benchkit.sim(volrec, sim, replay, epochs)
    log(f"replay file {replay} ({need / 1e9:.2f} GB) written in {took:.1f} s")
    return replay


def daemon_run(build, case, a, d, rate, replay):
    volrec, volrecd = build / "bin" / "volrec", build / "bin" / "volrecd"
    g = case["config"]["geometry"]
    work = pathlib.Path(tempfile.mkdtemp(prefix="rrb", dir="/tmp"))
    run_dir = work / "run"
    run_dir.mkdir()
    instance = "rrb" + uuid.uuid4().hex[:10]
    cfg_path = work / "volrecd.yaml"
    cfg_path.write_text(json.dumps(config(case, a, instance, run_dir, d, rate, replay)) + "\n")
    secs = a.seconds
    fit = shutil.disk_usage(d).free * 0.9 / (rate * frame_bytes(g))
    out = {"rate": rate, "seconds_asked": a.seconds}
    if fit < secs:
        secs = round(fit, 1)
        out["note"] = (f"{d} holds {fit:.1f} s of recording at this rate: recorded {secs} s")
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
    logf = open(work / "volrecd.log", "wb")
    proc = subprocess.Popen([str(volrecd), "-c", str(cfg_path)], stdout=logf, stderr=logf,
                            env=env)
    name = f"rrb-{rate}-{uuid.uuid4().hex[:6]}"
    try:
        end = time.monotonic() + 120
        while not (st := benchkit.status(volrec, cfg_path)) or st["volumes_published"] < 2:
            if proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError("volrecd did not start: " +
                                   (work / "volrecd.log").read_text(errors="replace")[-2000:])
            time.sleep(0.5)
        time.sleep(a.warmup)
        s0 = counts(benchkit.status(volrec, cfg_path))
        time.sleep(secs)
        s1 = counts(benchkit.status(volrec, cfg_path))
        out["without_recording"] = window(s0, s1, g["bscans_per_volume"])
        p = subprocess.run([str(volrec), "record", "--raw", name, "-s", str(secs), "-c",
                            str(cfg_path)], capture_output=True, text=True,
                           timeout=secs * 10 + 120)
        s2 = counts(benchkit.status(volrec, cfg_path))
        rec = benchkit.status(volrec, cfg_path)["recording"]
        out["recording"] = window(s1, s2, g["bscans_per_volume"])
        out["record"] = {k: rec.get(k) for k in ("file", "epochs_written", "skipped_epochs",
                                                 "bytes", "seconds", "rate_mb_s", "direct",
                                                 "failed", "error", "end")}
        out["record"]["volrec_exit"] = p.returncode
        out["record"]["volrec_stdout"] = p.stdout.strip()
        out["record"]["epochs_expected"] = round(rate * secs)
        w, r = out["without_recording"], out["recording"]
        # per second: the windows differ a little in length
        out["processing_drops_per_s_without_and_with"] = [
            round(w["processing_drops"] / w["seconds"], 2),
            round(r["processing_drops"] / r["seconds"], 2)]
        # the recorder never makes acquisition wait (docs/recording.md): none of its drops
        out["pass_no_acquisition_drop"] = (r["acquisition_drops"] == 0
                                           and rec.get("skipped_epochs") == 0
                                           and not rec.get("failed"))
        # the GPU host's target: no drop of any kind, with or without recording
        out["pass_no_drop_at_all"] = (out["pass_no_acquisition_drop"]
                                      and w["acquisition_drops"] + w["processing_drops"] == 0
                                      and r["processing_drops"] == 0)
    finally:
        benchkit.stop(proc, 60, lambda: log("volrecd did not stop within 60 s: killed"))
        logf.close()
        f = pathlib.Path(d) / f"{name}.vrr"
        if f.exists():
            f.unlink()
        shutil.rmtree(work, ignore_errors=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.environ.get("VOLREC_BUILD", "build"))
    ap.add_argument("--dir", action="append", help="file system to record to (repeat)")
    ap.add_argument("--case", default="demo", help="a case of tools/bench/cases.c")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--rates", default="10,25", help="epochs/s, comma separated")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--reps", type=int, default=3, help="write-path runs of each (medians)")
    ap.add_argument("--write-gb", type=float, default=2.0, help="bytes of each write-path run")
    ap.add_argument("--frames", type=int, default=0, help="frames of each write-path run")
    ap.add_argument("--shm-dir", default="/dev/shm", help="where the replay file goes")
    ap.add_argument("--no-daemon", action="store_true", help="the write path only")
    ap.add_argument("-o", "--output")
    a = ap.parse_args()
    build = pathlib.Path(a.build).resolve()
    volrec = build / "bin" / "volrec"
    case = benchkit.load_case(volrec, a.case)
    g = case["config"]["geometry"]
    dirs = a.dir or ["/dev/shm", tempfile.gettempdir()]
    load0 = os.getloadavg()
    res = {"case": a.case, "backend": a.backend, "geometry": g,
           "epoch_bytes": epoch_bytes(g), "frame_bytes": frame_bytes(g),
           "commit": build_commit(build),
           "host": socket.gethostname(), "cpus": os.cpu_count(),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "filesystems": []}
    replay = None
    work = pathlib.Path(tempfile.mkdtemp(prefix="rrbsim", dir="/tmp"))
    try:
        if not a.no_daemon and (a.case in REPLAY_CASES):
            replay = make_replay(volrec, case, a, work, work)
        for d in dirs:
            fs = subprocess.run(["df", "--output=fstype", d], capture_output=True,
                                text=True).stdout.split()[-1:]
            log(f"{d}: the write path against dd")
            r = {"dir": d, "fstype": fs[0] if fs else "?", "write_path": write_path(build, d, g, a)}
            log(f"{d}: writer {r['write_path']['writer_median_MBps']} MB/s, dd "
                f"{r['write_path']['dd_median_MBps']} MB/s")
            if not a.no_daemon:
                r["daemon"] = []
                for rate in [float(x) for x in a.rates.split(",") if x]:
                    log(f"{d}: volrecd at {rate:g} epochs/s")
                    r["daemon"].append(daemon_run(build, case, a, d, rate, replay))
                    log(f"  {json.dumps(r['daemon'][-1].get('record'))}")
            res["filesystems"].append(r)
    finally:
        if replay and replay.exists():
            replay.unlink()
        shutil.rmtree(work, ignore_errors=True)
    res["loadavg_1_5_15_before"] = [round(x, 2) for x in load0]
    res["loadavg_1_5_15_after"] = [round(x, 2) for x in os.getloadavg()]
    path = pathlib.Path(a.output) if a.output else (
        SRC / "bench" / "results" /
        f"raw-record-{socket.gethostname()}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
        ".json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))
    log(str(path))


if __name__ == "__main__":
    main()
