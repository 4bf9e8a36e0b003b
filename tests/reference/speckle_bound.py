# SPDX-License-Identifier: MIT
"""What an estimator that cannot know the speckle can score against a `volrec sim --truth`
recording (docs/algorithms.md §2b, "What limits these figures"): each truth volume compared
with its own local mean over 3 x 3 lateral positions (an oracle that knows the truth's
structure exactly, and even holds 1/9 of each voxel's own value). Same metric as
`volrec quality` (docs/algorithms.md §3, quality_ref.py), epochs FIRST.. in steps of STEP.

usage: python3 tests/reference/speckle_bound.py TRUTH.h5 [FIRST=25] [STEP=1]"""
import sys

import h5py
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from quality_ref import volume_metrics


def lateral_mean(t, w=3):
    p = w // 2
    tp = np.pad(t, ((p, p), (p, p), (0, 0)), mode="edge")
    return sliding_window_view(tp, (w, w), axis=(0, 1)).mean(axis=(-1, -2))


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    first = int(argv[2]) if len(argv) > 2 else 25
    step = int(argv[3]) if len(argv) > 3 else 1
    with h5py.File(argv[1], "r") as f:
        truth = f["truth"]
        res = [volume_metrics(lateral_mean(truth[e].astype(np.float64)),
                              truth[e].astype(np.float64))
               for e in range(first, truth.shape[0], step)]
    p, s = np.mean(res, axis=0)
    print(f"{argv[1]}: the truth's own 3 x 3 lateral mean scores {p:.2f} dB / {s:.3f} "
          f"({len(res)} epochs from {first})")


if __name__ == "__main__":
    main(sys.argv)
