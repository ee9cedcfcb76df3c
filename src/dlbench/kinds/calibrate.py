"""Calibration cells: the achievable GEMM TFLOP/s and memory bandwidth of one device
(dlbench.calibrate), run once per system and device. A study asks for them with
``calibrate: true``; they form the study ``calibration`` (study.CALIBRATION_STUDY)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dlbench import axes, frameworks
from dlbench.axes import AxisError
from dlbench.kinds import CellKind


class CalibrateKind(CellKind):
    name = "calibrate"
    result_kind = "calibration"
    id_axes = ("framework", "device")
    runner = "dlbench.calibrate"

    def readable_id(self, params: Mapping[str, Any]) -> list[str]:
        framework, device = super().readable_id(params)
        return [framework, "calibrate", device]  # pytorch_calibrate_gpu_<hash>

    def check(self, params: Mapping[str, Any], datasets: Mapping[str, Any]) -> None:
        if self.name not in frameworks.get(params["framework"]).kinds:
            raise AxisError("framework", "calibration runs on pytorch only")

    def command(self, params: Mapping[str, Any], output: Path, python: str,
                data_dir: str | None) -> list[str]:
        return [python, "-m", self.runner, *axes.argv("calibrate", params)]


KIND = CalibrateKind()
