# SPDX-License-Identifier: MIT
"""What the web viewer's tests and benchmark drive: the real volrecd publishing views (CPU
backend, synthetic retina), the viewer (`volrec view`), a recorder of the published pictures
through the Python client (volume.views[...]) and a real browser (Debian's chromium through
playwright-core, tests/browser/driver.js)."""
import base64
import json
import os
import pathlib
import re
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid

import numpy as np
import zmq

import volrec
from conftest import TIMEOUT_SCALE
from ctlwire import Wire, ctl_path
from daemonkit import remove_segments

SRC = pathlib.Path(__file__).resolve().parents[2]
TIMEOUT = 30.0 * TIMEOUT_SCALE


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
    """volrecd's control socket: one request at a time, each on a new connection."""

    def __init__(self, run_dir, instance):
        self.endpoint = ctl_path(run_dir, instance)

    def ask(self, req, timeout=10.0):
        try:
            with Wire(self.endpoint, timeout) as w:
                return w.request(req)
        except (socket.timeout, TimeoutError):
            raise AssertionError(f"no reply to {req} from {self.endpoint}")

    def get(self, key):
        r = self.ask({"op": "get", "key": key})
        assert r["ok"], r
        return json.loads(r["value"])


def daemon_config(instance, run_dir, geometry=(48, 48, 256), rate=10.0, render_every=1,
                  render_side=96, db_range=(55, 100), overflow="block", slots=8,
                  scan_size_um=None, axial_um_per_pixel=None):
    """volrecd on the synthetic retina scanner, as `make demo` runs it (scripts/demo.sh: 1024
    samples an A-scan, stride 3x3, the retina's depth range, the scanner's k non-linearity and
    dispersion undone), at an output geometry [Y, X, Z] (Y and X multiples of 3), on the CPU.
    db_range [55, 100] dB puts the air above the retina near black and its layers in the grey
    levels (the default [0, 100] leaves the en-face a near-uniform grey); render_every 0 is the
    daemon's own default (every 5th volume on the CPU). scan_size_um [width_x, height_y] and
    axial_um_per_pixel give the voxel size in µm (unknown without them)."""
    Y, X, Z = geometry
    if Y % 3 or X % 3 or not 0 < Z <= 416:
        raise ValueError(f"geometry {geometry}: Y and X multiples of 3, Z in 1..416")
    scan = {"samples_per_ascan": 1024, "sample_type": "u16",
            "ascans_per_bscan": X // 3, "bscans_per_volume": Y // 3,
            "stride": [3, 3], "depth_range": [96, 96 + Z]}
    if scan_size_um:  # the voxel size in µm (docs/algorithms.md §6); unknown without
        scan["scan_size_um"] = list(scan_size_um)
    if axial_um_per_pixel:
        scan["axial_um_per_pixel"] = axial_um_per_pixel
    return {
        "instance": instance,
        "backend": "cpu",
        "cpu": {"threads": 0},
        "source": {"type": "synth", "rate": rate,
                   "synth": {"seed": 1, "phantom": "retina", "motion": {"deg_per_s": 0.25},
                             "snr_db": 40}},
        "geometry": scan,
        "preprocess": {"background": {"mode": "bscan_mean"},
                       "resample": {"method": "cubic", "poly": [0, 1104.84, 0, -81.84]},
                       "dispersion": {"coeffs": [30, -12]}, "db_range": list(db_range)},
        "reconstruct": {"mode": "noncumulative"},
        "view": {"render": {"size": [render_side, render_side], "every": render_every}},
        "output": {"slots": slots},
        "pipeline": {"ring_bscans": 4 * Y // 3, "overflow": overflow},
        "ipc": {"run_dir": str(run_dir), "status_interval_ms": 1000},
        "log": {"level": "info"},
    }


class DaemonPublisher:
    """The real volrecd (CPU backend, synthetic retina, views on): started, stopped and
    started again (a new session) on one configuration; its control socket."""

    def __init__(self, build_dir, **kw):
        self.bin_dir = pathlib.Path(build_dir) / "bin"
        # short paths: AF_UNIX names are limited to 107 bytes
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="vwd", dir="/tmp"))
        self.run_dir = self.dir / "run"
        self.run_dir.mkdir()
        self.instance = "v" + uuid.uuid4().hex[:12]
        self.cfg = daemon_config(self.instance, self.run_dir, **kw)
        self.shape = tuple(kw.get("geometry", (48, 48, 256)))
        self.config_path = self.dir / "volrecd.yaml"
        self.config_path.write_text(json.dumps(self.cfg, indent=1) + "\n")  # JSON is YAML
        self.log = self.dir / "volrecd.log"
        self.proc = None
        self.control = Control(self.run_dir, self.instance)

    def start(self):
        """Start volrecd; return once it has published a volume."""
        env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
        with open(self.log, "ab") as log:  # the daemon keeps its own descriptor
            self.proc = subprocess.Popen([str(self.bin_dir / "volrecd"), "-c",
                                          str(self.config_path)],
                                         stdout=log, stderr=subprocess.STDOUT, env=env)

        def published():
            assert self.proc.poll() is None, f"volrecd exited:\n{self.log_text()[-3000:]}"
            try:
                with volrec.Client(self.instance, run_dir=str(self.run_dir)) as c:
                    with c.next_volume(2.0):
                        return True
            except (volrec.VolrecError, OSError):
                return False
        wait_for(published, what="volrecd's first volume")
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            assert self.proc.wait(timeout=TIMEOUT) == 0, self.log_text()[-3000:]

    def volrec(self, *args):
        """`volrec ARGS -i INSTANCE -r RUN_DIR`, as an operator would type it."""
        return subprocess.run([str(self.bin_dir / "volrec"), *args, "-i", self.instance, "-r",
                               str(self.run_dir)], capture_output=True, text=True,
                              timeout=TIMEOUT)

    def log_text(self):
        return self.log.read_text(errors="replace")

    def close(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        remove_segments(self.instance)
        shutil.rmtree(self.dir, ignore_errors=True)


# The control token each loopback viewer printed, by port: a RawSocket presents it unless told
# otherwise (token=None), as the page opened from the printed address does.
CONTROL_TOKENS = {}


class Viewer:
    """`volrec view` on a free loopback port (or as given)."""

    def __init__(self, bin_dir, pub, *extra, listen="127.0.0.1:0"):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="vwv", dir="/tmp"))
        self.err = self.dir / "view.err"
        self.out = self.dir / "view.out"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(
                [str(pathlib.Path(bin_dir) / "volrec"), "view", "-i", pub.instance, "-r",
                 str(pub.run_dir), "--listen", listen, *extra], stdout=out, stderr=err)
        m = wait_for(lambda: re.search(r"serving (https?)://([^ ]+):(\d+)/(\?token=[^ ]+)? ",
                                       self.out.read_text())
                     or self.proc.poll() is not None, what="the viewer's URL")
        assert self.proc.poll() is None, self.log_text()
        self.scheme, self.port = m.group(1), int(m.group(3))
        # on loopback without a token file, control needs the token printed in the address
        self.token = m.group(4)[len("?token="):] if m.group(4) else None
        self.url = f"{self.scheme}://127.0.0.1:{self.port}/{m.group(4) or ''}"
        CONTROL_TOKENS[self.port] = self.token

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
    """The pictures of every volume the daemon publishes, as the Python client reads them
    (volume.views[...], clients/python/volrec/views.py), copied inside the volume's lease and
    kept by (picture, the volume it shows) for the newest `keep` volumes. Follows restarts."""

    def __init__(self, pub, keep=400):
        self.pub, self.keep = pub, keep
        self.pictures = {}  # (kind, volume id) -> (pixels, params)
        self.sessions = set()
        self.lock = threading.Lock()
        self.running = True
        self.error = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        wait_for(lambda: self.pictures or self.error, what="the recorder's first volume")

    def _run(self):
        c = None
        while self.running:
            try:
                if c is None:
                    c = volrec.Client(self.pub.instance, run_dir=str(self.pub.run_dir),
                                      rcvhwm=10000)
                with c.next_volume(0.3) as vol:
                    got = {name: (np.array(img), {
                        "slab": list(img.slab), "position": list(img.position),
                        "angles": list(img.angles_deg), "volume_id": img.volume_id})
                        for name, img in vol.views.items()}
                    # the channels past the first (docs/protocol.md §2.8): their pictures as
                    # ANGIO_enface_mean ..., with what their values mean
                    for ch in list(vol.channels)[1:]:
                        a = vol.channels[ch]
                        for name, img in a.views.items():
                            got[f"{ch}_{name}"] = (np.array(img), {
                                "slab": list(img.slab), "position": list(img.position),
                                "volume_id": img.volume_id, "value_range": a.value_range,
                                "velocity_mm_s": a.velocity_mm_s, "units": a.units})
                    vid = vol.volume_id
                    self.sessions.add(vol.session_id)
                # the lease held to the end: the copies are the published pictures
                with self.lock:
                    for name, (pix, params) in got.items():
                        self.pictures.setdefault((name, params["volume_id"]), (pix, params))
                    for k in [k for k in self.pictures if k[1] + self.keep < vid]:
                        del self.pictures[k]
            except (volrec.Timeout, volrec.TornRead):
                continue
            except (volrec.VolrecError, OSError) as e:  # the daemon stopped: open again
                if c is not None:
                    c.close()
                    c = None
                if not isinstance(e, (volrec.NoDaemon, volrec.NotReady, BlockingIOError)):
                    self.error = e
                time.sleep(0.1)
        if c is not None:
            c.close()

    def has(self, kind, volume_id):
        with self.lock:
            return (kind, volume_id) in self.pictures

    def picture(self, kind, volume_id, timeout=10.0):
        """(pixels [rows][cols], {'slab', 'position', 'angles'}) of that volume's picture."""
        wait_for(lambda: self.has(kind, volume_id) or self.error, timeout,
                 f"the Python client's {kind} of volume {volume_id}")
        assert self.error is None, f"the recorder failed: {self.error!r}"
        with self.lock:
            return self.pictures[(kind, volume_id)]

    def close(self):
        self.running = False
        self.thread.join(timeout=10)


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


