# The GenICam camera driver (docs/cameras.md): libvolrec_genicam_shim.so on Aravis 0.8, a shim
# loaded by volrecd like any other and by `volrec cameras`. Built when pkg-config finds aravis-0.8
# (Debian: libaravis-dev, which also needs libusb-1.0-0-dev for its .pc file).
ARAVIS_CFLAGS := $(shell pkg-config --cflags aravis-0.8 2>/dev/null)
ARAVIS_LIBS := $(shell pkg-config --libs aravis-0.8 2>/dev/null)
ifneq ($(ARAVIS_LIBS),)
HAVE_ARAVIS := 1
SHLIBS += volrec_genicam_shim
volrec_genicam_shim_SRCS := drivers/genicam/genicam_shim.c drivers/genicam/camera.c \
	drivers/genicam/fake.c drivers/genicam/reset.c $(SHIM_KIT_SRCS)
volrec_genicam_shim_ARCHIVES := sim base
# only what it uses of base (vr_scan_offset, the clock): no libjson-c in the shim
volrec_genicam_shim_LDLIBS := -Wl,--as-needed $(ARAVIS_LIBS) -lyaml -Wl,-z,nodelete
volrec_genicam_shim_SOVERSION := 1
volrec_genicam_shim_VERSION_SCRIPT := drivers/genicam/genicam.map
$(call obj,$(filter drivers/genicam/%,$(volrec_genicam_shim_SRCS))): CPPFLAGS += $(ARAVIS_CFLAGS)

# Installed beside the example shim as $(SHIMDIR)/genicam-shim.so; `shim.library: genicam`
# names it (sources/shim.c).
SHIM_FILES += $(B)/lib/volrec/genicam-shim.so
$(B)/lib/volrec/genicam-shim.so: $(B)/lib/libvolrec_genicam_shim.so.1
	@mkdir -p $(@D)
	$(Q)cp $< $@
all: $(B)/lib/volrec/genicam-shim.so
else
HAVE_ARAVIS := 0
ifneq ($(filter-out clean format format-check deps,$(or $(MAKECMDGOALS),all)),)
$(info volrec: aravis-0.8 not found by pkg-config: the GenICam shim is skipped (apt install libaravis-dev libusb-1.0-0-dev))
endif
endif
export VOLREC_HAVE_ARAVIS := $(HAVE_ARAVIS)
