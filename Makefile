# SPDX-License-Identifier: MIT
# volrec build: `make`, `make test` (= check), `make test-long`, `make demo`, `make bench`,
# `make quality`, `make install`.
# Options: O=dir (out-of-tree), V=1 (verbose), SANITIZER=address|undefined|thread,
# CUDA=0 (force a CPU-only build), NVCC=path, CUDA_ARCHS="90 100" (device code, plus PTX of the
# first), PREFIX=/usr/local, DESTDIR=.
#
# Each module folder has a module.mk that declares what it builds with the variables below;
# this file only holds the generic rules.

.DEFAULT_GOAL := all
SHELL := /bin/bash

O ?= build
B := $(patsubst %/,%,$(O))
V ?= 0
PREFIX ?= /usr/local
DESTDIR ?=
PYTHON ?= /usr/bin/python3
SANITIZER ?=
VERSION := 0.1.0

ifeq ($(V),1)
Q :=
msg = @true
else
Q := @
msg = @printf '  %-7s %s\n' '$(1)' '$(2)'
endif

# ---- build dependencies, checked before anything compiles -------------------------------------
# A goal that compiles or tests first asks scripts/check-deps.sh which Debian packages it lacks
# (pkg-config probes for each library, PATH for commands, imports for the test modules). Then,
# as root, `make deps` installs them; otherwise, or with VOLREC_DEPS_INSTALL=0, make stops at
# once with the one apt-get line to run, never with a compiler error on a missing header.
DEPS_FREE_GOALS := clean deps format format-check uninstall install-man install-python \
	install-system install-config
DEPS_TEST_GOALS := test check unit pytest test-long tests-build deps-check
DEPS_GOALS := $(filter-out $(DEPS_FREE_GOALS),$(or $(MAKECMDGOALS),all))
DEPS_MODE := $(if $(filter $(DEPS_TEST_GOALS),$(DEPS_GOALS)),test,build)
VOLREC_DEPS_INSTALL ?= $(if $(filter 0,$(shell id -u)),1,0)
ifneq ($(DEPS_GOALS),)
DEPS_MISSING := $(shell scripts/check-deps.sh $(DEPS_MODE) $(PYTHON))
ifneq ($(DEPS_MISSING),)
ifeq ($(VOLREC_DEPS_INSTALL),1)
$(info volrec: missing build dependencies ($(DEPS_MISSING)): installing them with make deps)
DEPS_INSTALLED := $(shell MAKEFLAGS= $(MAKE) --no-print-directory deps >&2 && echo ok)
DEPS_MISSING := $(shell scripts/check-deps.sh $(DEPS_MODE) $(PYTHON))
endif
endif
ifneq ($(DEPS_MISSING),)
$(error volrec: missing build dependencies; run: sudo apt-get install -y --no-install-recommends $(DEPS_MISSING)   (or sudo make deps, for all of them))
endif
endif

PKGS := libzmq yaml-0.1 fftw3f libsystemd libpng json-c
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
# HDF5 from its pkg-config module (Debian's libhdf5-dev: hdf5.pc, the serial build), so the
# include and library folders are the distribution's, wherever it puts them.
HDF5_CFLAGS := $(shell pkg-config --cflags hdf5 2>/dev/null)
HDF5_LIBS := $(shell pkg-config --libs hdf5 2>/dev/null)

CC ?= cc
CPPFLAGS += -Iinclude -I. -D_GNU_SOURCE -DVOLREC_VERSION='"$(VERSION)"' $(PKG_CFLAGS) $(HDF5_CFLAGS)
CFLAGS ?= -O2 -g
CFLAGS += -std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wno-unused-parameter \
	  -fPIC -pthread -MMD -MP
LDFLAGS += -pthread
LDLIBS += -lm

