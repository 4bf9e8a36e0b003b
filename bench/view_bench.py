#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The web viewer's benchmark (docs/viewer.md, "Performance"): the real volrecd (CPU backend, the
synthetic retina of `make demo`, views published in every slot), `volrec view` and headless
chromium on the same host, in one run of five phases of --seconds each:

  1. the daemon alone (no viewer): its rate;
  2. --browsers WebSocket clients that receive the four panes' pictures and draw nothing
     (bench/view_sockets.js): the daemon's rate with the viewer serving them, without a
     browser's drawing on the same cores;
  3. one browser showing the four panes: per pane the pictures drawn per second, the bytes per
     second on the socket, acquisition (the volume's t_last_ns, carried in each frame) -> pixels
     drawn in the page (the requestAnimationFrame callback that drew it) and publish -> drawn,
     p50/p99; the daemon's rate;
  4. --browsers browsers (each its own browser context and WebSocket, four panes each): the
     daemon's rate, the pictures per second and latency each one still gets;
  5. the browsers closed again (the viewer still running): the daemon's rate.

The daemon's rate with clients is compared with the mean of phases 1 and 5 (the host is shared:
its load drifts). Each phase also records the CPU the daemon, the viewer and the clients
(chromium, or the socket clients) used and how busy the whole host was. Writes
bench/results/view-<host>-<date>.json.

  bench/view_bench.py [--geometry 96x96x256] [--rate 10] [--seconds 20] [--encoding auto]
                      [--render-every 0] [--render-side 256] [--browsers 4]
                      [--overflow drop_epoch] [--browser-nice 0]
