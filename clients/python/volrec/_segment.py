# SPDX-License-Identifier: MIT
"""One mapping of an instance's shared memory, as libvolrec's session_map() makes it: the data
segment read-only and validated, its writer checked alive, and an entry of the lease table
claimed with an open-file-description lock (docs/protocol.md §2, §3, §6)."""
from __future__ import annotations

import errno
import fcntl
import mmap
import os
import struct
import time
from typing import Dict, List, Optional, Tuple

from ._protocol import (CHANNEL_DESC, CHANNELS_MAX, channel_views_bytes, DTYPES, LEASE_ENTRY, LEASE_HEADER, LEASE_MAGIC, MAX_READERS, MAX_SLOTS,
                        PROTO_MAJOR, SAME_MAJOR, SHM_HEADER, SHM_LEASE_SUFFIX, SHM_MAGIC,
                        SHM_PREFIX,
                        SLOT_ALIGN, SLOT_HEADER, SLOT_NONE, STATE_CLOSED, STATE_INIT,
                        STATE_LIVE, VIEWS_DATA_OFFSET)
from .errors import NoDaemon, NotReady, ProtocolError, ReadersFull, StaleSegment, VolrecError

SHM_DIR = "/dev/shm"  # where Linux keeps POSIX shared memory objects

# struct flock on Linux x86-64/aarch64: short type, short whence, off_t start, off_t len, pid_t pid
_FLOCK = "hhxxxxqqixxxx"

_HDR = SHM_HEADER.offset
_SLOT_SEQ = SLOT_HEADER.offset["sequence"]
_ENT = LEASE_ENTRY.offset


def shm_names(instance: str) -> Tuple[str, str]:
    """The POSIX shm names of the data and lease segments of an instance."""
    data = SHM_PREFIX + instance
    return data, data + SHM_LEASE_SUFFIX


def pid_alive(pid: int) -> bool:
    """Whether process pid exists, as libvolrec decides it: kill(pid, 0) succeeds or fails
    with anything but ESRCH (EPERM: it exists under another user)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except OSError as e:
        return e.errno != errno.ESRCH
    return True


def writer_alive(state: int, writer_pid: int) -> bool:
    """libvolrec's volrec_segment_info.writer_alive: the segment is live and its writer's pid
    exists. A crashed writer leaves state live with a pid that is gone; a stopped one leaves
    state closed (only with ipc.keep_shm, else the segment is unlinked)."""
    return state == STATE_LIVE and pid_alive(writer_pid)


def validate_header(h: Dict[str, int], size: int, state: int, name: str) -> None:
    """Raise NotReady while the header is not initialized (zero magic: sized but not yet
    written; or state still 0), ProtocolError when it is foreign, of another major version or
    inconsistent. The same checks as libvolrec's ipc_shm_validate()."""
    if h["magic"] == 0:
        raise NotReady(errno.EAGAIN, "data segment %s is being created (header not written "
                       "yet)" % name)
    if h["magic"] != SHM_MAGIC:
        raise ProtocolError("data segment has a bad magic 0x%016x (not a volrec segment)"
                            % h["magic"])
    if h["major"] != PROTO_MAJOR:
        raise ProtocolError("data segment speaks protocol version %d.%d; this client supports "
                            "major version %d only%s" % (h["major"], h["minor"], PROTO_MAJOR,
                                                         SAME_MAJOR))
    if state == STATE_INIT:
        raise NotReady(errno.EAGAIN, "data segment %s is still being created" % name)
    dt = DTYPES.get(h["dtype"])
    if dt is None:
        raise ProtocolError("data segment has an unknown dtype %d" % h["dtype"])
    ny, nx, nz, n = h["ny"], h["nx"], h["nz"], h["slot_count"]
    table_end = h["slot_table_offset"] + n * h["slot_header_size"]
    if (not (ny and nx and nz) or not 0 < n <= MAX_SLOTS
            or h["volume_bytes"] != ny * nx * nz * dt.itemsize
            or h["header_size"] < SHM_HEADER.size or h["slot_header_size"] < SLOT_HEADER.size
            or h["slot_header_size"] % 8 or h["slot_table_offset"] % 8
            or h["slot_table_offset"] < h["header_size"] or table_end > h["data_offset"]
            or h["data_offset"] % SLOT_ALIGN or h["slot_stride"] % SLOT_ALIGN
            or h["slot_stride"] < h["volume_bytes"]
            or h["data_offset"] + n * h["slot_stride"] > h["segment_size"]
            or h["segment_size"] > size or not h["session_id"]):
        raise ProtocolError("data segment layout is inconsistent: %r" % (h,))
    if h["endpoints_size"] and (h["endpoints_offset"] < table_end
                                or h["endpoints_offset"] + h["endpoints_size"]
                                > h["data_offset"]):
        raise ProtocolError("data segment endpoint list lies outside the header region")
    # channels (2.1): the slot's volumes one after another, their descriptors in the header
    # region (0: a writer older than 2.1, the structure alone)
    nch, dsz, cto = h["channels"], h["channel_desc_size"], h["channel_table_offset"]
    if (nch > CHANNELS_MAX or max(nch, 1) * h["volume_bytes"] > h["slot_stride"]
            or (nch and (dsz < CHANNEL_DESC.size or dsz % 8 or dsz > 4096 or cto % 8
                         or cto < table_end
                         or cto + n * nch * dsz > h["data_offset"]))):
        raise ProtocolError("data segment channels are inconsistent (%d channels of %d bytes, "
                            "descriptors of %d bytes at %d, stride %d)"
                            % (nch, h["volume_bytes"], dsz, cto, h["slot_stride"]))
    # views (1.2): inside each slot, after the volume, at least the header and descriptors
    # (else a picture would be read from the next slot, or past the end of the segment)
    vo, vb = h["views_offset"], h["views_bytes"]
    if (vo or vb) and (vo < max(nch, 1) * h["volume_bytes"] or vo % 64 or vo + vb > h["slot_stride"]
                       or vb < VIEWS_DATA_OFFSET):
        raise ProtocolError("data segment views area is inconsistent (offset %d, %d bytes, "
                            "volume %d bytes, stride %d)"
                            % (vo, vb, h["volume_bytes"], h["slot_stride"]))
    # channel views (2.1): after the views area, room for every channel but the first
    co, cb = h["channel_views_offset"], h["channel_views_bytes"]
    if (co or cb) and (not vb or co % 64 or co < vo + vb or co + cb > h["slot_stride"]
                       or cb < channel_views_bytes(ny, nx, nz, nch)):
        raise ProtocolError("data segment channel views are inconsistent (offset %d, %d bytes, "
                            "%d channels, views at %d, stride %d)"
                            % (co, cb, nch, vo, h["slot_stride"]))