ifneq ($(SANITIZER),)
ifeq ($(filter $(SANITIZER),address undefined thread),)
$(error SANITIZER must be address, undefined or thread, not '$(SANITIZER)')
endif
CFLAGS += -fsanitize=$(SANITIZER) -fno-omit-frame-pointer
LDFLAGS += -fsanitize=$(SANITIZER)
ifeq ($(SANITIZER),undefined)
CFLAGS += -fno-sanitize-recover=all
LDFLAGS += -fno-sanitize-recover=all
endif
endif

# ---- CUDA (optional) -------------------------------------------------------------------------
CUDA ?= auto
ifeq ($(CUDA),0)
NVCC :=
else
NVCC ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
endif
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCHS ?= 90
ifneq ($(NVCC),)
HAVE_CUDA := 1
CPPFLAGS += -DVOLREC_HAVE_CUDA=1 -I$(CUDA_HOME)/include
CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcufft -lcudart
NVCCFLAGS ?= -O3 -lineinfo
NVCCFLAGS += -std=c++17 $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
	     -gencode arch=compute_$(firstword $(CUDA_ARCHS)),code=compute_$(firstword $(CUDA_ARCHS)) \
	     -Xcompiler -fPIC,-Wall,-Wextra,-Werror,-Wno-unused-parameter -Werror all-warnings \
	     -MMD -MP -Iinclude -I. -DVOLREC_HAVE_CUDA=1
else
HAVE_CUDA := 0
CUDA_LDLIBS :=
ifneq ($(filter-out clean format format-check deps,$(or $(MAKECMDGOALS),all)),)
$(info volrec: nvcc not found: building the CPU backend only (CUDA backend skipped))
endif
endif

# ---- what the modules declare ------------------------------------------------------------------
# ARCHIVES += name; name_SRCS := ...; name_LDLIBS := ...    (static archive $(B)/lib/libname.a)
# PROGRAMS += name; name_SRCS := ...; name_ARCHIVES := ...; name_LDLIBS := ...  ($(B)/bin/name)
# SHLIBS += name; name_SRCS, name_ARCHIVES, name_LDLIBS, name_SOVERSION  ($(B)/lib/libname.so)
# TEST_SHLIBS += name (like SHLIBS, for tests only: built by tests-build, not by all)
# UNIT_SRCS += tests/unit/test_x.c; UNIT_ARCHIVES += ...  (linked into one cmocka runner)
# TEST_PROGRAMS += name (like PROGRAMS, built into $(B)/tests/)
ARCHIVES :=
PROGRAMS :=
SHLIBS :=
TEST_SHLIBS :=
UNIT_SRCS :=
UNIT_ARCHIVES :=
TEST_PROGRAMS :=
INSTALL_RULES :=
# What every program that processes data links (recursive: modules fill it in).
CORE_ARCHIVES = beopen cpu $(if $(filter 1,$(HAVE_CUDA)),gpu) be src sim cfg base
# Every archive, each before the archives it uses (no cycles: the backend selection beopen sits
# above cpu and gpu, which use be). Programs link their archives in this order, whatever the
# order of their name_ARCHIVES, so a plain single pass of the linker resolves everything; a
# module that adds an archive adds it here.
LINK_ORDER := view bench pl ipc beopen cpu gpu be src sim fmt cfg base

# obj is used by module.mk files (target-specific flags), so it is defined before them.
obj = $(patsubst %,$(B)/obj/%.o,$(basename $(1)))
# The top folders first (sources/ sets what drivers/ adds to), then the programs and drivers
# in subfolders, then the tests.
include $(sort $(wildcard */module.mk)) \
	$(sort $(wildcard clients/*/module.mk drivers/*/module.mk tools/*/module.mk)) \
	$(sort $(wildcard tests/*/module.mk))

obj = $(patsubst %,$(B)/obj/%.o,$(basename $(1)))
archive_libs = $(foreach a,$(1),$(B)/lib/lib$(a).a)
# The archives of a program in LINK_ORDER (each once).
link_archives = $(call archive_libs,$(filter $(1),$(LINK_ORDER)))
$(foreach a,$(ARCHIVES),$(if $(filter $(a),$(LINK_ORDER)),,\
	$(error archive $(a) is not in LINK_ORDER (top Makefile): add it before the archives it uses)))
