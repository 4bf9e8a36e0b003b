#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The reduced volume view (docs/algorithms.md §4.5) on the CPU: what it costs the daemon per
volume and what it costs the network per browser.

For each geometry (the demo's 96 x 96 x 256, the paper's 300 x 300 x 4096), view.volume.max_side
(64, 128, 256) and reduction (max, mean), `views_dump --volume-time` (the CPU backend's own
cpu_volume_reduce, one thread) reduces a volume REPEATS times; the reduced volume is then encoded
as `volrec view` sends it (docs/viewer.md, Encoding: deflate level 1 with run-length matching
only, above 16 KiB when that saves an eighth, else raw) and the bytes per volume give the
bandwidth per browser at 10 and 30 volumes/s. The volume is uniform random bytes (speckle does
not compress: the upper bound of the bandwidth) unless --volume FILE --shape Y X Z gives a real
one (e.g. a volume the Python client saved). Writes bench/results/volume-view-<host>-<date>.json.

    python3 bench/volume_view_bench.py --build build [--repeats 5] [--volume V.u8 --shape Y X Z]
"""
import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time
import zlib

SRC = pathlib.Path(__file__).resolve().parent.parent
GEOMETRIES = {"demo": (96, 96, 256), "paper": (300, 300, 4096)}
DEFLATE_MIN = 16 * 1024  # volrec view's --encoding auto: raw up to this many bytes


def sent_bytes(raw):
    """(bytes on the wire without the 256-byte header, encoding) as volrec view's auto mode."""
    if len(raw) <= DEFLATE_MIN:
        return len(raw), "raw"
    c = zlib.compressobj(1, zlib.DEFLATED, 15, 8, zlib.Z_RLE)
    n = len(c.compress(raw) + c.flush())
    return (n, "deflate") if n <= len(raw) - len(raw) // 8 else (len(raw), "raw")


def machine():
    return {"host": platform.node(), "cpus": os.cpu_count(),
            "cpu": next((line.split(":", 1)[1].strip() for line in
                         open("/proc/cpuinfo", encoding="utf-8") if line.startswith("model name")),
                        "unknown"),
            "loadavg_before": os.getloadavg()}


def run(a):
    dump = pathlib.Path(a.build) / "tests" / "views_dump"
    if not dump.exists():
        sys.exit(f"volume_view_bench: {dump} is missing (make tests-build)")
    cases = []
    with tempfile.TemporaryDirectory(prefix="vvb", dir=a.tmp) as tmp:
        vols = {}
        if a.volume:
            vols["given"] = (pathlib.Path(a.volume), tuple(a.shape))
        else:
            for name in a.geometries:
                Y, X, Z = GEOMETRIES[name]
                path = pathlib.Path(tmp) / f"{name}.u8"
                with open(path, "wb") as f:
                    for _ in range(Y):
                        f.write(os.urandom(X * Z))
                vols[name] = (path, (Y, X, Z))
        for name, (path, (Y, X, Z)) in vols.items():
            for side in a.max_side:
                for reduce in ("max", "mean"):
                    out = pathlib.Path(tmp) / "out.u8"
                    p = subprocess.run([str(dump), "--volume-time", str(path), str(Y), str(X),
                                        str(Z), str(side), reduce, str(a.repeats), str(out)],
                                       capture_output=True, text=True, timeout=3600)
                    if p.returncode:
                        sys.exit(f"volume_view_bench: views_dump: {p.stderr.strip()}")
                    r = json.loads(p.stdout)
                    raw = out.read_bytes()
                    n, enc = sent_bytes(raw)
                    r.update(volume=name, max_side=side, raw_bytes=len(raw),
                             sent_bytes=n + 256, encoding=enc,
                             MB_per_s_at_10=round((n + 256) * 10 / 1e6, 3),
                             MB_per_s_at_30=round((n + 256) * 30 / 1e6, 3),
                             volume_MB=round(Y * X * Z / 1e6, 2),
                             GB_per_s=round(Y * X * Z / (r["min_ms"] * 1e6), 3))
                    print(f"{name} {Y}x{X}x{Z} max_side {side} {reduce}: "
                          f"{r['reduced']} in blocks {r['blocks']}, {r['min_ms']:.2f} ms "
                          f"(median {r['median_ms']:.2f}), {r['GB_per_s']} GB/s; "
                          f"{r['sent_bytes']} bytes sent ({enc}), "
                          f"{r['MB_per_s_at_30']} MB/s at 30 volumes/s", flush=True)
                    cases.append(r)
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.environ.get("VOLREC_BUILD", str(SRC / "build")))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--max-side", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--geometries", nargs="+", default=list(GEOMETRIES), choices=list(GEOMETRIES))
    ap.add_argument("--volume", help="a u8 volume file [Y][X][Z] instead of random bytes")
    ap.add_argument("--shape", type=int, nargs=3, metavar=("Y", "X", "Z"))
    ap.add_argument("--tmp", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    ap.add_argument("-o", "--output")
    a = ap.parse_args()
    if a.volume and not a.shape:
        ap.error("--volume needs --shape Y X Z")
    if a.repeats < 1 or any(not 1 <= s <= 256 for s in a.max_side):
        ap.error("--repeats >= 1, --max-side 1..256")
    info = machine()
    t0 = time.time()
    cases = run(a)
    info["loadavg_after"] = os.getloadavg()
    result = {"benchmark": "volume_view", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                  time.gmtime(t0)),
              "commit": os.environ.get("VOLREC_GIT_COMMIT", "unknown"),
              "data": "given volume" if a.volume else "uniform random bytes (incompressible)",
              "machine": info, "threads": 1, "cases": cases}
    out = pathlib.Path(a.output or SRC / "bench" / "results" / (
        f"volume-view-{platform.node()}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(t0))}.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"volume_view_bench: wrote {out}")


if __name__ == "__main__":
    main()
