"""The command lines of a profile job, as argument lists (nothing goes through a shell).

A plan is the ordered steps of one tool on one cell: the profiled run of the cell's runner
(the launcher's own command line, with the profile's iteration counts) under the tool,
then the tool's exports. Each tool module (``dlbench.profiling.tools``) builds its plan from
these pieces; settings come from ``config.settings`` and values are passed as single
arguments, never split or interpreted by a shell.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlbench import launch

RESULT = "result.json"  # the profiled run's own result, beside the profile


class ProfileError(RuntimeError):
    """A profile job's failure, said in one line that starts with the tool's name."""


@dataclass
class Step:
    name: str  # what the step does, for messages
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # added to the job's environment
    stdout: str | None = None  # file in the profile folder that receives stdout
    remove_first: list[str] = field(default_factory=list)  # globs deleted before the step
    runs_cell: bool = False  # the step that runs the cell (its result is checked)


@dataclass
class Plan:
    tool: str
    steps: list[Step]
    binaries: list[tuple[str, str]]  # (binary, config key that sets it)
    artifacts: dict[str, str]  # name -> path in the profile folder


def iteration_keys(kind: str) -> tuple[str, str]:
    """The axes of a cell's (measured, warmup) iterations, as the axis table gives them to
    its kind: batches (model cells, a language model's generations) or iterations (operator
    and collective cells)."""
    from dlbench import axes

    batches = ("num_batches", "num_warmup_batches")
    return batches if kind in axes.get(batches[0]).kinds else ("iterations", "warmup")


def profiled_params(cell: dict[str, Any], measured: int | None,
                    warmup: int | None) -> dict[str, Any]:
    """The cell's parameters with the profile's iteration counts (None: the cell's own)."""
    params = dict(cell["params"])
    measured_key, warmup_key = iteration_keys(cell["kind"])
    if measured is not None:
        params[measured_key] = measured
    if warmup is not None:
        params[warmup_key] = warmup
    return params


def runner_argv(cell: dict[str, Any], out_dir: Path, python: str,
                iterations: tuple[int | None, int | None],
                data_dir: str | None = None) -> list[str]:
    """The launcher's command line of the cell, writing its result into the profile folder;
    ``iterations``: the profile's (measured, warmup), from ``Profiler.iterations``."""
    profiled = {**cell, "params": profiled_params(cell, *iterations)}
    # Every runner has a resource monitor; it stays off while a tool profiles.
    return [*launch.runner_command(profiled, out_dir / RESULT, python, data_dir),
            *iteration_flags(cell["kind"], *iterations), "--monitor_interval_ms=0"]


def iteration_flags(kind: str, measured: int | None, warmup: int | None) -> list[str]:
    """The profile's iteration counts as runner flags, for a kind that has no axes of them
    (a calibration cell: its runner's --iterations and --warmup per kernel), whose
    command line would otherwise leave them out, the runner's defaults measured."""
    from dlbench import axes

    measured_key, warmup_key = iteration_keys(kind)
    if kind in axes.get(measured_key).kinds:
        return []
    return [*([f"--iterations={measured}"] if measured is not None else []),
            *([f"--warmup={warmup}"] if warmup is not None else [])]


def missing_binary(plan: Plan) -> str | None:
    """The one-line error for the first executable of the plan that cannot be found."""
    for binary, key in plan.binaries:
        if shutil.which(binary) is None:
            where = "is not an executable file" if "/" in binary else "not found on PATH"
            return (f"{plan.tool}: binary '{binary}' {where} "
                    f"(set profiling.tools.{plan.tool}.{key})")
    return None
