# SPDX-License-Identifier: MIT
"""The publishing protocol's binary layout in one place: constants, the fields of the shared
memory headers and of the `vol` message with their offsets, and the `vol` decoder.

include/volrec/protocol.h is normative (docs/protocol.md says it in words). Every constant
here is listed by its C name in C_CONSTANTS and every structure in LAYOUTS, and
tests/python/test_protocol_layout.py checks both against protocol.h, so neither side can
drift alone. The rest of the package reads offsets only from here.
"""
from __future__ import annotations

import math
import struct
from typing import Any, Dict, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from .errors import ProtocolError

PROTO_MAJOR = 2
PROTO_MINOR = 1

SHM_PREFIX = "/volrec."  # data segment "/volrec.<instance>"
SHM_LEASE_SUFFIX = ".readers"  # lease segment "/volrec.<instance>.readers"
DEFAULT_RUN_DIR = "/run/volrec"
INSTANCE_MAX = 63  # [A-Za-z0-9_-]{1,63}

SLOT_ALIGN = 2 << 20  # slot data offsets are multiples of 2 MiB
MAX_SLOTS = 64
MAX_READERS = 1024
SLOT_NONE = 0xFFFFFFFF
ENDPOINTS_MAX = 2048

SHM_MAGIC = int.from_bytes(b"VRSHMSEG", "little")
LEASE_MAGIC = int.from_bytes(b"VRLEASES", "little")
VOL_MAGIC = int.from_bytes(b"VRVM", "little")

DTYPE_U8, DTYPE_U16, DTYPE_F32 = 1, 2, 3
DTYPES: Mapping[int, "np.dtype[Any]"] = {
    DTYPE_U8: np.dtype(np.uint8),
    DTYPE_U16: np.dtype("<u2"),
    DTYPE_F32: np.dtype("<f4"),
}

STATE_INIT, STATE_LIVE, STATE_CLOSED = 0, 1, 2  # enum volrec_seg_state

FLAG_RESET = 0x2  # first volume after a reconstruction-history reset
FLAG_DROPPED_BEFORE = 0x4  # epochs were dropped before this volume: its history has a gap
FLAG_VIEWS = 0x8  # the slot holds views of the volume
FLAG_CHANNEL_VIEWS = 0x10  # the slot holds the pictures of its channels past the first (2.1)

# views (protocol.h, views): the pictures in each slot's views area, in this order
IMAGE_KINDS = ("enface_mean", "enface_max", "bscan", "slice", "plane", "render", "volume")
(IMAGE_ENFACE_MEAN, IMAGE_ENFACE_MAX, IMAGE_BSCAN, IMAGE_SLICE, IMAGE_PLANE,
 IMAGE_RENDER, IMAGE_VOLUME) = range(7)
IMAGE_COUNT = len(IMAGE_KINDS)
REDUCE_MAX, REDUCE_MEAN = 0, 1  # enum volrec_reduce: how the volume view combines a block
REDUCE_NAMES = ("max", "mean")
VIEWS_MAGIC = int.from_bytes(b"VIEW", "little")
RENDER_MAX = 1024
VOLUME_MAX = 256  # reduced volume voxels per side, at most
VIEWS_DATA_OFFSET = 704

# channels (2.1, docs/protocol.md §2.7): the volumes a slot holds, in enum volrec_channel_kind
CHANNEL_KINDS = ("structure", "angio", "doppler")
CHANNEL_STRUCTURE, CHANNEL_ANGIO, CHANNEL_DOPPLER = range(3)
CHANNELS_MAX = 3
CHANNEL_BULK = 0x1  # Doppler: the bulk phase of each pair is removed
ANGIO_METHODS = ("svar", "cdv")  # enum volrec_angio_method
ANGIO_SVAR, ANGIO_CDV = range(2)
DOPPLER_AXES = ("bscan", "ascan")  # enum volrec_doppler_axis
DOPPLER_BSCAN, DOPPLER_ASCAN = range(2)

# the pictures of each channel past the first (2.1, docs/protocol.md §2.8), in this order
CHANNEL_IMAGE_KINDS = ("enface_mean", "enface_max", "bscan")


