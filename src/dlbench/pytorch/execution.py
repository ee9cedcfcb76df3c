"""Execution modes of a model cell: torch.compile or CUDA graphs, and the memory format.

Compilation never happens inside the measured iterations: ``first_step`` runs the first
compiled step alone and times it (the compile time), ``settle`` runs more warm-up steps
until the step time is steady (a compiled step can keep compiling, autotuning or
recording CUDA graphs for a few calls), and ``DynamoCounts`` tells whether anything was
compiled again while the iterations were measured.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dlbench.cellrun import CellError
from dlbench.launch import INDUCTOR_CACHE_ENV

# axes.COMPILE_MODES -> torch.compile's arguments.
_COMPILE_ARGS: dict[str, dict[str, Any]] = {
    "inductor": {"backend": "inductor"},
    "inductor-reduce-overhead": {"backend": "inductor", "mode": "reduce-overhead"},
    "inductor-max-autotune": {"backend": "inductor", "mode": "max-autotune"},
    # Dynamo captures the graph and replays it as CUDA graphs; no inductor code generation.
    "cudagraphs": {"backend": "cudagraphs"},
}
# Extra warm-up steps of a compiled cell end when two consecutive steps are within this
# fraction of each other, or after MAX_SETTLE_STEPS.
STEADY_TOLERANCE = 0.10
MAX_SETTLE_STEPS = 20


def compiled(module: Any, mode: str, *, device: Any = None, **options: Any) -> Any:
    """The module (or function) as the cell runs it: itself for eager, else
    ``torch.compile``'s wrapper (lazy: compilation happens in the first call, timed by
    ``first_step``); ``options`` go to torch.compile as they are. CUDA graphs on another
    ``device`` are refused in one line: dynamo would run such a cell eagerly and the
    result would name a mode that never ran."""
    if mode == "eager":
        return module
    if mode == "cudagraphs" and device is not None and torch.device(device).type != "cuda":
        raise CellError(f"compile cudagraphs captures CUDA graphs: a GPU cell only, not "
                        f"device {torch.device(device).type}")
    return torch.compile(module, **_COMPILE_ARGS[mode], **options)


def to_memory_format(module: torch.nn.Module, memory_format: str) -> torch.nn.Module:
    if memory_format == "channels_last":
        return module.to(memory_format=torch.channels_last)
    return module


def _channels_last(batch: tuple[Any, ...]) -> tuple[Any, ...]:
    out = tuple(x.contiguous(memory_format=torch.channels_last)
                if isinstance(x, torch.Tensor) and x.dim() == 4 else x for x in batch)
    for x in out:
        if isinstance(x, torch.Tensor) and x.is_cuda:
            # queued on a GPU: waited for here, as the batch's copy is (data wait)
            torch.cuda.current_stream(x.device).synchronize()
            break
    return out


def batches_in(batches: Iterator[tuple[Any, ...]], memory_format: str) -> Iterator[tuple]:
    """The batches with their 4-D tensors in the memory format (the conversion is part of
    fetching a batch, not of the step; for synthetic data it happens once)."""
    if memory_format != "channels_last":
        return batches

    def converted() -> Iterator[tuple[Any, ...]]:
        last = out = None
        for batch in batches:
            if batch is not last:  # synthetic data repeats one batch: convert it once
                last, out = batch, _channels_last(batch)
            yield out

    return converted()


def cache_state() -> dict[str, Any] | None:
    """Inductor's cache folder and whether it held anything before this cell compiled
    (a warm cache makes compile time shorter: record it beside the compile time)."""
    folder = os.environ.get(INDUCTOR_CACHE_ENV)  # set per cell by the launcher
    if not folder:
        return None
    path = Path(folder)
    warm = path.is_dir() and any(path.iterdir())
    return {"dir": folder, "warm": warm}


@dataclass
class DynamoCounts:
    """Dynamo's counters at one moment (frames compiled, graphs, graph breaks)."""

    frames: int = 0
    graphs: int = 0
    graph_breaks: int = 0

    @classmethod
    def now(cls) -> DynamoCounts:
        if "torch._dynamo" not in sys.modules:  # nothing was compiled in this process
            return cls()
        from torch._dynamo.utils import counters

        return cls(frames=int(counters["frames"]["ok"]),
                   graphs=int(counters["stats"]["unique_graphs"]),
                   graph_breaks=int(sum(counters["graph_break"].values())))


def _innermost(exc: BaseException) -> BaseException:
    seen = {id(exc)}
    while exc.__cause__ is not None and id(exc.__cause__) not in seen:
        exc = exc.__cause__
        seen.add(id(exc))
    return exc


def failure_line(exc: BaseException, mode: str) -> str:
    """The compiler's error in one line: its innermost cause's type and first line
    (dynamo's own first line only says which backend raised)."""
    inner = _innermost(exc)
    lines = [ln.strip() for ln in str(inner).splitlines() if ln.strip()]
    first = lines[0] if lines else ""
    return f"torch.compile ({mode}) failed: {type(inner).__name__}" + (f": {first}" if first else "")


def first_step(step: Callable[..., Any], batch: tuple[Any, ...], sync: Callable[[], None],
               mode: str, is_oom: Callable[[BaseException], bool]) -> float:
    """Run and time the first compiled step (compilation included). A compiler failure
    becomes a CellError with one line; the full text goes to the log (stderr)."""
    start = time.perf_counter()
    try:
        step(*batch)
        sync()
    except Exception as exc:
        if is_oom(exc):
            raise
        traceback.print_exc(file=sys.stderr)
        raise CellError(failure_line(exc, mode)) from exc
    return time.perf_counter() - start


def settle(step: Callable[..., Any], batches: Iterator[tuple[Any, ...]],
           sync: Callable[[], None], max_steps: int = MAX_SETTLE_STEPS,
           tolerance: float = STEADY_TOLERANCE) -> tuple[int, bool]:
    """Warm-up steps until two consecutive steps take about the same time: (steps run,
    whether the time became steady within ``max_steps``)."""
    previous = None
    for n in range(1, max_steps + 1):
        batch = next(batches)
        start = time.perf_counter()
        step(*batch)
        sync()
        took = time.perf_counter() - start
        if previous is not None and abs(took - previous) <= tolerance * min(took, previous):
            return n, True
        previous = took
    return max_steps, False
