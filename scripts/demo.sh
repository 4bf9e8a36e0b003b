#!/bin/bash
# SPDX-License-Identifier: MIT
# `make demo` / `make demo-real`: run volrecd on the synthetic scanner (or on the real calibration
# data), watch it live, take pictures and a short recording, stop it, say where the files are.
# Nothing is left running and no shared memory is left behind, whatever way this script ends.
#
#   scripts/demo.sh BUILD_DIR [synth|real]
# Environment: DEMO_SECONDS (watch time, default 5), DEMO_OUT (default BUILD_DIR/demo),
# DEMO_SNAPSHOT_TIMEOUT (seconds the snapshot may wait for every picture, default 60),
# DEMO_FUNCTIONAL=1 (synth: the flow phantom with repeated B-scans, structure + angiography +
# Doppler in every volume, docs/algorithms.md §5).
set -euo pipefail

BUILD=${1:?usage: scripts/demo.sh BUILD_DIR [synth|real]}
MODE=${2:-synth}
SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "$BUILD" && pwd)/bin
SECONDS_WATCH=${DEMO_SECONDS:-5}
OUT=${DEMO_OUT:-$(cd "$BUILD" && pwd)/demo}
FUNCTIONAL=${DEMO_FUNCTIONAL:-0}
SNAPSHOT_TIMEOUT=${DEMO_SNAPSHOT_TIMEOUT:-60}
case $MODE in synth | real) ;; *)
	echo "demo: mode must be synth or real, not '$MODE'" >&2
	exit 2
	;;
esac
case $FUNCTIONAL in 0 | "") FUNCTIONAL=0 ;; 1)
	if [ "$MODE" != synth ]; then
		echo "demo: DEMO_FUNCTIONAL=1 runs the synthetic flow phantom (make demo), not '$MODE'" >&2
		exit 2
	fi
	;;
*)
	echo "demo: DEMO_FUNCTIONAL must be 0 or 1, not '$FUNCTIONAL'" >&2
	exit 2
	;;
esac

# short paths: the ipc:// socket path must fit 107 bytes
TMP=$(mktemp -d /tmp/volrec-demo.XXXXXX)
INSTANCE=demo-$$-$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
RUN=$TMP/run
mkdir -p "$RUN" "$OUT"
DAEMON_PID=
VIEW_PID=
CHILD=

# Run a tool in the background and wait for it, so that a signal to this script is handled at
# once (bash runs traps only between foreground commands).
run() {
	"$@" &
	CHILD=$!
	local rc=0
	wait "$CHILD" || rc=$?
	CHILD=
	return $rc
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	# the tool run() started: also when the signal came before run() had noted its pid, so
	# every background job but the viewer and the daemon (stopped below, in their order)
	local pid
	for pid in $CHILD $(jobs -p); do
		if [ "$pid" != "$VIEW_PID" ] && [ "$pid" != "$DAEMON_PID" ]; then
			kill -TERM "$pid" 2>/dev/null || true
			wait "$pid" 2>/dev/null || true
		fi
	done
	if [ -n "$VIEW_PID" ]; then
		kill -TERM "$VIEW_PID" 2>/dev/null || true
		wait "$VIEW_PID" 2>/dev/null || true
	fi
	if [ -n "$DAEMON_PID" ] && kill -0 "$DAEMON_PID" 2>/dev/null; then
		"$BIN/volrec" stop -i "$INSTANCE" -r "$RUN" --timeout 20 >/dev/null 2>&1 ||
			kill -KILL "$DAEMON_PID" 2>/dev/null || true
		wait "$DAEMON_PID" 2>/dev/null || true
	fi
	rm -f "/dev/shm/volrec.$INSTANCE" "/dev/shm/volrec.$INSTANCE.readers"
	if [ $rc -ne 0 ] && [ -s "$TMP/volrecd.log" ]; then
		echo "demo: failed; the daemon's log:" >&2
		tail -n 20 "$TMP/volrecd.log" >&2
	fi
	rm -rf "$TMP"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ "$MODE" = synth ] && [ "$FUNCTIONAL" = 1 ]; then
	# the flow phantom (three vessels of laminar flow in static tissue), each B-scan position
	# acquired twice: every volume carries the structure, its angiography (cdv) and Doppler.
	# 32 x 32 positions at stride 3 (96 x 96 x 256 volumes of the tissue's depths) at 5 per
	# second; the times and the wavelength give the Doppler velocities (a phase of pi is
	# 840 nm / (4 x 1.38 x 400 us) = 0.38 mm/s, above the vessels' axial velocities). An A-scan
	# background keeps static tissue out of the moving voxels (docs/algorithms.md §5).
	cat >"$TMP/volrecd.yaml" <<EOF
instance: $INSTANCE
backend: auto
cpu: {threads: 0}
source:
  type: synth
  rate: 5
  synth: {seed: 1, phantom: flow, snr_db: 40, flow: {peak_mm_per_s: 1.5}}
geometry:
  samples_per_ascan: 1024
  sample_type: u16
  ascans_per_bscan: 32
  bscans_per_volume: 32
  repeats: 2
  stride: [3, 3]
  depth_range: [128, 384]
  ascan_period_us: 5
  bscan_period_us: 400
  center_wavelength_nm: 840
# the synthetic scanner's k non-linearity and dispersion, undone exactly ('volrec sim' writes
# these values into its files' metadata)
preprocess:
  background: {mode: ascan_mean}
  db_range: [60, 100]
  resample: {method: cubic, poly: [0, 1104.84, 0, -81.84]}
  dispersion: {coeffs: [30, -12]}