class RawSocket:
    """A WebSocket to the viewer spoken by hand (RFC 6455), for what a browser cannot send:
    invalid UTF-8, any Host, path or subprotocol. Reads text messages as a browser does: not
    UTF-8, or not JSON (NaN and Infinity included), is an AssertionError."""

    def __init__(self, port, path="/ws", protocol="volrec-view", host=None, origin=None,
                 token="printed", headers=None):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        key = base64.b64encode(os.urandom(16)).decode()
        head = {"Host": host or f"127.0.0.1:{port}", "Upgrade": "websocket",
                "Connection": "Upgrade", "Sec-WebSocket-Key": key, "Sec-WebSocket-Version": "13"}
        token = CONTROL_TOKENS.get(port) if token == "printed" else token
        if token:
            head["Cookie"] = f"volrec_token={token}"
        head.update(headers or {})
        if protocol:
            head["Sec-WebSocket-Protocol"] = protocol
        if origin:
            head["Origin"] = origin
        self.sock.sendall((f"GET {path} HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in head.items()) + "\r\n").encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            d = self.sock.recv(4096)
            if not d:
                break
            self.buf += d
        reply, _, self.buf = self.buf.partition(b"\r\n\r\n")
        self.status = int(reply.split(b" ", 2)[1]) if reply else 0

    @staticmethod
    def _frame(payload, opcode):
        if isinstance(payload, str):
            payload = payload.encode()
        n, mask = len(payload), os.urandom(4)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        else:
            head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
        return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))

    def send(self, *payloads, opcode=1):
        """Masked frames (text unless told), each payload str or bytes, in one write."""
        self.sock.sendall(b"".join(self._frame(p, opcode) for p in payloads))

    def _need(self, n, end):
        while len(self.buf) < n:
            left = end - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                raise TimeoutError
            d = self.sock.recv(65536)
            if not d:
                raise EOFError("the viewer closed the connection")
            self.buf += d

    def frame(self, timeout=TIMEOUT):
        """(opcode, payload) of the viewer's next frame."""
        end = time.monotonic() + timeout
        self._need(2, end)
        n, off = self.buf[1] & 0x7f, 2
        if n == 126:
            self._need(4, end)
            n, off = int.from_bytes(self.buf[2:4], "big"), 4
        elif n == 127:
            self._need(10, end)
            n, off = int.from_bytes(self.buf[2:10], "big"), 10
        self._need(off + n, end)
        op, payload, self.buf = self.buf[0] & 0x0f, self.buf[off:off + n], self.buf[off + n:]
        return op, payload

    def message(self, pred=lambda m: True, timeout=TIMEOUT):
        """The next text message (a dict) for which pred holds; pictures and others skipped."""
        end = time.monotonic() + timeout
        while True:
            op, payload = self.frame(max(end - time.monotonic(), 0))
            assert op != 8, f"the viewer closed the connection: {payload!r}"
            if op != 1:
                continue
            try:
                m = json.loads(payload.decode("utf-8"), parse_constant=_no_constant)
            except ValueError as e:
                raise AssertionError(f"a text message a browser cannot read ({e}): "
                                     f"{payload[:300]!r}") from None
            if pred(m):
                return m

    def reply(self, id, timeout=TIMEOUT):
        """The reply, error or pong that carries this id."""
        return self.message(lambda m: m.get("id") == id and m["type"] != "hello", timeout)

    def close(self):
        self.sock.close()


