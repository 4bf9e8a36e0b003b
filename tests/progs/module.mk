# Test programs the integration tests run.
# vrd_reader: volumes through libvolrec into a file (tests/integration/test_daemon.py).
TEST_PROGRAMS += vrd_reader
vrd_reader_SRCS = tests/progs/vrd_reader.c
vrd_reader_ARCHIVES = $(CLIENT_ARCHIVES)
vrd_reader_LDLIBS = -lzmq
# soak_reader: volumes compared with the first of the same replayed epoch (bench/soak.py).
TEST_PROGRAMS += soak_reader
soak_reader_SRCS = tests/progs/soak_reader.c
soak_reader_ARCHIVES = $(CLIENT_ARCHIVES)
soak_reader_LDLIBS = -lzmq
# vrd_channels: the channels of volumes through libvolrec (tests/integration/test_daemon_channels.py).
TEST_PROGRAMS += vrd_channels
vrd_channels_SRCS = tests/progs/vrd_channels.c
vrd_channels_ARCHIVES = $(CLIENT_ARCHIVES)
vrd_channels_LDLIBS = -lzmq -lm
