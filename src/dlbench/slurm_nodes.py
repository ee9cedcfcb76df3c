"""What a Slurm cluster's nodes hold, read from ``sinfo`` before any job is submitted.

A cell asking for more GPUs on a node than any node has, or for more nodes than have that
many, more memory on a node than any has (``--mem``: the profile's mem_mb), or a partition
the cluster does not have, is refused by ``sbatch``: Snakemake then fails the job at
submission, and with it the run's table and report (they wait for every cell). A job asking
more CPUs on a node than any node has (the profile's set-threads or cpus_per_gpu), or more
time than any partition allows (runtime), may be accepted and then wait in the queue for
ever. Checked against ``sinfo`` first, each is one line naming the study and the field,
before anything runs. Where ``sinfo`` is missing or says nothing (another scheduler, no
controller reachable) nothing is checked: the check may only refuse what Slurm would
refuse.

Framework-free: the workflow's main process calls it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

# One line per node and partition: name, generic resources, CPUs, memory (MB), partition
# (the default one marked '*'), the partition's time limit.
SINFO = ["sinfo", "--noheader", "--Node", "--format=%N|%G|%c|%m|%P|%l"]
# A GRES item's socket binding, "(S:0-1)" or "(S:0,1)": not a count.
_BINDING = re.compile(r"\([^)]*\)")


@dataclass(frozen=True)
class Node:
    """One node; 0 where sinfo did not give a number (taken to have enough). ``partitions``:
    each partition the node is in, with its time limit in minutes (None: none)."""

    name: str
    gpus: int
    cpus: int
    memory_mb: int = 0
    partitions: Mapping[str, int | None] = field(default_factory=dict)


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


def _number(text: str) -> int:
    return int(text) if text.isdigit() else 0


def time_limit_minutes(text: str) -> int | None:
    """A time limit as Slurm writes it (sinfo: ``infinite``, ``30:00``, ``4:00:00``,
    ``2-00:00:00``) in whole minutes; None where it sets no limit or is not a time."""
    days, _, clock = text.strip().rpartition("-")
    fields = clock.split(":")
    if len(fields) > 3 or not all(f.isdigit() for f in fields) or days and not days.isdigit():
        return None
    # Slurm's forms: minutes, minutes:seconds, hours:minutes:seconds, and after "days-":
    # hours, hours:minutes, hours:minutes:seconds.
    if days:
        units = (3600, 60, 1)[:len(fields)]
    else:
        units = ((60,), (60, 1), (3600, 60, 1))[len(fields) - 1]
    seconds = sum(int(value) * unit for value, unit in zip(fields, units, strict=True))
    return (int(days or 0) * 86400 + seconds) // 60


def parse(sinfo_output: str) -> list[Node]:
    """The nodes of ``SINFO``'s output, once each with all its partitions (a node in several
    partitions is listed once per partition)."""
    nodes: dict[str, Node] = {}
    for line in sinfo_output.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 6 or not parts[0]:
            continue
        name, gres, cpus, memory, partition, limit = parts
        partitions = dict(nodes[name].partitions) if name in nodes else {}
        if partition.strip().rstrip("*"):
            partitions[partition.strip().rstrip("*")] = time_limit_minutes(limit)
        nodes[name] = Node(name, gpu_count(gres), _number(cpus.strip()),
                           _number(memory.strip()), partitions)
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
    """What one cell's job asks of the cluster: ``nodes`` nodes with ``gpus`` GPUs, ``cpus``
    CPUs and ``mem_mb`` MB of memory each, for ``minutes`` (0: not known, not checked), in
    one of ``partitions`` (none: any); each ``*_from`` says which setting asks for it."""

    study: str
    nodes: int
    gpus: int
    cpus: int = 0
    cpus_from: str = ""
    mem_mb: int = 0
    mem_from: str = ""
    partitions: tuple[str, ...] = ()
    partition_from: str = ""
    minutes: int = 0
    minutes_from: str = ""


def _fits(asked: int, has: int) -> bool:
    return not asked or not has or has >= asked


# What a job asks of each node beyond GPUs, checked in turn: the Request's field and the
# field naming its setting, the Node's field, the unit, what Slurm does with a job no node
# can hold, the command-line options that lower it.
_PER_NODE = (
    ("cpus", "cpus_from", "cpus", "CPUs", "the job would wait in the queue for ever",
     "--set-threads or --set-resources"),
    ("mem_mb", "mem_from", "memory_mb", "MB of memory", "Slurm would refuse the job",
     "--set-resources or --default-resources"),
)


def refusal(requests: Iterable[Request], nodes: Sequence[Node]) -> str | None:
    """One line for the first request no set of the cluster's nodes can hold, else None."""
    for request in requests:
        why = _refusal(request, nodes)
        if why:
            return f"study '{request.study}': {why}"
    return None


