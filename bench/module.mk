# Benchmarks (bench_): the one table of cases (bench/cases.c) and the measurements through the
# pipeline engine (bench/bench.c), used by `volrec bench`, gpu_bench and e2e_bench.
ARCHIVES += bench
bench_SRCS := bench/bench.c bench/cases.c
bench_LDLIBS := -ljson-c
UNIT_SRCS += tests/unit/test_bench_cases.c
UNIT_ARCHIVES += bench

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

# The end-to-end benchmark through volrecd in C (no Python needed on a GPU host):
# build/tests/e2e_bench --backend cuda --case paper ... (docs/operations.md, "End-to-end benchmark").
TEST_PROGRAMS += e2e_bench
e2e_bench_SRCS = bench/e2e_bench.c
e2e_bench_ARCHIVES = bench pl $(CORE_ARCHIVES) $(CLIENT_ARCHIVES)
e2e_bench_LDLIBS = -lzmq -ljson-c $(HDF5_LIBS) $(CUDA_LDLIBS)

# The CUDA suite alone, table and JSON, for the device script (tests/gpu/run-on-device.sh).
ifeq ($(HAVE_CUDA),1)
TEST_PROGRAMS += gpu_bench
gpu_bench_SRCS := bench/gpu_bench.c
gpu_bench_ARCHIVES = bench pl $(CORE_ARCHIVES)
gpu_bench_LDLIBS = -ljson-c $(CUDA_LDLIBS)
endif

# Partial median line rate against the median depths per B-scan (Fig. 3 of Watanabe 2012), on
# either backend through the engine: build/tests/pmedian_bench --backend cuda|cpu --json FILE
# (docs/gpu.md).
TEST_PROGRAMS += pmedian_bench
pmedian_bench_SRCS := bench/pmedian_bench.c
pmedian_bench_ARCHIVES = bench pl $(CORE_ARCHIVES)
pmedian_bench_LDLIBS = -ljson-c $(CUDA_LDLIBS)

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
view_latency_ARCHIVES = view base
view_latency_LDLIBS := -lwebsockets -lz -ljson-c -lm
all: $(B)/tests/view_latency
