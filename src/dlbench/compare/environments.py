"""What differs between BASE and NEW besides the figures: the hardware and software each
side's results recorded (the aggregate table's environment columns).

A verdict says that NEW is slower; this says what may explain it (a framework, driver or
CUDA version, another GPU or CPU, a lower GPU power limit, another container). Each field
is compared as the set of values a side's rows hold, so a side measured on several hosts
or framework versions says so instead of naming one of them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

# (column, what it is called), in the order they are told. The framework's version is
# told per framework (a side may hold PyTorch and MXNet cells).
FIELDS = (("gpu_model", "GPU"), ("gpu_power_limit_w", "GPU power limit (W)"),
          ("gpu_driver", "GPU driver"), ("cuda_version", "CUDA"), ("cudnn_version", "cuDNN"),
          ("nccl_version", "NCCL"), ("cpu_model", "CPU"), ("cpu_count", "CPUs"),
          ("cpu_cores", "CPU cores"), ("cpu_sockets", "CPU sockets"),
          # A job given 8 of a node's 64 cores runs on 8, whatever the node's CPU count.
          ("cpus_usable", "CPUs usable"),
          ("cpu_capability", "CPU capability"), ("cpu_features", "CPU features"),
          ("python_version", "Python"), ("container", "container"),
          ("container_digest", "container digest"), ("dlbench_version", "dlbench"),
          ("dlbench_git_revision", "dlbench revision"), ("hostname", "host"),
          ("slurm_partition", "Slurm partition"))
VERSION = "framework_version"
# A side with more values than this is told by the first ones and a count of the rest.
SHOWN = 3


@dataclass(frozen=True)
class Difference:
    field: str  # what differs, in words ("GPU driver", "pytorch version")
    base: str
    new: str


def _text(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _values(rows: pd.DataFrame, column: str) -> frozenset[str]:
    if column not in rows:
        return frozenset()
    return frozenset(_text(v) for v in rows[column].dropna() if str(v) != "")


def _told(values: frozenset[str]) -> str:
    if not values:
        return "not recorded"
    ordered = sorted(values)
    more = len(ordered) - SHOWN
    return ", ".join(ordered[:SHOWN]) + (f" and {more} more" if more > 0 else "")


def _gpu_settings(rows: pd.DataFrame) -> dict[str, frozenset[str]]:
    """The settings the resource monitor read from each GPU (dlbench.gpu_clocks), from
    each result file's extra once."""
    found: dict[str, set[str]] = {name: set() for name, _ in GPU_SETTINGS}
    if "extra" not in rows or "source" not in rows:
        return {name: frozenset() for name in found}
    for text in rows.drop_duplicates("source")["extra"].dropna():
        try:
            gpus = (json.loads(text).get("monitor") or {}).get("gpus") or []
        except (ValueError, AttributeError):
            continue
        for gpu in gpus:
            settings = gpu.get("settings") if isinstance(gpu, dict) else None
            for name, told in GPU_SETTINGS:
                value = told(settings) if isinstance(settings, dict) else None
                if value is not None:
                    found[name].add(value)
    return {name: frozenset(values) for name, values in found.items()}


def _pcie(settings: dict) -> str | None:
    generation, width = settings.get("pcie_generation"), settings.get("pcie_width")
    return f"Gen{generation} x{width}" if generation and width else None


def _on_off(key: str) -> Callable[[dict], str | None]:
    return lambda settings: (None if settings.get(key) is None
                             else "on" if settings[key] else "off")


def _number(key: str) -> Callable[[dict], str | None]:
    return lambda settings: None if settings.get(key) is None else _text(settings[key])


# (what it is called, how a GPU's settings say it)
GPU_SETTINGS: tuple[tuple[str, Callable[[dict], str | None]], ...] = (
    ("GPU max SM clock (MHz)", _number("sm_clock_max_mhz")),
    ("GPU application SM clock (MHz)", _number("sm_clock_application_mhz")),
    ("GPU ECC", _on_off("ecc")), ("GPU persistence mode", _on_off("persistence_mode")),
    ("GPU PCIe link", _pcie))


def facts(rows: pd.DataFrame) -> dict[str, frozenset[str]]:
    """What one side's rows recorded: each field's set of values, in FIELDS' order, then
    the GPUs' settings, then each framework's version."""
    found = {name: _values(rows, column) for column, name in FIELDS}
    found.update(_gpu_settings(rows))
    if "framework" in rows:
        for framework in sorted(_values(rows, "framework")):
            found[f"{framework} version"] = _values(
                rows[rows["framework"].astype(str) == framework], VERSION)
    return found


def differences(base: dict[str, frozenset[str]], new: dict[str, frozenset[str]]
                ) -> list[Difference]:
    """Each field whose values differ between the two sides' ``facts``. A field neither
    side recorded is left out, as is a framework only one side ran (its cells are not the
    ones compared); one side only recording a field counts as a difference."""
    names = [name for name in base if name in new or not name.endswith(" version")]
    return [Difference(name, _told(base.get(name, frozenset())),
                       _told(new.get(name, frozenset())))
            for name in names
            if (base.get(name) or new.get(name)) and base.get(name) != new.get(name)]


def alike(base: dict[str, frozenset[str]], new: dict[str, frozenset[str]]) -> list[str]:
    """The fields both sides recorded alike, in words ("CUDA 12.4")."""
    return [f"{name} {_told(values)}" for name, values in base.items()
            if values and new.get(name) == values]
