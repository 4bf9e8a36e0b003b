# SPDX-License-Identifier: MIT
"""The views of a volume (docs/algorithms.md §4; protocol.h, views): small u8 pictures the daemon
writes into each slot beside the volume, and the volume reduced by blocks (§4.5).
`volume.views["bscan"]` is an ImageArray mapped on the slot (zero-copy, covered by the volume's
lease: read it inside the `with` block); `volume.views["volume"]` is a 3-D one, [Yr][Xr][Zr]."""
from __future__ import annotations

from typing import Any, Dict, Iterator, Mapping, Optional, Tuple

import numpy as np

from ._protocol import (IMAGE_COUNT, IMAGE_DESC, IMAGE_KINDS, REDUCE_NAMES, RENDER_MAX,
                        VIEWS_DATA_OFFSET, VIEWS_HEADER, VIEWS_MAGIC, VOLUME_MAX)
from .errors import ProtocolError

__all__ = ["ImageArray", "Views"]


VoxelSize = Tuple[Optional[float], Optional[float], Optional[float]]


class ImageArray(np.ndarray):  # type: ignore[type-arg]
    """A read-only u8 picture [rows][cols], or the reduced volume [Yr][Xr][Zr], with the
    parameters it was computed with: kind, volume_id (the volume it shows; a render may be older
    than its slot's volume), slab (za, zb), position (y0, x0, z0), angles_deg (azimuth,
    elevation), spacing (dx, dy, dz), step; and for the volume: block (its block factors along
    its axes, (f_y, f_x, f_z); (1, 1, 1) for a picture), reduce ("max" or "mean") and
    voxel_size_um (dx f_x, dy f_y, dz f_z) in µm, in the order of the volume's own
    voxel_size_um, None for each size the daemon does not know."""

    kind: str
    block: Tuple[int, int, int]
    reduce: str
    voxel_size_um: VoxelSize
    volume_id: int
    slab: Tuple[int, int]
    position: Tuple[int, int, int]
    angles_deg: Tuple[float, float]
    spacing: Tuple[float, float, float]
    step: float

    def __array_finalize__(self, obj: Any) -> None:
        if obj is not None and hasattr(obj, "kind"):
            self.__dict__.update(obj.__dict__)


class Views(Mapping[str, ImageArray]):
    """The pictures present in one slot, by name (enface_mean, enface_max, bscan, slice, plane,
    render, volume). Empty when the daemon publishes no views."""

    def __init__(self, images: Dict[str, ImageArray]) -> None:
        self._images = images

    def __getitem__(self, name: str) -> ImageArray:
        if name not in self._images:
            if name in IMAGE_KINDS:
                raise KeyError("view %r was not published with this volume" % name)
            raise KeyError("%r is not a view (views: %s)" % (name, ", ".join(IMAGE_KINDS)))
        return self._images[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._images)

    def __len__(self) -> int:
        return len(self._images)


