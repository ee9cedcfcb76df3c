"""Collectives launched as a CUDA graph (PARAM's ``--graph-launches``, nccl-tests' ``-G``).

PARAM's comms.py warms the collective up eagerly (``--w`` calls on a stream of their own),
captures ``--n`` of them in one CUDA graph and times ``--graph-launches`` replays of it
together. Here each replay is one timed iteration, after one untimed replay that uploads
the graph: a replay's time over ``--n`` is one collective's, and the replays' spread is
reported as any cell's. A replay launches every captured kernel at once, so the host's
launch of each collective, which most of a small blocking collective's time is, is not in
the figure.

The driver imports this module (``problem``): torch only inside ``GraphedCollectives``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def problem(launches: int, device: str, blocking: bool, device_time: bool,
            kernel: bool) -> str | None:
    """Why a cell cannot launch its collectives as a graph; None when it can (or does not)."""
    if not launches:
        return None
    if device != "gpu":
        return "CUDA graphs run on a GPU: device gpu only"
    if not blocking:
        return "a graph holds blocking collectives (blocking true, PARAM's --z 1)"
    if device_time:
        return "a graph's replays are timed on the host: device_time does not apply"
    if kernel:
        return "a graph holds the collectives alone: no compute_kernel beside them"
    return None


class GraphedCollectives:
    """``per_graph`` calls of ``call`` captured in one CUDA graph, after ``warmup`` eager
    ones on a stream of their own (as PARAM's); calling it replays the graph. Built outside
    any timed region, by every rank at the same point (the eager calls are collectives)."""

    def __init__(self, call: Callable[[Any], Any], per_graph: int, warmup: int) -> None:
        import torch

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                call(None)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            for _ in range(per_graph):
                call(None)
        self.per_graph = per_graph

    def __call__(self, batch: Any) -> None:
        self.graph.replay()
