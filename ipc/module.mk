# Volume publishing (ipc_): shared-memory slot ring with reader leases, ZeroMQ publisher.
# Also builds the client side, clients/libvolrec (volrec_): the archive vrclient (linked by the
# `volrec` tools) and libvolrec.so.0 (exports volrec_* only), plus its volrec.pc.
ARCHIVES += ipc vrclient
ipc_SRCS := $(wildcard ipc/*.c)
ipc_LDLIBS := -lzmq
vrclient_SRCS := $(wildcard clients/libvolrec/*.c)
vrclient_LDLIBS := -lzmq
CLIENT_ARCHIVES += vrclient ipc

# libvolrec.so has its own rule: the generic SHLIBS variables volrec_* belong to the command.
volrec_SOVERSION := 0
LIBVOLREC_SO := $(B)/lib/libvolrec.so.$(volrec_SOVERSION)
LIBVOLREC_OBJS := $(patsubst %.c,$(B)/obj/%.o,$(vrclient_SRCS))
$(LIBVOLREC_SO): $(LIBVOLREC_OBJS) $(B)/lib/libipc.a clients/libvolrec/libvolrec.map
	$(call msg,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -shared -Wl,-soname,libvolrec.so.$(volrec_SOVERSION) \
		-Wl,--version-script=clients/libvolrec/libvolrec.map -o $@ \
		$(LIBVOLREC_OBJS) $(B)/lib/libipc.a -lzmq $(LDLIBS)
$(B)/lib/libvolrec.so: $(LIBVOLREC_SO)
	$(Q)ln -sf libvolrec.so.$(volrec_SOVERSION) $@
$(B)/lib/pkgconfig/volrec.pc: clients/libvolrec/volrec.pc.in
	@mkdir -p $(@D)
	$(Q)sed -e 's|@PREFIX@|$(abspath $(B))|' -e 's|@LIBDIR@|$(abspath $(B))/lib|' \
		-e 's|@INCLUDEDIR@|$(CURDIR)/include|' -e 's|@VERSION@|$(VERSION)|' $< > $@
all: $(B)/lib/libvolrec.so $(B)/lib/pkgconfig/volrec.pc

# Tests: cmocka groups, and the multi-process test programs driven by pytest.
UNIT_SRCS += $(wildcard tests/unit/test_ipc*.c) tests/ipc/ipc_testutil.c
UNIT_ARCHIVES += vrclient ipc
TEST_PROGRAMS += ipc_testwriter ipc_testreader ipc_bench
ipc_testwriter_SRCS := tests/ipc/ipc_testwriter.c tests/ipc/ipc_testutil.c
ipc_testwriter_ARCHIVES := ipc
ipc_testreader_SRCS := tests/ipc/ipc_testreader.c tests/ipc/ipc_testutil.c
ipc_testreader_ARCHIVES := vrclient ipc
ipc_bench_SRCS := tests/ipc/ipc_bench.c tests/ipc/ipc_testutil.c
ipc_bench_ARCHIVES := vrclient ipc

# `make bench-ipc` (part of `make bench`): notification latency and publish cost vs readers,
# a table on stdout and bench/results/ipc-<host>-<date>.json.
.PHONY: bench-ipc
bench: bench-ipc
bench-ipc: $(B)/tests/ipc_bench
	$(call msg,BENCH,ipc)
	$(Q)mkdir -p bench/results && $(B)/tests/ipc_bench \
		--json bench/results/ipc-$$(hostname -s)-$$(date -u +%Y%m%dT%H%M%SZ).json
