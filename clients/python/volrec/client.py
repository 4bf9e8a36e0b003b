# SPDX-License-Identifier: MIT
"""The volrec client: subscribes to an instance's ZeroMQ notifications, leases the announced
volumes in its shared memory and hands them out as read-only numpy views, following the
daemon across restarts and rebuilds (docs/protocol.md §2.3, §4; docs/clients.md)."""
from __future__ import annotations

import errno
import json
import math
import numbers
import os
import re
import socket
import time
from typing import Any, Dict, Iterable, Optional, Tuple, Union

import numpy as np
import zmq

from ._protocol import (DEFAULT_RUN_DIR, DTYPES, FLAG_CHANNEL_VIEWS, FLAG_VIEWS, SHM_HEADER,
                        TEXT_MAX, TOPIC_EVENT, TOPIC_STATUS, TOPIC_VOL, decode_vol, voxel_size)
from ._segment import SHM_DIR, Session
from .errors import Busy, NoDaemon, NotReady, ProtocolError, TornRead, Timeout, VolrecError
from .channels import Channels, attach_channel_views, read_channels
from .views import Views, read_views

__all__ = ["Client", "Lease", "VolumeArray"]

_INSTANCE = re.compile(r"^[A-Za-z0-9_-]{1,63}$")
_TOPICS = (TOPIC_VOL, TOPIC_STATUS, TOPIC_EVENT)
_SESSION_AT = SHM_HEADER.offset["session_id"]


def _seconds(name: str, value: Any, none_ok: bool = True) -> Optional[float]:
    """A timeout argument: None (where none_ok: wait forever) or a finite number >= 0 of
    seconds. TypeError or ValueError naming the argument otherwise (a NaN used to make
    next_message spin forever)."""
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError("%s must be a number of seconds%s, not %r"
                        % (name, " or None" if none_ok else "", value))
    v = float(value)
    if not math.isfinite(v) or v < 0:
        raise ValueError("%s must be a finite number of seconds >= 0, not %r" % (name, value))
    return v


class VolumeArray(np.ndarray):  # type: ignore[type-arg]
    """A read-only numpy view [Y][X][Z] on a shared-memory slot, with the volume's metadata
    as attributes: sequence, slot, session_id, volume_id, epoch, offset_x, offset_y,
    t_first_ns, t_last_ns, t_publish_ns, latency_ns, volume_flags (the FLAG_* bits; `flags`
    stays numpy's own), missed, voxel_size_um (dx, dy, dz) in µm with None for each size the
    daemon does not know (docs/algorithms.md §6), generation (of the live parameters that made
    the volume: Client.generation_values(n) gives them; 0 from a writer older than protocol
    1.3), views (a mapping of the pictures published beside the
    volume: views["bscan"] ..., each an ImageArray on the slot, under the same lease) and
    channels (protocol 2.1: the volumes of output.channels, channels["angio"] ..., each a
    ChannelArray on the slot under the same lease that says what its values mean; the array
    itself is the first channel, the structure unless output.channels leaves it out)."""

    sequence: int
    slot: int
    session_id: int
    volume_id: int
    epoch: int
    offset_x: int
    offset_y: int
    t_first_ns: int
    t_last_ns: int
    t_publish_ns: int
    latency_ns: int
    volume_flags: int
    missed: int
    voxel_size_um: Tuple[Optional[float], Optional[float], Optional[float]]
    generation: int
    views: Views
    channels: Channels

    def __array_finalize__(self, obj: Any) -> None:
        if obj is not None and hasattr(obj, "sequence"):
            self.__dict__.update(obj.__dict__)


class Lease:
    """Context manager around one leased volume; `as` gives the VolumeArray. Leaving the
    block releases the lease and raises TornRead if the volume was overwritten meanwhile."""

    def __init__(self, client: "Client", array: VolumeArray) -> None:
        self._client = client
        self.array = array

    def __enter__(self) -> VolumeArray:
        return self.array

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            torn = not self._client._release(self.array)
        except VolrecError:
            if exc_type is None:
                raise
            return
        if torn and exc_type is None:
            raise TornRead("torn read: volume %d in slot %d was overwritten while held"
                           % (self.array.sequence, self.array.slot))

    def check(self) -> None:
        """Raise TornRead if the volume has been overwritten since it was leased."""
        self._client._session()  # VolrecError once the client is closed: nothing to check
        if not self._client._intact(self.array):
            raise TornRead("torn read: volume %d in slot %d was overwritten"
                           % (self.array.sequence, self.array.slot))

    def release(self) -> None:
        self.__exit__(None, None, None)


