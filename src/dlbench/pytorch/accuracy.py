"""Numerical sanity of a compiled or reduced-precision cell, as TorchBench's --accuracy.

After the measured iterations, one fixed batch goes once through the model as the cell ran
it (its precision, compile mode and memory format) and once through an eager float32 copy
of the same weights; both in eval mode, untimed. The outputs are compared by cosine
similarity and by the largest difference relative to the reference's largest magnitude
(an element-wise relative error explodes near zero). Beyond the precision's tolerance the
cell is flagged ``inaccurate``: still measured, not hidden.
"""

from __future__ import annotations

import contextlib
import copy
import math
from typing import Any

import torch

from dlbench.pytorch import precision as precision_mode
from dlbench.pytorch.steps import logits

# precision -> (least cosine similarity, largest relative error) still called accurate.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (0.99999, 1e-4),
    "float32": (0.9999, 1e-3),
    "tf32": (0.999, 1e-2),
    "float16": (0.995, 5e-2),
    "bfloat16": (0.99, 1e-1),
}


def wanted(precision: str, compile_mode: str) -> bool:
    """Cells whose arithmetic differs from eager float32 are checked."""
    return compile_mode != "eager" or precision not in ("float32", "float64")


def compare(output: torch.Tensor, reference: torch.Tensor) -> dict[str, float]:
    out = output.detach().to("cpu", torch.float64).flatten()
    ref = reference.detach().to("cpu", torch.float64).flatten()
    if out.shape != ref.shape:
        raise ValueError(f"output shape {tuple(output.shape)} differs from the reference's "
                         f"{tuple(reference.shape)}")
    if not bool(torch.isfinite(out).all()):  # NaN or inf in the output: no figure applies
        return {"cosine": math.nan, "max_rel_error": math.nan}
    norms = out.norm() * ref.norm()
    cosine = float(out.dot(ref) / norms) if norms > 0 else (1.0 if torch.equal(out, ref) else 0.0)
    scale = float(ref.abs().max()) if ref.numel() else 0.0
    diff = float((out - ref).abs().max()) if ref.numel() else 0.0
    max_rel = diff / scale if scale > 0 else (0.0 if diff == 0 else math.inf)
    return {"cosine": cosine, "max_rel_error": max_rel}


def verdict(figures: dict[str, float], precision: str) -> dict[str, Any]:
    """The figures with the tolerance they were held to and ``ok``; NaN or inf is never ok."""
    min_cosine, max_rel = TOLERANCES.get(precision, TOLERANCES["float32"])
    cosine, rel = figures["cosine"], figures["max_rel_error"]
    ok = (math.isfinite(cosine) and math.isfinite(rel) and cosine >= min_cosine
          and rel <= max_rel)
    # JSON has no NaN or infinity: such a figure is null (and never ok).
    shown = {k: (v if math.isfinite(v) else None) for k, v in figures.items()}
    return {**shown, "min_cosine": min_cosine, "max_rel_tolerance": max_rel, "ok": ok}


def _forward(module: torch.nn.Module, inputs: torch.Tensor,
             autocast: contextlib.AbstractContextManager[Any]) -> torch.Tensor:
    was_training = module.training
    module.eval()
    try:
        with torch.inference_mode(), autocast:
            return logits(module(inputs)).float().clone()
    finally:
        module.train(was_training)


def check(cell_module: torch.nn.Module, eager_module: torch.nn.Module, inputs: torch.Tensor,
          cell_inputs: torch.Tensor, precision: str,
          autocast: contextlib.AbstractContextManager[Any]) -> dict[str, Any]:
    """Compare the cell's output for ``cell_inputs`` (its dtype and memory format) with an
    eager float32 copy of ``eager_module``'s current weights on ``inputs``."""
    reference_module = copy.deepcopy(eager_module).float().to(
        memory_format=torch.contiguous_format)
    with precision_mode.tf32(False):  # float32 proper, whatever the cell's precision
        reference = _forward(reference_module, inputs.float() if inputs.is_floating_point()
                             else inputs, contextlib.nullcontext())
    del reference_module
    output = _forward(cell_module, cell_inputs, autocast)
    return verdict(compare(output, reference), precision)
