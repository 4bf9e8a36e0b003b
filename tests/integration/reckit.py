# SPDX-License-Identifier: MIT
"""Raw recordings (docs/replay-format.md, version 2) for tests, written without a daemon: the
spectra of `volrec sim` (a version 1 replay file) framed epoch by epoch with their index entries
and CRC-32C, and the configuration as the recording's "config" section, as volrecd's recorder
writes them (daemon/vrd_raw.c)."""
import json
import struct
import subprocess

MAGIC, FRAME_MAGIC = b"VOLRECRP", b"VOLRECEP"
ALIGN = 4096


def _crc_table():
    poly, table = 0x82F63B78, []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def _crc32c_py(data, crc=0):
    """CRC-32C (Castagnoli, reflected; RFC 3720 B.4), continuing crc."""
    c = crc ^ 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def config(seed=3, mode="noncumulative", stride=(3, 2), k=128, nx=6, ny=5, rate=0):
    """A small synthetic-retina configuration (JSON is YAML): volumes of
    ny*sy x nx*sx x k/2 voxels."""
    return {
        "backend": "cpu",
        "cpu": {"threads": 1},
        "source": {"type": "synth", "rate": rate,
                   "synth": {"seed": seed, "phantom": "retina",
                             "motion": {"deg_per_s": 0.5}, "snr_db": 35}},
        "geometry": {"samples_per_ascan": k, "sample_type": "u16", "ascans_per_bscan": nx,
                     "bscans_per_volume": ny, "stride": list(stride),
                     "scan_size_um": [600.0, 500.0], "axial_um_per_pixel": 3.5},
        "reconstruct": {"mode": mode},
        "pipeline": {"ring_bscans": 4 * ny, "overflow": "block"},
    }


def make(bin_dir, tmp, name, cfg, epochs, leave_out=(), first_epoch=0):
    """Write recording tmp/NAME.vrr of `epochs` recorded epochs from first_epoch on (the
    epoch numbers in leave_out are not recorded: the recorder fell behind); return its path."""
    cfg_path = tmp / f"{name}.sim.yaml"
    cfg_path.write_text(json.dumps(cfg))
    span = epochs + len(leave_out)
    sim = tmp / f"{name}.sim.vrp"
    r = subprocess.run([str(bin_dir / "volrec"), "sim", "-c", str(cfg_path), "-o", str(sim),
                        "-n", str(first_epoch + span)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    raw = sim.read_bytes()
    sim.unlink()
    hsize = struct.unpack_from("<I", raw, 12)[0]
    g = cfg["geometry"]
    k, nx, ny = g["samples_per_ascan"], g["ascans_per_bscan"], g["bscans_per_volume"]
    sx, sy = g["stride"]
    epoch_bytes = ny * nx * k * 2
    frame_size = ALIGN + (epoch_bytes + ALIGN - 1) // ALIGN * ALIGN
    text = json.dumps(cfg).encode()
    meta = f"recording: raw\nname: {name}\nvolrec_version: test\nsample_type: u16\n" \
           "repeats: 1\nstarted_unix_s: 0\n".encode()
    sections = struct.pack("<II", 6, len(text)) + b"config" + text
    header_size = (64 + len(meta) + len(sections) + ALIGN - 1) // ALIGN * ALIGN
    head = MAGIC + struct.pack("<IIIIIIQIIIIII", 2, header_size, 0, k, nx, ny, epochs, sx, sy,
                               0, len(meta), 1, len(sections))
    out = bytearray(head + meta + sections)
    out += b"\0" * (header_size - len(out))
    index, skipped, S = 0, 0, sx * sy
    for e in range(first_epoch, first_epoch + span):
        if e in leave_out:
            skipped += 1
            continue
        data = raw[hsize + e * epoch_bytes: hsize + (e + 1) * epoch_bytes]
        q = e % S
        t = 1_000_000_000 + e * 40_000_000
        entry = FRAME_MAGIC + struct.pack("<QIIQQIIQQI", e, q % sx, q // sx, t, t + 39_000_000,
                                          0, crc32c(data), skipped, index, 0)
        entry += struct.pack("<I", crc32c(entry))
        frame = bytearray(entry + b"\0" * (ALIGN - len(entry)) + data)
        frame += b"\0" * (frame_size - len(frame))
        out += frame
        index += 1
        skipped = 0
    path = tmp / f"{name}.vrr"
    path.write_bytes(bytes(out))
    return path


def frame_layout(path):
    """(header_size, frame_size) of a recording."""
    data = open(path, "rb").read(64)
    hsize, _, k, nx, ny = struct.unpack_from("<IIIII", data, 12)
    epoch_bytes = ny * nx * k * 2
    return hsize, ALIGN + (epoch_bytes + ALIGN - 1) // ALIGN * ALIGN


try:  # Debian's python3-crcmod, with its C extension
    import crcmod.predefined

    _crc32c_ext = crcmod.predefined.mkCrcFun("crc-32c")

    def crc32c(data):
        return _crc32c_ext(bytes(data))
except ImportError:
    def crc32c(data):
        return _crc32c_py(data)