archive_ldlibs = $(sort $(foreach a,$(1),$($(a)_LDLIBS)))

$(B)/obj/%.o: %.c
	$(call msg,CC,$<)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

$(B)/obj/%.o: %.cu
	$(call msg,NVCC,$<)
	@mkdir -p $(@D)
	$(Q)$(NVCC) $(NVCCFLAGS) -c -o $@ $<

define archive_rule
$(B)/lib/lib$(1).a: $(call obj,$($(1)_SRCS))
	$$(call msg,AR,$$@)
	@mkdir -p $$(@D)
	$(Q)rm -f $$@ && ar rcs $$@ $$^
ALL_OBJS += $(call obj,$($(1)_SRCS))
endef

# $(1) name, $(2) output path
define link_rule
$(2): $(call obj,$($(1)_SRCS)) $(call archive_libs,$($(1)_ARCHIVES))
	$$(call msg,LD,$$@)
	@mkdir -p $$(@D)
	$(Q)$(CC) $(LDFLAGS) -o $$@ $(call obj,$($(1)_SRCS)) \
		$(call link_archives,$($(1)_ARCHIVES)) \
		$($(1)_LDLIBS) $(call archive_ldlibs,$($(1)_ARCHIVES)) $(LDLIBS)
ALL_OBJS += $(call obj,$($(1)_SRCS))
endef

define shlib_rule
$(B)/lib/lib$(1).so.$($(1)_SOVERSION): $(call obj,$($(1)_SRCS)) $(call archive_libs,$($(1)_ARCHIVES))
	$$(call msg,LD,$$@)
	@mkdir -p $$(@D)
	$(Q)$(CC) $(LDFLAGS) -shared -Wl,-soname,lib$(1).so.$($(1)_SOVERSION) \
		$(if $($(1)_VERSION_SCRIPT),-Wl$(comma)--version-script=$($(1)_VERSION_SCRIPT)) -o $$@ \
		$(call obj,$($(1)_SRCS)) $(call link_archives,$($(1)_ARCHIVES)) \
		$($(1)_LDLIBS) $(call archive_ldlibs,$($(1)_ARCHIVES)) $(LDLIBS)
$(B)/lib/lib$(1).so: $(B)/lib/lib$(1).so.$($(1)_SOVERSION)
	$(Q)ln -sf lib$(1).so.$($(1)_SOVERSION) $$@
ALL_OBJS += $(call obj,$($(1)_SRCS))
endef
comma := ,

$(foreach a,$(ARCHIVES),$(eval $(call archive_rule,$(a))))
$(foreach p,$(PROGRAMS),$(eval $(call link_rule,$(p),$(B)/bin/$(p))))
$(foreach p,$(TEST_PROGRAMS),$(eval $(call link_rule,$(p),$(B)/tests/$(p))))
$(foreach s,$(SHLIBS) $(TEST_SHLIBS),$(eval $(call shlib_rule,$(s))))

# ---- the cmocka runner: every tests/unit/*.c with VR_TEST_GROUP(name) -----------------------
unit_runner_SRCS := tests/unit/main.c tests/unit/vrtest.c $(UNIT_SRCS)
unit_runner_ARCHIVES := $(sort $(UNIT_ARCHIVES))
unit_runner_LDLIBS := -lcmocka
$(B)/gen/unit_groups.h: $(UNIT_SRCS) Makefile
	@mkdir -p $(@D)
	$(Q)grep -ho '^VR_TEST_GROUP([a-z0-9_]*)' /dev/null $(UNIT_SRCS) | \
		sed 's/VR_TEST_GROUP(\(.*\))/GROUP(\1)/' > $@.tmp && mv $@.tmp $@
$(call obj,tests/unit/main.c): $(B)/gen/unit_groups.h
$(call obj,tests/unit/main.c): CPPFLAGS += -I$(B)/gen
$(eval $(call link_rule,unit_runner,$(B)/tests/unit_runner))

