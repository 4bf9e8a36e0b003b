# SPDX-License-Identifier: MIT
"""`make install` / `make uninstall` into a temporary DESTDIR: what lands where, the unit
and configuration paths follow PREFIX, and uninstall leaves no file behind."""
import os
import pathlib
import shutil
import subprocess

import pytest

MAN_PAGES = ["man1/volrec.1", "man3/libvolrec.3", "man5/volrecd.yaml.5", "man8/volrecd.8"]


def make(src_dir, build_dir, *args):
    """Run the top-level Makefile on the build tree the tests use, never rebuilding it with
    other flags; the outer make's flags and jobserver are not inherited."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    cmd = ["make", "--no-print-directory", "-C", str(src_dir), f"O={build_dir}"]
    if os.environ.get("VOLREC_SANITIZER"):
        cmd.append(f"SANITIZER={os.environ['VOLREC_SANITIZER']}")
    if os.environ.get("VOLREC_HAVE_CUDA", "0") == "0":
        cmd.append("CUDA=0")
    res = subprocess.run(cmd + list(args), env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"make {' '.join(args)} failed:\n{res.stdout}\n{res.stderr}"
    return res.stdout


def files_under(root):
    """Every file and symlink below root, relative, sorted (directories left out)."""
    return sorted(
        str(p.relative_to(root)) for p in pathlib.Path(root).rglob("*") if p.is_file() or p.is_symlink()
    )


def unit_dir(prefix):
    if prefix == "/usr":
        res = subprocess.run(
            ["pkg-config", "--variable=systemdsystemunitdir", "systemd"], capture_output=True, text=True
        )
        if res.returncode == 0 and res.stdout.strip():
            return res.stdout.strip()
    return f"{prefix}/lib/systemd/system"


@pytest.fixture
def destdir(tmp_path):
    d = tmp_path / "root"
    d.mkdir()
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.python_only  # files in place: no volrec code runs
def test_install_prefix_usr_puts_files_where_debian_expects_them(src_dir, build_dir, destdir):
    make(src_dir, build_dir, "install", "PREFIX=/usr", f"DESTDIR={destdir}")
    files = files_under(destdir)
    expected = [
        "etc/volrec/volrecd.yaml",
        "usr/lib/sysusers.d/volrec.conf",
        "usr/lib/tmpfiles.d/volrec.conf",
        unit_dir("/usr").lstrip("/") + "/volrecd.service",
    ]
    expected += [f"usr/share/man/{m}" for m in MAN_PAGES]
    expected += [f"usr/include/volrec/{h.name}" for h in (src_dir / "include/volrec").glob("*.h")]
    if (build_dir / "bin/volrecd").exists():
        expected.append("usr/sbin/volrecd")
    if (build_dir / "bin/volrec").exists():
        expected.append("usr/bin/volrec")
    if (build_dir / "bin/volrec-process").exists():
        expected.append("usr/libexec/volrec/volrec-process")
    if (build_dir / "lib/libvolrec.so.0").exists():
        expected += ["usr/lib/libvolrec.so.0", "usr/lib/libvolrec.so", "usr/lib/pkgconfig/volrec.pc"]
    for py in (src_dir / "clients/python").glob("volrec/**/*.py"):
        expected.append("usr/lib/python3/dist-packages/" + str(py.relative_to(src_dir / "clients/python")))
    missing = sorted(set(expected) - set(files))
    assert not missing, f"not installed: {missing}\ninstalled: {files}"
    unit = (destdir / unit_dir("/usr").lstrip("/") / "volrecd.service").read_text()
    assert "ExecStart=/usr/sbin/volrecd -c /etc/volrec/volrecd.yaml" in unit
    assert (destdir / "etc/volrec/volrecd.yaml").read_bytes() == (src_dir / "packaging/volrecd.yaml").read_bytes()
    if (destdir / "usr/lib/libvolrec.so").is_symlink():
        assert os.readlink(destdir / "usr/lib/libvolrec.so") == "libvolrec.so.0"
        pc = (destdir / "usr/lib/pkgconfig/volrec.pc").read_text()
        assert "libdir=/usr/lib\n" in pc and "includedir=/usr/include\n" in pc, pc
        assert "@" not in pc, f"unsubstituted placeholder in volrec.pc:\n{pc}"

    make(src_dir, build_dir, "uninstall", "PREFIX=/usr", f"DESTDIR={destdir}")
    assert files_under(destdir) == []


@pytest.mark.python_only  # files in place: no volrec code runs
def test_install_other_prefix_rewrites_unit_paths_and_keeps_everything_under_it(src_dir, build_dir, destdir):
    make(src_dir, build_dir, "install", "PREFIX=/opt/volrec", f"DESTDIR={destdir}")
    files = files_under(destdir)
    outside = [f for f in files if not f.startswith("opt/volrec/")]
    assert not outside, f"installed outside PREFIX: {outside}"
    unit = (destdir / "opt/volrec/lib/systemd/system/volrecd.service").read_text()
    assert "ExecStart=/opt/volrec/sbin/volrecd -c /opt/volrec/etc/volrec/volrecd.yaml" in unit, unit
    assert "/usr/sbin/volrecd" not in unit
    make(src_dir, build_dir, "uninstall", "PREFIX=/opt/volrec", f"DESTDIR={destdir}")
    assert files_under(destdir) == []


@pytest.mark.python_only  # files in place: no volrec code runs
def test_install_keeps_a_locally_edited_configuration(src_dir, build_dir, destdir):
    conf = destdir / "etc/volrec/volrecd.yaml"
    conf.parent.mkdir(parents=True)
    conf.write_text("instance: lab\n")
    make(src_dir, build_dir, "install-config", "PREFIX=/usr", f"DESTDIR={destdir}")
    assert conf.read_text() == "instance: lab\n"
    assert (conf.parent / "volrecd.yaml.dist").read_bytes() == (src_dir / "packaging/volrecd.yaml").read_bytes()
    make(src_dir, build_dir, "uninstall", "PREFIX=/usr", f"DESTDIR={destdir}")
    assert files_under(destdir) == ["etc/volrec/volrecd.yaml"]


@pytest.mark.python_only  # files in place: no volrec code runs
def test_uninstall_keeps_the_operators_own_shims(src_dir, build_dir, destdir):
    """SHIMDIR is shared with the site's frame-grabber shims: uninstall removes only the shim
    files install wrote."""
    own = destdir / "usr/lib/volrec/lab-grabber.so"
    own.parent.mkdir(parents=True)
    own.write_bytes(b"\x7fELF not ours")
    make(src_dir, build_dir, "install", "PREFIX=/usr", f"DESTDIR={destdir}")
    shipped = [f for f in files_under(destdir) if f.startswith("usr/lib/volrec/") and f != "usr/lib/volrec/lab-grabber.so"]
    if (build_dir / "lib/volrec").is_dir() and any((build_dir / "lib/volrec").glob("*.so")):
        assert shipped, "install wrote no shim although the build has one"
    make(src_dir, build_dir, "uninstall", "PREFIX=/usr", f"DESTDIR={destdir}")
    assert files_under(destdir) == ["usr/lib/volrec/lab-grabber.so"]
    assert own.read_bytes() == b"\x7fELF not ours"


def test_default_configuration_is_valid(src_dir, bin_dir):
    volrecd = bin_dir / "volrecd"
    if not volrecd.exists():
        pytest.skip("volrecd is not built in this tree")
    res = subprocess.run(
        [str(volrecd), "--check", "-c", str(src_dir / "packaging/volrecd.yaml")],
        capture_output=True, text=True, timeout=60,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert 'run_dir: "/run/volrec"' in res.stdout, res.stdout
