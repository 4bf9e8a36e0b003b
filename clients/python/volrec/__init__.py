# SPDX-License-Identifier: MIT
"""Read the volumes a volrecd instance publishes: zero-copy numpy views on its shared memory,
woken by its ZeroMQ notifications, leased while in use (docs/protocol.md, docs/clients.md).

    import volrec
    with volrec.Client("default") as client:
        with client.next_volume(timeout=1.0) as vol:   # numpy array [Y][X][Z], read-only
            print(vol.sequence, vol.shape, vol.mean())
        # leaving the block releases the lease; TornRead if the daemon overwrote it meanwhile

A Client is not thread-safe: use one per thread. It holds at most one volume at a time.

Modules: errors (the exceptions), client (Client, Lease, VolumeArray), _protocol (the binary
layout of protocol.h, checked against it by the tests), _segment (mapping a segment).
"""
# the protocol constants stay reachable as volrec.<NAME>, as before the package was split
from ._protocol import (DEFAULT_RUN_DIR, DTYPES, FLAG_DROPPED_BEFORE, FLAG_RESET, FLAG_VIEWS, LEASE_MAGIC,
                        MAX_READERS, MAX_SLOTS, PROTO_MAJOR, PROTO_MINOR, SHM_MAGIC, SLOT_ALIGN,
                        SLOT_NONE, STATE_CLOSED, STATE_INIT, STATE_LIVE, TEXT_MAX, VOL_MAGIC,
                        decode_vol)
from .client import Client, Lease, VolumeArray
from .channels import ChannelArray, Channels
from .views import ImageArray, Views
from .errors import (Busy, NoDaemon, NotReady, ProtocolError, ReadersFull, StaleSegment, Timeout,
                     TornRead, VolrecError)

__version__ = "0.1.0"

__all__ = [
    "Client", "VolumeArray", "Lease", "ImageArray", "Views", "ChannelArray", "Channels", "VolrecError", "NoDaemon", "StaleSegment", "NotReady",
    "ProtocolError", "TornRead", "Timeout", "Busy", "ReadersFull", "PROTO_MAJOR", "PROTO_MINOR", "decode_vol",
]

