# Acquisition sources (src_): the source kit behind the shim ABI (include/volrec/shim.h), the
# built-in synth and replay sources, the loader of shims (dlopen), the synthetic scanner (sim_)
# and the example shim built from them.
ARCHIVES += src sim
src_SRCS := $(filter-out sources/sim.c sources/sim_scene.c sources/synth_shim.c sources/shim_args.c sources/shim_entry.c,\
                          $(wildcard sources/*.c))
src_LDLIBS := -ldl
# Where `source.shim.library: NAME` finds NAME-shim.so (VOLREC_SHIM_DIR overrides it).
$(call obj,sources/shim.c): CPPFLAGS += -DVOLREC_SHIMDIR='"$(SHIMDIR)"'
UNIT_SRCS += $(wildcard tests/unit/test_src*.c)
UNIT_ARCHIVES += src sim cfg base

# The synthetic OCT scanner (sim_): phantom, motion, spectra. Its own archive: the shims link it
# without the rest of the sources.
sim_SRCS := sources/sim.c sources/sim_scene.c
sim_LDLIBS := -lfftw3f_threads -lfftw3f
UNIT_SRCS += $(wildcard tests/unit/test_sim*.c)
UNIT_ARCHIVES += sim base

# What every shim links besides its own code (docs/shim.md): the arguments (shim_args.c), the
# source kit (shim_common.c: error text, pacing, B-scan positions; the built-in sources use it
# too) and the ABI entry (shim_entry.c); the test shims (tests/shims/) and the GenICam driver
# (drivers/genicam/) share them.
SHIM_KIT_SRCS := sources/shim_args.c sources/shim_common.c sources/shim_entry.c
SHIM_VERSION_SCRIPT := sources/shim.map

# The example shim (docs/shim.md): a separate .so, loaded by volrecd with dlopen and never linked
# into it. It exports the built-in synth (synth.c) as a shim: the template for a real grabber.
SHLIBS += volrec_synth_shim
volrec_synth_shim_SRCS := sources/synth_shim.c sources/synth.c $(SHIM_KIT_SRCS)
volrec_synth_shim_ARCHIVES := sim base
# only what it uses of base (vr_scan_offset, the clock): no libjson-c in the shims
volrec_synth_shim_LDLIBS := -Wl,--as-needed -lyaml
volrec_synth_shim_SOVERSION := 1
volrec_synth_shim_VERSION_SCRIPT := $(SHIM_VERSION_SCRIPT)

# What is installed: the example shim under a plain name in $(SHIMDIR) (packaging/module.mk),
# e.g. /usr/lib/x86_64-linux-gnu/volrec/synth-shim.so.
SHIM_FILES := $(B)/lib/volrec/synth-shim.so
$(B)/lib/volrec/synth-shim.so: $(B)/lib/libvolrec_synth_shim.so.1
	@mkdir -p $(@D)
	$(Q)cp $< $@
all: $(SHIM_FILES)
