# Synthetic OCT scanner (sim_): phantom, motion, spectra.
ARCHIVES += sim
sim_SRCS := $(wildcard sim/*.c)
sim_LDLIBS := -lfftw3f_threads -lfftw3f
UNIT_SRCS += $(wildcard tests/unit/test_sim*.c)
UNIT_ARCHIVES += sim base
# One-core generation speed of the scanner (a benchmark, not a test).
TEST_PROGRAMS += sim_bench
sim_bench_SRCS := sim/bench/sim_bench.c
sim_bench_ARCHIVES := sim base
