# SPDX-License-Identifier: MIT
"""volrecd's zero-copy acquisition (the ref_regions/acquire_ref/release_ref extension of
include/volrec/shim.h) with the replay source on the CPU backend, whose host_register is a
no-op, so the backend reads straight from the file's mapping: volumes bit-identical to
`volrec process` in both pipeline modes and on the copying path, looping, the end of a file,
exact drops, the environment switch, and a shim without the extension."""
import json
import signal
import subprocess

import pytest

from test_daemon import (  # noqa: F401  (fixtures used by name)
    TIMEOUT, daemons, drops_identity, process_volumes, read_records, shim_daemon,
)

EPOCHS = 9  # one whole offset cycle of stride [3, 3]: the file may loop
LOOP_EPOCHS = 5  # at stride [1, 1]


def replay_daemon(daemons, bin_dir, epochs=EPOCHS, **over):
    """A daemon on the base geometry (with over) reading a `volrec sim` file of epochs."""
    d = daemons(**over)
    sim = json.loads(json.dumps(d.cfg))
    sim["source"]["rate"] = 0
    path = d.dir / "sim.yaml"
    path.write_text(json.dumps(sim))
    rp = d.dir / "in.vrr"
    r = subprocess.run([str(bin_dir / "volrec"), "sim", "-c", str(path), "-o", str(rp),
                        "-n", str(epochs)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    loop = d.cfg["source"].get("replay", {}).get("loop", True)
    d.cfg["source"] = {"type": "replay", "rate": d.cfg["source"]["rate"],
                       "replay": {"path": str(rp), "loop": loop}}
    d.write_config(d.cfg)
    return d


def env(overlap, zero_copy):
    e = {"VOLRECD_PIPELINE_OVERLAP": overlap}
    if zero_copy is not None:
        e["VOLRECD_ZERO_COPY"] = zero_copy
    return e


@pytest.mark.parametrize("overlap", ["0", "1"])
@pytest.mark.parametrize("zero_copy", [None, "0"])
def test_replay_volumes_equal_volrec_process_on_both_paths(daemons, bin_dir, overlap,
                                                           zero_copy):
    # mode none at stride 1: each volume depends on its own epoch only, so a looping file's
    # epoch e must give `volrec process`'s volume of file epoch e mod LOOP_EPOCHS
    d = replay_daemon(daemons, bin_dir, epochs=LOOP_EPOCHS,
                      **{"geometry.stride": [1, 1], "reconstruct.mode": "none"}).start(
        env(overlap, zero_copy))
    d.subscribe()
    d.ready()
    # more volumes than the file holds: the replay loops while references are held
    reader, out = d.reader(2 * LOOP_EPOCHS + 2, TIMEOUT)
    stdout, stderr = reader.communicate(timeout=TIMEOUT + 10)
    assert reader.returncode == 0, stdout + stderr
    recs = read_records(out)
    assert len(recs) == 2 * LOOP_EPOCHS + 2
    assert max(h["epoch"] for h, _ in recs) >= LOOP_EPOCHS
    st = d.status()
    want = "zero-copy" if zero_copy is None else "copy"
    assert st["source"]["acquisition"] == want, st["source"]
    assert drops_identity(st), st
    log = d.log_text()
    if zero_copy is None:
        assert "acquisition: zero-copy (source replay's buffers, 1 region of" in log, log
    else:
        assert "acquisition: copy into the ring (VOLRECD_ZERO_COPY=0)" in log, log
    ref = process_volumes(d, bin_dir, LOOP_EPOCHS)
    for h, vol in recs:
        assert vol.shape == ref.shape[1:]
        assert (vol == ref[h["epoch"] % LOOP_EPOCHS]).all(), f"epoch {h['epoch']}"
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0, d.log_text()


@pytest.mark.parametrize("overlap", ["0", "1"])
def test_zero_copy_end_of_file_publishes_every_epoch_and_releases_all(daemons, bin_dir,
                                                                      overlap):
    d = replay_daemon(daemons, bin_dir, **{"source.rate": 0,
                                           "source.replay.loop": False}).start(
        env(overlap, None))
    d.subscribe()
    d.ready()
    # every epoch published and the acquire that met the end of the file counted (the last
    # volume can be published before the acquisition thread tries the next epoch)
    st = d.status(lambda m: m["volumes_published"] == EPOCHS and m["bscans"]["in_ring"] == 0
                  and m["drops"]["total"] >= 1)
    assert st["source"]["acquisition"] == "zero-copy"
    assert st["bscans"]["acquired"] == EPOCHS * 12 == st["bscans"]["processed"], st
    # the acquire that met the end of the file counts as one source_error (as when copying)
    assert st["drops"]["total"] == st["drops"]["source_error"] == 1, st
    assert drops_identity(st), st
    assert "replay file ended" in d.log_text()
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0, d.log_text()


@pytest.mark.parametrize("overlap", ["0", "1"])
def test_zero_copy_drops_are_counted_exactly(daemons, bin_dir, overlap):
    # paced far faster than processing, the smallest ring: references are dropped (released)
    # as ring_full
    d = replay_daemon(daemons, bin_dir, **{"source.rate": 100000, "pipeline.ring_bscans": 24,
                                           "pipeline.overflow": "drop_epoch"}).start(
        env(overlap, None))
    d.subscribe()
    d.ready()
    st = d.status(lambda m: m["drops"]["ring_full"] > 0 and m["volumes_published"] >= 3)
    assert st["source"]["acquisition"] == "zero-copy"
    for _ in range(4):
        st = d.status()
        assert drops_identity(st), st
        assert st["bscans"]["processed"] % 12 == 0
    assert st["state"] == "running"
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0, d.log_text()
    assert "release_ref" not in d.log_text()


def test_zero_copy_env_value_is_checked(daemons, bin_dir):
    d = replay_daemon(daemons, bin_dir).start({"VOLRECD_ZERO_COPY": "yes"})
    assert d.wait_exit() == 1
    assert "VOLRECD_ZERO_COPY: 'yes' is not 0" in d.log_text()


def test_shim_without_the_extension_copies(daemons, build_dir):
    d, _ = shim_daemon(daemons, build_dir)
    d.serve()
    st = d.status(lambda m: m["volumes_published"] >= 2)
    assert st["source"]["acquisition"] == "copy"
    assert "acquisition: copy into the ring (source fault-shim has no zero-copy calls)" in \
        d.log_text() or "has no zero-copy calls" in d.log_text()
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0
