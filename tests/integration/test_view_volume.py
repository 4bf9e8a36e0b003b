# SPDX-License-Identifier: MIT
"""`volrec view` beyond the 2-D panes, no browser needed (raw WebSocket, docs/viewer.md): the
`volume` frame carries the daemon's reduced volume (docs/algorithms.md §4.5) whole, with its
planes, block factors and voxel size; every frame carries the voxel size of its picture's axes
in µm (0 where the daemon does not know it); and the data controls the page's data panel and
record buttons use (`set` of processing keys, `record_start`, `record_stop`) pass to volrecd
only with the control token, and are refused with a message without it."""
import json
import struct
import zlib

import numpy as np
import pytest

from viewkit import DaemonPublisher, RawSocket, Recorder, Viewer, wait_for

GEOMETRY = (48, 48, 256)
SCAN_UM = (960.0, 480.0)  # [width_x, height_y]: dx = 20 µm, dy = 10 µm
AXIAL_UM = 3.5
VOLUME_KIND = 6


@pytest.fixture(scope="module")
def pub(build_dir):
    p = DaemonPublisher(build_dir, geometry=GEOMETRY)
    p.cfg["geometry"].update(scan_size_um=list(SCAN_UM), axial_um_per_pixel=AXIAL_UM)
    p.cfg["record"] = {"dir": str(p.dir / "rec"), "min_free_gb": 0}
    (p.dir / "rec").mkdir()
    p.config_path.write_text(json.dumps(p.cfg, indent=1) + "\n")
    try:
        p.start()
        yield p
    finally:
        p.close()


@pytest.fixture(scope="module")
def rec(pub):
    r = Recorder(pub)
    yield r
    r.close()


@pytest.fixture
def view(pub, bin_dir):
    v = Viewer(bin_dir, pub)
    yield v
    v.close()


def header(payload):
    """The documented fields of a version 2 frame (docs/viewer.md, Picture frames)."""
    magic, version, hsize, kind, enc, rstep, cstep, rows, cols, nbytes, vid = struct.unpack_from(
        "<IHHBBBBIIIQ", payload, 0)
    h = dict(magic=magic, version=version, header_size=hsize, kind=kind, encoding=enc,
             steps=(rstep, cstep), rows=rows, cols=cols, payload=nbytes, volume_id=vid,
             shape=struct.unpack_from("<3I", payload, 72),
             voxel_um=struct.unpack_from("<3d", payload, 128),
             pixel_um=struct.unpack_from("<3d", payload, 152),
             planes=struct.unpack_from("<I", payload, 176)[0],
             factors=struct.unpack_from("<3I", payload, 180), reduce=payload[192],
             reserved=bytes(payload[193:256]))
    body = payload[hsize:]
    assert len(body) == nbytes, (len(body), nbytes)
    h["pixels"] = zlib.decompress(body) if enc == 1 else bytes(body)
    return h


def frames_of(ws, kinds, n=1):
    """The next n frames of each kind in kinds, decoded."""
    got = {k: [] for k in kinds}
    while any(len(v) < n for v in got.values()):
        op, payload = ws.frame()
        if op == 2:
            h = header(payload)
            if h["kind"] in got:
                got[h["kind"]].append(h)
    return got


def test_the_volume_frame_is_the_reduced_volume_with_its_geometry(pub, rec, view):
    ws = RawSocket(view.port, token=None)  # watching needs no token
    try:
        hello = ws.message(lambda m: m["type"] == "hello")
        assert hello["protocol"] == 2 and "volume" in hello["views"], hello
        ws.send(json.dumps({"type": "subscribe", "views": ["volume", "bscan"]}))
        got = frames_of(ws, (VOLUME_KIND, 2))
    finally:
        ws.close()
    v = got[VOLUME_KIND][0]
    Y, X, Z = GEOMETRY
    dx, dy = SCAN_UM[0] / X, SCAN_UM[1] / Y
    # max_side 128 (the default): blocks of 1 x 1 x 2, [48][48][128], maxima
    assert (v["magic"], v["version"], v["header_size"]) == (0x46565256, 2, 256)
    assert (v["rows"], v["cols"], v["planes"]) == (48, 48, 128)
    assert v["factors"] == (1, 1, 2) and v["steps"] == (1, 1) and v["reduce"] == 0
    assert v["shape"] == GEOMETRY
    assert v["voxel_um"] == pytest.approx((dy, dx, AXIAL_UM))
    assert v["pixel_um"] == pytest.approx((dy, dx, 2 * AXIAL_UM))
    assert v["reserved"] == bytes(63)
    want, _ = rec.picture("volume", v["volume_id"])
    got_vol = np.frombuffer(v["pixels"], dtype=np.uint8).reshape(48, 48, 128)
    np.testing.assert_array_equal(got_vol, want)
    # a B-scan [X][Z]: rows along x, cols in depth; one plane, factors 1
    b = got[2][0]
    assert b["pixel_um"] == pytest.approx((dx, AXIAL_UM, 0.0))
    assert (b["planes"], b["factors"]) == (1, (1, 1, 1))