PROGRAM_FILES := $(PROGRAMS:%=$(B)/bin/%)
shlib_files = $(foreach s,$(1),$(B)/lib/lib$(s).so.$($(s)_SOVERSION) $(B)/lib/lib$(s).so)
SHLIB_FILES := $(call shlib_files,$(SHLIBS))
TEST_FILES := $(TEST_PROGRAMS:%=$(B)/tests/%) $(B)/tests/unit_runner $(call shlib_files,$(TEST_SHLIBS))

.PHONY: all test check test-long unit pytest tests-build bench demo deps deps-check format format-check quality motion-bench \
	clean install uninstall
all: $(PROGRAM_FILES) $(SHLIB_FILES)
tests-build: all $(TEST_FILES)

# Environment for tests and tools run from the build tree.
export VOLREC_BUILD := $(abspath $(B))
export VOLREC_SRC := $(CURDIR)
export VOLREC_HAVE_CUDA := $(HAVE_CUDA)
export VOLREC_SANITIZER := $(SANITIZER)
ifeq ($(SANITIZER),thread)
export TSAN_OPTIONS ?= suppressions=$(CURDIR)/tests/tsan.supp
endif

# make test builds on every CPU even when run without -j (as the README gives it); with -j the
# caller's choice stands. MAKEFLAGS shows -j only in recipes.
.PHONY: tests-build-jobs
tests-build-jobs:
	+$(if $(findstring -j,$(MAKEFLAGS)),@:,$(Q)$(MAKE) --no-print-directory -j$(shell nproc 2>/dev/null || echo 1) tests-build)

unit: tests-build-jobs tests-build
	$(call msg,TEST,unit)
	$(Q)$(B)/tests/unit_runner

# playwright-core for the browser tests, from tests/browser/package-lock.json (no browser download:
# the tests drive Debian's chromium).
BROWSER_DEPS := tests/browser/node_modules/playwright-core/package.json
.PHONY: browser-deps
browser-deps: $(BROWSER_DEPS)
$(BROWSER_DEPS): tests/browser/package-lock.json tests/browser/package.json
	$(call msg,NPM,tests/browser)
	$(Q)cd tests/browser && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error
	$(Q)touch $@

# The integration tests pytest selects by marker (docs/testing.md): make test runs all but the
# `long` ones, make test-long those only (each run lists its 30 slowest cases); the sanitizer stages of .ci/run also leave out
# `python_only` and `browser`. VOLREC_TEST_TIMEOUT_SCALE (default 1) multiplies every bound a
# test waits for, and the per-test limit. PYTEST_JOBS (default 2) is how many pytest processes
# share the test files (pytest-xdist, a whole file to one process, so a module's daemon or
# browser stays with its tests): the tests mostly wait on their daemons, so two take about 0.6
# of the time of one on two cores; 1 runs them in one process, as the sanitizer stages of .ci/run do.
PYTEST_MARK ?= not long
PYTEST_JOBS ?= 2
VOLREC_TEST_TIMEOUT_SCALE ?= 1
export VOLREC_TEST_TIMEOUT_SCALE
PYTEST_TIMEOUT = $(shell awk 'BEGIN { print int(300 * $(VOLREC_TEST_TIMEOUT_SCALE)) }')
pytest_run = PYTHONPATH=$(CURDIR)/clients/python$${PYTHONPATH:+:$$PYTHONPATH} \
	$(PYTHON) -m pytest -q -rs -p no:cacheprovider --durations=30 --timeout=$(PYTEST_TIMEOUT) -m '$(1)' \
	$(if $(filter-out 0 1,$(PYTEST_JOBS)),-n $(PYTEST_JOBS) --dist loadfile,-p no:xdist) \
	tests/integration tests/python $(PYTEST_ARGS)

pytest: tests-build-jobs tests-build $(BROWSER_DEPS)
	$(call msg,TEST,integration ($(PYTEST_MARK)))
	$(Q)$(call pytest_run,$(PYTEST_MARK))

