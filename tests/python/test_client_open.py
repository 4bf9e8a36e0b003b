# SPDX-License-Identifier: MIT
"""Client() against segments that are not ready yet (issue 13 item 3: a reader opening while
the daemon creates its segment retries instead of failing with "bad magic 0") and segments a
dead daemon left behind (item 8: refused as libvolrec's writer-alive test refuses them).
Segments are made by hand in /dev/shm, initialized later by a thread of the test."""
import ctypes
import errno
import itertools
import os
import pathlib
import random
import signal
import struct
import subprocess
import threading
import time

import pytest

import volrec
from volrec import _protocol as proto

NY, NX, NZ, SLOTS, READERS = 2, 3, 4, 2, 4
MIB2 = proto.SLOT_ALIGN
SEGMENT_SIZE = MIB2 + SLOTS * MIB2

_names = itertools.count()


@pytest.fixture
def instance(tmp_path):
    """A fresh instance name; its segments in /dev/shm are removed afterwards."""
    name = "pyt%d-%d" % (os.getpid(), next(_names))
    yield name
    for suffix in ("", ".readers"):
        try:
            os.unlink("/dev/shm/volrec." + name + suffix)
        except FileNotFoundError:
            pass


def shm(instance, suffix=""):
    return pathlib.Path("/dev/shm/volrec." + instance + suffix)


def header(session, state=proto.STATE_LIVE, pid=None, **over):
    """A valid data segment header for NY x NX x NZ u8 volumes in SLOTS slots."""
    table_end = proto.SHM_HEADER.size + SLOTS * proto.SLOT_HEADER.size
    fields = dict(magic=proto.SHM_MAGIC, major=proto.PROTO_MAJOR, minor=proto.PROTO_MINOR,
                  header_size=proto.SHM_HEADER.size, session_id=session, ny=NY, nx=NX, nz=NZ,
                  dtype=proto.DTYPE_U8, slot_count=SLOTS,
                  slot_header_size=proto.SLOT_HEADER.size,
                  slot_table_offset=proto.SHM_HEADER.size, data_offset=MIB2, slot_stride=MIB2,
                  volume_bytes=NY * NX * NZ, segment_size=SEGMENT_SIZE,
                  latest_slot=proto.SLOT_NONE, writer_pid=os.getpid() if pid is None else pid,
                  created_ns=time.time_ns(), state=state, max_readers=READERS,
                  endpoints_offset=(table_end + 63) // 64 * 64,
                  endpoints_size=proto.ENDPOINTS_MAX)
    fields.update(over)
    return proto.SHM_HEADER.pack(**fields)


def lease_table(session):
    head = proto.LEASE_HEADER.pack(magic=proto.LEASE_MAGIC, major=proto.PROTO_MAJOR,
                                   header_size=proto.LEASE_HEADER.size, session_id=session,
                                   entry_count=READERS, entry_size=proto.LEASE_ENTRY.size)
    return head + proto.LEASE_ENTRY.pack(slot=proto.SLOT_NONE) * READERS


def write_at(path, offset, data, size=None):
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o640)
    try:
        if size is not None:
            os.ftruncate(fd, size)
        os.pwrite(fd, data, offset)
    finally:
        os.close(fd)


def create(instance, stage, session, pid=None):
    """The segment as a writer leaves it at one stage of its creation:
    empty: created, not sized; short: sized smaller than its header; zeroed: sized, header not
    written (what the writer's posix_fallocate leaves); init: header written, state 0;
    live: ready, lease table included."""
    data = shm(instance)
    if stage == "empty":
        write_at(data, 0, b"", size=0)
    elif stage == "short":
        write_at(data, 0, b"", size=100)
    elif stage == "zeroed":
        write_at(data, 0, b"", size=SEGMENT_SIZE)
    elif stage == "init":
        write_at(data, 0, header(session, state=proto.STATE_INIT, pid=pid), size=SEGMENT_SIZE)
    elif stage == "live":
        write_at(data, 0, header(session, state=proto.STATE_INIT, pid=pid), size=SEGMENT_SIZE)
        write_at(shm(instance, ".readers"), 0, lease_table(session))
        write_at(data, 0, header(session, state=proto.STATE_LIVE, pid=pid))
    else:
        raise ValueError(stage)