reconstruct: {mode: noncumulative}
output: {slots: 4, channels: [structure, angio, doppler]}
functional: {angio: {method: cdv}}
pipeline: {ring_bscans: 256, overflow: drop_epoch}
ipc: {run_dir: $RUN, status_interval_ms: 500}
log: {level: warning}
EOF
	WHAT="the synthetic flow phantom (structure, angiography, Doppler)"
elif [ "$MODE" = synth ]; then
	# 32 x 32 A-scans of 1024 samples per epoch at stride 3: 96 x 96 x 256 volumes (the
	# retina's depth range) at 10 per second, which two CPU cores keep up with. The here-document
	# expands $INSTANCE and $RUN: no backquotes in it (they would run as commands).
	cat >"$TMP/volrecd.yaml" <<EOF
instance: $INSTANCE
backend: auto
cpu: {threads: 0}
source:
  type: synth
  rate: 10
  synth: {seed: 1, phantom: retina, motion: {deg_per_s: 0.25}, snr_db: 40}
geometry:
  samples_per_ascan: 1024
  sample_type: u16
  ascans_per_bscan: 32
  bscans_per_volume: 32
  stride: [3, 3]
  depth_range: [96, 352]
# the synthetic scanner's k non-linearity and dispersion, undone exactly ('volrec sim' writes
# these values into its files' metadata); a B-scan background removes the source envelope
preprocess:
  background: {mode: bscan_mean}
  resample: {method: cubic, poly: [0, 1104.84, 0, -81.84]}
  dispersion: {coeffs: [30, -12]}
reconstruct: {mode: noncumulative}
output: {slots: 4}
pipeline: {ring_bscans: 128, overflow: drop_epoch}
ipc: {run_dir: $RUN, status_interval_ms: 500}
log: {level: warning}
EOF
	WHAT="the synthetic retina scanner"
else
	# the real calibration data, replayed: its example configuration with our instance and
	# run_dir, and the data paths made absolute
	sed -e "s|^instance:.*|instance: $INSTANCE|" \
		-e "s|^  run_dir:.*|  run_dir: $RUN\n  status_interval_ms: 500|" \
		-e "s|\.\./\.\./tests/data|$SRC/tests/data|g" \
		"$SRC/config/examples/oct-calibration-example.yaml" >"$TMP/volrecd.yaml"
	WHAT="the real calibration volume (tests/data/oct-calibration-example), replayed"
fi

echo "== volrecd on $WHAT (instance $INSTANCE, run_dir $RUN)"
"$BIN/volrecd" -c "$TMP/volrecd.yaml" >"$TMP/volrecd.log" 2>&1 &
DAEMON_PID=$!

# ready when it answers `volrec status` (or fail if it exited)
for _ in $(seq 1 100); do
	if ! kill -0 "$DAEMON_PID" 2>/dev/null; then
		echo "demo: volrecd exited at start" >&2
		exit 1
	fi
	if "$BIN/volrec" status -c "$TMP/volrecd.yaml" --timeout 2 >"$TMP/status.txt" 2>/dev/null; then
		break
	fi
	sleep 0.2
done
cat "$TMP/status.txt"

# the live web viewer, for as long as the demo runs (DEMO_VIEW_LISTEN: default any free
# loopback port)
if [ -x "$BIN/volrec-view" ]; then
	"$BIN/volrec" view -c "$TMP/volrecd.yaml" --listen "${DEMO_VIEW_LISTEN:-127.0.0.1:0}" \
		>"$TMP/view.out" 2>"$TMP/view.log" &
	VIEW_PID=$!
	for _ in $(seq 1 50); do
		grep -q serving "$TMP/view.out" 2>/dev/null && break
		sleep 0.1
	done
	echo
	# the address carries the control token made at start: without it the page only watches
	echo "== volrec view: open $(sed -n 's/.*serving \([^ ]*\) .*/\1/p' "$TMP/view.out") in a browser"
	echo "   (its ?token= lets the page control the daemon; without it the page only watches)"
fi

echo
echo "== volrec watch --seconds $SECONDS_WATCH"
run "$BIN/volrec" watch -c "$TMP/volrecd.yaml" --seconds "$SECONDS_WATCH"

echo
echo "== volrec snapshot"
rm -rf "$OUT/snapshots"
# returns with the first volume whose pictures are whole; the bound is for a slow machine (a
# sanitized build, a loaded one) where the first volumes take seconds
run "$BIN/volrec" snapshot -c "$TMP/volrecd.yaml" -o "$OUT/snapshots" --auto-contrast --timeout "$SNAPSHOT_TIMEOUT"

echo
echo "== volrec record -n 20"
rm -f "$OUT/recording.h5"
rc=0
run "$BIN/volrec" record -c "$TMP/volrecd.yaml" -o "$OUT/recording.h5" -n 20 || rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 4 ]; then
	exit $rc
fi

echo
echo "== volrec status"
"$BIN/volrec" status -c "$TMP/volrecd.yaml" | sed -n '1,/^  drops/p'

echo
echo "== volrec stop"
run "$BIN/volrec" stop -c "$TMP/volrecd.yaml"
wait "$DAEMON_PID" || true
DAEMON_PID=
cp "$TMP/volrecd.yaml" "$OUT/volrecd.yaml"

echo
echo "Pictures:  $OUT/snapshots/ (the centre B-scan is bscan-*.png; snapshot.json names them)"
if [ "$FUNCTIONAL" = 1 ]; then
	echo "Recording: $OUT/recording.h5 (h5py: h5py.File(...)['volumes'], ['angio'] and ['doppler']"
	echo "           are [n][Y][X][Z] uint8; each dataset's value_range attribute says what 0..255 mean)"
else
	echo "Recording: $OUT/recording.h5 (h5py: h5py.File(...)['volumes'] is [n][Y][X][Z] uint8)"
fi
echo "Config:    $OUT/volrecd.yaml"
