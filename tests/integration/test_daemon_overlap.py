# SPDX-License-Identifier: MIT
"""volrecd's overlap mode (B-scans submitted as they arrive, the next epoch submitted while one
is in flight, entries released at be_epoch_wait) on the CPU backend, forced with
VOLRECD_PIPELINE_OVERLAP=1 (the CPU backend's be_epoch_finish_async is the synchronous finish,
so the pipeline's bookkeeping is what is under test here: the CUDA backend takes the same path
by default). The daemon tests that involve epochs, reloads, drops and stops run again in this
mode, plus the cases only this mode has."""
import signal
import struct

import pytest

from test_daemon import (  # noqa: F401  (re-run in overlap mode; fixtures used by name)
    TIMEOUT, daemons, drops_identity, shim_daemon,
    test_c_and_python_clients_match_volrec_process,
    test_live_reload_changes_the_next_volumes,
    test_sigterm_stops_cleanly_and_unlinks_shm,
    test_sigusr2_resets_history_and_sigusr1_logs_statistics,
    test_source_faster_than_processing_drops_are_counted_exactly,
    test_structural_reload_starts_a_new_session_clients_follow,
)


VOL = "<IHHIIQQQQIIIIiiQQQQI"  # struct volrec_vol_msg (protocol.h); flags last


@pytest.fixture(autouse=True)
def overlap_mode(monkeypatch):
    monkeypatch.setenv("VOLRECD_PIPELINE_OVERLAP", "1")


def test_overlap_mode_is_announced(daemons):
    d = daemons().serve()
    d.vol()
    assert "pipeline: overlap" in d.log_text()
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0


def test_overlap_env_value_is_checked(daemons, monkeypatch):
    monkeypatch.setenv("VOLRECD_PIPELINE_OVERLAP", "yes")
    d = daemons().start()
    assert d.wait_exit() == 1
    assert "VOLRECD_PIPELINE_OVERLAP: 'yes' is not 0 (off) or 1 (on)" in d.log_text()


def test_overlap_source_errors_cut_epochs_exactly(daemons, build_dir):
    # acquire() fails 4 times, in the middle of an epoch whose first B-scans processing has
    # (usually) already submitted: that epoch is finished without being published, its
    # B-scans counted as incomplete_epoch, and the history reset before the next volume
    d, control = shim_daemon(daemons, build_dir)
    d.serve()
    d.status(lambda m: m["volumes_published"] >= 2)
    control.write_text("error 4\n")
    d.event("source_fault")
    d.event("source_recovered")
    st = d.status(lambda m: m["state"] == "running" and m["drops"]["source_error"] == 4)
    assert drops_identity(st), st
    assert st["bscans"]["processed"] % 12 == 0
    assert st["drops"]["incomplete_epoch"] < 12 * 4
    if "cut short" in d.log_text():
        # the made-up B-scans entered the history: reset, and the next volume says so
        if not any(t == "event" and m.get("event") == "history_reset" for t, m in d.messages):
            d.event("history_reset")
        seen = [struct.unpack_from(VOL, body)[19] for t, body in d.messages if t == "vol"]
        if not any(f & 0x2 for f in seen):
            d.vol(lambda m: m["flags"] & 0x2)
        assert st["drops"]["incomplete_epoch"] > 0
    before = d.vol()["sequence"]
    # publishing goes on, in order
    seqs = [d.vol(lambda m: m["sequence"] > before)["sequence"] for _ in range(3)]
    assert seqs == sorted(seqs)
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0
