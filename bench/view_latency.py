#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Acquisition -> picture received at the web viewer's WebSocket, on the daemon's host.

Starts the real volrecd from a build tree (--build) on one configuration (--case, --backend,
--rate), measures its rate alone (two `volrec status --json` messages --seconds apart), starts
`volrec view` on a free loopback port, runs the C client view_latency (bench/view_latency.c:
subscribes to the page's four pictures, en-face mean, B-scan, slice and render) for --seconds
after --warmup, stops everything and writes one JSON object to -o. Python's standard library
only: it runs on a GPU host that has neither numpy nor pyzmq.

  bench/view_latency.py --build build --backend cpu --case demo -o FILE
  bench/view_latency.py --build build-dev --backend cuda --case paper --rate 120 \
      --seconds 10 -o FILE

Cases: those of the one table, tools/bench/cases.c, whose geometry and processing it takes from
`volrec bench --print-case NAME`: demo (scripts/demo.sh: 32 x 32 A-scans of 1024 samples,
stride 3, depth [96, 352), 96 x 96 x 256 volumes from the synthetic retina at 10/s); paper
(60 x 60 A-scans of 8192 samples, stride 5, depth [0, 4096), 300 x 300 x 4096 at 120/s,
replayed from a file `volrec sim` writes into --shm-dir, as tools/bench/e2e_bench does, since the
synthetic scanner cannot generate 120 such epochs a second on one core); tiny (12 x 12 A-scans
of 256 samples, stride 3, 36 x 36 x 128, render every volume: the tests); any other case from
the synthetic scanner at 10/s."""
import argparse
import copy
import datetime
import json
import os
import pathlib
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import benchkit  # bench/, beside this script

SRC = pathlib.Path(__file__).resolve().parents[1]

# How this benchmark runs a case of tools/bench/cases.c: its source, its default source.rate and the
# render settings of the tests' case (geometry and processing come from the table).
RUNS = {
    "demo": {"source": "synth", "rate": 10},
    "tiny": {"source": "synth", "rate": 10, "render_every": 1, "render_side": 96},
    "paper": {"source": "replay", "rate": 120},
}
DEFAULT_RUN = {"source": "synth", "rate": 10}


def log(msg):
    print(f"view_latency.py: {msg}", file=sys.stderr, flush=True)


def config(case, a, instance, run_dir, replay=None):
    """volrecd's configuration (JSON is YAML) for the case (load_case's), as the daemon will run
    it: the case's configuration keys, then this benchmark's source, output and publishing."""
    run = RUNS.get(a.case, DEFAULT_RUN)
    cfg = copy.deepcopy(case["config"])
    cfg.update({
        "instance": instance,
        "backend": a.backend,
        "source": {"type": "synth", "rate": a.rate if a.rate is not None else run["rate"],
                   "synth": {"seed": 1, "phantom": "retina", "motion": {"deg_per_s": 0.25},
                             "snr_db": 40}},
        "output": {"slots": 4},
        "ipc": {"run_dir": str(run_dir), "status_interval_ms": 500, "hwm": 1000},
        "log": {"level": "info"},
    })
    cfg.setdefault("pipeline", {})["overflow"] = "drop_epoch"
    if a.db_range:
        cfg.setdefault("preprocess", {})["db_range"] = a.db_range
    render = {}
    every = a.render_every if a.render_every is not None else run.get("render_every")
    if every is not None:
        render["every"] = every
    if run.get("render_side"):
        render["size"] = [run["render_side"]] * 2
    if render:
        cfg["view"] = {"render": render}
    if replay:
        cfg["source"] = {"type": "replay", "rate": cfg["source"]["rate"],
                         "replay": {"path": str(replay), "format": "auto", "loop": True}}
    return cfg


def write(path, obj):
    path.write_text(json.dumps(obj, indent=1) + "\n")
    return path


def rate_between(s0, s1):
    """Volumes per second published between two status messages of one session."""
    if s0 and s1 and s0.get("session") == s1.get("session") and s1["time"] > s0["time"]:
        return round((s1["volumes_published"] - s0["volumes_published"])
                     / (s1["time"] - s0["time"]), 3)
    return None


def wait_for(pred, timeout, what, step=0.2):
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(step)


def tail(path, n=3000):
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def machine():
    m = {"host": socket.gethostname(), "cpus": os.cpu_count(), "kernel": platform.release(),
         "loadavg_1min": round(os.getloadavg()[0], 2)}
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                m["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return m


def stop(proc, name, timeout=30.0):
    benchkit.stop(proc, timeout,
                  lambda: log(f"{name} did not stop within {timeout:g} s after SIGTERM: killed"))


def run(a):
    build = pathlib.Path(a.build).resolve()
    volrec, volrecd = build / "bin" / "volrec", build / "bin" / "volrecd"
    client = next((p for p in (build / "tests" / "view_latency", build / "bin" / "view_latency")
                   if p.exists()), None)
    for p, what in ((volrec, "volrec"), (volrecd, "volrecd"), (client, "view_latency")):
        if p is None or not p.exists():
            raise RuntimeError(f"{build}: no {what} there (build it: make O={a.build} all)")
    case = benchkit.load_case(volrec, a.case)
    # short paths: the ipc:// socket path must fit 107 bytes
    work = pathlib.Path(tempfile.mkdtemp(prefix="vwl", dir="/tmp"))
    run_dir = work / "run"
    run_dir.mkdir()
    instance = "vwl" + uuid.uuid4().hex[:10]
    replay = None
    daemon = viewer = None
    try:
        source = a.source or RUNS.get(a.case, DEFAULT_RUN)["source"]
        if source == "replay":
            replay = pathlib.Path(a.shm_dir) / f"{instance}.vrr"
            g = case["config"]["geometry"]
            epochs = g["stride"][0] * g["stride"][1]  # one interlacing cycle, looped
            y, x = g["bscans_per_volume"] * g["stride"][1], g["ascans_per_bscan"] * g["stride"][0]
            need = (epochs * g["bscans_per_volume"] * g["ascans_per_bscan"]
                    * g["samples_per_ascan"] * 2 + 5 * y * x * (g["depth_range"][1]
                                                               - g["depth_range"][0]))
            free = shutil.disk_usage(a.shm_dir).free
            if free < need:
                raise RuntimeError(f"{a.shm_dir} has {free / 1e9:.2f} GB free; the replay file "
                                   f"and the daemon's slots need {need / 1e9:.2f} GB "
                                   "(--shm-dir)")
            sim_cfg = write(work / "sim.yaml", config(case, a, "vwlsim", run_dir))
            took = benchkit.sim(volrec, sim_cfg, replay, epochs)
            log(f"replay file {replay} written in {took:.1f} s")
        cfg = config(case, a, instance, run_dir, replay)
        cfg_path = write(work / "volrecd.yaml", cfg)
        env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
        daemon_log = work / "volrecd.log"
        with open(daemon_log, "wb") as f:
            daemon = subprocess.Popen([str(volrecd), "-c", str(cfg_path)], stdout=f,
                                      stderr=subprocess.STDOUT, env=env)

        def publishing():
            if daemon.poll() is not None:
                raise RuntimeError(f"volrecd exited ({daemon.returncode}):\n{tail(daemon_log)}")
            s = benchkit.status(volrec, cfg_path, 2.0)
            return s if s and s.get("volumes_published", 0) > 0 else None
        wait_for(publishing, a.start_timeout, "volrecd's first volume")
        time.sleep(a.warmup)
        alone = None
        if not a.no_alone:
            s0 = benchkit.status(volrec, cfg_path)
            time.sleep(a.seconds)
            s1 = benchkit.status(volrec, cfg_path)
            alone = rate_between(s0, s1)
            log(f"volrecd alone: {alone} volumes/s")

        view_out, view_err = work / "view.out", work / "view.err"
        with open(view_out, "wb") as out, open(view_err, "wb") as err:
            viewer = subprocess.Popen([str(volrec), "view", "-c", str(cfg_path), "--listen",
                                       "127.0.0.1:0", *a.view_arg], stdout=out, stderr=err)

        def serving():
            if viewer.poll() is not None:
                raise RuntimeError(f"volrec view exited ({viewer.returncode}):\n"
                                   f"{tail(view_out)}{tail(view_err)}")
            return re.search(r"serving http://[^ ]+:(\d+)/", view_out.read_text(errors="replace"))
        port = int(wait_for(serving, 30, "the viewer's URL").group(1))
        url = f"ws://127.0.0.1:{port}/ws"
        cmd = [str(client), "--url", url, "--seconds", str(a.seconds), "--warmup",
               str(a.warmup), "--views", a.views] + (["--inflate"] if a.inflate else [])
        log(f"{' '.join(cmd)}" + (f" (x{a.clients} at once)" if a.clients > 1 else ""))
        # --clients N: N sockets at once, as N browsers would be; the first one's figures are
        # the report's, every one's in "clients"
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(a.clients)]
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=a.seconds + a.warmup + 120)
            if p.returncode:
                raise RuntimeError(f"view_latency failed ({p.returncode}): {err.strip()}\n"
                                   f"the viewer's log:\n{tail(view_err)}")
            outs.append(json.loads(out))
        got = outs[0]
        last = benchkit.status(volrec, cfg_path)
        stop(viewer, "volrec view")
        rc = subprocess.run([str(volrec), "stop", "-c", str(cfg_path), "--timeout", "30"],
                            capture_output=True, text=True).returncode
        if rc:
            log(f"volrec stop: exit {rc}; stopping volrecd with SIGTERM")
        stop(daemon, "volrecd")
        if daemon.returncode:
            raise RuntimeError(f"volrecd exited with {daemon.returncode}:\n{tail(daemon_log)}")

        with_viewer = got["daemon"].get("volumes_per_s")
        every = got["acq_to_received_ms_all"]
        backend = (last or {}).get("backend") or got["daemon"].get("backend") or {}
        return {
            "bench": "view_latency",
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "commit": os.environ.get("VOLREC_GIT_COMMIT"),
            "machine": dict(machine(), device=backend.get("device")),
            "case": a.case, "backend": backend.get("name", a.backend), "source": source,
            "rate_hz": cfg["source"]["rate"],
            "volume": (last or {}).get("geometry", {}).get("volume"),
            "seconds": a.seconds, "warmup_s": a.warmup, "viewer_args": a.view_arg,
            "measured_at": "the viewer's WebSocket on the daemon's host (bench/view_latency.c, "
                           "no browser): acquisition (t_last_ns) to the picture's last byte "
                           "received, both CLOCK_REALTIME of this host",
            "daemon_volumes_per_s": {
                "alone": alone, "with_viewer": with_viewer,
                "ratio": round(with_viewer / alone, 3) if alone and with_viewer else None},
            "pictures": {k: {"pictures_per_s": v["pictures_per_s"], "bytes_per_s": v["bytes_per_s"],
                             "shape": v["shape"], "reduced_by": v["reduced_by"],
                             "acq_to_received_ms": v["acq_to_received_ms"],
                             "publish_to_received_ms": v["publish_to_received_ms"]}
                         for k, v in got["pictures"].items()},
            "acq_to_received_ms_all": every,
            "clients": [{"pictures_per_s": {k: v["pictures_per_s"] for k, v in o["pictures"].items()},
                         "acq_to_received_ms_all": o["acq_to_received_ms_all"],
                         "daemon_volumes_per_s": o["daemon"].get("volumes_per_s")}
                        for o in outs],
            "target": {"acq_to_drawn_p99_ms": 50,
                       "met_at_socket": every["p99"] is not None and every["p99"] <= 50},
            "config": cfg,
            "client": got,
        }
    finally:
        stop(viewer, "volrec view")
        stop(daemon, "volrecd")
        for name in (f"volrec.{instance}", f"volrec.{instance}.readers"):
            try:
                os.unlink(f"/dev/shm/{name}")
            except FileNotFoundError:
                pass
        if replay:
            replay.unlink(missing_ok=True)
        if a.keep:
            log(f"logs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.environ.get("VOLREC_BUILD", str(SRC / "build")),
                    help="build tree with bin/volrecd, bin/volrec, tests/view_latency")
    ap.add_argument("--backend", default="cpu", choices=["cpu", "cuda", "auto"])
    ap.add_argument("--case", default="demo",
                    help="a case of tools/bench/cases.c (default demo; tiny: the tests', paper)")
    ap.add_argument("--rate", type=float, help="source.rate, epochs/s (default: the case's)")
    ap.add_argument("--source", choices=["synth", "replay"], help="default: the case's")
    ap.add_argument("--render-every", type=int, help="view.render.every (default: the daemon's)")
    ap.add_argument("--db-range", type=float, nargs=2, metavar=("LO", "HI"))
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=3)
    ap.add_argument("--views", default="enface_mean,bscan,slice,render")
    ap.add_argument("--inflate", action="store_true", help="the client inflates deflated pictures")
    ap.add_argument("--clients", type=int, default=1,
                    help="sockets at once, each subscribed like one page (default 1)")
    ap.add_argument("--view-arg", action="append", default=[],
                    help="an argument for `volrec view` (repeat), e.g. --view-arg=--max-rate=120")
    ap.add_argument("--no-alone", action="store_true", help="skip the daemon-alone phase")
    ap.add_argument("--shm-dir", default="/dev/shm", help="where the replay file goes")
    ap.add_argument("--start-timeout", type=float, default=120)
    ap.add_argument("--keep", action="store_true", help="keep the work folder (logs)")
    ap.add_argument("-o", "--output", help="JSON file (default: bench/results/"
                    "view-latency-<host>-<date>.json)")
    a = ap.parse_args()
    if not a.seconds > 0 or not a.warmup >= 0:
        ap.error("--seconds must be > 0 and --warmup >= 0")
    if not 1 <= a.clients <= 16:
        ap.error("--clients must be 1 to 16 (the viewer's --max-browsers default)")
    try:
        result = run(a)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        log(str(e))
        return 1
    out = pathlib.Path(a.output) if a.output else (
        SRC / "bench" / "results" / f"view-latency-{socket.gethostname()}-"
        f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    write(out, result)
    every = result["acq_to_received_ms_all"]
    for k, v in result["pictures"].items():
        lat = v["acq_to_received_ms"]
        log(f"{k:12s} {v['pictures_per_s']:7.2f} pictures/s {v['bytes_per_s'] / 1e3:9.1f} kB/s  "
            f"acq->received p50 {lat['p50']} p99 {lat['p99']} max {lat['max']} ms")
    log(f"all: p50 {every['p50']} p99 {every['p99']} ms; daemon volumes/s "
        f"{result['daemon_volumes_per_s']}; wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
