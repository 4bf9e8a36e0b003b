#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The reprocessing benchmark (never a timed test; docs/cluster.md): a study of raw recordings
(tests/integration/reckit.py) reprocessed by `volrec reprocess` on a real Slurm of this machine
(tests/integration/slurmkit.py, as root), measuring

- equality: every volume of the store against one `volrec process` per recording, bit for bit;
- overhead: submission to the last time point written, minus the sum of the tasks' processing
  time (`volrec process`'s own seconds), with the array throttled to one task at a time (the
  sum is then the work of one worker) and with every CPU busy; and its parts: Slurm's gap
  between tasks, each task's start (the helper, the plan, the backend), the warm-up;
- throughput per worker: one chunk as a task of the array against `volrec process` alone on
  the same chunk (the same frames and warm-up) writing uncompressed HDF5 and writing OME-Zarr
  with the same codec (--codec: zstd, lz4 or none, docs/formats.md "Codecs");
- a model of a study of 100 recordings x 30 s on 8 GPU nodes from these rates and overheads;

and records bench/results/reprocess-cpu-<date>[-<codec>].json with the machine and its load.

    sudo bench/reprocess_bench.py [--build build] [--recordings 4] [--frames 90] [--chunk 30]
                                  [--codec zstd|lz4|none]
    bench/reprocess_bench.py --task-start cuda     # what a task costs besides its work on a
                                                   # GPU (no Slurm): for --gpu-task-start-s
    bench/reprocess_bench.py --model-only RESULT.json [--gpu-task-start-s S] ...
