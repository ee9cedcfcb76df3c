"""Operators by name, resolved without eval, and only from an allow-list: ``torch.*``
callables and ``torch.nn`` layers found by walking attributes of a few torch namespaces,
``aten::*`` ops through ``torch.ops.aten``, and PARAM's whole-model workloads mapped to
dlbench's model zoo.

An op config is data shared between colleagues, so an operator may compute on tensors and
nothing else: no files, processes, network, seeds or process-wide settings. What is
allowed is derived from torch itself, not from a list of known-bad names:

* ATen ops (``aten::X``, ``torch.ops.aten.X``) are judged by their schemas, see
  ``aten_refusal``: every overload of the op that the ATen dispatcher registers must
  take or return a tensor, have a result or write one of its own tensor arguments, and
  take strings only as option selectors (``rounding_mode``, ``approximate``, ...), never
  a file name. Names that only the TorchScript interpreter knows (``aten::manual_seed``,
  ``aten::set_grad_enabled``, ``aten::warn``, ...) are not tensor ops.
* ``torch.X``, ``torch.nn.functional.X``, ``torch.linalg.X``, ``torch.special.X``,
  ``torch.fft.X`` and ``torch.Tensor.X`` that are torch's generated bindings of an ATen
  op follow that op's verdict, so that both spellings agree (``torch.from_file`` is
  refused as ``aten::from_file`` is). Python functions are allowed when defined in a
  tensor-math module (``TENSOR_MATH_MODULES``); ``torch.Tensor``'s own Python methods
  when the ATen op of their name is. Everything else (``torch.save``, ``torch.load``,
  ``torch.manual_seed``, ``torch.set_num_threads``, ``torch.compile``, ...) is refused.
* ``torch.nn`` classes are allowed when they are layers: defined in one of
  ``LAYER_MODULES`` of ``torch.nn.modules`` (not containers, not ``Module`` itself).

``python -m dlbench.ops.registry [NAME ...]`` prints the rules and what they allow, or
the verdict on each NAME.

An ``Operator`` is built once per build spec and then called on many inputs. ``call``
returns exactly what the timed region invokes (a function, its args and kwargs), so that
the measurement contains the operator and nothing of this wrapper.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch

# The forms of operator names (namespaces, PARAM's whole-model workloads) are known
# without torch, so that the driver refuses a name of no such form before any job.
from dlbench.ops.precheck import (
    NAMESPACES,
    ZOO_WORKLOADS,
    OpError,
    check_aten_name,
    check_name,
    refused,
)

# -- the allow-list ---------------------------------------------------------------------

# ``str`` arguments of ATen ops that select one of a fixed set of behaviours, each checked
# by its kernel (einsum's equation is a formula over its tensor arguments). Any other
# string argument, such as aten::from_file's ``filename``, makes the op refused: strings
# are how an op could name a file. (These are all the names ATen's tensor ops use.)
STR_OPTIONS = frozenset({
    "approximate", "driver", "equation", "indexing", "interpolation", "mode", "norm", "ord",
    "p", "pad_mode", "padding", "padding_side", "reduce", "rounding_mode", "side", "UPLO",
})

# Python modules whose public functions are compositions of tensor ops.
TENSOR_MATH_MODULES = frozenset({"torch.functional", "torch.nn.functional", "torch._lowrank",
                                 "torch._lobpcg"})

# Submodules of torch.nn.modules that define layers (not ``module``, the base class, nor
# ``container``: Sequential, ModuleList, ... hold other modules and their state).
LAYER_MODULES = frozenset({
    "activation", "adaptive", "batchnorm", "channelshuffle", "conv", "distance", "dropout",
    "flatten", "fold", "instancenorm", "linear", "loss", "normalization", "padding",
    "pixelshuffle", "pooling", "rnn", "sparse", "transformer", "upsampling",
})
# Layers of those modules that are not tensor-only: SyncBatchNorm communicates with other
# processes through torch.distributed.
NOT_LAYERS = frozenset({"SyncBatchNorm"})

# Modules whose builtins are torch's generated bindings of ATen ops (a binding's
# ``__name__`` is its op's name: torch.linalg.norm is ``linalg_norm``); ``None`` is the
# ``__self__`` of torch.* functions (static methods of torch._C._VariableFunctions).
# torch.Tensor's builtin methods are bindings too (methods of torch._C.TensorBase).
_BINDING_OWNERS = (None, torch._C._nn, torch._C._linalg, torch._C._special, torch._C._fft)


# -- ATen ops, judged by their schemas ----------------------------------------------------


@functools.cache
def _dispatcher_overloads() -> dict[str, frozenset[str]]:
    """Overload names (``default`` for the unnamed one) of each public aten op registered
    with the ATen dispatcher, where tensor kernels live. The TorchScript interpreter adds
    overloads of its own to some names (``aten::add.str``, ``aten::split.str``) and has
    names of its own (``aten::manual_seed``, ``aten::warn``): those are never allowed."""
    found: dict[str, set[str]] = {}
    for qualified in torch._C._dispatch_get_all_op_names():
        namespace, _, rest = qualified.partition("::")
        if namespace == "aten":
            op, _, overload = rest.partition(".")
            found.setdefault(op, set()).add(overload or "default")
    return {op: frozenset(overloads) for op, overloads in found.items()}


def _schemas(op: str) -> list[Any]:
    try:
        return list(torch._C._jit_get_schemas_for_operator(f"aten::{op}"))
    except RuntimeError:
        return []


# The arguments every ATen tensor factory (randn, zeros, arange, ...) has; the dispatcher's
# other ops that take no tensor answer questions about types or process state.
_FACTORY_ARGS = frozenset({"dtype", "layout", "device"})


def _kinds(jit_type: Any) -> set[str]:
    """The kinds of a schema type and of the types inside it (``Tensor?[]``: list,
    optional, tensor)."""
    kinds, stack = set(), [jit_type]
    while stack:
        current = stack.pop()
        kinds.add(current.kind())
        stack.extend(current.containedTypes())
    return kinds


def overload_refusal(schema: Any) -> str | None:
    """Why one dispatcher overload is not tensor math, or None when it is."""
    args, returns = list(schema.arguments), list(schema.returns)
    if (not any("TensorType" in _kinds(a.type) for a in args)
            and not _FACTORY_ARGS.issubset(a.name for a in args)):
        return "it takes no tensor and is not a tensor factory"
    writes = [a for a in args if a.alias_info is not None and a.alias_info.is_write]
    if not returns and not writes:
        # Returns nothing and changes none of its arguments: its effect is elsewhere.
        return "it returns nothing and writes none of its arguments"
    for arg in writes:
        if "TensorType" not in _kinds(arg.type):
            return f"it writes its non-tensor argument {arg.name!r}"
    for arg in args:
        if "StringType" in _kinds(arg.type) and arg.name not in STR_OPTIONS:
            return (f"its string argument {arg.name!r} is not an option selector: "
                    "an op may not name a file")
    return None


@functools.cache
def aten_refusal(op: str) -> str | None:
    """Why ``aten::op`` is not on the allow-list, or None when it is: a public op of the
    ATen dispatcher every overload of which takes a tensor or is a tensor factory, has a
    result or writes its own tensor arguments (in-place ops such as ``aten::add_``), and
    takes strings only as option selectors. Consuming the default random generator (randn,
    dropout) is allowed; seeding it is not an ATen tensor op. ``KeyError`` for a name
    that torch does not know at all."""
    if not op.isidentifier() or op.startswith("_"):
        return "not a public aten name"
    overloads = _dispatcher_overloads().get(op)
    schemas = _schemas(op)
    if not overloads:
        if not schemas:
            raise KeyError(op)
        return f"aten::{op} is a TorchScript interpreter builtin, not an ATen tensor op"
    judged = set()
    for schema in schemas:
        overload = schema.overload_name or "default"
        if overload in overloads:
            reason = overload_refusal(schema)
            if reason:
                suffix = "" if overload == "default" else f".{overload}"
                return f"aten::{op}{suffix}: {reason}"
            judged.add(overload)
    if judged != overloads:  # fail closed: an overload whose schema was not seen
        return f"aten::{op}.{min(overloads - judged)}: its schema cannot be inspected"
    return None


# -- operators ----------------------------------------------------------------------------


class Operator:
    name: str
    # False for in-place ops: they run under no_grad and have no backward (as PARAM).
    grad_enabled: bool = True

    def build(self, args: list[Any], kwargs: dict[str, Any], device: str | torch.device) -> None:
        if args or kwargs:
            raise OpError(f"{self.name} takes no build arguments")

    def call(self, args: list[Any], kwargs: dict[str, Any]
             ) -> tuple[Callable[..., Any], list[Any], dict[str, Any]]:
        raise NotImplementedError

    def parameters(self) -> list[torch.Tensor]:
        """Tensors the operator owns (module weights and buffers)."""
        return []

    def trainable(self) -> list[torch.Tensor]:
        return [p for p in self.parameters() if p.requires_grad]


class CallableOp(Operator):
    def __init__(self, name: str, func: Callable[..., Any], grad_enabled: bool = True):
        self.name, self.func, self.grad_enabled = name, func, grad_enabled

    def call(self, args, kwargs):
        return self.func, args, kwargs


class ModuleOp(Operator):
    """A ``torch.nn.Module`` class, constructed from the build spec on the device."""

    def __init__(self, name: str, constructor: type[torch.nn.Module]):
        self.name, self.constructor = name, constructor
        self.module: torch.nn.Module | None = None

    def build(self, args, kwargs, device):
        with torch.device(device):
            self.module = self.constructor(*args, **kwargs).to(device)

    def call(self, args, kwargs):
        if self.module is None:
            raise OpError(f"{self.name} was not built")
        return self.module, args, kwargs

    def parameters(self):
        if self.module is None:
            return []
        return [*self.module.parameters(), *self.module.buffers()]

    def trainable(self):
        return [] if self.module is None else [p for p in self.module.parameters()
                                               if p.requires_grad]


class ZooModelOp(ModuleOp):
    """A PARAM whole-model workload, built by dlbench's PyTorch model zoo."""

    def __init__(self, name: str, model: str):
        super().__init__(name, torch.nn.Module)
        self.model = model

    def build(self, args, kwargs, device):
        if args or kwargs:
            raise OpError(f"{self.name} takes no build arguments")
        from dlbench.pytorch import zoo

        with torch.device(device):
            self.module = zoo.build(self.model, {}).module.to(device)


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


