"""Precision modes: plain float32/float64, TF32 math, and autocast float16/bfloat16."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class PrecisionMode:
    name: str
    # dtype of parameters and floating inputs (autocast keeps float32 master weights)
    param_dtype: torch.dtype
    autocast_dtype: torch.dtype | None
    use_grad_scaler: bool

    def autocast(self, device_type: str) -> contextlib.AbstractContextManager[Any]:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device_type, dtype=self.autocast_dtype)

    def grad_scaler(self, device_type: str) -> Any:
        if not self.use_grad_scaler:
            return None
        return torch.amp.GradScaler(device_type)


def set_tf32(device_type: str, allowed: bool) -> None:
    """TF32 for float32 matrix products and convolutions on a GPU, both or neither (PyTorch's
    default has it for convolutions only)."""
    if device_type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = allowed
        torch.backends.cudnn.allow_tf32 = allowed


@contextlib.contextmanager
def tf32(allowed: bool) -> Iterator[None]:
    """Both TF32 flags for a block, as they were after it: a float32 reference beside a
    tf32 cell, each calibration GEMM in its own precision."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def setup(precision: str, device_type: str) -> PrecisionMode:
    """Select the math mode. TF32 is its own precision: float32 cells disable it so that
    'float32' means IEEE float32 on every GPU generation."""
    set_tf32(device_type, precision == "tf32")
    if precision in ("float32", "tf32"):
        return PrecisionMode(precision, torch.float32, None, False)
    if precision == "float64":
        return PrecisionMode(precision, torch.float64, None, False)
    if precision == "float16":
        # float16 training needs loss scaling to keep small gradients representable.
        return PrecisionMode(precision, torch.float32, torch.float16, True)
    if precision == "bfloat16":
        return PrecisionMode(precision, torch.float32, torch.bfloat16, False)
    raise ValueError(f"unknown precision {precision!r}")


def pure(mode: PrecisionMode) -> PrecisionMode:
    """The same precision with the model itself in the low-precision dtype (as the PyTorch
    ParaDnn runs f16/bf16, its tensors' dtype; ParaDnn's TensorFlow code keeps float32
    master weights): no autocast, no float32 master weights, no loss scaling."""
    if mode.autocast_dtype is None:
        return mode
    return PrecisionMode(mode.name, mode.autocast_dtype, None, False)


def apply_cudnn_flags(benchmark: bool, fastest: bool) -> dict[str, Any]:
    """cuDNN options as DLBS exposes them. PyTorch has no 'fastest' switch; its nearest
    equivalent is letting the autotuner try every algorithm (benchmark_limit 0) instead of
    the default few, which favours speed over workspace size."""
    torch.backends.cudnn.benchmark = benchmark
    if fastest and hasattr(torch.backends.cudnn, "benchmark_limit"):
        torch.backends.cudnn.benchmark_limit = 0
    return library_flags()


def library_flags() -> dict[str, Any]:
    flags: dict[str, Any] = {
        "cudnn.enabled": torch.backends.cudnn.enabled,
        "cudnn.benchmark": torch.backends.cudnn.benchmark,
        "cudnn.deterministic": torch.backends.cudnn.deterministic,
        "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "num_threads": torch.get_num_threads(),
    }
    if hasattr(torch.backends.cudnn, "benchmark_limit"):
        flags["cudnn.benchmark_limit"] = torch.backends.cudnn.benchmark_limit
    return flags


def synchronizer(device: torch.device) -> Callable[[], None]:
    """A function that waits for all queued work on ``device`` (a no-op on CPU, where
    operators run synchronously)."""
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None