"""
import argparse
import json
import os
import pathlib
import platform
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np
import zarr

SRC = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(SRC / "tests/integration"))
import reckit  # noqa: E402
import slurmkit  # noqa: E402

GEOMETRY = dict(k=512, nx=24, ny=24, stride=(3, 3))


def run(argv, env=None, check=True):
    t0 = time.monotonic()
    p = subprocess.run(list(map(str, argv)), capture_output=True, text=True, env=env,
                       timeout=3600)
    dt = time.monotonic() - t0
    if check and p.returncode != 0:
        sys.exit(f"{argv}: {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p, dt


def loadavg():
    return [float(x) for x in open("/proc/loadavg").read().split()[:3]]


def cpu_name():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def equal(store, ref):
    root = zarr.open_group(str(store), mode="r")
    bad = []
    for name, vols in ref.items():
        got = root[name]["0"][:]
        if got.shape != vols.shape:
            bad.append(f"{name}: shape {got.shape} != {vols.shape}")
            continue
        bad += [f"{name}[{t}]" for t in range(vols.shape[0]) if not np.array_equal(got[t],
                                                                                   vols[t])]
    return bad


def slurm_run(volrec, cl, new, recs, store, chunk, array_max, ref, codec):
    """One submission to the end of the finishing job: the timings of its chunks."""
    t_submit = time.time()
    p, _ = run([volrec, "reprocess", "-c", new, *recs, "-o", store, "--chunk-epochs", chunk,
                "--codec", codec, "--slurm", "--array-max", array_max, "--", "--time=30"],
               env=cl.env)
    deadline = time.monotonic() + 3600
    while True:
        s, _ = run([volrec, "reprocess", "--status", store], env=cl.env, check=False)
        if s.returncode != 1:
            break
        if time.monotonic() > deadline:
            sys.exit("the run did not end: " + s.stdout)
        time.sleep(0.2)
    if s.returncode != 0:
        sys.exit("the run failed: " + s.stdout)
    rp = json.loads((store / ".zattrs").read_text())["volrec_reprocess"]
    chunks = sorted(rp["provenance"]["chunks"], key=lambda c: c["start_unix_s"])
    finished = json.loads((store / ".volrec/finished").read_text())["unix_s"]
    last_written = max(c["end_unix_s"] for c in chunks)
    work = sum(c["seconds"] for c in chunks)
    durations = sum(c["duration_s"] for c in chunks)
    gaps = [b["start_unix_s"] - a["end_unix_s"] for a, b in zip(chunks, chunks[1:])]
    vols = sum(c["volumes"] for c in chunks)
    return {
        "array_max": array_max,
        "chunks": len(chunks),
        "volumes": vols,
        "submit_to_last_written_s": last_written - t_submit,
        "submit_to_first_start_s": chunks[0]["start_unix_s"] - t_submit,
        "work_s": work,
        "task_durations_s": durations,
        "overhead_s": last_written - t_submit - work,
        "overhead_fraction_of_work": (last_written - t_submit - work) / work,
        "ideal_parallel_wall_s": work / int(array_max),
        "overhead_vs_ideal_parallel_fraction":
            (last_written - t_submit - work / int(array_max)) / (work / int(array_max)),
        "task_start_s_mean": (durations - work) / len(chunks),
        "slurm_gap_between_tasks_s": statistics.median(gaps) if gaps else None,
        "last_written_to_finished_s": finished - last_written,
        "volumes_per_s_wall": vols / (last_written - t_submit),
        "equal_bit_for_bit": not equal(store, ref),
        "unequal": equal(store, ref)[:10],
        "per_chunk": [{k: c[k] for k in ("chunk", "job", "host", "backend", "device",
                                          "duration_s", "seconds", "volumes", "warm_up")}
                      for c in chunks],
    }


def timed(argv, flush=None, fresh=()):
    """argv run into fresh outputs (the paths of fresh, the previous run's outputs, removed
    first: a chunk writes into time points no run wrote before, and replacing them would time
    their removal) after a `sync` (so that a flush in it waits for its own data rather than
    what the machine wrote before), then `sync -f FLUSH` (syncfs, as a task's end does) when
    flush is given: its wall seconds and the CPU seconds (user + system) of it and its
    children."""
    for path in fresh:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    run(["sync"])
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    run(argv)
    if flush is not None:
        run(["sync", "-f", flush])
    dt = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return dt, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def per_worker(volrec, new, rec, store, k, a, b, w, reps, codec):
    """Chunk k (frames a..b-1, warm-up w) as a task against `volrec process` alone, writing
    uncompressed HDF5 (as it is, and flushed to the disk as the task's chunks are) and writing
    OME-Zarr with the store's codec."""
    out = {"chunk": k, "frames": [a, b], "warm_up": w, "volumes": b - a, "codec": codec,
           "method": "each run into fresh outputs (the last run's removed first, untimed: the "
                     "task's time points in every level, the HDF5 file, the OME-Zarr folder) "
                     "after a `sync`; wall seconds and CPU seconds (user + system of "
                     "the run and its children); process_h5_syncfs: process_h5 then "
                     "`sync -f` (syncfs, as the task does before its done marker)"}
    keys = ("process_h5", "process_h5_syncfs", "process_h5_no_warm_up", "process_zarr", "task")
    times = {key: [] for key in keys}
    cpu = {key: [] for key in keys}
    tmp = store.parent
    part = ["-c", new, "--source", rec, "--frames", f"{a}:{b}"]
    image = store / rec.stem
    levels = [d["path"] for d in json.loads((image / ".zattrs").read_text())["multiscales"][0][
        "datasets"]]
    fresh = {"process_zarr": [tmp / "alone.ome.zarr"],
             "task": [image / lv / str(t) for lv in levels for t in range(a, b)]}
    for _ in range(reps):
        for key, argv, flush in (
                ("process_h5", [volrec, "process", *part, "--warm-up", w, "-o",
                                tmp / "alone.h5"], None),
                ("process_h5_syncfs", [volrec, "process", *part, "--warm-up", w, "-o",
                                       tmp / "alone.h5"], tmp / "alone.h5"),
                ("process_h5_no_warm_up", [volrec, "process", *part, "--warm-up", 0, "-o",
                                           tmp / "alone0.h5"], None),
                ("process_zarr", [volrec, "process", *part, "--warm-up", w, "-o",
                                  tmp / "alone.ome.zarr", "--codec", codec], None),
                ("task", [volrec, "reprocess", "--task", k, store], None)):
            if key == "task":
                (store / f".volrec/state/{k}.done").unlink()
            dt, c = timed(argv, flush, fresh.get(key, [tmp / "alone.h5", tmp / "alone0.h5"]))
            times[key].append(dt)
            cpu[key].append(c)
    med = {key: statistics.median(v) for key, v in times.items()}
    cmed = {key: statistics.median(v) for key, v in cpu.items()}
    out["seconds_median"] = med
    out["seconds_all"] = times
    out["cpu_seconds_median"] = cmed
    out["cpu_seconds_all"] = cpu
    # throughput ratios (time of the reference over the task's): >= 0.9 is the target
    out["ratio_task_to_process_h5"] = med["process_h5"] / med["task"]
    out["ratio_task_to_process_h5_syncfs"] = med["process_h5_syncfs"] / med["task"]
    out["ratio_task_to_process_zarr"] = med["process_zarr"] / med["task"]  # the same codec
    out["cpu_ratio_task_to_process_h5"] = cmed["process_h5"] / cmed["task"]
    out["cpu_ratio_task_to_process_zarr"] = cmed["process_zarr"] / cmed["task"]
    out["warm_up_s_per_frame"] = max(med["process_h5"] - med["process_h5_no_warm_up"], 0) / w
    out["written_s_per_volume_task"] = med["task"] / (b - a)
    return out


def store_bytes(store, name):
    """The bytes of the chunk files of level 0 of image name, and of its values."""
    meta = json.loads((store / name / "0" / ".zarray").read_text())
    files = sum(f.stat().st_size for f in (store / name / "0").rglob("*")
                if f.is_file() and not f.name.startswith("."))
    return {"chunk_files_bytes": files, "values_bytes": int(np.prod(meta["shape"])),
            "compressor": meta["compressor"]}


def model(meas, args):
    """100 recordings x 30 s on 8 GPU nodes (docs/cluster.md "Cost model"), on paper, for
    chunks of each size of --model-chunk-frames; the best one first."""
    rows = [model_one(meas, args, e) for e in args.model_chunk_frames]
    best = min(rows, key=lambda r: r["overhead_fraction_of_work"])
    return dict(best, by_chunk_frames=[{k: r[k] for k in (
        "chunk_frames", "chunks", "modelled_wall_s", "overhead_fraction_of_work",
        "parts_fraction")} for r in rows])


def model_one(meas, args, E):
    rec_s, nrec, nodes = 30.0, 100, 8
    rate = args.model_epochs_per_s                  # acquisition: epochs/s of the recordings
    frames = int(rec_s * rate)
    vol_mb = 300 * 300 * 4096 / 1e6                 # paper geometry's output volume
    zarr_mbps = args.blosc_mbps_per_thread * args.node_cpus / args.pyramid_factor
    gpu_s = 1.0 / args.gpu_volumes_per_s            # processing alone (README: H200)
    write_s = vol_mb / zarr_mbps                    # blosc/zstd of every level on the node's CPUs
    per_vol = gpu_s + write_s                       # the sink writes as the engine publishes
    S = 25                                          # stride 5 x 5
    chunks_per_rec = -(-frames // E)
    chunks = nrec * chunks_per_rec
    chunk_work = E * per_vol
    warm = (S - 1) * gpu_s                          # warm-up: processed, never written
    start = args.gpu_task_start_s + (meas["slurm_gap_between_tasks_s"] or 0.0)
    work = nrec * frames * per_vol
    waves = -(-chunks // nodes)
    makespan = waves * (chunk_work + warm + start) + meas["last_written_to_finished_s"] \
        + meas["submit_to_first_start_s"]
    ideal = work / nodes
    return {
        "chunk_frames": E,
        "study": f"{nrec} recordings x {rec_s:g} s at {rate:g} epochs/s ({frames} frames each), "
                 "paper geometry (60x60x8192 u16 -> 300x300x4096 u8), stride 5x5, "
                 f"noncumulative, on {nodes} GPU nodes",
        "inputs": {
            "gpu_volumes_per_s": args.gpu_volumes_per_s,
            "gpu_volumes_per_s_source": "README: CUDA backend alone, paper geometry, H200",
            "blosc_zstd5_MBps_per_thread": args.blosc_mbps_per_thread,
            "codec_of_the_rate": "zstd, whatever --codec the run measured (the model's "
                                 "compression is blosc/zstd's rate)",
            "blosc_source": "bench/results/export-vm-*.json (this machine's measurement)",
            "node_cpus_for_compression": args.node_cpus,
            "zarr_pyramid_factor": args.pyramid_factor,
            "gpu_task_start_s": args.gpu_task_start_s,
            "gpu_task_start_source": "assumed (CUDA context, FFT plans, helper start); "
                                     "measured here on CPU: see task_start_s_mean",
            "slurm_gap_between_tasks_s": meas["slurm_gap_between_tasks_s"],
            "submit_to_first_start_s": meas["submit_to_first_start_s"],
            "last_written_to_finished_s": meas["last_written_to_finished_s"],
        },
        "seconds_per_volume": per_vol,
        "bound_by": "Zarr compression on the node's CPUs" if write_s > gpu_s else "the GPU",
        "chunks": chunks,
        "work_s": work,
        "ideal_wall_s": ideal,
        "modelled_wall_s": makespan,
        "overhead_s": makespan - ideal,
        "overhead_fraction_of_work": (makespan - ideal) / ideal,
        "parts_fraction": {
            "task_start_and_slurm_gap": waves * start / ideal,
            "warm_up": waves * warm / ideal,
            "last_wave_imbalance": (waves * chunk_work - work / nodes) / ideal,
            "submission_and_finishing": (meas["last_written_to_finished_s"]
                                         + meas["submit_to_first_start_s"]) / ideal,
        },
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=str(SRC / "build"))
    ap.add_argument("--recordings", type=int, default=4)
    ap.add_argument("--frames", type=int, default=90)
    ap.add_argument("--chunk", type=int, default=30)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=None)
    ap.add_argument("--worker-geometry", type=int, nargs=3, metavar=("K", "NX", "NY"),
                    help="per worker: a recording of its own with this geometry (samples per "
                         "A-scan, A-scans per B-scan, B-scans; stride 3 x 3), instead of the "
                         "study's first recording")
    ap.add_argument("--worker-frames", type=int, default=None,
                    help="per worker: the chunk's frames (default --chunk)")
    ap.add_argument("--codec", default="zstd", choices=("zstd", "lz4", "none"),
                    help="the OME-Zarr codec of the stores and of `volrec process -o .zarr`")
    ap.add_argument("--model-epochs-per-s", type=float, default=25.0)
    ap.add_argument("--model-chunk-frames", type=int, nargs="+",
                    default=[125, 150, 250, 375, 750])
    ap.add_argument("--task-start", metavar="BACKEND",
                    help="only time `volrec process` on a one-frame chunk with BACKEND")
    ap.add_argument("--model-only", metavar="RESULT.json",
                    help="recompute the model of an earlier result (rewritten in place)")
    ap.add_argument("--gpu-volumes-per-s", type=float, default=133.6)
    ap.add_argument("--gpu-task-start-s", type=float, default=5.0)
    ap.add_argument("--blosc-mbps-per-thread", type=float, default=53.2)
    ap.add_argument("--node-cpus", type=int, default=16)
    ap.add_argument("--pyramid-factor", type=float, default=1 / 1.140625)
    args = ap.parse_args()
    if args.task_start:
        bin_dir = pathlib.Path(args.build) / "bin"
        tmp = pathlib.Path(tempfile.mkdtemp(prefix="volrec-reprocess-start-"))
        rec = reckit.make(bin_dir, tmp, "rec", reckit.config(**GEOMETRY), 2)
        cfg = dict(reckit.config(**GEOMETRY), backend=args.task_start)
        (tmp / "new.yaml").write_text(json.dumps(cfg))
        times = [run([bin_dir / "volrec", "process", "-c", tmp / "new.yaml", "--source", rec,
                      "--frames", "1:2", "--warm-up", 1, "-o", tmp / "one.h5"])[1]
                 for _ in range(args.reps)]
        print(json.dumps({"backend": args.task_start, "one_frame_chunk_s": times,
                          "median_s": statistics.median(times), "host": socket.gethostname()}))
        return
    if args.model_only:
        result = json.loads(pathlib.Path(args.model_only).read_text())
        result["model_100x30s_8_gpu_nodes"] = model(result["slurm_runs"][0], args)
        result["targets"]["overhead_model_le_5pct"] = \
            result["model_100x30s_8_gpu_nodes"]["overhead_fraction_of_work"] <= 0.05
        pathlib.Path(args.model_only).write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result["model_100x30s_8_gpu_nodes"], indent=2))
        return
    why = slurmkit.missing()
    if why:
        sys.exit(f"no Slurm here: {why}")
    bin_dir = pathlib.Path(args.build) / "bin"
    volrec = bin_dir / "volrec"
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="volrec-reprocess-bench-"))
    try:
        load_before = loadavg()
        recs = [reckit.make(bin_dir, tmp, f"rec{i}", reckit.config(seed=20 + i, **GEOMETRY),
                            args.frames) for i in range(args.recordings)]
        cfg = reckit.config(**GEOMETRY)
        cfg["preprocess"] = {"db_range": [10, 90]}
        new = tmp / "new.yaml"
        new.write_text(json.dumps(cfg))
        ref, whole = {}, []
        for rec in recs:
            _, dt = run([volrec, "process", "-c", new, "--source", rec, "-o", tmp / f"{rec.stem}.h5"])
            whole.append(dt)
            with h5py.File(tmp / f"{rec.stem}.h5", "r") as f:
                ref[rec.stem] = f["volumes"][:]
        result = {
            "what": "volrec reprocess on a real Slurm of one node (this machine), CPU backend",
            "host": socket.gethostname(), "cpu": cpu_name(), "cpus": os.cpu_count(),
            "kernel": platform.release(),
            "git": subprocess.run(["git", "-C", str(SRC), "rev-parse", "--short", "HEAD"],
                                  capture_output=True, text=True).stdout.strip(),
            "study": {"recordings": args.recordings, "frames": args.frames,
                      "geometry": {k: list(v) if isinstance(v, tuple) else v
                                   for k, v in GEOMETRY.items()},
                      "output_volume": [GEOMETRY["ny"] * 3, GEOMETRY["nx"] * 3, GEOMETRY["k"] // 2],
                      "chunk_epochs": args.chunk, "warm_up": 8},
            "codec": args.codec,
            "process_whole_recording_s": whole,
            "loadavg_1_5_15_before": load_before,
        }
        with slurmkit.Cluster(tmp / "slurm", timeout=600) as cl:
            runs = []
            # one task at a time (the literal overhead), the same with one chunk per recording,
            # then every CPU busy
            for chunk, array_max in ((args.chunk, "1"), (args.frames, "1"),
                                     (args.chunk, str(os.cpu_count()))):
                store = tmp / f"study-{chunk}-{array_max}.zarr"
                runs.append(dict(slurm_run(volrec, cl, new, recs, store, str(chunk), array_max,
                                           ref, args.codec), chunk_epochs=chunk))
            result["slurm_runs"] = runs
        if args.worker_geometry:
            # per worker on volumes of a size of its own: a recording of 2 chunks, its store
            # made here (--local), chunk 1 measured
            geo = dict(GEOMETRY, k=args.worker_geometry[0], nx=args.worker_geometry[1],
                       ny=args.worker_geometry[2])
            wc = args.worker_frames or args.chunk
            wrec = reckit.make(bin_dir, tmp, "worker", reckit.config(seed=30, **geo), 2 * wc)
            wcfg = reckit.config(**geo)
            wcfg["preprocess"] = {"db_range": [10, 90]}
            wnew = tmp / "worker.yaml"
            wnew.write_text(json.dumps(wcfg))
            store = tmp / "worker.zarr"
            run([volrec, "reprocess", "-c", wnew, wrec, "-o", store, "--chunk-epochs", wc,
                 "--local", 1, "--codec", args.codec])
            result["per_worker"] = per_worker(volrec, wnew, wrec, store, 1, wc, 2 * wc, 8,
                                              args.reps, args.codec)
            result["per_worker"]["geometry"] = geo
            result["per_worker"]["output_volume"] = [geo["ny"] * 3, geo["nx"] * 3, geo["k"] // 2]
            result["store_level0"] = store_bytes(store, wrec.stem)
        else:
            store = tmp / f"study-{args.chunk}-1.zarr"
            result["per_worker"] = per_worker(volrec, new, recs[0], store, 1, args.chunk,
                                              2 * args.chunk, 8, args.reps, args.codec)
            result["store_level0"] = store_bytes(store, recs[0].stem)
        result["model_100x30s_8_gpu_nodes"] = model(runs[0], args)
        result["loadavg_1_5_15_after"] = loadavg()
        result["targets"] = {
            "equal_bit_for_bit": all(r["equal_bit_for_bit"] for r in runs),
            "overhead_test_cluster_le_5pct": runs[0]["overhead_fraction_of_work"] <= 0.05,
            "overhead_model_le_5pct":
                result["model_100x30s_8_gpu_nodes"]["overhead_fraction_of_work"] <= 0.05,
            "throughput_ratio_ge_0.9_vs_process_zarr_same_codec":
                result["per_worker"]["ratio_task_to_process_zarr"] >= 0.9,
            "throughput_ratio_ge_0.9_vs_process_h5":
                result["per_worker"]["ratio_task_to_process_h5"] >= 0.9,
            "throughput_ratio_ge_0.9_vs_process_h5_syncfs":
                result["per_worker"]["ratio_task_to_process_h5_syncfs"] >= 0.9,
            "cpu_ratio_ge_0.9_vs_process_h5":
                result["per_worker"]["cpu_ratio_task_to_process_h5"] >= 0.9,
        }
        suffix = "" if args.codec == "zstd" else "-" + args.codec
        out = args.out or str(SRC / "bench/results" /
                              time.strftime(f"reprocess-cpu-%Y%m%dT%H%MZ{suffix}.json",
                                            time.gmtime()))
        pathlib.Path(out).write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result["targets"], indent=2))
        print(out)
    finally:
        # the recordings and stores: gigabytes a run
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
