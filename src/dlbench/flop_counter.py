"""The one FLOP counter of every PyTorch runner: torch's ``FlopCounterMode`` with attention
formulas that know grouped-query attention and formulas for the fused recurrent kernels.

torch's own formulas for the fused attention kernels (flash, memory-efficient, cuDNN)
assert that keys and values have as many heads as the queries in torch 2.11 and before, so
counting a Llama-style model (8 key/value heads for 32 query heads) on a GPU, where
transformers passes ``enable_gqa=True`` to ``scaled_dot_product_attention``, raised an
AssertionError and failed the cell. The kernels broadcast each key/value head over its
group of query heads, so the work is that of keys and values with the query's head count:
the formulas here count exactly that and leave the rest to torch's.

torch has no formula for the fused recurrent kernels: cuDNN's (every ``nn.RNN``, ``nn.LSTM``
and ``nn.GRU`` on a GPU) and oneDNN's (``nn.LSTM`` on a CPU), so a recurrent model counted
its output layer only. Elsewhere the layers decompose into matrix products, which torch
counts; the formulas here count what those products count. Forward, each weight matrix
(input ``w_ih``, recurrent ``w_hh``, projection ``w_hr``) multiplies every token:
2·tokens·its size. Backward, the same again for the weights' gradients and once more for
the gradients flowing to the inputs, less those autograd skips: the first layer's input
when it needs no gradient, and the initial hidden state (2·batch·size of ``w_hh``) when it
needs none, as for the zeros a layer starts from by default. Biases and the gates'
elementwise arithmetic are not counted (nor are they in ``addmm`` and the decomposed cells).

The counter also notes the operators it ran that do matrix products and that no formula
counts (``uncounted``): its total misses their work, so a caller reports no figure
rather than a wrong one.

torch is imported on first use (the workflow's driver imports this package without it).
"""

from __future__ import annotations

import functools
import math
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


def _weight_groups(weights: Any, stride0: int) -> list[tuple[int, int, int]]:
    """(``w_ih``, ``w_hh``, ``w_hr``) sizes of each layer and direction, in torch's order:
    ``stride0`` tensors each, ``w_ih, w_hh[, b_ih, b_hh][, w_hr]`` (3 or 5 with a projection)."""
    groups = []
    for start in range(0, len(weights), stride0):
        group = weights[start:start + stride0]
        projection = math.prod(group[-1]) if stride0 in (3, 5) else 0
        groups.append((math.prod(group[0]), math.prod(group[1]), projection))
    return groups


def _recurrent_forward(input: Any, groups: list[tuple[int, int, int]]) -> int:
    # Time-major, batch-first or packed: every dimension but the features is tokens.
    return 2 * math.prod(input[:-1]) * sum(sum(group) for group in groups)


