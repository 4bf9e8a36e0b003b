# SPDX-License-Identifier: MIT
"""volrecd --check on the example configurations and on the corpus of malformed ones."""
import pathlib
import re
import subprocess

import pytest

SRC = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = sorted((SRC / "config" / "examples").glob("*.yaml"))
BAD = sorted((SRC / "tests" / "config" / "bad").glob("*.yaml"))
EXPECT = re.compile(r"^# expect: (\d+):(\d+): (\S+): ?(.*)$")


@pytest.fixture(scope="module")
def volrecd(bin_dir):
    exe = bin_dir / "volrecd"
    if not exe.exists():
        pytest.fail(f"{exe} is not built (make O=... {exe})")
    return exe


def check(volrecd, path, cwd=None):
    return subprocess.run([str(volrecd), "--check", "-c", str(path)], capture_output=True,
                          text=True, timeout=60, cwd=cwd)


def test_corpus_is_large_enough():
    assert len(EXAMPLES) >= 4, EXAMPLES
    assert len(BAD) >= 35, len(BAD)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_passes_and_its_dump_reads_back(volrecd, example, tmp_path):
    first = check(volrecd, example)
    assert first.returncode == 0, first.stderr
    assert first.stderr == ""
    assert "samples_per_ascan:" in first.stdout
    dumped = tmp_path / "effective.yaml"
    dumped.write_text(first.stdout)
    # from another directory: the dump holds absolute paths
    second = check(volrecd, dumped, cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    # same configuration: only the header comment naming the file differs
    strip = lambda s: [l for l in s.splitlines() if not l.startswith("#")]
    assert strip(second.stdout) == strip(first.stdout)


@pytest.mark.parametrize("bad", BAD, ids=lambda p: p.stem)
def test_bad_config_is_rejected_with_its_position(volrecd, bad):
    m = EXPECT.match(bad.read_text().splitlines()[0])
    assert m, f"{bad}: first line must be '# expect: LINE:COLUMN: key.path: fragment'"
    line, col, key, fragment = m.groups()
    r = check(volrecd, bad)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == ""
    msg = r.stderr.strip()
    assert "\n" not in msg, msg
    assert msg.startswith(f"{bad}:{line}:{col}: {key}: "), msg
    assert fragment in msg, (fragment, msg)


def test_missing_config_file(volrecd, tmp_path):
    missing = tmp_path / "nowhere.yaml"
    r = check(volrecd, missing)
    assert r.returncode == 2
    assert r.stderr.startswith(f"{missing}: cannot open the configuration file: ")
    assert "No such file or directory" in r.stderr


def test_empty_file_means_defaults(volrecd, tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing set: every key at its default\n")
    r = check(volrecd, empty)
    assert r.returncode == 0, r.stderr
    assert "samples_per_ascan: 2048" in r.stdout
    assert "depth_range: [0, 1024]" in r.stdout
    assert 'run_dir: "/run/volrec"' in r.stdout


def test_relative_paths_resolve_against_the_config_file(volrecd, tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "ref.txt").write_text("".join(f"{i}\n" for i in range(16)))
    cfg = tmp_path / "sub" / "c.yaml"
    cfg.write_text("geometry: {samples_per_ascan: 16, ascans_per_bscan: 4, "
                   "bscans_per_volume: 4}\n"
                   "preprocess: {background: {mode: reference, reference: ref.txt}}\n")
    r = check(volrecd, cfg, cwd=SRC)
    assert r.returncode == 0, r.stderr
    assert f'reference: "{tmp_path}/sub/ref.txt"' in r.stdout


def test_usage_errors_exit_2(volrecd):
    r = subprocess.run([str(volrecd), "--bogus"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "unknown option" in r.stderr
    r = subprocess.run([str(volrecd), "-c"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "needs an argument" in r.stderr


def test_help_and_version(volrecd):
    r = subprocess.run([str(volrecd), "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--check" in r.stdout
    r = subprocess.run([str(volrecd), "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("volrecd ")
