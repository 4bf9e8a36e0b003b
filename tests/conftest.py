# SPDX-License-Identifier: MIT
"""Fixtures shared by the pytest suites (tests/integration, tests/python): where the sources
and the build are. The Python package under test is the one in the tree, whatever else is
installed."""
import os
import pathlib
import sys

import pytest

SRC = pathlib.Path(os.environ.get("VOLREC_SRC", pathlib.Path(__file__).resolve().parents[1]))
BUILD = pathlib.Path(os.environ.get("VOLREC_BUILD", SRC / "build"))

sys.path.insert(0, str(SRC / "clients/python"))


@pytest.fixture(scope="session")
def src_dir():
    return SRC


@pytest.fixture(scope="session")
def build_dir():
    return BUILD


@pytest.fixture(scope="session")
def bin_dir():
    return BUILD / "bin"
