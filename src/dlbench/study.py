"""Studies: named grids of cells, expanded and validated before any job runs.

A config holds ``studies``; each study has a ``kind`` (model cells or operator cells), a
``grid`` whose list-valued axes expand to their Cartesian product, ``overrides`` that set
values on the cells matching some axis values, and ``exclude`` rules that drop cells.
Every problem is reported as one line naming the study and the field.
"""

from __future__ import annotations

import hashlib
import importlib
import itertools
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlbench import cpu, models

FRAMEWORKS = ("pytorch", "mxnet")
PHASES = ("training", "inference")
DEVICES = ("cpu", "gpu")
PRECISIONS = {
    "pytorch": ("float32", "tf32", "float16", "bfloat16", "float64"),
    "mxnet": ("float32", "float16"),
}
PRECISION_ALIASES = {"float": "float32", "f32": "float32", "f16": "float16",
                     "bf16": "bfloat16", "f64": "float64"}
KV_STORES = ("local", "device", "nccl", "dist_sync", "dist_device_sync", "dist_async")
DATA_BACKENDS = ("caffe_lmdb", "image_folder")
EXEC_MODES = ("discrete", "continuous", "continuous_events")

# Axis name -> default; a study may give any of these a scalar or a list of values.
MODEL_AXES: dict[str, Any] = {
    "framework": "pytorch",
    "model": None,  # required
    "phase": "training",
    "precision": "float32",
    "batch_size": 32,
    "num_gpus": 1,
    "device": "gpu",
    "data": "synthetic",
    "data_backend": "caffe_lmdb",  # how the PyTorch runner reads a dataset (DLBS's default)
    "num_batches": 100,
    "num_warmup_batches": 10,
    "cudnn_benchmark": True,
    "cudnn_fastest": False,
    "data_shuffle": False,
    "num_loader_threads": 4,
    "data_loader_only": False,  # time the input pipeline alone (DLBS's --data_loader_only)
    "kv_store": "device",
    "model_opts": {},
}
OP_AXES: dict[str, Any] = {
    "framework": "pytorch",
    "op_config": None,  # required: a PARAM-style JSON op config file
    "device": "gpu",
    "backward": False,
    "exec_mode": "discrete",
    "warmup": 5,
    "iterations": 20,
    "cuda_l2_cache": "on",
}
AXES_BY_KIND = {"model": MODEL_AXES, "ops": OP_AXES}
# Axes whose values form the readable part of a cell id, in this order.
_ID_AXES = {
    "model": ("framework", "model", "phase", "precision", "batch_size", "device", "num_gpus", "data"),
    "ops": ("framework", "op_config", "device", "backward", "exec_mode"),
}
_INT_AXES = {"batch_size", "num_gpus", "num_batches", "num_warmup_batches",
             "num_loader_threads", "warmup", "iterations"}
_MIN = {"batch_size": 1, "num_gpus": 1, "num_batches": 1, "num_warmup_batches": 0,
        "num_loader_threads": 0, "warmup": 0, "iterations": 1}
_BOOL_AXES = {"cudnn_benchmark", "cudnn_fastest", "data_shuffle", "backward",
              "data_loader_only"}
STUDY_KEYS = ("kind", "grid", "overrides", "exclude", "description", "precisions")
# A study's 'precisions': every cell (all), or on a CPU only those it computes natively.
STUDY_PRECISIONS = ("all", "native")
_STUDY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class ConfigError(ValueError):
    """A config problem, said in one line naming the study and field."""


@dataclass(frozen=True)
class Cell:
    study: str
    kind: str  # "model" | "ops"
    params: Mapping[str, Any]

    @property
    def id(self) -> str:
        return cell_id(self.kind, self.params)

    def to_json(self) -> str:
        return json.dumps({"study": self.study, "kind": self.kind, "cell_id": self.id,
                           "params": dict(self.params)}, sort_keys=True)


