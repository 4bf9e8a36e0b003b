# src_dump: the first N B-scans of any configured source, for the replay integration tests.
TEST_PROGRAMS += src_dump
src_dump_SRCS := tests/replay/src_dump.c
src_dump_ARCHIVES := src sim cfg base
