# SPDX-License-Identifier: MIT
"""The channels of a volume (protocol 2.1, docs/protocol.md §2.7; docs/algorithms.md §5):
`output.channels` puts the structure, angiography and Doppler one after another in the slot.
`volume.channels["angio"]` is a ChannelArray mapped on the slot (zero-copy, covered by the
volume's lease: read it inside the `with` block) that says what its u8 values mean."""
from __future__ import annotations

import math
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple

import numpy as np

from ._protocol import (ANGIO_METHODS, CHANNEL_BULK, CHANNEL_DESC, CHANNEL_DOPPLER,
                        CHANNEL_IMAGE_KINDS, CHANNEL_KINDS, CHANNELS_MAX, DOPPLER_AXES,
                        CHANNEL_ANGIO, channel_view_offset, channel_views_step)
from .errors import ProtocolError
from .views import ImageArray, Views

__all__ = ["ChannelArray", "Channels"]


def _known(lo: float, hi: float) -> Optional[Tuple[float, float]]:
    """A mapping is two different finite numbers; anything else is unknown (None)."""
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) and lo != hi else None


class ChannelArray(np.ndarray):  # type: ignore[type-arg]
    """A read-only u8 volume [Y][X][Z] of one channel with what its values mean: kind
    ("structure", "angio", "doppler"), units ("dB", "dB^2", "1", "rad"), value_range (lo, hi):
    a voxel q stands for lo + (hi - lo) q / 255 (None: not told, a writer older than 2.1);
    method (angio: "svar" or "cdv"; Doppler: its axis, "bscan" or "ascan"; None for the
    structure), velocity_mm_s (Doppler: the axial velocity of q = 0 and of q = 255, None when
    unknown), period_us (Doppler: the time between a pair's A-scans, None unknown), mask_db
    (angio, Doppler), half_window, bulk (Doppler: the bulk phase removed),
    center_wavelength_nm and refractive_index (Doppler: the optics of its velocities, None
    unknown), and views: the
    channel's pictures (the first channel: every view of the volume; the others: enface_mean,
    enface_max and bscan with the views' parameters, docs/protocol.md §2.8; empty when the
    daemon publishes none)."""

    kind: str
    units: str
    value_range: Optional[Tuple[float, float]]
    method: Optional[str]
    velocity_mm_s: Optional[Tuple[float, float]]
    period_us: Optional[float]
    mask_db: Optional[float]
    half_window: int
    bulk: bool
    center_wavelength_nm: Optional[float]
    refractive_index: Optional[float]
    views: Views

    def __array_finalize__(self, obj: Any) -> None:
        if obj is not None and hasattr(obj, "kind"):
            self.__dict__.update(obj.__dict__)

    def values(self) -> "np.ndarray[Any, Any]":
        """The voxels in units (float64, a copy): lo + (hi - lo) q / 255."""
        if self.value_range is None:
            raise ValueError("the daemon did not say what the %s channel's values mean"
                             % self.kind)
        lo, hi = self.value_range
        return lo + (hi - lo) * np.asarray(self, dtype=np.float64) / 255.0

    def velocities_mm_s(self) -> "np.ndarray[Any, Any]":
        """Doppler: the axial velocity of each voxel in mm/s (float64, a copy)."""
        if self.velocity_mm_s is None:
            raise ValueError("the velocity of the %s channel is unknown (geometry."
                             "center_wavelength_nm and the period are needed)" % self.kind)
        lo, hi = self.velocity_mm_s
        return lo + (hi - lo) * np.asarray(self, dtype=np.float64) / 255.0


class Channels(Mapping[str, ChannelArray]):
    """The channels of one volume by name, in the order of the slot (iteration order)."""

    def __init__(self, arrays: Dict[str, ChannelArray]) -> None:
        self._arrays = arrays

    def __getitem__(self, name: str) -> ChannelArray:
        if name not in self._arrays:
            if name in CHANNEL_KINDS:
                raise KeyError("channel %r is not in this volume (output.channels: %s)"
                               % (name, ", ".join(self._arrays)))
            raise KeyError("%r is not a channel (channels: %s)" % (name, ", ".join(CHANNEL_KINDS)))
        return self._arrays[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._arrays)

    def __len__(self) -> int:
        return len(self._arrays)

    def __repr__(self) -> str:
        return "Channels(%s)" % ", ".join(self._arrays)


