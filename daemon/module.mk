# volrecd, the service (vrd_): options and --check, the pipeline threads, the publishing
# adapter, logging, statistics and the service loop.
PROGRAMS += volrecd
volrecd_SRCS = $(wildcard daemon/*.c)
volrecd_ARCHIVES = $(CORE_ARCHIVES) ipc
volrecd_LDLIBS = -lsystemd -lzmq $(HDF5_LIBS) $(CUDA_LDLIBS)

# The integration tests' reader: volumes through libvolrec into a file (tests/integration).
TEST_PROGRAMS += vrd_reader
vrd_reader_SRCS = daemon/testprog/vrd_reader.c
vrd_reader_ARCHIVES = $(CLIENT_ARCHIVES)
vrd_reader_LDLIBS = -lzmq

# The control socket's request handling is unit-tested on its own (tests/unit/test_ctl.c).
UNIT_SRCS += daemon/vrd_ctl.c tests/unit/test_ctl.c
UNIT_ARCHIVES += cfg base ipc
