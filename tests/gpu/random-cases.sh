#!/bin/bash
# SPDX-License-Identifier: MIT
# volrec process on the CUDA backend over the configurations tests/integration/random_cases.py
# prepared in DIR (docs/gpu.md "Random configurations"): DIR/c<seed>/BACKEND.h5 and BACKEND.log
# for each, compute-sanitizer memcheck over the first MEMCHECK of them (default 12).
# Usage, from the repository root:
#   tests/gpu/random-cases.sh DIR [BUILD_DIR=build-gpu] [MEMCHECK=12] [BACKEND=cuda]
# Exit 0 when every run succeeded on BACKEND (no fallback) and memcheck found no error.
set -u
DIR=$(cd "${1:?usage: tests/gpu/random-cases.sh DIR [BUILD_DIR] [MEMCHECK] [BACKEND]}" && pwd) || exit 2
B=$(cd "${2:-build-gpu}" && pwd) || exit 2
MEMCHECK=${3:-12}
BACKEND=${4:-cuda}
export LD_LIBRARY_PATH=$PWD/.devlibs/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export VOLREC_EXEC_PATH=$B/bin
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
n=0 failed=0 checked=0
for d in "$DIR"/c*/; do
	d=${d%/}
	epochs=$(cat "$d/epochs") || exit 2
	(cd "$d" && timeout 120 "$B/bin/volrec" process -c config.yaml -o "$BACKEND.h5" -n "$epochs" \
		--lowres --full --backend "$BACKEND" >"$BACKEND.log" 2>&1)
	rc=$?
	if [ $rc -ne 0 ] || grep -q "using the CPU backend" "$d/$BACKEND.log"; then
		failed=$((failed + 1))
		echo "${d##*/}: rc=$rc $(tail -n 2 "$d/$BACKEND.log")"
	fi
	if [ $checked -lt "$MEMCHECK" ]; then
		checked=$((checked + 1))
		if ! (cd "$d" && timeout 300 "$SAN" --tool memcheck --error-exitcode 1 \
			"$B/bin/volrec-process" process -c config.yaml -o memcheck.h5 -n "$epochs" \
			--lowres --full --backend "$BACKEND" >memcheck.log 2>&1); then
			failed=$((failed + 1))
			echo "${d##*/}: memcheck: $(grep -h 'ERROR SUMMARY' "$d/memcheck.log")"
		fi
		rm -f "$d/memcheck.h5"
	fi
	n=$((n + 1))
done
echo "$n configurations on the $BACKEND backend, memcheck over $checked, $failed failed"
[ $failed -eq 0 ]
