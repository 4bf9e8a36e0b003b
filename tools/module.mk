# volrec-process, the processing subcommands of `volrec` (process, sim, bench, quality,
# calibrate: one cmd_*.c each, collected by VR_COMMAND(name, "summary")): a program of its own
# that links the processing stack (pipeline, backends, cuFFT/CUDA, FFTW), which `volrec`
# executes for them (clients/volrec/helper.c: where it looks; installed in
# $(LIBEXECDIR)/volrec/), so that the operator's tools never link it. process_*.c is what the
# subcommands share (the HDF5 sink of `process`, the recording loader and image engine of
# `calibrate`).
VOLREC_HELPER_CMD_SRCS := $(wildcard tools/cmd_*.c)

PROGRAMS += volrec-process
volrec-process_SRCS = tools/helper_main.c $(VOLREC_HELPER_CMD_SRCS) $(wildcard tools/process_*.c) \
	$(wildcard tools/reprocess_*.c)
volrec-process_ARCHIVES = bench pl fmt $(CORE_ARCHIVES)
volrec-process_LDLIBS = -lfftw3 -ljson-c $(CUDA_LDLIBS)

$(B)/gen/volrec_helper_commands.h: $(VOLREC_HELPER_CMD_SRCS) tools/module.mk
	@mkdir -p $(@D)
	$(Q)grep -ho '^VR_COMMAND([a-z0-9_]*, *"[^"]*")' /dev/null $(VOLREC_HELPER_CMD_SRCS) | \
		sed 's/^VR_COMMAND/COMMAND/' > $@.tmp && mv $@.tmp $@
$(call obj,tools/helper_main.c): $(B)/gen/volrec_helper_commands.h
$(call obj,tools/helper_main.c): CPPFLAGS += -I$(B)/gen