class AtenOp(Operator):
    """``aten::name`` (or ``torch.ops.aten.name``): the overload a build schema names, e.g.
    ``aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor``, or else
    the overload torch's resolution picks for each input. Only the op's dispatcher
    overloads run, never the TorchScript interpreter's overloads of the same name."""

    def __init__(self, name: str, op: str, packet: Any):
        self.name, self.qualified, self.packet = name, f"aten::{op}", packet
        self.overloads = _dispatcher_overloads()[op]
        self.func: Callable[..., Any] | None = None  # None: resolved per input

    def _overload(self, overload: str) -> Callable[..., Any]:
        try:
            func = getattr(self.packet, overload)
        except AttributeError:
            raise OpError(f"{self.name}: no overload {overload!r}") from None
        if overload not in self.overloads:
            raise refused(f"{self.qualified}.{overload}", "a TorchScript interpreter overload, "
                                                          "not an ATen tensor op")
        return func

    def build(self, args, kwargs, device):
        self.func = None
        if kwargs:
            raise OpError(f"{self.name}: build takes one schema string, not kwargs")
        if not args:
            return
        schema = args[0]
        # PARAM's older form lists argument types (["Tensor", "Tensor", ...]): the overload
        # is resolved from the inputs, so the list needs no further use.
        if len(args) == 1 and isinstance(schema, list) and all(isinstance(s, str) for s in schema):
            return
        if len(args) != 1 or not isinstance(schema, str):
            raise OpError(f"{self.name}: build takes one schema string")
        try:
            parsed = torch._C.parse_schema(schema)
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else "parse error"
            raise OpError(f"{self.name}: bad schema {schema!r}: {first}") from None
        if parsed.name != self.qualified:
            raise OpError(f"{self.name}: schema is for {parsed.name}")
        self.func = self._overload(parsed.overload_name or "default")

    def call(self, args, kwargs):
        func = self.func
        if func is None:
            try:
                overload = torch._C._jit_resolve_packet(self.qualified, *args, **kwargs)
            except RuntimeError as exc:
                lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
                detail = lines[1] if len(lines) > 1 else _first_line(exc)
                raise OpError(f"{self.name}: no overload takes these arguments ({detail})"
                              ) from None
            func = self._overload(overload)
        return func, args, kwargs


