"""NVTX ranges for runners without torch (MXNet): the NVIDIA ``nvtx`` package when it is
installed, else nothing. Without a profiler attached a range costs well under a
microsecond, so runners mark ``warmup``, ``measure`` and each measured iteration always."""

from __future__ import annotations

try:
    import nvtx as _nvtx
except ImportError:  # the package is optional: ranges then cost nothing
    _nvtx = None


def push(name: str) -> None:
    if _nvtx is not None:
        _nvtx.push_range(name)


def pop() -> None:
    if _nvtx is not None:
        _nvtx.pop_range()
