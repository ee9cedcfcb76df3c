"""The one FLOP counter of every PyTorch runner: torch's ``FlopCounterMode`` with attention
formulas that know grouped-query attention.

torch's own formulas for the fused attention kernels (flash, memory-efficient, cuDNN)
assert that keys and values have as many heads as the queries in torch 2.11 and before, so
counting a Llama-style model (8 key/value heads for 32 query heads) on a GPU, where
transformers passes ``enable_gqa=True`` to ``scaled_dot_product_attention``, raised an
AssertionError and failed the cell. The kernels broadcast each key/value head over its
group of query heads, so the work is that of keys and values with the query's head count:
the formulas here count exactly that and leave the rest to torch's.

torch is imported on first use (the workflow's driver imports this package without it).
"""

from __future__ import annotations

from typing import Any


def _as_query_heads(shape: Any, heads: int) -> tuple[int, ...]:
    """A key or value shape ``[batch, kv_heads, length, dim]`` broadcast to ``heads``."""
    batch, kv_heads, length, dim = shape
    if kv_heads <= 0 or heads % kv_heads:
        raise ValueError(f"attention: {heads} query heads are not a multiple of "
                         f"{kv_heads} key/value heads")
    return batch, heads, length, dim


def attention_flops(query: Any, key: Any, value: Any, *_args: Any, out_shape: Any = None,
                    **_kwargs: Any) -> int:
    from torch.utils.flop_counter import sdpa_flop_count

    heads = query[1]
    return sdpa_flop_count(query, _as_query_heads(key, heads), _as_query_heads(value, heads))


def attention_backward_flops(grad_out: Any, query: Any, key: Any, value: Any, *_args: Any,
                             out_shape: Any = None, **_kwargs: Any) -> int:
    from torch.utils.flop_counter import sdpa_backward_flop_count

    heads = query[1]
    return sdpa_backward_flop_count(grad_out, query, _as_query_heads(key, heads),
                                    _as_query_heads(value, heads))


def formulas() -> dict[Any, Any]:
    """The attention operators counted here, each with its formula (on tensor shapes)."""
    import torch

    aten = torch.ops.aten
    forward = ("_scaled_dot_product_efficient_attention",
               "_scaled_dot_product_flash_attention", "_scaled_dot_product_cudnn_attention")
    table = {}
    for name in forward:
        for op, formula in ((name, attention_flops),
                            (f"{name}_backward", attention_backward_flops)):
            packet = getattr(aten, op, None)
            if packet is not None:  # a build without the kernel lacks the operator
                table[packet] = formula
    return table


def counter() -> Any:
    """A ``FlopCounterMode`` that prints nothing, with the attention formulas above."""
    from torch.utils.flop_counter import FlopCounterMode

    return FlopCounterMode(display=False, custom_mapping=formulas())