def _refusal(request: Request, nodes: Sequence[Node]) -> str | None:
    pool, where = nodes, "this Slurm cluster"
    known = sorted({name for node in nodes for name in node.partitions})
    if request.partitions and known:  # sinfo names the partitions: only theirs can run it
        unknown = [name for name in request.partitions if name not in known]
        if unknown:
            return (f"{request.partition_from} asks for partition '{unknown[0]}', but this "
                    f"Slurm cluster has no such partition (sinfo lists {', '.join(known)}); "
                    "Slurm would refuse the job")
        pool = [node for node in nodes if set(node.partitions) & set(request.partitions)]
        where = "partition " + ", ".join(f"'{name}'" for name in request.partitions)
    with_gpus = [node for node in pool if node.gpus >= request.gpus]
    if not with_gpus:
        most = max(node.gpus for node in pool)
        return (f"num_gpus: {request.gpus} GPUs on a node, but no node of {where} has more "
                f"than {most} (sinfo); Slurm would refuse the job")
    holding = f"with {request.gpus} GPUs " if request.gpus else ""
    fitting = with_gpus
    for asked, asked_from, has, unit, outcome, settings in _PER_NODE:
        amount = getattr(request, asked)
        fits = [node for node in fitting if _fits(amount, getattr(node, has))]
        if not fits:
            most = max(getattr(node, has) for node in fitting)
            return (f"{getattr(request, asked_from)} asks {amount} {unit} on a node, but "
                    f"no node {holding}of {where} has more than {most}"
                    f"{' MB' if unit.startswith('MB') else ''} (sinfo); {outcome} (lower it, "
                    f"e.g. {settings} on the command line)")
        fitting = fits
    if request.minutes and known:  # in a partition whose time limit allows the job's
        limits = {name: limit for node in fitting for name, limit in node.partitions.items()
                  if not request.partitions or name in request.partitions}
        longest = {name for name, limit in limits.items()
                   if limit is None or limit >= request.minutes}
        if limits and not longest:
            allows = (f"{where} allows at most" if request.partitions else
                      f"no partition {holding.replace('with', 'with nodes of')}of {where} "
                      "allows more than")
            return (f"{request.minutes_from} asks {request.minutes} minutes, but {allows} "
                    f"{max(limits.values())} (sinfo); the job would wait in the queue for "
                    "ever (lower it, e.g. --set-resources or --default-resources on the "
                    "command line)")
        fitting = [node for node in fitting if longest & set(node.partitions)]
    if len(fitting) < request.nodes:
        return (f"num_nodes: {request.nodes} nodes with {request.gpus} GPUs each, but "
                f"{where} has {len(fitting)} such nodes (sinfo); Slurm would refuse the job")
    return None


def distinct(requests: Iterable[Request]) -> list[Request]:
    """Each request once, the largest first (so that the line names the worst one)."""
    unique: dict[tuple, Request] = {}
    for request in requests:
        unique.setdefault((request.nodes, request.gpus, request.cpus, request.mem_mb,
                           request.partitions, request.minutes), request)
    return sorted(unique.values(),
                  key=lambda r: (-r.gpus, -r.nodes, -r.cpus, -r.mem_mb, -r.minutes))
