#!/bin/sh
# SPDX-License-Identifier: MIT
# The Debian packages a goal of the Makefile needs and this machine lacks, one line, space
# separated (empty when nothing is missing). The top Makefile runs it before compiling anything.
#   scripts/check-deps.sh build|test [PYTHON]
# build: what `make all` and `make demo` compile and link against; test: also the unit-test
# library and the Python modules of the integration tests. Libraries are probed with pkg-config
# (PKG_CONFIG_PATH and PKG_CONFIG_LIBDIR apply), commands on PATH, modules with PYTHON -c import.
set -u

mode=${1:-build}
python=${2:-/usr/bin/python3}
missing=

need() { # need PACKAGE: add once
	case " $missing " in *" $1 "*) ;; *) missing="$missing $1" ;; esac
}

# commands: name -> package
for pair in cc:build-essential make:build-essential pkg-config:pkg-config; do
	command -v "${pair%%:*}" >/dev/null 2>&1 || need "${pair#*:}"
done
# libraries: pkg-config module -> package (hdf5: Debian's serial HDF5, hdf5.pc)
libs="libzmq:libzmq3-dev yaml-0.1:libyaml-dev fftw3f:libfftw3-dev libsystemd:libsystemd-dev
	libpng:libpng-dev hdf5:libhdf5-dev json-c:libjson-c-dev libwebsockets:libwebsockets-dev
	zlib:zlib1g-dev blosc:libblosc-dev libtiff-4:libtiff-dev"
[ "$mode" = test ] && libs="$libs cmocka:libcmocka-dev"
for pair in $libs; do
	if command -v pkg-config >/dev/null 2>&1; then
		pkg-config --exists "${pair%%:*}" 2>/dev/null || need "${pair#*:}"
	else
		need "${pair#*:}" # cannot tell without pkg-config: name them all
	fi
done
# libnifti2 has no pkg-config module in Debian: its header (libniftiio-dev, which libnifti2-dev
# depends on) and library
if [ ! -e /usr/include/nifti/nifti2_io.h ] || ! ls /usr/lib/*/libnifti2.so >/dev/null 2>&1; then
	need libnifti2-dev
fi
# the browser tests: Debian's chromium, node and npm (tests/browser)
if [ "$mode" = test ]; then
	command -v chromium >/dev/null 2>&1 || need chromium
	command -v node >/dev/null 2>&1 || need nodejs
	command -v npm >/dev/null 2>&1 || need npm
fi
if [ "$mode" = test ]; then
	if [ -x "$python" ] || command -v "$python" >/dev/null 2>&1; then
		for pair in pytest:python3-pytest pytest_timeout:python3-pytest-timeout xdist:python3-pytest-xdist \
			numpy:python3-numpy zmq:python3-zmq h5py:python3-h5py zarr:python3-zarr \
			numcodecs:python3-numcodecs nibabel:python3-nibabel tifffile:python3-tifffile; do
			"$python" -c "import ${pair%%:*}" >/dev/null 2>&1 || need "${pair#*:}"
		done
	else
		need python3
	fi
fi
echo "${missing# }"