def _a64(n: int) -> int:
    return (n + 63) & ~63


def channel_views_step(y: int, x: int, z: int) -> int:
    """volrec_channel_views_step(): bytes of one channel's pictures."""
    return 2 * _a64(y * x) + _a64(x * z)


def channel_view_offset(y: int, x: int, kind: str) -> int:
    """volrec_channel_view_offset(): where picture kind lies among a channel's pictures."""
    return {"enface_mean": 0, "enface_max": _a64(y * x), "bscan": 2 * _a64(y * x)}[kind]


def channel_views_bytes(y: int, x: int, z: int, channels: int) -> int:
    """volrec_channel_views_bytes(): bytes of the pictures of channels 1.. of a slot."""
    return (channels - 1) * channel_views_step(y, x, z) if channels > 1 else 0


#: What every refusal of another major version says after naming both versions.
SAME_MAJOR = (" (protocol %d.%d): volrecd and its clients must be of the same major version"
              % (PROTO_MAJOR, PROTO_MINOR))

TOPIC_VOL, TOPIC_STATUS, TOPIC_EVENT = "vol", "status", "event"
TEXT_MAX = 65536  # bound on status/event bodies
VOL_MSG_MIN = 112  # readers accept a `vol` body of at least this size

#: Every constant of protocol.h, by its C name: what tests/python checks against the header.
C_CONSTANTS: Mapping[str, Union[int, str]] = {
    "VOLREC_PROTO_MAJOR": PROTO_MAJOR,
    "VOLREC_PROTO_MINOR": PROTO_MINOR,
    "VOLREC_SHM_PREFIX": SHM_PREFIX,
    "VOLREC_SHM_LEASE_SUFX": SHM_LEASE_SUFFIX,
    "VOLREC_DEFAULT_RUN_DIR": DEFAULT_RUN_DIR,
    "VOLREC_INSTANCE_MAX": INSTANCE_MAX,
    "VOLREC_SLOT_ALIGN": SLOT_ALIGN,
    "VOLREC_MAX_SLOTS": MAX_SLOTS,
    "VOLREC_MAX_READERS": MAX_READERS,
    "VOLREC_SLOT_NONE": SLOT_NONE,
    "VOLREC_ENDPOINTS_MAX": ENDPOINTS_MAX,
    "VOLREC_SHM_MAGIC": SHM_MAGIC,
    "VOLREC_LEASE_MAGIC": LEASE_MAGIC,
    "VOLREC_VOL_MAGIC": VOL_MAGIC,
    "VOLREC_DTYPE_U8": DTYPE_U8,
    "VOLREC_DTYPE_U16": DTYPE_U16,
    "VOLREC_DTYPE_F32": DTYPE_F32,
    "VOLREC_STATE_INIT": STATE_INIT,
    "VOLREC_STATE_LIVE": STATE_LIVE,
    "VOLREC_STATE_CLOSED": STATE_CLOSED,
    "VOLREC_FLAG_RESET": FLAG_RESET,
    "VOLREC_FLAG_DROPPED_BEFORE": FLAG_DROPPED_BEFORE,
    "VOLREC_FLAG_VIEWS": FLAG_VIEWS,
    "VOLREC_FLAG_CHANNEL_VIEWS": FLAG_CHANNEL_VIEWS,
    "VOLREC_IMAGE_ENFACE_MEAN": IMAGE_ENFACE_MEAN,
    "VOLREC_IMAGE_ENFACE_MAX": IMAGE_ENFACE_MAX,
    "VOLREC_IMAGE_BSCAN": IMAGE_BSCAN,
    "VOLREC_IMAGE_SLICE": IMAGE_SLICE,
    "VOLREC_IMAGE_PLANE": IMAGE_PLANE,
    "VOLREC_IMAGE_RENDER": IMAGE_RENDER,
    "VOLREC_IMAGE_VOLUME": IMAGE_VOLUME,
    "VOLREC_IMAGE_COUNT": IMAGE_COUNT,
    "VOLREC_REDUCE_MAX": REDUCE_MAX,
    "VOLREC_REDUCE_MEAN": REDUCE_MEAN,
    "VOLREC_VIEWS_MAGIC": VIEWS_MAGIC,
    "VOLREC_RENDER_MAX": RENDER_MAX,
    "VOLREC_VOLUME_MAX": VOLUME_MAX,
    "VOLREC_VIEWS_DATA_OFFSET": VIEWS_DATA_OFFSET,
    "VOLREC_CHANNEL_STRUCTURE": CHANNEL_STRUCTURE,
    "VOLREC_CHANNEL_ANGIO": CHANNEL_ANGIO,
    "VOLREC_CHANNEL_DOPPLER": CHANNEL_DOPPLER,
    "VOLREC_CHANNEL_KINDS": len(CHANNEL_KINDS),
    "VOLREC_CHANNELS_MAX": CHANNELS_MAX,
    "VOLREC_CHANNEL_BULK": CHANNEL_BULK,
    "VOLREC_ANGIO_SVAR": ANGIO_SVAR,
    "VOLREC_ANGIO_CDV": ANGIO_CDV,
    "VOLREC_DOPPLER_BSCAN": DOPPLER_BSCAN,
    "VOLREC_DOPPLER_ASCAN": DOPPLER_ASCAN,
    "VOLREC_TOPIC_VOL": TOPIC_VOL,
    "VOLREC_TOPIC_STATUS": TOPIC_STATUS,
    "VOLREC_TOPIC_EVENT": TOPIC_EVENT,
    "VOLREC_TEXT_MAX": TEXT_MAX,
    "VOLREC_VOL_MSG_MIN": VOL_MSG_MIN,
}

