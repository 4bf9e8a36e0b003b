# CPU reference backend (cpu_): FFTW3 single precision, threads.
ARCHIVES += cpu
cpu_SRCS := $(wildcard cpu/*.c)
cpu_LDLIBS := -lfftw3f_threads -lfftw3f
UNIT_SRCS += $(wildcard tests/unit/test_cpu*.c)
UNIT_ARCHIVES += $(CORE_ARCHIVES)
# Hot loops: let the compiler vectorize sqrtf and the conversion loops.
$(B)/obj/cpu/%.o: CFLAGS += -O3 -fno-math-errno
# The functional loops' selects (docs/algorithms.md §5) compute both sides, a division too:
# no FP exception is ever read, so none need be kept where it would have been raised.
$(B)/obj/cpu/functional.o: CFLAGS += -fno-trapping-math
