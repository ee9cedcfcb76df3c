"""What a CPU can do natively: the ISA features that decide reduced-precision speed.

On a CPU without bfloat16 (or float16) instructions, PyTorch and oneDNN emulate those
types through float32 conversions in slow kernels: on an AVX2-only AMD EPYC (Zen 3) a
bfloat16 matmul ran about 80x slower than float32. A benchmark suite must say so rather
than hide it, and must not plan a study as if such cells were cheap. This module reads
``/proc/cpuinfo`` (framework-free: the workflow's driver uses it too) and decides which
precisions are native here. ``DLBENCH_CPUINFO`` names another cpuinfo file to read
instead, which lets a machine with native bfloat16 plan a study as one without would (and
lets the tests use saved samples).
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

CPUINFO_ENV = "DLBENCH_CPUINFO"

# The features recorded with every result: those that decide whether float16/bfloat16
# arithmetic is native (x86: AVX-512 BF16/FP16 and AMX tiles; arm64: BF16, SVE, I8MM and
# the half-precision SIMD extension).
X86_FEATURES = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16",
                "amx_fp16", "avx512_vnni", "avx_vnni")
ARM_FEATURES = ("asimd", "asimdhp", "fphp", "bf16", "sve", "sve2", "i8mm")

# Precisions whose arithmetic every CPU does natively.
ALWAYS_NATIVE = ("float32", "float64")


@dataclass(frozen=True)
class CpuInfo:
    arch: str  # "x86_64" | "aarch64" | other
    model: str
    features: tuple[str, ...]  # the subset of X86_FEATURES / ARM_FEATURES present
    logical_cpus: int
    cores: int | None  # physical cores, where cpuinfo says
    sockets: int | None
    flags: frozenset[str] = field(default=frozenset(), repr=False)

    @property
    def capability(self) -> str:
        """The SIMD level in PyTorch's words (``torch.backends.cpu.get_cpu_capability()``),
        derived from the flags so that processes without torch can record it."""
        if self.arch == "x86_64":
            if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= self.flags:
                return "AVX512"
            if {"avx2", "fma"} <= self.flags:
                return "AVX2"
            return "DEFAULT"
        if self.arch == "aarch64" and "sve" in self.flags:
            return "SVE"
        return "DEFAULT"

    def native(self, precision: str) -> bool:
        """Whether this CPU computes ``precision`` in hardware (False: emulated)."""
        if precision in ALWAYS_NATIVE:
            return True
        has = self.flags.__contains__
        if precision == "bfloat16":
            if self.arch == "x86_64":
                return has("avx512_bf16") or has("amx_bf16")
            return self.arch == "aarch64" and has("bf16")
        if precision == "float16":
            if self.arch == "x86_64":
                return has("avx512_fp16") or has("amx_fp16")
            return self.arch == "aarch64" and (has("asimdhp") or has("fphp"))
        return False  # tf32 and anything else: no CPU has it

    def emulated(self, precisions: list[str] | tuple[str, ...]) -> list[str]:
        return [p for p in precisions if not self.native(p)]

    def as_dict(self) -> dict[str, object]:
        return {"arch": self.arch, "model": self.model, "capability": self.capability,
                "features": list(self.features), "logical_cpus": self.logical_cpus,
                "cores": self.cores, "sockets": self.sockets,
                "native_precisions": [p for p in ("float32", "float64", "bfloat16", "float16")
                                      if self.native(p)]}


def _arch_of(fields: dict[str, str], default: str) -> str:
    if "flags" in fields or "vendor_id" in fields:
        return "x86_64"
    if "Features" in fields or "CPU implementer" in fields:
        return "aarch64"
    return default


def parse(text: str, default_arch: str | None = None) -> CpuInfo:
    """A CpuInfo from the text of ``/proc/cpuinfo`` (x86-64 or arm64 layout)."""
    blocks = [b for b in text.split("\n\n") if b.strip()]
    processors: list[dict[str, str]] = []
    for block in blocks:
        fields: dict[str, str] = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields.setdefault(key.strip(), value.strip())
        if "processor" in fields:
            processors.append(fields)
    if not processors:
        raise ValueError("no 'processor' entries: not a /proc/cpuinfo text")
    first = processors[0]
    arch = _arch_of(first, default_arch or platform.machine())
    flags = frozenset((first.get("flags") or first.get("Features") or "").split())
    known = X86_FEATURES if arch == "x86_64" else ARM_FEATURES
    model = first.get("model name") or first.get("Model name") or ""
    if not model and "CPU part" in first:  # arm64 names its core by implementer and part
        model = f"implementer {first.get('CPU implementer', '?')} part {first['CPU part']}"
    sockets_seen = {p["physical id"] for p in processors if "physical id" in p}
    cores_seen = {(p.get("physical id"), p["core id"]) for p in processors if "core id" in p}
    return CpuInfo(
        arch=arch, model=model, features=tuple(f for f in known if f in flags),
        logical_cpus=len(processors), cores=len(cores_seen) or None,
        sockets=len(sockets_seen) or None, flags=flags)


@cache
def this_cpu() -> CpuInfo | None:
    """This machine's CPU (or the one ``DLBENCH_CPUINFO`` describes); None where there is
    no cpuinfo to read (not Linux)."""
    path = Path(os.environ.get(CPUINFO_ENV) or "/proc/cpuinfo")
    try:
        return parse(path.read_text(errors="replace"))
    except (OSError, ValueError):
        return None


def override_problem() -> str | None:
    """One line naming ``DLBENCH_CPUINFO``'s file when it is set but is no cpuinfo text
    (checked before a study is planned, which would otherwise treat the CPU as unknown)."""
    path = os.environ.get(CPUINFO_ENV)
    if not path:
        return None
    try:
        parse(Path(path).read_text(errors="replace"))
    except OSError as exc:
        return f"{CPUINFO_ENV}={path}: {exc.strerror or exc}"
    except ValueError as exc:
        return f"{CPUINFO_ENV}={path}: {exc}"
    return None


def precision_native(precision: str, device: str, gpu_capability: tuple[int, int] | None = None
                     ) -> bool | None:
    """Whether a cell's precision is native where it ran: on the CPU from its flags, on an
    NVIDIA GPU from its compute capability (float16 from 5.3, bfloat16 and TF32 from 8.0).
    None where it cannot be told."""
    if precision in ALWAYS_NATIVE:
        return True
    if device == "cpu":
        info = this_cpu()
        return None if info is None else info.native(precision)
    if gpu_capability is None:
        return None
    if precision == "float16":
        return gpu_capability >= (5, 3)
    if precision in ("bfloat16", "tf32"):
        return gpu_capability >= (8, 0)
    return None


# -- how much slower an emulated precision is: measured in the framework's interpreter ------

PROBE_SIZE = 256


def matmul_gflops(dtypes: tuple[str, ...] = ("float32", "bfloat16", "float16"),
                  size: int = PROBE_SIZE, budget_s: float = 0.3) -> dict[str, float]:
    """GFLOP/s of a ``size``-square matmul per dtype, on one thread (a few calls each, after
    one untimed call). Imports torch: run it in the framework's interpreter."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _rates(torch, dtypes, size, budget_s)
    finally:
        torch.set_num_threads(threads)