#: volrec_dtype_size() of protocol.h: bytes per element of each dtype.
DTYPE_SIZES: Mapping[int, int] = {code: dt.itemsize for code, dt in DTYPES.items()}


def voxel_size(fields: Mapping[str, Any]) -> Tuple[Optional[float], Optional[float],
                                                    Optional[float]]:
    """The voxel size (dx, dy, dz) in µm of a slot header's or `vol` message's fields, None
    for each size that is unknown (0 on the wire, or anything but a finite positive number)."""
    out = []
    for name in ("voxel_dx_um", "voxel_dy_um", "voxel_dz_um"):
        v = float(fields.get(name, 0.0))
        out.append(v if math.isfinite(v) and v > 0 else None)
    return (out[0], out[1], out[2])


class Field(NamedTuple):
    """One integer field of a C structure: its name, byte offset and struct format code
    (B, H, I, Q unsigned; i signed 32-bit; d IEEE 754 binary64; "<n>s" a byte array)."""

    name: str
    offset: int
    code: str

    @property
    def size(self) -> int:
        return struct.calcsize("<" + self.code)


class Layout:
    """A structure of protocol.h: its C name, its size and the fields this package uses, in
    offset order (a prefix of the structure: fields past the last one are not read)."""

    def __init__(self, c_name: str, size: int, fields: Sequence[Tuple[str, int, str]]):
        self.c_name = c_name
        self.size = size
        self.fields: Tuple[Field, ...] = tuple(Field(*f) for f in fields)
        self.names: Tuple[str, ...] = tuple(f.name for f in self.fields)
        self.offset: Dict[str, int] = {f.name: f.offset for f in self.fields}
        fmt, pos = "<", 0
        for f in self.fields:
            if f.offset < pos:
                raise ValueError("%s.%s at %d overlaps the field before it"
                                 % (c_name, f.name, f.offset))
            fmt += ("%dx" % (f.offset - pos) if f.offset > pos else "") + f.code
            pos = f.offset + f.size
        if pos > size:
            raise ValueError("%s: fields end at %d, past its size %d" % (c_name, pos, size))
        self.struct = struct.Struct(fmt)

    @property
    def prefix(self) -> int:
        """Bytes from the start of the structure to the end of its last field used here."""
        return self.struct.size

    def unpack(self, buf: object, offset: int = 0) -> Dict[str, int]:
        """The fields of the structure at buf[offset:], by name."""
        return dict(zip(self.names, self.struct.unpack_from(buf, offset)))  # type: ignore

    def pack(self, **values: int) -> bytes:
        """The whole structure (size bytes) with the given fields set, the others zero."""
        unknown = set(values) - set(self.names)
        if unknown:
            raise KeyError("%s has no field %s" % (self.c_name, ", ".join(sorted(unknown))))
        out = bytearray(self.size)
        self.struct.pack_into(out, 0, *(values.get(n, b"" if f.code.endswith("s") else 0)
                                        for n, f in zip(self.names, self.fields)))
        return bytes(out)


