# SPDX-License-Identifier: MIT
"""The random configurations of test_algorithms.py on another backend, for a GPU host that has
volrec but not numpy or h5py (docs/gpu.md "Random configurations"):

  random_cases.py prep DIR FIRST COUNT   # here: DIR/c<seed>/ with config.yaml, input.raw, tables
  tests/gpu/random-cases.sh DIR BUILD    # there: DIR/c<seed>/cuda.h5 from volrec process
  random_cases.py compare DIR cuda       # here: each output against the float64 reference

prep includes background.mode partial_median in some seeds, and geometry.repeats 1 to 4.
compare exits 1 when a case does not match, naming it and its configuration."""
import json
import pathlib
import shutil
import sys
import tempfile

import h5py

import test_algorithms as ta


def prep(out, first, count):
    manifest = {}
    for seed in range(first, first + count):
        over, epochs = ta.random_configuration(seed, partial_median=True, repeats=True)
        d = out / f"c{seed}"
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        ta.build_case(d, f"random-{seed}", over, epochs)  # over stays as drawn
        (d / "epochs").write_text(f"{epochs}\n")
        manifest[seed] = {"over": over, "epochs": epochs}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{count} configurations in {out}")
    return 0


def compare(out, backend):
    manifest = json.loads((out / "manifest.json").read_text())
    bad = 0
    for seed, m in sorted(manifest.items(), key=lambda kv: int(kv[0])):
        name, epochs = f"random-{seed}", m["epochs"]
        path = out / f"c{seed}" / f"{backend}.h5"
        with tempfile.TemporaryDirectory() as t:  # the same input again, from the seed
            _, ref, raw = ta.build_case(pathlib.Path(t), name, m["over"], epochs)
        if not path.exists():
            fails = [f"{name}: no {path}"]
        else:
            with h5py.File(path, "r") as f:
                fails = ta.check_against_reference(name, f, ref, raw, epochs)
        if fails:
            bad += 1
            print("\n".join(fails[:3]), "::", json.dumps(m["over"]))
    print(f"{backend}: {len(manifest) - bad} of {len(manifest)} configurations match the reference")
    return 1 if bad else 0


def main(argv):
    if len(argv) == 4 and argv[0] == "prep":
        return prep(pathlib.Path(argv[1]), int(argv[2]), int(argv[3]))
    if len(argv) == 3 and argv[0] == "compare":
        return compare(pathlib.Path(argv[1]), argv[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
