"""Operator cells: a PARAM op config (seed 003) run by ``python -m dlbench.ops``."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dlbench import axes, frameworks
from dlbench.axes import AxisError
from dlbench.kinds import CellKind, input_path_problem


@functools.lru_cache(maxsize=256)
def _file_problem(path: str, mtime_ns: int) -> str | None:  # noqa: ARG001 (the cache key)
    """Why the op config cannot be one (not JSON, no operators, an operator name of no
    form the registry resolves, a spec the grammar refuses, ...), or None: what its run
    would record as a failed input, refused before any job. Read once per file and
    version: a study's cells share a few files."""
    from dlbench.cellrun import CellError
    from dlbench.ops import precheck  # imports no framework

    try:
        precheck.check_file(path)
    except CellError as exc:
        return str(exc).removeprefix("config ")
    return None


class OpsKind(CellKind):
    name = "ops"
    result_kind = "op"
    id_axes = ("framework", "op_config", "device", "backward", "exec_mode")
    runner = "dlbench.ops"

    def id_part(self, axis: str, value: Any, params: Mapping[str, Any]) -> str | None:
        if axis == "backward":
            return "fwbw" if value else "fw"
        return None

    def check(self, params: Mapping[str, Any], datasets: Mapping[str, Any]) -> None:
        if self.name not in frameworks.get(params["framework"]).kinds:
            raise AxisError("framework", "operator benchmarks run on pytorch only")
        if params.get("compile") in ("cudagraphs", "inductor-cudagraphs") \
                and params["device"] != "gpu":
            raise AxisError("compile", f"{params['compile']} captures CUDA graphs: device "
                                       "gpu only")
        # The runner would run it with the L2 left alone (no GPU, no flush) and record on:
        # a cell whose result never says what it asked for.
        if params.get("cuda_l2_cache") == "off" and params["device"] != "gpu":
            raise AxisError("cuda_l2_cache", "off flushes a GPU's L2 cache before each call: "
                                             "device gpu only")
        # Checked here, before any job: a missing file would otherwise leave Snakemake with
        # nothing to do for the whole run (a missing input), and say it in many lines.
        path = Path(params["op_config"])
        problem = input_path_problem(str(path))
        if problem:
            raise AxisError("op_config", problem)
        if not path.is_file():
            raise AxisError("op_config", f"{path}: no such file")
        problem = _file_problem(str(path), path.stat().st_mtime_ns)
        if problem:
            raise AxisError("op_config", problem)

    def command(self, params: Mapping[str, Any], output: Path, python: str,
                data_dir: str | None) -> list[str]:
        # PARAM's JSON-lines log goes beside the result: <cell>.param.json
        return [python, "-m", self.runner, *axes.argv("ops", params),
                "-o", str(output.with_suffix(".param"))]

    def inputs(self, params: Mapping[str, Any], datasets: Mapping[str, Any]) -> list[str]:
        return [params["op_config"]]  # an edited op config reruns its cells


KIND = OpsKind()
