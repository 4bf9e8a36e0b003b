# SPDX-License-Identifier: MIT
"""The tree follows the link graph: every #include of the product code (everything but tests/)
points down or within its folder, as the table of layers in docs/architecture.md ("Layers")
declares; and nothing in the repository cites a file the repository does not contain."""
import os
import re
import subprocess
from pathlib import Path

SRC = Path(os.environ.get("VOLREC_SRC", Path(__file__).resolve().parents[2]))
CODE = (".c", ".h", ".cu", ".cuh")
SKIP = ("tests/", ".git/", "build", "debian/.debhelper/")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
PUBLIC = "include/volrec/"


def read_layers(doc):
    """{folder or file: [what it may include]} from the table under "## Layers" in doc."""
    layers, inside = {}, False
    for line in doc.read_text().splitlines():
        if line.startswith("## "):
            inside = line.strip() == "## Layers"
            continue
        m = re.match(r"\|\s*(`[^|]+`)\s*\|\s*([^|]*)\|", line) if inside else None
        if not m:
            continue
        allowed = re.findall(r"`([^`]+)`", m.group(2))
        for name in re.findall(r"`([^`]+)`", m.group(1)):
            layers[name] = allowed
    return layers


def tracked(root):
    """The repository's files (git's list where there is one, else a walk)."""
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], check=True,
                             capture_output=True).stdout.decode()
        return [f for f in out.split("\0") if f and (root / f).is_file()]
    except (OSError, subprocess.CalledProcessError):
        return [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()]


def layer_of(path, layers):
    """The longest entry of the table path falls under (a folder ending in / or a file)."""
    best = None
    for name in layers:
        if path == name or (name.endswith("/") and path.startswith(name)):
            if best is None or len(name) > len(best):
                best = name
    return best


def resolve(root, f, kind, name):
    """The repository path an include names: quotes look beside the including file first,
    then from the root (-I.), then in include/ (-Iinclude); None for a system or generated
    header."""
    cands = []
    if kind == '"':
        cands.append(os.path.normpath(os.path.join(os.path.dirname(f), name)))
        cands.append(os.path.normpath(name))
    cands.append(os.path.normpath(os.path.join("include", name)))
    for c in cands:
        if not c.startswith("..") and (root / c).is_file():
            return c
    return None


def violations(root, layers):
    """'file:line: message' for every include the table does not allow."""
    out = []
    for f in sorted(tracked(root)):
        if not f.endswith(CODE) or f.startswith(SKIP):
            continue
        own = layer_of(f, layers)
        text = (root / f).read_text(errors="replace").splitlines()
        for no, line in enumerate(text, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = resolve(root, f, m.group(1), m.group(2))
            if target is None:
                continue
            if own is None:
                out.append(f"{f}:{no}: {f} is in no layer of docs/architecture.md")
                continue
            if target.startswith(PUBLIC) or layer_of(target, layers) == own:
                continue
            allowed = layers[own]
            if any(target == a or (a.endswith("/") and target.startswith(a)) for a in allowed):
                continue
            out.append(f"{f}:{no}: #include of {target}: {own} may include "
                       f"{', '.join(allowed) or 'nothing'} (and {PUBLIC}) only")
    return out


def test_every_include_follows_the_layers():
    layers = read_layers(SRC / "docs/architecture.md")
    assert layers, "docs/architecture.md has no table of layers"
    bad = violations(SRC, layers)
    assert not bad, "includes across the layers:\n" + "\n".join(bad)


def test_an_upward_include_fails(tmp_path):
    """The check itself: a base/ file that includes the pipeline is reported with its line,
    a sideways include between two programs too."""
    for path, text in {
        "base/base.h": "int vr_x(void);\n",
        "base/up.c": '#include "base/base.h"\n\n#include "pipeline/pipeline.h"\n',
        "pipeline/pipeline.h": '#include "base/base.h"\n',
        "clients/view/internal.h": "\n",
        "clients/volrec/side.c": '#include <volrec/client.h>\n#include "clients/view/internal.h"\n',
        "include/volrec/client.h": "\n",
    }.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    layers = {"base/": [], "pipeline/": ["base/"], "clients/view/": ["base/"],
              "clients/volrec/": ["base/"]}
    bad = violations(tmp_path, layers)
    assert [b.split(": ")[0] for b in bad] == ["base/up.c:3", "clients/volrec/side.c:2"], bad


CITED = re.compile(r"\b(DESIGN|ALGORITHMS|STYLE)\.md\b|\.\./shared\b")
# Folders whose comments still cite the design's pages: they are being restructured (struct
# be_params, the engine split by thread) and take docs/algorithms.md's numbering with it.
# Remove each from here as it is done.
PENDING = ()


def text_lines(skip):
    """(file, line number, line) of every tracked text file for which skip(file) is false."""
    for f in tracked(SRC):
        if skip(f):
            continue
        try:
            text = (SRC / f).read_text()
        except (UnicodeDecodeError, OSError):
            continue
        for no, line in enumerate(text.splitlines(), 1):
            yield f, no, line


def test_nothing_cites_a_file_outside_the_repository():
    """docs/algorithms.md is the numerical contract; the docs are the repository's own."""
    bad = [f"{f}:{no}: {line.strip()[:100]}"
           for f, no, line in text_lines(lambda f: f.startswith(("tests/",) + PENDING))
           if CITED.search(line)]
    assert not bad, "citations of files the repository does not contain:\n" + "\n".join(bad)


def sections(doc):
    """{"§1": [1, 2, ...]}: the sections of docs/algorithms.md and the numbered steps of each."""
    out, cur = {}, None
    for line in doc.read_text().splitlines():
        m = re.match(r"##+ (§[0-9]+[a-z]?) ", line)
        if m:
            cur = out.setdefault(m.group(1), [])
        elif line.startswith("## "):
            cur = None
        elif cur is not None and (n := re.match(r"([0-9]+)\. ", line)):
            cur.append(int(n.group(1)))
    return out


def test_every_cited_section_of_the_algorithms_exists():
    """docs/algorithms.md §N and §N.n (step n of §N) name a section and a step it has."""
    have = sections(SRC / "docs/algorithms.md")
    bad = []
    for f, no, line in text_lines(lambda f: f.startswith(PENDING) or f == "docs/algorithms.md"):
        for sec, step in re.findall(r"algorithms\.md,? (§[0-9]+[a-z]?)(?:\.([0-9]+))?", line):
            if sec not in have or (step and int(step) not in have[sec]):
                bad.append(f"{f}:{no}: docs/algorithms.md has no {sec}{'.' + step if step else ''}")
    assert not bad, "\n".join(bad)