class PageCalls:
    """The page calls of Browser and BrowserPages, made through their cmd(op, check, **kw)."""

    def open(self, url, **kw):
        return self.cmd("open", url=url, **kw)["page"]

    def eval(self, page, expr):
        return self.cmd("eval", page=page, expr=expr).get("value")

    def wait(self, page, expr, timeout_ms=30000):
        return self.cmd("wait", page=page, expr=expr, timeout_ms=int(timeout_ms * TIMEOUT_SCALE))


class Browser(PageCalls):
    """One chromium, any number of pages, through tests/browser/driver.js."""

    def __init__(self, nice=0):
        """nice: the niceness chromium runs at (the benchmark's browsers "elsewhere")."""
        driver = SRC / "tests" / "browser" / "driver.js"
        if not (SRC / "tests/browser/node_modules/playwright-core").exists():
            raise AssertionError("playwright-core is not installed: make browser-deps "
                                 "(npm ci in tests/browser), or make deps")
        cmd = ["nice", "-n", str(nice), "node", str(driver)]
        if os.geteuid() == 0:
            # chromium run by root raises its own processes' priority (nice -8) above the
            # daemon's; a user's browser cannot: neither may this one
            cmd = ["setpriv", "--inh-caps=-sys_nice", "--bounding-set=-sys_nice", *cmd]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, cwd=driver.parent)

    def cmd(self, op, check=True, **kw):
        # each command has an id that its answer repeats: a test that gave up waiting (its
        # time limit) leaves an answer behind, which the next command skips
        self.seq = getattr(self, "seq", 0) + 1
        self.proc.stdin.write(json.dumps({"id": self.seq, "op": op, **kw}) + "\n")
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"the browser driver died during {op}")
            r = json.loads(line)
            if r.get("id") == self.seq:
                break
        r.pop("id")
        if check and not r.get("ok"):
            raise AssertionError(f"browser {op} {kw}: {r.get('error')}")
        return r

    def close(self):
        try:
            self.cmd("quit", check=False)
        except (AssertionError, BrokenPipeError):
            pass
        try:
            self.proc.stdin.close()  # the driver ends at the end of its input too
        except BrokenPipeError:
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class BrowserPages(PageCalls):
    """One test's use of a shared Browser: the pages it opens are closed when it ends, passed
    or failed (a page left open would go on reconnecting to a viewer that is gone), `errors`
    reports those of its own pages only, and a driver that died is replaced for the next test.
    The same calls as Browser."""

    def __init__(self, shared):
        self.shared = shared
        self.pages = []

    def cmd(self, op, check=True, **kw):
        if op == "errors" and "page" not in kw and "pages" not in kw:
            kw["pages"] = list(self.pages)
        r = self.shared.cmd(op, check=check, **kw)
        if op == "open" and r.get("ok"):
            self.pages.append(r["page"])
        return r

    def finish(self):
        """Close what the test left open and forget its pages' errors; False when the driver
        is dead (the caller starts another)."""
        if self.shared.proc.poll() is not None:
            return False
        try:
            for p in self.pages:
                self.shared.cmd("close", check=False, page=p)  # "no page N" when closed already
            self.shared.cmd("errors", check=False, pages=list(self.pages))
        except AssertionError:  # the driver died meanwhile
            return False
        return True


# every 2-D pane drew a picture; the angiography pane counts only where the daemon publishes
# angiography (without it the page shows no such pane)
ALL_DRAWN = ("Object.values(window.volrecView.panes).every(p => p.shown || "
             "(p.name === 'angio' && !window.volrecView.haveAngio))")

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
