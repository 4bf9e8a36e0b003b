# SPDX-License-Identifier: MIT
"""The exceptions of the volrec package. Each maps to one error of the C library libvolrec
(include/volrec/client.h), named in its docstring."""

__all__ = [
    "VolrecError", "NoDaemon", "StaleSegment", "NotReady", "ProtocolError", "TornRead",
    "Timeout", "Busy", "ReadersFull",
]


class VolrecError(Exception):
    """Base of the errors of this package."""


class NoDaemon(VolrecError, FileNotFoundError):
    """No daemon publishes the instance: its shared memory does not exist (-ENOENT)."""


class StaleSegment(NoDaemon):
    """The instance's shared memory exists but no live writer publishes into it: its daemon
    crashed or stopped (a segment kept with ipc.keep_shm), so its volumes are old. libvolrec's
    writer-alive test (volrec_segment_info.writer_alive == 0); a NoDaemon, as nothing publishes."""


class NotReady(VolrecError, BlockingIOError):
    """The shared memory is being created or rebuilt: its header or lease table is not
    initialized yet (-EAGAIN). Retry; Client() does so by itself within open_timeout."""


class ProtocolError(VolrecError):
    """A segment or message of an unknown major version, or malformed (-EPROTO)."""


class TornRead(VolrecError):
    """The volume was overwritten while it was held: what was read may be inconsistent
    (-ESTALE)."""


class Timeout(VolrecError, TimeoutError):
    """No volume arrived within the timeout (-ETIMEDOUT)."""


class Busy(VolrecError):
    """A volume is still held by this client; release it (leave its with block) first
    (-EBUSY)."""


class ReadersFull(VolrecError):
    """Every reader entry of the instance's shared memory is taken: ipc.max_readers clients
    are open (-EUSERS). Close one, or raise ipc.max_readers."""
