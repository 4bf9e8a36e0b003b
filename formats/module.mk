# File formats (fmt_; docs/formats.md), written once and linked by the programs that write or
# read files: the HDF5 volume writer (h5vol.c, with its file driver h5vol_vfd.c and the
# attribute helpers h5attr.c) of `volrec record` and volrec-process, the 8-bit PNG writer
# (png.c) of `volrec snapshot` and `calibrate`; OME-Zarr, NIfTI-2 and OME-TIFF writers, the
# reader of processed HDF5 recordings and the export engine (`volrec export`,
# tools/bench/export_bench.c). libblosc, libtiff and HDF5 by pkg-config; Debian's libnifti2 has
# no .pc: its headers are in /usr/include/nifti (libniftiio-dev, pulled in by libnifti2-dev),
# the library is -lnifti2 over -lznz.
ARCHIVES += fmt
fmt_SRCS := $(wildcard formats/fmt_*.c) formats/h5attr.c formats/h5vol.c formats/h5vol_vfd.c \
	formats/h5rec.c formats/png.c
fmt_LDLIBS := $(shell pkg-config --libs blosc libtiff-4 2>/dev/null) -lnifti2 -lznz -lz \
	$(HDF5_LIBS) -lpng -ljson-c -lm
$(call obj,$(wildcard formats/fmt_*.c)): CPPFLAGS += \
	$(shell pkg-config --cflags blosc libtiff-4 2>/dev/null) -I/usr/include/nifti

# The processed recording's file (h5rec.c) in the cmocka runner.
UNIT_SRCS += tests/unit/test_fmt_h5rec.c
UNIT_ARCHIVES += fmt base
