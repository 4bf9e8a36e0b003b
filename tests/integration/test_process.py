# SPDX-License-Identifier: MIT
"""`volrec process`: the HDF5 layout and attributes, default epoch counts, usage errors, and the
real calibration data (tests/data/oct-calibration-example/), where k-linearization and
dispersion compensation must each measurably sharpen the A-scans.

Sharpness metric (docs/algorithms.md): for each A-scan, the intensity I(z) = |X(z)|^2 recovered
from the normalized dB values over depths 20..299 (the sample, away from the DC term), and
S = sum I^2 / (sum I)^2 (the normalized fourth moment: larger = energy in fewer, narrower
peaks), averaged over all A-scans; plus the mean -6 dB width of each A-scan's brightest peak."""
import json
import os
import re
import resource
import signal
import subprocess

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

DB_LO, DB_HI = -80.0, 40.0


def volrec(bin_dir, *args, timeout=120):
    return subprocess.run([str(bin_dir / "volrec"), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


def real_config(src_dir, tmp_path, name, resample=True, dispersion=True):
    text = (src_dir / "config/examples/oct-calibration-example.yaml").read_text()
    data = src_dir / "tests/data/oct-calibration-example"
    text = text.replace("../../tests/data/oct-calibration-example", str(data))
    text = re.sub(r"db_range: \[[^\]]*\]", f"db_range: [{DB_LO}, {DB_HI}]", text)
    text = text.replace("backend: auto", "backend: cpu")
    if not resample:
        text = re.sub(r"method: cubic\n.*klinear_indices.txt.*\n", "method: none\n", text)
    if not dispersion:
        text = re.sub(r"  dispersion:\n.*dispersion_phase.txt.*\n", "", text)
    assert ("klinear" in text) == resample and ("dispersion_phase" in text) == dispersion
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def process_real(bin_dir, src_dir, tmp_path, name, **kw):
    cfg = real_config(src_dir, tmp_path, name, **kw)
    out = tmp_path / f"{name}.h5"
    p = volrec(bin_dir, "process", "-c", cfg, "-o", out, "--lowres")
    assert p.returncode == 0, p.stderr
    with h5py.File(out, "r") as f:
        low = f["lowres"][0].astype(np.float64)
    return low.reshape(-1, low.shape[-1])


def intensity(low):
    db = low * (DB_HI - DB_LO) + DB_LO
    return 10 ** (db[:, 20:300] / 10)


def sharpness(low):
    i = intensity(low)
    return float(np.mean((i ** 2).sum(1) / i.sum(1) ** 2))


def peak_width(low):
    amp = np.sqrt(intensity(low))
    widths = []
    for a in amp:
        z = int(a.argmax())
        half = a[z] / 2
        lo = z
        while lo > 0 and a[lo - 1] >= half:
            lo -= 1
        hi = z
        while hi < len(a) - 1 and a[hi + 1] >= half:
            hi += 1
        widths.append(hi - lo + 1)
    return float(np.mean(widths))


@pytest.fixture(scope="module")
def real(bin_dir, src_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("real")
    return {
        "both": process_real(bin_dir, src_dir, tmp, "both"),
        "no_resample": process_real(bin_dir, src_dir, tmp, "no_resample", resample=False),
        "no_dispersion": process_real(bin_dir, src_dir, tmp, "no_dispersion", dispersion=False),
    }


def test_real_data_shows_the_sample(real):
    low = real["both"]
    assert low.shape == (1000, 512)
    # the sample (depths 20..250) stands well above the noise floor at the bottom
    assert low[:, 20:250].mean() > low[:, 400:].mean() + 0.05


def test_resampling_sharpens_real_data(real):
    s_on, s_off = sharpness(real["both"]), sharpness(real["no_resample"])
    w_on, w_off = peak_width(real["both"]), peak_width(real["no_resample"])
    assert s_on > 1.1 * s_off, f"sharpness with resampling {s_on:.5f}, without {s_off:.5f}"
    assert w_on < w_off - 0.5, f"-6 dB width with resampling {w_on:.3f}, without {w_off:.3f}"


def test_dispersion_compensation_sharpens_real_data(real):
    s_on, s_off = sharpness(real["both"]), sharpness(real["no_dispersion"])
    assert s_on > 1.003 * s_off, f"sharpness with dispersion {s_on:.5f}, without {s_off:.5f}"


def raw_config(tmp_path, epochs, extra=None):
    rng = np.random.default_rng(3)
    K, nx, ny = 32, 4, 3
    rng.integers(0, 4096, size=(epochs, ny, nx, K)).astype("<u2").tofile(tmp_path / "in.raw")
    cfg = {
        "backend": "cpu",
        "source": {"type": "replay", "rate": 0,
                   "replay": {"path": "in.raw", "format": "raw", "loop": False}},
        "geometry": {"samples_per_ascan": K, "sample_type": "u16", "ascans_per_bscan": nx,
                     "bscans_per_volume": ny, "stride": [2, 2], "depth_range": [2, 14]},
        "preprocess": {"db_range": [20, 100]},
        "reconstruct": {"mode": "noncumulative"},
        "pipeline": {"ring_bscans": 16},
    }
    cfg.update(extra or {})
    path = tmp_path / "cfg.yaml"
    path.write_text(json.dumps(cfg))
    return path


def test_hdf5_layout_and_attributes(bin_dir, tmp_path):
    cfg = raw_config(tmp_path, 5)
    out = tmp_path / "o.h5"
    p = volrec(bin_dir, "process", "-c", cfg, "-o", out, "--lowres", "--full")
    assert p.returncode == 0, p.stderr
    assert "5 epochs" in p.stdout and str(out) in p.stdout
    with h5py.File(out, "r") as f:
        assert f["volumes"].shape == (5, 6, 8, 12) and f["volumes"].dtype == np.uint8
        assert f["lowres"].shape == (5, 3, 4, 12) and f["lowres"].dtype == np.float32
        assert f["full"].shape == (5, 6, 8, 12)
        assert f["volumes"].chunks == (1, 6, 8, 12)
        assert list(f["epoch"][:]) == [0, 1, 2, 3, 4]
        assert f["offset"][:].tolist() == [[0, 0], [1, 0], [0, 1], [1, 1], [0, 0]]
        assert list(f.attrs["geometry"]) == [32, 4, 3]
        assert list(f.attrs["stride"]) == [2, 2]
        assert list(f.attrs["depth_range"]) == [2, 14]
        assert list(f.attrs["volume_shape"]) == [6, 8, 12]
        assert f.attrs["epochs"] == 5
        assert f.attrs["backend"] in (b"cpu", "cpu")
        text = f.attrs["config"]
        text = text.decode() if isinstance(text, bytes) else text
        vols = f["volumes"][:]
        full = f["full"][:]
    assert np.array_equal(vols, np.floor(255 * full.astype(np.float64) + 0.5).astype(np.uint8))
    # the stored configuration loads back and reproduces the volumes
    dumped = tmp_path / "dumped.yaml"
    dumped.write_text(text.replace(str(tmp_path / "in.raw"), "in.raw"))
    out2 = tmp_path / "o2.h5"
    p = volrec(bin_dir, "process", "-c", dumped, "-o", out2)
    assert p.returncode == 0, p.stderr
    with h5py.File(out2, "r") as f:
        assert np.array_equal(f["volumes"][:], vols)


def test_mode_none_writes_lowres_shaped_volumes(bin_dir, tmp_path):
    cfg = raw_config(tmp_path, 2, {"reconstruct": {"mode": "none"}})
    out = tmp_path / "o.h5"
    p = volrec(bin_dir, "process", "-c", cfg, "-o", out, "-n", "1", "--lowres")
    assert p.returncode == 0, p.stderr
    with h5py.File(out, "r") as f:
        assert f["volumes"].shape == (1, 3, 4, 12)
        low = f["lowres"][0].astype(np.float64)
        assert np.array_equal(f["volumes"][0], np.floor(255 * low + 0.5).astype(np.uint8))


def test_synth_defaults_to_one_interlacing_cycle(bin_dir, src_dir, tmp_path):
    out = tmp_path / "s.h5"
    p = volrec(bin_dir, "process", "-c", src_dir / "config/examples/tiny.yaml", "-o", out)
    assert p.returncode == 0, p.stderr
    with h5py.File(out, "r") as f:
        assert f["volumes"].shape == (9, 36, 36, 128)
        assert f["volumes"][-1].max() > 0


@pytest.mark.parametrize("args,code,msg", [
    ([], 2, "required"),
    (["-c", "/nonexistent.yaml", "-o", "x.h5"], 2, "nonexistent"),
    (["-c", "CFG", "-o", "x.h5", "-n", "0"], 2, "-n 0"),
    (["-c", "CFG", "-o", "x.h5", "-n", "9"], 2, "holds 2 epochs"),
    (["-c", "CFG", "-o", "x.h5", "--backend", "gpu"], 2, "--backend gpu"),
    # the cause, without HDF5's error stack (which held it alone)
    (["-c", "CFG", "-o", "/nonexistent-dir/x.h5"], 1,
     "cannot create /nonexistent-dir/x.h5: No such file or directory"),
    (["-c", "CFG", "-o", "/"], 1, "cannot create /: Is a directory"),
    (["-c", "CFG", "-o", "x.h5", "extra"], 2, "unexpected argument"),
])
def test_usage_errors(bin_dir, tmp_path, args, code, msg):
    cfg = raw_config(tmp_path, 2)
    args = [str(cfg) if a == "CFG" else a for a in args]
    p = volrec(bin_dir, "process", *args)
    assert p.returncode == code, p.stderr
    assert msg in p.stderr and "HDF5-DIAG" not in p.stderr, p.stderr


def test_cuda_backend_unavailable_is_a_clear_error(bin_dir, tmp_path):
    if os.environ.get("VOLREC_HAVE_CUDA") == "1":
        pytest.skip("built with CUDA")
    cfg = raw_config(tmp_path, 1)
    p = volrec(bin_dir, "process", "-c", cfg, "-o", tmp_path / "x.h5", "--backend", "cuda")
    assert p.returncode == 1
    assert "without CUDA" in p.stderr


def test_help(bin_dir):
    p = volrec(bin_dir, "process", "--help")
    assert p.returncode == 0 and "/lowres" in p.stdout


def test_truncated_path_is_reported(bin_dir, tmp_path):
    cfg = raw_config(tmp_path, 2)
    (tmp_path / "in.raw").write_bytes((tmp_path / "in.raw").read_bytes()[:-7])
    p = volrec(bin_dir, "process", "-c", cfg, "-o", tmp_path / "x.h5")
    assert p.returncode == 1
    assert "in.raw" in p.stderr


def shim_config(tmp_path, build_dir, fail_every):
    cfg = {
        "backend": "cpu",
        "source": {"type": "shim", "rate": 0,
                   "shim": {"library": str(build_dir / "lib" / "libvolrec_fault_shim.so"),
                            "args": {"fail_every": fail_every}}},
        "geometry": {"samples_per_ascan": 64, "ascans_per_bscan": 8, "bscans_per_volume": 4,
                     "stride": [1, 1]},
        "preprocess": {"db_range": [0, 100]},
    }
    path = tmp_path / "shim.yaml"
    path.write_text(json.dumps(cfg))
    return path


def test_a_failure_while_running_leaves_the_epochs_processed_before(bin_dir, build_dir,
                                                                     tmp_path):
    # the shim fails its 30th acquire(): 7 epochs of 4 B-scans are whole before it. The file
    # kept 20 rows of /volumes, 13 of them zeros, and no /epoch or attributes, unannounced.
    out = tmp_path / "o.h5"
    p = volrec(bin_dir, "process", "-c", shim_config(tmp_path, build_dir, 30), "-o", out,
               "-n", 20, "--lowres")
    assert p.returncode == 1, (p.returncode, p.stderr)
    # the shim names itself once; volrec process adds the call
    assert ("volrec process: acquire: fault shim: injected error (fail_every: 30, call 30)\n"
            in p.stderr), p.stderr
    assert f"{out} holds the 7 epochs processed before the failure" in p.stderr, p.stderr
    with h5py.File(out, "r") as f:
        assert f["volumes"].shape == (7, 4, 8, 32) and f["lowres"].shape == (7, 4, 8, 32)
        assert list(f["epoch"][:]) == list(range(7)) and f.attrs["epochs"] == 7
        assert all(v.max() > 0 for v in f["volumes"][:])


def test_a_file_size_limit_keeps_the_volumes_written_before_it(bin_dir, tmp_path):
    # the file size limit stops the writing part way: the process crashed in HDF5's exit handler
    # after "flush failed" (SIGSEGV) and left a file h5py could not open. Written through h5vol,
    # the volume that does not fit is not written, and the file is finished with those before.
    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (8 << 20, 8 << 20))

    cfg = raw_config(tmp_path, 2)
    src = tmp_path / "in.raw"
    big = dict(json.loads(cfg.read_text()))
    big["geometry"].update(samples_per_ascan=1024, ascans_per_bscan=32, bscans_per_volume=8,
                           depth_range=[0, 512])
    np.random.default_rng(1).integers(0, 4096, size=(8, 8, 32, 1024)).astype("<u2").tofile(src)
    cfg.write_text(json.dumps(big))
    out, whole = tmp_path / "o.h5", tmp_path / "whole.h5"

    def run(path, preexec_fn=None):
        return subprocess.run([str(bin_dir / "volrec"), "process", "-c", str(cfg), "-o",
                               str(path), "--full"], capture_output=True, text=True,
                              timeout=120, preexec_fn=preexec_fn)

    p = run(out, limit)
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert "file size limit reached" in p.stderr, p.stderr
    assert "HDF5-DIAG" not in p.stderr, p.stderr
    m = re.search(r"holds the (\d+) epochs processed before the failure", p.stderr)
    assert m, p.stderr
    n = int(m.group(1))
    assert 1 <= n < 8, p.stderr
    assert run(whole).returncode == 0
    with h5py.File(out, "r") as f, h5py.File(whole, "r") as w:
        assert f.attrs["epochs"] == n and list(f["epoch"][:]) == list(range(n))
        assert f["volumes"].shape == (n, 16, 64, 512) and f["full"].shape[0] == n
        assert np.array_equal(f["volumes"][:], w["volumes"][:n])
        assert np.array_equal(f["full"][:], w["full"][:n])
        assert np.array_equal(f["offset"][:], w["offset"][:n])