#: struct volrec_shm_header: the data segment's header at offset 0.
SHM_HEADER = Layout("volrec_shm_header", 256, [
    ("magic", 0, "Q"), ("major", 8, "H"), ("minor", 10, "H"), ("header_size", 12, "I"),
    ("session_id", 16, "Q"), ("ny", 24, "I"), ("nx", 28, "I"), ("nz", 32, "I"),
    ("dtype", 36, "I"), ("slot_count", 40, "I"), ("slot_header_size", 44, "I"),
    ("slot_table_offset", 48, "Q"), ("data_offset", 56, "Q"), ("slot_stride", 64, "Q"),
    ("volume_bytes", 72, "Q"), ("segment_size", 80, "Q"), ("latest_sequence", 88, "Q"),
    ("latest_slot", 96, "I"), ("writer_pid", 100, "i"), ("created_ns", 104, "Q"),
    ("state", 112, "I"), ("max_readers", 116, "I"), ("endpoints_offset", 120, "Q"),
    ("endpoints_size", 128, "I"), ("reserved0", 132, "I"), ("views_offset", 136, "Q"),
    ("views_bytes", 144, "Q"), ("channels", 152, "I"), ("channel_desc_size", 156, "I"),
    ("channel_table_offset", 160, "Q"), ("channel_views_offset", 168, "Q"),
    ("channel_views_bytes", 176, "Q"),
])

#: struct volrec_slot_header: one per slot at slot_table_offset + i * slot_header_size.
SLOT_HEADER = Layout("volrec_slot_header", 128, [
    ("sequence", 0, "Q"), ("volume_id", 8, "Q"), ("epoch", 16, "Q"), ("offset_x", 24, "i"),
    ("offset_y", 28, "i"), ("t_first_ns", 32, "Q"), ("t_last_ns", 40, "Q"),
    ("t_publish_ns", 48, "Q"), ("latency_ns", 56, "Q"), ("flags", 64, "I"),
    ("generation", 68, "I"), ("voxel_dx_um", 72, "d"), ("voxel_dy_um", 80, "d"),
    ("voxel_dz_um", 88, "d"), ("channels", 96, "I"),
])

#: struct volrec_lease_header: the lease segment's header at offset 0.
LEASE_HEADER = Layout("volrec_lease_header", 64, [
    ("magic", 0, "Q"), ("major", 8, "H"), ("minor", 10, "H"), ("header_size", 12, "I"),
    ("session_id", 16, "Q"), ("entry_count", 24, "I"), ("entry_size", 28, "I"),
])

#: struct volrec_lease_entry: reader entry i at header_size + i * entry_size.
LEASE_ENTRY = Layout("volrec_lease_entry", 64, [
    ("pid", 0, "I"), ("slot", 4, "I"), ("sequence", 8, "Q"), ("session_id", 16, "Q"),
    ("heartbeat_ns", 24, "Q"),
])

#: struct volrec_vol_msg: the body of a `vol` message (readers accept VOL_MSG_MIN bytes; the
#: fields past a shorter body, as a writer older than 1.3 sends, read as zero).
VOL_MSG = Layout("volrec_vol_msg", 160, [
    ("magic", 0, "I"), ("major", 4, "H"), ("minor", 6, "H"), ("size", 8, "I"),
    ("slot", 12, "I"), ("session_id", 16, "Q"), ("sequence", 24, "Q"), ("volume_id", 32, "Q"),
    ("epoch", 40, "Q"), ("ny", 48, "I"), ("nx", 52, "I"), ("nz", 56, "I"), ("dtype", 60, "I"),
    ("offset_x", 64, "i"), ("offset_y", 68, "i"), ("t_first_ns", 72, "Q"),
    ("t_last_ns", 80, "Q"), ("t_publish_ns", 88, "Q"), ("latency_ns", 96, "Q"),
    ("flags", 104, "I"), ("generation", 108, "I"), ("voxel_dx_um", 112, "d"),
    ("voxel_dy_um", 120, "d"), ("voxel_dz_um", 128, "d"), ("channels", 136, "I"),
])

