# SPDX-License-Identifier: MIT
"""What a member of the volrec group can ask of the control socket is bounded: a render whose
cost exceeds the cap is refused, one below it that the CPU cannot afford degrades the render
(status says why) and never the pipeline or the daemon's stop, and keys that name files are
never set over the wire (nor does any message show a file's contents)."""
import json
import signal
import time

import pytest

import volrec
from test_tools import TIMEOUT, Daemon


@pytest.fixture(scope="module")
def daemon(bin_dir):
    d = Daemon(bin_dir)
    yield d
    d.close()


def status(d):
    r = d.volrec("status", "--json")
    assert r.returncode == 0, r
    return json.loads(r.stdout)


def wait_status(d, cond, what):
    deadline = time.monotonic() + TIMEOUT
    while True:
        st = status(d)
        if cond(st):
            return st
        assert time.monotonic() < deadline, "%s: never seen; last status %s" % (what, st)
        time.sleep(0.1)


def test_a_render_beyond_the_cost_cap_is_refused_untouched(daemon):
    # the outside tester's request: 1024 x 1024 rays of just under 10^6 samples each (the
    # cap per ray; this volume's diagonal is 261 voxels)
    r = daemon.volrec("set", "view.render.size=[1024,1024]", "view.render.step=0.000262",
                      "view.render.every=1")
    assert r.returncode != 0, r
    assert "view.render.size: a render of 1024 x 1024 rays" in r.stderr, r.stderr
    assert "more than the 1073741824 allowed" in r.stderr, r.stderr
    r = daemon.volrec("get", "view.render.size")
    assert r.returncode == 0 and r.stdout.strip() == "[256, 256]", r


def test_a_costly_render_degrades_the_render_not_the_pipeline_nor_the_stop(bin_dir):
    d = Daemon(bin_dir)
    try:
        # 1024 x 1024 rays x ~970 samples: under the cap, seconds of one CPU core per render
        r = d.volrec("set", "view.render.size=[1024,1024]", "view.render.step=0.27",
                     "view.render.every=1")
        assert r.returncode == 0, r
        st = wait_status(d, lambda s: s["render"]["degraded"], "render degraded")
        assert st["state"] == "degraded", st
        assert st["render"]["every"] > 1 and st["render"]["configured_every"] == 1, st
        assert "view.render: a render" in st["render"]["reason"], st
        # the pipeline goes on: volumes keep coming, each within a few periods
        published = st["volumes_published"]
        for _ in range(10):
            d.one_volume(5.0)
        assert status(d)["volumes_published"] >= published + 10
        assert "warning: view.render: a render" in d.log_text()
        # a reverting set is applied, and the render is as configured again
        r = d.volrec("set", "view.render.size=[64,64]", "view.render.step=0")
        assert r.returncode == 0, r
        st = wait_status(d, lambda s: not s["render"]["degraded"] and s["state"] == "running",
                         "render as configured")
        assert st["render"]["every"] == 1, st
        # and a stop while a costly render is asked for ends within the unit's 30 s
        r = d.volrec("set", "view.render.size=[1024,1024]", "view.render.step=0.27")
        assert r.returncode == 0, r
        wait_status(d, lambda s: s["render"]["abandoned"] > 0 or s["render"]["degraded"],
                    "costly render again")
        t0 = time.monotonic()
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=30) == 0, d.log_text()
        assert time.monotonic() - t0 < 30
    finally:
        d.close()


@pytest.mark.parametrize("key,value,why", [
    ("preprocess.dispersion.table", "/etc/shadow", "names a file"),
    ("preprocess.dispersion.table", "../../etc/passwd", "names a file"),
    ("preprocess.dispersion.table", "/proc/self/maps", "names a file"),
    ("preprocess.dispersion", "{table: /etc/passwd}", "names a file"),
    ("preprocess", "{dispersion: {table: /etc/passwd}}", "structural"),  # holds more
])
def test_keys_that_name_files_are_never_set_over_the_wire(daemon, key, value, why):
    r = daemon.volrec("set", "%s=%s" % (key, value))
    assert r.returncode != 0, r
    assert why in r.stderr, r.stderr
    for leak in ("root:", "/bin/", "[heap]", "r-xp"):
        assert leak not in r.stderr, r.stderr
    r = daemon.volrec("get", "preprocess.dispersion")
    assert r.returncode == 0 and r.stdout.strip() == "{}", r
    # the daemon goes on publishing
    c = volrec.Client(daemon.instance, run_dir=str(daemon.run_dir))
    try:
        with c.next_volume(10.0):
            pass
    finally:
        c.close()
