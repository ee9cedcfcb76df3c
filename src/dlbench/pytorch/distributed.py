"""Data-parallel cells: the runner relaunches itself under torchrun, one process per device.

The same code path runs on CPU with the gloo backend (``--device cpu --num_gpus 2``), so it
is exercised where there is no GPU.
"""

from __future__ import annotations

import datetime
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Topology:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def is_worker() -> bool:
    """True inside a process started by torchrun."""
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def topology() -> Topology:
    if not is_worker():
        return Topology()
    return Topology(int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]),
                    int(os.environ["WORLD_SIZE"]))


def missing_gpus(device: str, num_gpus: int) -> str | None:
    """Why a one-node GPU cell cannot start its ``num_gpus`` processes here, in one line
    (None when it can, or on a CPU): said before torchrun, whose workers would each fail
    and which would then print its own traceback."""
    if device not in ("gpu", "cuda"):
        return None
    seen = torch.cuda.device_count()
    if seen >= num_gpus:
        return None
    return (f"device gpu: {num_gpus} processes need {num_gpus} GPUs on this node; torch "
            f"{torch.__version__} sees {seen}")


def torchrun_command(nproc: int, argv: list[str], rdzv_endpoint: str | None = None, *,
                     nnodes: int = 1, rdzv_id: str | None = None,
                     rdzv_conf: str | None = None, module: str = "dlbench.pytorch") -> list[str]:
    """The torchrun command line that reruns the runner ``module`` with ``argv`` on
    ``nproc`` processes per node. A rendezvous endpoint (c10d) makes it joinable from other nodes:
    ``nnodes`` of them, each running this same command."""
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}"]
    if rdzv_endpoint:
        cmd += ["--rdzv_backend=c10d", f"--rdzv_endpoint={rdzv_endpoint}"]
        if nnodes > 1:
            cmd += [f"--nnodes={nnodes}", "--max_restarts=0"]
        if rdzv_id:
            cmd.append(f"--rdzv_id={rdzv_id}")
        if rdzv_conf:
            cmd.append(f"--rdzv_conf={rdzv_conf}")
    else:
        cmd += ["--standalone", "--nnodes=1"]
    return [*cmd, "-m", module, *argv]


def rank_hosts() -> list[str]:
    """The node each rank runs on, in rank order (one collective, outside any timing)."""
    return [str(h) for h in gather(node_name())]


def node_name() -> str:
    """This process's node, as the launcher names it (else the host name)."""
    import socket

    return os.environ.get("DLBENCH_NODE") or socket.gethostname()


def gather(value: Any) -> list[Any]:
    """Every rank's ``value`` (picklable), in rank order, on every rank (one collective,
    outside any timing)."""
    if not dist.is_initialized():
        return [value]
    values: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return values