#: struct volrec_channel_desc (2.1): channel c of slot i at channel_table_offset +
#: (i * channels + c) * channel_desc_size.
CHANNEL_DESC = Layout("volrec_channel_desc", 128, [
    ("kind", 0, "I"), ("method", 4, "I"), ("offset", 8, "Q"), ("value_lo", 16, "d"),
    ("value_hi", 24, "d"), ("units", 32, "16s"), ("velocity_lo_mm_s", 48, "d"),
    ("velocity_hi_mm_s", 56, "d"), ("period_us", 64, "d"), ("mask_db", 72, "d"),
    ("half_window", 80, "I"), ("flags", 84, "I"), ("center_wavelength_nm", 88, "d"),
    ("refractive_index", 96, "d"),
])

#: struct volrec_views_header: at the start of each slot's views area.
VIEWS_HEADER = Layout("volrec_views_header", 32, [
    ("magic", 0, "I"), ("count", 4, "I"), ("desc_size", 8, "I"), ("reserved0", 12, "I"),
])

#: struct volrec_image_desc: picture i's descriptor at 32 + i * desc_size in the views area.
IMAGE_DESC = Layout("volrec_image_desc", 96, [
    ("kind", 0, "I"), ("present", 4, "I"), ("rows", 8, "I"), ("cols", 12, "I"),
    ("offset", 16, "Q"), ("volume_id", 24, "Q"), ("slab_za", 32, "I"), ("slab_zb", 36, "I"),
    ("position_y", 40, "I"), ("position_x", 44, "I"), ("position_z", 48, "I"),
    ("planes", 52, "I"), ("azimuth_deg", 56, "f"), ("elevation_deg", 60, "f"),
    ("spacing_x", 64, "f"), ("spacing_y", 68, "f"), ("spacing_z", 72, "f"), ("step", 76, "f"),
    ("block_y", 80, "I"), ("block_x", 84, "I"), ("block_z", 88, "I"), ("reduce", 92, "I"),
])

LAYOUTS: Tuple[Layout, ...] = (SHM_HEADER, SLOT_HEADER, LEASE_HEADER, LEASE_ENTRY, VOL_MSG,
                               VIEWS_HEADER, IMAGE_DESC, CHANNEL_DESC)

_VOL_PREAMBLE = struct.Struct("<IHHI")  # magic, major, minor, size: enough to judge the rest


def decode_vol(body: bytes) -> Dict[str, int]:
    """Decode a `vol` message body into a dict of its fields; ProtocolError if malformed or
    of another major version."""
    if len(body) < _VOL_PREAMBLE.size:
        raise ProtocolError("vol message of %d bytes is too short (at least %d)"
                            % (len(body), VOL_MSG_MIN))
    magic, major, _minor, size = _VOL_PREAMBLE.unpack_from(body, 0)
    if magic != VOL_MAGIC:
        raise ProtocolError("vol message has a bad magic 0x%08x" % magic)
    if major != PROTO_MAJOR:
        raise ProtocolError("vol message speaks protocol major version %d; this client "
                            "supports %d only%s" % (major, PROTO_MAJOR, SAME_MAJOR))
    if len(body) < VOL_MSG_MIN or size < VOL_MSG_MIN or size != len(body):
        raise ProtocolError("vol message is malformed: %d bytes received, size field %d"
                            % (len(body), size))
    m = VOL_MSG.unpack(body + bytes(max(0, VOL_MSG.prefix - len(body))))
    if (m["dtype"] not in DTYPES or not (m["ny"] and m["nx"] and m["nz"])
            or not m["sequence"] or not m["session_id"]):
        raise ProtocolError("vol message is malformed: %r" % (m,))
    return m
