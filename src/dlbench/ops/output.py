"""What a run writes: PARAM's JSON-lines file and the measurements of dlbench's result.

The JSON-lines file ``<prefix>.json`` has PARAM's layout: a first line with
``run_options``, ``sys_info`` and ``start_time``; one line per operator input
``{"op_name", "id", "metric": {pass: {"warmup.time", "warmup.gpu.memory",
"measure.time", "measure.gpu.memory"}}, "config": {"build", "input"}}`` (times in ms,
memory in MiB); a ``{"finish_time"}`` line; and ``{"trace_file"}`` when profiling. A spec
or operator that failed becomes ``{"op_name", "id", "error"}`` (``metric`` empty), which
PARAM's readers skip as they skip inputs run with zero iterations. ``start_time`` and
``finish_time`` are ISO 8601 to the second like PARAM's, but in UTC with the offset
(``dlbench.result.now_iso``, the clock of every dlbench record) where PARAM writes local
time without one.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import socket
from pathlib import Path
from typing import Any, TextIO

import torch

import dlbench
from dlbench import result as R
from dlbench import stats

log = logging.getLogger("dlbench.ops")


def sys_info(device: torch.device) -> dict[str, Any]:
    """PARAM's sys_info fields, with the CUDA device's properties as plain values."""
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "cwd": os.getcwd(),
        "python_version": platform.python_version(),
        "dlbench_version": dlbench.__version__,
        "cuda_available": torch.cuda.is_available(),
        "pytorch_version": torch.__version__,
        "pytorch_debug_build": torch.version.debug,
        "pytorch_num_threads": torch.get_num_threads(),
        "pytorch_build_config": torch._C._show_config(),
    }
    if device.type == "cuda" and torch.cuda.is_available():
        index = device.index if device.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        info.update({
            "cuda": torch.version.cuda,
            "cuda_device_id": index,
            "cuda_device_name": props.name,
            "cuda_device_property": {
                "name": props.name, "major": props.major, "minor": props.minor,
                "total_memory": props.total_memory,
                "multi_processor_count": props.multi_processor_count,
                "L2_cache_size": getattr(props, "L2_cache_size", None),
            },
            "cudnn": torch.backends.cudnn.version(),
            "cudnn_enabled": torch.backends.cudnn.enabled,
        })
    return info


class JsonlWriter:
    def __init__(self, path: str | os.PathLike[str], append: bool = False):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.stream: TextIO = open(self.path, "a" if append else "w")  # noqa: SIM115

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stream.close()

    def write(self, record: dict[str, Any]) -> None:
        self.stream.write(json.dumps(record, default=str) + "\n")
        self.stream.flush()

    def run_record(self, run_options: dict[str, Any], info: dict[str, Any]) -> None:
        self.write({"run_options": run_options, "sys_info": info, "start_time": R.now_iso("seconds")})

    def op_record(self, op_name: str, run_id: str, metrics: dict[str, Any],
                  config: dict[str, Any], notes: list[str] | None = None) -> None:
        record = {"op_name": op_name, "id": run_id, "metric": metrics, "config": config}
        if notes:
            record["notes"] = notes
        self.write(record)

    def error_record(self, op_name: str, run_id: str | None, message: str) -> None:
        self.write({"op_name": op_name, "id": run_id, "metric": {}, "error": message})

    def finish(self) -> None:
        self.write({"finish_time": R.now_iso("seconds")})

    def trace(self, trace_file: str) -> None:
        self.write({"trace_file": trace_file})


def measurements(op_name: str, run_id: str, metrics: dict[str, Any],
                 cost: dict[str, dict[str, float | None]], config: dict[str, Any],
                 extra: dict[str, Any]) -> list[dict[str, Any]]:
    """One dlbench measurement per pass that has measured times."""
    out = []
    for pass_, metric in metrics.items():
        times_s = [ms / 1e3 for ms in metric.get("measure.time", [])]
        if not times_s:
            continue
        if stats.summarize(times_s)["median"] <= 0:
            # continuous mode's backward is a difference of two loop means; a no-op
            # backward can come out at or below zero, which no throughput describes.
            log.warning("%s %s %s: median time <= 0 ms, not recorded", op_name, run_id, pass_)
            continue
        work = cost.get(pass_, {})
        out.append(R.measurement(
            name=run_id, op_name=op_name, pass_=pass_, times_s=times_s,
            items_per_iteration=1, throughput_unit="iterations/s",
            flops_per_iteration=work.get("flops"), bytes_per_iteration=work.get("bytes"),
            extra={**extra, "config": config,
                   "warmup_times_s": [ms / 1e3 for ms in metric.get("warmup.time", [])],
                   "gpu_memory_mib": metric.get("measure.gpu.memory", [])},
        ))
    return out
