# The backend interface and selection (be_): the daemon and tools link CORE_ARCHIVES.
ARCHIVES += be
be_SRCS := $(wildcard backend/*.c)
UNIT_SRCS += tests/unit/test_tables.c
