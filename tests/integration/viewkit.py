# SPDX-License-Identifier: MIT
"""What the web viewer's tests and benchmark drive: a publisher of volumes with views (the
stand-in tests/view/view_testpub, or the real volrecd: VOLREC_VIEW_PUBLISHER=volrecd), the
viewer (`volrec view`), a recorder of the published pictures (tests/view/view_record, through
libvolrec's volrec_view_image) and a real browser (Debian's chromium through playwright-core,
tests/browser/driver.js)."""
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid

import numpy as np
import zmq

SRC = pathlib.Path(__file__).resolve().parents[2]
TIMEOUT = 30.0
PUBLISHER = os.environ.get("VOLREC_VIEW_PUBLISHER", "testpub")


def wait_for(pred, timeout=TIMEOUT, what="condition", step=0.05):
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)


class Control:
    """volrecd's control socket (or the stand-in's): one REQ request at a time."""

    def __init__(self, run_dir, instance):
        self.endpoint = f"ipc://{run_dir}/{instance}.ctl"

    def ask(self, req, timeout=10.0):
        s = zmq.Context.instance().socket(zmq.REQ)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(self.endpoint)
        try:
            s.send_string(json.dumps(req))
            if not s.poll(int(timeout * 1000)):
                raise AssertionError(f"no reply to {req} from {self.endpoint}")
            return json.loads(s.recv())
        finally:
            s.close()

    def get(self, key):
        r = self.ask({"op": "get", "key": key})
        assert r["ok"], r
        return json.loads(r["value"])