def _rates(torch, dtypes: tuple[str, ...], size: int, budget_s: float) -> dict[str, float]:
    import time

    rates = {}
    for name in dtypes:
        a = torch.rand(size, size).to(getattr(torch, name))
        b = torch.rand(size, size).to(getattr(torch, name))
        torch.mm(a, b)  # warmup: kernel selection, packing buffers
        calls, start = 0, time.perf_counter()
        while True:
            torch.mm(a, b)
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= budget_s or calls >= 200:
                break
        rates[name] = 2 * size**3 * calls / elapsed / 1e9
    return rates


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m dlbench.cpu",
                                     description="This CPU's capabilities; with --probe, "
                                                 "matmul GFLOP/s per precision (needs torch).")
    parser.add_argument("--probe", action="store_true")
    args = parser.parse_args(argv)
    info = this_cpu()
    facts: dict[str, object] = info.as_dict() if info else {}
    if args.probe:
        facts["matmul_gflops"] = matmul_gflops()
    print(json.dumps(facts))
    return 0


def _affinity() -> frozenset[int] | None:
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity call on this platform
        return None


# The process's CPU set as it started, read when dlbench is first imported (the package
# imports this module) and so before any framework: an OpenMP runtime told to bind its
# threads (OMP_PROC_BIND) pins the main thread to one CPU as the framework loads it, after
# which the thread's own mask says 1 however many CPUs the job was given.
PROCESS_AFFINITY = _affinity()


def usable_cpus() -> int:
    """Processors this process may run on: its affinity mask as it started (a Slurm job's
    cpuset, taskset), what ``omp_get_num_procs`` counts; ``os.cpu_count()`` where there is
    none."""
    cpus = PROCESS_AFFINITY or _affinity()
    return len(cpus) if cpus else (os.cpu_count() or 1)


# The thread counts Snakemake sets to a job's threads (snakemake.shell), which the
# runners' libraries read: OpenMP, and BLAS libraries with pools of their own (MKL,
# OpenBLAS, ...). PyTorch built with MKL takes MKL_NUM_THREADS over OMP_NUM_THREADS.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def shared_threads(environ: Mapping[str, str], processes: int) -> dict[str, str]:
    """The thread counts of each of ``processes`` processes sharing this job's CPUs: each
    count of THREAD_VARIABLES set in ``environ`` (capped at the usable CPUs) divided among
    them, at least 1. Each process given the job's counts would oversubscribe its CPUs
    ``processes`` times over. OMP_NUM_THREADS is always given (the usable CPUs' share
    where it is not a count); another that is not a count is not given (left as it is)."""
    usable = usable_cpus()
    shares = {}
    for name in THREAD_VARIABLES:
        given = environ.get(name, "")
        if given.isdigit() and int(given) > 0:
            shares[name] = str(max(1, min(int(given), usable) // processes))
        elif name == "OMP_NUM_THREADS":
            shares[name] = str(max(1, usable // processes))
    return shares


if __name__ == "__main__":
    raise SystemExit(main())
