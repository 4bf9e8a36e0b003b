#!/usr/bin/python3
# SPDX-License-Identifier: MIT
# Writes the binary seeds of the fuzz harnesses that no other file provides (docs/fuzzing.md):
# a compact valid replay file (64-byte header plus offset table, no alignment padding), a valid
# `vol` message and the first 4 KiB of a valid data segment. The volrec-sim seeds
# (seeds/replay/valid-*) come from `volrec sim` at the geometry of tests/replay/make_bad.py.
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(rel, data):
    with open(os.path.join(HERE, "seeds", rel), "wb") as f:
        f.write(data)


# Replay: K 64, 4 A-scans, 3 B-scans, stride [2, 1], u16, 2 epochs at offsets (0,0), (1,0).
K, NX, NY, SX, SY, EPOCHS = 64, 4, 3, 2, 1, 2
table = struct.pack("<4I", 0, 0, 1, 0)
header_size = 64 + len(table)
fixed = b"VOLRECRP" + struct.pack("<IIIIIIQIIIIQ", 1, header_size, 0, K, NX, NY, EPOCHS, SX, SY,
                                  0x2, 0, 0)
samples = bytes((i * 7) & 0xFF for i in range(EPOCHS * NY * NX * K * 2))
write("replay/compact-offsets.rp", fixed + table + samples)

# vol message: 128 bytes, little-endian (include/volrec/protocol.h).
vol = struct.pack("<IHHIIQQQQIIIIiiQQQQII16x", 0x4D565256, 1, 0, 128, 1, 0x1234, 7, 42, 40,
                  2, 3, 4, 1, 1, 0, 1000, 2000, 3000, 1000, 0, 0)
assert len(vol) == 128
write("ipc/vol-valid.bin", vol)
write("ipc/vol-min-112.bin", vol[:8] + struct.pack("<I", 112) + vol[12:112])

# Data segment header: 2 slots of a 2 x 3 x 4 u8 volume, endpoint list at 512.
MIB2 = 2 << 20
hdr = struct.pack("<QHHIQIIIIIIQQQQQQIiQIIQII", 0x4745534D48535256, 1, 0, 256, 0x1234, 2, 3,
                  4, 1, 2, 128, 256, MIB2, MIB2, 24, 3 * MIB2, 0, 0, 1, 0, 1, 16, 512, 64, 0)
hdr += bytes(256 - len(hdr))
seg = bytearray(4096)
seg[:256] = hdr
eps = b"ipc:///run/volrec/default.pub\0\0"
seg[512:512 + len(eps)] = eps
write("ipc/shm-header-4k.bin", bytes(seg))


# Views area (fuzz_views): a valid area of the harness's 8 x 8 x 8 u8 volume, its six pictures
# (8 x 8 each, the render 16 x 16), after the two bytes that give the harness the area's size
# (n: (n % 1024 + 1) * 64 bytes); the same with no picture present; and cut to 1 KiB.
def views_area(present):
    count, desc, data_offset = 6, 96, 640
    head = struct.pack("<IIIIQQ", 0x57454956, count, desc, 0, 0, 0)
    descs, pics, off = b"", b"", data_offset
    for k in range(count):
        rows, cols = (16, 16) if k == 5 else (8, 8)
        d = struct.pack("<IIIIQQIIIIIIffffffQQ", k, present, rows, cols, off, 3, 0, 8, 4, 4, 4,
                        0, 30.0, 20.0, 1.0, 1.0, 1.0, 0.5, 0, 0)
        assert len(d) == desc
        descs += d
        pics += bytes((k * 31 + i) & 0xFF for i in range(rows * cols))
        pics += b"\0" * (-(rows * cols) % 64)
        off = data_offset + len(pics)
    a = head + descs
    return a + b"\0" * (data_offset - len(a)) + pics


def views_seed(area, size):
    return struct.pack("<H", size // 64 - 1) + area


valid = views_area(1)
write("views/valid.bin", views_seed(valid, (len(valid) + 63) // 64 * 64))
write("views/not-present.bin", views_seed(views_area(0), (len(valid) + 63) // 64 * 64))
write("views/cut-to-1k.bin", views_seed(valid, 1024))
