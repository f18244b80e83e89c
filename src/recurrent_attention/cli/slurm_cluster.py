"""A one-node SLURM cluster of your own on this machine: try sweeps, requeues and DDP under srun.

python scripts/slurm_cluster.py start --dir /tmp/ra-slurm  # prints export SLURM_CONF=/tmp/ra-slurm/slurm.conf
python scripts/slurm_cluster.py stop --dir /tmp/ra-slurm

Everything the cluster needs lives in that folder: its ``slurm.conf`` (``SLURM_CONF`` points the
SLURM commands at it), a munge key and socket, the controller's state, the node's spool, the logs
and the daemons' pids. Nothing of the machine's SLURM or munge is read or touched (its own free
ports, ``AuthInfo=socket=...``, ``PlugStackConfig`` in the folder), so it runs beside a real one.
The node is ``localhost``, with the machine's cores and memory; accounting is off (no slurmdbd);
processes are tracked without cgroups, and each job is pinned to its CPUs (``task/affinity``: a
job's torch threads stay on its cores, as under a real cluster's binding). ``stop`` cancels the
cluster's jobs and ends the daemons it started, each by its pid. Needs the Debian packages
``slurm-wlm`` and ``munge``, and root (slurmd starts jobs as their user).
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scontrol", "scancel")
INSTALL_HINT = "apt-get install slurm-wlm munge (Debian/Ubuntu)"
NODE = "localhost"  # the node's name is its address: Lightning's DDP takes SLURM_NODELIST as MASTER_ADDR
PIDS_NAME = "daemons.pid"
# The longest path a Unix socket may have (sun_path is 108 bytes with its terminating NUL).
SOCKET_PATH_MAX = 107


def missing_binaries() -> list[str]:
    """The SLURM and munge programs that are not on PATH (none: a cluster can start)."""
    return [name for name in BINARIES if shutil.which(name) is None and not Path("/usr/sbin", name).exists()]


def _binary(name: str) -> str:
    """Daemons live in /usr/sbin, which a non-login PATH may lack."""
    return shutil.which(name) or str(Path("/usr/sbin", name))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def memory_mb() -> int:
    """The node's memory as SLURM counts it (a job's ``--mem`` above it is refused)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise RuntimeError("no MemTotal in /proc/meminfo")


class ClusterError(RuntimeError):
    """The cluster did not start (the message ends with the daemon's log)."""


