"""Config iterators: turn an op config's list of build or input specs into concrete specs.

``DefaultConfigIterator`` yields each spec as written, with ids 0, 1, 2, ...
``RangeConfigIterator`` expands PARAM's ``__range__`` fields into their Cartesian product
(first argument outermost, as PARAM's ListProduct/TableProduct) with ids
``<spec index>_<combination index>``, then applies ``__copy__`` (shape elements copied
from earlier-resolved tensor args) and strips the meta attributes.

Both yield ``ConfigItem``s; a spec that fails its check becomes one item carrying the
one-line error, so the caller records it and carries on with the next spec. So does a
ranged spec that would take the list past ``MAX_EXPANDED`` concrete specs (counted before
any is made).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dlbench.ops import grammar
from dlbench.ops.grammar import ATTR_COPY, ATTR_RANGE, META_ATTRS, SpecError

# The most concrete specs one build or input list may expand to (``__range__``s
# multiply): more would take days to run and, being listed first, memory to hold.
MAX_EXPANDED = 100_000


@dataclass
class ConfigItem:
    id: str
    config: dict[str, Any] | None  # concrete {"args": [...], "kwargs": {...}}; None on error
    path: str  # JSON path of the spec it came from, relative to the operator
    error: str | None = None


class ConfigIterator:
    """``configs[key]`` is a list of ``{"args", "kwargs"}`` specs; ``path`` locates
    ``configs`` in the config file (for error messages)."""

    def __init__(self, configs: dict[str, Any], key: str, device: str, path: str = ""):
        self.specs = configs[key]
        self.device = device
        self.base = f"{path}.{key}" if path else key
        if not isinstance(self.specs, list):
            raise SpecError(self.base, "must be a list of {\"args\", \"kwargs\"} specs")

    def __iter__(self) -> Iterator[ConfigItem]:
        raise NotImplementedError


class DefaultConfigIterator(ConfigIterator):
    def __iter__(self) -> Iterator[ConfigItem]:
        for index, spec in enumerate(self.specs):
            path = f"{self.base}[{index}]"
            try:
                grammar.check_args(spec, path)
            except SpecError as exc:
                yield ConfigItem(str(index), None, path, str(exc))
                continue
            yield ConfigItem(str(index), normalized(spec), path)


class RangeConfigIterator(ConfigIterator):
    def __iter__(self) -> Iterator[ConfigItem]:
        total = 0
        for var_id, spec in enumerate(self.specs):
            path = f"{self.base}[{var_id}]"
            try:
                grammar.check_args(spec, path, ranged=True)
            except SpecError as exc:
                yield ConfigItem(f"{var_id}_*", None, path, str(exc))
                continue
            count = count_combinations(spec)
            why = past_limit(count, total)
            if why:
                yield ConfigItem(f"{var_id}_*", None, path, f"{path}: {why}")
                continue
            total += count
            for config_id, combination in enumerate(expand_config(spec)):
                item_id = f"{var_id}_{config_id}"
                try:
                    apply_copies(combination["args"], path)
                except SpecError as exc:
                    yield ConfigItem(item_id, None, path, str(exc))
                    continue
                yield ConfigItem(item_id, strip_meta(combination), path)


ITERATORS: dict[str, type[ConfigIterator]] = {
    "DefaultConfigIterator": DefaultConfigIterator,
    "RangeConfigIterator": RangeConfigIterator,
}


def normalized(spec: dict[str, Any]) -> dict[str, Any]:
    return {"args": copy.deepcopy(spec.get("args", [])),
            "kwargs": copy.deepcopy(spec.get("kwargs", {}))}


def past_limit(count: int, total: int) -> str | None:
    """Why a ranged spec of ``count`` combinations, after ``total`` in its list, takes the
    list past ``MAX_EXPANDED``; None when it does not (the run's words and the driver's
    check's, ``dlbench.ops.precheck``)."""
    if total + count <= MAX_EXPANDED:
        return None
    if count > MAX_EXPANDED:
        return (f"its __range__ fields make more than {MAX_EXPANDED} combinations, the most "
                "one list may run")
    return (f"its {count} __range__ combinations and the {total} before it exceed the "
            f"{MAX_EXPANDED} one list may run")


def count_combinations(spec: dict[str, Any]) -> int:
    """How many concrete specs ``expand_config`` makes of a checked spec, counted without
    making them (and only up to ``MAX_EXPANDED + 1``)."""
    count = 1
    for arg in [*spec.get("args", []), *spec.get("kwargs", {}).values()]:
        count = min(count * count_variants(arg), MAX_EXPANDED + 1)
    return count


def count_variants(spec: dict[str, Any]) -> int:
    """``len(expand_arg(spec))``, counted without expanding (up to ``MAX_EXPANDED + 1``)."""
    ranges = set(spec.get(ATTR_RANGE, []))
    kind = spec["type"]
    count = 1
    for key in ranges:
        value = spec[key]
        if kind == "tensor" and key == "shape":
            sizes = [len(grammar.full_range(s, "shape")) for s in value if isinstance(s, list)]
        elif kind in ("int", "long"):
            sizes = [len(grammar.full_range(value, "value"))]
        elif kind in ("genericlist", "tuple"):
            sizes = [count_variants(item) for item in value]
        else:
            sizes = [len(value)]
        for size in sizes:
            count = min(count * size, MAX_EXPANDED + 1)
    return count


def expand_config(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every combination of the ranged fields: args outermost, then kwargs."""
    args = spec.get("args", [])
    kwargs = spec.get("kwargs", {})
    arg_choices = [expand_arg(a) for a in args]
    kwarg_choices = [expand_arg(a) for a in kwargs.values()]
    for arg_combo in itertools.product(*arg_choices):
        for kwarg_combo in itertools.product(*kwarg_choices):
            yield {"args": copy.deepcopy(list(arg_combo)),
                   "kwargs": copy.deepcopy(dict(zip(kwargs, kwarg_combo, strict=True)))}


def expand_arg(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The concrete variants of one (checked) arg spec, in PARAM's order: fields in the
    spec's own key order, the first ranged field outermost."""
    ranges = set(spec.get(ATTR_RANGE, []))
    if not ranges:
        return [spec]
    kind = spec["type"]
    choices: dict[str, list[Any]] = {}
    for key, value in spec.items():
        if key not in ranges:
            choices[key] = [value]
        elif kind == "tensor" and key == "shape":
            per_dim = [list(grammar.full_range(s, "shape")) if isinstance(s, list) else [s]
                       for s in value]
            choices[key] = [list(shape) for shape in itertools.product(*per_dim)]
        elif kind in ("int", "long"):
            choices[key] = list(grammar.full_range(value, "value"))
        elif kind in ("genericlist", "tuple"):
            items = [expand_arg(item) for item in value]
            choices[key] = [list(combo) for combo in itertools.product(*items)]
        else:  # str, bool, device values and tensor dtypes: an explicit list
            choices[key] = list(value)
    return [dict(zip(choices, combo, strict=True)) for combo in itertools.product(*choices.values())]


def apply_copies(args: list[dict[str, Any]], path: str) -> None:
    """PARAM's ``__copy__``: ``{"shape": [dst, [src_arg, src_elem]]}`` sets this tensor's
    ``shape[dst]`` to ``args[src_arg].shape[src_elem]``; args are processed in order, so a
    copy sees the copies made by earlier args."""
    for a, arg in enumerate(args):
        if arg.get("type") != "tensor" or ATTR_COPY not in arg:
            continue
        for k, entry in enumerate(arg[ATTR_COPY]):
            for attr, (dst, (src_arg, src_elem)) in entry.items():
                where = f"{path}.args[{a}].{ATTR_COPY}[{k}].{attr}"
                target, source = arg[attr], args[src_arg][attr]
                if not 0 <= dst < len(target):
                    raise SpecError(where, f"element {dst} is outside shape {target}")
                if not 0 <= src_elem < len(source):
                    raise SpecError(where, f"args[{src_arg}] has no shape element {src_elem}")
                target[dst] = source[src_elem]


def strip_meta(config: dict[str, Any]) -> dict[str, Any]:
    def strip(spec: Any) -> Any:
        if isinstance(spec, dict):
            return {k: strip(v) for k, v in spec.items() if k not in META_ATTRS}
        if isinstance(spec, list):
            return [strip(item) for item in spec]
        return spec

    return {"args": [strip(a) for a in config["args"]],
            "kwargs": {k: strip(v) for k, v in config["kwargs"].items()}}


def make_iterator(name: str | None, configs: dict[str, Any], key: str, device: str,
                  path: str) -> ConfigIterator:
    cls = ITERATORS.get(name or "DefaultConfigIterator")
    if cls is None:
        raise SpecError(f"{key}_iterator", f"unknown iterator {name!r} (valid: {', '.join(ITERATORS)})")
    return cls(configs, key, device, path)