def _misfit(name: str, d: Dict[str, Any], shape: Tuple[int, int, int]) -> str:
    """What is wrong with present picture d of a Y x X x Z volume (protocol.md §2.5), as
    libvolrec's volrec_view_image says it; "" when it fits."""
    y, x, z = shape
    rows, cols = d["rows"], d["cols"]
    blocks = (d["block_y"], d["block_x"], d["block_z"])
    if name == "volume":
        planes = d["planes"]
        if (min(blocks) < 1 or (rows, cols, planes) != tuple(
                -(-n // f) for n, f in zip(shape, blocks))
                or max(rows, cols, planes) > VOLUME_MAX or d["reduce"] >= len(REDUCE_NAMES)):
            return ("volume of %d x %d x %d in blocks of %d x %d x %d (reduce %d) for a %d x %d "
                    "x %d volume" % (rows, cols, planes, *blocks, d["reduce"], y, x, z))
        return ""
    if d["planes"] != 1 or blocks != (1, 1, 1):
        return "%s with %d planes in blocks of %d x %d x %d (a picture: 1)" % (
            name, d["planes"], *blocks)
    if name == "render":
        if not (1 <= rows <= RENDER_MAX and 1 <= cols <= RENDER_MAX):
            return "render of %d x %d pixels (1 to %d a side)" % (rows, cols, RENDER_MAX)
        return ""
    want = {"bscan": (x, z), "slice": (y, z)}.get(name, (y, x))
    if (rows, cols) != want:
        return "%s of %d x %d pixels for a %d x %d x %d volume (%d x %d)" % (
            name, rows, cols, y, x, z, want[0], want[1])
    if name.startswith("enface_") and not d["slab_za"] < d["slab_zb"] <= z:
        return "%s over depths [%d, %d) outside 0..%d" % (name, d["slab_za"], d["slab_zb"], z)
    if ((name == "bscan" and d["position_y"] >= y) or (name == "slice" and d["position_x"] >= x)
            or (name == "plane" and d["position_z"] >= z)):
        return "%s at [y %d, x %d, z %d] outside the %d x %d x %d volume" % (
            name, d["position_y"], d["position_x"], d["position_z"], y, x, z)
    return ""


def read_views(buf: Any, area: int, size: int, shape: Tuple[int, int, int],
               voxel_size_um: VoxelSize = (None, None, None)) -> Views:
    """The pictures of the views area at buf[area:area + size] of a volume of shape (Y, X, Z)
    and voxel size (dx, dy, dz) µm (None: unknown); ProtocolError if malformed, a picture that
    does not fit the volume included."""
    if size < VIEWS_DATA_OFFSET:
        raise ProtocolError("views area of %d bytes is too small" % size)
    h = VIEWS_HEADER.unpack(buf, area)
    if (h["magic"] != VIEWS_MAGIC or h["count"] < IMAGE_COUNT
            or h["desc_size"] != IMAGE_DESC.size):
        raise ProtocolError("malformed views area (magic 0x%08x, %d pictures, descriptors of %d "
                            "bytes)" % (h["magic"], h["count"], h["desc_size"]))
    images: Dict[str, ImageArray] = {}
    for i, name in enumerate(IMAGE_KINDS):
        d: Dict[str, Any] = IMAGE_DESC.unpack(buf, area + VIEWS_HEADER.size + i * IMAGE_DESC.size)
        n = d["rows"] * d["cols"] * d["planes"]
        if d["kind"] != i or d["offset"] < VIEWS_DATA_OFFSET or d["offset"] + n > size:
            raise ProtocolError("malformed views area: picture %s at %d, %d x %d in %d bytes"
                                % (name, d["offset"], d["rows"], d["cols"], size))
        if not d["present"]:
            continue
        why = _misfit(name, d, shape)
        if why:
            raise ProtocolError("malformed views area: %s" % why)
        dims = ((d["rows"], d["cols"], d["planes"]) if name == "volume"
                else (d["rows"], d["cols"]))
        img = np.frombuffer(buf, dtype=np.uint8, count=n, offset=area + d["offset"]).reshape(
            dims).view(ImageArray)
        fy, fx, fz = d["block_y"], d["block_x"], d["block_z"]
        dx, dy, dz = voxel_size_um
        img.__dict__.update(kind=name, volume_id=d["volume_id"], block=(fy, fx, fz),
                            reduce=REDUCE_NAMES[d["reduce"]],
                            voxel_size_um=(dx * fx if dx else None, dy * fy if dy else None,
                                           dz * fz if dz else None),
                            slab=(d["slab_za"], d["slab_zb"]),
                            position=(d["position_y"], d["position_x"], d["position_z"]),
                            angles_deg=(d["azimuth_deg"], d["elevation_deg"]),
                            spacing=(d["spacing_x"], d["spacing_y"], d["spacing_z"]),
                            step=d["step"])
        images[name] = img
    return Views(images)
