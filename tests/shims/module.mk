# Test shims, built with the tests (tests-build), never by `make all` nor installed.
# libvolrec_fault_shim.so injects errors, timeouts and stalls for the daemon's and the source's
# tests (docs/shim.md); it shares the example shims' kit (sources/shim_args.c, sources/shim_common.c).
TEST_SHLIBS += volrec_fault_shim
volrec_fault_shim_SRCS := tests/shims/fault_shim.c $(SHIM_KIT_SRCS)
volrec_fault_shim_ARCHIVES := base
# nodelete: the control file's state (process-wide) survives the daemon's reopen of the shim
volrec_fault_shim_LDLIBS := -Wl,--as-needed -lyaml -Wl,-z,nodelete
volrec_fault_shim_SOVERSION := 1
volrec_fault_shim_VERSION_SCRIPT := $(SHIM_VERSION_SCRIPT)

# Deliberately broken shims for the source tests (tests/unit/test_src.c): each must be rejected
# by src_open with a message naming the library and the fault (crash: by src_shim_check only).
TEST_BAD_SHIMS := abi size null_acquire no_entry null_table crash
TEST_SHLIBS += $(TEST_BAD_SHIMS:%=volrec_test_bad_%)
$(foreach n,$(TEST_BAD_SHIMS),$(eval volrec_test_bad_$(n)_SRCS := tests/shims/bad_$(n).c)\
	$(eval volrec_test_bad_$(n)_SOVERSION := 1))
# the unit tests dlopen these and the example shims from $(B)/lib
$(B)/tests/unit_runner: | $(foreach s,$(TEST_BAD_SHIMS:%=volrec_test_bad_%) volrec_synth_shim \
	volrec_fault_shim,$(B)/lib/lib$(s).so)

# A stand-in for the GenICam shim's camera list, strings not UTF-8 (test_genicam.py).
TEST_SHLIBS += volrec_test_cameras
volrec_test_cameras_SRCS := tests/shims/cameras.c
volrec_test_cameras_SOVERSION := 1
