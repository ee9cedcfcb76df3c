"""A real single-node Slurm (munged, slurmctld, slurmd) in a temporary folder, for tests.

Needs root and the Debian packages slurmctld, slurmd, slurm-client and munge. It has its
own munge key and socket, ports and state; commands reach it through ``SLURM_CONF`` (see
``env``), and job steps through a link at /run/slurm/conf that ``stop()`` removes. It is
not started where the machine has a Slurm configuration of its own. ``stop()`` cancels
what is still queued and ends the three daemons it started, by their process ids.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import stat
import string
import subprocess
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DAEMONS = ("munged", "slurmctld", "slurmd")
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")
# Where Slurm's commands look when SLURM_CONF is unset and /etc/slurm has none (a configless
# node's cache). Snakemake's Slurm job step drops SLURM_* variables before it calls srun, so
# the srun inside a job finds this cluster through a link there.
NODE_CONF_CACHE = Path("/run/slurm/conf")
CLIENTS = ("sbatch", "squeue", "scancel", "scontrol", "sinfo", "srun")


def missing_requirements() -> str | None:
    """Why a Slurm cannot be started here, or None."""
    if os.geteuid() != 0:
        return "starting slurmctld/slurmd needs root"
    missing = [p for p in (*DAEMONS, *CLIENTS) if shutil.which(p) is None
               and not Path("/usr/sbin", p).exists()]
    if missing:
        return ("Slurm is not installed (missing " + ", ".join(missing) +
                "; apt-get install slurmctld slurmd slurm-client munge)")
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "no 'munge' user (the munge package creates it)"
    # An srun without SLURM_CONF would find that other Slurm.
    for taken in (SYSTEM_CONF, NODE_CONF_CACHE):
        if taken.exists() or taken.is_symlink():
            return f"{taken} exists: this machine has a Slurm of its own, left alone"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sbin(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


class SingleNodeSlurm:
    def __init__(self, cpus: int = 8, gpus: int = 2, memory_mb: int = 64000):
        self.root = Path(tempfile.mkdtemp(prefix="dlbench-slurm-"))
        self.root.chmod(0o755)  # munged runs as 'munge' and must reach its folder
        self.cpus, self.gpus, self.memory_mb = cpus, gpus, memory_mb
        self.conf = self.root / "slurm.conf"
        self.procs: dict[str, subprocess.Popen] = {}
        self._made_run_dir = False

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def _write_config(self) -> None:
        for sub in ("state", "spool", "log", "dev", "munge"):
            (self.root / sub).mkdir()
        for i in range(self.gpus):
            # Slurm wants device files; these have /dev/null's numbers.
            os.mknod(self.root / "dev" / f"nvidia{i}", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        values = {"root": self.root, "ctld_port": _free_port(), "slurmd_port": _free_port(),
                  "munge_socket": self.root / "munge" / "munge.socket", "cpus": self.cpus,
                  "memory_mb": self.memory_mb, "gpus": self.gpus, "last_gpu": self.gpus - 1}
        for name in ("slurm.conf", "gres.conf"):
            text = string.Template((HERE / f"{name}.template").read_text()).substitute(values)
            (self.root / name).write_text(text)

    def _start_munged(self) -> None:
        munge = pwd.getpwnam("munge")
        folder = self.root / "munge"
        key = folder / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        for path in (folder, key):
            os.chown(path, munge.pw_uid, munge.pw_gid)
        folder.chmod(0o700)
        self.procs["munged"] = subprocess.Popen(
            [_sbin("munged"), "--foreground", "--force",
             f"--socket={folder / 'munge.socket'}", f"--key-file={key}",
             f"--pid-file={folder / 'munged.pid'}", f"--log-file={folder / 'munged.log'}",
             f"--seed-file={folder / 'munged.seed'}"],
            user=munge.pw_uid, group=munge.pw_gid, extra_groups=[],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self._wait(lambda: (folder / "munge.socket").exists(), 20, "munged socket")

    def start(self) -> SingleNodeSlurm:
        self._write_config()
        self._made_run_dir = not NODE_CONF_CACHE.parent.exists()
        NODE_CONF_CACHE.parent.mkdir(parents=True, exist_ok=True)
        NODE_CONF_CACHE.symlink_to(self.root)
        self._start_munged()
        commands = {"slurmctld": [_sbin("slurmctld"), "-D", "-i", "-f", str(self.conf)],
                    "slurmd": [_sbin("slurmd"), "-D", "-N", "localhost", "-f", str(self.conf)]}
        for name, cmd in commands.items():
            # What a daemon prints before its log file is open goes to <name>.out.
            with open(self.root / "log" / f"{name}.out", "w") as out:
                self.procs[name] = subprocess.Popen(cmd, env=self.env, stdout=out,
                                                    stderr=subprocess.STDOUT,
                                                    start_new_session=True)
        self._wait(self._node_idle, 60, "the node to become idle")
        return self

    def _node_idle(self) -> bool:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}: {self.logs()}")
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], env=self.env, capture_output=True,
                             text=True, timeout=20)
        return out.returncode == 0 and out.stdout.strip() == "idle"

    def _wait(self, ready, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}: {self.logs()}")
            time.sleep(0.3)

    def logs(self) -> str:
        parts = []
        for path in sorted((self.root / "log").glob("*")) + [self.root / "munge" / "munged.log"]:
            if path.is_file():
                parts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-1500:]}")
        return "\n".join(parts)

    def queue(self) -> list[str]:
        """Ids of the jobs Slurm still has pending or running."""
        out = subprocess.run(["squeue", "-h", "-o", "%i %T"], env=self.env,
                             capture_output=True, text=True, timeout=20, check=True)
        return [line.split()[0] for line in out.stdout.splitlines()
                if line.split()[1] not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")]

    def stop(self) -> None:
        if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            subprocess.run(["scancel", "--full", "--user", "root"], env=self.env,
                           capture_output=True, timeout=20)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                try:
                    if not self.queue():
                        break
                except subprocess.SubprocessError:
                    break
                time.sleep(0.5)
        for name in reversed(list(self.procs)):  # the last started first
            proc = self.procs.pop(name)
            if proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if NODE_CONF_CACHE.is_symlink() and os.readlink(NODE_CONF_CACHE) == str(self.root):
            NODE_CONF_CACHE.unlink()
            if self._made_run_dir:
                NODE_CONF_CACHE.parent.rmdir()
        shutil.rmtree(self.root, ignore_errors=True)
