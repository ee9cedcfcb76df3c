"""What a Slurm cluster's nodes hold, read from ``sinfo`` before any job is submitted.

A cell asking for more GPUs on a node than any node has, or for more nodes than have that
many, more memory on a node than any has (``--mem``: the profile's mem_mb), or a partition
the cluster does not have, is refused by ``sbatch``: Snakemake then fails the job at
submission, and with it the run's table and report (they wait for every cell). A job asking
more CPUs on a node than any node has (the profile's set-threads or cpus_per_gpu), or more
time than any partition allows (runtime), may be accepted and then wait in the queue for
ever. So does a job beyond a limit of its partition that sinfo does not print (``scontrol
show partition``: MaxNodes, MinNodes, MaxCPUsPerNode, MaxMemPerNode; measured: pending with
reason PartitionNodeLimit, PartitionConfig or MaxMemPerLimit). Checked against ``sinfo``
and ``scontrol`` first, each is one line naming the study and the field, before anything
runs. Where either is missing or says nothing (another scheduler, no controller reachable)
nothing of its is checked: the check may only refuse what Slurm would refuse.
(MaxMemPerCPU is not a refusal: Slurm raises such a job's CPUs per task instead.)

Framework-free: the workflow's main process calls it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

# One line per node and partition: name, generic resources, CPUs, memory (MB), partition
# (the default one marked '*'), the partition's time limit.
SINFO = ["sinfo", "--noheader", "--Node", "--format=%N|%G|%c|%m|%P|%l"]
# A GRES item's socket binding, "(S:0-1)" or "(S:0,1)": not a count.
_BINDING = re.compile(r"\([^)]*\)")


# One line per partition, its settings as Key=Value words.
SCONTROL_PARTITIONS = ["scontrol", "show", "partition", "--oneliner"]


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


@dataclass(frozen=True)
class Limits:
    """What a partition allows one job beyond its nodes and time (``scontrol show
    partition``); 0 where it sets no limit."""

    max_nodes: int = 0
    min_nodes: int = 0
    max_cpus_per_node: int = 0
    max_mem_per_node_mb: int = 0


def change_hint(change: str, *keys: str) -> str:
    """Where to change what a cell's job asks: the profile's ``keys`` (set-threads,
    set-resources, default-resources), in a copy of the profile. Not those options on the
    command line: Snakemake 9 reads a profile's keys as their defaults, so a --set-resources
    replaces the profile's whole set-resources, and every rule's other settings there
    (cpus_per_gpu, runtime, slurm_partition) are silently dropped from its jobs."""
    return (f"{change} in the profile's {' or '.join(keys)}, in a copy of the profile: on the "
            f"command line, {' or '.join(f'--{key}' for key in keys)} would replace the "
            "profile's whole entry, every rule's other settings in it")


class _PartitionLimit(NamedTuple):
    """One limit of Limits: the Request's field it bounds and the field naming its setting
    (None: num_nodes), the Limits' field and its scontrol key, the unit, whether it is the
    least the partition takes, where to lower it (change_hint)."""

    asked: str
    asked_from: str | None
    limit: str
    key: str
    unit: str
    least: bool = False
    lower: str = ""


# A partition's limits on a job, checked in turn.
_PARTITION_LIMITS = (
    _PartitionLimit("nodes", None, "max_nodes", "MaxNodes", "nodes"),
    _PartitionLimit("nodes", None, "min_nodes", "MinNodes", "nodes", least=True),
    _PartitionLimit("cpus", "cpus_from", "max_cpus_per_node", "MaxCPUsPerNode",
                    "CPUs on a node",
                    lower=f" ({change_hint('lower it', 'set-threads', 'set-resources')})"),
    _PartitionLimit("mem_mb", "mem_from", "max_mem_per_node_mb", "MaxMemPerNode",
                    "MB of memory on a node",
                    lower=f" ({change_hint('lower it', 'set-resources', 'default-resources')})"),
)
# Memory as scontrol may print it: megabytes, or with a unit.
_MEGABYTES = {"": 1, "M": 1, "G": 1024, "T": 1024 ** 2}


def _limit(key: str, text: str) -> int:
    if key == "MaxMemPerNode" and text[-1:].upper() in _MEGABYTES and text[:-1].isdigit():
        return int(text[:-1]) * _MEGABYTES[text[-1].upper()]
    return _number(text)  # UNLIMITED, N/A: no limit


def parse_partitions(scontrol_output: str) -> dict[str, Limits]:
    """Each partition's Limits from ``SCONTROL_PARTITIONS``'s output."""
    partitions = {}
    for line in scontrol_output.splitlines():
        words = dict(word.partition("=")[::2] for word in line.split() if "=" in word)
        if words.get("PartitionName"):
            partitions[words["PartitionName"]] = Limits(**{
                row.limit: _limit(row.key, words.get(row.key, "")) for row in _PARTITION_LIMITS})
    return partitions


def read_partition_limits(run: Callable[[Sequence[str]], str] | None = None
                          ) -> dict[str, Limits]:
    """Each partition's Limits; none where scontrol cannot tell."""
    if run is None:
        if shutil.which(SCONTROL_PARTITIONS[0]) is None:
            return {}
        run = _run
    try:
        return parse_partitions(run(SCONTROL_PARTITIONS))
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}


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
# can hold, the profile's keys that lower it.
_PER_NODE = (
    ("cpus", "cpus_from", "cpus", "CPUs", "the job would wait in the queue for ever",
     ("set-threads", "set-resources")),
    ("mem_mb", "mem_from", "memory_mb", "MB of memory", "Slurm would refuse the job",
     ("set-resources", "default-resources")),
)


