# File formats (docs/tools.md): the HDF5 volume writer (h5vol.c, with its file driver
# h5vol_vfd.c and the attribute helpers h5attr.c) and the 8-bit PNG writer (png.c), written once
# and linked by the programs that write files: `volrec record` and `snapshot`, volrec-process.
ARCHIVES += fmt
fmt_SRCS := formats/h5attr.c formats/h5vol.c formats/h5vol_vfd.c formats/png.c
fmt_LDLIBS := $(HDF5_LIBS) -lpng