def read_channels(buf: Any, h: Mapping[str, int], slot: int, data_off: int) -> Channels:
    """The channels of slot in the data segment buf (header h, validated), the slot's data at
    data_off. A writer older than 2.1 (channels 0): one, the structure, its mapping unknown.
    ProtocolError for a descriptor of an unknown kind or a kind given twice."""
    shape = (h["ny"], h["nx"], h["nz"])
    n = h.get("channels", 0) or 1
    out: Dict[str, ChannelArray] = {}
    for c in range(n):
        d: Dict[str, Any]
        if h.get("channels", 0):
            d = CHANNEL_DESC.unpack(buf, h["channel_table_offset"]
                                    + (slot * h["channels"] + c) * h["channel_desc_size"])
        else:
            d = {"kind": 0, "method": 0, "value_lo": math.nan, "value_hi": math.nan,
                 "units": b"", "velocity_lo_mm_s": math.nan, "velocity_hi_mm_s": math.nan,
                 "period_us": 0.0, "mask_db": math.nan, "half_window": 0, "flags": 0,
                 "center_wavelength_nm": 0.0, "refractive_index": 0.0}
        kind = d["kind"]
        if kind >= len(CHANNEL_KINDS) or CHANNEL_KINDS[kind] in out:
            raise ProtocolError("slot %d: channel %d has kind %d, unknown or given twice"
                                % (slot, c, kind))
        name = CHANNEL_KINDS[kind]
        arr = np.frombuffer(buf, dtype=np.uint8, count=shape[0] * shape[1] * shape[2],
                            offset=data_off + c * h["volume_bytes"]).reshape(shape)
        a = arr.view(ChannelArray)
        method = (ANGIO_METHODS[d["method"]] if kind == CHANNEL_ANGIO
                  and d["method"] < len(ANGIO_METHODS)
                  else DOPPLER_AXES[d["method"]] if kind == CHANNEL_DOPPLER
                  and d["method"] < len(DOPPLER_AXES) else None)
        units = bytes(d["units"]).split(b"\0", 1)[0].decode("utf-8", "replace")
        a.__dict__.update(
            kind=name, units=units, value_range=_known(d["value_lo"], d["value_hi"]),
            method=method,
            velocity_mm_s=(_known(d["velocity_lo_mm_s"], d["velocity_hi_mm_s"])
                           if kind == CHANNEL_DOPPLER else None),
            period_us=(d["period_us"] if kind == CHANNEL_DOPPLER and d["period_us"] > 0
                       else None),
            mask_db=d["mask_db"] if kind != 0 and math.isfinite(d["mask_db"]) else None,
            half_window=d["half_window"],
            bulk=bool(kind == CHANNEL_DOPPLER and d["flags"] & CHANNEL_BULK),
            center_wavelength_nm=(d["center_wavelength_nm"] if kind == CHANNEL_DOPPLER
                                  and d["center_wavelength_nm"] > 0 else None),
            refractive_index=(d["refractive_index"] if kind == CHANNEL_DOPPLER
                              and d["refractive_index"] > 0 else None))
        a.__dict__.update(views=Views({}))
        out[name] = a
    assert len(out) <= CHANNELS_MAX
    return Channels(out)


def attach_channel_views(channels: Channels, views: Views, buf: Any, h: Mapping[str, int],
                         data_off: int, present: bool) -> None:
    """Give each channel its pictures: the first the volume's views, the others (when present:
    the slot's channel views flag) the en-face projections and B-scan of the channel views area,
    each with the parameters of the views' picture of its kind."""
    y, x, z = h["ny"], h["nx"], h["nz"]
    for c, name in enumerate(channels):
        arr = channels[name]
        if c == 0:
            arr.__dict__.update(views=views)
            continue
        if not present or not h.get("channel_views_bytes"):
            continue
        base = data_off + h["channel_views_offset"] + (c - 1) * channel_views_step(y, x, z)
        images: Dict[str, ImageArray] = {}
        for kind in CHANNEL_IMAGE_KINDS:
            if kind not in views:
                continue
            ref = views[kind]
            img = np.frombuffer(buf, dtype=np.uint8, count=ref.size,
                                offset=base + channel_view_offset(y, x, kind)).reshape(
                ref.shape).view(ImageArray)
            img.__dict__.update(ref.__dict__)
            images[kind] = img
        arr.__dict__.update(views=Views(images))
