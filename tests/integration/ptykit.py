# SPDX-License-Identifier: MIT
"""A command run with stdout and stderr on a pseudo-terminal, as a user at a terminal runs it
(progress lines show only there, docs/testing.md), optionally interrupted with SIGINT (Ctrl-C)
once a pattern shows in its output."""
import os
import pty
import re
import select
import signal
import subprocess
import time


def run_on_pty(cmd, timeout, interrupt_on=None):
    """Run cmd with stdout and stderr on a pseudo-terminal; SIGINT once interrupt_on (a bytes
    regular expression) shows in its output. (returncode, output, whether SIGINT was sent)."""
    master, slave = pty.openpty()
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                         close_fds=True)
    os.close(slave)
    text, sent = b"", False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # the other side closed: the process ended
                    chunk = b""
                if not chunk and p.poll() is not None:
                    break
                text += chunk
            elif p.poll() is not None:
                break
            if interrupt_on and not sent and re.search(interrupt_on, text):
                p.send_signal(signal.SIGINT)
                sent = True
        rc = p.wait(timeout=max(1, deadline - time.monotonic()))
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(master)
    return rc, text.decode(errors="replace"), sent
