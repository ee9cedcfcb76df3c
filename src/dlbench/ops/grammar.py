"""PARAM's argument data types: check a spec, then turn it into a Python or torch value.

A spec is a JSON object with a ``type`` (int, long, float, double, bool, device, str, none,
genericlist, tuple, tensor) and that type's fields. Every error names the JSON path of the
offending field, e.g. ``config[0].input[1].args[0].type: unknown type 'floaty'``.

Two deliberate differences from PARAM: integer and bool tensors default to
``requires_grad`` false (PARAM defaults to true, which torch rejects for them), and
tensors accept ``value_range`` like scalars do.

Checking imports no framework: the driver checks every op config with it before any job
(``dlbench.ops.precheck``). Only making values imports torch.
"""

from __future__ import annotations

import logging
import random
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from dlbench.ops.configfile import shown

if TYPE_CHECKING:
    import torch

log = logging.getLogger("dlbench.ops")

# The dtype names a spec may give, each with the name of the torch dtype it stands for:
# checking needs only these names, making a tensor looks the dtype up in torch.
FLOAT_DTYPES: dict[str, str] = {
    "float": "float32", "float32": "float32",
    "double": "float64", "float64": "float64",
    "half": "float16", "float16": "float16",
    "bfloat16": "bfloat16",
}
INT_DTYPES: dict[str, str] = {
    "int": "int32", "int32": "int32",
    "long": "int64", "int64": "int64",
    "short": "int16", "int16": "int16",
    "int8": "int8", "uint8": "uint8",
}
DTYPE_NAMES: dict[str, str] = {**FLOAT_DTYPES, **INT_DTYPES, "bool": "bool"}

SCALAR_NUMBER_TYPES = ("int", "long", "float", "double")
TYPES = (*SCALAR_NUMBER_TYPES, "bool", "device", "str", "none", "genericlist", "tuple", "tensor")

# Meta attributes of RangeConfigIterator; "__list__" is reserved by PARAM and ignored.
ATTR_RANGE, ATTR_COPY, ATTR_LIST = "__range__", "__copy__", "__list__"
META_ATTRS = frozenset({ATTR_RANGE, ATTR_COPY, ATTR_LIST})

# Fields each type may carry (besides "type" and the meta attributes).
_FIELDS: dict[str, frozenset[str]] = {
    "int": frozenset({"value", "value_range"}),
    "long": frozenset({"value", "value_range"}),
    "float": frozenset({"value", "value_range"}),
    "double": frozenset({"value", "value_range"}),
    "bool": frozenset({"value"}),
    "device": frozenset({"value"}),
    "str": frozenset({"value"}),
    "none": frozenset({"value"}),
    "genericlist": frozenset({"value"}),
    "tuple": frozenset({"value"}),
    "tensor": frozenset({"dtype", "shape", "requires_grad", "value_range"}),
}
# Fields RangeConfigIterator may iterate over, per type (PARAM's create_range_iter).
RANGEABLE: dict[str, frozenset[str]] = {
    "int": frozenset({"value"}), "long": frozenset({"value"}),
    "str": frozenset({"value"}), "bool": frozenset({"value"}), "device": frozenset({"value"}),
    "genericlist": frozenset({"value"}), "tuple": frozenset({"value"}),
    "tensor": frozenset({"shape", "dtype"}),
}
# PARAM's default value range of integer tensors (torch.randint(-10, 10)).
DEFAULT_INT_RANGE = (-10, 9)


