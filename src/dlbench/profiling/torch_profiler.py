"""torch.profiler over a few measured iterations, inside the PyTorch runner.

The runner hands this hook to its timed loop: the profiler starts with the measured
iterations and steps after each one, following ``torch.profiler.schedule(wait, warmup,
active)``; when the active iterations are done it writes a Chrome/Perfetto trace
(``trace.json``, with device kernels on CUDA) and the operator table (``operators.json``:
name, calls, self and total CPU and device time, FLOPs where known, memory). The
workflow's driver turns the table into Parquet (``python -m dlbench.profiling tables``):
this side needs nothing but torch.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from dlbench import atomic

TRACE = "trace.json"
OPERATORS = "operators.json"
DEFAULT_SCHEDULE = (1, 1, 3)  # wait, warmup, active


def parse_schedule(text: str) -> tuple[int, int, int]:
    """``WAIT,WARMUP,ACTIVE`` measured iterations (the runner flag's type)."""
    try:
        wait, warmup, active = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected WAIT,WARMUP,ACTIVE iteration counts, got {text!r}") from None
    if wait < 0 or warmup < 0 or active < 1:
        raise argparse.ArgumentTypeError(f"needs WAIT >= 0, WARMUP >= 0, ACTIVE >= 1, got {text!r}")
    return wait, warmup, active


def _first_attr(obj: Any, *names: str) -> Any:
    """The first of ``names`` that ``obj`` has (torch renamed cuda_* to device_* in 2.4)."""
    for name in names:
        if hasattr(obj, name):
            return getattr(obj, name)
    return None


def _device(event: Any, with_device: bool, *names: str) -> Any:
    return _first_attr(event, *names) if with_device else None


def operator_rows(averages: Any, with_device: bool) -> list[dict[str, Any]]:
    """One row per operator of ``profile.key_averages()``; times in microseconds, memory in
    bytes, device columns null when no device activity was profiled, FLOPs null when
    PyTorch has no formula for the operator."""
    return [{
        "name": e.key,
        "calls": int(e.count),
        "self_cpu_time_us": float(e.self_cpu_time_total),
        "cpu_time_total_us": float(e.cpu_time_total),
        "self_device_time_us": _device(e, with_device, "self_device_time_total",
                                       "self_cuda_time_total"),
        "device_time_total_us": _device(e, with_device, "device_time_total", "cuda_time_total"),
        "flops": float(e.flops) if getattr(e, "flops", 0) else None,
        "self_cpu_memory_bytes": int(e.self_cpu_memory_usage),
        "cpu_memory_bytes": int(e.cpu_memory_usage),
        "self_device_memory_bytes": _device(e, with_device, "self_device_memory_usage",
                                            "self_cuda_memory_usage"),
        "device_memory_bytes": _device(e, with_device, "device_memory_usage",
                                       "cuda_memory_usage"),
        "is_user_annotation": bool(getattr(e, "is_user_annotation", False)),
    } for e in averages]


class TorchProfilerHook:
    """Phase hook (measure_start / iteration_end / measure_end) around torch.profiler."""

    def __init__(self, out_dir: str | os.PathLike[str], wait: int = 1, warmup: int = 1,
                 active: int = 3, *, device_type: str = "cpu") -> None:
        self.out_dir = Path(out_dir)
        self.schedule = (wait, warmup, active)
        self.with_device = device_type == "cuda"
        self.profiler: Any = None
        self.written: list[Path] = []

    def facts(self) -> dict[str, Any]:
        """What the result says of the profiler (``extra.profiled``): the run it is in was
        profiled, over which measured iterations."""
        return {"tool": "torch",
                **dict(zip(("wait", "warmup", "active"), self.schedule, strict=True))}

    def measure_start(self) -> None:
        from torch import profiler

        activities = [profiler.ProfilerActivity.CPU]
        if self.with_device:
            activities.append(profiler.ProfilerActivity.CUDA)
        wait, warmup, active = self.schedule
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.profiler = profiler.profile(
            activities=activities,
            schedule=profiler.schedule(wait=wait, warmup=warmup, active=active, repeat=1),
            on_trace_ready=self._save, record_shapes=True, profile_memory=True,
            with_flops=True)
        self.profiler.start()

    def iteration_end(self) -> None:
        if self.profiler is not None:
            self.profiler.step()

    def measure_end(self) -> None:
        if self.profiler is not None:
            self.profiler.stop()
            self.profiler = None

    def _save(self, prof: Any) -> None:
        trace = self.out_dir / TRACE
        prof.export_chrome_trace(str(trace))
        table = {
            "schema_version": 1, "schedule": dict(zip(("wait", "warmup", "active"),
                                                      self.schedule, strict=True)),
            "device": "cuda" if self.with_device else "cpu",
            "operators": operator_rows(prof.key_averages(), self.with_device),
        }
        operators = self.out_dir / OPERATORS
        atomic.write_text(operators, json.dumps(table, indent=1) + "\n")
        self.written = [trace, operators]
