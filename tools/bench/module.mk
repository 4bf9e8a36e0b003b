# The benchmark kit (bench_): the one table of cases (cases.c) and the measurements through the
# pipeline engine (bench.c), used by `volrec bench` (tools/cmd_bench.c) and by the benchmark
# programs below, which drive the engine and so live with the tools, not in bench/.
ARCHIVES += bench
bench_SRCS := tools/bench/bench.c tools/bench/cases.c
bench_LDLIBS := -ljson-c
UNIT_SRCS += tests/unit/test_bench_cases.c
UNIT_ARCHIVES += bench

# The end-to-end benchmark through volrecd in C (no Python needed on a GPU host):
# build/tests/e2e_bench --backend cuda --case paper ... (docs/operations.md, "End-to-end benchmark").
TEST_PROGRAMS += e2e_bench
e2e_bench_SRCS = tools/bench/e2e_bench.c
e2e_bench_ARCHIVES = bench pl $(CORE_ARCHIVES) $(CLIENT_ARCHIVES)
e2e_bench_LDLIBS = -lzmq -ljson-c $(HDF5_LIBS) $(CUDA_LDLIBS)

# The CUDA suite alone, table and JSON, for the device script (tests/gpu/run-on-device.sh).
ifeq ($(HAVE_CUDA),1)
TEST_PROGRAMS += gpu_bench
gpu_bench_SRCS := tools/bench/gpu_bench.c
gpu_bench_ARCHIVES = bench pl $(CORE_ARCHIVES)
gpu_bench_LDLIBS = -ljson-c $(CUDA_LDLIBS)
endif

# Partial median line rate against the median depths per B-scan (Fig. 3 of Watanabe 2012), on
# either backend through the engine: build/tests/pmedian_bench --backend cuda|cpu --json FILE
# (docs/gpu.md).
TEST_PROGRAMS += pmedian_bench
pmedian_bench_SRCS := tools/bench/pmedian_bench.c
pmedian_bench_ARCHIVES = bench pl $(CORE_ARCHIVES)
pmedian_bench_LDLIBS = -ljson-c $(CUDA_LDLIBS)


# The export benchmark (never part of `make test`): bench/export_bench.py runs it (docs/formats.md).
TEST_PROGRAMS += export_bench
export_bench_SRCS := tools/bench/export_bench.c
export_bench_ARCHIVES = fmt base
export_bench_LDLIBS = -ljson-c

# The raw recorder's write path against dd (never part of `make test`): bench/raw_record_bench.py
# runs it (docs/recording.md, "Speed").
TEST_PROGRAMS += raw_write_bench
raw_write_bench_SRCS := tools/bench/raw_write_bench.c
raw_write_bench_ARCHIVES = src sim cfg base
raw_write_bench_LDLIBS = -ldl -lm $(shell pkg-config --libs yaml-0.1 2>/dev/null || echo -lyaml) -ljson-c