class SpecError(ValueError):
    """A bad spec; the message is one line starting with the JSON path."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_dtype(name: Any, path: str) -> str:
    """``name``, when it is a dtype name of ``DTYPE_NAMES``."""
    if not isinstance(name, str) or name not in DTYPE_NAMES:
        raise SpecError(path, f"unknown dtype {name!r} (valid: {', '.join(DTYPE_NAMES)})")
    return name


# The largest size a tensor dimension can have (torch's int64 sizes).
MAX_SIZE = 2**63 - 1


def _size_problem(size: Any, negative_ok: bool = False) -> str | None:
    """Why ``size`` is no tensor dimension, or None."""
    if not _is_int(size) or (size < 0 and not negative_ok):
        return f"expected a size >= 0, got {size!r}"
    if size > MAX_SIZE:
        return f"{size} is past the largest size a tensor can have (2^63 - 1)"
    return None


def dtype_of(name: Any, path: str) -> torch.dtype:
    import torch

    return getattr(torch, DTYPE_NAMES[check_dtype(name, path)])


def full_range(bounds: Any, path: str) -> range:
    """PARAM's inclusive range ``[start, end, step]`` (step defaults to 1)."""
    if (not isinstance(bounds, list) or len(bounds) not in (2, 3)
            or not all(_is_int(b) for b in bounds)):
        raise SpecError(path, f"a range is [start, end, step] of integers, got {bounds!r}")
    start, end, step = (*bounds, 1) if len(bounds) == 2 else bounds
    if step < 1 or end < start:
        raise SpecError(path, f"range {bounds!r} needs start <= end and step >= 1")
    if (end - start) // step >= sys.maxsize:  # len() of such a range raises OverflowError
        raise SpecError(path, f"range {bounds!r} holds more values than can be counted")
    return range(start, end + 1, step)


# ---------------------------------------------------------------------------------------
# Checking


def check_args(config: Any, path: str, *, ranged: bool = False, driver: bool = False) -> None:
    """Check an ``{"args": [...], "kwargs": {...}}`` object (a build or input spec).
    ``driver``: see ``check``."""
    if not isinstance(config, dict):
        raise SpecError(path, f"expected an object with args/kwargs, got {type(config).__name__}")
    args = config.get("args", [])
    kwargs = config.get("kwargs", {})
    if not isinstance(args, list):
        raise SpecError(f"{path}.args", "must be a list of argument specs")
    if not isinstance(kwargs, dict):
        raise SpecError(f"{path}.kwargs", "must be an object of name: argument spec")
    for i, arg in enumerate(args):
        check(arg, f"{path}.args[{i}]", ranged=ranged, driver=driver)
    for name, arg in kwargs.items():
        check(arg, f"{path}.kwargs.{name}", ranged=ranged, driver=driver)
    if ranged:
        check_copies(args, path)


def check(spec: Any, path: str, *, ranged: bool = False, driver: bool = False) -> None:
    """Check one argument spec. ``ranged`` allows RangeConfigIterator's meta attributes
    and the list forms they iterate over. ``driver``: checked before any job, where torch
    is never imported: a device value need only be a string (torch judges it when the
    cell runs), and unknown fields are left to the runner to warn about in the cell's log
    (here the warning could not say which file)."""
    if not isinstance(spec, dict):
        raise SpecError(path, f"expected an argument spec object, got {type(spec).__name__}")
    if "type" not in spec:
        raise SpecError(f"{path}.type", "missing")
    kind = spec["type"]
    if kind not in TYPES:
        raise SpecError(f"{path}.type", f"unknown type {kind!r}")
    ranges = _check_meta(spec, kind, path, ranged)
    unknown = set(spec) - _FIELDS[kind] - META_ATTRS - {"type"}
    if unknown and not driver:
        # shown(): a key with a newline would forge a log line (the cell's error is read
        # off the last one)
        log.warning("%s: ignoring unknown field(s) %s of a %s", shown(path),
                    shown(", ".join(sorted(map(str, unknown)))), kind)
    if kind in SCALAR_NUMBER_TYPES:
        _check_number(spec, kind, path, ranges)
    elif kind == "bool":
        _check_value(spec, path, ranges, lambda v: isinstance(v, bool), "true or false")
    elif kind == "str":
        if "value" in spec:
            _check_value(spec, path, ranges, lambda v: isinstance(v, str), "a string")
    elif kind == "device":
        _check_value(spec, path, ranges, _is_str if driver else _is_device,
                     "a device such as 'cpu' or 'cuda:0'")
    elif kind in ("genericlist", "tuple"):
        items = spec.get("value")
        if not isinstance(items, list):
            raise SpecError(f"{path}.value", f"a {kind} needs a list of argument specs")
        for i, item in enumerate(items):
            check(item, f"{path}.value[{i}]", ranged=ranged, driver=driver)
    elif kind == "tensor":
        _check_tensor(spec, path, ranges)


