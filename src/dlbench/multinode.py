"""Cells that span nodes: the Slurm allocation they run in, one task per node started with
``srun``, and what ``srun`` says when a node's task ends badly.

A multi-node cell is one cluster job holding ``num_nodes`` nodes (the workflow asks the
scheduler for them, ``workflow/rules/benchmark.smk``). Its runner starts on the job's first
node, reads the allocation from ``scontrol`` (Snakemake's job step drops the ``SLURM_*``
variables, so they are not relied on), and starts one task per node with ``srun``, each
through ``python -m dlbench.multinode`` (``node_main``): that agent checks the node has
the GPUs the cell needs and fills in what only the node knows (its rank among the nodes,
whether it hosts the rendezvous) before it becomes the framework's own launcher.
``--kill-on-bad-exit`` ends every node's task when one ends badly, so no rendezvous is
left waiting; the runner's parent turns srun's report into a failed row naming the host.

Framework-free: the driver and both frameworks' runners import it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

CLUSTER_HINT = "run the study on a cluster: --profile profiles/slurm (or profiles/cluster-generic)"
# Placeholders the node agent replaces in its command, per node.
NODE_RANK = "{node_rank}"
NODE_NAME = "{node_name}"
IS_HOST = "{is_host}"  # "1" on the node that hosts the rendezvous, else "0"
# How long the nodes wait for each other to join (a node that never comes ends the cell
# after this, recorded, instead of holding the allocation until the job's time limit).
RENDEZVOUS_TIMEOUT_S = 300
# What Apptainer (formerly Singularity) sets inside a container: the image it runs.
CONTAINER_ENV = ("APPTAINER_CONTAINER", "SINGULARITY_CONTAINER")
# A line a node's task printed, as srun --label gives it: "<task>: <line>".
_LABEL = re.compile(r"^\s*\d+: ")
# How a worker process or node agent reports why it failed, for its parent to record:
# "dlbench-cell-error: <status> <where>: <message>".
ERROR_MARK = "dlbench-cell-error:"


def unlabelled(line: str) -> str:
    return _LABEL.sub("", line, count=1)


def reported_errors(lines: Sequence[str]) -> list[str]:
    """What workers reported with ERROR_MARK (lines already unlabelled), in order."""
    return [line[len(ERROR_MARK):].strip() for line in lines if line.startswith(ERROR_MARK)]


class MultiNodeError(RuntimeError):
    """A multi-node cell cannot start; the message says why in one line."""


@dataclass(frozen=True)
class Allocation:
    """The Slurm job a multi-node cell runs in."""

    job_id: str
    hosts: tuple[str, ...]  # node names, in the allocation's order
    here: str  # the node this process runs on: it hosts the rendezvous
    address: str  # that node's address as Slurm reaches it (NodeAddr)
    cpus_per_task: int | None  # the CPUs the job holds on each node, all for its task there

    def srun(self, nodes: int, argv: Sequence[str]) -> list[str]:
        """``argv`` once on each of the first ``nodes`` nodes (this one among them)."""
        chosen = [self.here, *[h for h in self.hosts if h != self.here]][:nodes]
        cpus = [f"--cpus-per-task={self.cpus_per_task}"] if self.cpus_per_task else []
        return [_tool("srun"), f"--jobid={self.job_id}", f"--nodes={nodes}",
                f"--ntasks={nodes}", "--ntasks-per-node=1", f"--nodelist={','.join(chosen)}",
                *cpus, "--kill-on-bad-exit=1", "--unbuffered", "--label", *argv]


def _tool(name: str) -> str:
    return shutil.which(name) or name


Runner = Callable[[Sequence[str]], str]


def _scontrol(args: Sequence[str]) -> str:
    try:
        out = subprocess.run([_tool("scontrol"), *args], capture_output=True, text=True,
                             timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MultiNodeError(f"scontrol {' '.join(args)}: {exc}") from None
    if out.returncode != 0:
        why = (out.stderr.strip().splitlines() or [f"exit code {out.returncode}"])[-1]
        raise MultiNodeError(f"scontrol {' '.join(args)}: {why}")
    return out.stdout


def fields(text: str) -> dict[str, str]:
    """``Key=value`` pairs of a ``scontrol show ... -o`` line (values have no spaces,
    except the last few of a job, which are not read here)."""
    return dict(m.groups() for m in re.finditer(r"(\S+?)=(\S*)", text))


def slurm_allocation(nodes: int, environ: Mapping[str, str] | None = None,
                     scontrol: Runner = _scontrol,
                     which: Callable[[str], str | None] = shutil.which) -> Allocation:
    """The Slurm job this process runs in, checked to hold ``nodes`` nodes."""
    environ = os.environ if environ is None else environ
    job = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
    if not job:
        raise MultiNodeError(f"num_nodes {nodes} needs a Slurm job of {nodes} nodes, and "
                             f"this is not one (SLURM_JOB_ID is unset); {CLUSTER_HINT}")
    image = next((environ[k] for k in CONTAINER_ENV if environ.get(k)), "")
    if image:
        # Slurm starts each node's task on the host, outside this image, with this
        # process's interpreter path: it would fail there or run other software.
        raise MultiNodeError(f"num_nodes {nodes}: this runner is in container image {image}, "
                             "and srun would start the nodes' tasks outside it; run the "
                             "study without --use-apptainer")
    missing = [tool for tool in ("srun", "scontrol") if which(tool) is None]
    if missing:
        raise MultiNodeError(f"num_nodes {nodes}: {' and '.join(missing)} not found on PATH "
                             f"(Slurm job {job})")
    info = fields(scontrol(["show", "job", "-o", job]))
    hosts = tuple(scontrol(["show", "hostnames", info.get("NodeList", "")]).split())
    if len(hosts) < nodes:
        raise MultiNodeError(f"num_nodes {nodes}: Slurm job {job} holds {len(hosts)} "
                             f"node(s) ({','.join(hosts) or 'none'})")
    here = environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    if here not in hosts:
        raise MultiNodeError(f"this process runs on {here}, which is not a node of Slurm job "
                             f"{job} ({','.join(hosts)})")
    address = fields(scontrol(["show", "node", "-o", here])).get("NodeAddr") or here
    return Allocation(job, hosts, here, address, _cpus_per_node(info, len(hosts)))


def _cpus_per_node(info: Mapping[str, str], nodes: int) -> int | None:
    """The CPUs each node's task may use: the job's CPUs over its nodes (a GPU job's come
    from --cpus-per-gpu, which CPUs/Task does not show), else CPUs/Task."""
    total, per_task = info.get("NumCPUs", ""), info.get("CPUs/Task", "")
    if total.isdigit() and int(total) >= nodes:
        return int(total) // nodes
    return int(per_task) if per_task.isdigit() else None


def free_port() -> int:
    """A TCP port free on this node now (the rendezvous binds it moments later)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


