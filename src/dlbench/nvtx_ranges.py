"""NVTX ranges that profilers (nsys, ncu) use to find ``warmup``, ``measure`` and each
batch: torch.cuda.nvtx in a PyTorch process with CUDA, else the NVIDIA ``nvtx`` package
when it is installed (MXNet, other frameworks), else nothing. Without a profiler attached a
range costs well under a microsecond, so the harness marks every iteration."""

from __future__ import annotations

import sys
from collections.abc import Callable

# Around the L2 flush between an operator's measured calls (--cuda-l2-cache off): inside
# "measure" on the stack, so the ncu job excludes it by name (its nvtx_exclude).
L2_FLUSH = "l2_flush"

_impl: tuple[Callable[[str], object], Callable[[], object]] | None = None


def _choose() -> tuple[Callable[[str], object], Callable[[], object]]:
    torch = sys.modules.get("torch")  # never imported here: the runner already has it or not
    if torch is not None and torch.cuda.is_available():
        return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    try:
        import nvtx
    except ImportError:  # optional: ranges then cost nothing
        return (lambda name: None), (lambda: None)
    return nvtx.push_range, nvtx.pop_range


def push(name: str) -> None:
    global _impl
    if _impl is None:
        _impl = _choose()
    _impl[0](name)


def pop() -> None:
    global _impl
    if _impl is None:
        _impl = _choose()
    _impl[1]()
