# SPDX-License-Identifier: MIT
"""The functional channels in the web viewer, in a real browser (Debian's chromium through
playwright-core) against the real volrecd running `make demo DEMO_FUNCTIONAL=1`'s configuration
(scripts/demo.sh: the flow phantom, B-scans repeated twice, structure + angiography (cdv) +
Doppler, 96 x 96 x 256 on the CPU backend): the angiography pane shows the picture the daemon
published (the Python client's channel views of the same volume) and the phantom's vessels
brighter than its tissue (the vessels from `volrec sim --truth` of the same configuration); the
Doppler overlay on the B-scan is drawn where |v| exceeds this browser's threshold and nowhere
when the threshold is above the channel's range; the read-out under the cursor is the velocity
of the published u8 at that voxel; a threshold changed in one browser leaves the other browser
and the daemon's configuration as they were (docs/viewer.md)."""
import json
import subprocess
import threading

import numpy as np
import pytest

import volrec
from viewkit import Browser, BrowserPages, DaemonPublisher, Recorder, Viewer, pane

h5py = pytest.importorskip("h5py")

ANGIO_SHOWN = ("(v => v.haveAngio && v.panes.angio.shown && "
               "getComputedStyle(document.getElementById('pane-angio')).display !== 'none')"
               "(window.volrecView)")
OVERLAY = "window.volrecView.panes.bscan.overlay"


def flow_config(cfg):
    """The daemon configuration daemon_config made, turned into scripts/demo.sh's functional
    one (DEMO_FUNCTIONAL=1): the flow phantom at 96 x 96 x 256, repeats, times and optics."""
    cfg["source"] = {"type": "synth", "rate": 5,
                     "synth": {"seed": 1, "phantom": "flow", "snr_db": 40,
                               "flow": {"peak_mm_per_s": 1.5}}}
    cfg["geometry"].update({"ascans_per_bscan": 32, "bscans_per_volume": 32, "repeats": 2,
                            "stride": [3, 3], "depth_range": [128, 384],
                            "ascan_period_us": 5, "bscan_period_us": 400,
                            "center_wavelength_nm": 840})
    cfg["preprocess"].update({"background": {"mode": "ascan_mean"}, "db_range": [60, 100]})
    cfg["output"] = {"slots": 4, "channels": ["structure", "angio", "doppler"]}
    cfg["functional"] = {"angio": {"method": "cdv"}}
    cfg["pipeline"] = {"ring_bscans": 256, "overflow": "drop_epoch"}
    return cfg