# -- resolving names ----------------------------------------------------------------------


def resolve(name: str) -> Callable[[], Operator]:
    """A factory of fresh ``Operator``s for ``name``; ``OpError`` (one line) if it names
    none or names something that is not on the allow-list."""
    check_name(name)
    if name in ZOO_WORKLOADS:
        model = ZOO_WORKLOADS[name]
        return lambda: ZooModelOp(name, model)
    if name.startswith("aten::"):
        return _resolve_aten(name, name.removeprefix("aten::"))
    return _resolve_torch(name)


def _resolve_aten(name: str, op: str) -> Callable[[], Operator]:
    check_aten_name(name, op)  # also the op of a torch.* packet, not a name of the config
    try:
        reason = aten_refusal(op)
    except KeyError:
        raise OpError(f"{name}: unknown operator (torch.ops.aten has no {op!r})") from None
    if reason:
        raise refused(name, reason)
    packet = getattr(torch.ops.aten, op)
    return lambda: AtenOp(name, op, packet)


def _resolve_torch(name: str) -> Callable[[], Operator]:
    """A ``torch.*`` name, its form already checked (``check_name``)."""
    parts = name.split(".")
    namespace, leaf = ".".join(parts[:-1]), parts[-1]
    if namespace == "torch.ops.aten":
        return _resolve_aten(name, leaf)
    owner: Any = torch
    for part in parts[1:-1]:
        owner = getattr(owner, part)
    inplace = leaf.endswith("_")
    target = getattr(owner, leaf, None)
    if target is None and inplace and namespace == "torch":
        # PARAM's in-place ops (torch.add_, torch.clamp_) are tensor methods on the first arg.
        target = getattr(torch.Tensor, leaf, None)
    if target is None:
        raise OpError(f"{name}: unknown operator ({namespace} has no attribute {leaf!r})")
    if isinstance(target, type):
        reason = _class_refusal(namespace, target)
        if reason:
            raise refused(name, reason)
        return lambda: ModuleOp(name, target)
    if isinstance(target, torch._ops.OpOverloadPacket):  # torch.quantized_lstm and the like
        namespace_, _, op = target._qualified_op_name.partition("::")
        if namespace_ != "aten":
            raise refused(name, f"an op of {namespace_}::, not of aten::")
        return _resolve_aten(name, op)
    if not callable(target):
        raise OpError(f"{name}: not callable")
    reason = _callable_refusal(leaf, target)
    if reason:
        raise refused(name, reason)
    return lambda: CallableOp(name, target, grad_enabled=not inplace)