Defaults are the demo's configuration (scripts/demo.sh); --render-every 0 is the daemon's own
default (every 5th volume on the CPU)."""
import argparse
import datetime
import json
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time

SRC = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(SRC / "tests" / "integration"))
sys.path.insert(0, str(SRC / "clients" / "python"))
import zmq  # noqa: E402

from viewkit import ALL_DRAWN, Browser, DaemonPublisher, Viewer  # noqa: E402

STATS_JS = """(() => {
  const v = window.volrecView, out = {};
  for (const [k, r] of Object.entries(v.received)) out[k] = {frames: r.frames, bytes: r.bytes};
  return {received: out, now: performance.now(),
          latencies: v.latencies.slice(-8000).map(
            l => [l.kind, l.ms, l.arrivedToDrawnMs, l.pubMs, l.t])};
})()"""
TICK = os.sysconf("SC_CLK_TCK")


def pct(v, q):
    v = sorted(v)
    return round(v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))], 2) if v else None


def p50_p99(v, **more):
    return {"p50": pct(v, 0.5), "p99": pct(v, 0.99), **more}


def cpu_seconds(pid):
    """utime + stime of a process, in seconds (0 once it is gone)."""
    try:
        f = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / TICK
    except (OSError, IndexError):
        return 0.0


def descendants(pid):
    """pid and every process below it."""
    children = {}
    for d in pathlib.Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def host_cpu():
    """(busy, total) jiffies of the whole host."""
    f = [int(x) for x in pathlib.Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = f[3] + f[4]
    return sum(f) - idle, sum(f)


class Meter:
    """Counts the daemon's `vol` messages and keeps its newest status message; measures a phase:
    volumes/s, B-scans dropped, CPU of the daemon, the viewer and chromium, host busy."""

    def __init__(self, pub):
        self.pub = pub
        self.volumes = 0
        self.status = {}
        self.running = True
        self.sub = zmq.Context.instance().socket(zmq.SUB)
        for t in (b"vol", b"status"):
            self.sub.setsockopt(zmq.SUBSCRIBE, t)
        self.sub.setsockopt(zmq.RCVHWM, 100000)
        self.sub.connect(f"ipc://{pub.run_dir}/{pub.instance}.pub")
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.viewer_pid = self.clients_pid = None

    def _run(self):
        while self.running:
            if self.sub.poll(200):
                topic, body = self.sub.recv_multipart()
                if topic == b"vol":
                    self.volumes += 1
                else:
                    self.status = json.loads(body)

    def _snap(self):
        clients = descendants(self.clients_pid) if self.clients_pid else []
        return {"t": time.monotonic(), "volumes": self.volumes,
                "drops": self.status.get("drops", {}).get("total", 0),
                "daemon": cpu_seconds(self.pub.proc.pid),
                "viewer": cpu_seconds(self.viewer_pid) if self.viewer_pid else 0.0,
                "clients": {p: cpu_seconds(p) for p in clients}, "host": host_cpu()}

    def measure(self, seconds):
        a = self._snap()
        time.sleep(seconds)
        b = self._snap()
        dt = b["t"] - a["t"]
        busy = (b["host"][0] - a["host"][0]) / max(1, b["host"][1] - a["host"][1])
        cores = {k: (b[k] - a[k]) / dt for k in ("daemon", "viewer")}
        # chromium's processes come and go with its pages: each one's CPU since the first snap
        cores["clients"] = sum(t - a["clients"].get(p, 0.0) for p, t in b["clients"].items()) / dt
        return {"seconds": round(dt, 2),
                "volumes_per_s": round((b["volumes"] - a["volumes"]) / dt, 3),
                "bscans_dropped_per_s": round((b["drops"] - a["drops"]) / dt, 1),
                "cpu_cores": {k: round(v, 3) for k, v in cores.items()},
                "host_busy": round(busy, 3), "loadavg": os.getloadavg()[0]}

    def close(self):
        self.running = False
        self.thread.join()
        self.sub.close(linger=0)


def panes(first, last, dt):
    """Per pane: pictures received and drawn per second, bytes/s, latencies (ms)."""
    new = [x for x in last["latencies"] if first["now"] < x[4] <= last["now"]]
    out = {}
    for kind, r in last["received"].items():
        r0 = first["received"].get(kind, {"frames": 0, "bytes": 0})
        mine = [x for x in new if x[0] == kind]
        lat = [x[1] for x in mine]
        pub = [x[3] for x in mine if x[3] is not None]
        acq_pub = [x[1] - x[3] for x in mine if x[3] is not None]
        out[kind] = {
            "pictures_per_s": round((r["frames"] - r0["frames"]) / dt, 2),
            "bytes_per_s": round((r["bytes"] - r0["bytes"]) / dt),
            "drawn_per_s": round(len(lat) / dt, 2),
            "acq_to_drawn_ms": p50_p99(lat, max=pct(lat, 1.0), n=len(lat)),
            "acq_to_publish_ms": p50_p99(acq_pub),
            "publish_to_drawn_ms": p50_p99(pub),
            "arrived_to_drawn_ms": p50_p99([x[2] for x in mine]),
        }
    every = [x[1] for x in new]
    return out, p50_p99(every, n=len(every))


def with_sockets(view, meter, n, seconds):
    """The daemon's rate with n WebSocket clients that only count the pictures."""
    p = subprocess.Popen(["node", "--experimental-websocket",
                          str(SRC / "bench" / "view_sockets.js"),
                          f"ws://127.0.0.1:{view.port}/ws", str(n), str(seconds)],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready", "view_sockets.js did not start"
        meter.clients_pid = p.pid
        daemon = meter.measure(seconds)
        got = json.loads(p.stdout.readline())
    finally:
        meter.clients_pid = None
        p.kill()
        p.wait()
    kinds = sorted({k for c in got["sockets"] for k in c})
    per = {k: {"pictures_per_s": round(sum(c.get(k, {}).get("frames", 0) for c in got["sockets"])
                                       / n / got["seconds"], 2),
               "bytes_per_s": round(sum(c.get(k, {}).get("bytes", 0) for c in got["sockets"])
                                    / n / got["seconds"])} for k in kinds}
    return {"daemon": daemon, "per_socket_mean": per}


def with_pages(browser, pages, meter, seconds):
    """The daemon's rate and each page's figures over `seconds`."""
    first = [browser.eval(p, STATS_JS) for p in pages]
    t0 = time.monotonic()
    daemon = meter.measure(seconds)
    last = [browser.eval(p, STATS_JS) for p in pages]
    dt = time.monotonic() - t0
    per_page = [panes(f, la, dt) for f, la in zip(first, last)]
    return {"daemon": daemon, "pages": [{"panes": p, "acq_to_drawn_ms_all_panes": a}
                                        for p, a in per_page]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--geometry", default="96x96x256")
    ap.add_argument("--rate", type=float, default=10)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--warmup", type=float, default=5)
    ap.add_argument("--encoding", default="auto", choices=["auto", "raw", "deflate"])
    ap.add_argument("--render-every", type=int, default=0)
    ap.add_argument("--render-side", type=int, default=256)
    ap.add_argument("--browsers", type=int, default=4)
    ap.add_argument("--overflow", default="drop_epoch", choices=["drop_epoch", "block"])
    ap.add_argument("--browser-nice", type=int, default=0,
                    help="run chromium at this niceness (19: the browsers take only what the "
                         "daemon leaves, as on other machines)")
    ap.add_argument("--out", default=str(SRC / "bench" / "results"))
    a = ap.parse_args()
    build = pathlib.Path(os.environ.get("VOLREC_BUILD", SRC / "build"))
    geometry = tuple(int(x) for x in a.geometry.split("x"))
    pub = DaemonPublisher(build, geometry=geometry, rate=a.rate, render_every=a.render_every,
                          render_side=a.render_side, overflow=a.overflow)
    meter = view = browser = None
    try:
        pub.start()
        meter = Meter(pub)
        time.sleep(a.warmup)
        phases = {"alone": meter.measure(a.seconds)}
        print(f"alone: {phases['alone']}", file=sys.stderr)
        view = Viewer(build / "bin", pub, "--encoding", a.encoding, "--max-rate", "120")
        meter.viewer_pid = view.proc.pid
        phases[f"sockets_{a.browsers}"] = with_sockets(view, meter, a.browsers, a.seconds)
        print(f"{a.browsers} sockets: {phases[f'sockets_{a.browsers}']}", file=sys.stderr)
        browser = Browser(nice=a.browser_nice)
        meter.clients_pid = browser.proc.pid
        pages = [browser.open(view.url, width=1600, height=1000)]
        browser.wait(pages[0], ALL_DRAWN)
        phases["browsers_1"] = with_pages(browser, pages, meter, a.seconds)
        print(f"1 browser: {phases['browsers_1']['daemon']}", file=sys.stderr)
        while len(pages) < a.browsers:
            pages.append(browser.open(view.url, width=1600, height=1000))
        for p in pages:
            browser.wait(p, ALL_DRAWN)
        phases[f"browsers_{a.browsers}"] = with_pages(browser, pages, meter, a.seconds)
        print(f"{a.browsers} browsers: {phases[f'browsers_{a.browsers}']['daemon']}",
              file=sys.stderr)
        for p in pages:
            browser.cmd("close", page=p)
        phases["alone_again"] = meter.measure(a.seconds)
        print(f"alone again: {phases['alone_again']}", file=sys.stderr)

        alone = (phases["alone"]["volumes_per_s"] + phases["alone_again"]["volumes_per_s"]) / 2
        many = phases[f"browsers_{a.browsers}"]["daemon"]["volumes_per_s"]
        one = phases["browsers_1"]
        result = {
            "bench": "view", "host": socket.gethostname(), "cpus": os.cpu_count(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "publisher": "volrecd", "backend": "cpu", "config": pub.cfg,
            "geometry": list(geometry), "rate_hz": a.rate, "render_every": a.render_every,
            "render_side": a.render_side, "encoding": a.encoding, "browsers": a.browsers,
            "seconds_per_phase": a.seconds, "browser_nice": a.browser_nice,
            "browser": "chromium headless (software rendering, no GPU), same host; each "
                       "browser a page of one chromium with its own WebSocket",
            "daemon_volumes_per_s": {
                "alone": phases["alone"]["volumes_per_s"],
                "browsers_1": one["daemon"]["volumes_per_s"],
                f"sockets_{a.browsers}": phases[f"sockets_{a.browsers}"]["daemon"]["volumes_per_s"],
                f"browsers_{a.browsers}": many,
                "alone_again": phases["alone_again"]["volumes_per_s"],
                f"ratio_{a.browsers}_to_alone": round(many / alone, 3) if alone else None,
                f"ratio_sockets_{a.browsers}_to_alone": round(
                    phases[f"sockets_{a.browsers}"]["daemon"]["volumes_per_s"] / alone, 3)
                if alone else None},
            "one_browser": one["pages"][0],
            "phases": phases,
        }
        print(json.dumps({k: v for k, v in result.items() if k not in ("phases", "config")},
                         indent=1))
        out = pathlib.Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        name = f"view-{socket.gethostname()}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
        (out / name).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {out / name}", file=sys.stderr)
    finally:
        if browser:
            browser.close()
        if view:
            view.close()
        if meter:
            meter.close()
        pub.close()


if __name__ == "__main__":
    main()