class Session:
    """One mapping of the data segment (read-only) and of the lease table (our entry)."""

    map: mmap.mmap  # the data segment, read-only
    u32: memoryview  # the same, as u32 and u64 words for the atomic fields
    u64: memoryview
    h: Dict[str, int]  # its header as read at open (the atomic fields: below)
    id: int  # its session id
    _endpoints: List[str]  # the endpoint list, read at open
    lmap: mmap.mmap  # the lease table, read-write
    l32: memoryview
    l64: memoryview

    def __init__(self, instance: str) -> None:
        self.lease_fd = -1
        self.entry: Optional[int] = None  # byte offset of our lease entry
        self.instance = instance
        self.data_name, self.lease_name = shm_names(instance)
        try:
            fd = os.open(SHM_DIR + self.data_name, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise NoDaemon("no volrec daemon publishes instance '%s' (no shared memory %s)"
                           % (instance, self.data_name)) from None
        try:
            size = os.fstat(fd).st_size
            if size < SHM_HEADER.size:
                raise NotReady(errno.EAGAIN, "data segment %s is %d bytes, smaller than its "
                               "header: being created" % (self.data_name, size))
            self.map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fd)
        try:
            self.u32 = memoryview(self.map)[:size & ~3].cast("I")
            self.u64 = memoryview(self.map)[:size & ~7].cast("Q")
            # state first: the writer stores it (release) after every other header field
            state = self.state
            self.h = SHM_HEADER.unpack(self.map)
            validate_header(self.h, size, state, self.data_name)
            self.id = self.h["session_id"]
            self._endpoints = self._read_endpoints()
            self.check_writer()
            self._open_leases()
        except BaseException:
            self.close()
            raise

    # -- the atomic header fields, loaded fresh (aligned loads: single instructions)
    @property
    def state(self) -> int:
        return self.u32[_HDR["state"] // 4]

    @property
    def latest_sequence(self) -> int:
        return self.u64[_HDR["latest_sequence"] // 8]

    @property
    def latest_slot(self) -> int:
        return self.u32[_HDR["latest_slot"] // 4]

    def writer_alive(self) -> bool:
        return writer_alive(self.state, self.h["writer_pid"])

    def check_writer(self) -> None:
        """Raise StaleSegment unless a live writer publishes into this segment."""
        if self.writer_alive():
            return
        pid = self.h["writer_pid"]
        if self.state == STATE_CLOSED:
            why = "its writer (pid %d) closed it: the daemon stopped or is rebuilding it" % pid
        else:
            why = "its writer (pid %d) is gone: the daemon died and left it behind" % pid
        raise StaleSegment("no volrec daemon publishes instance '%s': shared memory %s is "
                           "stale, %s" % (self.instance, self.data_name, why))

    def slot_seq(self, slot: int) -> int:
        h = self.h
        return self.u64[(h["slot_table_offset"] + slot * h["slot_header_size"] + _SLOT_SEQ)
                        // 8]

    def slot_header(self, slot: int) -> Dict[str, int]:
        h = self.h
        return SLOT_HEADER.unpack(self.map,
                                  h["slot_table_offset"] + slot * h["slot_header_size"])

    def endpoints(self) -> List[str]:
        return list(self._endpoints)

    def _read_endpoints(self) -> List[str]:
        h = self.h
        if not h["endpoints_size"]:
            return []
        raw = bytes(self.map[h["endpoints_offset"]:h["endpoints_offset"] + h["endpoints_size"]])
        # as libvolrec reads it: NUL-terminated strings up to the first empty one; a last one
        # without its NUL is not an endpoint
        terminated = raw.split(b"\0")[:-1]
        listed = terminated[:terminated.index(b"")] if b"" in terminated else terminated
        try:
            return [e.decode() for e in listed]
        except UnicodeDecodeError as e:
            raise ProtocolError("data segment %s has a malformed endpoint list (%s)"
                                % (self.data_name, e.reason)) from None

    # -- the lease table
    def _open_leases(self) -> None:
        name = self.lease_name
        try:
            self.lease_fd = os.open(SHM_DIR + name, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            raise NotReady(errno.EAGAIN, "lease table %s is not created yet" % name) from None
        lsize = os.fstat(self.lease_fd).st_size
        if lsize < LEASE_HEADER.size:
            raise NotReady(errno.EAGAIN, "lease table %s is not initialized yet" % name)
        self.lmap = mmap.mmap(self.lease_fd, lsize, mmap.MAP_SHARED,
                              mmap.PROT_READ | mmap.PROT_WRITE)
        lh = LEASE_HEADER.unpack(self.lmap)
        if lh["magic"] != LEASE_MAGIC:
            raise NotReady(errno.EAGAIN, "lease table %s is not initialized yet" % name)
        if lh["major"] != PROTO_MAJOR:
            raise ProtocolError("lease table %s speaks protocol major version %d; this client "
                                "supports %d only%s" % (name, lh["major"], PROTO_MAJOR,
                                                        SAME_MAJOR))
        if lh["session_id"] != self.id:
            raise NotReady(errno.EAGAIN, "lease table %s belongs to another session "
                           "(rebuilding)" % name)
        count = lh["entry_count"]
        if (lh["header_size"] != LEASE_HEADER.size or lh["entry_size"] != LEASE_ENTRY.size
                or not 0 < count <= MAX_READERS
                or lh["header_size"] + count * lh["entry_size"] > lsize):
            raise ProtocolError("lease table %s has an inconsistent layout" % name)
        self.l32 = memoryview(self.lmap)[:lsize & ~3].cast("I")
        self.l64 = memoryview(self.lmap)[:lsize & ~7].cast("Q")
        for i in range(count):
            off = LEASE_HEADER.size + i * LEASE_ENTRY.size
            try:
                fcntl.fcntl(self.lease_fd, fcntl.F_OFD_SETLK,
                            struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, off,
                                        LEASE_ENTRY.size, 0))
            except OSError as e:
                if e.errno in (errno.EAGAIN, errno.EACCES):
                    continue
                raise
            self.entry = off
            self._store32("slot", SLOT_NONE)
            self._store64("sequence", 0)
            self._store64("session_id", self.id)
            self._store64("heartbeat_ns", time.monotonic_ns())
            self._store32("pid", os.getpid())  # last: the entry is ours
            return
        raise ReadersFull("all %d reader entries of %s are taken (ipc.max_readers)"
                          % (count, name))

    def _store32(self, field: str, value: int) -> None:
        assert self.entry is not None
        self.l32[(self.entry + _ENT[field]) // 4] = value

    def _store64(self, field: str, value: int) -> None:
        assert self.entry is not None
        self.l64[(self.entry + _ENT[field]) // 8] = value

    def heartbeat(self) -> None:
        if self.entry is not None:
            self._store64("heartbeat_ns", time.monotonic_ns())

    def lease(self, slot: int, seq: int) -> None:
        """Announce that we read volume seq in slot (protocol.md §3: slot stored last)."""
        self._store64("heartbeat_ns", time.monotonic_ns())
        self._store64("session_id", self.id)
        self._store64("sequence", seq)
        self._store32("slot", slot)

    def unlease(self) -> None:
        if self.entry is not None:
            self._store32("slot", SLOT_NONE)
            self._store64("sequence", 0)

    def __del__(self) -> None:
        # a Client dropped without close() must not keep its reader entry (and the slot it
        # leased) until the process exits: the table has ipc.max_readers entries
        self.close()

    def close(self) -> None:
        """Leave the lease table and unmap; accepts a half-built session."""
        if self.entry is not None and hasattr(self, "l32"):
            self._store32("slot", SLOT_NONE)
            self._store32("pid", 0)
        self.entry = None
        for attr in ("u32", "u64", "l32", "l64"):
            view = self.__dict__.pop(attr, None)
            if view is not None:
                view.release()
        if self.lease_fd >= 0:
            os.close(self.lease_fd)  # drops our OFD lock
            self.lease_fd = -1
        for attr in ("map", "lmap"):
            m = self.__dict__.pop(attr, None)
            if m is not None:
                try:
                    m.close()
                except BufferError:
                    pass  # numpy views still alive: unmapped when they are collected
