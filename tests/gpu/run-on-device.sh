#!/bin/bash
# SPDX-License-Identifier: MIT
# Every device check of the CUDA backend in one go on a GPU host (docs/gpu.md): the device
# list, gpu_equal (small and paper geometry), compute-sanitizer memcheck and racecheck on the
# small set, the benchmark (JSON) and its functional OCT case (bench-functional.json; end to end
# through volrecd in e2e-functional.json when BUILD_DIR/tests/e2e_bench is built), an ncu
# summary of the kernel times (OUTDIR/kernels.txt) and
# an nsys summary of the kernels and copies when time allows.
# Usage, from the repository root: tests/gpu/run-on-device.sh OUTDIR [BUILD_DIR=build-gpu] [STEPS]
# STEPS: all (default), or multi: the backend over several devices (gpu.devices, docs/gpu.md
# "Several GPUs") only: gpu_equal with one GPU used as two and as three (an uneven split)
# against one device bit for bit and against the CPU, memcheck of that, and gpu_bench
# --devices; on a host with several GPUs also over the distinct GPUs.
# Needs the prebuilt BUILD_DIR/tests/{gpu_equal,gpu_bench} and .devlibs/lib (docs/gpu.md).
# Writes OUTDIR/*.log, OUTDIR/bench.json, OUTDIR/kernels.txt and OUTDIR/summary.txt; exit 0
# when every required step passed.
set -u

OUT=${1:?usage: tests/gpu/run-on-device.sh OUTDIR [BUILD_DIR]}
B=${2:-build-gpu}
STEPS=${3:-all}
case $STEPS in
all | multi) ;;
*)
	echo "STEPS: all or multi, not $STEPS" >&2
	exit 2
	;;
esac
BUDGET=${VOLREC_DEVICE_BUDGET_S:-480} # optional steps are skipped beyond this many seconds
mkdir -p "$OUT" || exit 1
OUT=$(cd "$OUT" && pwd)
export LD_LIBRARY_PATH=$PWD/.devlibs/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export VOLREC_SRC=$PWD
T0=$(date +%s)
SUMMARY=()
FAILED=0

SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
NSYS=$(command -v nsys)
for n in /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys; do
	[ -z "$NSYS" ] && [ -x "$n" ] && NSYS=$n
done
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
COMMIT=${VOLREC_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || cat "$B/COMMIT" 2>/dev/null || echo unknown)}

# step NAME LIMIT_S REQUIRED(1|0) COMMAND...: run with a time limit, log to OUT/NAME.log.
step() {
	local name=$1 limit=$2 required=$3 rc status start end
	shift 3
	start=$(date +%s)
	if [ "$required" = 0 ] && [ $((start - T0 + limit)) -gt "$BUDGET" ]; then
		SUMMARY+=("$(printf '%-18s %-8s %5s  %s' "$name" SKIPPED - "time budget")")
		return 0
	fi
	echo "== $name: $*" | tee "$OUT/$name.log"
	timeout -k 10 "$limit" "$@" >>"$OUT/$name.log" 2>&1
	rc=$?
	end=$(date +%s)
	case $rc in
	0) status=PASS ;;
	77) status=SKIP ;;
	124 | 137) status=TIMEOUT ;;
	*) status=FAIL ;;
	esac
	if [ "$status" != PASS ] && [ "$required" = 1 ]; then
		FAILED=$((FAILED + 1))
	fi
	tail -n 25 "$OUT/$name.log"
	SUMMARY+=("$(printf '%-18s %-8s %5ss  rc=%d' "$name" "$status" $((end - start)) "$rc")")
}

for p in "$B/tests/gpu_equal" "$B/tests/gpu_bench"; do
	if [ ! -x "$p" ]; then
		echo "missing $p: build it first (docs/gpu.md)" | tee "$OUT/summary.txt"
		exit 1
	fi
done

step devices 20 1 nvidia-smi -L
nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current \
	--format=csv >>"$OUT/devices.log" 2>&1
step libraries 10 1 bash -c "! ldd '$B/tests/gpu_equal' '$B/tests/gpu_bench' | grep 'not found'"
if [ "$STEPS" = multi ]; then
	# one GPU used as two and three: equal to one device bit for bit, and to the CPU
	step equal-small-x2 120 1 "$B/tests/gpu_equal" --small --devices 0,0
	step equal-small-x3 150 1 "$B/tests/gpu_equal" --small --devices 0,0,0
	step equal-paper-x2 240 1 "$B/tests/gpu_equal" --paper --devices 0,0
	NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
	if [ "$NGPU" -ge 2 ]; then
		LIST=$(seq -s, 0 $((NGPU > 4 ? 3 : NGPU - 1)))
		step equal-small-gpus 120 1 "$B/tests/gpu_equal" --small --devices "$LIST"
		step equal-paper-gpus 240 1 "$B/tests/gpu_equal" --paper --devices "$LIST"
		step bench-gpus 150 1 "$B/tests/gpu_bench" --json "$OUT/bench-gpus.json" \
			--commit "$COMMIT" --seconds 3 --devices "$LIST"
	fi
	step bench-x2 150 0 "$B/tests/gpu_bench" --json "$OUT/bench-x2.json" --commit "$COMMIT" \
		--seconds 2 --devices 0,0
	step memcheck-x2 300 0 "$SAN" --tool memcheck --leak-check full --error-exitcode 1 \
		"$B/tests/gpu_equal" --small --devices 0,0
	{
		echo "volrec CUDA backend, several devices: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $COMMIT"
		head -n 3 "$OUT/devices.log" | tail -n +2
		printf '%s\n' "${SUMMARY[@]}"
		echo "-- gpu_equal --devices (last lines):"
		grep -hE 'PASS|FAIL|SKIP' "$OUT"/equal-*.log 2>/dev/null | tail -n 60
		echo "-- benchmark:"
		sed -n '/^figure/,$p' "$OUT"/bench-*.log 2>/dev/null
		grep -h 'ERROR SUMMARY' "$OUT/memcheck-x2.log" 2>/dev/null
		echo "total $(($(date +%s) - T0)) s; $FAILED required step(s) failed"
	} >"$OUT/summary.txt"
	echo
	cat "$OUT/summary.txt"
	[ "$FAILED" = 0 ]
	exit
