# SPDX-License-Identifier: MIT
"""One engine: `volrec process` and volrecd run the same pipeline (pipeline/), so the volumes
they make from the same replay file are bit-identical, whatever the depth (one epoch at a time,
or two in flight) and the acquisition path (zero-copy references or copies) on either side;
also on random configurations of test_algorithms."""
import json
import random
import subprocess

import h5py
import numpy as np
import pytest

from daemonkit import slot_volumes
from test_daemon import daemons  # noqa: F401  (fixtures used by name)
from test_algorithms import random_configuration
from test_daemon_zerocopy import env, replay_daemon

EPOCHS = 9  # one offset cycle at stride [3, 3]
SLOTS = 16  # more than EPOCHS: a reader that falls behind (a sanitizer) never loses a slot


def process(bin_dir, d, overlap, zero_copy, epochs=EPOCHS):
    cfg = json.loads(json.dumps(d.cfg))
    path = d.dir / f"process-{overlap}-{zero_copy}.yaml"
    path.write_text(json.dumps(cfg))
    out = d.dir / f"process-{overlap}-{zero_copy}.h5"
    e = {"VOLRECD_PIPELINE_OVERLAP": overlap, "VOLRECD_ZERO_COPY": zero_copy}
    import os
    r = subprocess.run([str(bin_dir / "volrec"), "process", "-c", str(path), "-o", str(out)],
                       capture_output=True, text=True, timeout=120, env={**os.environ, **e})
    assert r.returncode == 0, r.stderr
    with h5py.File(out, "r") as f:
        assert list(f["epoch"][:]) == list(range(epochs))
        return np.array(f["/volumes"])


def daemon_volumes(daemons, bin_dir, epochs, slots, overlap, zero_copy, **over):
    """A daemon over a replay file of `epochs` read once (loop: false), and every volume it
    published. The source starts with the daemon, before any reader could subscribe, so the
    volumes are not taken from messages: once the status says all were published they are
    read from the slots (more slots than epochs: none overwritten)."""
    d = replay_daemon(daemons, bin_dir, epochs=epochs, **over,
                      **{"source.rate": 20, "source.replay.loop": False, "output.slots": slots})
    assert slots >= epochs
    d.start(env(overlap, zero_copy))
    d.subscribe()
    d.ready()
    d.status(lambda m: m["volumes_published"] >= epochs and m["bscans"]["in_ring"] == 0)
    recs = slot_volumes(d.instance)
    assert sorted(h["epoch"] for h, _ in recs) == list(range(epochs)), [h for h, _ in recs]
    return d, recs


@pytest.mark.parametrize("overlap", ["0", "1"])
@pytest.mark.parametrize("zero_copy", ["1", "0"])
def test_process_and_daemon_make_bit_identical_volumes_from_a_replay_file(daemons, bin_dir,
                                                                          overlap, zero_copy):
    # VolRec (interlacing and the temporal history)
    d, recs = daemon_volumes(daemons, bin_dir, EPOCHS, SLOTS, overlap, zero_copy)
    other = "1" if overlap == "0" else "0"
    ref = process(bin_dir, d, overlap, zero_copy)
    ref_other = process(bin_dir, d, other, "1" if zero_copy == "0" else "0")
    assert ref.shape[0] == EPOCHS and np.array_equal(ref, ref_other)
    for h, vol in recs:
        assert vol.shape == ref.shape[1:]
        assert np.array_equal(vol, ref[h["epoch"]]), f"epoch {h['epoch']}"
    d.signal(15)
    assert d.wait_exit() == 0, d.log_text()


def needs_files(over):
    pp = over["preprocess"]
    return ("table" in pp.get("resample", {}) or "table" in pp.get("dispersion", {})
            or "reference" in pp["background"])


# test_algorithms' random configurations that need no table or reference file
RANDOM = [s for s in range(40) if not needs_files(random_configuration(s)[0])][:8]


@pytest.mark.parametrize("seed", RANDOM)
def test_process_and_daemon_agree_on_random_configurations(daemons, bin_dir, seed):
    """Edge geometry and option combinations (odd K, one A-scan or B-scan, packed samples,
    crops, flips, bidirectional scans, strides to 3 x 3), depth and acquisition path drawn too."""
    over, _ = random_configuration(seed)
    r = random.Random(seed)
    overlap, zero_copy = r.choice(["0", "1"]), r.choice(["0", "1"])
    g = over["geometry"]
    epochs = 2 * g["stride"][0] * g["stride"][1] + 1
    # whole sections: the random ones give every key of the daemons' base geometry
    d, recs = daemon_volumes(daemons, bin_dir, epochs, 2 * epochs, overlap, zero_copy, **over)
    ref = process(bin_dir, d, overlap, zero_copy, epochs)
    for h, vol in recs:
        assert np.array_equal(vol, ref[h["epoch"]]), f"epoch {h['epoch']}: {json.dumps(over)}"
    d.signal(15)
    assert d.wait_exit() == 0, d.log_text()
