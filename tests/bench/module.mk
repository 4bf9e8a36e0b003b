# Benchmark test programs (the benchmarks themselves and their one table of cases: bench/).
# sim_bench: one-core generation speed of the synthetic scanner (docs/shim.md).
TEST_PROGRAMS += sim_bench
sim_bench_SRCS := tests/bench/sim_bench.c
sim_bench_ARCHIVES := sim base
