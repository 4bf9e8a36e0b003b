# SPDX-License-Identifier: MIT
"""Each browser's own crosshair and slab (docs/viewer.md, "view"): a browser that moves them
gets the B-scan, slice, plane and en-face pictures at its own position and slab, taken by the
viewer from the published volume itself, without the control token and without moving the
daemon's view.position or view.slab; they equal numpy slices of the volume read with the Python
client (the en-face mean rounded half up in integers, docs/algorithms.md §4). A position or slab
outside the volume is refused with a message, never moved into it."""
import json
import struct
import threading
import time
import zlib

import numpy as np
import pytest

import volrec
from viewkit import DaemonPublisher, RawSocket, Viewer, wait_for

GEOMETRY = (48, 48, 256)
KIND = {0: "enface_mean", 1: "enface_max", 2: "bscan", 3: "slice", 4: "plane"}
OWN = list(KIND.values())


class Volumes:
    """Copies of the newest volumes as the Python client reads them, by volume id."""

    def __init__(self, pub, keep=60):
        self.pub, self.keep, self.vols, self.views = pub, keep, {}, {}
        self.lock, self.running, self.error = threading.Lock(), True, None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        wait_for(lambda: self.vols or self.error, what="the first volume")

    def _run(self):
        try:
            with volrec.Client(self.pub.instance, run_dir=str(self.pub.run_dir),
                               rcvhwm=10000) as c:
                while self.running:
                    try:
                        with c.next_volume(0.3) as vol:
                            copy = np.array(vol)
                            pos = list(vol.views["bscan"].position)
                            slab = list(vol.views["enface_mean"].slab)
                            vid = vol.volume_id
                    except (volrec.Timeout, volrec.TornRead):
                        continue
                    with self.lock:  # kept only when the lease was intact to the end
                        self.vols[vid] = copy
                        self.views[vid] = (pos, slab)
                        for k in [k for k in self.vols if k + self.keep < vid]:
                            del self.vols[k], self.views[k]
        except Exception as e:  # noqa: BLE001 — said by the tests that wait on it
            self.error = e

    def volume(self, vid):
        wait_for(lambda: vid in self.vols or self.error, what=f"volume {vid}")
        assert self.error is None, repr(self.error)
        with self.lock:
            return self.vols[vid], self.views[vid]

    def close(self):
        self.running = False
        self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def pub(build_dir):
    p = DaemonPublisher(build_dir, geometry=GEOMETRY)
    try:
        p.start()
        yield p
    finally:
        p.close()


@pytest.fixture(scope="module")
def vols(pub):
    v = Volumes(pub)
    yield v
    v.close()


@pytest.fixture
def view(pub, bin_dir):
    v = Viewer(bin_dir, pub)
    yield v
    v.close()


def frame(payload):
    kind, enc = payload[8], payload[9]
    rows, cols, nbytes, vid = struct.unpack_from("<IIIQ", payload, 12)
    body = payload[256:256 + nbytes]
    pix = zlib.decompress(body) if enc == 1 else bytes(body)
    return dict(kind=kind, vid=vid, shape=list(struct.unpack_from("<3I", payload, 72)),
                slab=list(struct.unpack_from("<2I", payload, 84)),
                position=list(struct.unpack_from("<3I", payload, 92)),
                pixels=np.frombuffer(pix, np.uint8).reshape(rows, cols))


