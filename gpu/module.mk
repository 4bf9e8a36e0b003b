# CUDA backend (gpu_): built only when nvcc is found. Its device tests (tests/gpu/) and
# benchmark (bench/gpu_bench) run on a GPU host: tests/gpu/run-on-device.sh, docs/gpu.md.
ifeq ($(HAVE_CUDA),1)
ARCHIVES += gpu
gpu_SRCS := $(wildcard gpu/*.cu gpu/*.c)
gpu_LDLIBS = $(CUDA_LDLIBS) -lrt -lstdc++

TEST_PROGRAMS += gpu_equal mdwe_exec
mdwe_exec_SRCS := tests/gpu/mdwe_exec.c
gpu_equal_SRCS := tests/gpu/gpu_equal.c
gpu_equal_ARCHIVES = $(CORE_ARCHIVES)
gpu_equal_LDLIBS = $(CUDA_LDLIBS)
endif
