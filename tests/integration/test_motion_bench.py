# SPDX-License-Identifier: MIT
"""bench/motion_bench.py (docs/algorithms.md §3b): one short scene end to end (the JSON and the
markdown table it writes), its refusals, and its held-out scenes as the docs list them."""
import json
import re
import subprocess

import pytest

pytestmark = pytest.mark.numerics  # not in the TSan stage (docs/testing.md)

pytest.importorskip("h5py")


def bench(src_dir, *args):
    return subprocess.run(["/usr/bin/python3", str(src_dir / "bench" / "motion_bench.py"),
                           *map(str, args)], capture_output=True, text=True, timeout=600)


def test_one_scene_end_to_end(bin_dir, src_dir, tmp_path):
    if not (bin_dir / "volrec").exists():
        pytest.skip("volrec not built")
    out = tmp_path / "m.json"
    r = bench(src_dir, "--build", bin_dir.parent, "--scene", "^anterior-jump-s1$", "--epochs",
              12, "--out", out)
    assert r.returncode == 0, r.stderr
    d = json.loads(out.read_text())
    assert d["epochs"] == 12 and d["backend"] == "cpu" and len(d["loadavg_start"]) == 3
    (s,) = d["scenes"]
    assert (s["name"], s["phantom"], s["motion"], s["seed"]) == ("anterior-jump-s1", "anterior",
                                                                   "jump", 1)
    q = s["quality"]
    assert q["volume_shape"] == [48, 48, 128] and q["first_scored_epoch"] == 9
    for mode in ("current_linear", "noncumulative", "product_exp_tau3", "adaptive",
                 "compensated", "registered"):
        m = q["modes"][mode]
        assert 5 < m["psnr_db"] < 60 and len(m["ssim_per_epoch"]) == 12
    md = (tmp_path / "m.md").read_text()
    assert "**anterior** (48 × 48 × 128, stride 3, K = 256" in md
    assert re.search(r"\| jump, seed 1 \|( \**\d+\.\d\d / 0\.\d{3}\** \|){6}$", md, re.M), md


def test_refusals(src_dir, tmp_path):
    r = bench(src_dir, "--scene", "no-such-scene")
    assert r.returncode == 1 and "no scene matches 'no-such-scene'" in r.stderr
    r = bench(src_dir, "--scene", "skin-static", "--epochs", 36)
    assert r.returncode == 1 and "--epochs 36 leaves no epoch after S = sx * sy" in r.stderr


def test_held_out_scenes_are_those_the_docs_name(src_dir):
    r = bench(src_dir, "--list")
    assert r.returncode == 0, r.stderr
    rows = [line.split("\t") for line in r.stdout.splitlines()]
    held = {re.sub(r"-s\d+$", "", name) for name, h, _ in rows if h == "held out"}
    kept = {re.sub(r"-s\d+$", "", name) for name, h, _ in rows if h != "held out"}
    doc = (src_dir / "docs" / "algorithms.md").read_text()
    para = re.search(r"\*\*Held out\.\*\*(.*?)\n\n", doc, re.S).group(1).replace("\n", " ")
    named = {"skin-" + n.split("-", 1)[1] for n in held | kept if n.startswith("skin-")}
    for phantom, text in re.findall(r"`(curved|anterior)` ([^`.]*)", para):
        named |= {f"{phantom}-{m}" for m in re.split(r",|\s", text) if m and m != "and"}
    assert "every `skin` scene" in para
    assert held == named, (held, named)