def expected(V, kind, pos, slab):
    """docs/algorithms.md §4, in numpy."""
    y0, x0, z0 = pos
    za, zb = slab
    if kind == "bscan":
        return V[y0]
    if kind == "slice":
        return V[:, x0]
    if kind == "plane":
        return V[:, :, z0]
    s = V[:, :, za:zb]
    if kind == "enface_max":
        return s.max(axis=2)
    n = zb - za
    return ((2 * s.astype(np.uint64).sum(axis=2) + n) // (2 * n)).astype(np.uint8)


def own_frames(ws, pos=None, slab=None, kinds=OWN, n=1):
    """The next n frames of each kind whose header says this position (and slab)."""
    got = {k: [] for k in kinds}
    end = time.monotonic() + 120
    while any(len(v) < n for v in got.values()):
        op, payload = ws.frame(max(end - time.monotonic(), 0.1))
        if op != 2 or payload[8] not in KIND:
            continue
        f = frame(payload)
        if (pos is None or f["position"] == pos) and (slab is None or f["slab"] == slab) \
                and KIND[f["kind"]] in got:
            got[KIND[f["kind"]]].append(f)
    return got


def open_ws(view, views=OWN):
    ws = RawSocket(view.port, token=None)  # view only: no control token
    assert ws.message(lambda m: m["type"] == "hello")["control"] is False
    ws.send(json.dumps({"type": "subscribe", "views": views}))
    while ws.frame()[0] != 2:  # a picture: the viewer has read a volume, so knows its shape
        pass
    return ws


def test_two_view_only_browsers_get_their_own_pictures_equal_to_the_volume(pub, vols, view):
    before = (pub.control.get("view.position"), pub.control.get("view.slab"))
    a, b, c = open_ws(view), open_ws(view), open_ws(view)
    try:
        pa, sa = [5, 7, 100], [20, 60]
        pb = [40, 30, 10]
        a.send(json.dumps({"type": "view", "id": 1, "position": pa, "slab": sa}))
        r = a.reply(1)
        assert r == {"type": "view", "id": 1, "position": pa, "slab": sa}, r
        b.send(json.dumps({"type": "view", "id": "b", "position": pb}))
        r = b.reply("b")
        assert r["type"] == "view" and r["position"] == pb and r["slab"] is None, r
        got_a = own_frames(a, pa, sa, n=2)
        got_b = own_frames(b, pb, n=2)
        for got, pos, slab in ((got_a, pa, sa), (got_b, pb, None)):
            for kind, fs in got.items():
                for f in fs:
                    V, (dpos, dslab) = vols.volume(f["vid"])
                    want_slab = slab or dslab
                    assert f["slab"] == want_slab, (kind, f["slab"], want_slab)
                    np.testing.assert_array_equal(f["pixels"],
                                                  expected(V, kind, pos, want_slab),
                                                  err_msg=f"{kind} at {pos} {want_slab}")
        # c never asked: it keeps the daemon's pictures, at the daemon's position
        f = own_frames(c, kinds=["bscan"])["bscan"][0]
        V, (dpos, dslab) = vols.volume(f["vid"])
        assert f["position"] == dpos and dpos != pa and dpos != pb
        np.testing.assert_array_equal(f["pixels"], V[dpos[0]])
        # back to the daemon's: its frames again
        a.send(json.dumps({"type": "view", "id": 2, "position": None, "slab": None}))
        assert a.reply(2) == {"type": "view", "id": 2, "position": None, "slab": None}
        f = own_frames(a, dpos, dslab, kinds=["bscan", "enface_mean"])
        assert f["bscan"][0]["position"] == dpos
    finally:
        for ws in (a, b, c):
            ws.close()
    # the daemon's view never moved
    assert (pub.control.get("view.position"), pub.control.get("view.slab")) == before


def test_browsers_at_the_same_view_share_the_extraction(pub, vols, view):
    """Two browsers at one position get the same frames (one extraction per volume)."""
    a, b = open_ws(view, ["bscan"]), open_ws(view, ["bscan"])
    try:
        for ws in (a, b):
            ws.send(json.dumps({"type": "view", "id": 1, "position": [11, 12, 13]}))
            assert ws.reply(1)["type"] == "view"
        fa = own_frames(a, [11, 12, 13], kinds=["bscan"], n=3)["bscan"]
        fb = own_frames(b, [11, 12, 13], kinds=["bscan"], n=3)["bscan"]
        common = {f["vid"] for f in fa} & {f["vid"] for f in fb}
        assert common, "no volume's B-scan reached both"
        for f in fa:
            V, _ = vols.volume(f["vid"])
            np.testing.assert_array_equal(f["pixels"], V[11])
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("msg,error", [
    ({"position": [48, 0, 0]}, "view: position: y0 48 is outside the volume (0..47"),
    ({"position": [0, 48, 0]}, "view: position: x0 48 is outside the volume (0..47"),
    ({"position": [0, 0, 256]}, "view: position: z0 256 is outside the volume (0..255"),
    ({"slab": [10, 10]}, "view: slab [10, 10): need 0 <= za < zb <= 256"),
    ({"slab": [0, 257]}, "view: slab [0, 257): need 0 <= za < zb <= 256"),
    ({"position": [-1, 0, 0]}, "view: position[0]: need a whole number from 0"),
    ({"position": [1.5, 0, 0]}, "view: position[0]: need a whole number from 0"),
    ({"position": [1, 2]}, "view: position: need [y0, x0, z0] or null"),
    ({"slab": "all"}, "view: slab: need [za, zb] or null"),
    ({}, "view: need position [y0, x0, z0] or slab [za, zb]"),
    ({"zoom": 2}, "view: unknown field 'zoom' (position, slab)"),
])
def test_a_view_outside_the_volume_is_refused_with_a_message(pub, vols, view, msg, error):
    ws = open_ws(view, ["bscan"])
    try:
        ws.send(json.dumps(dict(msg, type="view", id="x")))
        e = ws.reply("x")
        assert e["type"] == "error" and e["error"].startswith(error), e
        # nothing changed: the daemon's B-scans still come
        f = own_frames(ws, kinds=["bscan"])["bscan"][0]
        _, (dpos, _) = vols.volume(f["vid"])
        assert f["position"] == dpos
    finally:
        ws.close()


def test_stepping_fast_sends_the_newest_position_only(pub, vols, view):
    """Latest-wins: steps sent at once (within the 8 requests a browser may have in flight)
    end at the last one, its pictures right."""
    ws = open_ws(view, ["bscan", "slice"])
    try:
        ws.send(*[json.dumps({"type": "view", "position": [y, 47 - y, 5]})
                  for y in range(14, 20)])
        f = own_frames(ws, [19, 28, 5], kinds=["bscan", "slice"])
        V, _ = vols.volume(f["bscan"][0]["vid"])
        np.testing.assert_array_equal(f["bscan"][0]["pixels"], V[19])
        V, _ = vols.volume(f["slice"][0]["vid"])
        np.testing.assert_array_equal(f["slice"][0]["pixels"], V[:, 28])
    finally:
        ws.close()


def test_a_browser_steps_through_the_last_volume_of_a_stopped_daemon(build_dir, bin_dir):
    """No new volume is needed: each step is taken from the newest volume at once, also back
    to a position it showed a moment ago."""
    p = DaemonPublisher(build_dir, geometry=GEOMETRY)
    v = vols = None
    try:
        p.start()
        vols = Volumes(p)
        v = Viewer(bin_dir, p)
        ws = open_ws(v, ["bscan"])
        p.stop()
        wait_for(lambda: ws.message(lambda m: m["type"] == "state")["state"]["state"]
                 == "stopped", what="the viewer saying volrecd stopped")
        got = {}
        for y in (3, 4, 3, 30):
            ws.send(json.dumps({"type": "view", "id": y, "position": [y, 1, 2]}))
            assert ws.reply(y)["type"] == "view"
            f = own_frames(ws, [y, 1, 2], kinds=["bscan"])["bscan"][0]
            got.setdefault(y, []).append(f)
        ws.close()
        last = {f["vid"] for fs in got.values() for f in fs}
        assert len(last) == 1, last  # all from the last volume
        np.testing.assert_array_equal(got[3][0]["pixels"], got[3][1]["pixels"])
        with vols.lock:  # the Python client's copy, when it read that volume intact
            V = vols.vols.get(last.pop())
        if V is not None:
            for y, fs in got.items():
                np.testing.assert_array_equal(fs[0]["pixels"], V[y])
    finally:
        if vols:
            vols.close()
        if v:
            v.close()
        p.close()


def test_a_view_outside_a_new_geometry_goes_back_to_the_daemons(build_dir, bin_dir):
    """volrecd restarted with fewer B-scans: a browser whose y0 lies beyond them is told, and
    shows the daemon's crosshair again; one still inside keeps its own."""
    p = DaemonPublisher(build_dir, geometry=GEOMETRY)
    v = None
    try:
        p.start()
        v = Viewer(bin_dir, p)
        out, inside = open_ws(v, ["bscan"]), open_ws(v, ["bscan"])
        out.send(json.dumps({"type": "view", "id": 1, "position": [40, 5, 5]}))
        inside.send(json.dumps({"type": "view", "id": 1, "position": [10, 5, 5]}))
        assert out.reply(1)["type"] == "view" and inside.reply(1)["type"] == "view"
        p.stop()
        p.cfg["geometry"]["bscans_per_volume"] = 8  # Y 24
        p.config_path.write_text(json.dumps(p.cfg, indent=1) + "\n")
        p.start()
        e = out.message(lambda m: m["type"] == "error")
        assert e["error"] == ("view: position: y0 40 is outside the volume (0..23 for 24 x 48 x "
                              "256 [Y, X, Z]); showing the daemon's crosshair and slab again"), e
        f = own_frames(out, kinds=["bscan"])["bscan"][0]
        assert f["shape"] == [24, 48, 256] and f["position"][0] < 24, f["shape"]
        while True:  # the one inside: its own B-scans of the new volumes
            f = own_frames(inside, [10, 5, 5], kinds=["bscan"])["bscan"][0]
            if f["shape"] == [24, 48, 256]:
                break
        out.close()
        inside.close()
    finally:
        if v:
            v.close()
        p.close()
