# SPDX-License-Identifier: MIT
"""Replay files end to end: `volrec sim` output replays through src_open bit for bit equal to
the built-in synth source and the example synth shim, and every file of the malformed corpus
(tests/replay/bad/CASES) is rejected by `volrec process` with its precise message."""
import subprocess

import pytest

GEOMETRY = """
geometry:
  samples_per_ascan: {K}
  sample_type: {T}
  ascans_per_bscan: 8
  bscans_per_volume: 5
  stride: [3, 2]
  bidirectional: {B}
  repeats: {M}
"""


def write_cfg(path, source, K=128, T="u16", B="false", M=1):
    path.write_text(source + GEOMETRY.format(K=K, T=T, B=B, M=M))
    return path


def dump(build_dir, cfg, n, out):
    r = subprocess.run([str(build_dir / "tests" / "src_dump"), "-c", str(cfg), "-n", str(n),
                        "-o", str(out)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return out.read_bytes()


@pytest.mark.parametrize("K,T,B,M", [(128, "u16", "false", 1), (96, "i16", "true", 1),
                                     (64, "f32", "false", 1), (64, "u16", "true", 3)])
def test_sim_file_replays_bit_for_bit_like_the_synth_source(bin_dir, build_dir, tmp_path, K, T,
                                                            B, M):
    """With geometry.repeats M every source delivers M repeats of each position in a row, meta
    saying which (src_dump checks it), and the file's header says M."""
    synth = "source:\n  type: synth\n  rate: 40\n  synth: {seed: 9, motion: {deg_per_s: 3}}\n"
    scfg = write_cfg(tmp_path / "synth.yaml", synth, K, T, B, M)
    r = subprocess.run([str(bin_dir / "volrec"), "sim", "-c", str(scfg), "-o",
                        str(tmp_path / "s.rp"), "-n", "6"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    replay = f"source:\n  type: replay\n  rate: 40\n  replay: {{path: {tmp_path / 's.rp'}}}\n"
    rcfg = write_cfg(tmp_path / "replay.yaml", replay, K, T, B, M)
    n = 6 * 5 * M
    a = dump(build_dir, scfg, n, tmp_path / "synth.bin")
    b = dump(build_dir, rcfg, n, tmp_path / "replay.bin")
    bscan = 8 * K * (4 if T == "f32" else 2)
    assert len(a) == n * bscan
    assert a == b
    head = (tmp_path / "s.rp").read_bytes()[:64]
    assert int.from_bytes(head[56:60], "little") == (M if M > 1 else 0)  # 0: as before repeats
    if M > 1:
        # repeat 0 of each position is the M = 1 scanner's B-scan, byte for byte; the other
        # repeats image the same tissue with noise of their own
        one = dump(build_dir, write_cfg(tmp_path / "one.yaml", synth, K, T, B), 6 * 5,
                   tmp_path / "one.bin")
        for i in range(6 * 5):
            assert a[i * M * bscan:(i * M + 1) * bscan] == one[i * bscan:(i + 1) * bscan], i
            assert a[(i * M + 1) * bscan:(i * M + 2) * bscan] != one[i * bscan:(i + 1) * bscan]
    # the example shim .so is the same scanner
    shim = (f"source:\n  type: shim\n  rate: 40\n  shim:\n    library: "
            f"{build_dir / 'lib' / 'libvolrec_synth_shim.so'}\n"
            f"    args: {{seed: 9, deg_per_s: 3, snr_db: 40, motion_rate: 40}}\n")
    c = dump(build_dir, write_cfg(tmp_path / "shim.yaml", shim, K, T, B, M), n,
             tmp_path / "shim.bin")
    assert c == a
    # and past the end of a file that does not loop, src_open's source reports it
    nl = replay.replace("}\n", ", loop: false}\n")
    r = subprocess.run([str(build_dir / "tests" / "src_dump"), "-c",
                        str(write_cfg(tmp_path / "nl.yaml", nl, K, T, B, M)), "-n", str(n + 1),
                        "-o", str(tmp_path / "x.bin")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and "end of file after 6 epochs" in r.stderr


def corpus(src_dir):
    for line in (src_dir / "tests" / "replay" / "bad" / "CASES").read_text().splitlines():
        if line and not line.startswith("#"):
            name, fmt, frag = line.split("\t")
            yield name, fmt, frag


def test_corpus_is_large_enough(src_dir):
    assert len(list(corpus(src_dir))) >= 15


@pytest.mark.parametrize("case", list(corpus(__import__("pathlib").Path(__file__)
                                             .resolve().parents[2])), ids=lambda c: c[0])
def test_malformed_replay_file_is_rejected_by_volrec_process(bin_dir, src_dir, tmp_path, case):
    name, fmt, frag = case
    path = src_dir / "tests" / "replay" / "bad" / name
    cfg = tmp_path / "c.yaml"
    cfg.write_text("backend: cpu\nsource:\n  type: replay\n  rate: 0\n  replay: "
                   f"{{path: '{path}', format: {fmt}}}\n"
                   "geometry:\n  samples_per_ascan: 64\n  ascans_per_bscan: 4\n"
                   "  bscans_per_volume: 3\n  stride: [2, 1]\n")
    r = subprocess.run([str(bin_dir / "volrec"), "process", "-c", str(cfg), "-o",
                        str(tmp_path / "o.h5")], capture_output=True, text=True, timeout=60)
    assert r.returncode > 0, r.stderr  # an error exit, not a signal
    assert frag in r.stderr and name in r.stderr, r.stderr
    assert not (tmp_path / "o.h5").exists()
