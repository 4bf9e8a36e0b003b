# SPDX-License-Identifier: MIT
"""Packaging files: the man pages render without warnings and document every configuration
key; the systemd unit passes systemd-analyze verify and keeps its exposure figure."""
import re
import shutil
import subprocess

import pytest

PAGES = ["volrec.1", "libvolrec.3", "volrecd.yaml.5", "volrecd.8"]
MAX_EXPOSURE = 2.0  # docs/packaging.md justifies each remaining exposure of the shipped unit


@pytest.mark.parametrize("page", PAGES)
def test_man_page_renders_without_warnings(src_dir, page):
    if not shutil.which("groff"):
        pytest.skip("groff is not installed")
    path = src_dir / "packaging/man" / page
    for extra in (["-z"], ["-Tutf8", "-rLL=80n"]):
        res = subprocess.run(["groff", "-ww", "-man", *extra, str(path)], capture_output=True, text=True)
        assert res.returncode == 0 and res.stderr == "", f"groff {extra} on {page}:\n{res.stderr}"
    assert f".TH {page.rsplit('.', 1)[0].upper()} {page.rsplit('.', 1)[1]} " in path.read_text()


def config_leaf_keys(dump):
    """Dotted paths of the scalar keys of `volrecd --check` output (2-space YAML)."""
    stack, keys = [], []
    for line in dump.splitlines():
        m = re.match(r"^( *)([a-z_0-9]+):(.*)$", line)
        if not m:
            continue
        depth = len(m.group(1)) // 2
        del stack[depth:]
        stack.append(m.group(2))
        if m.group(3).strip():
            keys.append(".".join(stack))
    return keys


def test_config_man_page_documents_every_key(src_dir, bin_dir):
    volrecd = bin_dir / "volrecd"
    if not volrecd.exists():
        pytest.skip("volrecd is not built in this tree")
    res = subprocess.run([str(volrecd), "--check", "-c", str(src_dir / "packaging/volrecd.yaml")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    keys = config_leaf_keys(res.stdout)
    assert len(keys) > 30, f"too few keys parsed from the dump:\n{res.stdout}"
    page = (src_dir / "packaging/man/volrecd.yaml.5").read_text().replace("\\-", "-")
    undocumented = [k for k in keys if k not in page]
    assert not undocumented, f"volrecd.yaml(5) lacks: {undocumented}"


def test_unit_passes_systemd_analyze_verify(src_dir, bin_dir, tmp_path):
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not installed")
    volrecd = bin_dir / "volrecd"
    target = str(volrecd) if volrecd.exists() else "/bin/true"
    unit = (src_dir / "packaging/systemd/volrecd.service").read_text()
    assert "ExecStart=/usr/sbin/volrecd -c /etc/volrec/volrecd.yaml" in unit
    path = tmp_path / "volrecd.service"
    path.write_text(unit.replace("/usr/sbin/volrecd", target))
    res = subprocess.run(["systemd-analyze", "verify", "--man=no", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "volrecd.service" not in res.stderr, res.stdout + res.stderr


def test_unit_exposure_stays_low(src_dir):
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not installed")
    res = subprocess.run(["systemd-analyze", "security", "--offline=yes",
                          str(src_dir / "packaging/systemd/volrecd.service")],
                         capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for volrecd.service: ([0-9.]+)", res.stdout)
    assert m, res.stdout + res.stderr
    assert float(m.group(1)) <= MAX_EXPOSURE, res.stdout
