#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""How fast an OME-Zarr store of volrec reads back through python3-zarr (never a timed test):
the CPU and wall time to read one B-scan (a y plane, [x][z]), one en-face slab (16 depths, [y][x]) and one
cross-section across B-scans (an x plane, [y][z]) of level 0, the median over positions spread
through the volume, with the page cache warm (the decompression and the files opened, not the
disk). docs/formats.md "Export speed" says why the chunking is what it is.

    bench/zarr_read_bench.py STORE.zarr [STORE.zarr ...] [--repeat 9] [--json OUT]
"""
import argparse
import json
import statistics
import time

import zarr


def timed(fn, repeat):
    """Median milliseconds of CPU time (every thread of this process: numcodecs may decompress
    on several) and of wall time; on a loaded machine the CPU time is the figure to compare."""
    cpu, wall = [], []
    for i in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        fn(i)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - t0)
    return round(1e3 * statistics.median(cpu), 2), round(1e3 * statistics.median(wall), 2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stores", nargs="+")
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--slab", type=int, default=16, help="depths of the en-face slab")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    res = []
    for path in a.stores:
        arr = zarr.open(path, mode="r")["0"]
        if arr.ndim != 4:
            raise SystemExit(f"{path}: level 0 is {arr.shape}, not [t, y, x, z]")
        nt, ny, nx, nz = arr.shape
        pos = lambda i, n, w=1: (i * 7919) % max(1, n - w + 1)  # spread, not chunk-aligned
        arr[0, 0, 0, 0]  # the metadata read once
        r = {
            "store": path, "shape": list(arr.shape), "chunks": list(arr.chunks),
            "files_per_volume_level0": (-(-ny // arr.chunks[1])) * (-(-nx // arr.chunks[2])) *
            (-(-nz // arr.chunks[3])),
            "slab_depths": a.slab,
        }
        for key, fn in (("bscan", lambda i: arr[i % nt, pos(i, ny), :, :]),
                        ("enface_slab", lambda i: arr[i % nt, :, :,
                                                      pos(i, nz, a.slab):pos(i, nz, a.slab) +
                                                      a.slab]),
                        ("cross_section", lambda i: arr[i % nt, :, pos(i, nx), :])):
            r[key + "_cpu_ms"], r[key + "_wall_ms"] = timed(fn, a.repeat)
        res.append(r)
        print(f"{path}: chunks {r['chunks']}, {r['files_per_volume_level0']} files/volume: "
              "CPU (wall) ms: B-scan {bscan_cpu_ms} ({bscan_wall_ms}), en-face slab "
              "{enface_slab_cpu_ms} ({enface_slab_wall_ms}), cross-section "
              "{cross_section_cpu_ms} ({cross_section_wall_ms})".format(**r))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