@dataclass
class LocalSlurm:
    """A one-node SLURM cluster in ``folder``; :meth:`start` it, :meth:`stop` it (also after a failure)."""

    folder: Path
    cpus: int = 0  # 0: the machine's count, at least 2 (so that 2-task DDP fits)

    def __post_init__(self) -> None:
        self.folder = Path(self.folder).resolve()
        self.conf = self.folder / "slurm.conf"
        self.munge_socket = self.folder / "munge" / "munge.socket"
        if len(str(self.munge_socket)) > SOCKET_PATH_MAX:
            raise ClusterError(
                f"--dir {self.folder} is too long for a Unix socket ({self.munge_socket}); pick a shorter one"
            )

    @property
    def env(self) -> dict[str, str]:
        """What a SLURM command (sbatch, squeue, submitit) needs to talk to this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def write_config(self) -> None:
        for sub in ("munge", "state", "spool", "log"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
        key = self.folder / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
            key.chmod(0o600)
        (self.folder / "plugstack.conf").write_text("")
        user = getpass.getuser()
        cpus = self.cpus or max(2, os.cpu_count() or 1)
        f = self.folder
        lines = [
            "ClusterName=ra-local",
            f"SlurmctldHost={NODE}",
            f"SlurmctldPort={free_port()}",
            f"SlurmdPort={free_port()}",
            f"SlurmUser={user}",
            f"SlurmdUser={user}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            # a requeued job may start again after cred_expire seconds (SLURM: 120)
            f"AuthInfo=socket={self.munge_socket},cred_expire=5",
            f"StateSaveLocation={f / 'state'}",
            f"SlurmdSpoolDir={f / 'spool'}",
            f"SlurmctldPidFile={f / 'slurmctld.pid'}",
            f"SlurmdPidFile={f / 'slurmd.pid'}",
            f"SlurmctldLogFile={f / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={f / 'log' / 'slurmd.log'}",
            f"PlugStackConfig={f / 'plugstack.conf'}",
            # no cgroups, no accounting database: what any machine (or container) can run
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/affinity",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "SchedulerType=sched/builtin",
            # every second (SLURM: 60), so that a requeued job starts once its cred_expire is over
            "SchedulerParameters=sched_interval=1",
            "MailProg=/bin/true",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "ReturnToService=2",
            "KillWait=5",  # seconds between a job's SIGTERM and SIGKILL (SLURM's default is 30)
            "SlurmdParameters=config_overrides",  # the CPUs below, whatever slurmd finds
            f"NodeName={NODE} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb()} State=UNKNOWN",
            f"PartitionName=local Nodes={NODE} Default=YES MaxTime=INFINITE State=UP",
        ]
        self.conf.write_text("\n".join(lines) + "\n")

    def start(self, timeout_s: float = 60) -> None:
        """Start munged, slurmctld and slurmd; return once the node takes jobs."""
        running = self.running()
        if running:
            pids = " ".join(map(str, running))
            raise ClusterError(f"a cluster is already running in {self.folder} (pids {pids}); stop it first")
        self.write_config()
        pids: list[int] = []
        try:
            munge = self.folder / "munge"
            pids.append(
                self._daemon(
                    "munged",
                    "--foreground",
                    "--force",
                    f"--socket={self.munge_socket}",
                    f"--key-file={munge / 'munge.key'}",
                    f"--pid-file={munge / 'munged.pid'}",
                    f"--log-file={self.folder / 'log' / 'munged.log'}",
                    f"--seed-file={munge / 'munged.seed'}",
                )
            )
            self._wait(lambda: self.munge_socket.exists(), "munged", timeout_s)
            pids.append(self._daemon("slurmctld", "-D", "-c", "-f", str(self.conf)))
            self._wait(
                lambda: self._ok("scontrol", "ping") and "UP" in self._out("scontrol", "ping"),
                "slurmctld",
                timeout_s,
            )
            pids.append(self._daemon("slurmd", "-D", "-N", NODE, "-f", str(self.conf)))
            self._wait(
                lambda: self._out("sinfo", "-h", "-N", "-o", "%T").strip() == "idle", "slurmd", timeout_s
            )
        finally:
            (self.folder / PIDS_NAME).write_text("".join(f"{pid}\n" for pid in pids))

    def running(self) -> list[int]:
        """The pids of this cluster's daemons that still run."""
        pids_file = self.folder / PIDS_NAME
        pids = [int(p) for p in pids_file.read_text().split()] if pids_file.exists() else []
        return [pid for pid in pids if self._ours(pid)]

    def stop(self, timeout_s: float = 20) -> None:
        """Cancel the cluster's jobs, then end each daemon started by :meth:`start` by its pid."""
        pids_file = self.folder / PIDS_NAME
        alive = self.running()
        if len(alive) == 3:  # the controller and the node can still end the jobs
            jobs = self._out("squeue", "-h", "-o", "%A").split()
            if jobs:
                subprocess.run(["scancel", *jobs], env=self.env, capture_output=True, timeout=30)
                deadline = time.monotonic() + timeout_s
                while self._out("squeue", "-h", "-o", "%A").split() and time.monotonic() < deadline:
                    time.sleep(0.2)
        for pid in reversed(alive):  # slurmd, slurmctld, munged
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for pid in reversed(alive):
            while self._ours(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if self._ours(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            _reap(pid)
        pids_file.unlink(missing_ok=True)

    def log_tail(self, name: str, lines: int = 15) -> str:
        path = self.folder / "log" / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def _daemon(self, name: str, *args: str) -> int:
        log = (self.folder / "log" / f"{name}.out").open("ab")
        # its own session: a Ctrl-C meant for the command that started it does not reach it
        proc = subprocess.Popen(
            [_binary(name), *args],
            env=self.env,
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        return proc.pid

    def _ours(self, pid: int) -> bool:
        """The pid is still one of this cluster's daemons (not a pid reused by another process)."""
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        return state != "Z" and str(self.folder) in cmdline

    def _out(self, *command: str) -> str:
        proc = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=30)
        return proc.stdout

    def _ok(self, *command: str) -> bool:
        return subprocess.run(command, env=self.env, capture_output=True, timeout=30).returncode == 0

    def _wait(self, ready, name: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            if time.monotonic() > deadline:
                log = self.log_tail(name) or self.log_tail(name.removesuffix("d"))
                out = (self.folder / "log" / f"{name}.out").read_text(errors="replace")[-2000:]
                raise ClusterError(f"{name} did not come up in {timeout_s:.0f} s; its log:\n{log}\n{out}")
            time.sleep(0.2)


def _reap(pid: int) -> None:
    """Collect a daemon this process started (no zombie left behind); another's pid is ignored."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("--dir", required=True, type=Path, help="the cluster's folder (created by start)")
    parser.add_argument(
        "--cpus", type=int, default=0, help="the node's CPUs (default: the machine's, at least 2)"
    )
    args = parser.parse_args(argv)
    missing = missing_binaries()
    if missing:
        print(f"error: {', '.join(missing)} not found; install them: {INSTALL_HINT}", file=sys.stderr)
        return 2
    cluster = LocalSlurm(args.dir, cpus=args.cpus)
    if args.action == "stop":
        cluster.stop()
        print(f"stopped the cluster in {cluster.folder}")
        return 0
    if cluster.running():  # start would refuse; stopping what runs is not what was asked
        print(f"error: a cluster is already running in {cluster.folder}; stop it first", file=sys.stderr)
        return 1
    try:
        cluster.start()
    except ClusterError as err:
        cluster.stop()
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"export SLURM_CONF={cluster.conf}")
    return 0
