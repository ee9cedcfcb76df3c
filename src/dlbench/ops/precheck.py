"""An op config checked before any job: whatever can be refused without torch, in the
line its run would have recorded as a failed input, with the file's name before it.

Refused here: a file that is no op config (``configfile``); an operator name of no form
the registry resolves (not ``torch.*`` of its namespaces, ``aten::*`` or one of PARAM's
whole-model workloads; not a public name); an operator that is not an object with a
``config`` list or names an unknown iterator; lists with nothing to run (an empty
``config`` or ``input``); a config entry without ``input``; any build or input spec the
grammar refuses (types, dtypes, shapes, ranges, ...); what expanding ``__range__`` specs
would find: a build or input list of more than ``iterators.MAX_EXPANDED`` combinations
(counted, not made), a ``__copy__`` from or to a shape element that is not there, a
negative size that no copy fills.

Left to the run, which still records each as a failed input: what only torch knows (an
operator that torch lacks or the allow-list refuses, a device it cannot name, an
overload).

The operator-name rules live here, torch-free, and ``registry.resolve`` applies them
first. This module imports no framework: the driver checks every study's op configs
with it.
"""

from __future__ import annotations

import os
from typing import Any

from dlbench.cellrun import CellError
from dlbench.ops import configfile, grammar, iterators
from dlbench.ops.configfile import json_type, shown
from dlbench.ops.grammar import SpecError

# Namespaces an operator name may live in; the first component is always ``torch``.
NAMESPACES = ("torch", "torch.nn", "torch.nn.functional", "torch.linalg", "torch.special",
              "torch.fft", "torch.Tensor", "torch.ops.aten")

# PARAM's whole-network workloads and the dlbench models that implement them.
ZOO_WORKLOADS = {
    "pytorch.model.alex_net": "alexnet_owt",
    "pytorch.model.resnet": "resnet50",
}

LIST_HINT = "`python -m dlbench.ops.registry` lists what is allowed"

# PARAM's data generators (one, under two spellings), and what an operator's object is.
DATA_GENERATORS = ("PyTorch:DefaultDataGenerator", "PyTorch::DefaultDataGenerator")
OP_SHAPE = ("expected an object with a \"config\" list (and optional iterators and data "
            "generators)")
# An operator's config list, or an entry's input list, that is empty: nothing would run.
NOTHING_TO_RUN = "an empty list, no inputs to run"


class OpError(ValueError):
    """An operator that cannot be resolved or built; the message is one line."""


def refused(name: str, reason: str) -> OpError:
    """The one-line refusal of a name that is not on the allow-list."""
    return OpError(f"{name}: not on the operator allow-list ({reason}); {LIST_HINT}")


def check_aten_name(name: str, op: str) -> None:
    """``op`` (of ``aten::op`` or ``torch.ops.aten.op``) is a public aten name."""
    if not op.isidentifier() or op.startswith("_"):
        raise OpError(f"{name}: unknown operator (bad aten name {op!r})")


def check_name(name: Any) -> None:
    """``OpError`` (one line) when ``name`` has no form an operator name can have. Which
    names of that form torch has, and allows, only the registry can tell."""
    if not isinstance(name, str) or not name:
        raise OpError(f"operator name must be a non-empty string, got {name!r}")
    if name in ZOO_WORKLOADS:
        return
    if name.startswith("aten::"):
        check_aten_name(name, name.removeprefix("aten::"))
        return
    parts = name.split(".")
    namespace, leaf = ".".join(parts[:-1]), parts[-1]
    if parts[0] != "torch" or len(parts) < 2:
        raise refused(name, f"expected torch.*, aten::* or one of {', '.join(ZOO_WORKLOADS)}")
    if namespace not in NAMESPACES:
        raise refused(name, f"operators are looked up in {', '.join(NAMESPACES)}")
    if not leaf.isidentifier() or leaf.startswith("_"):
        raise OpError(f"{name}: unknown operator (not a public name)")


# -- the file ------------------------------------------------------------------------------


