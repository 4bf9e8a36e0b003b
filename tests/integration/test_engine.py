# SPDX-License-Identifier: MIT
"""One engine: `volrec process` and volrecd run the same pipeline (pipeline/), so the volumes
they make from the same replay file are bit-identical, whatever the depth (one epoch at a time,
or two in flight) and the acquisition path (zero-copy references or copies) on either side."""
import json
import subprocess

import h5py
import numpy as np
import pytest

from test_daemon import TIMEOUT, daemons, read_records  # noqa: F401  (fixtures used by name)
from test_daemon_zerocopy import env, replay_daemon

EPOCHS = 9  # one offset cycle at stride [3, 3]
SLOTS = 16  # more than EPOCHS: a reader that falls behind (a sanitizer) never loses a slot


def process(bin_dir, d, overlap, zero_copy):
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
        assert list(f["epoch"][:]) == list(range(EPOCHS))
        return np.array(f["/volumes"])


@pytest.mark.parametrize("overlap", ["0", "1"])
@pytest.mark.parametrize("zero_copy", ["1", "0"])
def test_process_and_daemon_make_bit_identical_volumes_from_a_replay_file(daemons, bin_dir,
                                                                          overlap, zero_copy):
    # VolRec (interlacing and the temporal history) over a whole file read once (loop: false)
    d = replay_daemon(daemons, bin_dir, epochs=EPOCHS,
                      **{"source.rate": 20, "source.replay.loop": False, "output.slots": SLOTS})
    d.start(env(overlap, zero_copy))
    d.ready()
    reader, out = d.reader(EPOCHS, TIMEOUT)
    stdout, stderr = reader.communicate(timeout=TIMEOUT + 10)
    recs = read_records(out)
    assert len(recs) >= EPOCHS - 2, stdout + stderr
    other = "1" if overlap == "0" else "0"
    ref = process(bin_dir, d, overlap, zero_copy)
    ref_other = process(bin_dir, d, other, "1" if zero_copy == "0" else "0")
    assert ref.shape[0] == EPOCHS and np.array_equal(ref, ref_other)
    for h, vol in recs:
        assert vol.shape == ref.shape[1:]
        assert np.array_equal(vol, ref[h["epoch"]]), f"epoch {h['epoch']}"
    d.signal(15)
    assert d.wait_exit() == 0, d.log_text()
