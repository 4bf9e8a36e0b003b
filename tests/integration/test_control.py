# SPDX-License-Identifier: MIT
"""The control socket and views end to end: `volrec get/set` against a running volrecd (CPU
backend, synthetic retina), the set taking effect on the next volumes' views, all-or-none
validation with the file's messages, structural keys refused, a reload dropping runtime sets,
the socket's mode and a user outside its group, malformed requests never disturbing the
daemon, and the published views equal to the numpy reference of docs/algorithms.md §4 computed
from the same published volume."""
import json
import os
import pathlib
import signal
import stat
import subprocess
import sys
import time

import numpy as np
import pytest

import volrec
from conftest import SRC
from ctlwire import Wire, ctl_path
from test_tools import TIMEOUT, Daemon

sys.path.insert(0, str(SRC / "tests" / "reference"))
import views_ref  # noqa: E402


@pytest.fixture(scope="module")
def daemon(bin_dir):
    d = Daemon(bin_dir)
    yield d
    d.close()


def views_of_next_volume(d, cond=lambda v: True, volumes=40):
    """The first volume (within `volumes`) whose views satisfy cond: (volume copy, views)."""
    c = volrec.Client(d.instance, run_dir=str(d.run_dir))
    try:
        for _ in range(volumes):
            with c.next_volume(10.0) as vol:
                views = {k: (np.array(v), v) for k, v in vol.views.items()}
                if cond(vol.views):
                    return np.array(vol), views, vol.volume_id
    finally:
        c.close()
    raise AssertionError("no volume within %d met the condition" % volumes)