@pytest.fixture(scope="module")
def flow(build_dir, bin_dir, tmp_path_factory):
    """volrecd on the flow phantom, a recorder of its pictures, a viewer, and the phantom's
    vessel labels [Y][X][Z] on the volume's grid."""
    made = []
    try:
        pub = DaemonPublisher(build_dir, geometry=(96, 96, 256))
        made.append(pub)
        flow_config(pub.cfg)
        pub.config_path.write_text(json.dumps(pub.cfg, indent=1) + "\n")
        # the truth of the same scanner: `volrec sim --truth` reads the same configuration
        tmp = tmp_path_factory.mktemp("flowtruth")
        r = subprocess.run([str(bin_dir / "volrec"), "sim", "-c", str(pub.config_path), "-o",
                            str(tmp / "raw.bin"), "--format", "raw", "-n", "1", "--truth",
                            str(tmp / "truth.h5")], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        with h5py.File(tmp / "truth.h5", "r") as f:
            vessel = f["vessel"][0]
        assert vessel.shape == (96, 96, 256), vessel.shape
        pub.start()
        made.append(Recorder(pub))
        made.append(Viewer(bin_dir, pub))
    except BaseException:
        for m in reversed(made):
            m.close()
        raise
    yield pub, made[1], made[2], vessel
    for m in reversed(made):
        m.close()


@pytest.fixture(scope="module")
def shared_browser():
    b = [Browser()]
    yield b
    b[0].close()


@pytest.fixture
def browser(shared_browser):
    if shared_browser[0].proc.poll() is not None:
        shared_browser[0] = Browser()
    pages = BrowserPages(shared_browser[0])
    yield pages
    if not pages.finish():
        shared_browser[0].close()
        shared_browser[0] = Browser()


def published(rec, kind, vid):
    """The Python client's picture `kind` of volume vid, or None when the recorder missed it."""
    try:
        return rec.picture(kind, vid, timeout=3.0)
    except AssertionError:
        if rec.error is not None:
            raise
        return None


def shown_and_published(browser, page, name, kind, rec):
    """A pane's picture (the page's) and the published one of the same volume."""
    for _ in range(10):
        got = pane(browser, page, name)
        want = published(rec, kind, got["volumeId"])
        if want is not None:
            return got, want
        browser.wait(page, f"window.volrecView.panes.{name}.shown.volumeId > {got['volumeId']}")
    raise AssertionError(f"the recorder has none of the {kind} pictures the page showed")


def test_the_angiography_pane_shows_the_vessels_brighter_than_tissue(browser, flow):
    pub, rec, view, vessel = flow
    page = browser.open(view.url)
    browser.wait(page, ANGIO_SHOWN, timeout_ms=60000)
    hello = browser.eval(page, "window.volrecView.hello.views")
    assert {"angio_enface_mean", "angio_enface_max", "doppler_bscan"} <= set(hello), hello
    # what the channel's values mean came with its frames: cdv, unitless 0..1
    ch = browser.eval(page, "window.volrecView.channels.angio")
    assert ch["kind"] == "angio" and ch["units"] == "1" and ch["valueRange"] == [0, 1], ch
    got, (want, params) = shown_and_published(browser, page, "angio", "angio_enface_mean", rec)
    np.testing.assert_array_equal(got["pixels"], want)
    assert got["slab"] == params["slab"]
    za, zb = got["slab"]
    # the vessels' columns over the slab (the truth's lumen anywhere in it) and the tissue's
    inside = vessel[:, :, za:zb]
    vcols = (inside == 2).any(axis=2)
    tcols = ~vcols & (inside == 1).any(axis=2)
    assert vcols.sum() > 50 and tcols.sum() > 500, (vcols.sum(), tcols.sum())
    # the pane's own pixels: its colour map (black-red-yellow) brighter where the value is
    lum = got["canvas"].astype(np.float64).sum(axis=2)
    assert got["canvas"].shape[:2] == vcols.shape
    assert lum.max() > lum.min(), "the angiography pane is blank"
    v, t = lum[vcols].mean(), lum[tcols].mean()
    assert v > 1.5 * t + 30, f"vessels {v:.1f} against tissue {t:.1f} (sum of RGB)"
    # the same in the picture's values, and the maximum picture on this browser's choice
    assert want[vcols].mean() > 1.5 * want[tcols].mean()
    browser.cmd("select", page=page, selector="#angio-kind", value="angio_enface_max")
    browser.wait(page, "(s => s && s.kind === 'angio_enface_max')"
                       "(window.volrecView.panes.angio.shown)")
    got, (want, _) = shown_and_published(browser, page, "angio", "angio_enface_max", rec)
    np.testing.assert_array_equal(got["pixels"], want)
    # every control has an accessible name, every pane a data-pane
    unnamed = browser.eval(page, "[...document.querySelectorAll('input, select, button, "
                           "canvas.view')].filter(e => !e.getAttribute('aria-label'))"
                           ".map(e => e.id || e.outerHTML)")
    assert unnamed == []
    assert browser.eval(page, "document.querySelector('canvas[data-pane=angio]') !== null")
    # at 1600 x 1000 a third column beside en-face and B-scan; on a phone stacked at full width
    browser.cmd("resize", page=page, width=1600, height=1000)
    browser.wait(page, "document.getElementById('pane-angio').getBoundingClientRect().width < 600")
    boxes = browser.eval(page, "['enface', 'bscan', 'angio'].map(n => document.getElementById("
                         "'pane-' + n).getBoundingClientRect().toJSON())")
    assert len({round(b["top"]) for b in boxes}) == 1 and boxes[2]["width"] > 300, boxes
    browser.cmd("resize", page=page, width=390, height=844)
    browser.wait(page, "document.getElementById('pane-angio').getBoundingClientRect().width "
                       ">= 0.8 * 390")
    assert browser.cmd("errors")["value"] == []


def at_picture(browser, page, name, u, v):
    """Element fractions of the point at picture fractions (u across, v down) of pane name."""
    r, w, h = browser.eval(page, f"(p => [p.rect, p.canvas.getBoundingClientRect().width, "
                           f"p.canvas.getBoundingClientRect().height])"
                           f"(window.volrecView.panes.{name})")
    return (r["x"] + u * r["w"]) / w, (r["y"] + v * r["h"]) / h


# The overlay, its Doppler B-scan and the B-scan's canvas, read at one moment: the page paints
# the canvas and sets the overlay together, and may repaint both with a newer Doppler B-scan
# between two reads.
DOPPLER_JS = """(() => {
  const v = window.volrecView, b = v.panes.bscan, o = b.overlay, c = b.native;
  const f = v.doppler.frames.find(f => f.volumeId === o.volumeId &&
                                       f.position[0] === b.shown.position[0]);
  const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data, rgb = [];
  for (let i = 0; i < c.width * c.height; i++) rgb.push(px[4 * i], px[4 * i + 1], px[4 * i + 2]);
  return {overlay: o, bscanVolume: b.shown.volumeId, rows: f.rows, cols: f.cols,
          pixels: Array.from(f.pixels), volumeId: f.volumeId, channel: f.channel,
          width: c.width, height: c.height, rgb};
})()"""


def test_doppler_overlay_threshold_and_read_out(browser, flow):
    pub, rec, view, _ = flow
    before = pub.control.ask({"op": "get"})
    assert before["ok"], before
    p1, p2 = browser.open(view.url), browser.open(view.url)
    for p in (p1, p2):
        browser.wait(p, f"{OVERLAY} && {OVERLAY}.volumeId !== null", timeout_ms=60000)
    # the channel's meaning: the phase over ±π, the velocities of λ0 / (4 n T)
    ch = browser.eval(p1, "window.volrecView.channels.doppler")
    vmax = 840 / (4 * 1.38 * 400)
    assert ch["units"] == "rad"
    assert np.allclose(ch["valueRange"], [-np.pi, np.pi])
    assert np.allclose(ch["velocityMmS"], [-vmax, vmax], rtol=1e-6), ch
    # a low threshold: the overlay covers exactly the voxels above it, in the published u8
    browser.cmd("fill", page=p1, selector="#doppler-threshold", value=0.02)
    browser.wait(p1, f"{OVERLAY}.threshold === 0.02 && {OVERLAY}.count > 0")
    d = browser.eval(p1, DOPPLER_JS)
    q = np.array(d["pixels"], np.uint8).reshape(d["rows"], d["cols"])
    want = published(rec, "doppler_bscan", d["volumeId"])
    if want is not None:
        np.testing.assert_array_equal(q, want[0])
    vel = -vmax + 2 * vmax * q.astype(np.float64) / 255
    assert d["overlay"]["count"] == int((np.abs(vel) > 0.02).sum()) > 0
    # the colours: towards the probe (v < 0) red, away (v > 0) blue, on the B-scan drawn depth down
    canvas = np.array(d["rgb"], np.uint8).reshape(d["height"], d["width"], 3)
    rgb = canvas.transpose(1, 0, 2).astype(int)  # [x][z]
    assert rgb.shape[:2] == q.shape, (rgb.shape, q.shape)
    neg, pos = (vel < -0.05), (vel > 0.05)
    assert neg.any() or pos.any()
    assert (rgb[neg][:, 0] > rgb[neg][:, 2]).all()
    assert (rgb[pos][:, 2] > rgb[pos][:, 0]).all()
    # the other browser keeps its own threshold (a tenth of the range by default)
    assert browser.eval(p2, "window.volrecView.display.doppler.threshold") is None
    t2 = browser.eval(p2, f"{OVERLAY}.threshold")
    assert abs(t2 - vmax / 10) < 1e-9, t2
    # the read-out under the cursor: the velocity of the published u8 at that voxel
    r, c = np.unravel_index(np.argmax(np.abs(q.astype(int) * 2 - 255)), q.shape)
    x, y = at_picture(browser, p1, "bscan", (r + 0.5) / d["rows"], (c + 0.5) / d["cols"])
    browser.cmd("move", page=p1, selector="canvas[data-pane=bscan]", x=x, y=y)
    browser.wait(p1, "(r => r && r.source === 'cursor')(window.volrecView.doppler.readout)")
    # the read-out and the text shown, read at one moment (a newer B-scan changes both)
    ro, text = browser.eval(p1, "[window.volrecView.doppler.readout, "
                                "document.getElementById('doppler-readout').textContent]")
    assert (ro["row"], ro["col"]) == (r, c), (ro, r, c)
    pic = published(rec, "doppler_bscan", ro["volumeId"])
    assert pic is not None, "the recorder missed the read-out's volume"
    qv, params = pic
    lo, hi = params["velocity_mm_s"]
    v_want = lo + (hi - lo) * int(qv[r, c]) / 255
    assert ro["q"] == qv[r, c]
    assert abs(ro["velocityMmS"] - v_want) < 1e-9, (ro, v_want)
    assert f"v {v_want:.4f} mm/s" in ro["text"], ro["text"]
    assert text == ro["text"]
    # a threshold above the range: no overlay at all
    tmax = float(browser.eval(p1, "document.getElementById('doppler-threshold').max"))
    assert tmax >= vmax
    browser.cmd("fill", page=p1, selector="#doppler-threshold", value=tmax)
    browser.wait(p1, f"{OVERLAY}.threshold === {tmax} && {OVERLAY}.count === 0 && "
                     f"{OVERLAY}.volumeId !== null")
    # paused, the overlay stays that of the frozen B-scan while Doppler B-scans keep coming
    browser.cmd("fill", page=p1, selector="#doppler-threshold", value=0.02)
    browser.wait(p1, f"{OVERLAY}.threshold === 0.02 && {OVERLAY}.count > 0")
    browser.cmd("click", page=p1, selector="#pause", x=0.5, y=0.5)
    browser.wait(p1, "window.volrecView.paused")
    frozen = browser.eval(p1, f"[{OVERLAY}.volumeId, {OVERLAY}.count, "
                              "window.volrecView.received.doppler_bscan.frames]")
    browser.wait(p1, f"window.volrecView.received.doppler_bscan.frames >= {frozen[2] + 3}")
    browser.cmd("fill", page=p1, selector="#doppler-threshold", value=0.021)
    browser.wait(p1, f"{OVERLAY}.threshold === 0.021")
    assert browser.eval(p1, f"{OVERLAY}.volumeId") == frozen[0]
    browser.cmd("click", page=p1, selector="#pause", x=0.5, y=0.5)
    browser.wait(p1, f"!window.volrecView.paused && {OVERLAY}.volumeId > {frozen[0]}")
    browser.cmd("fill", page=p1, selector="#doppler-threshold", value=tmax)
    browser.wait(p1, f"{OVERLAY}.threshold === {tmax} && {OVERLAY}.count === 0")
    # kept in this browser's storage, across a reload
    browser.cmd("reload", page=p1)
    browser.wait(p1, f"{OVERLAY} && {OVERLAY}.volumeId !== null && "
                     f"{OVERLAY}.threshold === {tmax}", timeout_ms=60000)
    # the other browser and the daemon did not move
    browser.wait(p2, f"{OVERLAY}.count > 0")
    assert browser.eval(p2, "window.volrecView.display.doppler.threshold") is None
    after = pub.control.ask({"op": "get"})
    assert after["ok"] and after["config"] == before["config"]
    assert browser.cmd("errors")["value"] == []


class ChannelRows:
    """B-scans [X][Z] of a channel at the rows ys of every volume the daemon publishes, as the
    Python client reads them from the channel's volume (copied inside the lease), by volume id."""

    def __init__(self, pub, channel, ys):
        self.rows, self.error, self.running = {}, None, True
        self.lock = threading.Lock()

        def run():
            try:
                with volrec.Client(pub.instance, run_dir=str(pub.run_dir), rcvhwm=1000) as c:
                    while self.running:
                        try:
                            with c.next_volume(0.3) as vol:
                                ch = vol.channels[channel]
                                got = {y: np.array(ch[y]) for y in ys}
                                vid = vol.volume_id
                        except (volrec.Timeout, volrec.TornRead):
                            continue
                        with self.lock:
                            self.rows[vid] = got
            except Exception as e:  # noqa: BLE001 (reported by get)
                self.error = e
        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def get(self, vid, y):
        with self.lock:
            r = self.rows.get(vid)
        assert self.error is None, repr(self.error)
        return None if r is None else r[y]

    def close(self):
        self.running = False
        self.thread.join(timeout=10)


def test_a_browsers_own_bscan_brings_its_own_doppler(browser, flow):
    """A browser that steps its B-scan gets the Doppler B-scan at its own y, taken from the
    Doppler channel's volume itself, and its overlay pairs it with its own structural B-scan;
    the daemon's view.position does not move."""
    pub, rec, view, _ = flow
    page = browser.open(view.url)
    browser.wait(page, f"{OVERLAY} && {OVERLAY}.volumeId !== null", timeout_ms=60000)
    before = pub.control.get("view.position")
    y0 = browser.eval(page, "window.volrecView.panes.bscan.shown.position[0]")
    y1 = y0 + 3
    rows = ChannelRows(pub, "doppler", [y1])
    try:
        for _ in range(3):
            browser.cmd("press", page=page, key="ArrowDown")
        try:
            # the daemon computes the browser's own B-scans after its volumes: on a loaded
            # machine they may take a while (a generous bound)
            browser.wait(page, f"window.volrecView.panes.bscan.shown.position[0] === {y1} && "
                               f"window.volrecView.doppler.frames.some(f => "
                               f"f.position[0] === {y1})", timeout_ms=120000)
        except AssertionError as e:
            state = browser.eval(page, "({shown: window.volrecView.panes.bscan.shown.position, "
                                       "doppler: window.volrecView.doppler.frames.map(f => "
                                       "[f.volumeId, f.position[0]])})")
            raise AssertionError(f"{e}; the page: {state}, y0 {y0}") from None
        for _ in range(20):
            d = browser.eval(page, f"(f => ({{vid: f.volumeId, rows: f.rows, cols: f.cols, "
                                   f"pixels: Array.from(f.pixels)}}))(window.volrecView.doppler"
                                   f".frames.filter(f => f.position[0] === {y1}).pop())")
            want = rows.get(d["vid"], y1)
            if want is not None:
                break
            browser.wait(page, f"window.volrecView.doppler.frames.some(f => "
                               f"f.position[0] === {y1} && f.volumeId > {d['vid']})")
        else:
            raise AssertionError("the Python client read none of the page's Doppler volumes")
        got = np.array(d["pixels"], np.uint8).reshape(d["rows"], d["cols"])
        np.testing.assert_array_equal(got, want)
        browser.wait(page, f"{OVERLAY}.volumeId !== null && window.volrecView.doppler.frames"
                           f".some(f => f.volumeId === {OVERLAY}.volumeId && "
                           f"f.position[0] === {y1})")
        assert pub.control.get("view.position") == before
    finally:
        rows.close()
    assert browser.cmd("errors")["value"] == []