def init(topo: Topology, device_type: str, nccl_settings: str | None = None,
         backend: str | None = None) -> torch.device:
    """This process's device and, when the cell has several, its process group (on
    ``backend``, dlbench.comms.backends: NCCL on GPUs and gloo on CPUs unless named); the
    cell's NCCL settings (the nccl_env axis) are set first, before NCCL reads the
    environment."""
    from dlbench import cellrun, nccl_env, subproc

    if is_worker():
        # torchrun starts each rank in a session of its own and cannot end them when it is
        # killed (with its launcher, kill -9): the rank dies with it, not measuring on
        # beside the next cell.
        subproc.die_with_parent(signal.SIGKILL)
    try:
        nccl_env.apply(nccl_settings)
    except ValueError as exc:
        raise cellrun.CellError(f"nccl_env: {exc}") from None
    if device_type == "cuda":
        device = torch.device("cuda", topo.local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if topo.distributed:
        dist.init_process_group(available_backend(backend, device_type),
                                timeout=datetime.timedelta(minutes=10))
    return device


def available_backend(backend: str | None, device_type: str) -> str:
    """The process group's backend for a cell on ``device_type``; CellError where it cannot
    run there or this torch was built without it."""
    from dlbench import cellrun
    from dlbench.comms import backends

    problem = backends.problem(backend, device_type)
    if problem:
        raise cellrun.CellError(f"backend {problem}")
    name = backends.resolved(backend, device_type)
    built = getattr(dist, f"is_{name}_available", None)
    if built is None or not built():
        raise cellrun.CellError(f"backend {name}: this torch {torch.__version__} was built "
                                f"without it (torch.distributed.is_{name}_available() is "
                                "not true)")
    return name


def slowest_rank_times(times: list[float], device: torch.device) -> list[float]:
    """Per-iteration times of the slowest rank: a data-parallel step is as fast as its
    slowest process. One collective after the timed loop, never inside it."""
    if not dist.is_initialized():
        return times
    t = torch.tensor(times, dtype=torch.float64,
                     device=device if device.type == "cuda" else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def all_agree(flag: bool, device: torch.device) -> bool:
    """True where every rank's ``flag`` is (one collective; ``flag`` itself in one
    process)."""
    if not dist.is_initialized():
        return flag
    t = torch.tensor([int(flag)], device=device if device.type == "cuda" else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


def multi_node_command(nodes: int, nproc: int, device: str, argv: list[str],
                       module: str) -> list[str]:
    """srun starting torchrun (``nproc`` processes of runner ``module`` with ``argv``) on
    each of ``nodes`` nodes of the Slurm job this process runs in, the rendezvous (c10d) on
    this node; on ``device`` gpu each node's agent first checks it has ``nproc`` GPUs.
    Raises multinode.MultiNodeError when this is no such job."""
    import logging

    from dlbench import multinode

    alloc = multinode.slurm_allocation(nodes)
    endpoint = f"{alloc.address}:{multinode.free_port()}"
    conf = f"is_host={multinode.IS_HOST},join_timeout={multinode.RENDEZVOUS_TIMEOUT_S}"
    torchrun = torchrun_command(nproc, argv, endpoint, nnodes=nodes,
                                rdzv_id=f"dlbench-{alloc.job_id}-{os.getpid()}",
                                rdzv_conf=conf, module=module)
    logging.getLogger(module).info("%d nodes of Slurm job %s (%s), rendezvous at %s", nodes,
                                   alloc.job_id, ",".join(alloc.hosts[:nodes]), endpoint)
    gpus = nproc if device == "gpu" else 0
    return alloc.srun(nodes, multinode.agent(alloc.here, gpus, torchrun))


def run_workers(cmd: list[str], nproc: int, output: Path | None) -> tuple[int, list[str]]:
    """Run a torchrun ``cmd`` (or srun starting one on each node) of ``nproc`` processes
    per node whose rank 0 writes ``output`` (removed first: a file there afterwards is this
    run's). The job's threads are shared among the processes: each gets its share of
    every thread count Snakemake set (``cpu.shared_threads``: OMP_NUM_THREADS alone would
    leave MKL_NUM_THREADS, which PyTorch built with MKL obeys, at the job's whole count).
    A stop signal reaches torchrun, which stops its workers (``subproc.run_tee``).
    Returns the exit code and enough of stderr for torchrun's failure report and srun's
    lines after it, srun's task labels taken off."""
    from dlbench import cpu, multinode, subproc

    if output:
        output.unlink(missing_ok=True)
    env = {**os.environ, **cpu.shared_threads(os.environ, nproc)}
    rc, lines = subproc.run_tee(cmd, env, keep=400)
    return rc, [multinode.unlabelled(line) for line in lines]


def workers_outcome(rc: int, lines: list[str], nodes: int = 1) -> tuple[str, str]:
    """Status and one line for workers that ended before rank 0 wrote the result: the first
    error a worker reported, else torchrun's report of the rank that died without a word
    (killed, or a node that never joined the rendezvous), else its exit code. A cell on
    several ``nodes`` names first the node srun reported (an out-of-memory worker stays
    ``oom``)."""
    from dlbench import multinode, torchrun_report

    timeout = multinode.RENDEZVOUS_TIMEOUT_S
    errors = multinode.reported_errors(lines)
    status, _, message = (errors[0] if errors else "").partition(" ")
    reported = torchrun_report.first_failure(lines, timeout)
    if status not in ("oom", "failed"):
        status, message = "failed", reported or f"torchrun exited with code {rc}"
    if nodes > 1 and status != "oom":
        # srun's node and exit code first, then what a worker (or torchrun) said.
        said = [message] if errors else [reported] if reported else []
        status, message = "failed", multinode.failure_message(rc, lines, said)
    return status, message


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