def _slug(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    text = str(value)
    if "/" in text or text.endswith(".json"):
        text = text.rsplit("/", 1)[-1].removesuffix(".json")
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-") or "x"


def cell_id(kind: str, params: Mapping[str, Any]) -> str:
    """Readable axes, then a hash of every parameter: a new value of any parameter (say
    num_batches) gives a new id, so Snakemake reruns exactly the cells it changes."""
    readable = []
    for axis in _ID_AXES[kind]:
        value = params.get(axis)
        if axis == "batch_size":
            readable.append(f"bs{value}")
        elif axis == "num_gpus":
            readable[-1] = f"{readable[-1]}{value}"
        elif axis == "backward":
            readable.append("fwbw" if value else "fw")
        elif axis == "phase" and params.get("data_loader_only"):
            readable.append("loader")
        else:
            readable.append(_slug(value))
    digest = hashlib.sha256(json.dumps(dict(params), sort_keys=True).encode()).hexdigest()[:8]
    return "_".join(readable + [digest])


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _fail(study: str, field: str, message: str) -> ConfigError:
    return ConfigError(f"study '{study}': {field}: {message}")


def _enum(study: str, field: str, value: Any, valid: Iterable[str]) -> None:
    valid = list(valid)
    if value not in valid:
        raise _fail(study, field, f"unknown value {value!r} (valid: {', '.join(valid)})")


def _check_cell(study: str, kind: str, p: dict[str, Any], datasets: Mapping[str, Any]) -> None:
    for axis in _INT_AXES & p.keys():
        value = p[axis]
        if isinstance(value, bool) or not isinstance(value, int):
            raise _fail(study, axis, f"must be an integer, got {value!r}")
        if value < _MIN[axis]:
            raise _fail(study, axis, f"must be >= {_MIN[axis]}, got {value}")
    for axis in _BOOL_AXES & p.keys():
        if not isinstance(p[axis], bool):
            raise _fail(study, axis, f"must be true or false, got {p[axis]!r}")
    _enum(study, "framework", p["framework"], FRAMEWORKS)
    _enum(study, "device", p["device"], DEVICES)
    if kind == "ops":
        _enum(study, "exec_mode", p["exec_mode"], EXEC_MODES)
        _enum(study, "cuda_l2_cache", p["cuda_l2_cache"], ("on", "off"))
        if p["framework"] != "pytorch":
            raise _fail(study, "framework", "operator benchmarks run on pytorch only")
        if not isinstance(p["op_config"], str):
            raise _fail(study, "op_config", f"must be a file path, got {p['op_config']!r}")
        return
    _enum(study, "model", p["model"], models.names())
    spec = models.get(p["model"])
    if p["framework"] not in spec.frameworks:
        raise _fail(study, "model",
                    f"no {p['framework']} implementation of {p['model']} "
                    f"(pair {p['framework']}/{p['model']}; {p['model']} exists for "
                    f"{', '.join(spec.frameworks)})")
    _enum(study, "phase", p["phase"], PHASES)
    _enum(study, "precision", p["precision"], PRECISIONS[p["framework"]])
    _enum(study, "kv_store", p["kv_store"], KV_STORES)
    _enum(study, "data_backend", p["data_backend"], DATA_BACKENDS)
    if p["precision"] == "tf32" and p["device"] != "gpu":
        raise _fail(study, "precision", "tf32 exists on device gpu only")
    if p["data"] != "synthetic" and p["data"] not in datasets:
        valid = ["synthetic", *datasets]
        raise _fail(study, "data", f"unknown dataset {p['data']!r} (valid: {', '.join(valid)})")
    if p["data_loader_only"] and p["data"] == "synthetic":
        raise _fail(study, "data_loader_only", "needs a dataset on the data axis, not synthetic")
    if not isinstance(p["model_opts"], dict):
        raise _fail(study, "model_opts", f"must be a mapping, got {p['model_opts']!r}")
    try:
        opts = spec.opts(p["model_opts"])
        check = getattr(spec, "check_opts", None)
        if check:
            module_name, func = check.split(":")
            getattr(importlib.import_module(module_name), func)(opts)
    except ValueError as exc:
        raise _fail(study, "model_opts", str(exc)) from None


def _matches(cell: Mapping[str, Any], rule: Mapping[str, Any]) -> bool:
    return all(cell.get(k) in _as_list(v) for k, v in rule.items())


def _normalise(p: dict[str, Any]) -> dict[str, Any]:
    if isinstance(p.get("precision"), str):
        p["precision"] = PRECISION_ALIASES.get(p["precision"], p["precision"])
    return p


def native_here(params: Mapping[str, Any]) -> bool:
    """Whether a cell's precision is native where the study is expanded. Only CPU cells can
    be told apart here (the driver does not see the GPUs its cells will get); a CPU whose
    cpuinfo cannot be read counts as native, so nothing is dropped on a guess."""
    precision = params.get("precision")
    if params.get("device") != "cpu" or not isinstance(precision, str):
        return True
    info = cpu.this_cpu()
    return info is None or info.native(precision)


def emulated_cells(cells: Iterable[Cell]) -> list[Cell]:
    """The CPU model cells whose precision this CPU emulates (slow: say so before a run)."""
    return [c for c in cells if c.kind == "model" and not native_here(c.params)]


def _without_unused(kind: str, p: dict[str, Any]) -> dict[str, Any]:
    """Blank the axes a cell does not use, so that their values do not change its id."""
    if kind != "model":
        return p
    if p["framework"] != "mxnet":
        p["kv_store"] = None
    if p["framework"] != "pytorch" or p["data"] == "synthetic":
        p["data_backend"] = None
    return p


def expand_study(name: str, study: Mapping[str, Any], config: Mapping[str, Any]) -> list[Cell]:
    if not _STUDY_NAME.match(name):
        raise _fail(name, "name", "use letters, digits, '_', '-' and '.' only")
    if not isinstance(study, Mapping):
        raise _fail(name, "study", "must be a mapping with a grid")
    kind = study.get("kind", "model")
    _enum(name, "kind", kind, AXES_BY_KIND)
    axes = AXES_BY_KIND[kind]
    unknown = sorted(set(study) - set(STUDY_KEYS))
    if unknown:
        raise _fail(name, unknown[0], f"unknown key (valid: {', '.join(STUDY_KEYS)})")
    precisions = study.get("precisions", "all")
    _enum(name, "precisions", precisions, STUDY_PRECISIONS)
    grid = {**config.get("defaults", {}).get(kind, {}), **(study.get("grid") or {})}
    for key in grid:
        if key not in axes:
            raise _fail(name, f"grid.{key}", f"unknown axis (valid: {', '.join(axes)})")
    for key, default in axes.items():
        if default is None and key not in grid:
            raise _fail(name, f"grid.{key}", "is required")
    values = {key: _as_list(grid.get(key, default)) for key, default in axes.items()}
    for key, vals in values.items():
        if not vals:
            raise _fail(name, f"grid.{key}", "is an empty list")
    rules = study.get("exclude") or []
    overrides = study.get("overrides") or []
    for i, rule in enumerate(rules):
        bad = [k for k in (rule if isinstance(rule, Mapping) else {"?": 0}) if k not in axes]
        if bad:
            raise _fail(name, f"exclude[{i}]", f"unknown axis {bad[0]!r}")
    for i, ov in enumerate(overrides):
        if not isinstance(ov, Mapping) or set(ov) != {"match", "set"}:
            raise _fail(name, f"overrides[{i}]", "needs exactly the keys match and set")
        bad = [k for k in [*ov["match"], *ov["set"]] if k not in axes]
        if bad:
            raise _fail(name, f"overrides[{i}]", f"unknown axis {bad[0]!r}")
    datasets = config.get("datasets") or {}
    cells: list[Cell] = []
    seen: set[str] = set()
    for combo in itertools.product(*values.values()):
        params = _normalise(dict(zip(values, combo, strict=True)))
        for ov in overrides:
            if _matches(params, ov["match"]):
                params.update(ov["set"])
        params = _normalise(params)
        if any(_matches(params, rule) for rule in rules):
            continue
        if precisions == "native" and not native_here(params):
            continue
        _check_cell(name, kind, params, datasets)
        cell = Cell(name, kind, _without_unused(kind, params))
        if cell.id not in seen:
            seen.add(cell.id)
            cells.append(cell)
    return cells


def check_datasets(datasets: Mapping[str, Any]) -> None:
    """A dataset read from the user's own ImageFolder must exist before anything runs."""
    for name, spec in datasets.items():
        path = (spec or {}).get("path")
        if path is not None and not Path(path).is_dir():
            raise ConfigError(f"dataset '{name}': path: {path} is not a folder")


def expand_config(config: Mapping[str, Any]) -> list[Cell]:
    """All cells of all studies, validated."""
    check_datasets(config.get("datasets") or {})
    studies = config.get("studies")
    if not isinstance(studies, Mapping) or not studies:
        raise ConfigError("config: studies: at least one study is required")
    cells: list[Cell] = []
    for name, study in studies.items():
        cells.extend(expand_study(str(name), study, config))
    return cells
