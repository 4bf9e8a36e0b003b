# SPDX-License-Identifier: MIT
"""A real Slurm on this machine for tests and benchmarks (docs/testing.md "Slurm"): munged,
slurmctld and slurmd from Debian's packages (slurm-wlm 22.05, munge), started as root in the
foreground with a temporary configuration under a temporary folder (no systemd, no cgroups:
proctrack/linuxproc, task/none), one node of this machine's CPUs and one partition. The client
commands find it through SLURM_CONF, set in `env`."""
import os
import shutil
import signal
import socket
import subprocess
import time

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")


def missing():
    """Why no Slurm can be started here, or None."""
    if os.geteuid() != 0:
        return "the Slurm daemons are started as root (slurmd runs jobs as their users)"
    paths = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    gone = [d for d in DAEMONS if not shutil.which(d, path=paths)]
    if gone:
        return "not installed: %s (make deps installs slurm-wlm and munge)" % ", ".join(gone)
    return None


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stepds(conf):
    """Pids of the slurmstepd processes of the cluster whose configuration is conf."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/comm") as f:
                if f.read().strip() != "slurmstepd":
                    continue
            with open(f"/proc/{d}/environ", "rb") as f:
                if b"SLURM_CONF=" + conf.encode() + b"\0" in f.read():
                    pids.append(int(d))
        except OSError:
            pass
    return pids


class Cluster:
    """Started by start(), stopped (jobs cancelled, every daemon gone) by stop(), also after a
    failure; usable as a context manager."""

    def __init__(self, root, cpus=None, timeout=60.0, max_array_size=None):
        self.root = root
        self.cpus = cpus or os.cpu_count() or 1
        self.timeout = timeout
        self.max_array_size = max_array_size
        self.procs = {}
        self.host = socket.gethostname().split(".")[0]
        self.conf = str(root / "slurm.conf")
        sbin = "/usr/sbin:/sbin"
        self.env = dict(os.environ, SLURM_CONF=self.conf,
                        PATH=os.environ.get("PATH", "") + ":" + sbin)

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def _spawn(self, name, argv):
        log = open(self.root / f"{name}.out", "wb")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                            env=self.env, start_new_session=True)
        log.close()

    def log(self, name):
        p = self.root / f"{name}.out"
        return p.read_text(errors="replace")[-3000:] if p.exists() else ""

    def _wait(self, what, cond):
        deadline = time.monotonic() + self.timeout
        while not cond():
            for name, p in self.procs.items():
                assert p.poll() is None, f"{name} exited ({p.returncode}): {self.log(name)}"
            assert time.monotonic() < deadline, f"{what}: not within {self.timeout} s"
            time.sleep(0.05)

    def start(self):
        r = self.root
        munge = r / "munge"
        for d in (munge, r / "state", r / "spool", r / "log"):
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(r, 0o755)
        subprocess.run(["mungekey", "-c", "-k", str(munge / "munge.key")], check=True,
                       env=self.env, capture_output=True)
        sock = munge / "munge.socket"
        self._spawn("munged", ["munged", "-F", "--force", f"--socket={sock}",
                               f"--key-file={munge / 'munge.key'}",
                               f"--pid-file={munge / 'munged.pid'}",
                               f"--log-file={munge / 'munged.log'}",
                               f"--seed-file={munge / 'seed'}"])
        self._wait("munged's socket", sock.exists)
        (r / "slurm.conf").write_text(f"""\
ClusterName=volrectest
SlurmctldHost={self.host}
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
StateSaveLocation={r / 'state'}
SlurmdSpoolDir={r / 'spool'}
SlurmctldPidFile={r / 'slurmctld.pid'}
SlurmdPidFile={r / 'slurmd.pid'}
SlurmctldLogFile={r / 'log' / 'slurmctld.log'}
SlurmdLogFile={r / 'log' / 'slurmd.log'}
ReturnToService=2
SchedulerType=sched/builtin
SchedulerParameters=sched_min_interval=0,batch_sched_delay=0
MinJobAge=600
KillWait=2
InactiveLimit=0
{f"MaxArraySize={self.max_array_size}" if self.max_array_size else ""}
NodeName={self.host} CPUs={self.cpus} State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""")
        self._spawn("slurmctld", ["slurmctld", "-D", "-i"])
        self._spawn("slurmd", ["slurmd", "-D"])

        def idle():
            q = subprocess.run(["sinfo", "-h", "-o", "%t"], env=self.env, capture_output=True,
                               text=True)
            return q.returncode == 0 and q.stdout.strip() == "idle"
        self._wait("the node idle in sinfo", idle)

    def run(self, *argv, check=True):
        p = subprocess.run(list(map(str, argv)), env=self.env, capture_output=True, text=True,
                           timeout=self.timeout)
        assert not check or p.returncode == 0, (argv, p.stdout, p.stderr)
        return p

    def queue(self):
        """{job id ("ARRAY_TASK" for array tasks): state} of the jobs in the queue."""
        p = self.run("squeue", "-h", "-r", "-o", "%i %T")
        return dict(line.split() for line in p.stdout.splitlines() if line.strip())

    def stop(self):
        """Cancel every job, stop the daemons (SIGTERM, then SIGKILL), and end what the jobs
        left running."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            subprocess.run(["scancel", "--user", "root"], env=self.env, capture_output=True,
                           timeout=30)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and _stepds(self.conf):
                time.sleep(0.1)
        for name in ("slurmd", "slurmctld", "munged"):
            p = self.procs.get(name)
            if p is None or p.poll() is not None:
                continue
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        for pid in _stepds(self.conf):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.procs.clear()
