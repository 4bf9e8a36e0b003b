# Acquisition sources behind the shim ABI (src_): synth, replay files, dlopen'ed shims.
ARCHIVES += src
src_SRCS := $(wildcard src/*.c)
src_LDLIBS := -ldl
UNIT_SRCS += $(wildcard tests/unit/test_src*.c)
UNIT_ARCHIVES += src sim cfg base
