# Example shims (docs/shim.md): each a separate .so, loaded by volrecd with dlopen and never
# linked into it. libvolrec_synth_shim.so is the template for a real frame grabber. The test
# shims (the fault shim, the broken ones) are in tests/shims/ and share args.c and common.c.
SHLIBS += volrec_synth_shim
volrec_synth_shim_SRCS := shims/synth_shim.c shims/args.c shims/common.c
volrec_synth_shim_ARCHIVES := sim base
# only what it uses of base (vr_scan_offset, the clock): no libjson-c in the shims
volrec_synth_shim_LDLIBS := -Wl,--as-needed -lyaml
volrec_synth_shim_SOVERSION := 1
volrec_synth_shim_VERSION_SCRIPT := shims/shim.map

# What is installed: the example shim under a plain name in $(SHIMDIR) (packaging/module.mk),
# e.g. /usr/lib/x86_64-linux-gnu/volrec/synth-shim.so.
SHIM_FILES := $(B)/lib/volrec/synth-shim.so
$(B)/lib/volrec/synth-shim.so: $(B)/lib/libvolrec_synth_shim.so.1
	@mkdir -p $(@D)
	$(Q)cp $< $@
all: $(SHIM_FILES)
include shims/genicam/module.mk
