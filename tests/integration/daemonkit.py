# SPDX-License-Identifier: MIT
"""What the tests that run a volrecd of their own share (test_daemon, test_tools, viewkit)."""
import os


def remove_segments(instance):
    """Remove the shared-memory segments of instance (what a killed volrecd leaves)."""
    for name in (f"volrec.{instance}", f"volrec.{instance}.readers"):
        try:
            os.unlink(f"/dev/shm/{name}")
        except FileNotFoundError:
            pass


def slot_volumes(instance):
    """Every volume held in the slots of instance's data segment, read straight from
    /dev/shm/volrec.<instance> (protocol.md §2): [(slot header dict, numpy copy)] in sequence
    order. For a daemon that has published all it will (a replay file read once): with more
    slots than volumes, none was overwritten, so a reader that subscribes late still sees all
    of them. A slot being written (odd sequence word) or rewritten while copied is an error."""
    import mmap

    import numpy as np

    from volrec._protocol import DTYPES, SHM_HEADER, SLOT_HEADER

    with open(f"/dev/shm/volrec.{instance}", "rb") as f:
        m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    try:
        h = SHM_HEADER.unpack(m, 0)
        shape = (h["ny"], h["nx"], h["nz"])
        out = []
        for slot in range(h["slot_count"]):
            at = h["slot_table_offset"] + slot * h["slot_header_size"]
            sh = SLOT_HEADER.unpack(m, at)
            if sh["sequence"] == 0:
                continue  # never written
            assert sh["sequence"] % 2 == 0, f"slot {slot} is being written: {sh}"
            vol = np.frombuffer(m, DTYPES[h["dtype"]], shape[0] * shape[1] * shape[2],
                                h["data_offset"] + slot * h["slot_stride"]).reshape(shape).copy()
            again = SLOT_HEADER.unpack(m, at)
            assert again == sh, f"slot {slot} rewritten while read: {sh} then {again}"
            out.append(({**sh, "sequence": sh["sequence"] // 2, "slot": slot,
                         "session": h["session_id"]}, vol))
        return sorted(out, key=lambda r: r[0]["sequence"])
    finally:
        m.close()
