#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Function lengths of the C and CUDA code git tracks (docs/architecture.md, "Function length").

A function is a '{' alone at column 0 (the house style, clang-format BreakBeforeBraces: Linux,
puts every function's brace there and no other brace; a K&R 'f(...) {' at the end of a line at
column 0 is counted too) up to the next '}' or '};' at column 0. Its length is the number of lines
from the opening brace to the closing brace, both included: blank and comment lines inside count,
the signature does not. The name is the identifier before the first '(' of the signature, read
back from the brace to the first line at column 0 that is not a continuation.

    scripts/funclen.py                   figures: functions over 100 and over 150 lines
    scripts/funclen.py --list 100        also every function over 100 lines, longest first
    scripts/funclen.py --all             every function, longest first
    scripts/funclen.py --rev REV         the figures of commit REV (its tracked files)
    scripts/funclen.py --exclude tests/  leave out the files under a folder (repeatable)
"""
import argparse
import re
import subprocess
import sys

EXTS = (".c", ".cu", ".h", ".cuh")
KR = re.compile(r"^[A-Za-z_].*\)\s*\{\s*$")
CTRL = re.compile(r"^\s*(if|for|while|switch|do|else)\b")
NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")


def git(root, *args):
    return subprocess.run(["git", "-C", root, *args], check=True,
                          capture_output=True).stdout.decode("utf-8", "replace")


def tracked(root, rev):
    if rev:
        out = git(root, "ls-tree", "-r", "-z", "--name-only", rev)
    else:
        out = git(root, "ls-files", "-z")
    return sorted(p for p in out.split("\0") if p.endswith(EXTS))


def read(root, rev, path):
    if rev:
        return git(root, "show", f"{rev}:{path}")
    with open(f"{root}/{path}", encoding="utf-8", errors="replace") as f:
        return f.read()


def signature_name(lines, i):
    """Name of the function whose opening brace is on line i (0-based)."""
    sig = []
    j = i - 1 if lines[i].startswith("{") else i
    while j >= 0:
        sig.insert(0, lines[j].strip())
        if lines[j][:1] not in ("", " ", "\t"):
            break
        j -= 1
    text = " ".join(sig)
    for m in NAME.finditer(text):
        name = m.group(1)
        if name == "VR_COMMAND":  # VR_COMMAND(x, "...") defines cmd_x
            arg = re.match(r"\s*([A-Za-z0-9_]+)", text[m.end():])
            return "cmd_" + arg.group(1) if arg else name
        if not name.startswith("__"):  # __launch_bounds__(...), __attribute__((...))
            return name
    return "?"


def functions(path, text):
    lines = text.split("\n")
    out = []
    i = 0
    while i < len(lines):
        ln = lines[i]
        opens = ln.rstrip() == "{" or (KR.match(ln) and not CTRL.match(ln)
                                       and not ln.startswith(("struct", "union", "enum",
                                                              "typedef", "extern", "#")))
        if not opens:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end].rstrip() not in ("}", "};"):
            end += 1
        if end == len(lines):
            sys.exit(f"{path}:{i + 1}: no closing brace at column 0")
        out.append((end - i + 1, path, i + 1, signature_name(lines, i)))
        i = end + 1
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=".", help="the git checkout (default: here)")
    ap.add_argument("--list", type=int, metavar="N", help="list the functions over N lines")
    ap.add_argument("--all", action="store_true", help="list every function")
    ap.add_argument("--rev", help="a commit to measure instead of the working tree")
    ap.add_argument("--exclude", action="append", default=[], metavar="DIR",
                    help="leave out the files under DIR/ (repeatable)")
    a = ap.parse_args()
    fns = []
    for p in tracked(a.root, a.rev):
        if any(p.startswith(d.rstrip("/") + "/") for d in a.exclude):
            continue
        fns += functions(p, read(a.root, a.rev, p))
    fns.sort(key=lambda t: (-t[0], t[1], t[2]))
    limit = 0 if a.all else a.list
    if limit is not None:
        for n, path, line, name in fns:
            if n > limit:
                print(f"{n:5d} {path}:{line} {name}")
    over100 = sum(1 for f in fns if f[0] > 100)
    over150 = sum(1 for f in fns if f[0] > 150)
    print(f"functions: {len(fns)}, over 100 lines: {over100}, over 150 lines: {over150}")


if __name__ == "__main__":
    main()
