#!/bin/sh
# SPDX-License-Identifier: MIT
# The standard quality table (`make quality`, docs/algorithms.md §2b and §3): the simulator's
# retina at 60 x 60 x 128 full resolution (12 x 12 A-scans of K = 256, stride 5, S = 25,
# seed 1, SNR 40 dB, 75 epochs at rate 25), still, turning slowly (0.3 deg/epoch) and fast
# (3 deg/epoch), drifting laterally (30 um/epoch) and axially (20 um/epoch), and jumping at
# epoch 40; each recording reconstructed in every mode by `volrec quality` with the scanner's
# own corrections, background bscan_mean and db_range [70, 100]; the scenes' JSON gathered.
# The scanner's lateral resolution is QUALITY_BEAM_UM (source.synth.beam_um, default 150: the
# 50 um full-resolution pitch samples the beam at its Nyquist rate, as clinical scanners do;
# 0 is the pencil beam of the tables before it existed, docs/algorithms.md §2b).
# Usage: bench/quality.sh BUILD_DIR OUT.json   (QUALITY_BACKEND=cpu|cuda|auto, default cpu)
set -eu
B=${1:?usage: bench/quality.sh BUILD_DIR OUT.json}
OUT=${2:?usage: bench/quality.sh BUILD_DIR OUT.json}
V=$B/bin/volrec
BACKEND=${QUALITY_BACKEND:-cpu}
BEAM=${QUALITY_BEAM_UM:-150}
EPOCHS=75
W=$(mktemp -d "${TMPDIR:-/tmp}/vrquality.XXXXXX")
trap 'rm -rf "$W"' EXIT

geometry() {
	cat <<EOF
geometry:
  samples_per_ascan: 256
  ascans_per_bscan: 12
  bscans_per_volume: 12
  stride: [5, 5]
  depth_range: [0, 128]
EOF
}

# scene NAME MOTION: record, then score every mode; the scene's JSON into $W/NAME.json
scene() {
	name=$1
	{
		printf 'source:\n  type: synth\n  rate: 25\n'
		printf '  synth: {seed: 1, phantom: retina, motion: {%s}, snr_db: 40, beam_um: %s}\n' \
			"$2" "$BEAM"
		geometry
	} >"$W/$name-sim.yaml"
	"$V" sim -c "$W/$name-sim.yaml" -o "$W/$name.rp" -n $EPOCHS --truth "$W/$name-truth.h5" \
		2>"$W/$name-sim.log" || { cat "$W/$name-sim.log" >&2; exit 1; }
	# the scanner's corrections, from the replay's metadata (docs/replay-format.md)
	meta=$(head -c 65536 "$W/$name.rp" | tr -d '\000' | tr -c '[:print:]\n' '\n')
	poly=$(printf '%s\n' "$meta" | sed -n 's/^resample_poly: *//p' | head -n 1)
	disp=$(printf '%s\n' "$meta" | sed -n 's/^dispersion_coeffs: *//p' | head -n 1)
	[ -n "$poly" ] && [ -n "$disp" ] || { echo "quality.sh: $name: no corrections in the replay" >&2; exit 1; }
	{
		printf 'backend: %s\nsource:\n  type: replay\n  rate: 0\n  replay: {path: %s}\n' \
			"$BACKEND" "$W/$name.rp"
		geometry
		printf 'preprocess:\n  background: {mode: bscan_mean}\n'
		printf '  resample: {method: cubic, poly: %s}\n' "$poly"
		printf '  dispersion: {coeffs: %s}\n  db_range: [70, 100]\n' "$disp"
	} >"$W/$name.yaml"
	"$V" quality -c "$W/$name.yaml" -t "$W/$name-truth.h5" --name "$name" --json "$W/$name.json"
	echo
}

# the scenes, NAME|MOTION a line (bench/quality-scenes)
names=$(grep -v '^#' "$(dirname "$0")/quality-scenes" | cut -d'|' -f1)
for name in $names; do
	scene "$name" "$(grep "^$name|" "$(dirname "$0")/quality-scenes" | cut -d'|' -f2-)"
done

commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
{
	printf '{"benchmark":"volrec quality: PSNR/SSIM against the simulator'"'"'s truth '
	printf '(docs/algorithms.md §3), 60x60x128, stride 5, S = 25, 75 epochs, means over '
	printf 'epochs 25-74","host":"%s","date":"%s","commit":"%s","backend":"%s",' \
		"$(hostname)" "$(date -u +%Y%m%dT%H%M%SZ)" "$commit" "$BACKEND"
	printf '"beam_um":%s,\n"scenes":[' "$BEAM"
	sep=''
	for s in $names; do
		printf '%s\n' "$sep"
		cat "$W/$s.json" | tr -d '\n'
		sep=','
	done
	printf '\n]}\n'
} >"$OUT"
echo "wrote $OUT"
