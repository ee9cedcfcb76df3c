"""Work per call of an operator input: FLOPs (dlbench.flop_counter) and bytes.

The count runs one extra, untimed forward (and backward) pass. It runs on the ``meta``
device where the operator allows it (shapes only, no arithmetic, so counting a large
matmul costs nothing); the caller falls back to the real device otherwise.

bytes: forward, the input tensors read (module weights and buffers included; an ``out=``
tensor is written, not read) plus the tensors written: inputs written in place (``add_``
reads a and b and writes a, three tensors as STREAM's add) and outputs that do not alias
an input's storage. An operator that writes nothing and whose every output aliases an
input (a view such as ``reshape``'s, or the input itself) moves no data: its bytes are
None, not its input size, so it gets no GB/s; so does one that only changes a tensor's
shape in place (``t_``, ``unsqueeze_``). Backward, the output gradients fed in plus
the gradients produced for leaves. FLOPs of 0 (ops FlopCounterMode has no formula for, such
as elementwise ops) are reported as None: undefined, not free.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode

from dlbench import flop_counter
from dlbench.ops.grammar import tensors_in
from dlbench.ops.modes import grad_targets
from dlbench.ops.registry import Operator, grad_mode


def nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def storage(tensor: torch.Tensor) -> StorageWeakRef | None:
    """The storage a tensor's data lives in, comparable between tensors; by identity, not
    address, since every meta tensor's data pointer is 0. None for layouts without one
    (sparse)."""
    try:
        return StorageWeakRef(tensor.untyped_storage())
    except NotImplementedError:
        return None


def forward_bytes(inputs: list[torch.Tensor], outputs: list[torch.Tensor],
                  written: Sequence[torch.Tensor] = ()) -> int | None:
    """Bytes read (``inputs``) plus written (``written``: inputs the call modified in
    place; outputs not aliasing an input), or None when it writes nothing and every output
    aliases an input: no data moves."""
    reads: dict[int, torch.Tensor] = {id(t): t for t in inputs}
    writes: dict[int, torch.Tensor] = {id(t): t for t in written}
    aliased = {storage(t) for t in inputs} - {None}
    fresh = {id(t): t for t in outputs if id(t) not in reads and storage(t) not in aliased}
    writes.update(fresh)
    if outputs and not writes:
        return None
    return sum(nbytes(t) for t in reads.values()) + sum(nbytes(t) for t in writes.values())


class DataMovers(TorchDispatchMode):
    """Whether a call ran any kernel that touches data: every aten op but views and
    in-place views (``t_``, ``unsqueeze_``, ``resize_``: they change a tensor's shape or
    strides, and its version counter, without moving a byte)."""

    def __init__(self) -> None:
        super().__init__()
        self.moved = False

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        if not (func.is_view or torch.Tag.inplace_view in func.tags):
            self.moved = True
        return func(*args, **(kwargs or {}))


def count(op: Operator, args: list[Any], kwargs: dict[str, Any], backward: bool
          ) -> dict[str, dict[str, float | None]]:
    """``{"forward": {"flops", "bytes"}, "backward": {...}}`` for one call on these
    inputs; backward is absent when not asked for or when the output has no history."""
    fn, fargs, fkwargs = op.call(args, kwargs)
    # An out= tensor is only written: it counts as the output it is returned as.
    inputs = tensors_in([args, {k: v for k, v in kwargs.items() if k != "out"}])
    inputs += op.parameters()
    leaves = [t for t in tensors_in([args, kwargs]) if t.requires_grad and t.is_leaf]
    leaves += op.trainable()
    result: dict[str, dict[str, float | None]] = {}
    with grad_mode(op):
        versions = [t._version for t in inputs]
        with flop_counter.counter() as counter, DataMovers() as movers:
            out = fn(*fargs, **fkwargs)
        # A bumped version counter marks an in-place write (add_, a module's running
        # stats); an input returned unchanged (contiguous() of a contiguous one) keeps it.
        # An in-place view bumps it too, and writes nothing.
        written = [t for t, v in zip(inputs, versions, strict=True)
                   if t._version != v and movers.moved]
        moved = forward_bytes(inputs, tensors_in([out]), written)
        result["forward"] = {"flops": float(counter.get_total_flops()) or None,
                             "bytes": float(moved) if moved else None}
        targets = grad_targets(out) if backward else []
        if targets:
            grads = [torch.ones_like(t) for t in targets]
            for leaf in leaves:
                leaf.grad = None
            with flop_counter.counter() as counter:
                torch.autograd.backward(targets, grads)
            produced = [leaf.grad for leaf in leaves if leaf.grad is not None]
            moved = sum(nbytes(g) for g in grads) + sum(nbytes(g) for g in produced)
            result["backward"] = {"flops": float(counter.get_total_flops()) or None,
                                  "bytes": float(moved) or None}
            for leaf in leaves:
                leaf.grad = None
    return result
