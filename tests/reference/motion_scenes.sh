#!/bin/sh
# SPDX-License-Identifier: MIT
# The scenes of docs/algorithms.md §2b ("Next: motion compensation"), scored by the numpy
# prototype tests/reference/motion_proto.py: the standard table's six motions (bench/quality-scenes)
# with the scanner's 150 um beam, each recorded with `volrec sim --truth`, turned into /lowres by
# `volrec process` (reconstruct.mode none, the scanner's corrections, background bscan_mean,
# db_range [70, 100]), then reconstructed by the prototype with the estimated pose.
# Usage: tests/reference/motion_scenes.sh BUILD_DIR [WORK_DIR]   (MOTION_BEAM_UM, default 150;
# MOTION_KAPPA, default 0: the prototype's change test off; MOTION_ARGS, e.g. --nearest for the
# first gather; PYTHON, default python3, with numpy and h5py)
set -eu
B=${1:?usage: tests/reference/motion_scenes.sh BUILD_DIR [WORK_DIR]}
V=$B/bin/volrec
W=${2:-$(mktemp -d "${TMPDIR:-/tmp}/vrmotion.XXXXXX")}
BEAM=${MOTION_BEAM_UM:-150}
KAPPA=${MOTION_KAPPA:-0}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$W"
geometry='geometry:
  samples_per_ascan: 256
  ascans_per_bscan: 12
  bscans_per_volume: 12
  stride: [5, 5]
  depth_range: [0, 128]'

scene() {
	name=$1
	printf 'source:\n  type: synth\n  rate: 25\n  synth: {seed: 1, phantom: retina, motion: {%s}, snr_db: 40, beam_um: %s}\n%s\n' \
		"$2" "$BEAM" "$geometry" >"$W/$name-sim.yaml"
	"$V" sim -c "$W/$name-sim.yaml" -o "$W/$name.rp" -n 75 --truth "$W/$name-truth.h5" 2>/dev/null
	meta=$(head -c 65536 "$W/$name.rp" | tr -d '\000' | tr -c '[:print:]\n' '\n')
	poly=$(printf '%s\n' "$meta" | sed -n 's/^resample_poly: *//p' | head -n 1)
	disp=$(printf '%s\n' "$meta" | sed -n 's/^dispersion_coeffs: *//p' | head -n 1)
	printf 'backend: cpu\nsource:\n  type: replay\n  rate: 0\n  replay: {path: %s}\n%s\n' "$W/$name.rp" "$geometry" >"$W/$name.yaml"
	printf 'preprocess:\n  background: {mode: bscan_mean}\n  resample: {method: cubic, poly: %s}\n' "$poly" >>"$W/$name.yaml"
	printf '  dispersion: {coeffs: %s}\n  db_range: [70, 100]\nreconstruct: {mode: none}\n' "$disp" >>"$W/$name.yaml"
	"$V" process -c "$W/$name.yaml" -o "$W/$name-low.h5" --lowres >/dev/null
	printf '%-22s ' "$name"
	PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}" "${PYTHON:-python3}" "$HERE/motion_proto.py" \
		${MOTION_ARGS:-} "$W/$name-low.h5" "$W/$name-truth.h5" - "$KAPPA"
}

S=$HERE/../../bench/quality-scenes
for name in $(grep -v '^#' "$S" | cut -d'|' -f1); do
	scene "$name" "$(grep "^$name|" "$S" | cut -d'|' -f2-)"
done
echo "files in $W"
