# SPDX-License-Identifier: MIT
"""The channels of a slot as the Python client reads them (volrec/channels.py, protocol 2.1,
docs/protocol.md §2.7): arrays on the buffer itself, the meaning of their values, a writer older
than 2.1 read as the structure alone, and descriptors that name no channel refused."""
import math

import numpy as np
import pytest

from volrec import Channels, ProtocolError
from volrec import _protocol as proto
from volrec.channels import read_channels

SHAPE = (2, 3, 4)
VB = 24  # one channel's bytes


def segment(descs):
    """A buffer holding a header region with the channel table at 512 and one slot's data at
    4096: channel c filled with 10 + c."""
    buf = bytearray(4096 + len(descs) * VB)
    for c, d in enumerate(descs):
        buf[512 + c * proto.CHANNEL_DESC.size:512 + (c + 1) * proto.CHANNEL_DESC.size] = \
            proto.CHANNEL_DESC.pack(**d)
        buf[4096 + c * VB:4096 + (c + 1) * VB] = bytes([10 + c]) * VB
    h = {"ny": 2, "nx": 3, "nz": 4, "volume_bytes": VB, "channels": len(descs),
         "channel_desc_size": proto.CHANNEL_DESC.size, "channel_table_offset": 512}
    return buf, h


def test_channels_are_views_of_the_slot_with_their_meaning():
    buf, h = segment([
        dict(kind=0, value_lo=0.0, value_hi=100.0, units=b"dB"),
        dict(kind=1, method=0, value_lo=0.0, value_hi=50.0, units=b"dB^2", mask_db=30.0,
             half_window=2),
        dict(kind=2, method=1, value_lo=-math.pi, value_hi=math.pi, units=b"rad",
             velocity_lo_mm_s=-0.5, velocity_hi_mm_s=0.5, period_us=20.0, mask_db=30.0,
             flags=proto.CHANNEL_BULK),
    ])
    ch = read_channels(memoryview(buf), h, 0, 4096)
    assert list(ch) == ["structure", "angio", "doppler"] and len(ch) == 3
    for c, name in enumerate(ch):
        assert ch[name].shape == SHAPE and (ch[name] == 10 + c).all()
    buf[4096 + VB] = 200  # a view of the buffer, not a copy
    assert ch["angio"][0, 0, 0] == 200
    s, a, d = ch["structure"], ch["angio"], ch["doppler"]
    assert (s.units, s.value_range, s.method, s.mask_db, s.velocity_mm_s) == \
        ("dB", (0.0, 100.0), None, None, None)
    assert (a.units, a.method, a.value_range, a.mask_db, a.half_window) == \
        ("dB^2", "svar", (0.0, 50.0), 30.0, 2)
    assert (d.method, d.period_us, d.bulk, d.velocity_mm_s) == ("ascan", 20.0, True, (-0.5, 0.5))
    np.testing.assert_allclose(a.values()[0, 0, :2], [200 * 50 / 255, 11 * 50 / 255])
    np.testing.assert_allclose(d.velocities_mm_s()[0, 0, 0], -0.5 + 12 / 255)
    with pytest.raises(KeyError, match="not in this volume"):
        Channels({"structure": s})["doppler"]
    with pytest.raises(KeyError, match="is not a channel"):
        ch["flow"]


def test_an_older_writer_holds_the_structure_of_an_unknown_meaning():
    buf, h = segment([dict(kind=0)])
    h["channels"] = 0  # a 2.0 writer: reserved, zero
    ch = read_channels(memoryview(buf), h, 0, 4096)
    assert list(ch) == ["structure"]
    s = ch["structure"]
    assert s.value_range is None and s.units == "" and (s == 10).all()
    with pytest.raises(ValueError, match="did not say"):
        s.values()
    # a mapping that is no two different finite numbers is unknown, never used
    buf, h = segment([dict(kind=0, value_lo=5.0, value_hi=5.0)])
    assert read_channels(memoryview(buf), h, 0, 4096)["structure"].value_range is None


@pytest.mark.parametrize("kinds", [[3], [1, 1]])
def test_descriptors_naming_no_channel_are_refused(kinds):
    buf, h = segment([dict(kind=k) for k in kinds])
    with pytest.raises(ProtocolError, match="unknown or given twice"):
        read_channels(memoryview(buf), h, 0, 4096)
