"""Vendor peak rates of accelerators, looked up by the device name a run records.

"Peak" here is the vendor's dense peak from the datasheet (``peaks.yaml`` beside this
module): per data type the highest rate the vendor quotes without structured sparsity,
taken from the tensor / matrix cores where the device has them for that type (so fp64 on
an H100 SXM is the 67 TFLOPS tensor-core figure, not the 34 TFLOPS vector one). These are
ceilings nobody reaches, useful to put measured throughput in proportion.

A device is found by regular expressions matched against ``torch.cuda.get_device_name()``
(which ROCm builds of torch answer with the marketing name). An unknown or empty name gets
None, never the nearest guess, so that callers fall back to ceilings they measured.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TABLE_PATH = Path(__file__).with_name("peaks.yaml")

# dlbench's precision names (the ``precision`` axis) to the table's keys.
PRECISION_KEYS: Mapping[str, str] = {
    "float64": "fp64", "float32": "fp32", "tf32": "tf32", "float16": "fp16",
    "bfloat16": "bf16", "float8": "fp8", "int8": "int8",
}
TFLOPS_KEYS = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8")
VENDORS = ("nvidia", "amd")
_FIELDS = ("model", "vendor", "match", "tflops", "memory_bandwidth_gbps", "memory_gb",
           "source", "notes")


class PeakTableError(ValueError):
    """The peak table is malformed (said in one line: file, entry and field)."""


@dataclass(frozen=True)
class DevicePeaks:
    model: str
    vendor: str
    # TFLOPS per table key (int8 in TOPS); None where the device lacks the type or the
    # datasheet gives no figure. Left out of the hash: a dict is not hashable.
    tflops: dict[str, float | None] = field(hash=False)
    memory_bandwidth_gbps: float | None
    memory_gb: float | None
    source: str
    notes: str


_Entry = tuple[DevicePeaks, tuple[re.Pattern[str], ...]]


def table(path: Path | str | None = None) -> list[DevicePeaks]:
    """The table's entries in file order (the packaged table unless ``path`` is given)."""
    return [peaks for peaks, _ in _entries(Path(path) if path else TABLE_PATH)]


def lookup(device_name: str | None) -> DevicePeaks | None:
    """The entry for a device name, or for an aggregate ``gpu_model`` value (names joined
    with ", "): None when a name is unknown or the names are of different models."""
    if not device_name or not isinstance(device_name, str):
        return None
    found: list[DevicePeaks] = []
    for name in device_name.split(","):
        peaks = _match(name.strip())
        if peaks is None:
            return None
        found.append(peaks)
    # Different names of one model (ROCm's "MI250X" and "MI250X / MI250") still agree.
    return found[0] if len({p.model for p in found}) == 1 else None


def peak_tflops(device_name: str | None, precision: str) -> float | None:
    """The dense peak in TFLOPS (TOPS for int8) of a dlbench precision on a device."""
    key = PRECISION_KEYS.get(precision)
    peaks = lookup(device_name)
    return None if key is None or peaks is None else peaks.tflops.get(key)


def peak_bandwidth_gbps(device_name: str | None) -> float | None:
    peaks = lookup(device_name)
    return None if peaks is None else peaks.memory_bandwidth_gbps


# A MIG instance ("NVIDIA A100-SXM4-80GB MIG 1g.10gb", as CUDA names it) has a share of
# its GPU's SMs and memory bandwidth: the whole GPU's peaks would be several times its own.
_MIG = re.compile(r"\bMIG\b")


def _match(name: str) -> DevicePeaks | None:
    if not name or _MIG.search(name):
        return None
    # First match wins: the file puts the more specific entries first.
    for peaks, patterns in _entries(TABLE_PATH):
        if any(p.search(name) for p in patterns):
            return peaks
    return None


@functools.cache
def _entries(path: Path) -> tuple[_Entry, ...]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise PeakTableError(f"{path}: cannot read the peak table: {_one_line(exc)}") from None
    if not isinstance(data, list) or not data:
        raise PeakTableError(f"{path}: the peak table must be a non-empty list of entries")
    entries: list[_Entry] = []
    models: set[str] = set()
    for index, raw in enumerate(data):
        entry = _entry(raw, _Where(path, index, raw))
        if entry[0].model in models:
            raise _Where(path, index, raw).error("model", "appears in an earlier entry too")
        models.add(entry[0].model)
        entries.append(entry)
    return tuple(entries)


@dataclass(frozen=True)
class _Where:
    path: Path
    index: int
    raw: Any

    def error(self, name: str, problem: str) -> PeakTableError:
        model = self.raw.get("model") if isinstance(self.raw, dict) else None
        # Counted from 1, as a reader of the file counts.
        entry = f"entry {self.index + 1}" + (f" ({model})" if isinstance(model, str) else "")
        return PeakTableError(f"{self.path}: {entry}: field {name!r}: {_one_line(problem)}")


def _entry(raw: Any, where: _Where) -> _Entry:
    if not isinstance(raw, dict):
        raise where.error("(entry)", f"must be a mapping, got {raw!r}")
    for name in _FIELDS:
        if name not in raw:
            raise where.error(name, "missing")
    for name in raw:
        if name not in _FIELDS:
            raise where.error(name, f"unknown field (fields: {', '.join(_FIELDS)})")
    for name in ("model", "notes"):
        if not isinstance(raw[name], str) or not raw[name].strip():
            raise where.error(name, f"must be a non-empty string, got {raw[name]!r}")
    if raw["vendor"] not in VENDORS:
        raise where.error("vendor", f"must be one of {', '.join(VENDORS)}, got {raw['vendor']!r}")
    source = raw["source"]
    if not isinstance(source, str) or not source.startswith("https://"):
        raise where.error("source", f"must be a URL starting with https://, got {source!r}")
    tflops = raw["tflops"]
    if not isinstance(tflops, dict) or set(tflops) != set(TFLOPS_KEYS):
        got = sorted(map(str, tflops)) if isinstance(tflops, dict) else repr(tflops)
        raise where.error("tflops", f"must map exactly {', '.join(TFLOPS_KEYS)}, got {got}")
    return DevicePeaks(
        model=raw["model"], vendor=raw["vendor"],
        tflops={key: _rate(tflops[key], where, f"tflops.{key}") for key in TFLOPS_KEYS},
        memory_bandwidth_gbps=_rate(raw["memory_bandwidth_gbps"], where,
                                    "memory_bandwidth_gbps"),
        memory_gb=_rate(raw["memory_gb"], where, "memory_gb"),
        source=source, notes=raw["notes"],
    ), _patterns(raw["match"], where)


def _rate(value: Any, where: _Where, name: str) -> float | None:
    # bool is an int to Python, and "yes" in YAML 1.1 loads as True: refuse it explicitly.
    if value is None:
        return None
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or value <= 0:
        raise where.error(name, f"must be a number > 0 or null, got {value!r}")
    return float(value)


def _patterns(match: Any, where: _Where) -> tuple[re.Pattern[str], ...]:
    if not isinstance(match, list) or not match:
        raise where.error("match", f"must be a non-empty list of regular expressions, "
                                   f"got {match!r}")
    compiled = []
    for pattern in match:
        if not isinstance(pattern, str) or not pattern:
            raise where.error("match", f"must hold non-empty strings, got {pattern!r}")
        try:
            compiled.append(re.compile(pattern, re.IGNORECASE))
        except re.error as exc:
            raise where.error("match", f"{pattern!r} does not compile: {exc}") from None
    return tuple(compiled)


def _one_line(text: object) -> str:
    return " ".join(str(text).split())