# make test runs the unit tests beside the integration tests: both mostly wait (on their
# daemons, on their sources' timeouts), so side by side they take the time of the integration
# tests alone. The unit runner writes $(B)/unit.log, printed once pytest is done; make test fails
# when either fails. `make unit pytest` runs them one after the other.
test check: tests-build-jobs tests-build $(BROWSER_DEPS)
	$(call msg,TEST,unit (beside the integration tests; printed after them))
	$(call msg,TEST,integration ($(PYTEST_MARK)))
	$(Q)$(B)/tests/unit_runner >$(B)/unit.log 2>&1 & unit=$$!; \
	trap 'kill $$unit 2>/dev/null; exit 130' INT TERM; \
	$(call pytest_run,$(PYTEST_MARK)); rc=$$?; \
	wait $$unit; urc=$$?; \
	printf '  %-7s %s\n' TEST "unit ($(B)/unit.log)"; cat $(B)/unit.log; \
	if [ $$urc -ne 0 ]; then echo "make test: the unit tests failed (exit $$urc)" >&2; fi; \
	[ $$rc -eq 0 ] && [ $$urc -eq 0 ]

# The slow cases make test leaves out: soaks, large geometries, exhaustive sweeps.
test-long: tests-build $(BROWSER_DEPS)
	$(call msg,TEST,integration (long))
	$(Q)$(call pytest_run,long)

# The standard quality table (docs/algorithms.md §2b): every reconstruction mode against the
# simulator's ground truth, JSON into bench/results/.
quality: all
	$(Q)bench/quality.sh $(B) bench/results/quality-$$(hostname)-$$(date -u +%Y%m%dT%H%M%SZ).json

# The motion bench (docs/algorithms.md "The motion bench"): the solid phantoms under every
# motion, every mode; JSON and markdown tables into bench/results/motion-<host>-<date>.*.
motion-bench: all
	$(Q)bench/motion_bench.py --build $(B)

format:
	$(Q)clang-format -i $$(git ls-files '*.c' '*.h' '*.cu' '*.cuh')

format-check:
	$(call msg,FORMAT,check)
	$(Q)clang-format --dry-run --Werror $$(git ls-files '*.c' '*.h' '*.cu' '*.cuh')

DEB_DEPS := build-essential pkg-config libzmq3-dev libyaml-dev libsystemd-dev libfftw3-dev \
	libhdf5-dev libpng-dev libjson-c-dev libcmocka-dev python3 python3-pytest python3-numpy python3-zmq \
	python3-h5py python3-pytest-timeout python3-pytest-xdist clang-format clang libclang-rt-14-dev \
	libaravis-dev aravis-tools libusb-1.0-0-dev \
	debhelper dh-python pybuild-plugin-pyproject python3-setuptools dpkg-dev fakeroot lintian \
	systemd man-db groff-base mypy systemd-container debootstrap \
	libwebsockets-dev zlib1g-dev chromium \
	libblosc-dev libnifti2-dev libtiff-dev python3-zarr python3-numcodecs python3-nibabel python3-tifffile \
	slurm-wlm munge python3-crcmod
# node and npm for the browser tests (tests/browser): Debian's, unless a node with its own npm
# (which conflicts with Debian's npm package) is installed already.
deps:
	@if [ "$$(id -u)" = 0 ]; then \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -qq && apt-get install -y -qq --no-install-recommends $(DEB_DEPS) && \
		{ command -v npm >/dev/null || apt-get install -y -qq --no-install-recommends nodejs npm; } && \
		$(MAKE) --no-print-directory browser-deps; \
	else \
		echo "make deps: run as root, or: sudo apt-get install -y --no-install-recommends $(DEB_DEPS)" >&2; \
		exit 1; \
	fi

# Nothing but the dependency check above (for the goals that compile and test).
deps-check:
	@echo "volrec: the build and test dependencies are installed"

clean:
	rm -rf $(B)

-include $(ALL_OBJS:.o=.d) $(B)/obj/tests/unit/main.d
