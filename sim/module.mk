# Synthetic OCT scanner (sim_): phantom, motion, spectra.
ARCHIVES += sim
sim_SRCS := $(wildcard sim/*.c)
UNIT_SRCS += $(wildcard tests/unit/test_sim*.c)
UNIT_ARCHIVES += sim
