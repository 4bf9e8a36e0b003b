# Synthetic OCT scanner (sim_): phantom, motion, spectra.
ARCHIVES += sim
sim_SRCS := $(wildcard sim/*.c)
sim_LDLIBS := -lfftw3f_threads -lfftw3f
UNIT_SRCS += $(wildcard tests/unit/test_sim*.c)
UNIT_ARCHIVES += sim base
