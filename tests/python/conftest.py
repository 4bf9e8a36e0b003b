# SPDX-License-Identifier: MIT
"""Fixtures for the tests of the Python package volrec (clients/python): where the sources
and the build are, and shared-memory segments made by hand."""
import itertools
import os
import pathlib
import sys

import pytest

SRC = pathlib.Path(os.environ.get("VOLREC_SRC", pathlib.Path(__file__).resolve().parents[2]))
BUILD = pathlib.Path(os.environ.get("VOLREC_BUILD", SRC / "build"))

# the package under test is the one in the tree, whatever else is installed
sys.path.insert(0, str(SRC / "clients/python"))

_names = itertools.count()


@pytest.fixture(scope="session")
def src_dir():
    return SRC


@pytest.fixture(scope="session")
def build_dir():
    return BUILD


@pytest.fixture
def instance(tmp_path):
    """A fresh instance name; its segments in /dev/shm are removed afterwards."""
    name = "pyt%d-%d" % (os.getpid(), next(_names))
    yield name
    for suffix in ("", ".readers"):
        try:
            os.unlink("/dev/shm/volrec." + name + suffix)
        except FileNotFoundError:
            pass