def _recurrent_backward(input: Any, hx: Any, groups: list[tuple[int, int, int]],
                        num_layers: int, mask: Any) -> int:
    """``mask``: whether the input, the initial state and the weights need gradients."""
    need_input, need_hx, need_weights = mask
    forward = _recurrent_forward(input, groups)
    data = forward
    if not need_input:
        first_layer = groups[:len(groups) // num_layers]
        data -= 2 * math.prod(input[:-1]) * sum(ih for ih, _, _ in first_layer)
    if not need_hx:
        data -= 2 * hx[-2] * sum(hh for _, hh, _ in groups)
    return data + (forward if need_weights else 0)


def cudnn_rnn_flops(input: Any, weight: Any, weight_stride0: int, *_args: Any,
                    out_shape: Any = None, **_kwargs: Any) -> int:
    """``aten._cudnn_rnn``: all layers and directions in one call."""
    return _recurrent_forward(input, _weight_groups(weight, weight_stride0))


def cudnn_rnn_backward_flops(input: Any, weight: Any, weight_stride0: int, _weight_buf: Any,
                             hx: Any, *args: Any, out_shape: Any = None,
                             **_kwargs: Any) -> int:
    """``aten._cudnn_rnn_backward``; its ``output_mask`` (last) says which of the input,
    hx, cx and weights need gradients; ``num_layers`` is the ninth argument after hx."""
    need_input, need_hx, _need_cx, need_weights = args[-1]
    return _recurrent_backward(input, hx, _weight_groups(weight, weight_stride0), args[8],
                               (need_input, need_hx, need_weights))


def mkldnn_rnn_layer_flops(input: Any, w_ih: Any, w_hh: Any, *_args: Any,
                           out_shape: Any = None, **_kwargs: Any) -> int:
    """``aten.mkldnn_rnn_layer``: one layer and direction per call."""
    return _recurrent_forward(input, [(math.prod(w_ih), math.prod(w_hh), 0)])


def mkldnn_rnn_layer_backward_flops(input: Any, w_ih: Any, w_hh: Any, _b_ih: Any,
                                    _b_hh: Any, hx: Any, *_args: Any, out_val: Any = None,
                                    **_kwargs: Any) -> int:
    """``aten.mkldnn_rnn_layer_backward`` has no output mask (it computes every gradient):
    which ones autograd needs is read from the tensors, so it is given them, not shapes."""
    mask = (input.requires_grad, hx.requires_grad, w_ih.requires_grad)
    return _recurrent_backward(input.shape, hx.shape, [(w_ih.numel(), w_hh.numel(), 0)], 1,
                               mask)


mkldnn_rnn_layer_backward_flops._get_raw = True  # type: ignore[attr-defined]

# Name parts of operators whose work is matrix products: recurrent layers, convolutions,
# matrix products, attention, fused transformer layers (``_transformer_encoder_layer_fwd``,
# nn.TransformerEncoderLayer's inference fast path). A ``cell`` kernel
# (``_thnn_fused_lstm_cell``) is only the gates' elementwise arithmetic, its products run,
# and counted, as their own ``mm``; a ``flatten`` one (``_cudnn_rnn_flatten_weight``)
# copies weights.
_HEAVY_PARTS = frozenset({"rnn", "lstm", "gru", "conv", "conv1d", "conv2d", "conv3d",
                          "convolution", "mm", "bmm", "addmm", "addbmm", "baddbmm", "matmul",
                          "attention", "transformer"})
_LIGHT_PARTS = frozenset({"cell", "flatten"})


def known_heavy(name: str) -> bool:
    """Whether the operator ``name`` (``aten._cudnn_rnn``) does matrix products."""
    parts = set(name.rsplit(".", 1)[-1].split("_"))
    return bool(parts & _HEAVY_PARTS) and not parts & _LIGHT_PARTS


def formulas() -> dict[Any, Any]:
    """The attention and recurrent operators counted here, each with its formula (on tensor
    shapes, or on the tensors where the formula says so)."""
    import torch

    aten = torch.ops.aten
    forward = ("_scaled_dot_product_efficient_attention",
               "_scaled_dot_product_flash_attention", "_scaled_dot_product_cudnn_attention",
               "_scaled_dot_product_flash_attention_for_cpu")
    pairs = [(op, formula) for name in forward
             for op, formula in ((name, attention_flops),
                                 (f"{name}_backward", attention_backward_flops))]
    pairs += [("_cudnn_rnn", cudnn_rnn_flops),
              ("_cudnn_rnn_backward", cudnn_rnn_backward_flops),
              ("mkldnn_rnn_layer", mkldnn_rnn_layer_flops),
              ("mkldnn_rnn_layer_backward", mkldnn_rnn_layer_backward_flops)]
    table = {}
    for op, formula in pairs:
        packet = getattr(aten, op, None)
        if packet is not None:  # a build without the kernel lacks the operator
            table[packet] = formula
    return table


@functools.cache
def _counter_class() -> type:
    from torch.utils.flop_counter import FlopCounterMode

    class Counter(FlopCounterMode):
        def __init__(self) -> None:
            super().__init__(display=False, custom_mapping=formulas())
            self.uncounted: set[str] = set()

        def __enter__(self) -> Any:
            self.uncounted.clear()
            return super().__enter__()

        def _count_flops(self, func_packet: Any, out: Any, args: Any, kwargs: Any) -> Any:
            # Every operator that runs (and does not decompose) passes here.
            if func_packet not in self.flop_registry and known_heavy(str(func_packet)):
                self.uncounted.add(str(func_packet))
            return super()._count_flops(func_packet, out, args, kwargs)

    return Counter


def counter() -> Any:
    """A ``FlopCounterMode`` that prints nothing, with the formulas above; its ``uncounted``
    names the operators with matrix products that it ran without a formula."""
    return _counter_class()()