def later(delay, fn, *args):
    t = threading.Timer(delay, fn, args)
    t.start()
    return t


NOT_READY = ["empty", "short", "zeroed", "init"]


@pytest.mark.parametrize("stage", NOT_READY)
def test_open_retries_until_a_segment_being_created_becomes_ready(instance, stage):
    session = random.getrandbits(63) | 1
    create(instance, stage, session)
    t0 = time.monotonic()
    t = later(0.3, create, instance, "live", session)
    try:
        with volrec.Client(instance, run_dir="/nonexistent", open_timeout=20.0) as c:
            waited = time.monotonic() - t0
            assert c.session_id == session
            assert c.writer_alive
    finally:
        t.join()
    assert waited >= 0.25, "opened after %.3f s, before the segment was ready" % waited


@pytest.mark.parametrize("stage", NOT_READY)
def test_open_fails_with_not_ready_when_the_segment_never_becomes_ready(instance, stage):
    create(instance, stage, random.getrandbits(63) | 1)
    t0 = time.monotonic()
    with pytest.raises(volrec.NotReady) as e:
        volrec.Client(instance, run_dir="/nonexistent", open_timeout=0.3)
    waited = time.monotonic() - t0
    assert 0.3 <= waited < 10, waited
    assert isinstance(e.value, BlockingIOError) and isinstance(e.value, volrec.VolrecError)
    assert e.value.errno == errno.EAGAIN
    assert "not ready after 0.30 s" in str(e.value), str(e.value)


def test_open_waits_for_the_lease_table_of_a_live_segment(instance):
    session = random.getrandbits(63) | 1
    write_at(shm(instance), 0, header(session), size=SEGMENT_SIZE)
    write_at(shm(instance, ".readers"), 0, lease_table(session + 1))  # the previous session's
    t = later(0.3, write_at, shm(instance, ".readers"), 0, lease_table(session))
    try:
        with volrec.Client(instance, run_dir="/nonexistent", open_timeout=20.0) as c:
            assert c.session_id == session
    finally:
        t.join()


def test_a_foreign_segment_is_still_a_protocol_error_not_a_retry(instance):
    write_at(shm(instance), 0, b"NOTVOLRC" + bytes(248), size=SEGMENT_SIZE)
    t0 = time.monotonic()
    with pytest.raises(volrec.ProtocolError, match="bad magic"):
        volrec.Client(instance, run_dir="/nonexistent", open_timeout=5.0)
    assert time.monotonic() - t0 < 2.0, "a foreign segment was retried"


# ---- stale segments of a dead writer --------------------------------------------------------

def dead_pid():
    p = subprocess.Popen(["/bin/true"])
    p.wait()
    return p.pid


@pytest.mark.parametrize("state,pid,why", [
    (proto.STATE_LIVE, "dead", "is gone"),
    (proto.STATE_CLOSED, "self", "closed it"),
    (proto.STATE_LIVE, 0, "is gone"),
])
def test_open_refuses_a_segment_whose_writer_is_not_alive(instance, state, pid, why):
    session = random.getrandbits(63) | 1
    pid = {"dead": dead_pid(), "self": os.getpid()}.get(pid, pid)
    create(instance, "live", session, pid=pid)
    write_at(shm(instance), 0, header(session, state=state, pid=pid))
    t0 = time.monotonic()
    with pytest.raises(volrec.StaleSegment, match=why) as e:
        volrec.Client(instance, run_dir="/nonexistent", open_timeout=5.0)
    assert time.monotonic() - t0 < 2.0, "a stale segment was retried"
    assert isinstance(e.value, volrec.NoDaemon)
    assert "pid %d" % pid in str(e.value) and instance in str(e.value)