class TestPublisher:
    """tests/view/view_testpub: synthetic volumes with views computed by cpu/views.c, and a
    control socket answered by daemon/vrd_ctl.c."""

    def __init__(self, build_dir, geometry=(48, 64, 96), rate=10.0, render_every=1,
                 render_side=96):
        self.build_dir = pathlib.Path(build_dir)
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="vwt", dir="/tmp"))
        self.run_dir = self.dir / "run"
        self.run_dir.mkdir()
        self.instance = "v" + uuid.uuid4().hex[:12]
        self.shape = tuple(geometry)
        self.args = ["-g", "x".join(map(str, geometry)), "-R", str(rate), "-e", str(render_every),
                     "-s", str(render_side)]
        self.proc = None
        self.log = self.dir / "pub.log"
        self.control = Control(self.run_dir, self.instance)

    def start(self):
        self.proc = subprocess.Popen(
            [str(self.build_dir / "tests" / "view_testpub"), "-i", self.instance, "-r",
             str(self.run_dir), *self.args], stdout=open(self.log, "ab"), stderr=subprocess.STDOUT)
        wait_for(lambda: "ready" in self.log.read_text() or self.proc.poll() is not None,
                 what="the publisher")
        assert self.proc.poll() is None, self.log.read_text()
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=TIMEOUT)

    def log_text(self):
        return self.log.read_text(errors="replace")

    def close(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for name in (f"volrec.{self.instance}", f"volrec.{self.instance}.readers"):
            try:
                os.unlink(f"/dev/shm/{name}")
            except FileNotFoundError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


class DaemonPublisher:
    """The real volrecd on the synthetic source with views on (CPU backend)."""

    def __init__(self, build_dir, geometry=None, rate=10.0, render_every=1, render_side=96):
        from test_daemon import Daemon  # noqa: E402 (the daemon tests' harness)
        self.d = Daemon(build_dir / "bin", build_dir, **{
            "source.rate": rate, "view.render.size": [render_side, render_side],
            "view.render.every": render_every, "ipc.status_interval_ms": 200})
        self.run_dir, self.instance = self.d.run_dir, self.d.instance
        self.control = Control(self.run_dir, self.instance)
        self.shape = None

    def start(self):
        self.d.start()
        self.d.ready()
        return self

    def stop(self):
        self.d.signal(signal.SIGTERM)
        self.d.wait_exit()

    def log_text(self):
        return self.d.log_text()

    def close(self):
        self.d.close()


def make_publisher(build_dir, **kw):
    cls = DaemonPublisher if PUBLISHER == "volrecd" else TestPublisher
    return cls(pathlib.Path(build_dir), **kw)


class Viewer:
    """`volrec view` on a free loopback port (or as given)."""

    def __init__(self, bin_dir, pub, *extra, listen="127.0.0.1:0"):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="vwv", dir="/tmp"))
        self.err = self.dir / "view.err"
        self.out = self.dir / "view.out"
        self.proc = subprocess.Popen(
            [str(pathlib.Path(bin_dir) / "volrec"), "view", "-i", pub.instance, "-r",
             str(pub.run_dir), "--listen", listen, *extra],
            stdout=open(self.out, "wb"), stderr=open(self.err, "wb"))
        m = wait_for(lambda: re.search(r"serving (https?)://([^ ]+):(\d+)/", self.out.read_text())
                     or self.proc.poll() is not None, what="the viewer's URL")
        assert self.proc.poll() is None, self.log_text()
        self.scheme, self.port = m.group(1), int(m.group(3))
        self.url = f"{self.scheme}://127.0.0.1:{self.port}/"

    def log_text(self):
        return self.out.read_text(errors="replace") + self.err.read_text(errors="replace")

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Recorder:
    """The pictures of every published volume, as the C accessor read them."""

    def __init__(self, build_dir, pub):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="vwr", dir="/tmp"))
        self.proc = subprocess.Popen(
            [str(pathlib.Path(build_dir) / "tests" / "view_record"), "-i", pub.instance, "-r",
             str(pub.run_dir), "-o", str(self.dir), "-k", "400"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready", self.proc.stderr.read()

    def picture(self, kind, volume_id, timeout=10.0):
        """(pixels [rows][cols], {'slab', 'position', 'angles'}) of that volume's picture."""
        path = self.dir / f"{kind}-{volume_id}.pgm"
        wait_for(path.exists, timeout, f"the recorded {kind} of volume {volume_id}")
        data = path.read_bytes()
        m = re.match(rb"P5\n# slab (\d+) (\d+) position (\d+) (\d+) (\d+) angles (\S+) (\S+)\n"
                     rb"(\d+) (\d+)\n255\n", data)
        assert m, data[:120]
        cols, rows = int(m.group(8)), int(m.group(9))
        pix = np.frombuffer(data, np.uint8, rows * cols, m.end()).reshape(rows, cols)
        g = [float(x) for x in m.groups()[:7]]
        return pix, {"slab": g[0:2], "position": g[2:5], "angles": g[5:7]}

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


class Browser:
    """One chromium, any number of pages, through tests/browser/driver.js."""

    def __init__(self):
        driver = SRC / "tests" / "browser" / "driver.js"
        if not (SRC / "tests/browser/node_modules/playwright-core").exists():
            raise AssertionError("playwright-core is not installed: make browser-deps "
                                 "(npm ci in tests/browser), or make deps")
        self.proc = subprocess.Popen(["node", str(driver)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd=driver.parent)

    def cmd(self, op, check=True, **kw):
        self.proc.stdin.write(json.dumps({"op": op, **kw}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"the browser driver died during {op}")
        r = json.loads(line)
        if check and not r.get("ok"):
            raise AssertionError(f"browser {op} {kw}: {r.get('error')}")
        return r

    def open(self, url, **kw):
        return self.cmd("open", url=url, **kw)["page"]

    def eval(self, page, expr):
        return self.cmd("eval", page=page, expr=expr).get("value")

    def wait(self, page, expr, timeout_ms=20000):
        return self.cmd("wait", page=page, expr=expr, timeout_ms=timeout_ms)

    def close(self):
        try:
            self.cmd("quit", check=False)
        except (AssertionError, BrokenPipeError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


ALL_DRAWN = "Object.values(window.volrecView.panes).every(p => p.shown)"

# What a pane shows, as the page holds it: the decoded picture and the pixels of the canvas it
# was drawn into (red channel, at the picture's resolution, transposed for B-scan and slice).
PANE_JS = """(() => {
  const p = window.volrecView.panes[%s], h = p.shown, c = p.native;
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  const rgb = [];
  for (let i = 0; i < c.width * c.height; i++) rgb.push(d[4 * i], d[4 * i + 1], d[4 * i + 2]);
  return {kind: h.kind, volumeId: h.volumeId, rows: h.rows, cols: h.cols, session: h.session,
          position: h.position, slab: h.slab, angles: h.angles, pixels: Array.from(h.pixels),
          width: c.width, height: c.height, rgb};
})()"""


def pane(browser, page, name):
    """The pane's picture (numpy [rows][cols]) and canvas (numpy [height][width][3])."""
    v = browser.eval(page, PANE_JS % json.dumps(name))
    v["pixels"] = np.array(v["pixels"], np.uint8).reshape(v["rows"], v["cols"])
    v["canvas"] = np.array(v["rgb"], np.uint8).reshape(v["height"], v["width"], 3)
    del v["rgb"]
    return v


def viridis(v):
    """The page's viridis (the same polynomial), as u8 RGB."""
    c = np.array([[0.2777273272234177, 0.005407344544966578, 0.3340998053353061],
                  [0.1050930431085774, 1.404613529898575, 1.384590162594685],
                  [-0.3308618287255563, 0.214847559468213, 0.09509516302823659],
                  [-4.634230498983486, -5.799100973351585, -19.33244095627987],
                  [6.228269936347081, 14.17993336680509, 56.69055260068105],
                  [4.776384997670288, -13.74514537774601, -65.35303263337234],
                  [-5.435455855934631, 4.645852612178535, 26.3124352495832]])
    t = v.astype(np.float64)[..., None] / 255
    out = c[6]
    for k in range(5, -1, -1):
        out = c[k] + t * out
    return np.clip(np.round(out * 255), 0, 255).astype(np.uint8)
