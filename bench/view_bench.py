#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The web viewer's benchmark (docs/viewer.md, "Performance"): a publisher at a given geometry
and rate, `volrec view`, and headless chromium showing the four panes. Measures per pane the
pictures drawn per second, the bytes per second on the socket, and acquisition (the volume's
t_last_ns, carried in each frame) -> pixels drawn in the page (the requestAnimationFrame
callback that drew it), p50/p99; with --browsers N, the publisher's own rate with N pages open
against none. Writes bench/results/view-<host>-<date>.json.

  bench/view_bench.py [--geometry 96x96x256] [--rate 30] [--seconds 20] [--encoding auto]
                      [--render-every 1] [--render-side 256] [--browsers 1]
The publisher is tests/view/view_testpub unless VOLREC_VIEW_PUBLISHER=volrecd."""
import argparse
import datetime
import json
import os
import pathlib
import socket
import sys
import time

SRC = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(SRC / "tests" / "integration"))
from viewkit import ALL_DRAWN, Browser, Viewer, make_publisher  # noqa: E402

STATS_JS = """(() => {
  const v = window.volrecView, out = {};
  for (const [k, r] of Object.entries(v.received)) out[k] = {frames: r.frames, bytes: r.bytes};
  return {received: out, latencies: v.latencies.map(l => [l.kind, l.ms, l.arrivedToDrawnMs, l.pubMs]),
          status: v.status};
})()"""


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))] if v else None


def status_rate(pub, seconds):
    """volumes/s the publisher reports, averaged over its status messages for `seconds`."""
    import zmq
    s = zmq.Context.instance().socket(zmq.SUB)
    s.setsockopt(zmq.SUBSCRIBE, b"vol")
    s.connect(f"ipc://{pub.run_dir}/{pub.instance}.pub")
    n, t0 = 0, None
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if s.poll(200):
            s.recv_multipart()
            if t0 is None:
                t0 = time.monotonic()
            else:
                n += 1
    s.close(linger=0)
    return n / (time.monotonic() - t0) if t0 else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--geometry", default="96x96x256")
    ap.add_argument("--rate", type=float, default=30)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--encoding", default="auto", choices=["auto", "raw", "deflate"])
    ap.add_argument("--render-every", type=int, default=1)
    ap.add_argument("--render-side", type=int, default=256)
    ap.add_argument("--browsers", type=int, default=1)
    ap.add_argument("--out", default=str(SRC / "bench" / "results"))
    a = ap.parse_args()
    build = pathlib.Path(os.environ.get("VOLREC_BUILD", SRC / "build"))
    geometry = tuple(int(x) for x in a.geometry.split("x"))
    pub = make_publisher(build, geometry=geometry, rate=a.rate, render_every=a.render_every,
                         render_side=a.render_side).start()
    view = browser = None
    try:
        rate_alone = status_rate(pub, 5)
        view = Viewer(build / "bin", pub, "--encoding", a.encoding, "--max-rate", "120")
        browser = Browser()
        pages = [browser.open(view.url, width=1600, height=1000) for _ in range(a.browsers)]
        for p in pages:
            browser.wait(p, ALL_DRAWN)
        first = browser.eval(pages[0], STATS_JS)
        t0 = time.monotonic()
        rate_with = status_rate(pub, a.seconds)
        last = browser.eval(pages[0], STATS_JS)
        dt = time.monotonic() - t0
        panes = {}
        for kind, r in last["received"].items():
            r0 = first["received"].get(kind, {"frames": 0, "bytes": 0})
            lat = [l[1] for l in last["latencies"][len(first["latencies"]):] if l[0] == kind]
            a2d = [l[2] for l in last["latencies"][len(first["latencies"]):] if l[0] == kind]
            p2d = [l[3] for l in last["latencies"][len(first["latencies"]):]
                   if l[0] == kind and l[3] is not None]
            panes[kind] = {
                "pictures_per_s": (r["frames"] - r0["frames"]) / dt,
                "bytes_per_s": (r["bytes"] - r0["bytes"]) / dt,
                "drawn_per_s": len(lat) / dt,
                "acq_to_drawn_ms": {"p50": pct(lat, 0.5), "p99": pct(lat, 0.99),
                                    "max": max(lat) if lat else None, "n": len(lat)},
                "publish_to_drawn_ms": {"p50": pct(p2d, 0.5), "p99": pct(p2d, 0.99)},
                "arrived_to_drawn_ms": {"p50": pct(a2d, 0.5), "p99": pct(a2d, 0.99)},
            }
        every = [l[1] for l in last["latencies"][len(first["latencies"]):]]
        result = {
            "bench": "view", "host": socket.gethostname(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "publisher": os.environ.get("VOLREC_VIEW_PUBLISHER", "testpub"),
            "geometry": list(geometry), "rate_hz": a.rate, "render_every": a.render_every,
            "render_side": a.render_side, "encoding": a.encoding, "browsers": a.browsers,
            "seconds": dt, "browser": "chromium headless (SwiftShader, no GPU), same host",
            "publisher_volumes_per_s": {"alone": rate_alone, "with_browsers": rate_with,
                                        "ratio": rate_with / rate_alone if rate_alone else None},
            "acq_to_drawn_ms_all_panes": {"p50": pct(every, 0.5), "p99": pct(every, 0.99)},
            "panes": panes,
        }
        print(json.dumps(result, indent=1))
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
        pub.close()


if __name__ == "__main__":
    main()