# srun: error: node2: task 1: Killed  /  srun: error: node2: task 1: Exited with exit code 3
_TASK_ENDED = re.compile(r"srun: error: (?P<host>\S+): tasks? (?P<tasks>[\d,-]+): (?P<what>.+)$")


@dataclass(frozen=True)
class NodeFailure:
    host: str
    task: str
    what: str

    def words(self) -> str:
        return f"node {self.host} (task {self.task}): {self.what}"


def node_failures(lines: Sequence[str]) -> list[NodeFailure]:
    """The node tasks srun reported as ended badly, first first. A task srun ended itself
    because another one failed (--kill-on-bad-exit) comes after the one that failed."""
    out = []
    for line in lines:
        m = _TASK_ENDED.search(line.strip())
        if m:
            out.append(NodeFailure(m["host"], m["tasks"], m["what"].strip()))
    return out


def failure_message(rc: int, lines: Sequence[str], worker_errors: Sequence[str]) -> str:
    """One line for a multi-node cell whose tasks ended badly: the first node srun named,
    then the first error a worker printed."""
    failed = node_failures(lines)
    parts = [failed[0].words()] if failed else []
    parts += list(worker_errors[:1])
    if not parts:
        parts = [f"srun exited with code {rc}"]
    return "; ".join(parts)


# The node agent ---------------------------------------------------------------------------


def node_rank(environ: Mapping[str, str]) -> int:
    """This node's rank among the cell's nodes (srun's node id)."""
    value = environ.get("SLURM_NODEID", "")
    return int(value) if value.isdigit() else 0


def visible_gpus(environ: Mapping[str, str]) -> list[str]:
    value = environ.get("CUDA_VISIBLE_DEVICES", "")
    return [g for g in value.split(",") if g.strip()] if value.strip() else []


def node_command(argv: Sequence[str], *, rank: int, name: str, is_host: bool) -> list[str]:
    values = {NODE_RANK: str(rank), NODE_NAME: name, IS_HOST: "1" if is_host else "0"}
    out = []
    for arg in argv:
        for key, value in values.items():
            arg = arg.replace(key, value)
        out.append(arg)
    return out


def node_main(argv: list[str] | None = None) -> int:
    """``python -m dlbench.multinode --host NODE --gpus G -- CMD...``: one node's task of a
    multi-node cell (started by srun on every node)."""
    p = argparse.ArgumentParser(prog="python -m dlbench.multinode", description=__doc__)
    p.add_argument("--host", required=True, help="the node that hosts the rendezvous")
    p.add_argument("--gpus", type=int, default=0, help="GPUs this node must have (0: CPU)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("no command after --")
    here = os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    rank = node_rank(os.environ)
    if args.gpus:
        seen = visible_gpus(os.environ)
        if len(seen) < args.gpus:
            print(f"{ERROR_MARK} failed node {here}: the cell needs {args.gpus} GPU(s) "
                  f"on each node, Slurm gave this node {len(seen)} "
                  f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')!r})",
                  file=sys.stderr, flush=True)
            return 3
    os.environ["DLBENCH_NODE"] = here
    cmd = node_command(command, rank=rank, name=here, is_host=here == args.host)
    os.execvp(cmd[0], cmd)
    return 127  # not reached


def agent(host: str, gpus: int, command: Sequence[str]) -> list[str]:
    """The node agent's argv around ``command`` (run by srun on every node)."""
    return [sys.executable, "-m", "dlbench.multinode", f"--host={host}", f"--gpus={gpus}",
            "--", *command]


if __name__ == "__main__":
    sys.exit(node_main())
