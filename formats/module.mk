# Files for other tools (fmt_): OME-Zarr, NIfTI-2 and OME-TIFF writers, the reader of processed
# HDF5 recordings and the export engine (`volrec export`, bench/export_bench; docs/formats.md).
# libblosc, libtiff and HDF5 by pkg-config; Debian's libnifti2 has no .pc: its headers are in
# /usr/include/nifti (libniftiio-dev, pulled in by libnifti2-dev), the library is -lnifti2 over
# -lznz.
ARCHIVES += fmt
fmt_SRCS := $(wildcard formats/fmt_*.c)
fmt_LDLIBS := $(shell pkg-config --libs blosc libtiff-4 2>/dev/null) -lnifti2 -lznz -lz \
	$(HDF5_LIBS) -ljson-c -lm
$(call obj,$(fmt_SRCS)): CPPFLAGS += $(shell pkg-config --cflags blosc libtiff-4 2>/dev/null) \
	-I/usr/include/nifti

# The export benchmark (never part of `make test`): bench/export_bench.sh runs it.
TEST_PROGRAMS += export_bench
export_bench_SRCS := bench/export_bench.c
export_bench_ARCHIVES = fmt base
export_bench_LDLIBS = -ljson-c
