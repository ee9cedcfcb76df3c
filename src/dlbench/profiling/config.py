"""The ``profiling`` config: which cells to profile with which tools, and each tool's settings.

    profiling:
      select:
        - match: {model: resnet50, batch_size: 64, precision: bfloat16}
          tools: [torch, ncu]
      tools:
        ncu: {binary: /opt/nvidia/nsight-compute/ncu, metrics: [gpu__time_duration.sum]}

A selection's ``match`` holds axis values (a value or a list of values, as in a study's
overrides; ``study`` names a study) and is matched against the expanded cells. Every problem
is one line naming the field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dlbench import study as S
from dlbench.profiling import TOOLS

PROFILES_DIR = "results/profiles"
MANIFEST = "profile.json"
CAPTURE = "capture.json"  # the profiled run's record, made in the framework environment


class ProfilingConfigError(ValueError):
    """A problem in the profiling config, said in one line naming the field."""


# Each tool's settings: key -> (default, check). ``num_batches`` / ``num_warmup_batches``
# are the profiled run's measured and warmup iterations (null: the cell's own); a profile
# needs few iterations, and a tool like ncu replays every kernel it profiles.
Check = Callable[[str, Any], None]


def _int(minimum: int, optional: bool = False) -> Check:
    def check(field: str, value: Any) -> None:
        if value is None and optional:
            return
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ProfilingConfigError(f"{field}: must be an integer >= {minimum}, got {value!r}")
    return check


def _str(optional: bool = False) -> Check:
    def check(field: str, value: Any) -> None:
        if value is None and optional:
            return
        if not isinstance(value, str) or not value:
            raise ProfilingConfigError(f"{field}: must be a non-empty string, got {value!r}")
    return check


def _enum(*valid: str) -> Check:
    def check(field: str, value: Any) -> None:
        if value not in valid:
            raise ProfilingConfigError(
                f"{field}: unknown value {value!r} (valid: {', '.join(valid)})")
    return check


def _str_list(field: str, value: Any) -> None:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ProfilingConfigError(f"{field}: must be a list of non-empty strings, got {value!r}")


def _bool(optional: bool = False) -> Check:
    def check(field: str, value: Any) -> None:
        if not (isinstance(value, bool) or (value is None and optional)):
            raise ProfilingConfigError(f"{field}: must be true or false, got {value!r}")
    return check


def _knobs(field: str, value: Any) -> None:
    if not isinstance(value, Mapping):
        raise ProfilingConfigError(f"{field}: must be a mapping of NAME: value, got {value!r}")
    for name, knob in value.items():
        if not (isinstance(name, str) and name.replace("_", "").isalnum() and name.isupper()):
            raise ProfilingConfigError(f"{field}: knob name {name!r} must be UPPER_CASE")
        if isinstance(knob, bool) or not isinstance(knob, (int, float, str)):
            raise ProfilingConfigError(f"{field}.{name}: must be a number or string, got {knob!r}")


_ITERATIONS = {"num_batches": (None, _int(1, optional=True)),
               "num_warmup_batches": (None, _int(0, optional=True))}

SETTINGS: dict[str, dict[str, tuple[Any, Check]]] = {
    "torch": {
        "wait": (1, _int(0)), "warmup": (1, _int(0)), "active": (3, _int(1)),
        "num_warmup_batches": (None, _int(0, optional=True)),
    },
    "ncu": {
        "binary": ("ncu", _str()),
        **_ITERATIONS, "num_batches": (1, _int(1, optional=True)),
        # Kernels launched while the runner's NVTX range "measure" is on the push/pop stack.
        "nvtx_include": (["measure/"], _str_list),
        "set": (None, _str(optional=True)),
        "sections": ([], _str_list),
        "metrics": ([], _str_list),
        "args_file": (None, _str(optional=True)),  # extra options, as PARAM's --ncu-args-file
        "clock_control": ("base", _enum("base", "none")),
        "launch_skip": (None, _int(0, optional=True)),
        "launch_count": (None, _int(1, optional=True)),
        "target_processes": ("all", _enum("all", "application-only")),
        "extra_args": ([], _str_list),
    },
    "nsys": {
        "binary": ("nsys", _str()),
        **_ITERATIONS,
        "trace": (["cuda", "nvtx"], _str_list),
        "capture_range": ("nvtx", _enum("nvtx", "cudaProfilerApi", "none")),
        "nvtx_capture": ("measure", _str()),
        "capture_range_end": ("stop", _str()),
        "reports": (["cuda_gpu_kern_sum", "nvtx_sum"], _str_list),
        "extra_args": ([], _str_list),
    },
    "hpcrun": {
        "binary": ("hpcrun", _str()),
        "hpcstruct": ("hpcstruct", _str()),
        "hpcprof": ("hpcprof", _str()),
        **_ITERATIONS, "num_batches": (1, _int(1, optional=True)),
        "events": (["gpu=nvidia"], _str_list),  # GVProf: ["gpu=nvidia,data_flow"]
        "knobs": ({}, _knobs),  # -ck NAME=value, e.g. HPCRUN_SANITIZER_GPU_PATCH_RECORD_NUM
        # GVProf's first pass (plain gpu=nvidia, then hpcstruct --gpucfg) before an analysis
        # event; null: only when an event asks for more than gpu=nvidia.
        "prepass": (None, _bool(optional=True)),
        "gpucfg": (True, _bool()),
        "jobs": (1, _int(1)),
        "framework_library_path": (True, _bool()),  # prepend torch/lib to LD_LIBRARY_PATH
    },
}
# Settings that name an executable: a missing one is reported with its config key.
BINARY_KEYS = {"torch": (), "ncu": ("binary",), "nsys": ("binary",),
               "hpcrun": ("binary", "hpcstruct", "hpcprof")}


def settings(tool: str, given: Mapping[str, Any] | None = None,
             where: str | None = None) -> dict[str, Any]:
    """The tool's settings: defaults overlaid with ``given``, checked."""
    where = where or f"profiling.tools.{tool}"
    if tool not in SETTINGS:
        raise ProfilingConfigError(f"profiling.tools: unknown tool {tool!r} "
                                   f"(valid: {', '.join(TOOLS)})")
    given = dict(given or {})
    spec = SETTINGS[tool]
    unknown = sorted(set(given) - set(spec))
    if unknown:
        raise ProfilingConfigError(f"{where}.{unknown[0]}: unknown setting "
                                   f"(valid: {', '.join(spec)})")
    merged = {key: given.get(key, default) for key, (default, _) in spec.items()}
    for key, (_, check) in spec.items():
        check(f"{where}.{key}", merged[key])
    return merged


