# Example and test shims (docs/shim.md): each a separate .so, loaded by volrecd with dlopen and
# never linked into it. libvolrec_synth_shim.so is the template for a real frame grabber;
# libvolrec_fault_shim.so injects errors, timeouts and stalls for the daemon's tests.
SHLIBS += volrec_synth_shim volrec_fault_shim
volrec_synth_shim_SRCS := shims/synth_shim.c shims/args.c shims/common.c
volrec_synth_shim_ARCHIVES := sim base
# only what it uses of base (vr_scan_offset, the clock): no libjson-c in the shims
volrec_synth_shim_LDLIBS := -Wl,--as-needed -lyaml
volrec_synth_shim_SOVERSION := 1
volrec_synth_shim_VERSION_SCRIPT := shims/shim.map
volrec_fault_shim_SRCS := shims/fault_shim.c shims/args.c shims/common.c
volrec_fault_shim_ARCHIVES := base
# nodelete: the control file's state (process-wide) survives the daemon's reopen of the shim
volrec_fault_shim_LDLIBS := -Wl,--as-needed -lyaml -Wl,-z,nodelete
volrec_fault_shim_SOVERSION := 1
volrec_fault_shim_VERSION_SCRIPT := shims/shim.map

# What is installed: the example shim under a plain name in $(SHIMDIR) (packaging/module.mk),
# e.g. /usr/lib/x86_64-linux-gnu/volrec/synth-shim.so. The fault shim is for tests only.
SHIM_FILES := $(B)/lib/volrec/synth-shim.so
$(B)/lib/volrec/synth-shim.so: $(B)/lib/libvolrec_synth_shim.so.1
	@mkdir -p $(@D)
	$(Q)cp $< $@
all: $(SHIM_FILES)
include shims/genicam/module.mk
