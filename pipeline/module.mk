# The pipeline engine (pl_): source -> ring -> backend -> sinks, driven by volrecd, `volrec
# process` and the benchmarks. Programs link it before $(CORE_ARCHIVES).
ARCHIVES += pl
pl_SRCS := $(wildcard pipeline/*.c)
UNIT_SRCS += $(wildcard tests/unit/test_pipeline*.c)
UNIT_ARCHIVES += pl