def check_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The operators of the op config at ``path``; ``CellError`` of one line naming the
    file, the operator and the place in it when the file or one operator is refused."""
    config = configfile.load(path)
    for op_name, info in config.items():
        problem = operator_problem(op_name, info)
        if problem:
            raise CellError(f"config {shown(os.fspath(path))}: {shown(problem)}")
    return config


def operator_problem(op_name: str, info: Any) -> str | None:
    """The line the runner (``runner.Benchmark.run_op``) records for this operator's first
    problem that needs no torch to find, or None."""
    # the name as it starts a message: quoted when it could not be told apart (as the run)
    label = op_name if op_name and op_name.strip() == op_name else repr(op_name)
    try:
        check_op_info(info)
        check_name(op_name)
    except SpecError as exc:
        return f"{label}: {exc}"
    except OpError as exc:
        return str(exc)
    for c, entry in enumerate(info["config"]):
        try:
            _check_entry(entry, f"config[{c}]", info)
        except SpecError as exc:
            return f"{label}: {exc}"
    return None


def check_op_info(info: Any) -> None:
    """An operator's object: its iterators and data generators known, a ``config`` list
    with something to run."""
    if not isinstance(info, dict):
        raise SpecError("<operator>", OP_SHAPE + f", got {json_type(info)}")
    for key in ("build_iterator", "input_iterator"):
        if key in info and (not isinstance(info[key], str)
                            or info[key] not in iterators.ITERATORS):
            raise SpecError(key, f"unknown iterator {info[key]!r} "
                                 f"(valid: {', '.join(iterators.ITERATORS)})")
    for key in ("build_data_generator", "input_data_generator"):
        if info.get(key) not in (None, *DATA_GENERATORS):
            raise SpecError(key, f"unknown data generator {info[key]!r} "
                                 f"(valid: {DATA_GENERATORS[0]})")
    if not isinstance(info.get("config"), list):
        raise SpecError("config", "missing or not a list of {\"build\", \"input\"} objects")
    if not info["config"]:
        raise SpecError("config", NOTHING_TO_RUN)


def _check_entry(entry: Any, cpath: str, info: dict[str, Any]) -> None:
    """One ``{"build", "input"}`` entry of an operator's config list."""
    if not isinstance(entry, dict):
        raise SpecError(cpath, "expected an object with \"input\" (and \"build\"), got "
                               f"{json_type(entry)}")
    if "input" not in entry:
        raise SpecError(f"{cpath}.input", "missing")
    if entry.get("build"):  # none, or PARAM's empty list: built once without arguments
        _check_specs(info.get("build_iterator"), entry, "build", cpath)
    _check_specs(info.get("input_iterator"), entry, "input", cpath)
    if not entry["input"]:  # the run makes no inputs of it
        raise SpecError(f"{cpath}.input", NOTHING_TO_RUN)


def _check_specs(iterator_name: str | None, entry: dict[str, Any], key: str,
                 cpath: str) -> None:
    """Check each spec of ``entry[key]`` as its iterator does, without expanding any (the
    device is the run's: checking does not use it)."""
    iterator = iterators.make_iterator(iterator_name, entry, key, "cpu", cpath)
    ranged = isinstance(iterator, iterators.RangeConfigIterator)
    total = 0  # the list's concrete specs so far (RangeConfigIterator's limit is per list)
    for index, spec in enumerate(iterator.specs):
        path = f"{iterator.base}[{index}]"
        grammar.check_args(spec, path, ranged=ranged, driver=True)
        if ranged:
            total = _check_expansion(spec, path, total)


def _check_expansion(spec: dict[str, Any], path: str, total: int) -> int:
    """What expanding a checked ranged spec would refuse, found without expanding it; the
    list's count of concrete specs with this one's added."""
    count = iterators.count_combinations(spec)  # capped just past the limit
    why = iterators.past_limit(count, total)
    if why:
        raise SpecError(path, why)
    _check_copies(spec.get("args", []), path)
    return total + count


def _check_copies(args: list[Any], path: str) -> None:
    """``iterators.apply_copies`` on shapes as written: a range stands for one element
    whatever its values, so a copy that misses an element misses it in every combination,
    and a negative size (a copy's placeholder) that no copy fills is negative in every one
    (the tensor cannot be made)."""
    shapes = {a: list(arg["shape"]) for a, arg in enumerate(args) if arg["type"] == "tensor"}
    for a, arg in enumerate(args):
        for k, entry in enumerate(arg.get(grammar.ATTR_COPY, [])):
            for attr, (dst, (src_arg, src_elem)) in entry.items():
                where = f"{path}.args[{a}].{grammar.ATTR_COPY}[{k}].{attr}"
                target, source = shapes[a], shapes[src_arg]
                if not 0 <= dst < len(target):
                    raise SpecError(where, f"element {dst} is outside shape {arg[attr]}")
                if not 0 <= src_elem < len(source):
                    raise SpecError(where, f"args[{src_arg}] has no shape element {src_elem}")
                target[dst] = source[src_elem]
    for a, shape in shapes.items():
        for i, size in enumerate(shape):
            if isinstance(size, int) and size < 0:
                raise SpecError(f"{path}.args[{a}].shape[{i}]",
                                f"expected a size >= 0, got {size!r}")
