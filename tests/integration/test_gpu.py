# SPDX-License-Identifier: MIT
"""The CUDA backend against the CPU reference (tests/gpu/gpu_equal.c): small geometries here;
the whole set, compute-sanitizer and the benchmark run on a GPU host (tests/gpu/run-on-device.sh).
Skipped where volrec was built without CUDA or no CUDA device exists; the host-side table check
inside gpu_equal still runs (and can fail) without a device."""
import subprocess

import pytest


def test_gpu_equal_small(build_dir):
    exe = build_dir / "tests" / "gpu_equal"
    if not exe.exists():
        pytest.skip("built without CUDA: no gpu_equal")
    r = subprocess.run([str(exe), "--small"], capture_output=True, text=True, timeout=900)
    out = r.stdout + r.stderr
    if r.returncode == 77:
        pytest.skip("no CUDA device")
    assert r.returncode == 0, out
    assert "PASS: 0 failure(s)" in out, out
