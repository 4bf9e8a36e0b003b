# SPDX-License-Identifier: MIT
"""volrecd's control socket from a test: a Unix SOCK_SEQPACKET connection to
<run_dir>/<instance>.ctl, one JSON request per datagram, one reply per request
(docs/control.md)."""
import json
import socket

REPLY_MAX = 1 << 20


class Wire:
    """One connection; request() sends bytes or a JSON-able object and returns the reply."""

    def __init__(self, path, timeout=10.0):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.settimeout(timeout)
        self.sock.connect(self.path)

    def send(self, req):
        data = req if isinstance(req, (bytes, bytearray)) else json.dumps(req).encode()
        self.sock.send(data)

    def recv(self):
        data = self.sock.recv(REPLY_MAX)
        if not data:
            raise ConnectionError("volrecd closed the control connection")
        return json.loads(data)

    def request(self, req):
        self.send(req)
        return self.recv()

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def ctl_path(run_dir, instance):
    return "%s/%s.ctl" % (run_dir, instance)
