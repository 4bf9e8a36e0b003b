# SPDX-License-Identifier: MIT
"""`volrec view` in a real browser (Debian's chromium through playwright-core) against the real
volrecd (CPU backend, the synthetic retina of `make demo`, views in every slot): the page
connects and draws its 2-D panes with exactly the pictures the Python client reads from the
same volume (volume.views[...], decoded pixels compared) through this browser's own window and
colour map, renders the volume frame in 3-D with WebGL2 (SwiftShader) in every mode with a camera
of its own, draws pictures at their true aspect with a scale bar and ruler in µm, stacks its
panes on a phone, clicks and keys reach the daemon's control socket and come back in the next
pictures, a dB-range change reaches the daemon (`volrec get` shows it) and a display change
does not, a data control without the control token is refused, two browsers at once, a daemon
restart followed without a reload, TLS with tokens (401 without one) beyond loopback, and bad
requests answered with errors without harm. No test needs a controlled picture: the retina's layers, vessels and air give every pane
contrast, and a picture is checked against the daemon's own, whatever it shows.

The first test runs the demo's configuration (96 x 96 x 256, render 256 x 256 every 5th
volume, epochs dropped when processing falls behind, as `make demo` runs it) and leaves a
screenshot in $VOLREC_BUILD/view.png (VOLREC_UPDATE_SCREENSHOT=1 also writes
docs/images/view.png, the README's); the others a smaller volume (48 x 48 x 256, render 96 x 96
every volume) that two shared cores process quickly; the last opens the viewer `make demo`
starts."""
import http.client
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import time

import h5py
import numpy as np
import pytest

from conftest import BUILD, SRC, TIMEOUT_SCALE
import volrec
from viewkit import (ALL_DRAWN, TIMEOUT, Browser, BrowserPages, DaemonPublisher, RawSocket,
                     Recorder, Viewer, pane, viridis, wait_for)

PANES = {"enface": "enface_mean", "bscan": "bscan", "slice": "slice"}
# the page's own window [lo, hi] of 0..255 as the canvas must show it (colormap.js: the grey
# level rounded half up)
FULL_WINDOW = "window.volrecView.panes.bscan.paintedWith === 'gray:0:255'"


def full_window(browser, page):
    """This browser's display window set to the whole range 0..255 through its sliders: the
    canvas then holds the picture's values as grey levels."""
    browser.cmd("fill", page=page, selector="#win-hi", value=255)
    browser.cmd("fill", page=page, selector="#win-lo", value=0)
    browser.wait(page, "(w => w && w[0] === 0 && w[1] === 255)(window.volrecView.display.window)")


def click_picture(browser, page, name, u, v):
    """A click at the fractions (u across, v down) of the picture drawn in pane `name` (it sits
    in its pane at its own aspect, inside the axes' margins)."""
    r, w, h = browser.eval(page, f"(p => [p.rect, p.canvas.getBoundingClientRect().width, "
                           f"p.canvas.getBoundingClientRect().height])(window.volrecView.panes.{name})")
    browser.cmd("click", page=page, selector=f"canvas[data-pane={name}]",
                x=(r["x"] + u * r["w"]) / w, y=(r["y"] + v * r["h"]) / h)


def windowed(v, lo, hi):
    return np.floor(np.clip((v.astype(np.float64) - lo) / (hi - lo), 0, 1) * 255 + 0.5).astype(np.uint8)


@pytest.fixture(scope="module")
def shared_browser():
    """One chromium for the module (starting one takes seconds); see `browser`."""
    b = [Browser()]
    yield b
    b[0].close()


@pytest.fixture
def browser(shared_browser):
    """The shared chromium as one test sees it: every page the test opened is closed when it
    ends, whether it passed or not, so a failure (or a viewer gone from under a page) never
    reaches the next test; a driver that died is replaced."""
    if shared_browser[0].proc.poll() is not None:
        shared_browser[0] = Browser()
    pages = BrowserPages(shared_browser[0])
    yield pages
    if not pages.finish():
        shared_browser[0].close()
        shared_browser[0] = Browser()


def start_live(build_dir, bin_dir, **cfg):
    """volrecd, a recorder of its pictures (the Python client) and a viewer on loopback."""
    made = []
    try:
        pub = DaemonPublisher(build_dir, **cfg)
        made.append(pub)
        pub.start()
        made.append(Recorder(pub))
        made.append(Viewer(bin_dir, pub))
    except BaseException:
        for m in reversed(made):
            m.close()
        raise
    return made


@pytest.fixture
def live(build_dir, bin_dir):
    made = start_live(build_dir, bin_dir)
    yield made
    for m in reversed(made):
        m.close()


@pytest.fixture
def demo_live(build_dir, bin_dir):
    made = start_live(build_dir, bin_dir, geometry=(96, 96, 256), render_side=256,
                      render_every=0, overflow="drop_epoch")
    yield made
    for m in reversed(made):
        m.close()


def shown_and_published(browser, page, name, rec):
    """What a pane shows and the Python client's picture of the same volume: (got, want,
    params). Should the recorder have missed that volume (a loaded machine), the pane's next
    picture is taken instead."""
    for _ in range(10):
        got = pane(browser, page, name)
        try:
            want, params = rec.picture(got["kind"], got["volumeId"], timeout=3.0)
            break
        except AssertionError:
            if rec.error is not None:
                raise
            vid = got["volumeId"]
            browser.wait(page, f"window.volrecView.panes.{name}.shown.volumeId > {vid}")
    else:
        raise AssertionError(f"the recorder has none of the {name} pictures the page showed")
    assert got["pixels"].shape == want.shape, (got["kind"], got["pixels"].shape, want.shape)
    np.testing.assert_array_equal(got["pixels"], want,
                                  err_msg=f"{got['kind']} of volume {got['volumeId']} decoded")
    return got, want, params


def canvas_red(got, transpose):
    return got["canvas"][:, :, 0].T if transpose else got["canvas"][:, :, 0]