def refusal(requests: Iterable[Request], nodes: Sequence[Node],
            limits: Mapping[str, Limits] | None = None) -> str | None:
    """One line for the first request no set of the cluster's nodes can hold, or no
    partition's ``limits`` allow (read_partition_limits), else None; where more would be
    refused, it counts them and names their studies, so that one run finds them all."""
    refused = [(request, why) for request in requests
               if (why := _refusal(request, nodes, limits or {}))]
    if not refused:
        return None
    (first, why), rest = refused[0], refused[1:]
    line = f"study '{first.study}': {why}"
    if rest:
        studies = ", ".join(f"'{name}'" for name in dict.fromkeys(r.study for r, _ in rest))
        line += (f" (and {_count(len(rest), 'other job shape')} would be refused too, of "
                 f"{'study' if ',' not in studies else 'studies'} {studies})")
    return line


@dataclass(frozen=True)
class _Beyond:
    """A limit of a partition that a request is beyond: the row of _PARTITION_LIMITS, what
    the request asks and what the partition allows."""

    row: _PartitionLimit
    asked: int
    limit: int

    def short(self, partition: str) -> str:
        return f"'{partition}' {self.row.key} {self.limit}"


def _beyond(request: Request, limits: Limits | None) -> _Beyond | None:
    """The first of _PARTITION_LIMITS that ``request`` is beyond; None where the partition
    allows the job, or scontrol did not describe it."""
    for row in _PARTITION_LIMITS if limits else ():
        asked, limit = getattr(request, row.asked), getattr(limits, row.limit)
        if asked and limit and (asked < limit if row.least else asked > limit):
            return _Beyond(row, asked, limit)
    return None


def _limit_refusal(request: Request, fitting: Sequence[Node],
                   limits: Mapping[str, Limits]) -> str | None:
    """Why no partition that could run the job takes it, else None: those of the nodes that
    fit it whose time limit allows it, among those the job names."""
    names = sorted({name for node in fitting for name, minutes in node.partitions.items()
                    if (not request.minutes or minutes is None or minutes >= request.minutes)
                    and (not request.partitions or name in request.partitions)})
    beyond = [_beyond(request, limits.get(name)) for name in names]
    if not names or not all(beyond):
        return None
    first, row = beyond[0], beyond[0].row
    others = ", ".join(b.short(name) for name, b in zip(names[1:], beyond[1:], strict=True))
    if row.asked_from:  # a resource: what asks it, how much and of what
        asked, limit = f"{getattr(request, row.asked_from)} asks {first.asked} {row.unit}", \
            first.limit
    else:  # the axis itself is the count of nodes
        asked, limit = f"num_nodes: {first.asked}", _count(first.limit, "node")
    return (f"{asked}, but partition '{names[0]}' "
            f"{'takes at least' if row.least else 'allows at most'} {limit} "
            f"({row.key}, scontrol show partition)"
            + (f", nor does any other partition take it ({others})" if others else "")
            + f"; the job would wait in the queue for ever{row.lower}")


def _refusal(request: Request, nodes: Sequence[Node],
             limits: Mapping[str, Limits]) -> str | None:
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
    holding = f"with {_count(request.gpus, 'GPU')} " if request.gpus else ""
    fitting = with_gpus
    for asked, asked_from, has, unit, outcome, settings in _PER_NODE:
        amount = getattr(request, asked)
        fits = [node for node in fitting if _fits(amount, getattr(node, has))]
        if not fits:
            most = max(getattr(node, has) for node in fitting)
            return (f"{getattr(request, asked_from)} asks {amount} {unit} on a node, but "
                    f"no node {holding}of {where} has more than {most}"
                    f"{' MB' if unit.startswith('MB') else ''} (sinfo); {outcome} "
                    f"({change_hint('lower it', *settings)})")
        fitting = fits
    if request.minutes and known:  # in a partition whose time limit allows the job's
        times = {name: limit for node in fitting for name, limit in node.partitions.items()
                  if not request.partitions or name in request.partitions}
        longest = {name for name, limit in times.items()
                   if limit is None or limit >= request.minutes}
        if times and not longest:
            allows = (f"{where} allows at most" if request.partitions else
                      f"no partition {holding.replace('with', 'with nodes of')}of {where} "
                      "allows more than")
            return (f"{request.minutes_from} asks {request.minutes} minutes, but {allows} "
                    f"{max(times.values())} (sinfo); the job would wait in the queue for "
                    f"ever ({change_hint('lower it', 'set-resources', 'default-resources')})")
        fitting = [node for node in fitting if longest & set(node.partitions)]
    if len(fitting) < request.nodes:
        each = f" with {_count(request.gpus, 'GPU')} each" if request.gpus else ""
        return (f"num_nodes: {_count(request.nodes, 'node')}{each}, but {where} has "
                f"{_count(len(fitting), 'such node')} (sinfo); Slurm would refuse the job")
    return _limit_refusal(request, fitting, limits)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def distinct(requests: Iterable[Request]) -> list[Request]:
    """Each request once, the largest first (so that the line names the worst one)."""
    unique: dict[tuple, Request] = {}
    for request in requests:
        unique.setdefault((request.nodes, request.gpus, request.cpus, request.mem_mb,
                           request.partitions, request.minutes), request)
    return sorted(unique.values(),
                  key=lambda r: (-r.gpus, -r.nodes, -r.cpus, -r.mem_mb, -r.minutes))
