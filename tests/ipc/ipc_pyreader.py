# SPDX-License-Identifier: MIT
"""Python test reader for the multi-process ipc tests (same modes and JSON as ipc_testreader):
verify every volume against its sequence pattern until the writer's "done" event, or follow
the instance across writer restarts, or lease one volume and stall until told to look."""
import argparse
import json
import sys

import numpy as np

import volrec

C_SEQ = np.uint64(0x9E3779B97F4A7C15)
C_WORD = np.uint64(0xBF58476D1CE4E5B9)


def expected(seq, nwords):
    return np.array([seq], dtype=np.uint64) * C_SEQ + np.arange(nwords, dtype=np.uint64) * C_WORD


def intact_pattern(vol):
    words = vol.reshape(-1).view(np.uint64)
    return bool(np.array_equal(words, expected(vol.sequence, words.size)))


def verify(client):
    tally = dict(intact=0, torn=0, bad=0, first=0, last=0, done=0, rejected=0)
    while True:
        try:
            topic, payload = client.next_message(timeout=20.0)
        except volrec.ProtocolError as e:
            if not tally["rejected"]:
                print("ipc_pyreader: rejected: %s" % e, file=sys.stderr)
            tally["rejected"] += 1
            continue
        if topic == "event":
            ev = json.loads(payload)
            if "done" in ev:
                tally["done"] = ev["done"]
                break
            continue
        if topic != "vol":
            continue
        try:
            with payload as vol:
                if not tally["first"]:
                    tally["first"] = vol.sequence - client.missed
                tally["last"] = vol.sequence
                ok = intact_pattern(vol)
        except volrec.TornRead:
            tally["torn"] += 1
            continue
        tally["intact" if ok else "bad"] += 1
    tally["missed"] = client.missed
    print(json.dumps(tally))


def follow(client, want):
    first, intact_after, bad = client.session_id, 0, 0
    while intact_after < want:
        try:
            with client.next_volume(timeout=20.0) as vol:
                ok = intact_pattern(vol)
                later = vol.session_id != first
        except volrec.TornRead:
            continue
        except volrec.ProtocolError:
            continue
        bad += not ok
        intact_after += ok and later
    print(json.dumps(dict(remaps=client.remaps, intact_after=intact_after, bad=bad)))


def stall(client):
    import time
    for _ in range(2000):
        try:
            lease = client.latest()
            break
        except BlockingIOError:
            time.sleep(0.005)
    vol = lease.__enter__()
    print("held %d %d" % (vol.slot, vol.sequence), flush=True)
    sys.stdin.readline()
    try:
        lease.__exit__(None, None, None)
        print("intact")
    except volrec.TornRead:
        print("torn")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-i", required=True)
    ap.add_argument("-r", required=True)
    ap.add_argument("-m", default="verify", choices=("verify", "follow", "stall"))
    ap.add_argument("-k", type=int, default=10)
    a = ap.parse_args()
    with volrec.Client(a.i, run_dir=a.r, topics=("vol", "event"), rcvhwm=100000) as client:
        if a.m == "verify":
            verify(client)
        elif a.m == "follow":
            follow(client, a.k)
        else:
            stall(client)


if __name__ == "__main__":
    main()
