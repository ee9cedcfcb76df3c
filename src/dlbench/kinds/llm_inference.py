"""Language-model inference cells: a batch of prompts through a decoder-only model of the
registry, then its output tokens one at a time from a static KV cache (dlbench.llm)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dlbench import axes, frameworks, models
from dlbench.axes import AxisError
from dlbench.kinds import CellKind
from dlbench.kinds.model import _check_model_opts, check_gpu_only
from dlbench.models import llm


class LlmInferenceKind(CellKind):
    name = "llm_inference"
    result_kind = "llm_inference"
    id_axes = ("framework", "model", "precision", "batch_size", "prompt_length",
               "output_length", "device")
    runner = "dlbench.llm"

    def readable_id(self, params: Mapping[str, Any]) -> list[str]:
        framework, model, *rest = super().readable_id(params)
        return [framework, model, "serve", *rest]  # pytorch_llama-tiny_serve_float32_bs1_p128_o128_cpu

    def id_part(self, axis: str, value: Any, params: Mapping[str, Any]) -> str | None:
        prefix = {"batch_size": "bs", "prompt_length": "p", "output_length": "o"}.get(axis)
        return f"{prefix}{value}" if prefix else None

    def check(self, params: Mapping[str, Any], datasets: Mapping[str, Any]) -> None:
        if self.name not in frameworks.get(params["framework"]).kinds:
            raise AxisError("framework", f"{params['framework']} does not run {self.name} cells")
        name = params["model"]
        if name not in llm.PRESETS:
            raise AxisError("model", f"{name!r} is not a language model (valid: "
                                     f"{', '.join(llm.PRESETS)})")
        check_gpu_only(params)
        spec = models.get(name)
        _check_model_opts(spec, params["model_opts"])
        limit = llm.context(spec.opts(params["model_opts"]))
        total = params["prompt_length"] + params["output_length"]
        if total > limit:
            raise AxisError("output_length", f"prompt_length + output_length = {total} exceeds "
                                             f"{name}'s context of {limit} positions")

    def command(self, params: Mapping[str, Any], output: Path, python: str,
                data_dir: str | None) -> list[str]:
        return [python, "-m", self.runner, *axes.argv("llm", params)]


KIND = LlmInferenceKind()
