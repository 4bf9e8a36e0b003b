# SPDX-License-Identifier: MIT
"""What the Python benchmarks (soak.py, view_latency.py, raw_record_bench.py) share."""
import json
import signal
import subprocess
import time


def stop(proc, timeout=30.0, on_kill=None):
    """End proc (a subprocess.Popen, or None): SIGTERM while it runs, then wait at most timeout
    seconds for it; past that on_kill() (when given), SIGKILL and wait."""
    if proc and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            if on_kill:
                on_kill()
            proc.kill()
            proc.wait()


def load_case(volrec, name):
    """The case called name of tools/bench/cases.c, as `volrec bench --print-case` prints it."""
    p = subprocess.run([str(volrec), "bench", "--print-case", name], capture_output=True,
                       text=True, timeout=60)
    if p.returncode:
        raise RuntimeError(p.stderr.strip() or f"volrec bench --print-case: exit {p.returncode}")
    return json.loads(p.stdout)


def status(volrec, cfg_path, timeout=5.0):
    """The daemon's next status message (`volrec status --json`), or None."""
    p = subprocess.run([str(volrec), "status", "--json", "-c", str(cfg_path), "--timeout",
                        str(timeout)], capture_output=True, text=True, timeout=timeout + 10)
    if p.returncode:
        return None
    try:
        return json.loads(p.stdout)
    except json.JSONDecodeError:
        return None


def sim(volrec, cfg_path, replay, epochs):
    """Write epochs epochs of `volrec sim` (configuration cfg_path) to the replay file replay;
    the seconds it took. RuntimeError with sim's message when it fails."""
    t = time.monotonic()
    p = subprocess.run([str(volrec), "sim", "-c", str(cfg_path), "-o", str(replay), "-n",
                        str(epochs)], capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"volrec sim failed ({p.returncode}): {p.stderr.strip()}")
    return time.monotonic() - t
