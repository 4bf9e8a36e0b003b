# The `volrec` command: one cmd_*.c per subcommand, collected by VR_COMMAND(name, "summary").
# The operator's tools link the client library, config, the file formats (HDF5, PNG) and json-c
# only; the processing subcommands live in the helper volrec-process (tools/), which links the
# processing stack and which `volrec` executes for them (helper.c: where it looks).
VOLREC_CMD_SRCS := $(wildcard clients/volrec/cmd_*.c)
# Where the installed helper lives; compiled in as the last place to look.
VOLREC_HELPER_DIR = $(or $(LIBEXECDIR),$(PREFIX)/libexec)/volrec

PROGRAMS += volrec
volrec_SRCS = clients/volrec/main.c clients/volrec/helper.c $(wildcard clients/volrec/tool_*.c) \
	$(VOLREC_CMD_SRCS)
volrec_ARCHIVES = fmt $(CLIENT_ARCHIVES) cfg base
volrec_LDLIBS = -lzmq -ljson-c
# `volrec process` needs the helper: building the one builds the other.
$(B)/bin/volrec: | $(B)/bin/volrec-process

$(B)/gen/volrec_commands.h: $(VOLREC_CMD_SRCS) clients/volrec/module.mk
	@mkdir -p $(@D)
	$(Q)grep -ho '^VR_COMMAND([a-z0-9_]*, *"[^"]*")' /dev/null $(VOLREC_CMD_SRCS) | \
		sed 's/^VR_COMMAND/COMMAND/' > $@.tmp && mv $@.tmp $@
$(call obj,clients/volrec/main.c): $(B)/gen/volrec_commands.h $(B)/gen/volrec_helper_commands.h
$(call obj,clients/volrec/main.c): CPPFLAGS += -I$(B)/gen
$(call obj,clients/volrec/helper.c): CPPFLAGS += -DVOLREC_HELPER_DIR='"$(VOLREC_HELPER_DIR)"'
# `volrec cameras` loads the GenICam driver from the same directory as source.shim.library's
# short names.
$(call obj,clients/volrec/cmd_cameras.c): CPPFLAGS += -DVOLREC_SHIMDIR='"$(SHIMDIR)"'
include clients/volrec/demo.mk