def _class_refusal(namespace: str, target: type) -> str | None:
    if not issubclass(target, torch.nn.Module):
        return "a class that is not a torch.nn.Module layer"
    module = target.__module__
    if (namespace != "torch.nn" or not module.startswith("torch.nn.modules.")
            or module.removeprefix("torch.nn.modules.") not in LAYER_MODULES):
        return f"a torch.nn.Module of {module}, not a layer of torch.nn"
    if target.__name__ in NOT_LAYERS:
        return f"{target.__name__} is not tensor-only: it uses torch.distributed"
    return None


def _callable_refusal(leaf: str, target: Any) -> str | None:
    """Why the torch callable named ``leaf`` is not on the allow-list, or None when it is.
    A binding is judged by the ATen op it binds (its ``__name__``), a Python function by
    its module and the ATen op of its name, if any."""
    if inspect.isbuiltin(target) or inspect.ismethoddescriptor(target):
        op = getattr(target, "__name__", None)
        binding = (getattr(target, "__objclass__", None) is torch._C.TensorBase
                   if inspect.ismethoddescriptor(target)
                   else any(getattr(target, "__self__", None) is owner
                            for owner in _BINDING_OWNERS))
        if not binding or not isinstance(op, str):
            return "a builtin that is not a binding of an ATen op"
        try:
            return aten_refusal(op)
        except KeyError:
            return f"{op!r} is a builtin of torch, not an ATen tensor op"
    if not inspect.isfunction(target):
        return f"a {type(target).__name__}, not a tensor function"
    module = target.__module__
    if module == "torch._tensor":
        # torch.Tensor's Python methods wrap the ATen op of their name, when there is one.
        try:
            return aten_refusal(leaf)
        except KeyError:
            return "a Python method of torch.Tensor that is not an ATen tensor op"
    if module not in TENSOR_MATH_MODULES:
        return f"a Python function of {module}, not of a tensor-math module"
    try:
        return aten_refusal(leaf)
    except KeyError:
        return None  # a composition of tensor ops with no ATen op of its own (torch.unique)


