# SPDX-License-Identifier: MIT
"""`volrec reprocess` (docs/cluster.md): raw recordings processed again in chunks of frames into
one OME-Zarr store, here (--local) and as a real Slurm job array (slurmkit: munged, slurmctld
and slurmd of this machine). Every volume of the store is compared, bit for bit, with one
`volrec process` over the whole recording; a task killed by scancel is found by --status and
run again by --resume; bad input is refused before anything runs."""
import json
import os
import re
import shutil
import subprocess
import time

import numpy as np
import pytest

import reckit
import slurmkit
from conftest import TIMEOUT_SCALE

h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")

TIMEOUT = 120.0 * TIMEOUT_SCALE
# noncumulative over a stride of 4 x 3: a chunk's warm-up is the 11 frames before it
GEOMETRY = dict(k=256, nx=24, ny=24, stride=(4, 3))
FRAMES = {"eye1": 40, "eye2": 34, "eye3": 40}
LEFT_OUT = {"eye2": (9, 10, 30)}  # epochs the recorder left out of eye2


def volrec(bin_dir, *args, env=None, timeout=TIMEOUT):
    return subprocess.run([str(bin_dir / "volrec"), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def study(bin_dir, tmp_path_factory):
    """Three recordings of one geometry (one with epochs left out), the configuration to
    reprocess them with, and each one processed whole by `volrec process`."""
    tmp = tmp_path_factory.mktemp("study")
    recs = []
    for i, (name, n) in enumerate(FRAMES.items()):
        recs.append(reckit.make(bin_dir, tmp, name, reckit.config(seed=10 + i, **GEOMETRY), n,
                                leave_out=LEFT_OUT.get(name, ())))
    cfg = reckit.config(**GEOMETRY)
    cfg["preprocess"] = {"db_range": [10, 90]}  # not the recordings' own configuration
    new = tmp / "new.yaml"
    new.write_text(json.dumps(cfg))
    ref = {}
    for rec in recs:
        out = tmp / (rec.stem + ".h5")
        r = volrec(bin_dir, "process", "-c", new, "--source", rec, "-o", out)
        assert r.returncode == 0, r.stderr
        with h5py.File(out, "r") as f:
            ref[rec.stem] = f["volumes"][:]
        assert ref[rec.stem].shape[0] == FRAMES[rec.stem]
    return tmp, new, recs, ref


def check_store(store, ref):
    """Every volume of every image equals `volrec process`'s, the pyramid is there, and the
    root holds the plan and the provenance."""
    root = zarr.open_group(str(store), mode="r")
    for name, vols in ref.items():
        img = root[name]
        ms = img.attrs["multiscales"][0]
        assert ms["version"] == "0.4" and len(ms["datasets"]) >= 1
        level0 = img["0"]
        assert level0.shape == vols.shape, (name, level0.shape, vols.shape)
        got = level0[:]
        for t in range(vols.shape[0]):
            assert np.array_equal(got[t], vols[t]), "%s: time point %d differs in %d voxels" % (
                name, t, int((got[t] != vols[t]).sum()))
        if len(ms["datasets"]) > 1:  # level 1: the 2x2x2 means of level 0
            l1 = img["1"][vols.shape[0] - 1]
            assert l1.shape == tuple((s + 1) // 2 for s in vols.shape[1:])
    rp = json.loads((store / ".zattrs").read_text())["volrec_reprocess"]
    plan, prov = rp["plan"], rp["provenance"]
    assert [r["name"] for r in plan["recordings"]] == list(ref)
    for r in plan["recordings"]:
        assert len(r["crc32c"]) == 8 and r["size"] == os.path.getsize(r["path"])
    assert len(plan["config"]["crc32c"]) == 8 and "reconstruct" in plan["config"]["text"]
    assert len(prov["chunks"]) == len(plan["chunks"])
    for c in prov["chunks"]:
        assert c["host"] and c["backend"] == "cpu" and c["device"].startswith("CPU")
        assert c["duration_s"] > 0 and c["start_unix_s"] > 0 and c["volumes"] > 0
    return plan, prov


def status(bin_dir, store, env=None):
    r = volrec(bin_dir, "reprocess", "--status", store, env=env)
    assert r.returncode in (0, 1, 2), r.stderr
    return r


def test_local_workers_give_the_volumes_of_one_process_bit_for_bit(bin_dir, study):
    tmp, new, recs, ref = study
    store = tmp / "local.zarr"
    r = volrec(bin_dir, "reprocess", "-c", new, *recs, "-o", store, "--chunk-epochs", "12",
               "--local", "2")
    assert r.returncode == 0, (r.stdout, r.stderr)
    plan, _ = check_store(store, ref)
    # a chunk after the first starts S-1 frames earlier (or at frame 0); more where epochs
    # were left out before it (eye2 lacks epochs 9 and 10: offsets 9 and 10 come again only
    # from frame 0)
    names = [r["name"] for r in plan["recordings"]]
    warm = [(names[c["recording"]], c["frames"][0], c["warm_up"]) for c in plan["chunks"]]
    assert all(w == min(a, 11) for n, a, w in warm if n != "eye2"), warm
    assert [w for n, a, w in warm if n == "eye2"] == [0, 12, 11], warm
    s = status(bin_dir, store)
    assert s.returncode == 0, s.stdout
    assert s.stdout.count(" done on ") == len(plan["chunks"]), s.stdout
    assert "finished" in s.stdout.splitlines()[-1]
    # the store is never staged beside its images once done
    assert not [p for p in store.rglob(".staging-*")]


def test_a_short_warm_up_would_differ(bin_dir, study):
    """The equality above means something: a chunk begun with less than its warm-up differs
    from the whole run."""
    tmp, new, recs, ref = study
    out = tmp / "short.h5"
    r = volrec(bin_dir, "process", "-c", new, "--source", recs[0], "--frames", "30:34",
               "--warm-up", "9", "-o", out)
    assert r.returncode == 0, r.stderr
    with h5py.File(out, "r") as f:
        assert not np.array_equal(f["volumes"][0], ref["eye1"][30])
    r = volrec(bin_dir, "process", "-c", new, "--source", recs[0], "--frames", "30:34",
               "--warm-up", "11", "-o", out)
    assert r.returncode == 0, r.stderr
    with h5py.File(out, "r") as f:
        assert np.array_equal(f["volumes"][:], ref["eye1"][30:34])


def test_mode_none_needs_no_warm_up_and_cumulative_whole_recordings(bin_dir, study):
    tmp, _, recs, _ = study
    for mode in ("none", "cumulative"):
        cfg = reckit.config(mode=mode, **GEOMETRY)
        new = tmp / f"{mode}.yaml"
        new.write_text(json.dumps(cfg))
        ref = {}
        for rec in recs[:2]:
            out = tmp / f"{mode}-{rec.stem}.h5"
            r = volrec(bin_dir, "process", "-c", new, "--source", rec, "-o", out)
            assert r.returncode == 0, r.stderr
            with h5py.File(out, "r") as f:
                ref[rec.stem] = f["volumes"][:]
        store = tmp / f"{mode}.zarr"
        args = ["reprocess", "-c", new, *recs[:2], "-o", store, "--local", "2"]
        if mode == "cumulative":
            r = volrec(bin_dir, *args, "--chunk-epochs", "10")
            assert r.returncode == 2 and "history without bound" in r.stderr, r.stderr
            assert "--chunk-epochs 0" in r.stderr and not store.exists()
            args += ["--chunk-epochs", "0"]
        else:
            args += ["--chunk-epochs", "7"]
        r = volrec(bin_dir, *args)
        assert r.returncode == 0, (r.stdout, r.stderr)
        plan, _ = check_store(store, ref)
        if mode == "none":
            assert all(c["warm_up"] == 0 for c in plan["chunks"])
        else:
            assert len(plan["chunks"]) == 2


def test_bad_input_is_refused_before_anything_runs(bin_dir, study):
    tmp, new, recs, _ = study
    out = tmp / "bad.zarr"
    # a damaged epoch: named by its CRC-32C
    bad = tmp / "damaged.vrr"
    shutil.copy(recs[0], bad)
    hsize, frame = reckit.frame_layout(bad)
    with open(bad, "r+b") as f:
        f.seek(hsize + 7 * frame + 4096 + 100)
        b = f.read(1)
        f.seek(hsize + 7 * frame + 4096 + 100)
        f.write(bytes([b[0] ^ 1]))
    r = volrec(bin_dir, "reprocess", "-c", new, recs[1], bad, "-o", out)
    assert r.returncode == 2, r.stderr
    assert "CRC-32C" in r.stderr and "first epoch 7" in r.stderr and str(bad) in r.stderr
    assert not out.exists()
    # unreadable
    r = volrec(bin_dir, "reprocess", "-c", new, tmp / "nope.vrr", "-o", out)
    assert r.returncode == 2 and "nope.vrr" in r.stderr and not out.exists(), r.stderr
    # a configuration of another geometry
    other = tmp / "other.yaml"
    other.write_text(json.dumps(reckit.config(**dict(GEOMETRY, k=128))))
    r = volrec(bin_dir, "reprocess", "-c", other, recs[0], "-o", out)
    assert r.returncode == 2 and "samples_per_ascan" in r.stderr, r.stderr
    assert str(other) in r.stderr and not out.exists()
    # two recordings of one name
    (tmp / "again").mkdir(exist_ok=True)
    twin = shutil.copy(recs[0], tmp / "again" / recs[0].name)
    r = volrec(bin_dir, "reprocess", "-c", new, recs[0], twin, "-o", out)
    assert r.returncode == 2 and "same name" in r.stderr and not out.exists(), r.stderr
    # --slurm without sbatch on PATH
    env = dict(os.environ, PATH="/nonexistent")
    r = volrec(bin_dir, "reprocess", "-c", new, recs[0], "-o", out, "--slurm", "--",
               "--partition=gpu", env=env)
    assert r.returncode == 2 and "sbatch is not on PATH" in r.stderr, r.stderr
    assert not out.exists()
    # an output with another plan
    r = volrec(bin_dir, "reprocess", "-c", new, recs[1], "-o", out, "--chunk-epochs", "20")
    assert r.returncode == 0, r.stderr
    r = volrec(bin_dir, "reprocess", "-c", new, recs[1], "-o", out, "--chunk-epochs", "10")
    assert r.returncode == 2 and "another plan" in r.stderr, r.stderr
    assert "chunk_epochs" in r.stderr and "chunks" in r.stderr
    r = volrec(bin_dir, "reprocess", "-c", new, recs[1], "-o", out, "--chunk-epochs", "20")
    assert r.returncode == 2 and "--resume" in r.stderr, r.stderr
    # a configuration changed after the plan: the chunk fails, naming it
    shutil.copy(new, tmp / "changing.yaml")
    store = tmp / "changing.zarr"
    r = volrec(bin_dir, "reprocess", "-c", tmp / "changing.yaml", recs[1], "-o", store,
               "--chunk-epochs", "20")
    assert r.returncode == 0, r.stderr
    for p in (store / ".volrec" / "state").glob("1.done"):
        p.unlink()
    (tmp / "changing.yaml").write_text(new.read_text().replace("90", "80"))
    r = volrec(bin_dir, "reprocess", "--resume", store)
    assert r.returncode == 1, (r.stdout, r.stderr)
    s = status(bin_dir, store)
    assert s.returncode == 2 and "changed since the plan was made" in s.stdout, s.stdout


def test_status_exit_codes_and_resume(bin_dir, study):
    tmp, new, recs, ref = study
    store = tmp / "codes.zarr"
    r = volrec(bin_dir, "reprocess", "-c", new, recs[0], "-o", store, "--chunk-epochs", "10")
    assert r.returncode == 0, r.stderr
    assert status(bin_dir, store).returncode == 0
    state = store / ".volrec" / "state"
    # chunk 2 not done: pending (1)
    os.unlink(state / "2.done")
    os.unlink(store / ".volrec" / "finished")
    s = status(bin_dir, store)
    assert s.returncode == 1 and "chunk 2  eye1 frames 20..29 (+11 warm-up)  pending" in s.stdout
    # chunk 2 running here (its process alive): 1
    (state / "2.run").write_text(json.dumps({"host": os.uname().nodename, "pid": os.getpid(),
                                             "job": "", "start_unix_s": time.time()}))
    s = status(bin_dir, store)
    assert s.returncode == 1 and "  running" in s.stdout, s.stdout
    # its process gone without a result (killed): failed (2), with the log's end
    (state / "2.run").write_text(json.dumps({"host": os.uname().nodename, "pid": 0x7ffffff0,
                                             "job": "", "start_unix_s": time.time()}))
    s = status(bin_dir, store)
    assert s.returncode == 2 and "failed: ended without a result" in s.stdout, s.stdout
    assert "| == chunk 2: eye1 frames 20:30" in s.stdout
    # resume runs chunk 2 only, and the store is whole again
    before = (state / "0.done").stat().st_mtime_ns
    r = volrec(bin_dir, "reprocess", "--resume", store, "--local", "2")
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert (state / "0.done").stat().st_mtime_ns == before
    assert status(bin_dir, store).returncode == 0
    check_store(store, {"eye1": ref["eye1"]})
    # usage errors
    r = volrec(bin_dir, "reprocess", "--status", store, "--local", "2")
    assert r.returncode == 2
    r = volrec(bin_dir, "reprocess", "--status", tmp / "nothing.zarr")
    assert r.returncode == 2 and "nothing.zarr" in r.stderr


def test_codec_is_the_plans_and_resume_keeps_it(bin_dir, study):
    """--codec goes into the plan and every task writes it (here none: compressor null, raw
    chunks, the values of `volrec process`); a resume or a new run asking for another codec
    is refused, as is a part written with another than the image's."""
    tmp, new, recs, ref = study
    store = tmp / "raw.zarr"
    r = volrec(bin_dir, "reprocess", "-c", new, recs[2], "-o", store, "--chunk-epochs", "20",
               "--codec", "none", "--local", "2")
    assert r.returncode == 0, (r.stdout, r.stderr)
    plan, _ = check_store(store, {"eye3": ref["eye3"]})
    assert plan["codec"] == "none"
    img = zarr.open_group(str(store / "eye3"), mode="r")
    assert img["0"].compressor is None
    assert (store / "eye3/0/0/0/0/0").stat().st_size == np.prod(img["0"].chunks)  # raw
    log = (store / ".volrec/logs/1.log").read_text()
    assert "--codec none" in log, log
    # a resume with another codec is refused, naming the store's
    r = volrec(bin_dir, "reprocess", "--resume", store, "--codec", "lz4")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "its images are written with codec none (the plan's); --codec lz4" in r.stderr
    assert "nothing was run" in r.stderr
    r = volrec(bin_dir, "reprocess", "--resume", store, "--codec", "none")
    assert r.returncode == 0 and "every chunk" in r.stdout, (r.stdout, r.stderr)
    # a new run on the store with another codec is another plan
    r = volrec(bin_dir, "reprocess", "-c", new, recs[2], "-o", store, "--chunk-epochs", "20")
    assert r.returncode == 2 and "it differs in codec" in r.stderr, r.stderr
    # a part written into the image with another codec than its own
    r = volrec(bin_dir, "process", "-c", new, "--source", recs[2], "--frames", "0:2",
               "--into", store / "eye3", "--codec", "zstd")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "the image's chunks are none (its .zarray); they cannot be written as zstd" in \
        r.stderr
    # names and places
    r = volrec(bin_dir, "reprocess", "-c", new, recs[2], "-o", tmp / "badcodec.zarr", "--codec",
               "blosc")
    assert r.returncode == 2 and "--codec blosc: unknown codec (zstd, lz4, none)" in r.stderr
    assert not (tmp / "badcodec.zarr").exists()
    r = volrec(bin_dir, "reprocess", "--status", store, "--codec", "none")
    assert r.returncode == 2 and "--codec goes with a new store or --resume" in r.stderr


slurm_missing = slurmkit.missing()


@pytest.mark.skipif(slurm_missing is not None, reason=f"no Slurm here: {slurm_missing}")
def test_slurm_array_killed_task_resumed_bit_for_bit(bin_dir, study, tmp_path):
    tmp, new, recs, ref = study
    store = tmp_path / "study.zarr"
    # arrays of at most 8 tasks: the 15 chunks go as two arrays, the finishing job after both
    with slurmkit.Cluster(tmp_path / "slurm", timeout=TIMEOUT, max_array_size=8) as cl:
        t0 = time.monotonic()
        r = volrec(bin_dir, "reprocess", "-c", new, *recs, "-o", store, "--chunk-epochs", "8",
                   "--codec", "lz4", "--slurm", "--array-max", "2", "--", "--time=10",
                   "--job-name=study", env=cl.env)
        assert r.returncode == 0, (r.stdout, r.stderr)
        subs = json.loads((store / ".volrec/slurm/submissions.json").read_text())
        assert [len(s["chunks"]) for s in subs] == [8, 7], subs
        arrays, finish = [s["array_job"] for s in subs], subs[-1]["finish_job"]
        assert "finish_job" not in subs[0] or subs[0]["finish_job"] is None
        job_of = {k: f"{s['array_job']}_{i}" for s in subs for i, k in enumerate(s["chunks"])}
        nchunks = len(job_of)
        # the throttle and the options went to sbatch
        for array in arrays:
            info = cl.run("scontrol", "show", "job", array).stdout
            assert "ArrayTaskThrottle=2" in info and "TimeLimit=00:10:00" in info, info
            assert "JobName=study" in info
        dep = cl.run("scontrol", "show", "job", finish).stdout
        assert all(re.search(rf"afterok:{a}(?!\d)", dep) for a in arrays), dep
        # kill a task while it runs (its marker written, Slurm says RUNNING)
        state = store / ".volrec" / "state"
        killed = None
        deadline = time.monotonic() + TIMEOUT
        while killed is None:
            assert time.monotonic() < deadline, (cl.queue(), cl.log("slurmctld"))
            q = cl.queue()
            for k in range(nchunks):
                job = job_of[k]
                if q.get(job) == "RUNNING" and (state / f"{k}.run").exists():
                    cl.run("scancel", job)
                    # a task that finished first does not count: try the next one
                    while cl.queue().get(job) in ("RUNNING", "COMPLETING"):
                        time.sleep(0.05)
                    if not (state / f"{k}.done").exists():
                        killed = k
                    break
            time.sleep(0.02)
        # --status names it failed (the job gone, its marker left), the others finish
        while True:
            s = status(bin_dir, store, env=cl.env)
            assert time.monotonic() < deadline, s.stdout
            if ", 0 running, 0 pending, " in s.stdout.splitlines()[-1]:
                break
            time.sleep(0.2)
        assert s.returncode == 2, s.stdout
        line = [ln for ln in s.stdout.splitlines() if ln.startswith(f"chunk {killed} ")][0]
        assert f"failed (Slurm job {job_of[killed]}): ended without a result" in line, line
        assert s.stdout.count(" done on ") == nchunks - 1, s.stdout
        assert "not finished" in s.stdout.splitlines()[-1]
        # no time point of the killed chunk passes for done: its marker is not there
        assert not (state / f"{killed}.done").exists()
        # a resume asking for another codec than the store's is refused, nothing submitted
        r = volrec(bin_dir, "reprocess", "--resume", store, "--codec", "zstd", "--slurm",
                   env=cl.env)
        assert r.returncode == 2 and "written with codec lz4" in r.stderr, r.stderr
        assert "nothing was submitted" in r.stderr
        assert len(json.loads((store / ".volrec/slurm/submissions.json").read_text())) == 2
        # the finishing job waits for an array that failed: resume cancels it, runs the
        # killed chunk alone (with the plan's codec), and a new finishing job writes the
        # provenance
        r = volrec(bin_dir, "reprocess", "--resume", store, "--slurm", "--", "--time=10",
                   env=cl.env)
        assert r.returncode == 0, (r.stdout, r.stderr)
        subs = json.loads((store / ".volrec/slurm/submissions.json").read_text())
        assert len(subs) == 3 and subs[2]["chunks"] == [killed], subs
        while True:
            s = status(bin_dir, store, env=cl.env)
            assert time.monotonic() < deadline, (s.stdout, cl.queue())
            if s.returncode != 1:
                break
            time.sleep(0.2)
        assert s.returncode == 0, s.stdout
        assert finish not in cl.queue()
        # a finishing job gone without finishing (here: its mark removed) is a failure that
        # --resume mends without running anything again
        os.unlink(store / ".volrec" / "finished")
        s = status(bin_dir, store, env=cl.env)
        assert s.returncode == 2 and "--resume finishes" in s.stdout, s.stdout
        r = volrec(bin_dir, "reprocess", "--resume", store, "--slurm", env=cl.env)
        assert r.returncode == 0 and "every chunk" in r.stdout, (r.stdout, r.stderr)
        assert status(bin_dir, store, env=cl.env).returncode == 0
        elapsed = time.monotonic() - t0
    plan, prov = check_store(store, ref)
    assert plan["codec"] == "lz4"
    for name in ref:
        img = zarr.open_group(str(store / name), mode="r")
        for d in img.attrs["multiscales"][0]["datasets"]:
            comp = img[d["path"]].compressor
            assert comp.cname == "lz4" and comp.shuffle == 1, (name, d["path"], comp)
    assert "--codec lz4" in (store / f".volrec/logs/{killed}.log").read_text()
    jobs = {c["chunk"]: c["job"] for c in prov["chunks"]}
    assert jobs[killed] == f"{subs[2]['array_job']}_0", jobs
    assert all(j == job_of[k] for k, j in jobs.items() if k != killed), (jobs, job_of)
    assert elapsed < TIMEOUT
