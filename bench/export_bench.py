#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The export benchmark (never a timed test): writes a processed recording of synthetic OCT
volumes (speckle over a layered depth profile, u8 as volrec's log scaling makes them) with h5py,
runs build/tests/export_bench on it (every format through the export engine, and the two limits
measured in the same run: the disk's sequential write rate, blosc/zstd's single-thread rate) and
records bench/results/export-<host>-<date>.json.

    bench/export_bench.py [--volumes 100] [--shape 300 300 1024] [--dir DIR] [--threads N]
                          [--channels]

--channels adds /angio and /doppler beside /volumes (functional OCT, docs/formats.md
"Channels"): every format then carries three channels, three times the bytes of each volume.
"""
import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np


def synthetic_volume(rng, shape):
    y, x, z = shape
    depth = np.arange(z, dtype=np.float32)
    profile = 40 + 120 * np.exp(-depth / (0.4 * z)) * (1 + 0.5 * np.sin(depth / 9.0) ** 2)
    speckle = rng.rayleigh(1.0, size=(y, x, z)).astype(np.float32)
    db = 20 * np.log10(np.maximum(speckle, 1e-3)) * 3 + profile
    return np.clip(db, 0, 255).astype(np.uint8)


def functional_volumes(rng, shape):
    """Angiography and Doppler u8 volumes: low decorrelation and no phase (128) in tissue, two
    vessels across x with high decorrelation and a phase that grows towards their axes."""
    y, x, z = shape
    yy, zz = np.meshgrid(np.arange(y), np.arange(z), indexing="ij")
    rho = np.minimum(np.hypot(yy - y / 3, zz - z / 2), np.hypot(yy - 2 * y / 3, zz - z / 3))
    inside = np.clip(1 - (rho / (0.08 * min(y, z))) ** 2, 0, 1)[:, None, :]
    angio = np.clip(rng.rayleigh(12.0, size=shape) + 200 * inside, 0, 255).astype(np.uint8)
    doppler = np.clip(128 + 100 * inside + rng.normal(0, 3, size=shape) * (inside > 0), 0,
                      255).astype(np.uint8)
    return angio, doppler


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--volumes", type=int, default=100)
    ap.add_argument("--shape", type=int, nargs=3, default=[300, 300, 1024])
    ap.add_argument("--dir", default=None, help="folder on the file system to measure")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--gz", action="store_true", help="also .nii.gz (zlib, one thread: slow)")
    ap.add_argument("--channels", action="store_true",
                    help="structure, angio and doppler (three channels per volume)")
    ap.add_argument("--build", default=os.environ.get("VOLREC_BUILD", "build"))
    a = ap.parse_args()

    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    work = tempfile.mkdtemp(prefix="export-bench-", dir=a.dir)
    h5 = os.path.join(work, "in.h5")
    rng = np.random.default_rng(7)
    t0 = time.monotonic()
    with h5py.File(h5, "w") as f:
        d = f.create_dataset("volumes", shape=(a.volumes, *a.shape), dtype=np.uint8,
                             chunks=(1, *a.shape))
        d.attrs["axes"] = "t,y,x,z"
        d.attrs["voxel_size_um"] = np.array([10.0, 10.0, 2.5], dtype=np.float32)
        vols = [synthetic_volume(rng, a.shape) for _ in range(4)]
        for t in range(a.volumes):
            d[t] = np.roll(vols[t % 4], t, axis=2)
        if a.channels:
            fn = [functional_volumes(rng, a.shape) for _ in range(2)]
            for i, name in enumerate(("angio", "doppler")):
                c = f.create_dataset(name, shape=(a.volumes, *a.shape), dtype=np.uint8,
                                     chunks=(1, *a.shape))
                c.attrs["axes"] = "t,y,x,z"
                c.attrs["voxel_size_um"] = d.attrs["voxel_size_um"]
                c.attrs["value_unit"] = "1" if i == 0 else "rad"
                c.attrs["value_range"] = [0.0, 1.0] if i == 0 else [-np.pi, np.pi]
                for t in range(a.volumes):
                    c[t] = np.roll(fn[t % 2][i], t, axis=2)
        f["epoch"] = np.arange(a.volumes, dtype=np.uint64)
    print(f"input written in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    # the commit of the build measured: taken before the run, which lasts minutes
    commit = subprocess.run(["git", "-C", src, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    load_before = os.getloadavg()
    try:
        out = subprocess.run([os.path.join(a.build, "tests", "export_bench"), h5, work,
                              str(a.threads)] + (["gz"] if a.gz else []), check=True, capture_output=True, text=True)
    finally:
        subprocess.run(["rm", "-rf", work])
    r = json.loads(out.stdout)
    # other work on the machine takes cores from the export: the load average beside the figures
    r["loadavg_1_5_15_before"] = [round(x, 2) for x in load_before]
    r["loadavg_1_5_15_after"] = [round(x, 2) for x in os.getloadavg()]
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), platform.processor())
    r.update(host=socket.gethostname(), cpu=cpu, cpus=os.cpu_count(), commit=commit,
             date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
             filesystem_dir=a.dir or tempfile.gettempdir())
    os.makedirs(os.path.join(src, "bench", "results"), exist_ok=True)
    path = os.path.join(src, "bench", "results",
                        f"export-{socket.gethostname()}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json")
    with open(path, "w") as f:
        json.dump(r, f, indent=2)
    print(json.dumps(r, indent=2))
    print(path, file=sys.stderr)


if __name__ == "__main__":
    main()
