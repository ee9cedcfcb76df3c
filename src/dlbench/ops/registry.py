"""Operators by name, resolved without eval: ``torch.*`` callables and modules found by
walking attributes of a few torch namespaces, ``aten::*`` ops through ``torch.ops.aten``,
and PARAM's whole-model workloads mapped to dlbench's model zoo.

An ``Operator`` is built once per build spec and then called on many inputs. ``call``
returns exactly what the timed region invokes (a function, its args and kwargs), so that
the measurement contains the operator and nothing of this wrapper.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

# Namespaces an operator name may live in; the first component is always ``torch``.
NAMESPACES = ("torch", "torch.nn", "torch.nn.functional", "torch.linalg", "torch.special",
              "torch.fft", "torch.Tensor")
# Callables in those namespaces that touch files or process-wide state, not tensors: a
# config must not be able to load a pickle or change the run's defaults.
_FORBIDDEN = frozenset({"load", "save", "from_file", "compile", "export", "manual_seed", "seed",
                        "initial_seed", "load_library", "cuda", "backends"})
_FORBIDDEN_PREFIXES = ("set_", "use_", "get_")

# PARAM's whole-network workloads and the dlbench models that implement them.
ZOO_WORKLOADS = {
    "pytorch.model.alex_net": "alexnet_owt",
    "pytorch.model.resnet": "resnet50",
}


class OpError(ValueError):
    """An operator that cannot be resolved or built; the message is one line."""


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


class AtenOp(Operator):
    """``aten::name``: the overload packet, or the overload a build schema names, e.g.
    ``aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor``."""

    def __init__(self, name: str, packet: Any):
        self.name, self.packet = name, packet
        self.func: Callable[..., Any] = packet

    def build(self, args, kwargs, device):
        self.func = self.packet
        if kwargs:
            raise OpError(f"{self.name}: build takes one schema string, not kwargs")
        if not args:
            return
        schema = args[0]
        # PARAM's older form lists argument types (["Tensor", "Tensor", ...]): the overload
        # packet dispatches on the inputs, so the list needs no further use.
        if len(args) == 1 and isinstance(schema, list) and all(isinstance(s, str) for s in schema):
            return
        if len(args) != 1 or not isinstance(schema, str):
            raise OpError(f"{self.name}: build takes one schema string")
        try:
            parsed = torch._C.parse_schema(schema)
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else "parse error"
            raise OpError(f"{self.name}: bad schema {schema!r}: {first}") from None
        if parsed.name != self.name:
            raise OpError(f"{self.name}: schema is for {parsed.name}")
        overload = parsed.overload_name or "default"
        try:
            self.func = getattr(self.packet, overload)
        except AttributeError:
            raise OpError(f"{self.name}: no overload {overload!r}") from None

    def call(self, args, kwargs):
        return self.func, args, kwargs


def resolve(name: str) -> Callable[[], Operator]:
    """A factory of fresh ``Operator``s for ``name``; ``OpError`` if it names none."""
    if not isinstance(name, str) or not name:
        raise OpError(f"operator name must be a non-empty string, got {name!r}")
    if name in ZOO_WORKLOADS:
        model = ZOO_WORKLOADS[name]
        return lambda: ZooModelOp(name, model)
    if name.startswith("aten::"):
        return _resolve_aten(name)
    return _resolve_torch(name)


def _resolve_aten(name: str) -> Callable[[], Operator]:
    op = name.removeprefix("aten::")
    if not op.isidentifier() or op.startswith("_"):
        raise OpError(f"{name}: unknown operator (bad aten name {op!r})")
    try:
        packet = getattr(torch.ops.aten, op)
    except (AttributeError, RuntimeError):
        raise OpError(f"{name}: unknown operator (torch.ops.aten has no {op!r})") from None
    return lambda: AtenOp(name, packet)


def _resolve_torch(name: str) -> Callable[[], Operator]:
    parts = name.split(".")
    namespace, leaf = ".".join(parts[:-1]), parts[-1]
    if parts[0] != "torch" or len(parts) < 2:
        raise OpError(f"{name}: unknown operator (expected torch.*, aten::* or one of "
                      f"{', '.join(ZOO_WORKLOADS)})")
    if namespace not in NAMESPACES:
        raise OpError(f"{name}: unknown operator (operators are looked up in "
                      f"{', '.join(NAMESPACES)})")
    if not leaf.isidentifier() or leaf.startswith("_"):
        raise OpError(f"{name}: unknown operator (not a public name)")
    if leaf in _FORBIDDEN or leaf.startswith(_FORBIDDEN_PREFIXES):
        raise OpError(f"{name}: not an operator (it has effects beyond tensors)")
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
        if issubclass(target, torch.nn.Module):
            return lambda: ModuleOp(name, target)
        raise OpError(f"{name}: a class that is not a torch.nn.Module, not an operator")
    if not callable(target):
        raise OpError(f"{name}: not callable")
    return lambda: CallableOp(name, target, grad_enabled=not inplace)


@contextlib.contextmanager
def grad_mode(op: Operator):
    with torch.set_grad_enabled(op.grad_enabled and torch.is_grad_enabled()):
        yield
