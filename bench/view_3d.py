#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Frame time of the viewer page's 3-D pane (WebGL2 ray marching, clients/view/www/render3d.js)
in headless chromium: the real volrecd (CPU backend, the demo's synthetic retina) sends its
reduced volume view (the `volume` frame, docs/viewer.md), `volrec view` serves the page, and
the page renders the newest volume in each mode, n frames each, every frame waited for
(readPixels), at the pane's full resolution and as the page draws it (a software renderer
draws a quarter of the pixels). Debian's chromium has no GPU here: WebGL2 runs in SwiftShader
on the CPU. --synthetic SIDE renders a synthetic SIDE^3 volume handed to the page instead (its
test hook), without waiting for the daemon's.

    python3 bench/view_3d.py --build build [--geometry 96,96,256] [--frames 5] [-o FILE]

Prints one JSON object (and writes it with -o): the renderer chromium reports, the volume's
shape, the canvas sizes and, per mode, the mean and smallest frame time in ms; the time to
repaint the 2-D panes after a window change; the host's load average."""
import argparse
import json
import os
import pathlib
import sys

SRC = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(SRC / "tests"))
sys.path.insert(0, str(SRC / "tests" / "integration"))
sys.path.insert(0, str(SRC / "clients" / "python"))

from viewkit import ALL_DRAWN, Browser, DaemonPublisher, Viewer  # noqa: E402

SYNTHETIC_JS = """(n => {
  const v = new Uint8Array(n * n * n);
  for (let y = 0; y < n; y++) for (let x = 0; x < n; x++) for (let z = 0; z < n; z++) {
    const surf = n / 4 + n / 12 * Math.sin(x / 7) + n / 16 * Math.cos(y / 5);
    v[(y * n + x) * n + z] = z < surf ? 8 : 120 + 100 * Math.exp(-(z - surf) / (n / 5));
  }
  window.volrecView.injectVolume(v, [n, n, n], [0, 0, 0]);
  return true;
})(%d)"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=str(SRC / "build"))
    ap.add_argument("--geometry", default="96,96,256")
    ap.add_argument("--frames", type=int, default=5)
    ap.add_argument("--width", type=int, default=1600)
    ap.add_argument("--height", type=int, default=1000)
    ap.add_argument("--synthetic", type=int, default=0)
    ap.add_argument("-o", "--output")
    a = ap.parse_args()
    build = pathlib.Path(a.build)
    geometry = tuple(int(v) for v in a.geometry.split(","))
    pub = DaemonPublisher(build, geometry=geometry)
    view = browser = None
    try:
        pub.start()
        view = Viewer(build / "bin", pub)
        browser = Browser()
        page = browser.open(view.url, width=a.width, height=a.height)
        browser.wait(page, ALL_DRAWN, timeout_ms=60000)
        if not a.synthetic:
            browser.wait(page, "(v => v.shown && !v.shown.injected)(window.volrecView.volume3d)",
                         timeout_ms=60000)
        browser.cmd("click", page=page, selector="#pause", x=0.5, y=0.5)  # one volume throughout
        browser.wait(page, "window.volrecView.paused")
        if a.synthetic:
            browser.eval(page, SYNTHETIC_JS % a.synthetic)
        shape = browser.eval(page, "(s => [s.rows, s.cols, s.planes])(window.volrecView.volume3d.shown)")
        out = {
            "volume": shape, "synthetic": bool(a.synthetic), "viewport": [a.width, a.height],
            "full": browser.eval(page, f"window.volrecView.measure3d({a.frames}, 1)"),
            "as_drawn": browser.eval(page, f"window.volrecView.measure3d({a.frames})"),
            "window_change": browser.eval(page, "window.volrecView.measureWindow(20)"),
            "loadavg": os.getloadavg(), "cpus": os.cpu_count(),
        }
    finally:
        if browser:
            browser.close()
        if view:
            view.close()
        pub.close()
    text = json.dumps(out, indent=1)
    print(text)
    if a.output:
        pathlib.Path(a.output).write_text(text + "\n")


if __name__ == "__main__":
    main()
