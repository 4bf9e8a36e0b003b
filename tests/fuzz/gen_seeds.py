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
