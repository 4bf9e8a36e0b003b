# SPDX-License-Identifier: MIT
"""The viewer's latency benchmark (bench/view_latency.py driving the C client view_latency
against the real volrecd and `volrec view`) gives sane figures for every subscribed picture, and
the client fails with a precise message and a non-zero exit on a refused connection, a bad URL
and a malformed picture frame."""
import base64
import hashlib
import json
import math
import socket
import subprocess
import sys
import threading

from conftest import BUILD, SRC

CLIENT = BUILD / "tests" / "view_latency"
KINDS = ["enface_mean", "bscan", "slice", "render"]


def test_benchmark_measures_every_pane(tmp_path):
    out = tmp_path / "view-latency.json"
    p = subprocess.run([sys.executable, str(SRC / "bench" / "view_latency.py"), "--build",
                        str(BUILD), "--backend", "cpu", "--case", "tiny", "--seconds", "2",
                        "--warmup", "1", "--no-alone", "-o", str(out)],
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr
    r = json.loads(out.read_text())
    # tools/bench/cases.c's tiny: 12 x 12 A-scans of 256 samples, stride 3, depths [0, 128)
    assert r["case"] == "tiny" and r["backend"] == "cpu" and r["volume"] == [36, 36, 128]
    assert r["config"]["geometry"]["samples_per_ascan"] == 256, r["config"]
    assert sorted(r["pictures"]) == sorted(KINDS)
    for kind in KINDS:
        c = r["client"]["pictures"][kind]
        lat = c["acq_to_received_ms"]
        assert c["frames"] > 0, (kind, c)
        assert c["bytes"] >= c["frames"] * 128, (kind, c)
        assert lat["n"] > 0 and 0 < lat["p50"] <= lat["p99"] <= lat["max"], (kind, lat)
        assert math.isfinite(lat["max"]) and lat["max"] < 60000, (kind, lat)
        pub = c["publish_to_received_ms"]
        assert 0 <= pub["p50"] <= lat["p50"], (kind, pub, lat)
    assert r["client"]["daemon"]["volumes_per_s"] > 0, r["client"]["daemon"]
    assert r["acq_to_received_ms_all"]["n"] == sum(
        r["client"]["pictures"][k]["acq_to_received_ms"]["n"] for k in KINDS)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_refused_connection_is_an_error():
    url = f"ws://127.0.0.1:{free_port()}/ws"
    p = subprocess.run([str(CLIENT), "--url", url, "--seconds", "1"], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert f"view_latency: {url}: cannot connect" in p.stderr, p.stderr
    assert "Connection refused" in p.stderr, p.stderr
    assert p.stdout == ""


def test_bad_url_is_a_usage_error():
    p = subprocess.run([str(CLIENT), "--url", "http://127.0.0.1:8090/ws"], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "--url http://127.0.0.1:8090/ws: need ws://HOST[:PORT][/PATH]" in p.stderr, p.stderr


def ws_frame(opcode, payload):
    n = len(payload)
    head = bytes([0x80 | opcode]) + (bytes([n]) if n < 126 else bytes([126]) + n.to_bytes(2, "big"))
    return head + payload


def fake_viewer(listener, frame):
    """One WebSocket session: the hello, then (after any message from the client) frame."""
    conn, _ = listener.accept()
    with conn:
        req = b""
        while b"\r\n\r\n" not in req:
            req += conn.recv(4096)
        key = next(line.split(b":", 1)[1].strip() for line in req.split(b"\r\n")
                   if line.lower().startswith(b"sec-websocket-key:"))
        accept = base64.b64encode(hashlib.sha1(
            key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
        conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                     b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept +
                     b"\r\nSec-WebSocket-Protocol: volrec-view\r\n\r\n")
        hello = {"type": "hello", "protocol": 2, "instance": "x", "control": True,
                 "views": KINDS, "max_message": 4096}
        conn.sendall(ws_frame(1, json.dumps(hello).encode()))
        conn.recv(4096)  # the subscribe message
        conn.sendall(ws_frame(2, frame))
        conn.recv(4096)  # until the client closes


def test_malformed_frame_is_an_error():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    bad = b"XXXX" + bytes(296)  # 300 bytes, not the VRVF magic
    t = threading.Thread(target=fake_viewer, args=(listener, bad), daemon=True)
    t.start()
    try:
        p = subprocess.run([str(CLIENT), "--url",
                            f"ws://127.0.0.1:{listener.getsockname()[1]}/ws", "--warmup", "0",
                            "--seconds", "5", "--timeout", "10"],
                           capture_output=True, text=True, timeout=30)
    finally:
        listener.close()
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert "view_latency: picture frame: magic 0x58585858, not 0x46565256 (VRVF)" in p.stderr, \
        p.stderr
