"""What a Slurm cluster's nodes hold, read from ``sinfo`` before any job is submitted.

A cell asking for more GPUs on a node than any node has, or for more nodes than have that
many, is refused by ``sbatch``: Snakemake then fails the job at submission, and with it the
run's table and report (they wait for every cell). A job asking more CPUs on a node than any
node has (the profile's set-threads or cpus_per_gpu) may be accepted and then wait in the
queue for ever. Checked against ``sinfo`` first, either is one line naming the study and the
field, before anything runs. Where ``sinfo`` is missing
or says nothing (another scheduler, no controller reachable) nothing is checked: the
check may only refuse what Slurm would refuse.

Framework-free: the workflow's main process calls it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

# One line per node and partition: name, generic resources, CPUs.
SINFO = ["sinfo", "--noheader", "--Node", "--format=%N|%G|%c"]
# A GRES item's socket binding, "(S:0-1)" or "(S:0,1)": not a count.
_BINDING = re.compile(r"\([^)]*\)")


@dataclass(frozen=True)
class Node:
    name: str
    gpus: int
    cpus: int


def gpu_count(gres: str) -> int:
    """GPUs in a node's generic resources as sinfo prints them (%G): ``gpu:4``,
    ``gpu:a100:4(S:0-1)``, ``gpu:a100:2,gpu:v100:2`` (4), ``gpu`` (1), ``(null)`` (0)."""
    total = 0
    for item in _BINDING.sub("", gres).split(","):
        fields = item.strip().split(":")
        if fields[0] != "gpu":
            continue
        count = fields[-1] if len(fields) > 1 else "1"
        total += int(count) if count.isdigit() else 1  # "gpu:a100": one of that type
    return total


def parse(sinfo_output: str) -> list[Node]:
    """The nodes of ``SINFO``'s output, once each (a node in several partitions is listed
    once per partition)."""
    nodes: dict[str, Node] = {}
    for line in sinfo_output.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3 or not parts[0]:
            continue
        name, gres, cpus = parts
        nodes[name] = Node(name, gpu_count(gres), int(cpus) if cpus.isdigit() else 0)
    return list(nodes.values())


def read_nodes(run: Callable[[Sequence[str]], str] | None = None) -> list[Node] | None:
    """The cluster's nodes, or None where sinfo cannot tell (not installed, no answer)."""
    if run is None:
        if shutil.which(SINFO[0]) is None:
            return None
        run = _run
    try:
        nodes = parse(run(SINFO))
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return nodes or None


def _run(argv: Sequence[str]) -> str:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=30,
                          check=True).stdout


@dataclass(frozen=True)
class Request:
    """What one cell's job asks of the cluster: ``nodes`` nodes with ``gpus`` GPUs and
    ``cpus`` CPUs each (0: not known, not checked); ``cpus_from`` says which setting asks
    for those CPUs."""

    study: str
    nodes: int
    gpus: int
    cpus: int = 0
    cpus_from: str = ""


def refusal(requests: Iterable[Request], nodes: Sequence[Node]) -> str | None:
    """One line for the first request no set of the cluster's nodes can hold, else None."""
    for request in requests:
        with_gpus = [node for node in nodes if node.gpus >= request.gpus]
        if not with_gpus:
            most = max(node.gpus for node in nodes)
            return (f"study '{request.study}': num_gpus: {request.gpus} GPUs on a node, but "
                    f"no node of this Slurm cluster has more than {most} (sinfo); Slurm "
                    "would refuse the job")
        # A node whose CPUs sinfo did not give (0) is taken to have enough.
        fitting = [node for node in with_gpus
                   if not request.cpus or not node.cpus or node.cpus >= request.cpus]
        if not fitting:
            most = max(node.cpus for node in with_gpus)
            where = f"with {request.gpus} GPUs " if request.gpus else ""
            return (f"study '{request.study}': {request.cpus_from} asks {request.cpus} CPUs on "
                    f"a node, but no node {where}of this Slurm cluster has more than {most} "
                    "(sinfo); the job would wait in the queue for ever (lower it, e.g. "
                    "--set-threads or --set-resources on the command line)")
        if len(fitting) < request.nodes:
            return (f"study '{request.study}': num_nodes: {request.nodes} nodes with "
                    f"{request.gpus} GPUs each, but this Slurm cluster has {len(fitting)} "
                    "such nodes (sinfo); Slurm would refuse the job")
    return None


def distinct(requests: Iterable[Request]) -> list[Request]:
    """Each request once, the largest first (so that the line names the worst one)."""
    unique: dict[tuple[int, int, int], Request] = {}
    for request in requests:
        unique.setdefault((request.nodes, request.gpus, request.cpus), request)
    return sorted(unique.values(), key=lambda r: (-r.gpus, -r.nodes, -r.cpus))