Message = Tuple[str, Union[Lease, str]]


class Client:
    """Connection to one volrecd instance. topics: any of "vol", "status", "event".

    Opening retries for open_timeout seconds while the daemon is still creating its shared
    memory (NotReady once it runs out); it raises NoDaemon when there is none and StaleSegment
    (a NoDaemon) when the one there was left by a daemon that died or stopped."""

    def __init__(self, instance: str, run_dir: Optional[str] = None,
                 endpoint: Optional[str] = None, topics: Iterable[str] = (TOPIC_VOL,),
                 rcvhwm: int = 1000, open_timeout: float = 1.0) -> None:
        if not isinstance(instance, str) or not _INSTANCE.match(instance):
            raise ValueError("instance %r is not a valid name ([A-Za-z0-9_-]{1,63})"
                             % (instance,))
        open_s = _seconds("open_timeout", open_timeout, none_ok=False)
        if isinstance(rcvhwm, bool) or not isinstance(rcvhwm, int) or rcvhwm < 0:
            raise ValueError("rcvhwm must be a whole number >= 0 (0: no limit), not %r"
                             % (rcvhwm,))
        if isinstance(topics, (str, bytes)):
            raise TypeError("topics must be a sequence of topic names (vol, status, event), "
                            "not the string %r" % (topics,))
        topics = tuple(topics)
        for t in topics:
            if t not in _TOPICS:
                raise ValueError("unknown topic %r (vol, status, event)" % (t,))
        self.instance = instance
        self.run_dir: str = run_dir or os.environ.get("VOLREC_RUN_DIR") or DEFAULT_RUN_DIR
        self._fixed_endpoint = endpoint
        self._endpoint: Optional[str] = None
        self._topics = topics
        self._s: Optional[Session] = None
        self._held: Optional[VolumeArray] = None
        self._last_seq = 0
        self.received = self.missed = self.torn = self.remaps = self.rejected = 0
        ctx = zmq.Context()
        sub = ctx.socket(zmq.SUB)
        self._ctx: "Optional[zmq.Context[Any]]" = ctx
        self._sub: "Optional[zmq.Socket[Any]]" = sub
        sub.setsockopt(zmq.RCVHWM, rcvhwm)
        sub.setsockopt(zmq.LINGER, 0)
        for t in self._topics:
            sub.setsockopt(zmq.SUBSCRIBE, t.encode())
        deadline = time.monotonic() + (open_s or 0.0)
        try:
            while True:
                try:
                    self._remap()
                    break
                except NotReady as e:
                    if time.monotonic() >= deadline:
                        raise NotReady(errno.EAGAIN, "%s (still not ready after %.2f s)"
                                       % (e.strerror, open_timeout)) from None
                    time.sleep(0.01)
        except BaseException:
            self.close()
            raise

    def generation_values(self, generation: int, timeout: float = 5.0) -> Dict[str, Any]:
        """The live parameters of a generation (a volume's `generation`) as {key: value}, asked
        of the daemon's control socket (<run_dir>/<instance>.ctl, docs/control.md); the daemon
        keeps the last 256 generations. VolrecError when it does not keep this one."""
        if isinstance(generation, bool) or not isinstance(generation, int) or generation < 1:
            raise ValueError("generation must be a whole number >= 1, not %r" % (generation,))
        path = os.path.join(self.run_dir, self.instance + ".ctl")
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
            s.settimeout(_seconds("timeout", timeout, none_ok=False))
            try:
                s.connect(path)
                s.send(json.dumps({"op": "get", "generation": generation}).encode())
                reply = json.loads(s.recv(1 << 20))
            except OSError as e:
                raise VolrecError("control socket %s: %s" % (path, e.strerror or e)) from None
        if not reply.get("ok"):
            raise VolrecError(str(reply.get("error")))
        values: Dict[str, Any] = reply["values"]
        return values

    # -- lifecycle
    def close(self) -> None:
        if self._s is not None:
            self._s.close()
            self._s = None
        if self._sub is not None:
            self._sub.close(0)
            self._sub = None
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def session_id(self) -> int:
        """The session (data segment) the client reads, 0 when none."""
        return self._s.id if self._s else 0

    @property
    def writer_alive(self) -> bool:
        """Whether a live writer publishes into the mapped segment (libvolrec's
        volrec_segment_info.writer_alive): false once the daemon died or stopped."""
        return self._s is not None and self._s.writer_alive()

    def _session(self) -> Session:
        if self._s is None:
            raise VolrecError("the client of instance '%s' is closed" % self.instance)
        return self._s

    def _socket(self) -> "zmq.Socket[Any]":
        if self._sub is None:
            raise VolrecError("the client of instance '%s' is closed" % self.instance)
        return self._sub

    # -- sessions
    def _remap(self) -> None:
        if self._held is not None:
            raise Busy("a volume is still held; release it first")
        new = Session(self.instance)
        if self._s is not None and new.id == self._s.id:
            new.close()
            return
        if self._s is not None:
            self._s.close()
            self.remaps += 1
        self._s = new
        self._last_seq = 0
        self._connect()

    def _connect(self) -> None:
        ep = self._fixed_endpoint
        if not ep:
            eps = self._session().endpoints()
            ep = next((e for e in eps if e.startswith("ipc://")), None) or \
                next((e for e in eps if e.startswith("tcp://127.")), None) or \
                "ipc://%s/%s.pub" % (self.run_dir, self.instance)
        if ep == self._endpoint:
            return
        sub = self._socket()
        if self._endpoint:
            sub.disconnect(self._endpoint)
        sub.connect(ep)
        self._endpoint = ep

    def _session_changed(self) -> bool:
        try:
            with open(SHM_DIR + self._session().data_name, "rb") as f:
                head = f.read(_SESSION_AT + 8)
        except FileNotFoundError:
            return False
        return (len(head) == _SESSION_AT + 8
                and int.from_bytes(head[_SESSION_AT:], "little") != self.session_id)

    # -- leases
    def _lease(self, slot: int, seq: int, missed: int) -> Optional[Lease]:
        s = self._session()
        h = s.h
        s.lease(slot, seq)
        if s.slot_seq(slot) != 2 * seq:
            s.unlease()
            return None
        sh = s.slot_header(slot)
        off = h["data_offset"] + slot * h["slot_stride"]
        arr = np.frombuffer(s.map, dtype=DTYPES[h["dtype"]], count=h["ny"] * h["nx"] * h["nz"],
                            offset=off).reshape(h["ny"], h["nx"], h["nz"]).view(VolumeArray)
        try:
            channels = read_channels(s.map, h, slot, off)
        except ProtocolError:
            overwritten = s.slot_seq(slot) != 2 * seq
            s.unlease()
            if overwritten:
                return None
            raise
        if s.slot_seq(slot) != 2 * seq:
            s.unlease()
            return None
        try:
            views = (read_views(s.map, off + h["views_offset"], h["views_bytes"],
                                (h["ny"], h["nx"], h["nz"]), voxel_size(sh))
                     if h["views_bytes"] and sh["flags"] & FLAG_VIEWS else Views({}))
        except ProtocolError:
            overwritten = s.slot_seq(slot) != 2 * seq
            s.unlease()  # the volume is not handed out: its slot is not held either
            if overwritten:
                return None  # the writer was rewriting the views: a volume missed, not malformed
            raise
        attach_channel_views(channels, views, s.map, h, off,
                             bool(sh["flags"] & FLAG_CHANNEL_VIEWS))
        arr.__dict__.update(views=views, channels=channels)
        arr.__dict__.update(sequence=seq, slot=slot, session_id=s.id,
                            volume_id=sh["volume_id"], epoch=sh["epoch"],
                            offset_x=sh["offset_x"], offset_y=sh["offset_y"],
                            t_first_ns=sh["t_first_ns"], t_last_ns=sh["t_last_ns"],
                            t_publish_ns=sh["t_publish_ns"], latency_ns=sh["latency_ns"],
                            volume_flags=sh["flags"], missed=missed,
                            voxel_size_um=voxel_size(sh), generation=sh["generation"])
        self._held = arr
        self.received += 1
        return Lease(self, arr)

    def _intact(self, arr: VolumeArray) -> bool:
        s = self._s
        return s is not None and s.id == arr.session_id and s.slot_seq(arr.slot) == 2 * arr.sequence

    def _release(self, arr: VolumeArray) -> bool:
        if self._held is not arr:
            return True
        if self._s is None:
            self._held = None
            raise VolrecError("the client of instance '%s' was closed while volume %d was "
                              "held: what was read cannot be checked" % (self.instance,
                                                                         arr.sequence))
        ok = self._intact(arr)
        self._session().unlease()
        self._held = None
        if not ok:
            self.torn += 1
        return ok

    def _account(self, seq: int) -> Optional[int]:
        if self._last_seq and seq <= self._last_seq:
            return None
        gap = seq - self._last_seq - 1 if self._last_seq else 0
        self.missed += gap
        self._last_seq = seq
        return gap

    # -- receiving
    def next_message(self, timeout: Optional[float] = None) -> Message:
        """Next message of a subscribed topic: ("vol", lease) where lease is a context
        manager giving the VolumeArray, or ("status"|"event", json_text). Raises Timeout,
        ProtocolError (a malformed message was dropped), Busy."""
        timeout = _seconds("timeout", timeout)
        sub = self._socket()
        s = self._session()
        if self._held is not None:
            raise Busy("a volume is still held; leave its with block first")
        deadline = None if timeout is None else time.monotonic() + timeout
        s.heartbeat()
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not sub.poll(None if left is None else int(left * 1000)):
                if deadline is not None and time.monotonic() >= deadline:
                    raise Timeout("no volume within %.3f s" % (timeout or 0.0))
                continue
            frames = sub.recv_multipart(copy=True)
            if len(frames) != 2:
                self.rejected += 1
                raise ProtocolError("message with %d frames (expected [topic][body])"
                                    % len(frames))
            topic, body = frames[0].decode("ascii", "replace"), frames[1]
            if topic == TOPIC_VOL and TOPIC_VOL in self._topics:
                try:
                    m = decode_vol(body)
                except ProtocolError:
                    self.rejected += 1
                    raise
                lease = self._on_vol(m)
                if lease is not None:
                    return TOPIC_VOL, lease
            elif topic in (TOPIC_STATUS, TOPIC_EVENT) and topic in self._topics:
                if len(body) > TEXT_MAX or b"\0" in body:
                    self.rejected += 1
                    raise ProtocolError("%s message of %d bytes is too long or holds a NUL"
                                        % (topic, len(body)))
                return topic, body.decode("utf-8", "replace")

    def _on_vol(self, m: Dict[str, int]) -> Optional[Lease]:
        if self._s is None or m["session_id"] != self._s.id:
            before = self.session_id
            try:
                self._remap()
            except (NoDaemon, BlockingIOError):
                return None
            if self.session_id == before or m["session_id"] != self.session_id:
                return None  # a stale message of another session
        s = self._session()
        h = s.h
        if (m["slot"] >= h["slot_count"] or (m["ny"], m["nx"], m["nz"], m["dtype"]) !=
                (h["ny"], h["nx"], h["nz"], h["dtype"])):
            self.rejected += 1
            raise ProtocolError("vol message does not match its segment: %r" % (m,))
        # the writer stores latest_sequence before it sends: a higher one was never published
        newest = s.latest_sequence
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

    def next_volume(self, timeout: Optional[float] = None) -> Lease:
        """Wait for the next volume; use as `with client.next_volume(1.0) as vol:`."""
        timeout = _seconds("timeout", timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            topic, payload = self.next_message(left)
            if topic == TOPIC_VOL:
                return payload  # type: ignore[return-value]

    def latest(self) -> Lease:
        """Lease the newest published volume from the segment header, without a message.
        Raises BlockingIOError (EAGAIN) when none is available yet, StaleSegment when the
        daemon that published into the segment died or stopped (and no new one replaced it)."""
        self._session()  # VolrecError once closed
        if self._held is not None:
            raise Busy("a volume is still held; leave its with block first")
        if self._session_changed():
            self._remap()
        s = self._session()
        s.check_writer()
        for _ in range(4):
            seq = s.latest_sequence
            if not seq:
                raise BlockingIOError(errno.EAGAIN, "no volume published yet")
            slot = s.latest_slot
            if slot >= s.h["slot_count"] or s.slot_seq(slot) != 2 * seq:
                found = [i for i in range(s.h["slot_count"]) if s.slot_seq(i) == 2 * seq]
                if not found:
                    continue
                slot = found[0]
            gap = 0 if self._last_seq and seq <= self._last_seq else self._account(seq) or 0
            lease = self._lease(slot, seq, gap)
            if lease is not None:
                return lease
        raise BlockingIOError(errno.EAGAIN, "the newest volume was overwritten while leased")
