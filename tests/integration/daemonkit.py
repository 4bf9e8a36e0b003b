# SPDX-License-Identifier: MIT
"""What the tests that run a volrecd of their own share (test_daemon, test_tools, viewkit)."""
import os


def remove_segments(instance):
    """Remove the shared-memory segments of instance (what a killed volrecd leaves)."""
    for name in (f"volrec.{instance}", f"volrec.{instance}.readers"):
        try:
            os.unlink(f"/dev/shm/{name}")
        except FileNotFoundError:
            pass
