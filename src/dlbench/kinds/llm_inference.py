"""Language-model inference cells: a batch of prompts through a decoder-only model of the
registry, then its output tokens one at a time from a static KV cache (dlbench.llm)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dlbench import axes, frameworks, models
from dlbench.axes import AxisError
from dlbench.kinds import CellKind
from dlbench.kinds.model import check_gpu_only
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
        limit = llm.context(config_opts(name, params["model_opts"]))
        total = params["prompt_length"] + params["output_length"]
        if params["prompt_length"] > limit:  # the prompt alone: not output_length's fault
            raise AxisError("prompt_length", f"{params['prompt_length']} exceeds {name}'s "
                                             f"context of {limit} positions")
        if total > limit:
            raise AxisError("output_length", f"prompt_length + output_length = {total} exceeds "
                                             f"{name}'s context of {limit} positions")

    def command(self, params: Mapping[str, Any], output: Path, python: str,
                data_dir: str | None) -> list[str]:
        return [python, "-m", self.runner, *axes.argv("llm", params)]


def config_opts(name: str, overrides: Any) -> dict[str, Any]:
    """The model's configuration under ``overrides`` (a cell's model_opts), checked: its
    fields only. The run options of a training cell (sequence_length,
    activation_checkpointing, parallel) are refused by name: the runner never reads them,
    and they would give a cell that measures the same thing another id."""
    overrides = dict(overrides or {})
    for option in llm.RUN_OPTS:
        if option in overrides:
            raise AxisError("model_opts", f"{option} is a training cell's option, unused by "
                                          f"{LlmInferenceKind.name} cells (their sequence: "
                                          "prompt_length + output_length)")
    fields = llm.config_fields(models.get(name).default_opts)
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise AxisError("model_opts", f"model {name}: unknown model_opts {', '.join(unknown)} "
                                      f"(valid: {', '.join(sorted(fields))})")
    opts = {**fields, **overrides}
    try:
        llm.check_config(opts)
    except ValueError as exc:
        raise AxisError("model_opts", str(exc)) from None
    return opts


KIND = LlmInferenceKind()
