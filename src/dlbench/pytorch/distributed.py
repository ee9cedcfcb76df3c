"""Data-parallel cells: the runner relaunches itself under torchrun, one process per device.

The same code path runs on CPU with the gloo backend (``--device cpu --num_gpus 2``), so it
is exercised where there is no GPU.
"""

from __future__ import annotations

import datetime
import os
import sys
from dataclasses import dataclass

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


def torchrun_command(nproc: int, argv: list[str], rdzv_endpoint: str | None = None) -> list[str]:
    """The torchrun command line that reruns this runner with ``argv`` on ``nproc``
    processes. A rendezvous endpoint makes it joinable from other nodes later."""
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}"]
    if rdzv_endpoint:
        cmd += ["--rdzv_backend=c10d", f"--rdzv_endpoint={rdzv_endpoint}"]
    else:
        cmd += ["--standalone", "--nnodes=1"]
    return [*cmd, "-m", "dlbench.pytorch", *argv]


def init(topo: Topology, device_type: str) -> torch.device:
    if device_type == "cuda":
        device = torch.device("cuda", topo.local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if topo.distributed:
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo",
                                timeout=datetime.timedelta(minutes=10))
    return device


def slowest_rank_times(times: list[float], device: torch.device) -> list[float]:
    """Per-iteration times of the slowest rank: a data-parallel step is as fast as its
    slowest process. One collective after the timed loop, never inside it."""
    if not dist.is_initialized():
        return times
    t = torch.tensor(times, dtype=torch.float64,
                     device=device if device.type == "cuda" else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
