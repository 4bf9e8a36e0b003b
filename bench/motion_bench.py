#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The motion bench (`make motion-bench`, docs/algorithms.md "The motion bench"): every scene of
SCENES, a solid phantom of the simulator (curved retina, anterior segment, skin; each its own
size and stride) under one motion, recorded by `volrec sim --truth` and reconstructed in every
mode by `volrec quality` (the scanner's own corrections, background bscan_mean, db_range
[70, 100], the modes' default settings), for each of its seeds. Writes
bench/results/motion-<host>-<date>.json (every scene's `volrec quality` JSON, per epoch too)
and beside it the markdown tables, one per phantom: amplitude PSNR dB / SSIM, means over the
epochs from S = sx * sy on.

HELD-OUT scenes (held_out: True below, the whole skin phantom among them) are for checking a
mode, never for tuning one: a change to a reconstruction mode is chosen on the other scenes,
and the held-out rows only report what it does there.

Usage: bench/motion_bench.py [--build DIR] [--out OUT.json] [--scene REGEX] [--epochs N]
                             [--backend cpu|cuda|auto] [--list]
"""
import argparse
import datetime
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

RATE = 25  # epochs per second of the motion clock: per-epoch figures are these / 25
BEAM_UM = 150
EPOCHS = 60

# Geometries: (samples_per_ascan, ascans_per_bscan, bscans_per_volume, stride, depth_range).
GEOMETRY = {
    "curved": (256, 12, 12, 5, 128),  # 60 x 60 x 128, S = 25
    "anterior": (256, 16, 16, 3, 128),  # 48 x 48 x 128, S = 9
    "skin": (256, 12, 12, 6, 128),  # 72 x 72 x 128, S = 36
}

# The motions, source.synth.motion mappings (flow YAML); per epoch at RATE in the comments.
M = {
    "static": "deg_per_s: 0",
    "roll-slow": "deg_per_s: 7.5",  # 0.3 deg/epoch about depth (en-face rotation)
    "roll-fast": "deg_per_s: 75",  # 3 deg/epoch
    "tilt-x-slow": "deg_per_s: 0, tilt_deg_per_s: [7.5, 0], tilt_max_deg: 5",  # 0.3 deg/epoch
    "tilt-x-fast": "deg_per_s: 0, tilt_deg_per_s: [75, 0], tilt_max_deg: 6",  # 3 deg/epoch
    "tilt-y-slow": "deg_per_s: 0, tilt_deg_per_s: [0, 7.5], tilt_max_deg: 5",
    "tilt-y-fast": "deg_per_s: 0, tilt_deg_per_s: [0, 75], tilt_max_deg: 6",
    "shift-x": "deg_per_s: 0, shift_mm_per_s: [0.75, 0, 0]",  # 30 um/epoch
    "shift-y": "deg_per_s: 0, shift_mm_per_s: [0, 0.75, 0]",
    "shift-z": "deg_per_s: 0, shift_mm_per_s: [0, 0, 0.5]",  # 20 um/epoch within +-0.1 mm
    # 10, 5 and 2 um/epoch and 0.1 deg/epoch about depth
    "drift": "deg_per_s: 2.5, shift_mm_per_s: [0.25, 0.125, 0.05]",
    "jump": "deg_per_s: 0, jump: {epoch: 40, shift_mm: [0.3, 0.1, 0.05], deg: 5, "
            "tilt_deg: [2, 0]}",
    "breathing": "deg_per_s: 0, periodic: {hz: 0.3, shift_mm: [0.1, 0.05, 0.05], "
                 "deg: [0.5, 0, 0]}",
    "pulse": "deg_per_s: 0, periodic: {hz: 1.2, shift_mm: [0, 0, 0.02], deg: [0.2, 0.2, 0]}",
    "warp": "deg_per_s: 0, warp: {mm: 0.05, radius_mm: 0.4, hz: 0.5}",
}

# The scenes: (phantom, motion, seeds, held_out).
SCENES = [
    ("curved", "static", (1, 2), False),
    ("curved", "roll-slow", (1,), False),
    ("curved", "roll-fast", (1,), False),
    ("curved", "tilt-x-slow", (1, 2), False),
    ("curved", "tilt-x-fast", (1, 2), False),
    ("curved", "tilt-y-slow", (1,), True),
    ("curved", "tilt-y-fast", (1,), True),
    ("curved", "shift-x", (1,), False),
    ("curved", "shift-y", (1,), True),
    ("curved", "shift-z", (1,), False),
    ("curved", "drift", (1,), False),
    ("curved", "jump", (1,), False),
    ("curved", "breathing", (1,), False),
    ("curved", "pulse", (1,), True),
    ("curved", "warp", (1,), False),
    ("anterior", "static", (1,), False),
    ("anterior", "roll-slow", (1,), False),
    ("anterior", "tilt-y-fast", (1,), False),
    ("anterior", "shift-x", (1,), False),
    ("anterior", "jump", (1,), False),
    ("anterior", "pulse", (1,), False),
    ("anterior", "warp", (1,), True),
    ("skin", "static", (1,), True),
    ("skin", "roll-fast", (1,), True),
    ("skin", "tilt-x-slow", (1,), True),
    ("skin", "shift-z", (1,), True),
    ("skin", "drift", (1,), True),
    ("skin", "breathing", (1,), True),
    ("skin", "warp", (1,), True),
]

# The table's columns: (key in `volrec quality`'s JSON, heading).
COLUMNS = [
    ("current_linear", "newest, linear"),
    ("noncumulative", "noncumulative"),
    ("product_exp_tau3", "product+exp τ3"),
    ("adaptive", "adaptive"),
    ("compensated", "compensated"),
    ("registered", "registered"),
]


def scene_name(phantom, motion, seed):
    return f"{phantom}-{motion}-s{seed}"


def geometry_yaml(phantom):
    k, nx, ny, s, z1 = GEOMETRY[phantom]
    return (f"geometry:\n  samples_per_ascan: {k}\n  ascans_per_bscan: {nx}\n"
            f"  bscans_per_volume: {ny}\n  stride: [{s}, {s}]\n  depth_range: [0, {z1}]\n")


def run(cmd, what):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"motion_bench: {what} failed ({p.returncode}): {p.stderr.strip()}")
    return p


def corrections(replay):
    """resample_poly and dispersion_coeffs from the replay's metadata (docs/replay-format.md)."""
    with open(replay, "rb") as f:
        head = f.read(65536).decode("latin-1")
    poly = re.search(r"^resample_poly: *(.*)$", head, re.M)
    disp = re.search(r"^dispersion_coeffs: *(.*)$", head, re.M)
    if not poly or not disp:
        sys.exit(f"motion_bench: {replay}: no corrections in the replay's metadata")
    return poly.group(1), disp.group(1)


def one_scene(volrec, work, phantom, motion, seed, epochs, backend):
    name = scene_name(phantom, motion, seed)
    sim_cfg = os.path.join(work, name + "-sim.yaml")
    replay = os.path.join(work, name + ".rp")
    truth = os.path.join(work, name + "-truth.h5")
    with open(sim_cfg, "w") as f:
        f.write(f"source:\n  type: synth\n  rate: {RATE}\n"
                f"  synth: {{seed: {seed}, phantom: {phantom}, motion: {{{M[motion]}}}, "
                f"snr_db: 40, beam_um: {BEAM_UM}}}\n" + geometry_yaml(phantom))
    t0 = time.monotonic()
    run([volrec, "sim", "-c", sim_cfg, "-o", replay, "-n", str(epochs), "--truth", truth],
        f"{name}: volrec sim")
    t1 = time.monotonic()
    poly, disp = corrections(replay)
    q_cfg = os.path.join(work, name + ".yaml")
    with open(q_cfg, "w") as f:
        f.write(f"backend: {backend}\nsource:\n  type: replay\n  rate: 0\n"
                f"  replay: {{path: {replay}}}\n" + geometry_yaml(phantom) +
                "preprocess:\n  background: {mode: bscan_mean}\n"
                f"  resample: {{method: cubic, poly: {poly}}}\n"
                f"  dispersion: {{coeffs: {disp}}}\n  db_range: [70, 100]\n")
    out = os.path.join(work, name + ".json")
    run([volrec, "quality", "-c", q_cfg, "-t", truth, "--name", name, "--json", out],
        f"{name}: volrec quality")
    t2 = time.monotonic()
    with open(out) as f:
        q = json.load(f)
    for path in (replay, truth):
        os.unlink(path)
    return q, t1 - t0, t2 - t1


def compact(x):
    """x with every float of a per-epoch list rounded to 4 decimals (the JSON's size halves)."""
    if isinstance(x, dict):
        return {k: [round(v, 4) for v in x[k]] if k.endswith("_per_epoch") else compact(x[k])
                for k in x}
    return x


def cell(mode):
    return f"{mode['psnr_db']:.2f} / {mode['ssim']:.3f}"


def tables(result):
    """The markdown tables, one per phantom: amplitude PSNR dB / SSIM, the best of a row bold."""
    lines = []
    for phantom, (k, nx, ny, s, z1) in GEOMETRY.items():
        rows = [r for r in result["scenes"] if r["phantom"] == phantom]
        if not rows:
            continue
        first = rows[0]["quality"]["first_scored_epoch"]
        last = rows[0]["quality"]["epochs"] - 1
        lines.append(f"**{phantom}** ({nx * s} × {ny * s} × {z1}, stride {s}, K = {k}, "
                     f"PSNR dB / SSIM over epochs {first}–{last}; *held out* scenes in italics)")
        lines.append("")
        lines.append("| scene | " + " | ".join(h for _, h in COLUMNS) + " |")
        lines.append("|---|" + "---|" * len(COLUMNS))
        for r in rows:
            modes = r["quality"]["modes"]
            best = max(modes[key]["psnr_db"] for key, _ in COLUMNS)
            cells = []
            for key, _ in COLUMNS:
                c = cell(modes[key])
                cells.append(f"**{c}**" if modes[key]["psnr_db"] == best else c)
            label = f"{r['motion']}, seed {r['seed']}"
            if r["held_out"]:
                label = f"*{label} (held out)*"
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--build", default=os.path.join(here, "..", "build"))
    ap.add_argument("--out", help="the JSON (default bench/results/motion-<host>-<date>.json)")
    ap.add_argument("--scene", default="", help="only scenes whose name matches this regex")
    ap.add_argument("--epochs", type=int, default=EPOCHS)
    ap.add_argument("--backend", default="cpu", choices=["cpu", "cuda", "auto"])
    ap.add_argument("--list", action="store_true", help="list the scenes and exit")
    a = ap.parse_args()
    todo = [(ph, mo, seed, held) for ph, mo, seeds, held in SCENES for seed in seeds
            if re.search(a.scene, scene_name(ph, mo, seed))]
    if a.list:
        for ph, mo, seed, held in todo:
            print(scene_name(ph, mo, seed), "held out" if held else "", M[mo], sep="\t")
        return
    if not todo:
        sys.exit(f"motion_bench: no scene matches '{a.scene}'")
    if a.epochs <= max(GEOMETRY[ph][3] ** 2 for ph, _, _, _ in todo):
        sys.exit(f"motion_bench: --epochs {a.epochs} leaves no epoch after S = sx * sy to score")
    volrec = os.path.join(a.build, "bin", "volrec")
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    host = socket.gethostname()
    out = a.out or os.path.join(here, "results", f"motion-{host}-{date}.json")
    commit = subprocess.run(["git", "-C", here, "rev-parse", "--short=12", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or "unknown"
    result = {
        "benchmark": "volrec motion bench: PSNR/SSIM against the simulator's truth "
                     "(docs/algorithms.md \"The motion bench\"), means over epochs S..n-1",
        "host": host, "date": date, "commit": commit, "backend": a.backend,
        "epochs": a.epochs, "rate": RATE, "beam_um": BEAM_UM, "snr_db": 40,
        "cpus": os.cpu_count(), "loadavg_start": os.getloadavg(), "scenes": [],
    }
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="vrmotion.") as work:
        for ph, mo, seed, held in todo:
            q, ts, tq = one_scene(volrec, work, ph, mo, seed, a.epochs, a.backend)
            k, nx, ny, s, z1 = GEOMETRY[ph]
            result["scenes"].append({
                "name": scene_name(ph, mo, seed), "phantom": ph, "motion": mo,
                "motion_yaml": M[mo], "seed": seed, "held_out": held,
                "geometry": {"samples_per_ascan": k, "ascans_per_bscan": nx,
                             "bscans_per_volume": ny, "stride": [s, s],
                             "depth_range": [0, z1]},
                "sim_s": round(ts, 2), "quality_s": round(tq, 2),
                "loadavg": os.getloadavg(), "quality": compact(q)})
            m = q["modes"]
            print(f"{scene_name(ph, mo, seed):28s} " +
                  "  ".join(f"{key} {cell(m[key])}" for key, _ in COLUMNS) +
                  f"  ({ts:.0f} + {tq:.0f} s)", flush=True)
    result["seconds"] = round(time.monotonic() - t_start, 1)
    result["loadavg_end"] = os.getloadavg()
    with open(out, "w") as f:
        json.dump(result, f, indent=None, separators=(",", ":"))
        f.write("\n")
    md = os.path.splitext(out)[0] + ".md"
    with open(md, "w") as f:
        f.write(tables(result) + "\n")
    print(f"wrote {out} and {md} in {result['seconds']:.0f} s")


if __name__ == "__main__":
    main()