def test_page_draws_its_panes_with_the_published_pictures(browser, demo_live):
    pub, rec, view = demo_live
    page = browser.open(view.url)
    browser.wait(page, ALL_DRAWN)
    # the first window is this browser's, from the first pictures' percentiles: not all 0..255
    auto = browser.eval(page, "window.volrecView.autoWindow")
    assert auto and 0 <= auto[0] < auto[1] <= 255 and auto != [0, 255], auto
    full_window(browser, page)
    browser.wait(page, FULL_WINDOW)
    Y, X, Z = pub.shape
    for name, kind in PANES.items():
        browser.wait(page, f"window.volrecView.panes.{name}.paintedWith === 'gray:0:255'")
        got, want, params = shown_and_published(browser, page, name, rec)
        assert got["kind"] == kind
        assert want.shape == {"enface": (Y, X), "bscan": (X, Z), "slice": (Y, Z)}[name]
        # the canvas holds the picture: grey levels equal the values (B-scan/slice: depth down)
        drawn = canvas_red(got, name in ("bscan", "slice"))
        np.testing.assert_array_equal(drawn, want, err_msg=f"{name} canvas")
        assert np.ptp(want) > 25, f"{name}: a retina picture has contrast, got {np.ptp(want)}"
        assert list(got["position"]) == params["position"] == [Y // 2, X // 2, Z // 2]
    # a window of this browser maps the same values: [50, 150] -> 0..255
    browser.cmd("fill", page=page, selector="#win-lo", value=50)
    browser.cmd("fill", page=page, selector="#win-hi", value=150)
    browser.wait(page, "window.volrecView.panes.bscan.paintedWith === 'gray:50:150'")
    got, want, _ = shown_and_published(browser, page, "bscan", rec)
    np.testing.assert_array_equal(canvas_red(got, True), windowed(want, 50, 150))
    # the perceptual colormap is applied to the same values
    full_window(browser, page)
    browser.cmd("select", page=page, selector="#colormap", value="viridis")
    browser.wait(page, "window.volrecView.panes.bscan.paintedWith === 'viridis:0:255'")
    got, want, _ = shown_and_published(browser, page, "bscan", rec)
    rgb = got["canvas"].transpose(1, 0, 2)
    assert np.abs(rgb.astype(int) - viridis(want).astype(int)).max() <= 1
    # the screenshot as an operator would look at it: grey, the automatic window, the 3-D pane
    browser.cmd("select", page=page, selector="#colormap", value="gray")
    browser.cmd("click", page=page, selector="#win-auto", x=0.5, y=0.5)
    browser.wait(page, "window.volrecView.display.window === null")
    if "volume" in browser.eval(page, "window.volrecView.hello.views"):
        browser.wait(page, "window.volrecView.volume3d.shown && window.volrecView.volume3d.draws > 0")
    browser.eval(page, "new Promise(r => setTimeout(r, 3000))")  # a little history in the plots
    browser.wait(page, ALL_DRAWN)
    shot = BUILD / "view.png"
    browser.cmd("screenshot", page=page, path=str(shot))
    if os.environ.get("VOLREC_UPDATE_SCREENSHOT") == "1":
        (SRC / "docs" / "images").mkdir(exist_ok=True)
        shutil.copy(shot, SRC / "docs" / "images" / "view.png")
    assert browser.cmd("errors")["value"] == []
    browser.cmd("close", page=page)


def test_clicking_the_enface_moves_this_browsers_bscan(browser, live):
    """A click on the en-face moves this browser's crosshair: its next B-scan and slice are at
    the new y and x (the viewer takes them from the volume), the daemon's view.position stays."""
    pub, rec, view = live
    page = browser.open(view.url)
    browser.wait(page, ALL_DRAWN)
    before = pub.control.get("view.position")
    Y, X = browser.eval(page, "window.volrecView.shape.slice(0, 2)")
    z0 = browser.eval(page, "window.volrecView.position[2]")
    y, x = int(0.75 * Y), int(0.2 * X)
    click_picture(browser, page, "enface", (x + 0.5) / X, (y + 0.5) / Y)
    browser.wait(page, f"window.volrecView.panes.bscan.shown.position[0] === {y} && "
                 f"window.volrecView.panes.slice.shown.position[1] === {x}")
    assert browser.eval(page, "window.volrecView.own.position") == [y, x, z0]
    assert pub.control.get("view.position") == before
    assert browser.cmd("errors")["value"] == []
    browser.cmd("close", page=page)


def volrec_get(pub, key):
    r = pub.volrec("get", key)
    assert r.returncode == 0, r
    return r.stdout.strip()


def test_db_range_reaches_the_daemon_and_the_slab_is_this_browsers(browser, live):
    pub, rec, view = live
    page = browser.open(view.url)
    browser.wait(page, ALL_DRAWN)
    browser.wait(page, "window.volrecView.replies.length >= 1")  # the initial get
    assert volrec_get(pub, "preprocess.db_range") == "[55, 100]"
    before, _, _ = shown_and_published(browser, page, "bscan", rec)
    browser.cmd("fill", page=page, selector="#db-lo", value=15)
    wait_for(lambda: volrec_get(pub, "preprocess.db_range") == "[15, 100]", what="db_range set")
    browser.cmd("fill", page=page, selector="#db-hi", value=80)
    wait_for(lambda: volrec_get(pub, "preprocess.db_range") == "[15, 80]", what="db_range set")
    # volumes processed after the set map 15..80 dB to 0..255: the air above the retina (near
    # black at 55..100 dB) turns grey in the next pictures, as the daemon computed them
    vid = browser.eval(page, "window.volrecView.panes.bscan.shown.volumeId")
    browser.wait(page, f"window.volrecView.panes.bscan.shown.volumeId > {vid + 2}")
    after, _, _ = shown_and_published(browser, page, "bscan", rec)
    assert np.median(after["pixels"]) > np.median(before["pixels"]) + 30, (
        np.median(before["pixels"]), np.median(after["pixels"]))
    # the slab is this browser's own: its en-face comes over it, the daemon's stays
    slab = pub.control.get("view.slab")
    browser.cmd("fill", page=page, selector="#slab-a", value=10)
    browser.wait(page, "window.volrecView.panes.enface.shown.slab[0] === 10")
    assert browser.eval(page, "window.volrecView.own.slab")[0] == 10
    assert pub.control.get("view.slab") == slab
    browser.cmd("close", page=page)


MODES_3D = ("mip", "dmip", "mida", "dvr", "iso", "depth")
SNAPSHOT_3D = "window.volrecView.snapshot3d(48)"


def snapshot3d(browser, page):
    """The 3-D pane as drawn, 48 x 48 RGB (numpy, float)."""
    return np.array(browser.eval(page, SNAPSHOT_3D), np.float64).reshape(48, 48, 3)


def volume_shown(browser, page):
    """Wait for a real volume frame (the daemon's reduced volume, docs/viewer.md) drawn in 3-D."""
    assert "volume" in browser.eval(page, "window.volrecView.hello.views"), "no volume frames"
    browser.wait(page, "(v => v.shown && !v.shown.injected && v.lastDrawn && "
                 "v.lastDrawn.volumeSeq === v.shown.seq)(window.volrecView.volume3d)")
    return browser.eval(page, "(s => [s.rows, s.cols, s.planes, s.volumeId])"
                        "(window.volrecView.volume3d.shown)")


def test_3d_modes_draw_distinct_pictures_and_each_browser_keeps_its_camera(browser, live):
    """The volume frame ray-marched in the browser (WebGL2, here SwiftShader): every mode draws a
    picture that is not blank and differs from the others; dragging one browser's 3-D pane turns
    its camera only (the other browser's and the daemon's render angles stay), and the camera
    survives a reload of that browser's page (local storage)."""
    pub, rec, view = live
    a, b = browser.open(view.url), browser.open(view.url)
    for p in (a, b):
        browser.wait(p, ALL_DRAWN)
        Yr, Xr, Zr, _ = volume_shown(browser, p)
    assert 0 < Yr <= 128 and 0 < Xr <= 128 and 0 < Zr <= 128
    browser.cmd("click", page=a, selector="#pause", x=0.5, y=0.5)  # one volume for every mode
    browser.wait(a, "window.volrecView.paused")
    pictures = {}
    for mode in MODES_3D:
        n = browser.eval(a, "window.volrecView.volume3d.draws")
        browser.cmd("select", page=a, selector="#mode3d", value=mode)
        browser.wait(a, f"window.volrecView.volume3d.lastDrawn.mode === '{mode}' && "
                     f"window.volrecView.volume3d.draws > {n}")
        pic = snapshot3d(browser, a)
        lit = (pic.max(axis=2) > 24).mean()
        assert lit > 0.05 and pic.std() > 8, (mode, lit, pic.std())
        pictures[mode] = pic
    for i, m in enumerate(MODES_3D):
        for n in MODES_3D[i + 1:]:
            # where either draws the volume (the background is black in both)
            lit = (pictures[m].max(axis=2) > 24) | (pictures[n].max(axis=2) > 24)
            diff = np.abs(pictures[m] - pictures[n])[lit].mean()
            print(f"3-D modes {m} and {n}: mean difference {diff:.1f} where lit")
            assert diff > 6, f"{m} and {n} draw the same picture (mean difference {diff:.2f})"
    # the depth-coloured MIP is in colour, the MIP in grey
    assert np.abs(pictures["depth"][:, :, 0] - pictures["depth"][:, :, 2]).mean() > 5
    assert np.abs(pictures["mip"][:, :, 0] - pictures["mip"][:, :, 2]).mean() < 1
    browser.cmd("click", page=a, selector="#pause", x=0.5, y=0.5)
    # a's camera turns; b's and the daemon's do not
    default = browser.eval(b, "window.volrecView.display.camera")
    before = browser.eval(a, "window.volrecView.display.camera")
    angles = pub.control.get("view.render.angles_deg")
    browser.cmd("drag", page=a, selector="canvas[data-pane=volume3d]", **{"from": [0.5, 0.5]},
                to=[0.8, 0.3])
    browser.cmd("wheel", page=a, selector="canvas[data-pane=volume3d]", dy=-300)
    cam = browser.eval(a, "window.volrecView.display.camera")
    assert cam["az"] != before["az"] and cam["el"] != before["el"] and cam["zoom"] > 1, cam
    browser.wait(a, "(d => d.camera.az === window.volrecView.display.camera.az)"
                 "(window.volrecView.volume3d.lastDrawn)")
    assert browser.eval(b, "window.volrecView.display.camera") == default
    assert pub.control.get("view.render.angles_deg") == angles
    # the camera is a's own, kept across a reload of a's page
    browser.cmd("reload", page=a)
    browser.wait(a, "window.volrecView.hello")
    assert browser.eval(a, "window.volrecView.display.camera") == cam
    browser.cmd("click", page=a, selector="#reset-camera", x=0.5, y=0.5)
    assert browser.eval(a, "window.volrecView.display.camera") == default
    assert browser.cmd("errors")["value"] == []
    for p in (a, b):
        browser.cmd("close", page=p)


def test_a_display_change_leaves_the_daemon_and_the_other_browser_alone(browser, live):
    """Window, colour map, smoothing and layout are one browser's: changed there they repaint
    its pictures at once (paused: no new picture needed), touch neither the daemon's
    configuration nor another browser, and survive a reload of that page."""
    pub, rec, view = live
    a, b = browser.open(view.url), browser.open(view.url)
    for p in (a, b):
        browser.wait(p, ALL_DRAWN)
    keys = ("preprocess.db_range", "view.position", "view.slab", "view.render.angles_deg")
    config = {k: pub.control.get(k) for k in keys}
    b_display = browser.eval(b, "window.volrecView.display")
    browser.cmd("click", page=a, selector="#pause", x=0.5, y=0.5)
    browser.wait(a, "window.volrecView.paused")
    shown = browser.eval(a, "window.volrecView.panes.bscan.shown.volumeId")
    browser.cmd("select", page=a, selector="#colormap", value="hot")
    browser.cmd("fill", page=a, selector="#win-hi", value=180)
    browser.cmd("fill", page=a, selector="#win-lo", value=40)
    browser.wait(a, "window.volrecView.panes.bscan.paintedWith === 'hot:40:180'")
    # the same picture, repainted: the daemon sent nothing for it
    assert browser.eval(a, "window.volrecView.panes.bscan.shown.volumeId") == shown
    got = pane(browser, a, "bscan")
    v = got["pixels"].T  # as drawn: depth down
    t = np.clip((v.astype(np.float64) - 40) / 140, 0, 1)
    want_r = np.floor(np.clip(3 * t, 0, 1) * 255 + 0.5)
    np.testing.assert_array_equal(got["canvas"][:, :, 0], want_r)
    browser.cmd("click", page=a, selector="#smooth", x=0.5, y=0.5)
    browser.cmd("select", page=a, selector="#layout", value="bscan-enface")
    browser.wait(a, "document.getElementById('pane-slice').hidden")
    # the daemon's configuration and the other browser are as they were
    assert {k: pub.control.get(k) for k in keys} == config
    assert browser.eval(b, "window.volrecView.display") == b_display
    browser.wait(b, "window.volrecView.panes.bscan.paintedWith.startsWith('gray:')")
    assert browser.eval(b, "document.getElementById('pane-slice').hidden") is False
    # paused, a kept its picture while b went on; resumed, a shows the newest
    vid = browser.eval(b, "window.volrecView.panes.bscan.shown.volumeId")
    browser.wait(b, f"window.volrecView.panes.bscan.shown.volumeId > {vid}")
    assert browser.eval(a, "window.volrecView.panes.bscan.shown.volumeId") == shown
    browser.cmd("click", page=a, selector="#pause", x=0.5, y=0.5)
    browser.wait(a, f"window.volrecView.panes.bscan.shown.volumeId > {shown}")
    # a reload keeps a's display
    browser.cmd("reload", page=a)
    browser.wait(a, "window.volrecView.panes.bscan.shown")
    d = browser.eval(a, "window.volrecView.display")
    assert (d["colormap"], d["window"], d["smooth"], d["layout"]) == ("hot", [40, 180], True,
                                                                    "bscan-enface"), d
    assert browser.cmd("errors")["value"] == []
    for p in (a, b):
        browser.cmd("close", page=p)


@pytest.fixture
def measured(build_dir, bin_dir):
    """volrecd whose voxel size is known: a 3 mm x 1.5 mm field of view over 48 x 48 A-scans
    (62.5 x 31.25 µm) and 4 µm per depth bin."""
    made = start_live(build_dir, bin_dir, scan_size_um=(3000, 1500), axial_um_per_pixel=4.0)
    yield made
    for m in reversed(made):
        m.close()


PANE_BOX = """(n => {{
  const p = window.volrecView.panes[n], el = p.scalebarEl.getBoundingClientRect();
  return {{rect: p.rect, axes: {{unit: p.axes.unit}}, bar: {{width: el.width,
          label: p.scalebarEl.textContent, length: +p.scalebarEl.dataset.length}},
          ruler: p.ruler && {{length: p.ruler.length, label: p.ruler.label}}}};
}})('{}')"""


def length_um(label):
    m = re.fullmatch(r"([\d.]+) (µm|mm)", label)
    assert m, label
    return float(m.group(1)) * (1000 if m.group(2) == "mm" else 1)


def check_aspect_and_bar(browser, page, name, want):
    """The pane name is drawn in µm at the aspect want (within 2 %), and its scale bar's width
    on the screen times µm per CSS pixel is its label; the bar."""
    box = browser.eval(page, PANE_BOX.format(name))
    assert box["axes"]["unit"] == "µm", box
    aspect = box["rect"]["w"] / box["rect"]["h"]
    assert abs(aspect / want - 1) < 0.02, (name, aspect, want)
    um_per_px = box["rect"]["physW"] / box["rect"]["w"]
    bar = box["bar"]
    assert abs(bar["width"] * um_per_px - length_um(bar["label"])) <= um_per_px, (name, bar)
    return bar


def test_pictures_are_drawn_at_their_true_aspect_with_a_scale_bar_and_ruler(browser, measured):
    """With the voxel size known, the en-face is drawn at the scan's aspect (3 mm x 1.5 mm: 2:1)
    within 2 %, the B-scan at 3 mm across 256 x 4 µm deep; each scale bar is as long as its
    label says; a ruler dragged across the en-face reads the distance in µm; the crosshair is
    given in µm."""
    pub, rec, view = measured
    page = browser.open(view.url, width=1600, height=1000)
    browser.wait(page, ALL_DRAWN)
    Y, X, Z = pub.shape
    for name, want in (("enface", 3000 / 1500), ("bscan", 3000 / (Z * 4.0)),
                       ("slice", 1500 / (Z * 4.0))):
        bar = check_aspect_and_bar(browser, page, name, want)
        assert length_um(bar["label"]) == bar["length"]
    # a ruler from a quarter to three quarters of the en-face's width: 1.5 mm
    browser.cmd("drag", page=page, selector="canvas[data-pane=enface]", **{"from": [0.3, 0.5]},
                to=[0.7, 0.5])
    box = browser.eval(page, PANE_BOX.format("enface"))
    canvas_w = browser.eval(page, "window.volrecView.panes.enface.canvas.getBoundingClientRect().width")
    want = 0.4 * canvas_w * box["rect"]["physW"] / box["rect"]["w"]
    assert box["ruler"] and abs(box["ruler"]["length"] - want) < 2 * 3000 / box["rect"]["w"], box
    assert abs(length_um(box["ruler"]["label"]) - box["ruler"]["length"]) <= 0.01 * want
    # the crosshair in µm (y 24 x 31.25 µm = 750 µm, x 24 x 62.5 µm = 1.5 mm, z 128 x 4 µm)
    browser.wait(page, "document.getElementById('s-cross').textContent === "
                 "'y 750 µm · x 1.5 mm · z 512 µm'")
    assert browser.cmd("errors")["value"] == []
    browser.cmd("close", page=page)


def test_phone_and_desktop_layouts(browser, live):
    """At 390 x 844 (a phone, portrait) the panes are stacked, each at least 80 % of the
    viewport's width, and nothing is wider than the screen; at 1600 x 1000 four panes share
    two rows of two; the one-pane layout gives one pane all the room."""
    pub, rec, view = live
    page = browser.open(view.url, width=390, height=844)
    browser.wait(page, ALL_DRAWN)
    boxes = browser.eval(page, "['enface', 'bscan', 'slice', 'volume3d'].map(n => "
                         "document.querySelector(`[data-pane=${n}]`).closest('.pane')"
                         ".getBoundingClientRect().toJSON())")
    for b in boxes:
        assert b["width"] >= 0.8 * 390, boxes
        assert b["height"] >= 200, boxes
    for upper, lower in zip(boxes, boxes[1:]):
        assert lower["top"] >= upper["bottom"] - 1, boxes
    assert browser.eval(page, "document.documentElement.scrollWidth") <= 390
    for name in PANES:  # every picture is drawn inside its pane, as large as its aspect allows
        r = browser.eval(page, f"window.volrecView.panes.{name}.rect")
        assert r["x"] >= 0 and r["x"] + r["w"] <= 390 and max(r["w"], r["h"]) > 250, (name, r)
    browser.cmd("resize", page=page, width=1600, height=1000)
    browser.wait(page, "document.querySelector('#pane-enface').getBoundingClientRect().width < 800")
    boxes = browser.eval(page, "['enface', 'bscan', 'slice', 'volume3d'].map(n => "
                         "document.getElementById('pane-' + n).getBoundingClientRect().toJSON())")
    assert {round(b["top"]) for b in boxes[:2]} == {round(boxes[0]["top"])}
    assert boxes[2]["top"] >= boxes[0]["bottom"] - 1
    assert all(300 < b["width"] < 800 and b["height"] > 300 for b in boxes), boxes
    browser.cmd("select", page=page, selector="#layout", value="one-bscan")
    browser.wait(page, "document.getElementById('pane-enface').hidden")
    big = browser.eval(page, "document.getElementById('pane-bscan').getBoundingClientRect().toJSON()")
    assert big["width"] > 1100 and big["height"] > 800, big
    # every control says what it does; every pane says what it shows
    unnamed = browser.eval(page, "[...document.querySelectorAll('input, select, button, canvas')]"
                           ".filter(e => !e.getAttribute('aria-label') && e.closest('body') && "
                           "!e.closest('.uplot') && !e.closest('[aria-hidden=true]'))"
                           ".map(e => e.outerHTML.slice(0, 80))")
    assert unnamed == []
    panes = browser.eval(page, "[...document.querySelectorAll('.pane')].map(p => "
                         "p.querySelector('[data-pane]') && p.querySelector('[data-pane]').dataset.pane)")
    # (the angiography pane is there, hidden, until a daemon publishes angiography)
    assert panes == ["enface", "bscan", "angio", "slice", "volume3d"]
    assert browser.cmd("errors")["value"] == []
    browser.cmd("close", page=page)


def test_keys_and_wheel_step_the_bscan(browser, live):
    """Down and up arrows step this browser's B-scan (its crosshair's y) by one, the wheel over
    the B-scan too, the wheel over the slice its x: each next picture is the one asked for, and
    the daemon's view.position never moves."""
    pub, rec, view = live
    page = browser.open(view.url)
    browser.wait(page, ALL_DRAWN)
    before = pub.control.get("view.position")
    y0, x0, z0 = browser.eval(page, "window.volrecView.panes.bscan.shown.position")
    browser.cmd("press", page=page, key="ArrowDown")
    browser.cmd("press", page=page, key="ArrowDown")
    browser.wait(page, f"window.volrecView.panes.bscan.shown.position[0] === {y0 + 2}")
    browser.cmd("press", page=page, key="ArrowUp")
    browser.wait(page, f"window.volrecView.panes.bscan.shown.position[0] === {y0 + 1}")
    browser.cmd("wheel", page=page, selector="canvas[data-pane=bscan]", dy=-100)
    browser.wait(page, f"window.volrecView.panes.bscan.shown.position[0] === {y0}")
    # the slice pane's wheel steps x
    browser.cmd("wheel", page=page, selector="canvas[data-pane=slice]", dy=100)
    browser.wait(page, f"window.volrecView.panes.slice.shown.position[1] === {x0 + 1}")
    assert browser.eval(page, "window.volrecView.own.position") == [y0, x0 + 1, z0]
    assert pub.control.get("view.position") == before
    # a daemon without functional channels: the page as before, no angiography pane, no
    # Doppler controls or read-out, and no channel picture came
    hidden = browser.eval(page, "['pane-angio', 'functional', 'doppler-readout'].map(id => "
                          "getComputedStyle(document.getElementById(id)).display === 'none')")
    assert hidden == [True, True, True]
    got = browser.eval(page, "Object.keys(window.volrecView.received)")
    assert not [k for k in got if k.startswith(("angio_", "doppler_"))], got
    assert browser.eval(page, "window.volrecView.panes.bscan.overlay.count") == 0
    assert browser.cmd("errors")["value"] == []
    browser.cmd("close", page=page)


def test_an_answer_no_one_waited_for_is_skipped(browser, live):
    """A test stopped by its time limit while it waited for the driver leaves that answer
    unread; the next command gets its own answer, not the one left behind."""
    _, _, view = live
    page = browser.open(view.url)
    shared = browser.shared
    shared.seq += 1
    shared.proc.stdin.write(json.dumps({"id": shared.seq, "op": "eval", "page": page,
                                        "expr": "'left behind'"}) + "\n")
    shared.proc.stdin.flush()
    assert browser.eval(page, "'answered'") == "answered"
    assert browser.eval(page, "6 * 7") == 42


def test_a_data_control_without_the_token_is_refused_with_a_message(browser, live):
    """A page opened without the control token may watch: its data panel says so, and a data
    control used anyway is refused by the viewer with a message in the panel (red), the daemon
    untouched; so is the record button."""
    pub, rec, view = live
    page = browser.open(f"http://127.0.0.1:{view.port}/")
    browser.wait(page, ALL_DRAWN)
    assert browser.eval(page, "window.volrecView.control") is False
    assert "only view" in browser.eval(page, "document.getElementById('data-access').textContent")
    browser.cmd("fill", page=page, selector="#db-lo", value=15)
    browser.wait(page, "/only view|token/.test(document.getElementById('data-message').textContent)")
    assert browser.eval(page, "document.getElementById('data-message').className") == "error"
    browser.cmd("fill", page=page, selector="#rec-name", value="x")
    browser.eval(page, "document.getElementById('data-message').textContent = ''")
    browser.cmd("click", page=page, selector="#rec-start", x=0.5, y=0.5)
    browser.wait(page, "/token/.test(document.getElementById('data-message').textContent)")
    assert pub.control.get("preprocess.db_range") == [55, 100]
    browser.cmd("close", page=page)


@pytest.fixture
def recording_live(build_dir, bin_dir):
    """volrecd with a record.dir, and a viewer: (daemon, viewer)."""
    pub = DaemonPublisher(build_dir)
    made = [pub]
    try:
        pub.cfg["record"] = {"dir": str(pub.dir / "rec"), "min_free_gb": 0}
        (pub.dir / "rec").mkdir()
        pub.config_path.write_text(json.dumps(pub.cfg, indent=1) + "\n")
        pub.start()
        made.append(Viewer(bin_dir, pub))
        yield made
    finally:
        for m in reversed(made):
            m.close()


def processed_recording(pub):
    r = pub.control.ask({"op": "status"})
    assert r["ok"], r
    return r["status"]["recording"]["processed"]


def test_the_record_button_starts_and_stops_a_processed_recording_with_the_token(
        browser, recording_live):
    """The record block's kind select: processed volumes with a count end by themselves, one
    without stops with the stop button; the block shows its state, name, size and count. A page
    without the token is refused, nothing recorded."""
    pub, view = recording_live
    rec_dir = pub.dir / "rec"
    page = browser.open(f"http://127.0.0.1:{view.port}/")  # view only
    browser.wait(page, "window.volrecView.control === false")
    browser.eval(page, "document.getElementById('rec-kind').value = 'processed'")
    browser.cmd("fill", page=page, selector="#rec-name", value="nope")
    browser.cmd("click", page=page, selector="#rec-start", x=0.5, y=0.5)
    browser.wait(page, "/token/.test(document.getElementById('data-message').textContent)")
    assert not list(rec_dir.iterdir())
    browser.cmd("close", page=page)

    page = browser.open(view.url)  # with the token
    browser.wait(page, "window.volrecView.control === true")
    browser.eval(page, "document.getElementById('rec-kind').value = 'processed'")
    browser.cmd("fill", page=page, selector="#rec-name", value="btn-3")
    browser.cmd("fill", page=page, selector="#rec-count", value="3")
    browser.cmd("click", page=page, selector="#rec-start", x=0.5, y=0.5)
    browser.wait(page, "/processed recording 'btn-3' started/.test("
                       "document.getElementById('data-message').textContent)")
    browser.wait(page, "/finished \\(volumes reached\\) 'btn-3'.* 3 volumes/.test("
                       "document.getElementById('rec-state-processed').textContent)")
    with h5py.File(rec_dir / "btn-3.h5", "r") as f:
        assert f["volumes"].shape[0] == 3
    browser.cmd("fill", page=page, selector="#rec-name", value="btn-stop")
    browser.cmd("fill", page=page, selector="#rec-count", value="")
    browser.cmd("click", page=page, selector="#rec-start", x=0.5, y=0.5)
    browser.wait(page, "/recording 'btn-stop'.* [1-9][0-9]* volumes/.test("
                       "document.getElementById('rec-state-processed').textContent)")
    browser.cmd("click", page=page, selector="#rec-stop", x=0.5, y=0.5)
    browser.wait(page, "/processed recording stopped/.test("
                       "document.getElementById('data-message').textContent)")
    browser.wait(page, "/finished \\(record_stop\\) 'btn-stop'/.test("
                       "document.getElementById('rec-state-processed').textContent)")
    rec = processed_recording(pub)
    assert rec["name"] == "btn-stop" and rec["end"] == "record_stop", rec
    # the raw recording was never touched
    assert browser.eval(page, "document.getElementById('rec-state').textContent") == "idle"
    assert browser.cmd("errors")["value"] == []
    browser.cmd("close", page=page)


def test_two_browsers_step_to_their_own_bscans_without_the_token(browser, live):
    """Two view-only pages (no control token) step to different B-scans: each shows its own,
    neither moves the other's nor the daemon's view.position; "daemon's" follows it again."""
    pub, rec, view = live
    url = f"http://127.0.0.1:{view.port}/"  # without the printed token: view only
    a, b = browser.open(url), browser.open(url)
    for p in (a, b):
        browser.wait(p, ALL_DRAWN)
        assert browser.eval(p, "window.volrecView.control") is False
    before = pub.control.get("view.position")
    Y = browser.eval(a, "window.volrecView.shape[0]")
    y0 = browser.eval(a, "window.volrecView.panes.bscan.shown.position[0]")
    ya, yb = (y0 + 3) % Y, (y0 + Y - 5) % Y
    for p, y in ((a, ya), (b, yb)):
        browser.eval(p, f"window.volrecView.step(0, {y} - window.volrecView.position[0])")
    for p, y in ((a, ya), (b, yb)):
        browser.wait(p, f"window.volrecView.panes.bscan.shown.position[0] === {y}")
        vid = browser.eval(p, "window.volrecView.panes.bscan.shown.volumeId")
        # and it stays there while new volumes come
        browser.wait(p, f"window.volrecView.panes.bscan.shown.volumeId > {vid}")
        assert browser.eval(p, "window.volrecView.panes.bscan.shown.position[0]") == y
    assert pub.control.get("view.position") == before
    assert "browser 2 connected" in view.log_text()
    browser.cmd("click", page=a, selector="#view-daemon", x=0.5, y=0.5)
    browser.wait(a, f"window.volrecView.panes.bscan.shown.position[0] === {before[0]}")
    assert browser.eval(b, "window.volrecView.panes.bscan.shown.position[0]") == yb
    for p in (a, b):
        assert browser.cmd("errors")["value"] == []
        browser.cmd("close", page=p)


def test_viewer_follows_a_daemon_restart(browser, live):
    pub, rec, view = live
    page = browser.open(view.url)
    browser.wait(page, ALL_DRAWN)
    session = pane(browser, page, "bscan")["session"]
    browser.wait(page, "document.getElementById('s-vps').textContent !== '–'")
    pub.stop()
    browser.wait(page, "window.volrecView.daemon === 'stopped'")
    # the last pictures stay, marked as not live; no rates without a daemon
    text = "(id => document.getElementById(id).textContent)"
    for rate in ("s-vps", "s-aps", "s-lat", "s-drawn", "s-drops", "s-readers"):
        assert browser.eval(page, f"{text}('{rate}')") == "–", rate
    for name in PANES:
        assert "age – (volrecd stopped)" in browser.eval(page, f"{text}('foot-{name}')")
    pub.start()
    browser.wait(page, f"(s => s && s.session !== '{session}')(window.volrecView.panes.bscan.shown)"
                 " && window.volrecView.daemon === 'connected'", timeout_ms=30000)
    browser.wait(page, "window.volrecView.connected")
    # the same page, no reload: every pane shows the new session's pictures
    for name in PANES:
        browser.wait(page, f"(s => s && s.session !== '{session}')"
                     f"(window.volrecView.panes.{name}.shown)", timeout_ms=30000)
        got, _, _ = shown_and_published(browser, page, name, rec)
        assert got["session"] != session
    assert len(rec.sessions) == 2, rec.sessions
    assert browser.eval(page, "window.volrecView.errors") == []
    assert "new session" in view.log_text() or "is back" in view.log_text()
    browser.cmd("close", page=page)


def test_a_daemon_restarted_without_views_leaves_no_old_pictures(browser, live):
    """volrecd restarted with view.enabled false publishes no pictures: the open page clears
    the panes of the session before and says why, and a page opened then is not sent the
    stopped daemon's pictures as if they were live."""
    pub, rec, view = live
    page = browser.open(view.url)
    browser.wait(page, ALL_DRAWN)
    pub.stop()
    browser.wait(page, "window.volrecView.daemon === 'stopped'")
    pub.cfg["view"]["enabled"] = False
    pub.config_path.write_text(json.dumps(pub.cfg, indent=1) + "\n")
    pub.start()
    browser.wait(page, "window.volrecView.daemon === 'connected' && "
                 "Object.values(window.volrecView.panes).every(p => !p.shown)")
    # the chip's text and its title come from different state messages ("reading volrecd"
    # first): wait for both at once. The second comes with the restarted daemon's first
    # volume: over 30 s after its start under 8 busy processes on 2 cores, and once over 90 s
    # (load 16-35: three test suites and 8 busy processes on 2 cores), so 180 s here
    browser.wait(page, "(e => e.textContent === 'live, no pictures' && "
                 "e.title.includes('publishes no pictures (view.enabled: false)'))"
                 "(document.getElementById('state'))", timeout_ms=int(180000 * TIMEOUT_SCALE))
    assert browser.eval(page, "document.getElementById('foot-bscan').textContent") == "–"
    other = browser.open(view.url)
    browser.wait(other, "window.volrecView.daemon === 'connected' && "
                 "window.volrecView.received !== undefined")
    browser.eval(other, "new Promise(r => setTimeout(r, 2000))")
    assert browser.eval(other, "Object.keys(window.volrecView.received)") == []
    assert browser.eval(page, "Object.values(window.volrecView.panes).some(p => p.shown)") is False
    assert browser.cmd("errors")["value"] == []
    for p in (page, other):
        browser.cmd("close", page=p)


def test_bad_messages_get_errors_and_nothing_else_breaks(browser, live):
    pub, rec, view = live
    page = browser.open(view.url)
    browser.wait(page, ALL_DRAWN)
    send = "window.volrecView.ws.send(%s)"
    for msg in ("'not json'", "JSON.stringify({type: 'launch'})", "'x'.repeat(5000)",
                "new Uint8Array([1, 2, 3])", "JSON.stringify({type: 'subscribe', views: ['volumes']})",
                "JSON.stringify({type: 'set', values: {}})", "JSON.stringify([1, 2])"):
        browser.eval(page, send % msg)
    browser.wait(page, "window.volrecView.errors.length >= 7")
    errors = browser.eval(page, "window.volrecView.errors.map(e => e.error)")
    for part in ("not a JSON object", "unknown type 'launch'", "longer than 4096 bytes",
                 "binary messages", "unknown picture", "values: need an object", "not a JSON object"):
        assert any(part in e for e in errors), (part, errors)
    # an invalid value: the daemon's own message comes back; nothing changed
    r = browser.eval(page, "window.volrecView.set({'view.position': [9999, 0, 0]})")
    assert not r["ok"] and "view.position" in r["error"], r
    r = browser.eval(page, "window.volrecView.set({'geometry.stride': [2, 2]})")
    assert not r["ok"], r
    # still serving, to this page and to a new one
    vid = browser.eval(page, "window.volrecView.panes.bscan.shown.volumeId")
    browser.wait(page, f"window.volrecView.panes.bscan.shown.volumeId > {vid}")
    other = browser.open(view.url)
    browser.wait(other, ALL_DRAWN)
    assert view.proc.poll() is None
    log = view.log_text()
    assert "unknown type 'launch'" in log and "binary messages" in log
    for p in (page, other):
        browser.cmd("close", page=p)



def test_a_browser_s_db_range_follows_another_browsers_set(browser, live):
    """The dB range set in one browser moves the other browser's sliders (the daemon's set
    event): a change made there afterwards keeps the first browser's low end instead of sending
    the value its sliders showed at load."""
    pub, rec, view = live
    a, b = browser.open(view.url), browser.open(view.url)
    for p in (a, b):
        browser.wait(p, ALL_DRAWN)
        browser.wait(p, "window.volrecView.replies.length >= 1")  # the initial get
    browser.cmd("fill", page=a, selector="#db-lo", value=15)
    wait_for(lambda: volrec_get(pub, "preprocess.db_range") == "[15, 100]", what="db_range set")
    browser.wait(b, "document.getElementById('db-lo').value === '15' && "
                 "document.getElementById('db-text').textContent === '15–100 dB'")
    browser.cmd("fill", page=b, selector="#db-hi", value=80)
    wait_for(lambda: volrec_get(pub, "preprocess.db_range") == "[15, 80]", what="db_range set")
    browser.wait(a, "document.getElementById('db-hi').value === '80'")
    assert browser.cmd("errors")["value"] == []
    for p in (a, b):
        browser.cmd("close", page=p)


def test_db_range_beyond_the_sliders_default_span_is_kept(browser, live):
    """A daemon's dB range outside the sliders' 0..150 or between their whole steps (set from
    the file or volrec set) is shown as it is, and moving one end keeps the other exactly."""
    pub, rec, view = live
    page = browser.open(view.url)
    browser.wait(page, ALL_DRAWN)
    browser.wait(page, "window.volrecView.replies.length >= 1")  # the initial get
    r = pub.volrec("set", "preprocess.db_range=[-12.5, 180.25]")
    assert r.returncode == 0, r
    browser.wait(page, "document.getElementById('db-lo').value === '-12.5' && "
                 "document.getElementById('db-hi').value === '180.25'")
    browser.cmd("fill", page=page, selector="#db-lo", value=10)
    wait_for(lambda: volrec_get(pub, "preprocess.db_range") == "[10, 180.25]",
             what="db_range set")
    assert browser.cmd("errors")["value"] == []
    browser.cmd("close", page=page)


@pytest.fixture
def idle(build_dir, bin_dir):
    """A viewer whose daemon is not running: the page is connected and gets no pictures but
    those a test hands it (frames made in the page, as the viewer sends them)."""
    pub = DaemonPublisher(build_dir)
    try:
        view = Viewer(bin_dir, pub)
        try:
            yield view
        finally:
            view.close()
    finally:
        pub.close()


# window.frame(kind, volumeId, rows, cols, value, deflate): a picture frame (docs/viewer.md)
# of rows x cols pixels of one value, acquired 5 ms ago, handed to the page as if received.
FRAME_JS = """window.frame = async (kind, vid, rows, cols, value, deflate) => {
  let payload = new Uint8Array(rows * cols).fill(value);
  if (deflate) {
    const s = new Blob([payload]).stream().pipeThrough(new CompressionStream('deflate'));
    payload = new Uint8Array(await new Response(s).arrayBuffer());
  }
  const buf = new ArrayBuffer(128 + payload.length), d = new DataView(buf);
  const now = BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e3)) * 1000n;
  d.setUint32(0, 0x46565256, true); d.setUint16(4, 1, true); d.setUint16(6, 128, true);
  d.setUint8(8, ['enface_mean', 'enface_max', 'bscan', 'slice', 'plane', 'render'].indexOf(kind));
  d.setUint8(9, deflate ? 1 : 0); d.setUint8(10, 1); d.setUint8(11, 1);
  d.setUint32(12, rows, true); d.setUint32(16, cols, true); d.setUint32(20, payload.length, true);
  d.setBigUint64(24, BigInt(vid), true); d.setBigUint64(40, now - 5000000n, true);
  d.setBigUint64(48, now - 2000000n, true); d.setBigUint64(64, 0xabcn, true);
  [rows, rows, cols].forEach((v, i) => d.setUint32(72 + 4 * i, v, true));
  d.setUint32(88, cols, true);
  new Uint8Array(buf, 128).set(payload);
  return buf;
}"""


def test_a_picture_decoded_late_does_not_replace_a_newer_one(browser, idle):
    """The viewer deflates a picture or sends it raw by what deflate saves, so a B-scan may
    come deflated and the next raw: the raw one is ready at once, the deflated one only once
    inflated. The pane shows the newer picture, and the crosshair the newer position."""
    page = browser.open(idle.url)
    browser.wait(page, "window.volrecView.hello")
    browser.eval(page, FRAME_JS)
    browser.eval(page, """(async () => {
      const older = await window.frame('bscan', 41, 24, 64, 10, true);
      const newer = await window.frame('bscan', 42, 24, 64, 200, false);
      new DataView(newer).setUint32(92, 7, true);  // the newer one is at y0 = 7
      window.volrecView.ws.onmessage({data: older});
      window.volrecView.ws.onmessage({data: newer});
    })()""")
    browser.wait(page, "window.volrecView.received.bscan.frames === 2 && "
                 "window.volrecView.panes.bscan.shown")
    browser.eval(page, "new Promise(r => setTimeout(r, 500))")  # the older one inflated too
    got = pane(browser, page, "bscan")
    assert got["volumeId"] == 42 and (got["pixels"] == 200).all(), got["volumeId"]
    assert browser.eval(page, "window.volrecView.position[0]") == 7
    assert browser.cmd("errors")["value"] == []
    browser.cmd("close", page=page)


def test_resizing_the_window_draws_again_without_counting_pictures(browser, idle):
    """A resize draws the pictures shown at the new size; it is no new picture: neither the
    acquisition-to-drawn latency nor the pictures per second count it."""
    page = browser.open(idle.url, width=1280, height=800)
    browser.wait(page, "window.volrecView.hello")
    browser.eval(page, FRAME_JS)
    browser.eval(page, """(async () => {
      for (const [k, v] of [['enface_mean', 1], ['bscan', 2], ['slice', 3]])
        window.volrecView.ws.onmessage({data: await window.frame(k, 9, 16, 32, 50 * v, false)});
    })()""")
    browser.wait(page, ALL_DRAWN)
    browser.wait(page, "window.volrecView.latencies.length === 3")
    full_window(browser, page)
    width = browser.eval(page, "window.volrecView.panes.bscan.canvas.width")
    for w in (900, 1100, 700):
        browser.cmd("resize", page=page, width=w, height=600)
        browser.wait(page, f"window.volrecView.panes.bscan.canvas.width !== {width}")
        width = browser.eval(page, "window.volrecView.panes.bscan.canvas.width")
    browser.eval(page, "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    assert browser.eval(page, "window.volrecView.latencies.length") == 3
    got = pane(browser, page, "slice")  # still drawn, at the picture's values
    assert got["volumeId"] == 9 and (got["canvas"][:, :, 0] == 150).all()
    assert browser.eval(page, "window.volrecView.panes.slice.canvas.width") == width
    assert browser.cmd("errors")["value"] == []
    browser.cmd("close", page=page)

# window.frame2(kind, vid, rows, cols, value, rowUm, colUm, voxelUm): a frame of version 2
# (docs/viewer.md: 256-byte header, the size in µm of a sent pixel along rows and columns, the
# volume's voxel size [dy, dx, dz]) of one value, handed to the page as if received.
FRAME2_JS = """window.frame2 = (kind, vid, rows, cols, value, rowUm, colUm, voxelUm) => {
  const buf = new ArrayBuffer(256 + rows * cols), d = new DataView(buf);
  const now = BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e3)) * 1000n;
  d.setUint32(0, 0x46565256, true); d.setUint16(4, 2, true); d.setUint16(6, 256, true);
  d.setUint8(8, ['enface_mean', 'enface_max', 'bscan', 'slice', 'plane', 'render', 'volume'].indexOf(kind));
  d.setUint8(10, 1); d.setUint8(11, 1);
  d.setUint32(12, rows, true); d.setUint32(16, cols, true); d.setUint32(20, rows * cols, true);
  d.setBigUint64(24, BigInt(vid), true); d.setBigUint64(40, now - 5000000n, true);
  d.setBigUint64(48, now - 2000000n, true); d.setBigUint64(64, 0xabcn, true);
  [60, 90, 200].forEach((v, i) => d.setUint32(72 + 4 * i, v, true));
  d.setUint32(88, 200, true);
  [30, 45, 100].forEach((v, i) => d.setUint32(92 + 4 * i, v, true));
  voxelUm.forEach((v, i) => d.setFloat64(128 + 8 * i, v, true));
  d.setFloat64(152, rowUm, true); d.setFloat64(160, colUm, true);
  d.setUint32(176, 1, true); [1, 1, 1].forEach((v, i) => d.setUint32(180 + 4 * i, v, true));
  new Uint8Array(buf, 256).fill(value);
  return buf;
}"""


def test_true_aspect_and_scale_bar_of_frames_that_carry_their_size(browser, idle):
    """Frames of version 2 carry the size of their pixels: an en-face of 60 x 90 pixels of 50 x
    20 µm (3 mm down, 1.8 mm across) is drawn 1.8 : 3 within 2 %, a B-scan of 90 x 200 pixels of
    20 µm across and 3.5 µm deep at 1.8 : 0.7; each scale bar is as long as its label; the
    crosshair reads in µm. Without sizes (version 1) the same pictures are drawn in voxels."""
    page = browser.open(idle.url, width=1600, height=1000)
    browser.wait(page, "window.volrecView.hello")
    browser.eval(page, FRAME2_JS)
    browser.eval(page, """(() => {
      const um = [50, 20, 3.5];
      window.volrecView.ws.onmessage({data: window.frame2('enface_mean', 5, 60, 90, 120, 50, 20, um)});
      window.volrecView.ws.onmessage({data: window.frame2('bscan', 5, 90, 200, 120, 20, 3.5, um)});
      window.volrecView.ws.onmessage({data: window.frame2('slice', 5, 60, 200, 120, 50, 3.5, um)});
    })()""")
    browser.wait(page, ALL_DRAWN)
    for name, want in (("enface", 1800 / 3000), ("bscan", 1800 / 700), ("slice", 3000 / 700)):
        check_aspect_and_bar(browser, page, name, want)
    browser.wait(page, "document.getElementById('s-cross').textContent === "
                 "'y 1.5 mm · x 900 µm · z 350 µm'")
    assert browser.cmd("errors")["value"] == []
    browser.cmd("close", page=page)


def test_the_3d_pane_is_oriented_as_the_scan(browser, idle):
    """A volume handed to the page (its test hook, docs/viewer.md "The page"): a bright block at
    large x and small y near the surface. Seen from above (the MIP), it lies on the right and at
    the top, as on the en-face pane; clipped away (x up to 0.5), it is gone; from the side, the
    block is near the top of the picture (depth runs down)."""
    page = browser.open(idle.url, width=1000, height=1000)
    browser.wait(page, "window.volrecView.hello")
    browser.cmd("select", page=page, selector="#layout", value="one-volume3d")
    browser.eval(page, """(() => {
      const Y = 32, X = 32, Z = 32, v = new Uint8Array(Y * X * Z).fill(10);
      for (let y = 2; y < 10; y++) for (let x = 22; x < 30; x++) for (let z = 2; z < 10; z++)
        v[(y * X + x) * Z + z] = 250;
      window.volrecView.display.window = [0, 255];
      window.volrecView.injectVolume(v, [Y, X, Z], [10, 10, 10]);
    })()""")

    def look(camera, mode="mip"):
        n = browser.eval(page, "window.volrecView.volume3d.draws")
        browser.eval(page, f"(window.volrecView.display.camera = {json.dumps(camera)}, "
                     f"window.volrecView.display.mode = '{mode}', 1)")
        browser.eval(page, "window.dispatchEvent(new Event('resize'))")
        browser.wait(page, f"window.volrecView.volume3d.draws > {n}")
        pic = snapshot3d(browser, page).mean(axis=2)
        ys, xs = np.nonzero(pic > 128)
        return pic, (ys.mean() / 48 if len(ys) else None), (xs.mean() / 48 if len(xs) else None)

    _, v, u = look({"az": 0, "el": 89, "zoom": 1})
    assert u is not None and u > 0.6 and v < 0.4, (u, v)  # right and top, as on the en-face
    browser.eval(page, "window.volrecView.display.clip = [[0, 0.5], [0, 1], [0, 1]]")
    pic, _, _ = look({"az": 0, "el": 89, "zoom": 1})
    assert (pic > 128).sum() == 0, "the block is clipped away"
    browser.eval(page, "window.volrecView.display.clip = [[0, 1], [0, 1], [0, 1]]")
    _, v, u = look({"az": 0, "el": 0, "zoom": 1})  # from the front: x across, depth down
    assert u is not None and u > 0.6 and v < 0.45, (u, v)
    assert browser.cmd("errors")["value"] == []
    browser.cmd("close", page=page)


def test_a_warning_says_while_the_pipeline_drops_data_and_why(browser, idle):
    """Status messages whose drops grow raise a warning naming the causes and the share of the
    data lost; it goes once drops stop; confirmations of what went well are quiet (not red)."""
    page = browser.open(idle.url)
    browser.wait(page, "window.volrecView.hello")
    status = ("(d, acq) => window.volrecView.ws.onmessage({data: JSON.stringify({type: 'status', "
              "status: {rates: {volumes_per_s: 10}, readers: 1, bscans: {acquired: acq}, "
              "drops: Object.assign({total: Object.values(d).reduce((a, b) => a + b, 0)}, d)}})})")
    browser.eval(page, f"({status})({{ring_full: 0, incomplete_epoch: 0}}, 1000)")
    assert browser.eval(page, "document.getElementById('warning').hidden") is True
    browser.eval(page, f"({status})({{ring_full: 150, incomplete_epoch: 50}}, 1800)")
    browser.wait(page, "!document.getElementById('warning').hidden")
    text = browser.eval(page, "document.getElementById('warning').textContent")
    assert "ring full 150" in text and "incomplete epoch 50" in text and "25 %" in text, text
    # the warning stays a few seconds after the last drop, then goes
    browser.eval(page, f"({status})({{ring_full: 150, incomplete_epoch: 50}}, 2800)")
    browser.eval(page, "new Promise(r => setTimeout(r, 5200))")
    browser.eval(page, f"({status})({{ring_full: 150, incomplete_epoch: 50}}, 3800)")
    browser.wait(page, "document.getElementById('warning').hidden")
    # an event that reports success is quiet
    browser.eval(page, "window.volrecView.ws.onmessage({data: JSON.stringify({type: 'event', "
                 "event: {event: 'set', message: 'set view.slab by uid 1'}})})")
    assert browser.eval(page, "document.getElementById('message').className") == "info"
    assert browser.cmd("errors")["value"] == []
    browser.cmd("close", page=page)


# ---- beyond loopback: TLS and tokens ----------------------------------------------------------

@pytest.fixture
def tls(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=volrec-view-test", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    tokens = tmp_path / "tokens"
    tokens.write_text("# test tokens\nview: viewtoken-0123456789abcdef\n"
                      "control: controltoken-0123456789abcdef\n")
    tokens.chmod(0o600)
    return cert, key, tokens


def https(port, path, headers=None):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    c.request("GET", path, headers=headers or {})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, dict(r.getheaders()), body


def test_beyond_loopback_needs_tls_and_tokens(browser, build_dir, bin_dir, tls):
    cert, key, tokens = tls
    pub = DaemonPublisher(build_dir)
    try:
        pub.start()
        r = subprocess.run([str(bin_dir / "volrec"), "view", "-i", pub.instance, "-r",
                            str(pub.run_dir), "--listen", "0.0.0.0:0"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and "needs TLS" in r.stderr, r.stderr
        tokens.chmod(0o644)
        r = subprocess.run([str(bin_dir / "volrec"), "view", "-i", pub.instance, "-r",
                            str(pub.run_dir), "--listen", "0.0.0.0:0", "--cert", str(cert),
                            "--key", str(key), "--token-file", str(tokens)],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and "readable by others" in r.stderr, r.stderr
        tokens.chmod(0o600)
        view = Viewer(bin_dir, pub, "--cert", str(cert), "--key", str(key), "--token-file",
                      str(tokens), listen="0.0.0.0:0")
        try:
            assert view.scheme == "https"
            # no token, a wrong one, a WebSocket upgrade without one: 401 and nothing else
            for path, hdrs in (("/", {}), ("/view.js", {}), ("/?token=wrong-0123456789abcdef", {}),
                               ("/ws", {"Upgrade": "websocket", "Connection": "Upgrade",
                                        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
                                        "Sec-WebSocket-Version": "13",
                                        "Sec-WebSocket-Protocol": "volrec-view"})):
                status, headers, body = https(view.port, path, hdrs)
                assert status == 401 and body == b"", (path, status, body[:100])
            status, _, body = https(view.port, "/", {"Authorization":
                                                     "Bearer viewtoken-0123456789abcdef"})
            assert status == 200 and b"volrec view" in body
            # a view token: the page works over https/wss, but may not set
            page = browser.open(f"https://127.0.0.1:{view.port}/?token=viewtoken-0123456789abcdef")
            browser.wait(page, ALL_DRAWN)
            assert browser.eval(page, "window.volrecView.control") is False
            r = browser.eval(page, "window.volrecView.set({'view.position': [1, 1, 1]})")
            assert not r["ok"] and "may only view" in r["error"], r
            browser.cmd("close", page=page)
            # the control token may
            page = browser.open(f"https://127.0.0.1:{view.port}/?token=controltoken-0123456789abcdef")
            browser.wait(page, ALL_DRAWN)
            r = browser.eval(page, "window.volrecView.set({'view.position': [1, 2, 3]})")
            assert r["ok"], r
            # the daemon applies a set with its next volume; get shows it from then on
            wait_for(lambda: pub.control.get("view.position") == [1, 2, 3],
                     what="the control token's set")
            browser.cmd("close", page=page)
        finally:
            view.close()
    finally:
        pub.close()


def test_tokens_pass_in_base64_and_beside_other_cookies(build_dir, bin_dir, tls):
    """A token made by `openssl rand -base64` (with '+', '/' and '=') works in the address as
    the page is opened (?token=...), and the cookie it becomes is found beside other cookies of
    the same host (cookies are per host, not per port: other services' come along), however
    long the Cookie header; the upgrade to a WebSocket takes it the same way."""
    cert, key, _ = tls
    tokens = tls[2].parent / "b64-tokens"
    view_token, control_token = "xY9/0+kQ2w/T+vR4jL8mN0pZ", "q8+Jz/3kAbc0123+456=="
    tokens.write_text(f"view: {view_token}\ncontrol: {control_token}\n")
    tokens.chmod(0o600)
    pub = DaemonPublisher(build_dir)
    try:
        pub.start()
        view = Viewer(bin_dir, pub, "--cert", str(cert), "--key", str(key), "--token-file",
                      str(tokens), listen="0.0.0.0:0")
        try:
            for token in (view_token, control_token):
                status, headers, _ = https(view.port, f"/?token={token}")
                assert status == 200, (token, status)
                assert f"volrec_token={token};" in headers["set-cookie"], headers
            other = "session=" + "s" * 2000 + "; theme=dark"
            upgrade = {"Upgrade": "websocket", "Connection": "Upgrade",
                       "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
                       "Sec-WebSocket-Version": "13", "Sec-WebSocket-Protocol": "volrec-view"}
            for cookie in (f"{other}; volrec_token={control_token}",
                           f"volrec_token={view_token}; {other}"):
                status, _, body = https(view.port, "/view.js", {"Cookie": cookie})
                assert status == 200 and body, (cookie[-60:], status)
                status, _, _ = https(view.port, "/ws", {"Cookie": cookie, **upgrade})
                assert status == 101, (cookie[-60:], status)
            wrong = f"{other}; volrec_token=wrong-{view_token}"
            assert https(view.port, "/view.js", {"Cookie": wrong})[0] == 401
        finally:
            view.close()
    finally:
        pub.close()


def test_loopback_without_tokens_refuses_foreign_hosts_and_origins(live):
    pub, rec, view = live
    c = http.client.HTTPConnection("127.0.0.1", view.port, timeout=10)
    c.request("GET", "/", headers={"Host": "attacker.example:80"})  # DNS rebinding
    r = c.getresponse()
    assert r.status == 401 and r.read() == b""
    c.close()
    c = http.client.HTTPConnection("127.0.0.1", view.port, timeout=10)
    c.request("GET", "/ws", headers={"Upgrade": "websocket", "Connection": "Upgrade",
                                     "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
                                     "Sec-WebSocket-Version": "13",
                                     "Sec-WebSocket-Protocol": "volrec-view",
                                     "Origin": "http://attacker.example"})
    r = c.getresponse()
    assert r.status == 401
    c.close()
    # an Origin too long to copy skipped the check: refused as not the viewer's own
    long_origin = "http://127.0.0.1:%d/" % view.port + "a" * 600
    assert http_status(view.port, "/ws", {
        "Upgrade": "websocket", "Connection": "Upgrade",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Protocol": "volrec-view", "Origin": long_origin}) == 401
    c = http.client.HTTPConnection("127.0.0.1", view.port, timeout=10)
    c.request("GET", "/../../etc/passwd")
    r = c.getresponse()
    assert r.status in (400, 403, 404) and b"root:" not in r.read()
    c.close()


@pytest.fixture(scope="module")
def served(build_dir, bin_dir):
    """volrecd and a viewer on loopback without tokens, for the tests that speak HTTP and the
    WebSocket protocol themselves (no browser, no recorder): (daemon, viewer)."""
    pub = DaemonPublisher(build_dir)
    try:
        pub.start()
        view = Viewer(bin_dir, pub)
        try:
            yield pub, view
        finally:
            view.close()
    finally:
        pub.close()


def http_status(port, path, headers):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", path, headers=headers)
        r = c.getresponse()
        r.read()
        return r.status
    finally:
        c.close()


def test_loopback_without_tokens_takes_only_loopback_names_as_host(served):
    """The Host must be localhost, [::1] or a 127.0.0.0/8 address, in any case, with or without
    a port: a DNS name that only begins like one may resolve anywhere (DNS rebinding)."""
    _, view = served
    port = view.port
    for host in ("localhost", f"LOCALHOST:{port}", f"127.0.0.1:{port}", "127.1.2.3",
                 f"[::1]:{port}", "[::1]"):
        status = http_status(port, "/", {"Host": host})
        assert status == 200, (host, status)
    for host in (f"127.attacker.example:{port}", "127.0.0.1.nip.io", f"127.0.0.1.nip.io:{port}",
                 f"[::1]evil.example:{port}", "[::1].attacker.example",
                 "localhost.attacker.example", f"127.0.0.1:{port}x", f"localhost:{port}:{port}",
                 "127.1", "0x7f.0.0.1", "128.0.0.1", "[::2]"):
        status = http_status(port, "/", {"Host": host})
        assert status == 401, (host, status)


@pytest.fixture
def sock(served):
    """A WebSocket to the served viewer, spoken by hand, after its hello."""
    ws = RawSocket(served[1].port)
    assert ws.status == 101, ws.status
    ws.message(lambda m: m["type"] == "hello")
    yield ws
    ws.close()


def test_errors_are_valid_utf8_cut_at_a_character(sock):
    """A browser drops its whole socket over a text message that is not UTF-8: an error that
    quotes what the browser sent is cut at a character, wherever the cut falls."""
    for i, name in enumerate(("é" * 300, "x" + "é" * 300)):
        sock.send(json.dumps({"type": name, "id": f"type{i}"}, ensure_ascii=False))
        e = sock.reply(f"type{i}")
        assert e["type"] == "error" and e["error"].startswith(
            "message: unknown type '" + name[:31]), e
        sock.send(json.dumps({"type": "subscribe", "views": [name], "id": f"view{i}"},
                             ensure_ascii=False))
        e = sock.reply(f"view{i}")
        assert e["type"] == "error" and "unknown picture \"" + name[:100] in e["error"], e
        assert len(e["error"].encode()) < 512, len(e["error"].encode())
    sock.send('{"type": "ping", "id": "alive"}')
    assert sock.reply("alive")["type"] == "pong"


def test_a_browsers_text_is_one_line_of_the_log(served, sock):
    """What a browser sent and the viewer logs (an unknown type, a key the daemon's error
    quotes) stays on its own line: a newline in it cannot start a line of the log that seems to
    be the viewer's own."""
    forged = "12:00:00.000 volrec view: browser 99 connected from"
    sock.send(json.dumps({"type": f"x\n{forged}", "id": "nl"}))
    e = sock.reply("nl")
    assert e["type"] == "error" and f"'x\n{forged}" in e["error"], e  # the browser's own text
    sock.send(json.dumps({"type": "set", "values": {f"view.\r\n{forged}\t": 1}, "id": "key"}))
    r = sock.reply("key")
    assert r["type"] == "reply" and not r["ok"], r
    log = served[1].log_text()
    assert f"unknown type 'x {forged}" in log, log[-2000:]
    assert f"\n{forged}" not in log and "\r" not in log and "\t" not in log, log[-2000:]


def test_text_that_is_not_utf8_is_refused_with_the_requests_id(sock):
    """Text that is not UTF-8 never reaches the daemon (whose error could not say whose request
    it was, leaving the browser to a false "did not answer" 3 s later): an error at once, with
    the request's id when it has one that can be sent back."""
    sock.send(b'{"type": "set", "values": {"view.\xff": 1}, "id": "set1"}')
    e = sock.reply("set1")  # (the 3 s expiry would be another error)
    assert e["type"] == "error" and e["error"] == "message: not valid UTF-8 text", e
    sock.send(b'{"type": "\xc3", "id": 7}')
    e = sock.reply(7)
    assert e["type"] == "error" and e["error"] == "message: not valid UTF-8 text", e
    sock.send(b'{"type": "ping", "id": "\xe9t\xe9"}')  # Latin-1: an id that cannot go back
    e = sock.message(lambda m: m["type"] == "error")
    assert "id" not in e and e["error"] == "message: not valid UTF-8 text", e
    sock.send(b'\xff\xfe')
    e = sock.message(lambda m: m["type"] == "error")
    assert "id" not in e and e["error"] == "message: not valid UTF-8 text", e
    # a valid key the daemon does not know: its own error, with the id
    sock.send(json.dumps({"type": "set", "values": {"view.é": 1}, "id": "set2"},
                         ensure_ascii=False))
    r = sock.reply("set2")
    assert r["type"] == "reply" and not r["ok"] and "view.é" in r["error"], r


def test_only_strict_json_is_taken(sock):
    """A message is one strict JSON object and nothing else: lenient JSON is refused with what
    is wrong and nothing is done (a NaN or Infinity would otherwise come back in a pong that the
    browser's JSON.parse cannot read)."""
    for text, why in (
            ('{"type": "ping", "id": 1} xyz', "more text after the object, at byte 26"),
            ('{"type": "ping", "id": 1}{"type": "ping", "id": 2}',
             "more text after the object, at byte 25"),
            ('{"type": "ping", "id": 1}\u0000', "more text after the object, at byte 25"),
            ("{'type': \"ping\", \"id\": 1}", "a single quote at byte 1"),
            ('{"type": "ping", "id": 1,}', "at byte 25"),
            ('{"type": "ping", "id": 1, "t": NaN}', "a number that is not finite"),
            ('{"type": "ping", "id": 1, "t": -Infinity}', "a number that is not finite"),
            ('{"type": "ping", "id": 1, "t": [1e999]}', "a number that is not finite"),
            ('[{"type": "ping", "id": 1}]', "a JSON array"),
            ("", "unexpected end of text"),
            ('{"type": "ping", "id": ', "unexpected end of text"),
            # json-c reads an unpaired UTF-16 surrogate as U+FFFD: the id would come back
            # changed (JavaScript's JSON.stringify writes a lone surrogate as this escape)
            ('{"type": "ping", "id": "\\ud800"}', "an unpaired surrogate \\ud800 at byte 24"),
            ('{"type": "ping", "id": "x", "t": "\\udc00\\ud83d"}',
             "an unpaired surrogate \\udc00 at byte 34")):
        sock.send(text)
        e = sock.message(lambda m: m["type"] in ("error", "pong"))
        assert e["type"] == "error" and "id" not in e, (text, e)
        assert e["error"].startswith("message: not a JSON object: ") and why in e["error"], \
            (text, e)
    sock.send('{"type": "ping", "id": "spaces"} \r\n')  # whitespace after the object is JSON
    assert sock.reply("spaces")["type"] == "pong"


def test_ids_and_times_go_back_only_as_json_a_browser_reads(sock):
    """An id or a ping's t is echoed: it must be a string or a finite number JavaScript holds
    exactly; anything else is refused, never echoed changed or unreadable."""
    for text in ('{"type": "ping", "id": 123456789012345678901234567890}',
                 '{"type": "ping", "id": 9007199254740993}',
                 '{"type": "get", "key": "view.slab", "id": true}',
                 '{"type": "get", "key": "view.slab", "id": null}',
                 '{"type": "set", "values": {"view.slab": [8, 256]}, "id": {"n": 1}}'):
        sock.send(text)
        e = sock.message(lambda m: m["type"] in ("error", "pong", "reply"))
        assert e["type"] == "error" and "id" not in e, (text, e)
        assert e["error"].startswith("message: id: need a string or a finite number"), (text, e)
    sock.send('{"type": "ping", "id": "big t", "t": 123456789012345678901234567890}')
    e = sock.reply("big t")
    assert e["type"] == "error" and e["error"].startswith("ping: t: need a string"), e
    sock.send('{"type": "ping", "id": 2.5, "t": 1700000000000.25}')
    p = sock.reply(2.5)
    assert p["type"] == "pong" and p["t"] == 1700000000000.25, p
    sock.send('{"type": "get", "key": "view.slab", "id": -9007199254740992}')
    r = sock.reply(-9007199254740992)
    assert r["type"] == "reply" and r["ok"], r
    # a surrogate pair is one character, and comes back as it was sent
    sock.send('{"type": "ping", "id": "\\ud83d\\ude00", "t": "\\uD83D\\uDE00"}')
    p = sock.reply("\U0001F600")
    assert p["type"] == "pong" and p["t"] == "\U0001F600", p
    # an id of any length that fits in a message comes back with the daemon's reply
    for n in (96, 3000):
        long_id = "i" * n
        sock.send(json.dumps({"type": "get", "key": "view.slab", "id": long_id}))
        r = sock.reply(long_id)
        assert r["type"] == "reply" and r["ok"], r


def test_websocket_needs_its_path_and_subprotocol(served, bin_dir):
    """Only /ws with the volrec-view subprotocol is a browser's session: any other upgrade is
    refused (400) instead of accepted and ignored, so none escapes --max-browsers."""
    pub, _ = served
    view = Viewer(bin_dir, pub, "--max-browsers", "1")
    held = []
    try:
        for path, protocol in (("/ws", None), ("/ws", "bogus"), ("/ws", "http"),
                               ("/ws", "volrec-view-2"), ("/", "volrec-view"),
                               ("/index.html", "volrec-view"), ("/wsx", "volrec-view")):
            ws = RawSocket(view.port, path=path, protocol=protocol)
            held.append(ws)
            assert ws.status == 400, (path, protocol, ws.status)
        ws = RawSocket(view.port, protocol="bogus, volrec-view")
        held.append(ws)
        assert ws.status == 101, ws.status
        assert ws.message(lambda m: m["type"] == "hello")["control"] is True
        # the one browser allowed is there: a second is refused, with or without subprotocol
        for protocol in ("volrec-view", None):
            ws = RawSocket(view.port, protocol=protocol)
            held.append(ws)
            assert ws.status != 101, (protocol, ws.status)
        assert "400 for path '/ws', subprotocols 'bogus'" in view.log_text()
    finally:
        for ws in held:
            ws.close()
        view.close()


BUSY = "too many requests in flight (8); wait for the replies"


def test_a_burst_of_requests_loses_no_reply(served, sock):
    """A browser that sends faster than it is answered gets, for every request, its reply or
    an error saying it has too many in flight: none is dropped, and its requests never take
    the control socket from another browser."""
    burst = []
    for i in range(40):
        burst.append(json.dumps({"type": "get", "key": "view.slab", "id": f"get{i}"}))
        burst.append(json.dumps({"type": "launch", "id": f"bad{i}"}))
    sock.send(*burst)
    other = RawSocket(served[1].port)
    other.message(lambda m: m["type"] == "hello")
    other.send('{"type": "set", "values": {"view.slab": [8, 256]}, "id": "other"}')
    got = {}
    while len(got) < len(burst):
        m = sock.message(lambda m: m["type"] in ("reply", "error"))
        assert m.get("id") not in got, (m, got.get(m.get("id")))
        got[m["id"]] = m
    for i in range(40):
        r, e = got[f"get{i}"], got[f"bad{i}"]
        assert (r["type"] == "reply" and r["ok"]) or r.get("error") == BUSY, r
        assert "unknown type 'launch'" in e["error"] or e["error"] == BUSY, e
    r = other.reply("other")
    other.close()
    assert r["type"] == "reply" and r["ok"], r
    assert "dropped" not in served[1].log_text()


def test_requests_beyond_eight_in_flight_are_refused_at_once(served, sock):
    """With eight requests of a browser waiting at the daemon (stopped here), its ninth is
    refused at once with its id; the eight are answered when the daemon goes on."""
    pub, _ = served
    pub.proc.send_signal(signal.SIGSTOP)
    try:
        sock.send(*(json.dumps({"type": "get", "key": "view.slab", "id": f"held{i}"})
                    for i in range(10)))
        for i in (8, 9):
            e = sock.reply(f"held{i}")  # (the 3 s expiry would be another error)
            assert e["type"] == "error" and e["error"] == BUSY, e
    finally:
        pub.proc.send_signal(signal.SIGCONT)
    for i in range(8):
        r = sock.reply(f"held{i}")
        assert r["type"] == "reply", r


def test_browsers_within_their_eight_are_never_refused_for_each_other(served, sock):
    """Every browser may have its eight requests in flight at once: twelve browsers sending
    eight each get 96 replies, and the requests of a browser that left while volrecd had not
    answered them (stopped here) do not take the places of those that remain."""
    pub, view = served
    socks = [RawSocket(view.port) for _ in range(12)]
    try:
        for ws in socks:
            ws.message(lambda m: m["type"] == "hello")
        for ws in socks:
            ws.send(*(json.dumps({"type": "get", "key": "view.slab", "id": i}) for i in range(8)))
        for ws in socks:
            for i in range(8):
                r = ws.reply(i)
                assert r["type"] == "reply" and r["ok"], r
    finally:
        for ws in socks:
            ws.close()
    pub.proc.send_signal(signal.SIGSTOP)
    try:
        for k in range(20):  # 160 requests left behind, more than all sixteen browsers' places
            ws = RawSocket(view.port)
            ws.message(lambda m: m["type"] == "hello")
            ws.send(*(json.dumps({"type": "get", "key": "view.slab", "id": i}) for i in range(8)))
            time.sleep(0.02)  # read by the viewer before the close
            ws.close()
        sock.send(json.dumps({"type": "get", "key": "view.slab", "id": "stays"}))
        time.sleep(0.5)
    finally:
        pub.proc.send_signal(signal.SIGCONT)
    r = sock.reply("stays")
    assert r["type"] == "reply" and r["ok"], r


def test_a_set_the_daemon_reads_too_late_is_refused_and_said_not_applied(served, sock):
    """A set the daemon does not read within the viewer's 3 s (stopped here) is answered
    "expired unread, not applied"; when the daemon goes on and reads it, it refuses it: the
    value in force is not the one that set asked for."""
    pub, _ = served
    sock.send(json.dumps({"type": "get", "key": "view.slab", "id": "before"}))
    before = sock.reply("before")
    assert before["ok"] and before["reply"]["value"] != "[3, 7]", before
    pub.proc.send_signal(signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        sock.send(json.dumps({"type": "set", "values": {"view.slab": [3, 7]}, "id": "late"}))
        e = sock.reply("late")
        assert not e["ok"] and "expired unread and is not applied" in e["error"], e
        assert 3.0 <= time.monotonic() - t0  # not before the viewer's 3 s
    finally:
        pub.proc.send_signal(signal.SIGCONT)
    # a set is applied between volumes: two volumes published after the daemon went on give
    # a set it had wrongly taken the time to show
    with volrec.Client(pub.instance, run_dir=str(pub.run_dir)) as c:
        for _ in range(2):
            with c.next_volume(TIMEOUT):
                pass
    sock.send(json.dumps({"type": "get", "key": "view.slab", "id": "after"}))
    after = sock.reply("after")
    # (the daemon is shared with the tests before: one of their sets may land meanwhile)
    assert after["reply"]["value"] != "[3, 7]", (before, after)
    # the same set read in time is applied
    sock.send(json.dumps({"type": "set", "values": {"view.slab": [3, 7]}, "id": "in-time"}))
    r = sock.reply("in-time")
    assert r["ok"], r
    deadline = time.monotonic() + 10
    while True:
        sock.send(json.dumps({"type": "get", "key": "view.slab", "id": "now"}))
        if sock.reply("now")["reply"]["value"] == "[3, 7]":
            break
        assert time.monotonic() < deadline
        time.sleep(0.1)


# ---- make demo ---------------------------------------------------------------------------------

@pytest.mark.long  # a 15 s demo (make test: test_demo runs make demo, the others the viewer)
def test_make_demo_serves_the_viewer(browser, src_dir, build_dir, tmp_path):
    """scripts/demo.sh (what `make demo` runs) prints the viewer's URL; a browser opening it
    while the demo runs sees the demo daemon's four panes; the viewer stops with the demo."""
    env = dict(os.environ, DEMO_SECONDS="15", DEMO_OUT=str(tmp_path / "demo"))
    p = subprocess.Popen([str(src_dir / "scripts" / "demo.sh"), str(build_dir)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        seen = ""
        for line in p.stdout:
            seen += line
            if line.startswith("== volrec view: open "):
                break
        m = re.match(r"== volrec view: open (http://127\.0\.0\.1:\d+/)\?token=[\w-]+ in a browser",
                     line)
        assert m, seen
        page = browser.open(m.group(1))
        browser.wait(page, ALL_DRAWN)
        assert browser.eval(page, "window.volrecView.shape") == [96, 96, 256]
        assert browser.eval(page, "window.volrecView.daemon") == "connected"
        browser.wait(page, "window.volrecView.daemon === 'stopped' || "
                     "!window.volrecView.connected", timeout_ms=120000)
        browser.cmd("close", page=page)
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0, seen + out
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    # the viewer went with the demo: nothing listens on its port any more
    port = int(m.group(1).rsplit(":", 1)[1].strip("/"))
    with pytest.raises(ConnectionRefusedError):
        http.client.HTTPConnection("127.0.0.1", port, timeout=5).request("GET", "/")
