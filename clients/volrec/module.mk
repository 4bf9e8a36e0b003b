# The `volrec` command: one cmd_*.c per subcommand, collected by VR_COMMAND(name, "summary").
PROGRAMS += volrec
volrec_SRCS = $(wildcard clients/volrec/*.c)
volrec_ARCHIVES = $(CORE_ARCHIVES) $(CLIENT_ARCHIVES)
volrec_LDLIBS = $(HDF5_LIBS) -lpng -lzmq -lfftw3 $(CUDA_LDLIBS)
VOLREC_CMD_SRCS := $(wildcard clients/volrec/cmd_*.c)
$(B)/gen/volrec_commands.h: $(VOLREC_CMD_SRCS) clients/volrec/module.mk
	@mkdir -p $(@D)
	$(Q)grep -ho '^VR_COMMAND([a-z0-9_]*, *"[^"]*")' /dev/null $(VOLREC_CMD_SRCS) | \
		sed 's/^VR_COMMAND/COMMAND/' > $@.tmp && mv $@.tmp $@
$(call obj,clients/volrec/main.c): $(B)/gen/volrec_commands.h
$(call obj,clients/volrec/main.c): CPPFLAGS += -I$(B)/gen
include clients/volrec/demo.mk
