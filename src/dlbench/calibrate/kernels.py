"""The calibration kernels, each a ``Kernel``: what one iteration runs and the work it does.

GEMM: C = A @ B with square n x n operands, 2 n^3 FLOPs and 3 n^2 elements of traffic.
STREAM (McCalpin's definitions, counted as STREAM counts them): copy a = b moves 2 arrays,
triad a = b + s * c moves 3 arrays, of n float32 elements each. Inputs are random (a GEMM
of zeros runs faster on some hardware than one of real data), uniform in [0, 1) as the
operator cells' (PARAM's torch.rand), so that an operator is placed under a ceiling
measured on the same kind of data: a GPU at its power limit lowers its clock by how many
bits its multipliers switch, and on an H200 a bf16 8192^3 GEMM of normal data ran 8 %
slower than one of uniform data (658 against 713 TFLOP/s, torch.utils.benchmark, 2 s each).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

# dlbench precision -> the dtype of the operands; tf32 is float32 with TF32 matmuls.
DTYPES = {"float64": torch.float64, "float32": torch.float32, "tf32": torch.float32,
          "float16": torch.float16, "bfloat16": torch.bfloat16}
GEMM_PRECISIONS = {"gpu": ("float64", "float32", "tf32", "float16", "bfloat16", "float8"),
                   "cpu": ("float64", "float32", "bfloat16", "float16")}
# FP8 matmuls (torch._scaled_mm) need NVIDIA tensor cores of compute capability 8.9 (Ada,
# Hopper) or newer; the vendors' fp8 peaks are for e4m3 with higher-precision accumulation.
FLOAT8_CAPABILITY = (8, 9)
# AMD's (ROCm), by architecture: ROCm's "capability" is the gfx version (an MI250X's reads
# 9.0), no FP8 rule. MI300's matrix cores take their own e4m3 (fnuz), MI350's the OCP one.
FLOAT8_ROCM = {"gfx942": "float8_e4m3fnuz", "gfx950": "float8_e4m3fn"}
# Sizes of the sweep: large enough to reach the plateau of each device, small enough for a
# calibration to take seconds (a 2-core CPU does about 0.1 TFLOP/s in float32).
GEMM_SIZES = {"gpu": (2048, 4096, 8192, 16384), "cpu": (256, 512, 1024)}
# float32 elements per STREAM array: far beyond the last-level cache (1 GiB on a GPU,
# 256 MiB on a CPU).
STREAM_ELEMENTS = {"gpu": 2**28, "cpu": 2**26}


@dataclass
class Kernel:
    benchmark: str  # gemm | copy | triad
    precision: str
    size: int  # n of an n x n GEMM, or elements per STREAM array
    run: Callable[[], Any]
    flops: float | None = None
    bytes: float | None = None
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.benchmark}_{self.precision}_{self.size}"


def float8_type(device: torch.device) -> torch.dtype | None:
    """The e4m3 type ``device`` multiplies FP8 matrices in (``FLOAT8_CAPABILITY``,
    ``FLOAT8_ROCM``); None where it has no FP8 matrix units."""
    if device.type != "cuda" or not hasattr(torch, "float8_e4m3fn"):
        return None
    if torch.version.hip:
        arch = getattr(torch.cuda.get_device_properties(device), "gcnArchName", "")
        name = FLOAT8_ROCM.get(arch.split(":")[0])
        return getattr(torch, name, None) if name else None
    return torch.float8_e4m3fn if torch.cuda.get_device_capability(device) \
        >= FLOAT8_CAPABILITY else None


def float8_supported(device: torch.device) -> bool:
    """Whether ``device`` multiplies FP8 matrices."""
    return float8_type(device) is not None


def gemm_float8(n: int, device: torch.device) -> Kernel:
    """C = A @ B in FP8 (e4m3) with bfloat16 output and per-tensor scales of 1, as FP8
    training and inference run it (torch._scaled_mm, which takes B column-major): 2 n^3
    FLOPs, two n x n operands of one byte and a bfloat16 result. The values are the other
    GEMMs' uniform [0, 1) data, rounded to e4m3."""
    e4m3 = float8_type(device) or torch.float8_e4m3fn  # a CPU's, for its own check
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.rand(n, n, device=device, generator=gen).to(e4m3)
    b = torch.rand(n, n, device=device, generator=gen).to(e4m3).t()
    one = torch.ones((), device=device)
    out = torch.empty(n, n, dtype=torch.bfloat16, device=device)

    def run() -> None:
        torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, out=out)

    return Kernel("gemm", "float8", n, run, flops=2.0 * n**3,
                  bytes=2.0 * n * n * a.element_size() + n * n * out.element_size(),
                  facts={"data": "uniform [0, 1)",
                         "float8": f"{str(e4m3).removeprefix('torch.float8_')} operands, "
                                   "per-tensor scales, bfloat16 output"})


def gemm(n: int, precision: str, device: torch.device) -> Kernel:
    if precision == "float8":
        return gemm_float8(n, device)
    dtype = DTYPES[precision]
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.rand(n, n, dtype=dtype, device=device, generator=gen)
    b = torch.rand(n, n, dtype=dtype, device=device, generator=gen)
    out = torch.empty(n, n, dtype=dtype, device=device)

    def run() -> None:
        torch.matmul(a, b, out=out)

    return Kernel("gemm", precision, n, run, flops=2.0 * n**3,
                  bytes=3.0 * n * n * a.element_size(), facts={"data": "uniform [0, 1)"})


def copy(n: int, device: torch.device) -> Kernel:
    b = torch.rand(n, device=device)
    a = torch.empty_like(b)
    return Kernel("copy", "float32", n, lambda: a.copy_(b), bytes=2.0 * n * b.element_size())


def triad(n: int, device: torch.device) -> Kernel:
    b = torch.rand(n, device=device)
    c = torch.rand(n, device=device)
    a = torch.empty_like(b)
    scalar = 3.0

    def run() -> None:
        torch.add(b, c, alpha=scalar, out=a)

    # STREAM counts 2 FLOPs per element for triad; its figure of merit is the bandwidth.
    return Kernel("triad", "float32", n, run, flops=2.0 * n, bytes=3.0 * n * b.element_size())
