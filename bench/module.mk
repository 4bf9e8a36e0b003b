# Benchmark programs, scripts and results (bench/results/): what runs the programs of the
# tree and measures them from outside, through public interfaces only. The benchmark kit and
# the programs that drive the pipeline engine themselves are in tools/bench/.

# `make bench` (never part of `make test`): runs `volrec bench` on the backend BENCH_BACKEND
# (default auto: the CUDA suite when a device is present, the same figures as gpu_bench; else
# the CPU figures) and records bench/results/<host>-<date>.json; bench-ipc (ipc/module.mk)
# runs after it.
BENCH_BACKEND ?= auto
BENCH_ARGS ?=
BENCH_JSON = bench/results/$(shell hostname -s)-$(shell date -u +%Y%m%dT%H%M%SZ).json

bench: $(B)/bin/volrec
	$(call msg,BENCH,$(BENCH_BACKEND))
	@mkdir -p bench/results
	$(Q)VOLREC_GIT_COMMIT=$$(git rev-parse --short HEAD 2>/dev/null || echo unknown) \
		$(B)/bin/volrec bench --backend $(BENCH_BACKEND) -o $(BENCH_JSON) $(BENCH_ARGS)

# The endurance run (never part of `make test` or CI): volrecd at the calibrated highest rate
# of this machine on the CPU backend with four readers and a recorder for SOAK_SECONDS
# (default 30 minutes); writes bench/results/soak-<host>-<date>.json (bench/soak.py).
SOAK_SECONDS ?= 1800
SOAK_ARGS ?=
.PHONY: soak
soak: all $(B)/tests/soak_reader
	$(call msg,SOAK,$(SOAK_SECONDS) s)
	$(Q)SOAK_SECONDS=$(SOAK_SECONDS) $(PYTHON) bench/soak.py --build $(B) $(SOAK_ARGS)

# Acquisition -> picture received at the web viewer's WebSocket, in C (no browser, no Python
# packages needed on a GPU host): bench/view_latency.py runs volrecd, `volrec view` and it
# (docs/viewer.md, "Performance"). Built by `make all`.
TEST_PROGRAMS += view_latency
view_latency_SRCS := bench/view_latency.c
view_latency_ARCHIVES = base
view_latency_LDLIBS := -lwebsockets -lz -ljson-c -lm
all: $(B)/tests/view_latency