def test_published_views_equal_the_reference_of_the_same_volume(daemon):
    V, views, vid = views_of_next_volume(daemon)
    assert set(views) == {"enface_mean", "enface_max", "bscan", "slice", "plane", "render",
                          "volume"}
    Y, X, Z = V.shape
    za, zb = daemon.cfg["view"]["slab"]
    mean, mx = views_ref.enface(V, za, zb)
    bscan, slc, plane = views_ref.slices(V, Y // 2, X // 2, Z // 2)
    for name, want in (("enface_mean", mean), ("enface_max", mx), ("bscan", bscan),
                       ("slice", slc), ("plane", plane)):
        got, img = views[name]
        np.testing.assert_array_equal(got, want, err_msg=name)
        assert img.volume_id == vid and img.slab == (za, zb)
        assert img.position == (Y // 2, X // 2, Z // 2)
    # the CPU daemon renders every 5th volume: compare the render with its own volume later
    got, img = views["render"]
    assert got.shape == (256, 256) and img.volume_id <= vid
    # the default camera (docs/algorithms.md §4.4) shows the tissue where [0, 0], looking
    # along depth, gives a near-uniform square of saturated speckle
    assert img.angles_deg == (30.0, -70.0)
    flat = views_ref.render(V, 64, 64, (1.0, 1.0, 1.0), (0.0, 0.0), 0.5)
    assert got[got > 0].std() > 3 * flat[flat > 0].std(), (got[got > 0].std(),
                                                          flat[flat > 0].std())
    assert len(np.unique(got)) > 3 * len(np.unique(flat))
    # the reduced volume (§4.5) at its defaults: max_side 128, maxima
    got, img = views["volume"]
    want, f = views_ref.volume(V, 128, "max")
    np.testing.assert_array_equal(got, want, err_msg="volume")
    assert (img.block, img.reduce, img.volume_id) == (f, "max", vid)


def test_set_of_the_volume_view_reaches_the_next_volumes_and_off_removes_it(daemon):
    """view.volume.max_side and .reduce are live; 0 publishes no volume view; a value past 256
    is refused with the file's message."""
    try:
        r = daemon.volrec("set", "view.volume.max_side=7", "view.volume.reduce=mean")
        assert r.returncode == 0, r
        V, views, vid = views_of_next_volume(
            daemon, lambda v: "volume" in v and v["volume"].reduce == "mean"
            and max(v["volume"].shape) <= 7)
        want, f = views_ref.volume(V, 7, "mean")
        got, img = views["volume"]
        np.testing.assert_array_equal(got, want)
        assert img.block == f
        r = daemon.volrec("set", "view.volume.max_side=257")
        assert r.returncode != 0 and "view.volume.max_side" in r.stderr, r
        r = daemon.volrec("set", "view.volume.reduce=median")
        assert r.returncode != 0 and "view.volume.reduce" in r.stderr and "mean" in r.stderr, r
        r = daemon.volrec("set", "view.volume.max_side=0")
        assert r.returncode == 0, r
        V, views, vid = views_of_next_volume(daemon, lambda v: "volume" not in v)
        assert "bscan" in views
    finally:
        daemon.volrec("set", "view.volume.max_side=128", "view.volume.reduce=max")


def test_get_prints_one_key_or_the_whole_configuration(daemon):
    r = daemon.volrec("get", "preprocess.db_range")
    assert r.returncode == 0 and r.stdout.strip() == "[0, 100]", r
    r = daemon.volrec("get")
    assert r.returncode == 0 and "view:" in r.stdout and daemon.instance in r.stdout, r
    r = daemon.volrec("get", "preprocess.nope")
    assert r.returncode == 5 and "preprocess.nope: unknown key" in r.stderr, r


def test_get_prints_values_longer_than_4_kib_whole(bin_dir):
    d = Daemon(bin_dir)
    try:
        table = d.dir / "long"
        while len(str(table)) < 3900:
            table = table / ("d" * 200)
        table.mkdir(parents=True)
        table = table / "dispersion.txt"
        table.write_text("0\n" * d.cfg["geometry"]["samples_per_ascan"])
        d.cfg["preprocess"] = {"dispersion": {"table": str(table)}}
        d.restart(d.cfg)
        for key in ("preprocess.dispersion.table", "preprocess"):
            r = d.volrec("get", key)
            assert r.returncode == 0 and '"%s"' % table in r.stdout, (key, r.stderr)
    finally:
        d.close()


def test_set_reaches_the_views_of_the_next_volumes(daemon):
    t0 = time.monotonic()
    r = daemon.volrec("set", "view.render.angles_deg=[30,15]", "view.position=[3,4,5]",
                      "view.render.every=1")
    assert r.returncode == 0, r
    V, views, vid = views_of_next_volume(
        daemon, lambda v: v["render"].angles_deg == (30.0, 15.0) and v["bscan"].position ==
        (3, 4, 5) and v["render"].volume_id == v["bscan"].volume_id)
    ms = (time.monotonic() - t0) * 1000
    got, img = views["render"]
    ref = views_ref.render(V, 256, 256, (1.0, 1.0, 1.0), (30.0, 15.0), 0.5)
    assert np.abs(got.astype(int) - ref.astype(int)).max() <= 1
    np.testing.assert_array_equal(views["bscan"][0], V[3])
    r = daemon.volrec("get", "view.render.angles_deg")
    assert r.stdout.strip() == "[30, 15]", r
    eff = (daemon.run_dir / f"{daemon.instance}.yaml").read_text()
    assert "angles_deg: [30, 15]" in eff, eff
    print("set -> views of a published volume in %.0f ms" % ms)


def test_watch_shows_a_set_with_its_event_name_once(daemon):
    from test_tools import Lines
    w = subprocess.Popen([str(daemon.bin / "volrec"), "watch", "-i", daemon.instance, "-r",
                          str(daemon.run_dir)], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        out = Lines(w.stdout)
        out.wait_for(r"volume #\d+")
        assert daemon.volrec("set", "view.render.every=2").returncode == 0
        out.wait_for(r"\d\d:\d\d:\d\d set view\.render\.every by ")
        assert "set: set" not in out.text()
    finally:
        w.terminate()
        w.wait(timeout=10)


def test_set_is_all_or_none_with_the_files_messages(daemon):
    r = daemon.volrec("set", "preprocess.db_range=[10,80]", "preprocess.zero_pad=3")
    assert r.returncode == 5 and "preprocess.zero_pad" in r.stderr, r
    assert daemon.volrec("get", "preprocess.db_range").stdout.strip() != "[10, 80]"
    r = daemon.volrec("set", "preprocess.db_range=[50,50]")
    assert r.returncode == 5 and "preprocess.db_range: [50, 50] is empty" in r.stderr, r
    r = daemon.volrec("set", "view.position=[999,0,0]")
    assert r.returncode == 5 and "view.position: [999, 0, 0] is outside the volume" in r.stderr
    r = daemon.volrec("set", "geometry.stride=[1,1]")
    assert r.returncode == 5 and "reload" in r.stderr and "geometry.stride" in r.stderr, r
    r = daemon.volrec("set", "nonsense")
    assert r.returncode == 2 and "KEY=VALUE" in r.stderr, r
    r = daemon.volrec("set", "view.slab=[1,2]", "preprocess.db_range=[5,95]", "view.slab=[2,3]")
    assert r.returncode == 2 and "volrec set: view.slab given twice (each key once)" in r.stderr, r


def test_a_reload_drops_runtime_sets_and_says_so(daemon):
    assert daemon.volrec("set", "preprocess.db_range=[5,95]").returncode == 0
    deadline = time.monotonic() + TIMEOUT
    while daemon.volrec("get", "preprocess.db_range").stdout.strip() != "[5, 95]":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    r = daemon.volrec("reload")
    assert r.returncode == 0, r
    assert daemon.volrec("get", "preprocess.db_range").stdout.strip() == "[0, 100]"
    log = daemon.log_text()
    assert "drops the runtime changes made with set" in log and "preprocess.db_range" in log
    assert "set preprocess.db_range by uid %d" % os.getuid() in log, log


def test_control_socket_mode_and_a_user_outside_its_group(daemon):
    sock = daemon.run_dir / f"{daemon.instance}.ctl"
    assert stat.S_IMODE(sock.stat().st_mode) == 0o660 and stat.S_ISSOCK(sock.stat().st_mode)
    if os.getuid() != 0:
        pytest.skip("needs root to run a command as another user")
    os.chmod(daemon.dir, 0o755)
    os.chmod(daemon.run_dir, 0o755)
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        str(daemon.bin / "volrec"), "set", "preprocess.db_range=[1,2]",
                        "-i", daemon.instance, "-r", str(daemon.run_dir)],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 7 and "permission denied" in r.stderr, r


def test_malformed_requests_get_errors_and_the_daemon_keeps_publishing(daemon):
    s = Wire(ctl_path(daemon.run_dir, daemon.instance))
    for req in (b" ", b"{", b"[1]", b"\xff\xfe", b'{"op":"fly"}', b'{"op":"set","values":7}',
                b" " * 70000, b'{"op":"get","key":"' + b"a." * 1000 + b'"}'):
        s.send(req)
        reply = s.recv()
        assert reply["ok"] is False and reply["error"], (req[:40], reply)
    # strict JSON: what json-c reads leniently is refused, with where and why
    for req, why in ((b"{'op':'get'}", "a single quote at byte 1"),
                     (b'{"op":"get",}', "unexpected character at byte 12"),
                     (b'{"op":"set","values":{"view.render.every":4,}}', "unexpected character"),
                     (b'{"op":"get"} x', "more text after the object, at byte 13"),
                     (b'{"op":"get"}{"op":"get"}', "more text after the object, at byte 12"),
                     (b'{"op":"set","values":{"view.render.every":NaN}}', "not finite"),
                     # json-c keeps the last of two equal keys and cuts keys at U+0000
                     (b'{"op":"set","values":{"view.render.every":"zzz","view.render.every":4}}',
                      "duplicate key 'view.render.every' at byte 48"),
                     (b'{"op":"set","op":"get"}', "duplicate key 'op' at byte 12"),
                     (b'{"op":"set","values":{"view.render.every\\u0000; rm -rf":5}}',
                      "the key at byte 22 holds U+0000 (NUL) after 'view.render.every'"),
                     (b'{"op":"get\\u0000xyz"}', "the string at byte 6 holds U+0000"),
                     (b'{"op":"get","key":"view.render.every\\u0000junk"}', "holds U+0000")):
        s.send(req)
        reply = s.recv()
        assert reply == {"ok": False, "error": reply["error"]}, (req, reply)
        assert reply["error"].startswith("request is not one JSON object: ") and \
            why in reply["error"], (req, reply)
    r = daemon.volrec("get", "view.render.every")
    assert r.returncode == 0 and r.stdout.strip() not in ("4", "5"), r
    # unknown fields and an id that is not a string are refused, not ignored
    for req, why in ((b'{"op":"get","kye":"view.render.every"}',
                      "get: unknown field 'kye' (it takes op, id, expires_ms and key generation)"),
                     (b'{"op":"reset_history","values":{"x":1}}',
                      "reset_history: unknown field 'values' (it takes op, id, expires_ms)"),
                     (b'{"op":"get","id":5}', "id: must be a string")):
        s.send(req)
        reply = s.recv()
        assert reply == {"ok": False, "error": reply["error"]} and why in reply["error"], \
            (req, reply)
    s.send(b'{"op":"get","key":"preprocess.db_range","id":"q1"}')
    reply = s.recv()
    assert reply["ok"] is True and reply["id"] == "q1", reply
    # a flood of good requests is answered too
    for _ in range(200):
        s.send(b'{"op":"status"}')
        assert s.recv()["ok"] is True
    # an empty datagram ends the connection (clients never send one)
    s.send(b"")
    with pytest.raises(ConnectionError):
        s.recv()
    s.close()
    daemon.one_volume(10.0)
    assert daemon.proc.poll() is None
