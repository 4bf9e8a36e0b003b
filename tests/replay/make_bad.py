#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Regenerate the malformed replay corpus in tests/replay/bad/ (deterministic; the files are
committed). Every file is checked against the geometry the tests configure:
K 64, 4 A-scans per B-scan, 3 B-scans per epoch, stride [2, 1], u16, unidirectional.
CASES lists file, format (auto|raw) and the fragment the error message must contain."""
import os
import struct

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bad")
K, NX, NY, SX, SY = 64, 4, 3, 2, 1
EPOCH = K * NX * NY * 2


def header(version=1, header_size=None, sample=0, k=K, nx=NX, ny=NY, epochs=2, sx=SX, sy=SY,
           flags=0, meta=b"", meta_len=None, offsets=None, reserved=0, magic=b"VOLRECRP"):
    table = b"".join(struct.pack("<II", *o) for o in (offsets or []))
    body = table + meta
    if header_size is None:
        header_size = (64 + len(body) + 63) // 64 * 64
    fixed = magic + struct.pack("<IIIIIIQIIIIQ", version, header_size, sample, k, nx, ny, epochs,
                                sx, sy, flags, len(meta) if meta_len is None else meta_len,
                                reserved)
    h = fixed + body
    return h + b"\0" * max(0, header_size - len(h))


def data(epochs=2, sample_bytes=2, k=K, nx=NX, ny=NY):
    n = epochs * k * nx * ny * sample_bytes
    return bytes((i * 7 + 3) & 0xFF for i in range(n))


def good(**kw):
    return header(**kw) + data()


CASES = []


def case(name, fmt, fragment, content):
    CASES.append((name, fmt, fragment))
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(content)


def main():
    os.makedirs(HERE, exist_ok=True)
    for f in os.listdir(HERE):
        if f.endswith((".rp", ".raw")):
            os.unlink(os.path.join(HERE, f))
    case("empty.rp", "auto", "file is empty", b"")
    case("short_magic.rp", "auto", "too short for the 8-byte magic", b"VOLR")
    case("wrong_magic.rp", "auto", "not a volrec replay file", good(magic=b"OCTRAWXX"))
    case("truncated_header.rp", "auto", "truncated header: the file is 40 bytes", good()[:40])
    case("wrong_version.rp", "auto", "unsupported format version 3", good(version=3))
    case("header_size_small.rp", "auto", "header_size 32 is smaller than the 64-byte",
         header() + data())  # patched below
    case("header_size_huge.rp", "auto", "header_size 2147483647 exceeds the limit",
         header(header_size=64)[:12] + struct.pack("<I", 0x7FFFFFFF) + header()[16:] + data())
    case("header_size_past_eof.rp", "auto", "truncated header: header_size 1048576",
         header(header_size=64)[:12] + struct.pack("<I", 1 << 20) + header()[16:] + data())
    case("reserved_nonzero.rp", "auto", "reserved header bytes 60..63", good(reserved=5 << 32))
    # bytes 56..59 are repeats (0: 1, a file from before repeats)
    case("repeats_too_many.rp", "auto", "repeats 17: each B-scan position is acquired 1..16",
         good(reserved=17))
    case("repeats_short_data.rp", "auto", "truncated data: 2 epochs of 3072 bytes",
         good(reserved=2))
    case("repeats_mismatch.rp", "auto",
         "file has repeats 2 (each B-scan position acquired 2 times), the configuration's "
         "geometry.repeats is 1", header(reserved=2) + data(ny=2 * NY))
    case("unknown_sample_type.rp", "auto", "unknown sample type 7", good(sample=7))
    case("unknown_flags.rp", "auto", "unknown flags 0x10", good(flags=0x10))
    case("zero_dimension.rp", "auto", "ascans_per_bscan 0", header(nx=0) + data())
    case("zero_epochs.rp", "auto", "holds no epochs", header(epochs=0))
    case("metadata_too_long.rp", "auto", "metadata length 2097152 exceeds",
         header(header_size=128, meta_len=2 << 20) + data())
    case("metadata_past_header.rp", "auto", "need a header of 564 bytes, header_size is 128",
         header(header_size=128, meta_len=500) + data())
    case("metadata_nul.rp", "auto", "NUL byte", good(meta=b"scanner: acme\0x\n"))
    case("metadata_not_utf8.rp", "auto", "metadata is not valid UTF-8",
         good(meta=b"scanner: acme \xff\xfe\n"))
    case("epochs_overflow.rp", "auto", "overflow a file size", header(epochs=1 << 62) + data())
    case("truncated_data.rp", "auto", "truncated data", good()[:-100])
    case("trailing_bytes.rp", "auto", "7 trailing bytes", good() + b"\0" * 7)
    case("sample_type_mismatch.rp", "auto",
         "sample type f32, the configuration's geometry.sample_type is u16",
         header(sample=2) + data(sample_bytes=4))
    case("k_mismatch.rp", "auto",
         "samples_per_ascan 128, the configuration's geometry.samples_per_ascan is 64",
         header(k=128) + data(k=128))
    case("nx_mismatch.rp", "auto", "ascans_per_bscan 5, the configuration's",
         header(nx=5) + data(nx=5))
    case("ny_mismatch.rp", "auto", "bscans_per_volume 2, the configuration's",
         header(ny=2) + data(ny=2))
    case("stride_mismatch.rp", "auto", "stride_x 1, the configuration's geometry.stride[0] is 2",
         good(sx=1))
    case("bidirectional_mismatch.rp", "auto", "scanned bidirectionally", good(flags=1))
    case("offset_out_of_range.rp", "auto", "offset table entry 1 is (2, 0), outside stride",
         good(flags=2, offsets=[(0, 0), (2, 0)]))
    case("offset_out_of_sequence.rp", "auto", "offset table entry 0 is (1, 0), but epoch 0",
         good(flags=2, offsets=[(1, 0), (0, 0)]))
    case("offset_table_past_header.rp", "auto", "offset table (16 bytes)",
         header(flags=2, header_size=64) + data())
    case("raw_empty.raw", "raw", "(raw): file is empty", b"")
    case("raw_not_multiple.raw", "raw", "not a whole number of epochs of 1536 bytes",
         data() + b"\1" * 100)
    # header_size_small: patch the size field to 32 after building a valid file
    p = os.path.join(HERE, "header_size_small.rp")
    b = bytearray(open(p, "rb").read())
    b[12:16] = struct.pack("<I", 32)
    open(p, "wb").write(bytes(b))
    with open(os.path.join(HERE, "CASES"), "w") as f:
        f.write("# file\tformat\texpected error fragment (generated by ../make_bad.py)\n")
        for c in CASES:
            f.write("\t".join(c) + "\n")


if __name__ == "__main__":
    main()
