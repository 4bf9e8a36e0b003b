# Volume publishing (ipc_): both sides of the protocol. writer.c is the publisher (shared-memory
# slot ring with reader leases, ZeroMQ PUB), reader.c the client side (the volrec_client_* API),
# proto.c what they share. The archive ipc is linked by volrecd and by the `volrec` tools (the
# linker takes only the members a program uses); libvolrec.so.0 is reader + proto, with base/'s
# error text and clock, and exports volrec_* only (libvolrec.map), described by volrec.pc.
ARCHIVES += ipc
ipc_SRCS := $(wildcard ipc/*.c)
ipc_LDLIBS := -lzmq
CLIENT_ARCHIVES += ipc base

# libvolrec.so has its own rule: the generic SHLIBS variables volrec_* belong to the command.
volrec_SOVERSION := 0
LIBVOLREC_SO := $(B)/lib/libvolrec.so.$(volrec_SOVERSION)
LIBVOLREC_OBJS := $(call obj,ipc/reader.c ipc/proto.c base/err.c base/clock.c)
LIBVOLREC_MAP := ipc/libvolrec.map
LIBVOLREC_PC_IN := ipc/volrec.pc.in
$(LIBVOLREC_SO): $(LIBVOLREC_OBJS) $(LIBVOLREC_MAP)
	$(call msg,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -shared -Wl,-soname,libvolrec.so.$(volrec_SOVERSION) \
		-Wl,--version-script=$(LIBVOLREC_MAP) -o $@ $(LIBVOLREC_OBJS) -lzmq $(LDLIBS)
$(B)/lib/libvolrec.so: $(LIBVOLREC_SO)
	$(Q)ln -sf libvolrec.so.$(volrec_SOVERSION) $@
$(B)/lib/pkgconfig/volrec.pc: $(LIBVOLREC_PC_IN)
	@mkdir -p $(@D)
	$(Q)sed -e 's|@PREFIX@|$(abspath $(B))|' -e 's|@LIBDIR@|$(abspath $(B))/lib|' \
		-e 's|@INCLUDEDIR@|$(CURDIR)/include|' -e 's|@VERSION@|$(VERSION)|' $< > $@
all: $(B)/lib/libvolrec.so $(B)/lib/pkgconfig/volrec.pc

# Tests: cmocka groups, and the multi-process test programs driven by pytest.
UNIT_SRCS += $(wildcard tests/unit/test_ipc*.c) tests/ipc/ipc_testutil.c
UNIT_ARCHIVES += ipc base
TEST_PROGRAMS += ipc_testwriter ipc_testreader ipc_bench
ipc_testwriter_SRCS := tests/ipc/ipc_testwriter.c tests/ipc/ipc_testutil.c
ipc_testwriter_ARCHIVES := ipc base
ipc_testreader_SRCS := tests/ipc/ipc_testreader.c tests/ipc/ipc_testutil.c
ipc_testreader_ARCHIVES := ipc base
ipc_bench_SRCS := tests/ipc/ipc_bench.c tests/ipc/ipc_testutil.c
ipc_bench_ARCHIVES := ipc base

# `make bench-ipc` (part of `make bench`): notification latency and publish cost vs readers,
# a table on stdout and bench/results/ipc-<host>-<date>.json.
.PHONY: bench-ipc
bench: bench-ipc
bench-ipc: $(B)/tests/ipc_bench
	$(call msg,BENCH,ipc)
	$(Q)mkdir -p bench/results && $(B)/tests/ipc_bench \
		--json bench/results/ipc-$$(hostname -s)-$$(date -u +%Y%m%dT%H%M%SZ).json
