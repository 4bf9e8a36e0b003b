# SPDX-License-Identifier: MIT
"""Read the volumes a volrecd instance publishes: zero-copy numpy views on its shared memory,
woken by its ZeroMQ notifications, leased while in use (docs/protocol.md, docs/clients.md).

    import volrec
    with volrec.Client("default") as client:
        with client.next_volume(timeout=1.0) as vol:   # numpy array [Y][X][Z], read-only
            print(vol.sequence, vol.shape, vol.mean())
        # leaving the block releases the lease; TornRead if the daemon overwrote it meanwhile

A Client is not thread-safe: use one per thread. It holds at most one volume at a time.
"""
import errno
import fcntl
import mmap
import os
import re
import struct
import time

import numpy as np
import zmq

__all__ = [
    "Client", "VolumeArray", "VolrecError", "NoDaemon", "ProtocolError", "TornRead",
    "Timeout", "Busy", "PROTO_MAJOR", "PROTO_MINOR",
]

PROTO_MAJOR = 1
PROTO_MINOR = 0
SHM_MAGIC = int.from_bytes(b"VRSHMSEG", "little")
LEASE_MAGIC = int.from_bytes(b"VRLEASES", "little")
VOL_MAGIC = int.from_bytes(b"VRVM", "little")
SLOT_ALIGN = 2 << 20
SLOT_NONE = 0xFFFFFFFF
MAX_SLOTS = 64
MAX_READERS = 1024
STATE_INIT, STATE_LIVE, STATE_CLOSED = 0, 1, 2
DTYPES = {1: np.dtype(np.uint8), 2: np.dtype("<u2"), 3: np.dtype("<f4")}
DEFAULT_RUN_DIR = "/run/volrec"
TEXT_MAX = 65536

# struct volrec_shm_header (first 136 of its 256 bytes)
_HDR = struct.Struct("<QHHIQIIIIIIQQQQQQIiQIIQII")
_HDR_FIELDS = ("magic", "major", "minor", "header_size", "session_id", "ny", "nx", "nz",
               "dtype", "slot_count", "slot_header_size", "slot_table_offset", "data_offset",
               "slot_stride", "volume_bytes", "segment_size", "latest_sequence", "latest_slot",
               "writer_pid", "created_ns", "state", "max_readers", "endpoints_offset",
               "endpoints_size", "reserved0")
# struct volrec_slot_header (first 68 of its 128 bytes)
_SLOT = struct.Struct("<QQQiiQQQQI")
# struct volrec_lease_header (first 32 of its 64 bytes) and entry layout
_LHDR = struct.Struct("<QHHIQII")
_LHDR_SIZE = 64
_ENTRY_SIZE = 64
# struct volrec_vol_msg (first 112 of its 128 bytes)
_VOL = struct.Struct("<IHHIIQQQQIIIIiiQQQQII")
_VOL_MIN = 112
_INSTANCE = re.compile(r"^[A-Za-z0-9_-]{1,63}$")
# struct flock on Linux x86-64/aarch64: short type, short whence, off_t start, off_t len, pid_t pid
_FLOCK = "hhxxxxqqixxxx"


class VolrecError(Exception):
    """Base of the errors of this package."""


class NoDaemon(VolrecError, FileNotFoundError):
    """No daemon publishes the instance (its shared memory does not exist)."""


class ProtocolError(VolrecError):
    """A segment or message of an unknown major version, or malformed."""


class TornRead(VolrecError):
    """The volume was overwritten while it was held: what was read may be inconsistent."""


class Timeout(VolrecError, TimeoutError):
    """No volume arrived within the timeout."""


class Busy(VolrecError):
    """A volume is still held by this client; release it (leave its with block) first."""


class VolumeArray(np.ndarray):
    """A read-only numpy view [Y][X][Z] on a shared-memory slot, with the volume's metadata
    as attributes: sequence, slot, session_id, volume_id, epoch, offset_x, offset_y,
    t_first_ns, t_last_ns, t_publish_ns, latency_ns, flags, missed."""

    def __array_finalize__(self, obj):
        if obj is not None and hasattr(obj, "sequence"):
            self.__dict__.update(obj.__dict__)


