# volrecd, the service (vrd_). For now it is built from the option parser and the --check
# path only, linked with the configuration; the service files (vrd_*.c) and
# $(CORE_ARCHIVES) $(CLIENT_ARCHIVES) join when the service lands.
PROGRAMS += volrecd
volrecd_SRCS = daemon/main.c daemon/options.c
volrecd_ARCHIVES = cfg
volrecd_LDLIBS = -lsystemd -lzmq $(HDF5_LIBS) $(CUDA_LDLIBS)
