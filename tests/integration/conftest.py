# SPDX-License-Identifier: MIT
"""Shared fixtures for the integration tests: where the build and the sources are."""
import os
import pathlib

import pytest

SRC = pathlib.Path(os.environ.get("VOLREC_SRC", pathlib.Path(__file__).resolve().parents[2]))
BUILD = pathlib.Path(os.environ.get("VOLREC_BUILD", SRC / "build"))


@pytest.fixture(scope="session")
def src_dir():
    return SRC


@pytest.fixture(scope="session")
def build_dir():
    return BUILD


@pytest.fixture(scope="session")
def bin_dir():
    return BUILD / "bin"