class _Session:
    """One mapping of the data segment (read-only) and lease table (our entry)."""

    def __init__(self, client):
        self.map = self.lmap = None
        self.lease_fd = -1
        self.entry = None
        name = "/dev/shm/volrec." + client.instance
        try:
            fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise NoDaemon("no volrec daemon publishes instance '%s' (no shared memory %s)"
                           % (client.instance, name[8:])) from None
        try:
            size = os.fstat(fd).st_size
            if size < 256:
                raise BlockingIOError(errno.EAGAIN, "segment %s is not sized yet" % name)
            self.map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fd)
        try:
            self.h = dict(zip(_HDR_FIELDS, _HDR.unpack_from(self.map, 0)))
            _validate_header(self.h, size, self._u32(112))
            self.id = self.h["session_id"]
            self.u64 = memoryview(self.map).cast("B").cast("Q")
            self._open_leases(client)
        except BaseException:
            self.close()
            raise

    def _u32(self, off):
        return struct.unpack_from("<I", self.map, off)[0]

    def _open_leases(self, client):
        lname = "/dev/shm/volrec.%s.readers" % client.instance
        try:
            self.lease_fd = os.open(lname, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            raise BlockingIOError(errno.EAGAIN, "lease table %s not created yet" % lname) from None
        lsize = os.fstat(self.lease_fd).st_size
        if lsize < _LHDR_SIZE:
            raise BlockingIOError(errno.EAGAIN, "lease table %s not initialized" % lname)
        self.lmap = mmap.mmap(self.lease_fd, lsize, mmap.MAP_SHARED,
                              mmap.PROT_READ | mmap.PROT_WRITE)
        magic, major, _minor, hsize, session, count, esize = _LHDR.unpack_from(self.lmap, 0)
        if magic != LEASE_MAGIC:
            raise BlockingIOError(errno.EAGAIN, "lease table %s not initialized" % lname)
        if major != PROTO_MAJOR:
            raise ProtocolError("lease table %s speaks protocol major version %d; this client "
                                "supports %d only" % (lname, major, PROTO_MAJOR))
        if session != self.id:
            raise BlockingIOError(errno.EAGAIN, "lease table belongs to another session")
        if (hsize != _LHDR_SIZE or esize != _ENTRY_SIZE or not 0 < count <= MAX_READERS
                or hsize + count * esize > lsize):
            raise ProtocolError("lease table %s has an inconsistent layout" % lname)
        self.l32 = memoryview(self.lmap).cast("B").cast("I")
        self.l64 = memoryview(self.lmap).cast("B").cast("Q")
        for i in range(count):
            off = _LHDR_SIZE + i * _ENTRY_SIZE
            try:
                fcntl.fcntl(self.lease_fd, fcntl.F_OFD_SETLK,
                            struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, off, _ENTRY_SIZE, 0))
            except OSError as e:
                if e.errno in (errno.EAGAIN, errno.EACCES):
                    continue
                raise
            self.entry = off
            self.l32[off // 4 + 1] = SLOT_NONE           # slot
            self.l64[off // 8 + 1] = 0                   # sequence
            self.l64[off // 8 + 2] = self.id             # session_id
            self.l64[off // 8 + 3] = time.monotonic_ns()  # heartbeat
            self.l32[off // 4] = os.getpid()             # pid, last: the entry is ours
            return
        raise VolrecError("all %d reader entries of %s are taken (ipc.max_readers)"
                          % (count, lname))

    def slot_seq(self, slot):
        h = self.h
        return self.u64[(h["slot_table_offset"] + slot * h["slot_header_size"]) // 8]

    def lease(self, slot, seq):
        off = self.entry
        self.l64[off // 8 + 3] = time.monotonic_ns()
        self.l64[off // 8 + 2] = self.id
        self.l64[off // 8 + 1] = seq
        self.l32[off // 4 + 1] = slot

    def unlease(self):
        if self.entry is not None:
            self.l32[self.entry // 4 + 1] = SLOT_NONE
            self.l64[self.entry // 8 + 1] = 0

    def endpoints(self):
        h = self.h
        if not h["endpoints_size"]:
            return []
        raw = bytes(self.map[h["endpoints_offset"]:h["endpoints_offset"] + h["endpoints_size"]])
        return [e.decode() for e in raw.split(b"\0") if e]

    def close(self):
        if self.entry is not None and self.lmap is not None:
            self.l32[self.entry // 4 + 1] = SLOT_NONE
            self.l32[self.entry // 4] = 0
            self.entry = None
        for attr in ("u64", "l32", "l64"):
            v = getattr(self, attr, None)
            if v is not None:
                v.release()
                setattr(self, attr, None)
        if self.lease_fd >= 0:
            os.close(self.lease_fd)  # drops our OFD lock
            self.lease_fd = -1
        for m in (self.map, self.lmap):
            if m is not None:
                try:
                    m.close()
                except BufferError:
                    pass  # numpy views still alive: unmapped when they are collected
        self.map = self.lmap = None


def _validate_header(h, size, state):
    if h["magic"] != SHM_MAGIC:
        raise ProtocolError("data segment has a bad magic 0x%016x (not a volrec segment)"
                            % h["magic"])
    if h["major"] != PROTO_MAJOR:
        raise ProtocolError("data segment speaks protocol version %d.%d; this client supports "
                            "major version %d only" % (h["major"], h["minor"], PROTO_MAJOR))
    if state == STATE_INIT:
        raise BlockingIOError(errno.EAGAIN, "data segment is still being created")
    dt = DTYPES.get(h["dtype"])
    if dt is None:
        raise ProtocolError("data segment has an unknown dtype %d" % h["dtype"])
    ny, nx, nz, n = h["ny"], h["nx"], h["nz"], h["slot_count"]
    table_end = h["slot_table_offset"] + n * h["slot_header_size"]
    if (not (ny and nx and nz) or not 0 < n <= MAX_SLOTS
            or h["volume_bytes"] != ny * nx * nz * dt.itemsize
            or h["header_size"] < 256 or h["slot_header_size"] < 128
            or h["slot_header_size"] % 8 or h["slot_table_offset"] % 8
            or h["slot_table_offset"] < h["header_size"] or table_end > h["data_offset"]
            or h["data_offset"] % SLOT_ALIGN or h["slot_stride"] % SLOT_ALIGN
            or h["slot_stride"] < h["volume_bytes"]
            or h["data_offset"] + n * h["slot_stride"] > h["segment_size"]
            or h["segment_size"] > size or not h["session_id"]):
        raise ProtocolError("data segment layout is inconsistent: %r" % (h,))


def decode_vol(body):
    """Decode a `vol` message body into a dict; ProtocolError if malformed or foreign."""
    if len(body) < 12:
        raise ProtocolError("vol message of %d bytes is too short (at least %d)"
                            % (len(body), _VOL_MIN))
    magic, major, _minor, size = struct.unpack_from("<IHHI", body, 0)
    if magic != VOL_MAGIC:
        raise ProtocolError("vol message has a bad magic 0x%08x" % magic)
    if major != PROTO_MAJOR:
        raise ProtocolError("vol message speaks protocol major version %d; this client "
                            "supports %d only" % (major, PROTO_MAJOR))
    if len(body) < _VOL_MIN or size < _VOL_MIN or size != len(body):
        raise ProtocolError("vol message is malformed: %d bytes received, size field %d"
                            % (len(body), size))
    f = _VOL.unpack_from(body, 0)
    m = dict(zip(("magic", "major", "minor", "size", "slot", "session_id", "sequence",
                  "volume_id", "epoch", "ny", "nx", "nz", "dtype", "offset_x", "offset_y",
                  "t_first_ns", "t_last_ns", "t_publish_ns", "latency_ns", "flags",
                  "reserved0"), f))
    if (m["dtype"] not in DTYPES or not (m["ny"] and m["nx"] and m["nz"])
            or not m["sequence"] or not m["session_id"]):
        raise ProtocolError("vol message is malformed: %r" % (m,))
    return m


class _Lease:
    """Context manager around one leased volume; `as` gives the VolumeArray."""

    def __init__(self, client, array):
        self._client = client
        self.array = array

    def __enter__(self):
        return self.array

    def __exit__(self, exc_type, exc, tb):
        torn = not self._client._release(self.array)
        if torn and exc_type is None:
            raise TornRead("torn read: volume %d in slot %d was overwritten while held"
                           % (self.array.sequence, self.array.slot))
        return False

    def check(self):
        """Raise TornRead if the volume has been overwritten since it was leased."""
        if not self._client._intact(self.array):
            raise TornRead("torn read: volume %d in slot %d was overwritten"
                           % (self.array.sequence, self.array.slot))

    def release(self):
        self.__exit__(None, None, None)


class Client:
    """Connection to one volrecd instance. topics: any of "vol", "status", "event"."""

    def __init__(self, instance, run_dir=None, endpoint=None, topics=("vol",), rcvhwm=1000,
                 open_timeout=1.0):
        if not isinstance(instance, str) or not _INSTANCE.match(instance):
            raise ValueError("instance %r is not a valid name ([A-Za-z0-9_-]{1,63})"
                             % (instance,))
        for t in topics:
            if t not in ("vol", "status", "event"):
                raise ValueError("unknown topic %r (vol, status, event)" % (t,))
        self.instance = instance
        self.run_dir = run_dir or os.environ.get("VOLREC_RUN_DIR") or DEFAULT_RUN_DIR
        self._fixed_endpoint = endpoint
        self._endpoint = None
        self._topics = tuple(topics)
        self._s = None
        self._held = None
        self._last_seq = 0
        self.received = self.missed = self.torn = self.remaps = self.rejected = 0
        self._ctx = zmq.Context()
        self._sub = self._ctx.socket(zmq.SUB)
        self._sub.setsockopt(zmq.RCVHWM, rcvhwm)
        self._sub.setsockopt(zmq.LINGER, 0)
        for t in self._topics:
            self._sub.setsockopt(zmq.SUBSCRIBE, t.encode())
        deadline = time.monotonic() + open_timeout
        try:
            while True:
                try:
                    self._remap()
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.01)
        except BaseException:
            self.close()
            raise

    # -- lifecycle
    def close(self):
        if self._s is not None:
            self._s.close()
            self._s = None
        if self._sub is not None:
            self._sub.close(0)
            self._sub = None
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    @property
    def session_id(self):
        return self._s.id if self._s else 0

    # -- sessions
    def _remap(self):
        if self._held is not None:
            raise Busy("a volume is still held; release it first")
        new = _Session(self)
        if self._s is not None and new.id == self._s.id:
            new.close()
            return
        if self._s is not None:
            self._s.close()
            self.remaps += 1
        self._s = new
        self._last_seq = 0
        self._connect()

    def _connect(self):
        ep = self._fixed_endpoint
        if not ep:
            eps = self._s.endpoints()
            ep = next((e for e in eps if e.startswith("ipc://")), None) or \
                next((e for e in eps if e.startswith("tcp://127.")), None) or \
                "ipc://%s/%s.pub" % (self.run_dir, self.instance)
        if ep == self._endpoint:
            return
        if self._endpoint:
            self._sub.disconnect(self._endpoint)
        self._sub.connect(ep)
        self._endpoint = ep

    def _session_changed(self):
        try:
            with open("/dev/shm/volrec." + self.instance, "rb") as f:
                head = f.read(24)
        except FileNotFoundError:
            return False
        return len(head) == 24 and struct.unpack_from("<Q", head, 16)[0] != self.session_id

    # -- leases
    def _lease(self, slot, seq, missed):
        s = self._s
        h = s.h
        s.lease(slot, seq)
        if s.slot_seq(slot) != 2 * seq:
            s.unlease()
            return None
        base = h["slot_table_offset"] + slot * h["slot_header_size"]
        (_, volume_id, epoch, ox, oy, t_first, t_last, t_pub, lat, flags) = \
            _SLOT.unpack_from(s.map, base)
        dt = DTYPES[h["dtype"]]
        off = h["data_offset"] + slot * h["slot_stride"]
        n = h["ny"] * h["nx"] * h["nz"]
        arr = np.frombuffer(s.map, dtype=dt, count=n, offset=off).reshape(
            h["ny"], h["nx"], h["nz"]).view(VolumeArray)
        if s.slot_seq(slot) != 2 * seq:
            s.unlease()
            return None
        arr.__dict__.update(sequence=seq, slot=slot, session_id=s.id, volume_id=volume_id,
                            epoch=epoch, offset_x=ox, offset_y=oy, t_first_ns=t_first,
                            t_last_ns=t_last, t_publish_ns=t_pub, latency_ns=lat,
                            flags=flags, missed=missed)
        self._held = arr
        self.received += 1
        return _Lease(self, arr)

    def _intact(self, arr):
        s = self._s
        return s is not None and s.id == arr.session_id and s.slot_seq(arr.slot) == 2 * arr.sequence

    def _release(self, arr):
        if self._held is not arr:
            return True
        ok = self._intact(arr)
        self._s.unlease()
        self._held = None
        if not ok:
            self.torn += 1
        return ok

    def _account(self, seq):
        if self._last_seq and seq <= self._last_seq:
            return None
        gap = seq - self._last_seq - 1 if self._last_seq else 0
        self.missed += gap
        self._last_seq = seq
        return gap

    # -- receiving
    def next_message(self, timeout=None):
        """Next message of a subscribed topic: ("vol", lease) where lease is a context
        manager giving the VolumeArray, or ("status"|"event", json_text). Raises Timeout,
        ProtocolError (a malformed message was dropped), Busy."""
        if self._held is not None:
            raise Busy("a volume is still held; leave its with block first")
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._s is not None and self._s.entry is not None:
            self._s.l64[self._s.entry // 8 + 3] = time.monotonic_ns()
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self._sub.poll(None if left is None else int(left * 1000)):
                if deadline is not None and time.monotonic() >= deadline:
                    raise Timeout("no volume within %.3f s" % timeout)
                continue
            frames = self._sub.recv_multipart(copy=True)
            if len(frames) != 2:
                self.rejected += 1
                raise ProtocolError("message with %d frames (expected [topic][body])"
                                    % len(frames))
            topic, body = frames[0].decode("ascii", "replace"), frames[1]
            if topic == "vol" and "vol" in self._topics:
                try:
                    m = decode_vol(body)
                except ProtocolError:
                    self.rejected += 1
                    raise
                lease = self._on_vol(m)
                if lease is not None:
                    return "vol", lease
            elif topic in ("status", "event") and topic in self._topics:
                if len(body) > TEXT_MAX or b"\0" in body:
                    self.rejected += 1
                    raise ProtocolError("%s message of %d bytes is too long or holds a NUL"
                                        % (topic, len(body)))
                return topic, body.decode("utf-8", "replace")

    def _on_vol(self, m):
        if self._s is None or m["session_id"] != self._s.id:
            before = self.session_id
            try:
                self._remap()
            except (NoDaemon, BlockingIOError):
                return None
            if self.session_id == before or m["session_id"] != self.session_id:
                return None  # a stale message of another session
        h = self._s.h
        if (m["slot"] >= h["slot_count"] or (m["ny"], m["nx"], m["nz"], m["dtype"]) !=
                (h["ny"], h["nx"], h["nz"], h["dtype"])):
            self.rejected += 1
            raise ProtocolError("vol message does not match its segment: %r" % (m,))
        # the writer stores latest_sequence before it sends: a higher one was never published
        newest = self._s.u64[88 // 8]
        if m["sequence"] > newest:
            self.rejected += 1
            raise ProtocolError("vol message announces volume %d, but the segment has not "
                                "published it (newest %d)" % (m["sequence"], newest))
        gap = self._account(m["sequence"])
        if gap is None:
            return None
        lease = self._lease(m["slot"], m["sequence"], gap)
        if lease is None:
            self.missed += 1  # overwritten before we could look
        return lease

    def next_volume(self, timeout=None):
        """Wait for the next volume; use as `with client.next_volume(1.0) as vol:`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            topic, payload = self.next_message(left)
            if topic == "vol":
                return payload

    def latest(self):
        """Lease the newest published volume from the segment header, without a message.
        Raises BlockingIOError (EAGAIN) when none is available yet."""
        if self._held is not None:
            raise Busy("a volume is still held; leave its with block first")
        if self._session_changed():
            self._remap()
        s = self._s
        for _ in range(4):
            seq = s.u64[88 // 8]
            if not seq:
                raise BlockingIOError(errno.EAGAIN, "no volume published yet")
            slot = struct.unpack_from("<I", s.map, 96)[0]
            if slot >= s.h["slot_count"] or s.slot_seq(slot) != 2 * seq:
                slot = next((i for i in range(s.h["slot_count"]) if s.slot_seq(i) == 2 * seq),
                            None)
                if slot is None:
                    continue
            if self._last_seq and seq <= self._last_seq:
                gap = 0
            else:
                gap = self._account(seq)
            lease = self._lease(slot, seq, gap)
            if lease is not None:
                return lease
        raise BlockingIOError(errno.EAGAIN, "the newest volume was overwritten while leased")
