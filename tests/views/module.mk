# views_dump: the views of docs/algorithms.md §4 of a u8 volume file, computed by the CPU backend's
# code, for the numpy reference test (tests/integration/test_views.py).
TEST_PROGRAMS += views_dump
views_dump_SRCS := tests/views/views_dump.c
views_dump_ARCHIVES := cpu be base cfg
