# The base layer (vr_): clocks, error text, percentiles, UTF-8; JSON through json-c.
ARCHIVES += base
base_SRCS := $(wildcard base/*.c)
base_LDLIBS := -ljson-c -lm
UNIT_SRCS += $(wildcard tests/unit/test_base*.c)
UNIT_ARCHIVES += base