def _check_meta(spec: dict, kind: str, path: str, ranged: bool) -> set[str]:
    present = META_ATTRS & set(spec)
    if present and not ranged:
        raise SpecError(f"{path}.{sorted(present)[0]}",
                        "needs \"input_iterator\": \"RangeConfigIterator\" (or build_iterator)")
    if ATTR_COPY in spec and kind != "tensor":
        raise SpecError(f"{path}.{ATTR_COPY}", f"only tensor args can copy, not a {kind}")
    if ATTR_RANGE not in spec:
        return set()
    names = spec[ATTR_RANGE]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise SpecError(f"{path}.{ATTR_RANGE}", "must be a list of field names")
    for name in names:
        if name not in RANGEABLE.get(kind, ()):
            valid = ", ".join(sorted(RANGEABLE.get(kind, ()))) or "nothing"
            raise SpecError(f"{path}.{ATTR_RANGE}",
                            f"cannot range over {name!r} of a {kind} (valid: {valid})")
        if name not in spec:
            raise SpecError(f"{path}.{ATTR_RANGE}", f"names {name!r}, which the spec lacks")
    return set(names)


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_device(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    import torch

    try:
        torch.device(value)
    except (RuntimeError, ValueError):
        return False
    return True


def _choices(spec: dict, key: str, path: str, ranges: set[str]) -> list[Any]:
    """The values ``spec[key]`` stands for: the list itself when the key is ranged."""
    if key not in spec:
        raise SpecError(f"{path}.{key}", "missing")
    if key not in ranges:
        return [spec[key]]
    if not isinstance(spec[key], list) or not spec[key]:
        raise SpecError(f"{path}.{key}", f"a ranged {key} must be a non-empty list")
    return spec[key]


def _check_value(spec: dict, path: str, ranges: set[str], ok: Any, what: str) -> None:
    for value in _choices(spec, "value", path, ranges):
        if not ok(value):
            raise SpecError(f"{path}.value", f"expected {what}, got {value!r}")


def _check_number(spec: dict, kind: str, path: str, ranges: set[str]) -> None:
    has_value, has_range = "value" in spec, "value_range" in spec
    if has_value == has_range:
        raise SpecError(path, f"a {kind} needs exactly one of value and value_range")
    if has_value:
        if "value" in ranges:
            full_range(spec["value"], f"{path}.value")
        elif not _is_number(spec["value"]):
            # PARAM passes the value through unchanged (its own test config has an
            # "int" of 2.5), so any number is accepted.
            raise SpecError(f"{path}.value", f"expected a number, got {spec['value']!r}")
        return
    _check_value_range(spec["value_range"], f"{path}.value_range",
                       integer=kind in ("int", "long"))


def _check_value_range(bounds: Any, path: str, *, integer: bool) -> None:
    ok = _is_int if integer else _is_number
    if not isinstance(bounds, list) or len(bounds) != 2 or not all(ok(b) for b in bounds):
        kind = "integers" if integer else "numbers"
        raise SpecError(path, f"expected [min, max] of {kind}, got {bounds!r}")
    if bounds[0] > bounds[1]:
        raise SpecError(path, f"min > max in {bounds!r}")


def _check_tensor(spec: dict, path: str, ranges: set[str]) -> None:
    dtypes = _choices(spec, "dtype", path, ranges)
    for name in dtypes:
        check_dtype(name, f"{path}.dtype")
    if "shape" not in spec:
        raise SpecError(f"{path}.shape", "missing")
    shape = spec["shape"]
    if not isinstance(shape, list):
        raise SpecError(f"{path}.shape", f"expected a list of sizes, got {shape!r}")
    for i, size in enumerate(shape):
        if isinstance(size, list) and "shape" in ranges:
            full_range(size, f"{path}.shape[{i}]")
        elif problem := _size_problem(size, negative_ok=ATTR_COPY in spec):
            raise SpecError(f"{path}.shape[{i}]", problem)
    requires_grad = spec.get("requires_grad")
    if requires_grad is not None and not isinstance(requires_grad, bool):
        raise SpecError(f"{path}.requires_grad", f"expected true or false, got {requires_grad!r}")
    if requires_grad:
        for name in dtypes:
            if name not in FLOAT_DTYPES:
                raise SpecError(f"{path}.requires_grad",
                                f"a {name} tensor cannot require grad; set it to false")
    if "value_range" in spec:
        integer = all(n not in FLOAT_DTYPES for n in dtypes)
        if "bool" in dtypes:
            raise SpecError(f"{path}.value_range", "bool tensors take no value_range")
        _check_value_range(spec["value_range"], f"{path}.value_range", integer=integer)


def check_copies(args: list, path: str) -> None:
    """Check the shape of ``__copy__`` entries: ``{"shape": [dst, [src_arg, src_elem]]}``."""
    for a, arg in enumerate(args):
        if not isinstance(arg, dict) or ATTR_COPY not in arg:
            continue
        where = f"{path}.args[{a}].{ATTR_COPY}"
        copies = arg[ATTR_COPY]
        if not isinstance(copies, list):
            raise SpecError(where, "must be a list of {\"shape\": [dst, [src_arg, src_elem]]}")
        for k, entry in enumerate(copies):
            if not isinstance(entry, dict) or not entry:
                raise SpecError(f"{where}[{k}]", "expected {\"shape\": [dst, [src_arg, src_elem]]}")
            for attr, mapping in entry.items():
                if attr != "shape":
                    raise SpecError(f"{where}[{k}].{attr}", "only shape elements can be copied")
                ok = (isinstance(mapping, list) and len(mapping) == 2 and _is_int(mapping[0])
                      and isinstance(mapping[1], list) and len(mapping[1]) == 2
                      and all(_is_int(x) for x in mapping[1]))
                if not ok:
                    raise SpecError(f"{where}[{k}].shape",
                                    f"expected [dst, [src_arg, src_elem]], got {mapping!r}")
                src = mapping[1][0]
                if not 0 <= src < len(args) or args[src].get("type") != "tensor":
                    raise SpecError(f"{where}[{k}].shape", f"args[{src}] is not a tensor arg")


# ---------------------------------------------------------------------------------------
# Materializing


def _size(count: int) -> str:
    """Bytes in words, to three digits: 2.10 MB, 35,184 GB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            value = count / scale
            return f"{value:,.0f} {unit}" if value >= 100 else f"{value:.3g} {unit}"
    return f"{count} B"


def tensor_bytes(spec: Any, path: str) -> int:
    """Bytes of the tensors one concrete argument spec creates (in lists and tuples too); a
    malformed one counts none (``materialize`` says what is wrong with it)."""
    if not isinstance(spec, dict):
        return 0
    if spec.get("type") == "tensor":
        shape = spec.get("shape")
        if not isinstance(shape, list) or any(_size_problem(size) for size in shape):
            return 0
        numel = 1
        for size in shape:
            numel *= size
        return numel * dtype_of(spec.get("dtype"), f"{path}.dtype").itemsize
    if spec.get("type") in ("genericlist", "tuple"):
        return sum(tensor_bytes(item, f"{path}.value[{i}]")
                   for i, item in enumerate(spec.get("value") or []))
    return 0


def materialize_args(config: dict, device: str | torch.device, path: str,
                     free_bytes: int | None = None) -> tuple[list[Any], dict[str, Any]]:
    """Values for a concrete (already expanded) ``{"args", "kwargs"}`` spec. Tensors that
    would need more than ``free_bytes`` (the device's free memory, where known) are not
    made: a MemoryError says so, an out-of-memory input, before a host's memory is filled
    and the kernel's OOM killer picks a process, this run or another."""
    if free_bytes is not None:
        needed = (sum(tensor_bytes(a, f"{path}.args[{i}]")
                      for i, a in enumerate(config.get("args", [])))
                  + sum(tensor_bytes(a, f"{path}.kwargs.{k}")
                        for k, a in config.get("kwargs", {}).items()))
        if needed > free_bytes:
            raise MemoryError(f"its tensors need {_size(needed)}, more than the "
                              f"{_size(free_bytes)} free on {device} (out of memory before "
                              "the call)")
    args = [materialize(a, device, f"{path}.args[{i}]")
            for i, a in enumerate(config.get("args", []))]
    kwargs = {k: materialize(a, device, f"{path}.kwargs.{k}")
              for k, a in config.get("kwargs", {}).items()}
    return args, kwargs


def materialize(spec: dict, device: str | torch.device, path: str) -> Any:
    """The value of one concrete argument spec (random where the spec asks for it)."""
    import torch

    check(spec, path)
    kind = spec["type"]
    if kind in SCALAR_NUMBER_TYPES:
        if "value" in spec:
            return spec["value"]
        lo, hi = spec["value_range"]
        return random.randint(lo, hi) if kind in ("int", "long") else random.uniform(lo, hi)
    if kind in ("bool", "device"):
        return spec["value"] if kind == "bool" else torch.device(spec["value"])
    if kind == "str":
        return spec.get("value", "")
    if kind == "none":
        return None
    if kind in ("genericlist", "tuple"):
        items = [materialize(item, device, f"{path}.value[{i}]")
                 for i, item in enumerate(spec["value"])]
        return items if kind == "genericlist" else tuple(items)
    return make_tensor(spec, device, path)


def make_tensor(spec: dict, device: str | torch.device, path: str) -> torch.Tensor:
    import torch

    dtype = dtype_of(spec["dtype"], f"{path}.dtype")
    shape = spec["shape"]
    for i, size in enumerate(shape):
        if problem := _size_problem(size):
            raise SpecError(f"{path}.shape[{i}]", problem)
    requires_grad = spec.get("requires_grad", dtype.is_floating_point)
    bounds = spec.get("value_range")
    if dtype.is_floating_point:
        tensor = torch.rand(shape, dtype=dtype, device=device)
        if bounds is not None:
            tensor.mul_(bounds[1] - bounds[0]).add_(bounds[0])
    elif dtype == torch.bool:
        tensor = torch.rand(shape, device=device) < 0.5
    else:
        info = torch.iinfo(dtype)
        if bounds is None:  # PARAM's default range, clipped to unsigned types
            lo, hi = max(DEFAULT_INT_RANGE[0], info.min), DEFAULT_INT_RANGE[1]
        else:
            lo, hi = bounds
            if lo < info.min or hi > info.max:
                raise SpecError(f"{path}.value_range",
                                f"{bounds!r} exceeds {spec['dtype']} [{info.min}, {info.max}]")
        tensor = torch.randint(lo, hi + 1, shape, dtype=dtype, device=device)
    return tensor.requires_grad_(True) if requires_grad else tensor


def tensors_in(values: Iterable[Any]) -> list[torch.Tensor]:
    """Every tensor in a (nested) list/tuple/dict of values, in order."""
    import torch

    found: list[torch.Tensor] = []
    stack = list(values)[::-1]
    while stack:
        value = stack.pop()
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, list | tuple):
            stack.extend(reversed(value))
        elif isinstance(value, dict):
            stack.extend(reversed(list(value.values())))
    return found