fi
step equal-small 240 1 "$B/tests/gpu_equal" --small
step equal-paper 240 1 "$B/tests/gpu_equal" --paper
step bench 75 1 "$B/tests/gpu_bench" --json "$OUT/bench.json" --commit "$COMMIT" --seconds 3
step bench-functional 60 1 "$B/tests/gpu_bench" --functional --json "$OUT/bench-functional.json" \
	--commit "$COMMIT" --seconds 3
# the same functional case end to end through volrecd (a replay file of 2 epochs, 2.2 GB, in
# /dev/shm; issue 41's figure: the raw input over the pinned H2D limit of the same run)
if [ -x "$B/tests/e2e_bench" ]; then
	step e2e-functional 300 1 env VOLREC_GIT_COMMIT="$COMMIT" "$B/tests/e2e_bench" \
		--build "$B" --backend cuda --case functional --seconds 8 --warmup 3 --no-paced \
		-o "$OUT/e2e-functional.json"
fi
step memcheck 240 1 "$SAN" --tool memcheck --leak-check full --error-exitcode 1 \
	"$B/tests/gpu_equal" --small
step racecheck 420 1 "$SAN" --tool racecheck --racecheck-report all --error-exitcode 1 \
	"$B/tests/gpu_equal" --small
# Kernel durations at the paper geometry (the first figure of the benchmark): 300 launches
# after the first 100 (past the first epoch's preprocessing, into the reconstruction),
# summarised per kernel: launches, mean and total microseconds, largest total first.
if [ -x "$NCU" ]; then
	step ncu 150 0 "$NCU" --metrics gpu__time_duration.sum --print-units base \
		--launch-skip 100 --launch-count 300 --csv "$B/tests/gpu_bench" --seconds 1
	if [ -s "$OUT/ncu.log" ]; then
		{
			printf '%8s %10s %12s  %s\n' launches mean_us total_us kernel
			awk -F'","' 'NF > 10 && $1 ~ /^"[0-9]+$/ && $(NF-2) ~ /gpu__time_duration/ {
				n = $5; sub(/\(.*/, "", n); sub(/^void /, "", n)
				u = $(NF-1); v = $NF; gsub(/[",]/, "", v)
				m = u ~ /^ms/ ? 1e6 : (u ~ /^us/ ? 1e3 : 1)
				c[n]++; t[n] += v * m
			}
			END { for (k in c) printf "%8d %10.2f %12.1f  %s\n", c[k], t[k] / c[k] / 1e3, t[k] / 1e3, k }' \
				"$OUT/ncu.log" | sort -k3,3 -rn
		} >"$OUT/kernels.txt"
	fi
fi
# the systemd unit sets MemoryDenyWriteExecute=yes: the CUDA backend must work under it
if [ -x "$B/tests/mdwe_exec" ]; then
	step mdwe 60 0 "$B/tests/mdwe_exec" "$B/tests/gpu_equal" --small
fi
if [ -n "$NSYS" ]; then
	step nsys 90 0 "$NSYS" profile --force-overwrite true --stats=true -o "$OUT/bench-nsys" \
		"$B/tests/gpu_bench" --seconds 1
fi

{
	echo "volrec CUDA backend device run: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $COMMIT"
	head -n 3 "$OUT/devices.log" | tail -n +2
	printf '%s\n' "${SUMMARY[@]}"
	echo "-- gpu_equal --small / --paper (last lines):"
	grep -hE 'PASS|FAIL|SKIP' "$OUT/equal-small.log" "$OUT/equal-paper.log" 2>/dev/null | tail -n 40
	echo "-- benchmark:"
	sed -n '/^figure/,$p' "$OUT/bench.log" "$OUT/bench-functional.log" 2>/dev/null
	grep -h '^functional' "$OUT/e2e-functional.log" 2>/dev/null
	echo "-- kernels (ncu, paper geometry; launches, mean us, total us):"
	cat "$OUT/kernels.txt" 2>/dev/null
	echo "-- sanitizers:"
	grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/memcheck.log" "$OUT/racecheck.log" 2>/dev/null
	echo "total $(($(date +%s) - T0)) s; $FAILED required step(s) failed"
} >"$OUT/summary.txt"
echo
cat "$OUT/summary.txt"
[ "$FAILED" = 0 ]
