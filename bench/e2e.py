#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""End-to-end benchmark through volrecd: a replay file already in RAM (tmpfs) read at rate 0
with overflow `block` -> the daemon's pipeline -> the `vol` message a ZeroMQ subscriber receives.

    bench/e2e.py [--build DIR] [--backend cpu|cuda|auto] [--seconds S] [--case NAME ...] [-o FILE]

Cases: `tiny` (the test geometry, VolRec stride 3), `classic-2048` (2048-sample u16 A-scans,
512 x 32 per volume, mode none: a classic FD-OCT processor), `paper` (60 x 60 x 8192 u16, stride
5: 300 x 300 x 4096 out; meant for a GPU). For each: volumes/s and A-scans/s at the subscriber,
and latency p50/p99 of (a) the daemon's processing latency (last B-scan acquired -> volume
written, from the `vol` message) and (b) last B-scan acquired -> `vol` received by the
subscriber. Results go to bench/results/e2e-<backend>-<host>-<date>.json (or -o).
"""
import argparse
import datetime
import json
import os
import pathlib
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid

import zmq

SRC = pathlib.Path(__file__).resolve().parents[1]

CASES = {
    "tiny": {
        "geometry": {"samples_per_ascan": 256, "sample_type": "u16", "ascans_per_bscan": 12,
                     "bscans_per_volume": 12, "stride": [3, 3]},
        "reconstruct": {"mode": "noncumulative"},
        "epochs": 36,
    },
    "classic-2048": {
        "geometry": {"samples_per_ascan": 2048, "sample_type": "u16", "ascans_per_bscan": 512,
                     "bscans_per_volume": 32, "stride": [1, 1], "depth_range": [0, 1024]},
        "preprocess": {"background": {"mode": "ascan_mean"}, "window": {"type": "hann"},
                       "dispersion": {"coeffs": [2.0, -0.5]}, "db_range": [20, 90]},
        "reconstruct": {"mode": "none"},
        "epochs": 4,
    },
    "paper": {
        "geometry": {"samples_per_ascan": 8192, "sample_type": "u16", "ascans_per_bscan": 60,
                     "bscans_per_volume": 60, "stride": [5, 5], "depth_range": [0, 4096]},
        "reconstruct": {"mode": "noncumulative"},
        "epochs": 25,
    },
}

VOL = struct.Struct("<IHHIIQQQQIIIIiiQQQQI")


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[max(0, min(len(xs) - 1, int(-(-p * len(xs) // 1)) - 1))]


def config(case, backend, instance, run_dir, replay):
    c = CASES[case]
    cfg = {
        "instance": instance,
        "backend": backend,
        "source": {"type": "replay", "rate": 0,
                   "replay": {"path": str(replay), "format": "auto", "loop": True},
                   "synth": {"seed": 1}},
        "geometry": c["geometry"],
        "reconstruct": c["reconstruct"],
        "output": {"slots": 4},
        "pipeline": {"ring_bscans": 4 * c["geometry"]["bscans_per_volume"], "overflow": "block"},
        "ipc": {"run_dir": str(run_dir), "status_interval_ms": 500, "hwm": 1000},
        "log": {"level": "warning"},
    }
    if "preprocess" in c:
        cfg["preprocess"] = c["preprocess"]
    return cfg


def run_case(build, backend, case, seconds, shm_dir):
    work = pathlib.Path(tempfile.mkdtemp(prefix="vrbench", dir="/tmp"))
    instance = "bench" + uuid.uuid4().hex[:8]
    run_dir = work / "run"
    run_dir.mkdir()
    replay = pathlib.Path(shm_dir) / f"{instance}.vrr"
    cfg_path = work / "volrecd.yaml"
    cfg = config(case, backend, instance, run_dir, replay)
    proc = None
    try:
        # the replay file, written by the synthetic scanner into tmpfs (already in RAM)
        sim_cfg = dict(cfg, source={"type": "synth", "rate": 25, "synth": {"seed": 1}})
        (work / "sim.yaml").write_text(json.dumps(sim_cfg))
        subprocess.run([str(build / "bin" / "volrec"), "sim", "-c", str(work / "sim.yaml"),
                        "-o", str(replay), "-n", str(CASES[case]["epochs"])],
                       check=True, capture_output=True, timeout=600)
        cfg_path.write_text(json.dumps(cfg))
        log = open(work / "volrecd.log", "wb")
        proc = subprocess.Popen([str(build / "bin" / "volrecd"), "-c", str(cfg_path)],
                                stdout=log, stderr=log)
        ctx = zmq.Context.instance()
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"vol")
        sub.setsockopt(zmq.SUBSCRIBE, b"status")
        sub.setsockopt(zmq.RCVHWM, 100000)
        sub.connect(f"ipc://{run_dir}/{instance}.pub")
        # warm up: the first volumes (plans, page faults) are not measured
        deadline = time.monotonic() + 60
        warm = 0
        while warm < 3 and time.monotonic() < deadline:
            if sub.poll(200) and sub.recv_multipart()[0] == b"vol":
                warm += 1
            if proc.poll() is not None:
                raise RuntimeError((work / "volrecd.log").read_text())
        lat_daemon, lat_sub, status = [], [], None
        n = 0
        t0 = time.monotonic()
        end = t0 + seconds
        first_seq = last_seq = None
        while time.monotonic() < end:
            if not sub.poll(200):
                continue
            topic, body = sub.recv_multipart()
            now_ns = time.time_ns()
            if topic == b"status":
                status = json.loads(body)
                continue
            f = VOL.unpack_from(body, 0)
            seq, t_last, lat = f[6], f[16], f[18]
            first_seq = seq if first_seq is None else first_seq
            last_seq = seq
            n += 1
            lat_daemon.append(lat / 1e6)
            lat_sub.append((now_ns - t_last) / 1e6)
        dt = time.monotonic() - t0
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=30)
        g = cfg["geometry"]
        ascans = g["ascans_per_bscan"] * g["bscans_per_volume"]
        vps = n / dt
        return {
            "case": case,
            "geometry": g,
            "mode": cfg["reconstruct"]["mode"],
            "seconds": round(dt, 3),
            "volumes": n,
            "missed_notifications": (last_seq - first_seq + 1 - n) if n else None,
            "volumes_per_s": round(vps, 2),
            "ascans_per_s": round(vps * ascans, 1),
            "processing_latency_ms": {"p50": pct(lat_daemon, 0.5), "p99": pct(lat_daemon, 0.99)},
            "acquired_to_received_ms": {"p50": pct(lat_sub, 0.5), "p99": pct(lat_sub, 0.99)},
            "daemon_status": {k: status.get(k) for k in
                              ("backend", "rates", "latency_ms", "drops")} if status else None,
            "exit_status": rc,
        }
    finally:
        if proc and proc.poll() is None:
            proc.kill()
            proc.wait()
        replay.unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.environ.get("VOLREC_BUILD", str(SRC / "build")))
    ap.add_argument("--backend", default="cpu", choices=("cpu", "cuda", "auto"))
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--case", action="append", choices=sorted(CASES))
    ap.add_argument("--shm-dir", default="/dev/shm", help="tmpfs for the replay file")
    ap.add_argument("-o", "--output")
    a = ap.parse_args()
    build = pathlib.Path(a.build).resolve()
    cases = a.case or ["tiny", "classic-2048"]
    results = []
    for c in cases:
        r = run_case(build, a.backend, c, a.seconds, a.shm_dir)
        print(f"{c}: {r['volumes_per_s']} volumes/s, {r['ascans_per_s']:.4g} A-scans/s, "
              f"processing latency p50 {r['processing_latency_ms']['p50']:.2f} ms "
              f"p99 {r['processing_latency_ms']['p99']:.2f} ms, acquired->received p50 "
              f"{r['acquired_to_received_ms']['p50']:.2f} ms p99 "
              f"{r['acquired_to_received_ms']['p99']:.2f} ms", flush=True)
        results.append(r)
    host = socket.gethostname().split(".")[0]
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = pathlib.Path(a.output) if a.output else \
        SRC / "bench" / "results" / f"e2e-{a.backend}-{host}-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "-C", str(SRC), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or "unknown"
    doc = {"benchmark": "volrecd end to end (replay in tmpfs, rate 0, overflow block -> vol "
                        "received)", "host": host, "date": stamp, "commit": commit,
           "backend": a.backend, "cpus": os.cpu_count(), "results": results}
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
