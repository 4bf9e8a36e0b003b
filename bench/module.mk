# Benchmarks (`make bench`, never part of `make test`): runs `volrec bench` on the backend
# BENCH_BACKEND (default auto: the CUDA suite of backend/bench.c when a device is present,
# the same figures as tests/gpu/gpu_bench; else the CPU figures) and records
# bench/results/<host>-<date>.json; bench-ipc (ipc/module.mk) runs after it.
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
e2e_bench_ARCHIVES = $(CORE_ARCHIVES) $(CLIENT_ARCHIVES)
e2e_bench_LDLIBS = -lzmq $(HDF5_LIBS) $(CUDA_LDLIBS)

# Partial median line rate against the median depths per B-scan (Fig. 3 of Watanabe 2012), on
# either backend: build/tests/pmedian_bench --backend cuda|cpu --json FILE (docs/gpu.md).
TEST_PROGRAMS += pmedian_bench
pmedian_bench_SRCS = bench/pmedian_bench.c
pmedian_bench_ARCHIVES = $(CORE_ARCHIVES)
pmedian_bench_LDLIBS = -ljson-c $(CUDA_LDLIBS)