@contextlib.contextmanager
def grad_mode(op: Operator):
    with torch.set_grad_enabled(op.grad_enabled and torch.is_grad_enabled()):
        yield


# -- listing ------------------------------------------------------------------------------


def candidate_names() -> Iterator[str]:
    """Every name the allow-list is asked about when listing: the zoo workloads, the
    public attributes of each namespace and every public aten op."""
    yield from ZOO_WORKLOADS
    for namespace in NAMESPACES:
        if namespace == "torch.ops.aten":
            continue
        owner: Any = torch
        for part in namespace.split(".")[1:]:
            owner = getattr(owner, part)
        for leaf in sorted(dir(owner)):
            if not leaf.startswith("_"):
                yield f"{namespace}.{leaf}"
    ops = {*_dispatcher_overloads()}
    yield from (f"aten::{op}" for op in sorted(ops) if op.isidentifier()
                and not op.startswith("_"))


def allowed_names() -> list[str]:
    """The names ``resolve`` accepts (``torch.ops.aten.X`` is allowed exactly when
    ``aten::X`` is; in-place ``torch.X_`` as ``torch.Tensor.X_``)."""
    allowed = []
    for name in candidate_names():
        try:
            resolve(name)
        except OpError:
            continue
        allowed.append(name)
    return allowed


RULES = f"""\
An op config may name only operators that compute on tensors: no files, processes,
network, seeds or process-wide settings. Allowed are:
  {', '.join(ZOO_WORKLOADS)} (PARAM's whole-model workloads);
  aten::X and torch.ops.aten.X when every overload the ATen dispatcher has for X takes a
    tensor or is a tensor factory, has a result or writes its own tensor arguments, and
    takes strings only as option selectors ({', '.join(sorted(STR_OPTIONS))});
    names only the TorchScript interpreter knows (aten::manual_seed) are not tensor ops;
  torch.X, torch.nn.functional.X, torch.linalg.X, torch.special.X, torch.fft.X and
    torch.Tensor.X that bind such an ATen op, and Python functions of
    {', '.join(sorted(TENSOR_MATH_MODULES))} (unless the ATen op of their name is refused);
  torch.nn layers: classes of torch.nn.modules.{{{','.join(sorted(LAYER_MODULES))}}},
    except {', '.join(sorted(NOT_LAYERS))}."""


def main(argv: list[str] | None = None) -> int:
    """``python -m dlbench.ops.registry [NAME ...]``: the rules and every allowed name, or
    the verdict on each NAME (exit status 1 when one is refused)."""
    names = sys.argv[1:] if argv is None else argv
    if not names:
        print(RULES)
        print()
        for name in allowed_names():
            print(name)
        return 0
    status = 0
    for name in names:
        try:
            resolve(name)
        except OpError as exc:
            print(exc)
            status = 1
        else:
            print(f"{name}: allowed")
    return status


if __name__ == "__main__":
    sys.exit(main())
