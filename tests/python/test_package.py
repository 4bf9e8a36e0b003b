# SPDX-License-Identifier: MIT
"""The Python package as a package: its version is the project's, its type hints hold."""
import re
import shutil
import subprocess
import sys
import tomllib

import pytest


def test_version_is_the_projects(src_dir):
    import volrec
    makefile = (src_dir / "Makefile").read_text()
    version = re.search(r"^VERSION\s*:?=\s*(\S+)", makefile, re.M).group(1)
    assert volrec.__version__ == version
    pyproject = tomllib.loads((src_dir / "clients/python/pyproject.toml").read_text())
    assert pyproject["project"]["name"] == "volrec"
    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "volrec.__version__"}
    changelog = (src_dir / "debian/changelog").read_text().splitlines()[0]
    assert re.match(r"volrec \(%s(-[^)]*)?\)" % re.escape(version), changelog), changelog


@pytest.mark.skipif(not shutil.which("mypy"), reason="mypy is not installed (make deps)")
def test_type_hints_pass_mypy_strict(src_dir, tmp_path):
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir",
                        str(tmp_path / "cache"), "volrec"], cwd=src_dir / "clients/python",
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
