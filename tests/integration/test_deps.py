# SPDX-License-Identifier: MIT
"""First contact: with a build dependency missing, make stops before compiling anything with
the one apt-get line to run, or (as root) installs it with `make deps` and goes on."""
import os
import pathlib
import subprocess

import pytest

pytestmark = pytest.mark.python_only  # make's dependency check: no volrec binary runs

PC_DIRS = ["/usr/lib/x86_64-linux-gnu/pkgconfig", "/usr/lib/pkgconfig", "/usr/share/pkgconfig"]


def pkgconfig_dir_without(tmp_path, hidden):
    """A PKG_CONFIG_LIBDIR with every installed .pc file except `hidden`."""
    d = tmp_path / "pkgconfig"
    d.mkdir()
    for base in PC_DIRS:
        for pc in pathlib.Path(base).glob("*.pc") if pathlib.Path(base).is_dir() else []:
            if pc.name != hidden and not (d / pc.name).exists():
                (d / pc.name).symlink_to(pc)
    assert (d / "libzmq.pc").exists(), "no libzmq.pc found: is libzmq3-dev installed?"
    return d


def run_make(src_dir, *args, env_extra=None):
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env.update(env_extra or {})
    return subprocess.run(["make", "--no-print-directory", "-C", str(src_dir), *args], env=env,
                          capture_output=True, text=True, timeout=600)


def test_missing_library_stops_make_with_one_apt_get_line(src_dir, tmp_path):
    pc = pkgconfig_dir_without(tmp_path, "libsystemd.pc")
    out = tmp_path / "build"
    r = run_make(src_dir, f"O={out}", "all", "VOLREC_DEPS_INSTALL=0",
                 env_extra={"PKG_CONFIG_LIBDIR": str(pc)})
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [x for x in r.stderr.splitlines() if "apt-get" in x]
    assert len(lines) == 1, r.stderr
    assert "apt-get install -y --no-install-recommends libsystemd-dev" in lines[0], lines[0]
    assert "error:" not in r.stderr and "sd-daemon.h" not in r.stderr, r.stderr
    assert "  CC " not in r.stdout, r.stdout
    assert not out.exists() or not any(out.rglob("*.o")), "objects were compiled"


def test_missing_test_module_is_named_for_make_test(src_dir, tmp_path):
    blocker = tmp_path / "py"
    blocker.mkdir()
    (blocker / "h5py.py").write_text("raise ImportError('hidden by the test')\n")
    r = run_make(src_dir, "deps-check", "VOLREC_DEPS_INSTALL=0",
                 env_extra={"PYTHONPATH": str(blocker)})
    assert r.returncode == 2, r.stdout + r.stderr
    assert "apt-get install -y --no-install-recommends python3-h5py" in r.stderr, r.stderr


def test_as_root_make_installs_what_is_missing_with_make_deps(src_dir, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("make deps installs only as root")
    pc = pkgconfig_dir_without(tmp_path, "libsystemd.pc")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "apt-get.log"
    # stands in for apt-get: records the call and "installs" libsystemd.pc
    (bin_dir / "apt-get").write_text(
        "#!/bin/sh\n"
        f"echo \"$*\" >> {log}\n"
        f"case \" $* \" in *\" install \"*) ln -sf {pathlib.Path(PC_DIRS[0]) / 'libsystemd.pc'} {pc}/ ;; esac\n")
    (bin_dir / "apt-get").chmod(0o755)
    r = run_make(src_dir, "deps-check", "VOLREC_DEPS_INSTALL=1",
                 env_extra={"PKG_CONFIG_LIBDIR": str(pc),
                            "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "missing build dependencies (libsystemd-dev): installing them with make deps" in r.stdout
    calls = log.read_text().splitlines()
    assert calls[0].startswith("update") and "libsystemd-dev" in calls[1], calls
    assert "the build and test dependencies are installed" in r.stdout
