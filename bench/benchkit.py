# SPDX-License-Identifier: MIT
"""What the Python benchmarks (soak.py, view_latency.py) share."""
import signal
import subprocess


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
