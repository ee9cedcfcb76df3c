"""A real two-node Slurm on one machine, for tests: each slurmd in a network namespace of
its own (and a UTS namespace for its hostname), joined by veth pairs to a bridge where
slurmctld listens.

All traffic stays between the namespaces and the bridge made here (a private /24 that no
route of the machine uses). A node's slurmd runs in a mount namespace of its own where a
hosts file of the cluster's names is bound over /etc/hosts (its jobs inherit it). The nodes share this machine's file system, as cluster nodes share theirs.
``stop()`` ends every process in the namespaces, then the daemons, and removes the
namespaces, the links and the bridge.

Needs what tests/slurm/cluster.py needs, plus ``ip`` (iproute2) and ``unshare``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import stat
import subprocess
from pathlib import Path

from cluster import NODE_CONF_CACHE, SingleNodeSlurm, _free_port, _sbin, missing_requirements

SUBNET = "10.213.77"
BRIDGE = "dlbbr0"
# slurmctld runs on this machine and must be named as it is.
CONTROLLER = socket.gethostname().split(".")[0]


def missing_two_node_requirements() -> str | None:
    why = missing_requirements()
    if why:
        return why
    for tool in ("ip", "unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (iproute2, util-linux)"
    out = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True)
    if f" {SUBNET}." in out.stdout or BRIDGE in out.stdout:
        return f"{SUBNET}.0/24 or {BRIDGE} is in use on this machine"
    probe = "dlbench-probe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot make network namespaces here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str, netns: str | None = None) -> None:
    cmd = ["ip", *(["-n", netns] if netns else []), *args]
    subprocess.run(cmd, check=True, capture_output=True, text=True)


class TwoNodeSlurm(SingleNodeSlurm):
    """node1 and node2 (``cpus`` CPUs and ``gpus`` fake GPUs each) and a controller."""

    def __init__(self, cpus: int = 4, gpus: int = 2, memory_mb: int = 16000):
        super().__init__(cpus=cpus, gpus=gpus, memory_mb=memory_mb)
        self.nodes = ("node1", "node2")
        self.addresses = {name: f"{SUBNET}.{11 + i}" for i, name in enumerate(self.nodes)}
        self.netns = {name: f"dlbench-{name}" for name in self.nodes}
        self._links: list[str] = []
        self._namespaces: list[str] = []

    # Network --------------------------------------------------------------------------

    def _network(self) -> None:
        _ip("link", "add", BRIDGE, "type", "bridge")
        self._links.append(BRIDGE)
        _ip("addr", "add", f"{SUBNET}.1/24", "dev", BRIDGE)
        _ip("link", "set", BRIDGE, "up")
        hosts = "".join(f"{addr} {name}\n" for name, addr in self.addresses.items())
        hosts = f"127.0.0.1 localhost\n{SUBNET}.1 {CONTROLLER}\n{hosts}"
        (self.root / "hosts").write_text(hosts)
        for i, name in enumerate(self.nodes, start=1):
            ns, outside = self.netns[name], f"dlbv{i}"
            _ip("netns", "add", ns)
            self._namespaces.append(ns)
            _ip("link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", ns)
            self._links.append(outside)
            _ip("link", "set", outside, "master", BRIDGE)
            _ip("link", "set", outside, "up")
            _ip("addr", "add", f"{self.addresses[name]}/24", "dev", "eth0", netns=ns)
            _ip("link", "set", "eth0", "up", netns=ns)
            _ip("link", "set", "lo", "up", netns=ns)

    def _write_config(self) -> None:
        for sub in ("state", "spool", "log", "dev", "munge"):
            (self.root / sub).mkdir()
        for i in range(self.gpus):
            os.mknod(self.root / "dev" / f"nvidia{i}", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        nodes = "\n".join(
            f"NodeName={name} NodeAddr={addr} NodeHostname={name} CPUs={self.cpus} "
            f"RealMemory={self.memory_mb} Gres=gpu:{self.gpus} State=UNKNOWN"
            for name, addr in self.addresses.items())
        root = self.root
        (root / "slurm.conf").write_text(f"""\
# A two-node Slurm for the workflow tests (tests/slurm/two_nodes.py).
ClusterName=dlbench-two
SlurmctldHost={CONTROLLER}({SUBNET}.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={root}/log/jobcomp.txt
MailProg=/bin/true
MinJobAge=300
KillWait=5
SlurmdParameters=config_overrides
GresTypes=gpu
{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
        (root / "gres.conf").write_text(
            f"NodeName={','.join(self.nodes)} Name=gpu File={root}/dev/nvidia[0-{self.gpus - 1}]\n")

    def start(self) -> TwoNodeSlurm:
        try:
            self._network()
            self._write_config()
            self._made_run_dir = not NODE_CONF_CACHE.parent.exists()
            NODE_CONF_CACHE.parent.mkdir(parents=True, exist_ok=True)
            NODE_CONF_CACHE.symlink_to(self.root)
            self._start_munged()
            for name in self.nodes:
                (self.root / "spool" / name).mkdir()
            daemons = {"slurmctld": [_sbin("slurmctld"), "-D", "-i", "-f", str(self.conf)]}
            for name in self.nodes:
                # nsenter keeps this machine's /sys (cgroups), which ip netns exec would not.
                daemons[f"slurmd-{name}"] = [
                    "nsenter", f"--net=/run/netns/{self.netns[name]}", "--",
                    "unshare", "--uts", "--mount", "--propagation", "private", "--",
                    "sh", "-c", 'mount --bind "$4" /etc/hosts && hostname "$1" && '
                                'exec "$2" -D -N "$1" -f "$3"', "sh",
                    name, _sbin("slurmd"), str(self.conf), str(self.root / "hosts")]
            for name, cmd in daemons.items():
                with open(self.root / "log" / f"{name}.out", "w") as out:
                    self.procs[name] = subprocess.Popen(cmd, env=self.env, stdout=out,
                                                        stderr=subprocess.STDOUT,
                                                        start_new_session=True)
            self._wait(self._nodes_idle, 90, "both nodes to become idle")
        except BaseException:
            self.stop()
            raise
        return self

    def _nodes_idle(self) -> bool:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}: {self.logs()}")
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], env=self.env,
                             capture_output=True, text=True, timeout=20)
        states = dict(line.split() for line in out.stdout.splitlines() if line.strip())
        return out.returncode == 0 and all(states.get(n) == "idle" for n in self.nodes)

    def pids_in(self, node: str) -> list[int]:
        """Processes of a node's namespace (its slurmd and whatever jobs run there)."""
        out = subprocess.run(["ip", "netns", "pids", self.netns[node]], capture_output=True,
                             text=True)
        return [int(p) for p in out.stdout.split()]

    def job_processes(self, node: str) -> list[str]:
        """Command lines of a node's processes other than its slurmd."""
        slurmd = self.procs.get(f"slurmd-{node}")
        out = []
        for pid in self.pids_in(node):
            if slurmd is not None and pid == slurmd.pid:
                continue
            try:
                out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                           .decode(errors="replace").strip())
            except OSError:
                continue
        return out

    def stop(self) -> None:
        super().stop()  # the jobs, the daemons, the folder
        for ns in self._namespaces:
            for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                      text=True).stdout.split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        for link in reversed(self._links):
            subprocess.run(["ip", "link", "del", link], capture_output=True)
        self._namespaces.clear()
        self._links.clear()
