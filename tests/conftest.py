# SPDX-License-Identifier: MIT
"""Fixtures shared by the pytest suites (tests/integration, tests/python): where the sources
and the build are, the timeout scale and the markers (docs/testing.md). The Python package
under test is the one in the tree, whatever else is installed."""
import os
import pathlib
import sys

import pytest

SRC = pathlib.Path(os.environ.get("VOLREC_SRC", pathlib.Path(__file__).resolve().parents[1]))
BUILD = pathlib.Path(os.environ.get("VOLREC_BUILD", SRC / "build"))

sys.path.insert(0, str(SRC / "clients/python"))

# Every upper bound a test waits for (a condition, never a fixed time) is multiplied by this:
# generous at 1 on a loaded 2-core machine; the sanitizer stages of .ci/run raise it.
TIMEOUT_SCALE = float(os.environ.get("VOLREC_TEST_TIMEOUT_SCALE", "1"))
assert TIMEOUT_SCALE >= 1, "VOLREC_TEST_TIMEOUT_SCALE: 1 or more"

MARKERS = {
    "long": "slow cases (soaks, large geometries, exhaustive sweeps): make test-long, not "
            "make test",
    "python_only": "exercises Python code or files only (no volrecd, ipc, control socket, viewer "
                   "or engine code runs): left out of the sanitizer stages",
    "browser": "drives chromium; its C side is covered by the viewer's other tests: left out of "
               "the sanitizer stages",
    "numerics": "long numerical runs of volrec process, calibrate and quality judged on their "
                "results: in the ASan and UBSan stages, left out of TSan's (the engine's threads "
                "are exercised there by test_engine, test_process and the daemon's tests)",
}


def pytest_configure(config):
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")


@pytest.fixture(scope="session")
def src_dir():
    return SRC


@pytest.fixture(scope="session")
def build_dir():
    return BUILD


@pytest.fixture(scope="session")
def bin_dir():
    return BUILD / "bin"


def pytest_collection_modifyitems(config, items):
    """Markers that follow from what a test uses: a test that takes the `browser` fixture is
    `browser`; a test of tests/python that uses no build (no `build_dir`) is `python_only`."""
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "browser" in names:
            item.add_marker(pytest.mark.browser)
        if pathlib.Path(str(item.fspath)).parent == SRC / "tests" / "python" \
                and "build_dir" not in names:
            item.add_marker(pytest.mark.python_only)
