"""NVTX ranges that profilers (nsys, ncu) use to find ``warmup``, ``measure`` and each
batch: torch's own NVTX binding in a PyTorch process whose torch build has one (a CUDA
build, with or without a visible GPU: a CPU cell's ranges are captured too), else the
NVIDIA ``nvtx`` package when it is installed (MXNet, other frameworks), else nothing.
Without a profiler attached a range costs well under a microsecond, so the harness marks
every iteration.

A profile job whose tool waits for a range (nsys's ``--capture-range=nvtx``, ncu's
``--nvtx-include``) sets ``NEEDED`` in the profiled run's environment to the setting that
does without them; a process with no binding then fails at its first range, in one line
naming that setting, instead of running a whole measurement that the tool never captures."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

# Around the L2 flush between an operator's measured calls (--cuda-l2-cache off): inside
# "measure" on the stack, so the ncu job excludes it by name (its nvtx_exclude).
L2_FLUSH = "l2_flush"
# Set by a profile job that needs the ranges: the setting without them (capture_range: none).
NEEDED = "DLBENCH_NVTX_NEEDED"

_impl: tuple[Callable[[str], object], Callable[[], object]] | None = None


class NoNvtxError(RuntimeError):
    """A profiler waits for NVTX ranges that this process cannot push."""


def _choose() -> tuple[Callable[[str], object], Callable[[], object]]:
    torch = sys.modules.get("torch")  # never imported here: the runner already has it or not
    # torch._C._nvtx exists in CUDA builds whether or not a GPU is visible; torch.cuda.nvtx
    # of a CPU-only build raises on every call.
    if torch is not None and hasattr(torch._C, "_nvtx"):
        return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    try:
        import nvtx
    except ImportError:  # optional: ranges then cost nothing
        needed = os.environ.get(NEEDED)
        if needed:
            raise NoNvtxError(
                "the profiler waits for NVTX ranges, but this process has no NVTX binding "
                "(a torch build without CUDA, no 'nvtx' package): pip install nvtx in the "
                f"framework's environment, or set {needed}") from None
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
