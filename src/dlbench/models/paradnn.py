"""ParaDnn's parameterized families in numbers: parameter counts and option checks.

Pure Python, no framework import, so that the workflow driver can reject a bad
configuration before any job starts. The PyTorch modules live in
``dlbench.pytorch.zoo.paradnn`` and use the same arithmetic.

Each ``check_*`` function takes the full option set of one model (``ModelSpec.opts``
returns it) and raises ``ValueError`` with a one-line message naming the option.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

OPTIMIZERS = ("rmsprop", "adam", "sgd")
BLOCK_FNS = ("residual", "bottleneck")
RNN_CELLS = ("rnn", "lstm", "gru")
# ParaDnn's CNN ends with a 7x7 average pool, stride 1, no padding ("VALID"), then flattens
# what is left into the dense layer: the pool is global only for a 7x7 final feature map.
FINAL_POOL = 7
# Channel multiplier of the four block groups, and how many more channels a bottleneck
# block puts out than it has filters.
GROUP_WIDTHS = (1, 2, 4, 8)
BOTTLENECK_EXPANSION = 4


def _int_opt(model: str, opts: Mapping[str, Any], name: str, minimum: int = 1) -> int:
    value = opts.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{model}: model_opts.{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{model}: model_opts.{name} must be >= {minimum}, got {value}")
    return value


def _choice_opt(model: str, opts: Mapping[str, Any], name: str, valid: tuple[str, ...]) -> str:
    value = opts.get(name)
    if value not in valid:
        raise ValueError(
            f"{model}: model_opts.{name} must be one of {', '.join(valid)}, got {value!r}"
        )
    return value


# Fully-connected family ------------------------------------------------------------------


def fc_phi(layers: int, nodes: int, input_size: int, output_size: int) -> int:
    """ParaDnn's Φ: the weights (biases excluded) of ``layers`` hidden layers of ``nodes``."""
    return nodes * nodes * (layers - 1) + nodes * (input_size + output_size)


def fc_bytes(layers: int, nodes: int, input_size: int, output_size: int, *, batch: int,
             element_size: int, training: bool) -> int:
    """Bytes one iteration moves at least (for the roofline): each matrix product reads its
    two operands and writes its result once. A layer in -> out does one product forward
    (weights, input, output) and, when training, two more backward (the input's gradient
    and the weights'), each touching the same three sizes; but the first layer's input
    needs no gradient, and autograd computes none (nor counts its FLOPs)."""
    widths = [input_size, *[nodes] * layers, output_size]
    sizes = [i * o + batch * i + batch * o for i, o in itertools.pairwise(widths)]
    if not training:
        return sum(sizes) * element_size
    return (3 * sum(sizes) - sizes[0]) * element_size


def check_fc_opts(opts: Mapping[str, Any]) -> None:
    for name in ("layers", "nodes", "input_size", "output_size"):
        _int_opt("paradnn_fc", opts, name)
    _choice_opt("paradnn_fc", opts, "optimizer", OPTIMIZERS)


# Convolutional (ResNet) family ----------------------------------------------------------


def _halve(size: int) -> int:
    # A stride-2 convolution or pool padded to keep "SAME" geometry: ceil(size / 2).
    return (size + 1) // 2


def cnn_feature_sizes(input_size: int) -> dict[str, int]:
    """Spatial size after each stage: the 7x7 stride-2 stem convolution, the 3x3 stride-2
    max pool, then the four block groups with strides 1, 2, 2, 2."""
    sizes = {"stem": _halve(input_size)}
    sizes["pool"] = _halve(sizes["stem"])
    sizes["group1"] = sizes["pool"]
    sizes["group2"] = _halve(sizes["group1"])
    sizes["group3"] = _halve(sizes["group2"])
    sizes["group4"] = _halve(sizes["group3"])
    return sizes


def cnn_pooled_size(input_size: int) -> int:
    """Side of the map the final 7x7 average pool leaves (<= 0: nothing is left)."""
    return cnn_feature_sizes(input_size)["group4"] - FINAL_POOL + 1


def cnn_min_input_size() -> int:
    size = 1
    while cnn_pooled_size(size) < 1:
        size += 1
    return size


def check_cnn_opts(opts: Mapping[str, Any]) -> None:
    for name in ("filters", "blocks", "input_size", "output_size"):
        _int_opt("paradnn_cnn", opts, name)
    _choice_opt("paradnn_cnn", opts, "block_fn", BLOCK_FNS)
    _choice_opt("paradnn_cnn", opts, "optimizer", OPTIMIZERS)
    size = opts["input_size"]
    final = cnn_feature_sizes(size)["group4"]
    if final < FINAL_POOL:
        raise ValueError(
            f"paradnn_cnn: model_opts.input_size {size} leaves a {final}x{final} feature map "
            f"before the {FINAL_POOL}x{FINAL_POOL} average pool, so the feature map vanishes; "
            f"use input_size >= {cnn_min_input_size()}"
        )


# Recurrent family -------------------------------------------------------------------------


def check_rnn_opts(opts: Mapping[str, Any]) -> None:
    for name in ("layers", "max_length", "vocab_size", "embedding_size"):
        _int_opt("paradnn_rnn", opts, name)
    _choice_opt("paradnn_rnn", opts, "cell", RNN_CELLS)
    _choice_opt("paradnn_rnn", opts, "optimizer", OPTIMIZERS)