def tool_settings(config: Mapping[str, Any], tool: str) -> dict[str, Any]:
    tools = (config.get("profiling") or {}).get("tools") or {}
    return settings(tool, tools.get(tool))


@dataclass(frozen=True)
class ProfileJob:
    tool: str
    cell: S.Cell

    @property
    def out_dir(self) -> str:
        return f"{PROFILES_DIR}/{self.tool}/{self.cell.study}/{self.cell.id}"

    @property
    def target(self) -> str:
        return f"{self.out_dir}/{MANIFEST}"


def _matches(cell: S.Cell, match: Mapping[str, Any]) -> bool:
    for key, wanted in match.items():
        values = wanted if isinstance(wanted, list) else [wanted]
        if key == "precision":
            values = [S.PRECISION_ALIASES.get(v, v) if isinstance(v, str) else v for v in values]
        have = cell.study if key == "study" else cell.params.get(key)
        if have not in values:
            return False
    return True


def _check_tool_fits(where: str, tool: str, cell: S.Cell) -> None:
    framework = cell.params.get("framework")
    if tool == "torch" and (cell.kind != "model" or framework != "pytorch"):
        raise ProfilingConfigError(
            f"{where}: tool torch profiles PyTorch model cells; cell {cell.id} of study "
            f"'{cell.study}' is a {framework} {cell.kind} cell (add framework: pytorch to match)")


def select_jobs(config: Mapping[str, Any], cells: Sequence[S.Cell]) -> list[ProfileJob]:
    """The profile jobs the config asks for, one per (tool, cell), in config order."""
    profiling = config.get("profiling") or {}
    if not isinstance(profiling, Mapping):
        raise ProfilingConfigError("profiling: must be a mapping with select and tools")
    unknown = sorted(set(profiling) - {"select", "tools"})
    if unknown:
        raise ProfilingConfigError(f"profiling.{unknown[0]}: unknown key (valid: select, tools)")
    for tool in profiling.get("tools") or {}:
        settings(tool, (profiling.get("tools") or {})[tool])
    axes = {"study", *S.MODEL_AXES, *S.OP_AXES}
    jobs: list[ProfileJob] = []
    for i, selection in enumerate(profiling.get("select") or []):
        where = f"profiling.select[{i}]"
        if not isinstance(selection, Mapping) or set(selection) != {"match", "tools"}:
            raise ProfilingConfigError(f"{where}: needs exactly the keys match and tools")
        match, tools = selection["match"], selection["tools"]
        if not isinstance(match, Mapping):
            raise ProfilingConfigError(f"{where}.match: must be a mapping of axis: value")
        bad = [key for key in match if key not in axes]
        if bad:
            raise ProfilingConfigError(f"{where}.match: unknown axis {bad[0]!r}")
        if not isinstance(tools, list) or not tools:
            raise ProfilingConfigError(f"{where}.tools: must be a non-empty list of tools")
        for tool in tools:
            if tool not in TOOLS:
                raise ProfilingConfigError(
                    f"{where}.tools: unknown tool {tool!r} (valid: {', '.join(TOOLS)})")
        chosen = [cell for cell in cells if _matches(cell, match)]
        if not chosen:
            raise ProfilingConfigError(f"{where}.match: matches no cell of any study")
        for tool in tools:
            for cell in chosen:
                _check_tool_fits(where, tool, cell)
                job = ProfileJob(tool, cell)
                if job not in jobs:
                    jobs.append(job)
    return jobs
