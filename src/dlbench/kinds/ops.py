"""Operator cells: a PARAM op config (seed 003) run by ``python -m dlbench.ops``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dlbench import axes, frameworks
from dlbench.axes import AxisError
from dlbench.kinds import CellKind


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

    def command(self, params: Mapping[str, Any], output: Path, python: str,
                data_dir: str | None) -> list[str]:
        # PARAM's JSON-lines log goes beside the result: <cell>.param.json
        return [python, "-m", self.runner, *axes.argv("ops", params),
                "-o", str(output.with_suffix(".param"))]

    def inputs(self, params: Mapping[str, Any], datasets: Mapping[str, Any]) -> list[str]:
        return [params["op_config"]]  # an edited op config reruns its cells


KIND = OpsKind()
