# volrecd, the service (vrd_): options and --check, the adapter over the pipeline engine with
# its shared-memory sink, logging, the service loop and the recorders (processed recordings
# through the formats' HDF5 writer).
PROGRAMS += volrecd
volrecd_SRCS = $(wildcard daemon/*.c)
volrecd_ARCHIVES = pl fmt $(CORE_ARCHIVES) ipc
volrecd_LDLIBS = -lsystemd -lzmq -ljson-c $(HDF5_LIBS) $(CUDA_LDLIBS)

# The control socket's request handling is unit-tested on its own (tests/unit/test_ctl.c).
UNIT_SRCS += daemon/vrd_ctl.c daemon/vrd_gen.c tests/unit/test_ctl.c
UNIT_ARCHIVES += cfg base ipc
