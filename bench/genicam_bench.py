#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The camera path on loopback: volrecd acquiring from arv-fake-gv-camera-0.8 on 127.0.0.1
through the GenICam shim at increasing frame rates, against the same geometry replayed at the
same rate. Per rate: B-scans acquired, drops by cause over the window (the highest rate with 0
drops is the figure), volrecd's CPU time per frame (/proc/PID/stat), and the fake camera's own.

    bench/genicam_bench.py [--build build] [--rates 100,200,...] [--seconds 8] [-o FILE.json]

docs/cameras.md quotes the figures of the committed run (bench/results/genicam-*.json)."""
import argparse
import datetime
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import zmq

K, NX, NY = 1024, 64, 16  # Width x Height of a frame, frames per epoch
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    f = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK  # utime + stime


def config(instance, run_dir, source, sample_type="u16"):
    return {
        "instance": instance, "backend": "cpu", "cpu": {"threads": 1},
        "source": source,
        "geometry": {"samples_per_ascan": K, "sample_type": sample_type,
                     "ascans_per_bscan": NX, "bscans_per_volume": NY, "stride": [1, 1],
                     "depth_range": [0, 16]},
        "preprocess": {"window": {"type": "none"}},
        "reconstruct": {"mode": "none"},
        "pipeline": {"ring_bscans": 8 * NY, "overflow": "drop_epoch"},
        "ipc": {"run_dir": str(run_dir), "status_interval_ms": 250},
        "log": {"level": "warning"},
    }


def measure(build, cfg, work, seconds, env, warmup=2.0):
    """Run volrecd on cfg; returns status deltas over `seconds` after `warmup`."""
    path = work / f"{cfg['instance']}.yaml"
    path.write_text(json.dumps(cfg) + "\n")
    log = open(work / f"{cfg['instance']}.log", "wb")
    e = dict(env)
    e.pop("NOTIFY_SOCKET", None)
    proc = subprocess.Popen([str(build / "bin" / "volrecd"), "-c", str(path)], env=e,
                            stdout=log, stderr=log)
    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"status")
    sub.connect(f"ipc://{cfg['ipc']['run_dir']}/{cfg['instance']}.pub")

    def status(after):
        end = time.monotonic() + 30
        while time.monotonic() < end:
            if proc.poll() is not None:
                raise RuntimeError((work / f"{cfg['instance']}.log").read_text()[-2000:])
            if sub.poll(300):
                _, body = sub.recv_multipart()
                st = json.loads(body)
                if st["time"] >= after:
                    return st
        raise RuntimeError("no status")

    try:
        time.sleep(warmup)
        st0, c0, t0 = status(time.time()), cpu_s(proc.pid), time.monotonic()
        time.sleep(seconds)
        st1, c1, t1 = status(time.time()), cpu_s(proc.pid), time.monotonic()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        sub.close(linger=0)
        for n in (f"volrec.{cfg['instance']}", f"volrec.{cfg['instance']}.readers"):
            try:
                os.unlink(f"/dev/shm/{n}")
            except FileNotFoundError:
                pass
    acquired = st1["bscans"]["acquired"] - st0["bscans"]["acquired"]
    drops = {k: st1["drops"][k] - st0["drops"][k] for k in st1["drops"]}
    return {"seconds": t1 - t0, "bscans_acquired": acquired,
            "frames_per_s": acquired / (t1 - t0), "drops": drops,
            "faults": st1["faults"]["source"] - st0["faults"]["source"],
            "volrecd_cpu_s": c1 - c0,
            "volrecd_cpu_us_per_frame": (c1 - c0) / acquired * 1e6 if acquired else None,
            "acquisition": st1["source"]["acquisition"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--rates", default="100,250,500,750,1000")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--pixel-format", default="Mono16", choices=["Mono8", "Mono16"])
    ap.add_argument("--packet-size", type=int, default=0,
                    help="GigE Vision packet size (0: negotiated)")
    ap.add_argument("-o", "--output")
    a = ap.parse_args()
    build = pathlib.Path(a.build).resolve()
    fake = shutil.which("arv-fake-gv-camera-0.8")
    if not fake:
        sys.exit("genicam_bench: arv-fake-gv-camera-0.8 not installed (aravis-tools)")
    env = dict(os.environ, VOLREC_SHIM_DIR=str(build / "lib" / "volrec"))
    work = pathlib.Path(tempfile.mkdtemp(prefix="vrgc", dir="/tmp"))
    run_dir = work / "run"
    run_dir.mkdir()
    serial = f"VB{os.getpid() % 100000}"
    cam = subprocess.Popen([fake, "-i", "127.0.0.1", "-s", serial],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = []
    try:
        time.sleep(1.0)
        # the replay file: the same geometry from the synthetic scanner
        sim = config("sim", run_dir, {"type": "synth", "rate": 25, "synth": {"seed": 1}})
        (work / "sim.yaml").write_text(json.dumps(sim) + "\n")
        subprocess.run([str(build / "bin" / "volrec"), "sim", "-c", str(work / "sim.yaml"),
                        "-o", str(work / "sim.raw"), "-n", "8"], check=True,
                       capture_output=True)
        for rate in [float(r) for r in a.rates.split(",")]:
            row = {"frames_per_s_asked": rate}
            ccpu0 = cpu_s(cam.pid)
            cfg = config("c" + uuid.uuid4().hex[:10], run_dir, {
                "type": "shim", "rate": rate / NY,
                "shim": {"library": "genicam", "timeout_ms": 2000,
                         "args": {"camera": f"Aravis-Fake-{serial}",
                                  "pixel_format": a.pixel_format,
                                  "packet_size": a.packet_size,
                                  "AcquisitionFrameRate": rate}}})
            row["camera"] = measure(build, cfg, work, a.seconds, env)
            row["camera"]["fake_camera_cpu_us_per_frame"] = (
                (cpu_s(cam.pid) - ccpu0) / row["camera"]["bscans_acquired"] * 1e6
                if row["camera"]["bscans_acquired"] else None)
            cfg = config("r" + uuid.uuid4().hex[:10], run_dir, {
                "type": "replay", "rate": rate / NY,
                "replay": {"path": str(work / "sim.raw"), "loop": True}})
            row["replay"] = measure(build, cfg, work, a.seconds, env)
            results.append(row)
            c, r = row["camera"], row["replay"]
            print(f"{rate:7.0f} frames/s asked: camera {c['frames_per_s']:7.1f}/s drops "
                  f"{c['drops']['total']:5d} (lost {c['drops']['source_lost']}, incomplete "
                  f"{c['drops']['source_incomplete']}) volrecd {c['volrecd_cpu_us_per_frame']:.0f} "
                  f"us/frame, fake camera {c['fake_camera_cpu_us_per_frame']:.0f} us/frame | "
                  f"replay {r['frames_per_s']:7.1f}/s drops {r['drops']['total']} volrecd "
                  f"{r['volrecd_cpu_us_per_frame']:.0f} us/frame", flush=True)
    finally:
        cam.kill()
        cam.wait()
        shutil.rmtree(work, ignore_errors=True)
    zero = [r["frames_per_s_asked"] for r in results
            if r["camera"]["drops"]["total"] == 0 and r["camera"]["faults"] == 0]
    out = {
        "benchmark": "genicam-loopback",
        "host": socket.gethostname(), "cpus": os.cpu_count(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                 text=True).stdout.strip(),
        "aravis": "arv-fake-gv-camera-0.8 on 127.0.0.1, packet socket off (loopback)",
        "geometry": {"width_K": K, "height_nx": NX, "frames_per_epoch": NY,
                     "pixel_format": a.pixel_format, "backend": "cpu, 1 thread, mode none",
                     "packet_size": a.packet_size or "negotiated"},
        "highest_rate_with_0_drops": max(zero) if zero else None,
        "results": results,
    }
    text = json.dumps(out, indent=1) + "\n"
    if a.output:
        pathlib.Path(a.output).write_text(text)
        print(f"wrote {a.output}")
    else:
        print(text)


if __name__ == "__main__":
    main()