class Info(ctypes.Structure):
    """struct volrec_segment_info (include/volrec/client.h)."""
    _fields_ = [("session_id", ctypes.c_uint64), ("ny", ctypes.c_uint32),
                ("nx", ctypes.c_uint32), ("nz", ctypes.c_uint32),
                ("dtype", ctypes.c_uint32), ("slots", ctypes.c_uint32),
                ("max_readers", ctypes.c_uint32), ("writer_pid", ctypes.c_int32),
                ("writer_alive", ctypes.c_int), ("created_ns", ctypes.c_uint64),
                ("latest_sequence", ctypes.c_uint64), ("endpoint", ctypes.c_char_p)]


def libvolrec(build_dir):
    """The build's libvolrec with the open/info/close prototypes, or None where it cannot be
    loaded into python (a sanitized build) or is not built."""
    lib_path = build_dir / "lib/libvolrec.so.0"
    if os.environ.get("VOLREC_SANITIZER") or not lib_path.exists():
        return None
    lib = ctypes.CDLL(str(lib_path))
    lib.volrec_client_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p,
                                       ctypes.POINTER(ctypes.c_void_p)]
    lib.volrec_client_info.argtypes = [ctypes.c_void_p, ctypes.POINTER(Info)]
    lib.volrec_client_close.argtypes = [ctypes.c_void_p]
    return lib


def test_writer_alive_is_libvolrecs(instance, build_dir):
    """Python refuses a segment exactly when libvolrec says its writer is not alive."""
    lib = libvolrec(build_dir)
    if lib is None:
        pytest.skip("libvolrec not built, or sanitized (it cannot be loaded into python)")
    session = random.getrandbits(63) | 1
    create(instance, "live", session)
    cases = [(proto.STATE_LIVE, os.getpid()), (proto.STATE_LIVE, dead_pid()),
             (proto.STATE_CLOSED, os.getpid()), (proto.STATE_LIVE, 0),
             (proto.STATE_LIVE, -1), (proto.STATE_LIVE, 1)]
    for state, pid in cases:
        write_at(shm(instance), 0, header(session, state=state, pid=pid))
        handle = ctypes.c_void_p()
        rc = lib.volrec_client_open(instance.encode(), b"/nonexistent", ctypes.byref(handle))
        c_alive = None
        if rc == 0:
            info = Info()
            lib.volrec_client_info(handle, ctypes.byref(info))
            c_alive = bool(info.writer_alive)
            lib.volrec_client_close(handle)
        try:
            volrec.Client(instance, run_dir="/nonexistent").close()
            py_alive = True
        except volrec.StaleSegment:
            py_alive = False
        assert py_alive == bool(c_alive), "state %d pid %d: libvolrec open %d alive %s, " \
            "Python %s" % (state, pid, rc, c_alive, py_alive)


