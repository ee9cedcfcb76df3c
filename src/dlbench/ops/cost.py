"""Work per call of an operator input: FLOPs (dlbench.flop_counter) and bytes.

The count runs one extra, untimed forward (and backward) pass. It runs on the ``meta``
device where the operator allows it (shapes only, no arithmetic, so counting a large
matmul costs nothing); the caller falls back to the real device otherwise.

bytes: forward, the input tensors (module weights and buffers included) plus the output
tensors that are not views of an input; backward, the output gradients fed in plus the
gradients produced for leaves. FLOPs of 0 (ops FlopCounterMode has no formula for, such
as elementwise ops) are reported as None: undefined, not free.
"""

from __future__ import annotations

from typing import Any

import torch

from dlbench import flop_counter
from dlbench.ops.grammar import tensors_in
from dlbench.ops.modes import grad_targets
from dlbench.ops.registry import Operator, grad_mode


def nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def forward_bytes(inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> int:
    seen: set[int] = set()
    total = 0
    for t in inputs:
        if id(t) not in seen:
            seen.add(id(t))
            total += nbytes(t)
    input_ids = set(seen)
    for t in outputs:
        if id(t) in seen or (t._base is not None and id(t._base) in input_ids):
            continue  # in-place result or a view: no new data
        seen.add(id(t))
        total += nbytes(t)
    return total


def count(op: Operator, args: list[Any], kwargs: dict[str, Any], backward: bool
          ) -> dict[str, dict[str, float | None]]:
    """``{"forward": {"flops", "bytes"}, "backward": {...}}`` for one call on these
    inputs; backward is absent when not asked for or when the output has no history."""
    fn, fargs, fkwargs = op.call(args, kwargs)
    inputs = tensors_in([args, kwargs]) + op.parameters()
    leaves = [t for t in tensors_in([args, kwargs]) if t.requires_grad and t.is_leaf]
    leaves += op.trainable()
    result: dict[str, dict[str, float | None]] = {}
    with grad_mode(op):
        with flop_counter.counter() as counter:
            out = fn(*fargs, **fkwargs)
        result["forward"] = {"flops": float(counter.get_total_flops()) or None,
                             "bytes": float(forward_bytes(inputs, tensors_in([out]))) or None}
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
