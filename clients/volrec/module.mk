# The `volrec` command: one cmd_*.c per subcommand, collected by VR_COMMAND(name, "summary").
# The operator's tools link the client library, config, HDF5, PNG and json-c only; the
# processing subcommands (VOLREC_HELPER_CMDS) live in the helper volrec-process, which links the
# processing stack (backends, cuFFT/CUDA, FFTW) and which `volrec` executes for them
# (clients/volrec/helper.c: where it looks; installed in $(LIBEXECDIR)/volrec/).
VOLREC_HELPER_CMDS := process sim bench quality calibrate
VOLREC_HELPER_CMD_SRCS := $(wildcard $(VOLREC_HELPER_CMDS:%=clients/volrec/cmd_%.c))
VOLREC_CMD_SRCS := $(filter-out $(VOLREC_HELPER_CMD_SRCS),$(wildcard clients/volrec/cmd_*.c))
VOLREC_H5_SRCS := clients/volrec/h5attr.c clients/volrec/h5vol.c clients/volrec/h5vol_vfd.c
# Where the installed helper lives; compiled in as the last place to look.
VOLREC_HELPER_DIR = $(or $(LIBEXECDIR),$(PREFIX)/libexec)/volrec

PROGRAMS += volrec volrec-process
volrec_SRCS = clients/volrec/main.c clients/volrec/dispatch.c clients/volrec/helper.c $(wildcard clients/volrec/tool_*.c) \
	$(VOLREC_CMD_SRCS) $(VOLREC_H5_SRCS)
volrec_ARCHIVES = $(CLIENT_ARCHIVES) cfg fmt base
volrec_LDLIBS = $(HDF5_LIBS) -lpng -lzmq -ljson-c
# process_*.c: what the processing subcommands share (the HDF5 sink of `process`, the
# recording loader and image engine of `calibrate`)
volrec-process_SRCS = clients/volrec/helper_main.c clients/volrec/dispatch.c \
	$(VOLREC_HELPER_CMD_SRCS) \
	$(wildcard clients/volrec/process_*.c) $(VOLREC_H5_SRCS) clients/volrec/tool_png.c
volrec-process_ARCHIVES = bench pl fmt $(CORE_ARCHIVES)
volrec-process_LDLIBS = $(HDF5_LIBS) -lpng -lfftw3 -ljson-c $(CUDA_LDLIBS)
# `volrec process` needs the helper: building the one builds the other.
$(B)/bin/volrec: | $(B)/bin/volrec-process

$(B)/gen/volrec_commands.h: $(VOLREC_CMD_SRCS) clients/volrec/module.mk
	@mkdir -p $(@D)
	$(Q)grep -ho '^VR_COMMAND([a-z0-9_]*, *"[^"]*")' /dev/null $(VOLREC_CMD_SRCS) | \
		sed 's/^VR_COMMAND/COMMAND/' > $@.tmp && mv $@.tmp $@
$(B)/gen/volrec_helper_commands.h: $(VOLREC_HELPER_CMD_SRCS) clients/volrec/module.mk
	@mkdir -p $(@D)
	$(Q)grep -ho '^VR_COMMAND([a-z0-9_]*, *"[^"]*")' /dev/null $(VOLREC_HELPER_CMD_SRCS) | \
		sed 's/^VR_COMMAND/COMMAND/' > $@.tmp && mv $@.tmp $@
$(call obj,clients/volrec/main.c): $(B)/gen/volrec_commands.h $(B)/gen/volrec_helper_commands.h
$(call obj,clients/volrec/helper_main.c): $(B)/gen/volrec_helper_commands.h
$(call obj,clients/volrec/main.c clients/volrec/helper_main.c): CPPFLAGS += -I$(B)/gen
$(call obj,clients/volrec/helper.c): CPPFLAGS += -DVOLREC_HELPER_DIR='"$(VOLREC_HELPER_DIR)"'
include clients/volrec/demo.mk