def test_a_sigkilled_writers_segment_is_refused_and_latest_stops(instance, build_dir):
    writer_bin = build_dir / "tests/ipc_testwriter"
    if not writer_bin.exists():
        pytest.skip("ipc_testwriter not built (make tests-build)")
    run_dir = pathlib.Path("/tmp") / ("vrpy-" + instance)
    run_dir.mkdir()
    w = subprocess.Popen([str(writer_bin), "-i", instance, "-r", str(run_dir), "-n", "0",
                          "-R", "200", "-g", "4x8x16"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        line = w.stdout.readline()
        assert line.startswith("ready"), line + w.stderr.read()
        client = volrec.Client(instance, run_dir=str(run_dir), open_timeout=10.0)
        deadline = time.monotonic() + 20
        while True:
            try:
                with client.latest() as vol:
                    before = vol.sequence
                break
            except (BlockingIOError, volrec.TornRead):
                assert time.monotonic() < deadline, "no volume published"
                time.sleep(0.01)
        assert client.writer_alive
        w.send_signal(signal.SIGKILL)
        w.wait()  # reaped: a zombie's pid still exists for kill(pid, 0)
        assert shm(instance).exists(), "the killed writer left no segment to test with"
        assert not client.writer_alive
        with pytest.raises(volrec.StaleSegment, match=r"pid %d\) is gone" % w.pid):
            client.latest()
        client.close()
        with pytest.raises(volrec.StaleSegment, match="pid %d" % w.pid) as e:
            volrec.Client(instance, run_dir=str(run_dir), open_timeout=5.0)
        assert isinstance(e.value, volrec.NoDaemon)
        assert before >= 1
    finally:
        if w.poll() is None:
            w.kill()
            w.wait()
        w.stdout.close()
        w.stderr.close()
        for f in run_dir.iterdir():
            f.unlink()
        run_dir.rmdir()


# ---- a malformed header ---------------------------------------------------------------------

@pytest.mark.parametrize("views_offset,views_bytes", [
    (MIB2 - 64, proto.VIEWS_DATA_OFFSET),  # past the slot: the next slot's bytes
    (SLOTS * MIB2, proto.VIEWS_DATA_OFFSET),  # past the end of the segment
    (0, proto.VIEWS_DATA_OFFSET),  # over the volume itself
    (64, 64),  # smaller than the header and descriptors read from it
    (96, proto.VIEWS_DATA_OFFSET),  # not 64-aligned
])
def test_open_refuses_a_views_area_outside_its_slot_as_libvolrec_does(instance, build_dir,
                                                                      views_offset,
                                                                      views_bytes):
    """A views area the pictures would be read from another slot, the volume or past the
    segment's end is a ProtocolError naming it, as libvolrec's ipc_shm_validate refuses it
    (-EPROTO), not a picture of other bytes."""
    session = random.getrandbits(63) | 1
    create(instance, "live", session)
    write_at(shm(instance), 0, header(session, views_offset=views_offset,
                                      views_bytes=views_bytes))
    with pytest.raises(volrec.ProtocolError, match="views area is inconsistent"):
        volrec.Client(instance, run_dir="/nonexistent", open_timeout=5.0)
    lib_path = build_dir / "lib/libvolrec.so.0"
    if os.environ.get("VOLREC_SANITIZER") or not lib_path.exists():
        return
    lib = ctypes.CDLL(str(lib_path))
    lib.volrec_client_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p,
                                       ctypes.POINTER(ctypes.c_void_p)]
    lib.volrec_client_close.argtypes = [ctypes.c_void_p]
    handle = ctypes.c_void_p()
    rc = lib.volrec_client_open(instance.encode(), b"/nonexistent", ctypes.byref(handle))
    if rc == 0:
        lib.volrec_client_close(handle)
    assert rc == -errno.EPROTO, "libvolrec open: %d" % rc


def test_open_accepts_a_views_area_inside_its_slot(instance):
    session = random.getrandbits(63) | 1
    create(instance, "live", session)
    write_at(shm(instance), 0, header(session, views_offset=64,
                                      views_bytes=proto.VIEWS_DATA_OFFSET))
    with volrec.Client(instance, run_dir="/nonexistent", open_timeout=5.0) as c:
        assert c.session_id == session


# ---- arguments of the wrong type or value ---------------------------------------------------

@pytest.mark.parametrize("kw,error,what", [
    (dict(open_timeout=float("nan")), ValueError, "open_timeout"),
    (dict(open_timeout=-1), ValueError, "open_timeout"),
    (dict(open_timeout="1"), TypeError, "open_timeout"),
    (dict(open_timeout=None), TypeError, "open_timeout"),
    (dict(rcvhwm=-1), ValueError, "rcvhwm"),
    (dict(rcvhwm=1.5), ValueError, "rcvhwm"),
    (dict(topics="vol"), TypeError, "topics"),
    (dict(topics=("vol", "volumes")), ValueError, "topic 'volumes'"),
])
def test_client_arguments_of_a_wrong_type_or_value_name_the_argument(instance, kw, error, what):
    session = random.getrandbits(63) | 1
    create(instance, "live", session)
    with pytest.raises(error, match=what):
        volrec.Client(instance, run_dir="/nonexistent", **kw)


@pytest.mark.parametrize("call", ["next_message", "next_volume"])
@pytest.mark.parametrize("timeout,error", [
    (float("nan"), ValueError), (float("inf"), ValueError), (-1.0, ValueError),
    ("1", TypeError), (True, TypeError),
])
def test_a_wrong_timeout_is_refused_at_once(instance, call, timeout, error):
    """A NaN timeout used to make next_message poll forever at full speed."""
    session = random.getrandbits(63) | 1
    create(instance, "live", session)
    result = []
    with volrec.Client(instance, run_dir="/nonexistent", open_timeout=5.0) as c:
        def run():
            try:
                getattr(c, call)(timeout)
                result.append(None)
            except BaseException as e:  # noqa: B902 - what it raised is the result
                result.append(e)
        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join(5.0)
        assert not t.is_alive(), "%s(%r) still waiting after 5 s" % (call, timeout)
    assert isinstance(result[0], error) and "timeout" in str(result[0]), repr(result[0])


# ---- views that do not fit their volume -----------------------------------------------------

VIEWS_OFFSET = 64  # after the 2 x 3 x 4 volume
VIEW_DIMS = {"enface_mean": (NY, NX), "enface_max": (NY, NX), "bscan": (NX, NZ),
             "slice": (NY, NZ), "plane": (NY, NX), "render": (4, 6),
             "volume": (NY, 2, 2)}  # blocks of 1 x 2 x 2, the far x block of one column


def publish_with_views(instance, session, **broken):
    """A live segment whose slot 0 holds volume 1 with views, picture fields overridden by
    broken = {kind: {field: value}}."""
    views_bytes = proto.VIEWS_DATA_OFFSET + 64 * len(proto.IMAGE_KINDS)
    create(instance, "live", session)
    write_at(shm(instance), 0, header(session, views_offset=VIEWS_OFFSET, views_bytes=views_bytes,
                                      latest_sequence=1, latest_slot=0))
    write_at(shm(instance), proto.SHM_HEADER.size,
             proto.SLOT_HEADER.pack(sequence=2, volume_id=1, flags=proto.FLAG_VIEWS))
    area = MIB2 + VIEWS_OFFSET
    descs = b""
    for k, name in enumerate(proto.IMAGE_KINDS):
        fields = dict(kind=k, present=1, rows=VIEW_DIMS[name][0], cols=VIEW_DIMS[name][1],
                      offset=proto.VIEWS_DATA_OFFSET + 64 * k, slab_zb=NZ, position_y=NY - 1,
                      position_x=NX - 1, position_z=NZ - 1, planes=1, block_y=1, block_x=1,
                      block_z=1)
        if name == "volume":
            fields.update(planes=VIEW_DIMS[name][2], block_x=2, block_z=2,
                          reduce=proto.REDUCE_MEAN)
        fields.update(broken.get(name, {}))
        descs += proto.IMAGE_DESC.pack(**fields)
    write_at(shm(instance), area,
             proto.VIEWS_HEADER.pack(magic=proto.VIEWS_MAGIC, count=len(proto.IMAGE_KINDS),
                                     desc_size=proto.IMAGE_DESC.size) + descs)


def test_views_of_a_volume_are_read(instance):
    publish_with_views(instance, random.getrandbits(63) | 1)
    with volrec.Client(instance, run_dir="/nonexistent", open_timeout=5.0) as c:
        with c.latest() as vol:
            assert {k: v.shape for k, v in vol.views.items()} == VIEW_DIMS
            v = vol.views["volume"]
            assert (v.block, v.reduce) == ((1, 2, 2), "mean")
            assert v.voxel_size_um == (None, None, None)  # the volume's is unknown
            assert vol.views["bscan"].block == (1, 1, 1)


def test_the_volume_view_voxel_size_is_the_volume_s_times_its_blocks(instance):
    """(dx f_x, dy f_y, dz f_z) µm; a size the daemon does not know stays unknown."""
    publish_with_views(instance, random.getrandbits(63) | 1)
    write_at(shm(instance), proto.SHM_HEADER.size,
             proto.SLOT_HEADER.pack(sequence=2, volume_id=1, flags=proto.FLAG_VIEWS,
                                    voxel_dx_um=5.0, voxel_dz_um=3.5))
    with volrec.Client(instance, run_dir="/nonexistent", open_timeout=5.0) as c:
        with c.latest() as vol:
            assert vol.voxel_size_um == (5.0, None, 3.5)
            assert vol.views["volume"].voxel_size_um == (10.0, None, 7.0)


@pytest.mark.parametrize("broken,what", [
    (dict(bscan=dict(rows=0)), "bscan of 0 x 4 pixels"),
    (dict(slice=dict(rows=NZ, cols=NY)), "slice of 4 x 2 pixels"),
    (dict(render=dict(cols=0)), "render of 4 x 0 pixels"),
    (dict(plane=dict(position_z=NZ)), "plane at \\[y 1, x 2, z 4\\]"),
    (dict(enface_max=dict(slab_za=2, slab_zb=2)), "depths \\[2, 2\\)"),
    (dict(volume=dict(cols=3)), "volume of 2 x 3 x 2 in blocks of 1 x 2 x 2"),
    (dict(volume=dict(block_z=0)), "volume of 2 x 2 x 2 in blocks of 1 x 2 x 0"),
    (dict(volume=dict(reduce=2)), "reduce 2"),
    (dict(bscan=dict(planes=2)), "bscan with 2 planes"),
])
def test_a_picture_that_does_not_fit_its_volume_is_a_protocol_error(instance, broken, what):
    """As libvolrec's volrec_view_image: a picture of another size than its kind's for the
    volume, or of a plane or slab outside it, is malformed, not a picture to show; the slot is
    not left leased."""
    publish_with_views(instance, random.getrandbits(63) | 1, **broken)
    with volrec.Client(instance, run_dir="/nonexistent", open_timeout=5.0) as c:
        with pytest.raises(volrec.ProtocolError, match=what):
            c.latest()
        lease = proto.LEASE_HEADER.size + proto.LEASE_ENTRY.offset["slot"]
        slot = struct.unpack_from("<I", shm(instance, ".readers").read_bytes(), lease)[0]
        assert slot == proto.SLOT_NONE, "slot %d left leased" % slot


def test_views_being_rewritten_while_leased_are_a_missed_volume_not_a_protocol_error(
        instance, monkeypatch):
    """The writer clears a slot's views area before it describes the new pictures; a reader
    that leased the slot just before the writer took it reads that as a malformed area. The
    sequence tells: the volume was overwritten, which is a miss (or the next volume), never a
    ProtocolError."""
    session = random.getrandbits(63) | 1
    publish_with_views(instance, session)
    data = shm(instance)
    views_bytes = proto.VIEWS_DATA_OFFSET + 64 * len(proto.IMAGE_KINDS)
    area0 = MIB2 + VIEWS_OFFSET
    good = data.read_bytes()[area0:area0 + views_bytes]
    original = volrec.client.read_views
    calls = []

    def writer_takes_slot_0(*args, **kw):
        if not calls:  # volume 2 goes to slot 1; slot 0 is being rewritten, its views cleared
            write_at(data, MIB2 + MIB2 + VIEWS_OFFSET, good)
            write_at(data, proto.SHM_HEADER.size + proto.SLOT_HEADER.size,
                     proto.SLOT_HEADER.pack(sequence=4, volume_id=2, flags=proto.FLAG_VIEWS))
            write_at(data, 0, header(session, views_offset=VIEWS_OFFSET, views_bytes=views_bytes,
                                     latest_sequence=2, latest_slot=1))
            write_at(data, proto.SHM_HEADER.size, proto.SLOT_HEADER.pack(sequence=5))
            write_at(data, area0, bytes(proto.VIEWS_DATA_OFFSET))
        calls.append(args)
        return original(*args, **kw)

    monkeypatch.setattr(volrec.client, "read_views", writer_takes_slot_0)
    with volrec.Client(instance, run_dir="/nonexistent", open_timeout=5.0) as c:
        with c.latest() as vol:
            assert (vol.sequence, vol.slot, vol.volume_id) == (2, 1, 2)
            assert sorted(vol.views) == sorted(proto.IMAGE_KINDS)
        assert len(calls) == 2 and c.rejected == 0


def test_an_endpoint_list_that_is_not_text_is_a_protocol_error(instance):
    session = random.getrandbits(63) | 1
    create(instance, "live", session)
    table_end = proto.SHM_HEADER.size + SLOTS * proto.SLOT_HEADER.size
    write_at(shm(instance), (table_end + 63) // 64 * 64, b"ipc://\xff\xfe/x.pub\0")
    with pytest.raises(volrec.ProtocolError, match="endpoint list"):
        volrec.Client(instance, run_dir="/nonexistent")


def test_a_client_dropped_without_close_gives_back_its_reader_entry(instance):
    """Each Client holds one of the ipc.max_readers entries (READERS here); one that is
    dropped without close() used to keep it, and the slot it leased, until the process
    exited, so a loop opening clients ran out of entries."""
    create(instance, "live", random.getrandbits(63) | 1)
    for _ in range(3 * READERS):
        c = volrec.Client(instance, run_dir="/nonexistent")
        del c
    with volrec.Client(instance, run_dir="/nonexistent") as c:
        assert c.session_id


def test_a_full_reader_table_is_readers_full(instance):
    """libvolrec says -EUSERS; the package raised its base class, which a caller cannot tell
    from the others."""
    create(instance, "live", random.getrandbits(63) | 1)
    clients = [volrec.Client(instance, run_dir="/nonexistent") for _ in range(READERS)]
    try:
        with pytest.raises(volrec.ReadersFull, match=f"all {READERS} reader entries"):
            volrec.Client(instance, run_dir="/nonexistent")
    finally:
        for c in clients:
            c.close()
    with volrec.Client(instance, run_dir="/nonexistent") as c:  # one given back: open again
        assert c.session_id


def test_a_volume_held_when_its_client_is_closed_says_so(instance):
    """Closing the client while a volume is held used to make check() report a torn read and
    latest() report Busy; the volume can no longer be checked, and the client is closed."""
    publish_with_views(instance, random.getrandbits(63) | 1)
    c = volrec.Client(instance, run_dir="/nonexistent", open_timeout=5.0)
    lease = c.latest()
    c.close()
    for call in (lease.check, c.latest, lambda: c.next_message(0)):
        with pytest.raises(volrec.VolrecError, match="is closed") as e:
            call()
        assert type(e.value) is volrec.VolrecError
    with pytest.raises(volrec.VolrecError, match="closed while volume 1 was held"):
        with lease:
            pass
    lease.release()  # released: nothing more to say
    c.close()


def test_the_endpoint_list_is_read_as_libvolrec_reads_it(instance, build_dir):
    """The list ends at its first empty string, and a last string without its NUL is not an
    endpoint: Python took the entries after an empty one and an unterminated one, and so could
    connect where libvolrec would not. libvolrec's choice is compared too where it can be
    loaded (not a sanitized build)."""
    lib = libvolrec(build_dir)
    create(instance, "live", random.getrandbits(63) | 1)
    table_end = proto.SHM_HEADER.size + SLOTS * proto.SLOT_HEADER.size
    at = (table_end + 63) // 64 * 64
    tcp = b"tcp://127.0.0.1:5999\0"
    cases = [tcp + b"\0ipc:///tmp/after-empty.pub\0",
             tcp + b"ipc:///tmp/" + b"x" * (proto.ENDPOINTS_MAX - len(tcp) - 11)]
    for raw in cases:
        write_at(shm(instance), at, raw.ljust(proto.ENDPOINTS_MAX, b"\0"))
        with volrec.Client(instance, run_dir="/nonexistent") as c:
            assert c._endpoint == "tcp://127.0.0.1:5999", (raw[:40], c._endpoint)
        if lib is None:
            continue
        handle = ctypes.c_void_p()
        assert lib.volrec_client_open(instance.encode(), b"/nonexistent",
                                      ctypes.byref(handle)) == 0
        info = Info()
        lib.volrec_client_info(handle, ctypes.byref(info))
        c_endpoint = info.endpoint.decode()
        lib.volrec_client_close(handle)
        assert c_endpoint == "tcp://127.0.0.1:5999", (raw[:40], c_endpoint)
