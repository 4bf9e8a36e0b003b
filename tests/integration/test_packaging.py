# SPDX-License-Identifier: MIT
"""Packaging files: the man pages render without warnings and document every configuration
key; the systemd unit passes systemd-analyze verify and keeps its exposure figure."""
import pathlib
import re
import shlex
import shutil
import subprocess

import pytest

pytestmark = pytest.mark.python_only  # man pages and the unit file: files, not the daemon's code

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


def unit_lines(path):
    """[(section, key, value)] of a unit file, continuation lines joined as systemd joins them."""
    out, section, pending = [], None, ""
    for raw in path.read_text().splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        out.append((section, key, value))
    return out


def unit_settings(path):
    """{(section, key): [values in order]} of a unit file (unit_lines)."""
    settings = {}
    for section, key, value in unit_lines(path):
        settings.setdefault((section, key), []).append(value)
    return settings


def systemd_seconds(text):
    m = re.fullmatch(r"([0-9.]+)(s|min)?", text)
    assert m, f"cannot read the time span {text!r}"
    return float(m.group(1)) * (60 if m.group(2) == "min" else 1)


@pytest.fixture
def unit(src_dir):
    return unit_settings(src_dir / "packaging/systemd/volrecd.service")


def test_unit_does_not_restart_after_a_configuration_error(unit, bin_dir, tmp_path):
    """volrecd exits 2 on a configuration error; systemd must not restart that forever."""
    volrecd = bin_dir / "volrecd"
    if not volrecd.exists():
        pytest.skip("volrecd is not built in this tree")
    bad = tmp_path / "bad.yaml"
    bad.write_text("instance: x\nbogus_key: 1\n")
    res = subprocess.run([str(volrecd), "-c", str(bad)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    prevent = " ".join(unit.get(("Service", "RestartPreventExitStatus"), [])).split()
    assert "2" in prevent, f"RestartPreventExitStatus= is {prevent}"


def test_unit_start_limit_is_reachable_by_its_restart_cadence(unit):
    """StartLimitBurst starts, RestartSec apart, fit in StartLimitIntervalSec: a start that keeps
    failing stops (the default 10 s interval with RestartSec=2s never did)."""
    burst = int(unit.get(("Unit", "StartLimitBurst"), ["5"])[-1])
    interval = systemd_seconds(unit.get(("Unit", "StartLimitIntervalSec"), ["10s"])[-1])
    restart_sec = systemd_seconds(unit[("Service", "RestartSec")][-1])
    assert burst * restart_sec * 2 <= interval, (burst, restart_sec, interval)


def reload_check_command(unit, volrecd, config):
    """The ExecReload= line that validates the file, with the build's volrecd and config."""
    reloads = unit[("Service", "ExecReload")]
    assert len(reloads) == 2 and reloads[-1] == "/bin/sh -c 'kill -s HUP \"$$MAINPID\"'", reloads
    check = reloads[0]
    assert "--check -c /etc/volrec/volrecd.yaml" in check, check
    assert check.startswith("/bin/sh -c '") and check.endswith("'"), check
    return check[len("/bin/sh -c '"):-1].replace("/usr/sbin/volrecd", str(volrecd)).replace(
        "/etc/volrec/volrecd.yaml", str(config))


def test_unit_reload_fails_on_a_rejected_file_before_signalling(unit, bin_dir, src_dir, tmp_path):
    volrecd = bin_dir / "volrecd"
    if not volrecd.exists():
        pytest.skip("volrecd is not built in this tree")
    config = tmp_path / "volrecd.yaml"
    config.write_text((src_dir / "packaging/volrecd.yaml").read_text())
    res = subprocess.run(["/bin/sh", "-c", reload_check_command(unit, volrecd, config)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout == "", res.stdout + res.stderr
    config.write_text("instance: x\npipeline:\n  overflow: sometimes\n")
    res = subprocess.run(["/bin/sh", "-c", reload_check_command(unit, volrecd, config)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "overflow" in res.stderr, res.stderr


def test_unit_does_not_wait_for_the_network(unit):
    """ipc:// needs no network; a tcp:// bind on a given address uses the documented drop-in."""
    for key in ("Wants", "After", "Requires"):
        values = " ".join(unit.get(("Unit", key), []))
        assert "network-online.target" not in values, f"{key}={values}"


def test_unit_runs_nvidia_modprobe_silently_on_cpu_hosts(unit):
    """Without /usr/bin/nvidia-modprobe the ExecStartPre= command succeeds and prints nothing."""
    pre = [c for c in unit[("Service", "ExecStartPre")] if "nvidia-modprobe" in c]
    assert len(pre) == 1, unit[("Service", "ExecStartPre")]
    cmd = pre[0]
    assert cmd.startswith("-+/bin/sh -c '") and cmd.endswith("'"), cmd
    if pathlib.Path("/usr/bin/nvidia-modprobe").exists():
        pytest.skip("nvidia-modprobe is installed on this machine")
    res = subprocess.run(["/bin/sh", "-c", cmd[len("-+/bin/sh -c '"):-1]], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0 and res.stdout + res.stderr == "", res.stdout + res.stderr


# ---- volrec(1) and libvolrec(3) against the code ---------------------------------------------

def volrec_commands(src_dir):
    """{subcommand: source file with its options} from the VR_COMMAND declarations."""
    cmds = {}
    for path in sorted((src_dir / "clients/volrec").glob("cmd_*.c")):
        for name in re.findall(r"^VR_COMMAND\((\w+),", path.read_text(), re.M):
            cmds[name] = path
    return cmds


def command_options(src_dir, path):
    """The long and short options a subcommand accepts, read from its getopt_long call."""
    text = path.read_text()
    # a command that runs another program, or whose options another file parses
    m = re.search(r"^ \* getopt: (\S+)$", text, re.M)
    if m:
        text = (src_dir / m.group(1)).read_text()
    longs = set(re.findall(r'\{"([a-z][a-z0-9-]*)",\s*(?:no|required|optional)_argument', text))
    if "TOOL_COMMON_LONGOPTS" in text:
        longs |= {"instance", "run-dir", "config"}
    if "VR_CLI_LONGOPTS_END" in text:
        longs.add("help")
    # getopt_long(argc, argv, "OPTS", ...), VR_CLI_GETOPT(argc, argv, "OPTS", ...),
    # tool_getopt(&tg, cmd, argc, argv, "OPTS", ...) or tool_run_getopt(&tg, &run, cmd, ...)
    m = re.search(r'(?:(?:getopt_long|VR_CLI_GETOPT)\((?:[^,]+,){2}|tool_getopt\((?:[^,]+,){4}'
                  r'|tool_run_getopt\((?:[^,]+,){5})\s*"([^"]*)"', text)
    assert m, f"no getopt_long optstring in {path}"
    shorts = set(re.sub(r"[^A-Za-z]", "", m.group(1)))
    return longs, shorts


def man_text(src_dir, page):
    return (src_dir / "packaging/man" / page).read_text().replace("\\-", "-")


def test_volrec_man_page_lists_every_option_of_every_subcommand(src_dir):
    page = man_text(src_dir, "volrec.1")
    common = page.split(".SH FINDING THE DAEMON", 1)[1].split(".SH COMMANDS", 1)[0]
    cmds = volrec_commands(src_dir)
    assert len(cmds) >= 9, cmds
    missing = []
    for name, path in cmds.items():
        m = re.search(rf'^\.SS "volrec {name}\b.*?(?=^\.S[SH] )', page, re.M | re.S)
        if not m:
            missing.append(f"{name}: no .SS section")
            continue
        section = m.group(0)
        longs, shorts = command_options(src_dir, path)
        for opt in sorted(longs):
            if f"--{opt}" not in section and f"--{opt}" not in common:
                missing.append(f"{name} --{opt}")
        for opt in sorted(shorts):
            if not re.search(rf"\B-{opt}\b", section) and not re.search(rf"\B-{opt}\b", common):
                missing.append(f"{name} -{opt}")
    assert not missing, f"volrec(1) lacks: {missing}"


def test_volrec_man_page_lists_every_exit_status(src_dir):
    codes = dict((int(v), k) for k, v in re.findall(
        r"(VR_EXIT_\w+) = (\d+)", (src_dir / "base/base.h").read_text()))
    assert sorted(codes) == list(range(9)), codes
    page = man_text(src_dir, "volrec.1")
    status = page.split(".SH EXIT STATUS", 1)[1].split(".SH ", 1)[0]
    listed = [int(x) for x in re.findall(r"^\.TP\n\.B (\d+)$", status, re.M)]
    assert listed == sorted(codes), f"EXIT STATUS lists {listed}, the code uses {sorted(codes)}"


def test_volrec_man_page_claims_no_default_configuration_file(src_dir):
    """Without -c the tools read no file (tool_target_finish): the page says so."""
    page = man_text(src_dir, "volrec.1")
    assert "default\n.IR /etc/volrec/volrecd.yaml" not in page
    assert "There is no default configuration file" in page


def test_help_texts_point_at_man_pages_not_at_repository_files(src_dir, bin_dir):
    if not (bin_dir / "volrec").exists() or not (bin_dir / "volrecd").exists():
        pytest.skip("volrec and volrecd are not built in this tree")
    texts = {"volrecd": subprocess.run([str(bin_dir / "volrecd"), "--help"], capture_output=True,
                                       text=True, timeout=60).stdout,
             "volrec": subprocess.run([str(bin_dir / "volrec"), "--help"], capture_output=True,
                                      text=True, timeout=60).stdout}
    for name in volrec_commands(src_dir):
        texts[f"volrec {name}"] = subprocess.run([str(bin_dir / "volrec"), name, "--help"],
                                                 capture_output=True, text=True, timeout=60).stdout
    for what, text in texts.items():
        assert text, f"{what} --help printed nothing"
        assert not re.search(r"\b[\w/.-]+\.md\b", text), f"{what} --help names a repository file:\n{text}"
    assert "man volrecd.yaml" in texts["volrecd"], texts["volrecd"]
    assert "man volrec" in texts["volrec"], texts["volrec"]


def test_libvolrec_man_page_documents_every_exported_function(src_dir, build_dir):
    """`nm -D --defined-only` of libvolrec.so.0 against the SYNOPSIS and the text after it."""
    lib = build_dir / "lib/libvolrec.so.0"
    if not lib.exists() or not shutil.which("nm"):
        pytest.skip("libvolrec.so.0 is not built in this tree, or nm is missing")
    res = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True,
                         timeout=60, check=True)
    exported = sorted({f.split("@")[0] for _, kind, f in
                       (line.split() for line in res.stdout.splitlines() if len(line.split()) == 3)
                       if kind in "TWi"})
    assert "volrec_client_open" in exported, res.stdout
    page = man_text(src_dir, "libvolrec.3")
    synopsis = page.split(".SH SYNOPSIS", 1)[1].split(".SH ", 1)[0]
    body = page.split(".SH DESCRIPTION", 1)[1]  # the text after the synopsis
    undocumented = [f for f in exported
                    if not re.search(rf"\b{f}\(", synopsis) or f".BR {f} ()" not in body]
    assert not undocumented, f"libvolrec(3) does not document: {undocumented}"
    listed = set(re.findall(r"\b(volrec_\w+)\(", synopsis))
    assert listed <= set(exported), f"documented but not exported: {sorted(listed - set(exported))}"


# ---- the viewer's unit (packaging/systemd/volrec-view.service) -------------------------------


VIEW_FILES = {"view.crt": "--cert", "view.key": "--key", "view.tokens": "--token-file"}


def view_exec_args(src_dir, creds, opts):
    """The arguments the unit's ExecStart gives `volrec view`, with %d the folder creds and
    VOLREC_VIEW_OPTS=opts (systemd's specifier and variable expansion done here)."""
    lines = unit_lines(src_dir / "packaging/systemd/volrec-view.service")
    start = [v for s, k, v in lines if (s, k) == ("Service", "ExecStart")]
    assert len(start) == 1, start
    cmd = start[0].replace("%d", str(creds)).replace("$VOLREC_VIEW_OPTS", opts)
    argv = shlex.split(cmd.replace("$$", "$"))
    # the viewer stands in as printf: one argument a line
    argv = [a.replace("exec /usr/bin/volrec view", "exec printf '%s\\n'") for a in argv]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()


def test_view_unit_hands_root_only_files_over_as_credentials(src_dir, tmp_path):
    """The key and token files are mode 0600 root, which the service's own user cannot read:
    systemd loads them (LoadCredential=, an absent file an empty default) and the viewer is
    given the copies in its credentials directory, only those present."""
    lines = unit_lines(src_dir / "packaging/systemd/volrec-view.service")
    load = [v for s, k, v in lines if (s, k) == ("Service", "LoadCredential")]
    default = [v for s, k, v in lines if (s, k) == ("Service", "SetCredential")]
    for name in VIEW_FILES:
        assert f"{name}:/etc/volrec/{name}" in load, load
        assert f"{name}:\\n" in default, default
    creds = tmp_path / "credentials"
    creds.mkdir()
    # no files: SetCredential's newline in each, the viewer on loopback as it was
    for name in VIEW_FILES:
        (creds / name).write_text("\n")
    args = view_exec_args(src_dir, creds, "")
    assert args == ["-c", "/etc/volrec/volrecd.yaml"], args
    # the three files: each given from the credentials folder, the options after them
    for name in VIEW_FILES:
        (creds / name).write_text(f"contents of {name}\n")
        (creds / name).chmod(0o400)
    args = view_exec_args(src_dir, creds, "--listen 0.0.0.0:8443")
    for name, opt in VIEW_FILES.items():
        assert opt in args and args[args.index(opt) + 1] == str(creds / name), args
    assert args[-2:] == ["--listen", "0.0.0.0:8443"], args


def test_view_unit_passes_systemd_analyze_verify(src_dir, tmp_path):
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not installed")
    path = tmp_path / "volrec-view.service"
    path.write_text((src_dir / "packaging/systemd/volrec-view.service").read_text()
                    .replace("After=volrecd.service ", "After="))
    res = subprocess.run(["systemd-analyze", "verify", "--man=no", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "volrec-view.service" not in res.stderr, res.stdout + res.stderr
