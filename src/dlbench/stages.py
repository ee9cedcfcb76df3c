"""Where a cell's wall time goes: its runner's stages, each timed on the host's clock.

A cell is one process, so the stages are the process's: ``stage(name)`` charges the time
inside it to ``name``. Stages are exclusive (time inside a stage nested in another counts
for the inner one only), so they add up to at most the cell's wall time; what no stage
covers is ``other``. ``startup`` is the process starting: the time from its start (the
interpreter, imports, parsing the flags) to its cell's record starting, read from the
kernel's clock of the process (Linux; absent elsewhere), outside ``wall_time_s``, plus a
framework's import that a runner makes inside the record (``stage("startup")``).

Each measured cell spends most of its wall time outside its measured iterations when it
is short; these figures say where (``stages_s`` in a result, ``wall_<stage>_s`` columns
in the table, the report's wall-time chart).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

# In the order a cell goes through them (the table's columns and the report's bars).
NAMES = ("startup", "environment", "build", "flop_count", "compile", "warmup", "measure",
         "accuracy", "other")
_TIMED = frozenset(NAMES) - {"other"}

_totals: dict[str, float] = {}
_stack: list[str] = []
_mark = time.perf_counter()


def reset() -> None:
    """Forget every stage: a cell's record starts."""
    global _mark
    _totals.clear()
    _stack.clear()
    _mark = time.perf_counter()


def _charge(now: float) -> None:
    global _mark
    if _stack:
        _totals[_stack[-1]] = _totals.get(_stack[-1], 0.0) + now - _mark
    _mark = now


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Charge the time inside to ``name`` (one of NAMES but other)."""
    if name not in _TIMED:
        raise ValueError(f"unknown stage {name!r} (valid: {', '.join(sorted(_TIMED))})")
    _charge(time.perf_counter())
    _stack.append(name)
    try:
        yield
    finally:
        _charge(time.perf_counter())
        _stack.pop()


def process_age_s() -> float | None:
    """Seconds since this process started, from /proc (10 ms ticks); None elsewhere."""
    try:
        with open("/proc/self/stat") as f:
            # Field 22, starttime in clock ticks after boot; the name (field 2) may hold
            # spaces, so count after its closing parenthesis.
            started = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - started / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def breakdown(wall_s: float, startup_s: float | None) -> dict[str, float]:
    """The stages of the cell whose body took ``wall_s``: those that ran, ``other`` (the
    rest of ``wall_s``) and ``startup`` (``startup_s`` before the record, when known, plus
    any inside it); seconds, rounded to microseconds."""
    out = {name: round(_totals[name], 6) for name in NAMES if name in _totals}
    out["other"] = round(max(0.0, wall_s - sum(_totals.values())), 6)
    if startup_s is not None or "startup" in _totals:
        out["startup"] = round((startup_s or 0.0) + _totals.get("startup", 0.0), 6)
    return {name: out[name] for name in NAMES if name in out}


def total_s(result: dict) -> float | None:
    """The seconds a result's cell took, its process's start-up included: its stages' sum
    (start-up before the record plus the wall time), else its wall time (a result from
    before stages), else None."""
    stages = result.get("stages_s")
    if isinstance(stages, dict) and stages:
        return float(sum(v for v in stages.values() if isinstance(v, (int, float))))
    wall = result.get("wall_time_s")
    return float(wall) if isinstance(wall, (int, float)) else None