def test_a_volume_subscription_follows_max_side_live(pub, view):
    """Latest-wins like every pane: after a set of view.volume.max_side the next frames are
    the new size, and 0 sends none until it is set again."""
    ws = RawSocket(view.port)
    try:
        ws.message(lambda m: m["type"] == "hello")
        ws.send(json.dumps({"type": "subscribe", "views": ["volume"]}))
        frames_of(ws, (VOLUME_KIND,))
        ws.send(json.dumps({"type": "set", "id": "m", "values": {
            "view.volume.max_side": 16, "view.volume.reduce": "mean"}}))
        assert ws.reply("m")["ok"]
        for _ in range(100):
            v = frames_of(ws, (VOLUME_KIND,))[VOLUME_KIND][0]
            if v["reduce"] == 1:
                break
        assert (v["rows"], v["cols"], v["planes"], v["factors"]) == (16, 16, 16, (3, 3, 16))
        assert len(v["pixels"]) == 16 ** 3
    finally:
        ws.send(json.dumps({"type": "set", "id": "r", "values": {
            "view.volume.max_side": 128, "view.volume.reduce": "max"}}))
        ws.reply("r")
        ws.close()


@pytest.mark.parametrize("msg", [
    {"type": "set", "values": {"preprocess.dispersion.coeffs": [0, 0]}},
    {"type": "record_start", "raw": True, "name": "x1", "epochs": 2},
    {"type": "record_stop"},
])
def test_data_controls_without_the_token_are_refused_with_a_message(pub, view, msg):
    before = pub.control.get("preprocess.dispersion.coeffs")
    ws = RawSocket(view.port, token=None)
    try:
        assert ws.message(lambda m: m["type"] == "hello")["control"] is False
        ws.send(json.dumps(dict(msg, id="d")))
        e = ws.reply("d")
        assert e["type"] == "error", e
        assert e["error"].startswith(msg["type"] + ": this browser may only view") and \
            "?token=" in e["error"], e
    finally:
        ws.close()
    assert pub.control.get("preprocess.dispersion.coeffs") == before
    assert not list((pub.dir / "rec").iterdir())


def test_with_the_token_processing_keys_are_set_and_recording_starts_and_stops(pub, view):
    ws = RawSocket(view.port)
    try:
        assert ws.message(lambda m: m["type"] == "hello")["control"] is True
        ws.send(json.dumps({"type": "set", "id": "s", "values": {
            "preprocess.dispersion.coeffs": [25, -10], "preprocess.db_range": [50, 100]}}))
        r = ws.reply("s")
        assert r["type"] == "reply" and r["ok"], r
        wait_for(lambda: pub.control.get("preprocess.dispersion.coeffs") == [25, -10],
                 what="the dispersion set")
        ws.send(json.dumps({"type": "record_start", "id": "r", "raw": True, "name": "vw1",
                            "epochs": 3}))
        r = ws.reply("r")
        assert r["type"] == "reply" and r["ok"], r
        wait_for(lambda: (pub.dir / "rec" / "vw1.vrr").exists(), what="the recording's file")
        ws.send(json.dumps({"type": "record_stop", "id": "t"}))
        r = ws.reply("t")
        assert r["type"] == "reply", r  # ok, or the daemon's own word that it already ended
        assert r["ok"] or "record_stop" in r["error"], r
        # a value the daemon refuses comes back as its reply, not applied
        ws.send(json.dumps({"type": "record_start", "id": "b", "raw": True, "name": "../x"}))
        r = ws.reply("b")
        assert r["type"] == "reply" and not r["ok"] and "name" in r["error"], r
    finally:
        ws.send(json.dumps({"type": "set", "id": "z", "values": {
            "preprocess.dispersion.coeffs": [30, -12], "preprocess.db_range": [55, 100]}}))
        ws.reply("z")
        ws.close()


@pytest.mark.parametrize("msg,what", [
    ({"type": "record_start", "name": 7}, "record_start: name: need a string"),
    ({"type": "record_start", "name": "a", "epochs": "3"}, "record_start: epochs: need a whole"),
    ({"type": "record_start", "name": "a", "raw": 1}, "record_start: raw: need true or false"),
    ({"type": "record_start", "name": "a", "path": "/tmp/x"}, "unknown field 'path'"),
    ({"type": "record_stop", "now": True}, "record_stop: unknown field 'now'"),
    ({"type": "record_stop", "raw": "no"}, "record_stop: raw: need true or false"),
    ({"type": "record_start", "name": "a", "raw": False, "volumes": 1.5},
     "record_start: volumes: need a whole number"),
])
def test_record_requests_of_the_wrong_shape_never_reach_the_daemon(pub, view, msg, what):
    ws = RawSocket(view.port)
    try:
        ws.message(lambda m: m["type"] == "hello")
        ws.send(json.dumps(dict(msg, id="q")))
        e = ws.reply("q")
        assert e["type"] == "error" and what in e["error"], e
    finally:
        ws.close()
