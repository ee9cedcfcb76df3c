"""PyTorch builders for the models in ``dlbench.models.CATALOG``.

A builder has the signature ``build(spec: ModelSpec, opts: dict) -> BuiltModel`` and is
named in the catalog entry; this module only dispatches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from dlbench import models


@dataclass
class BuiltModel:
    module: torch.nn.Module
    # One sample's input, without the batch dimension.
    input_shape: tuple[int, ...]
    num_classes: int
    input_kind: str  # "image" | "features" | "tokens" (int64 ids below vocab_size)
    vocab_size: int | None = None
    # Optimizer used for training cells: "sgd" (DLBS), "rmsprop" (ParaDnn), "adam".
    optimizer: str = "sgd"
    optimizer_kwargs: dict[str, Any] = field(default_factory=dict)
    # Facts recorded in the measurement's extra (e.g. ParaDnn's phi).
    facts: dict[str, Any] = field(default_factory=dict)
    # ParaDnn casts the whole model and its inputs to the cell's float16/bfloat16 (no
    # autocast, no float32 master weights); the other models use mixed precision.
    pure_precision: bool = False
    # The training loss: "cross_entropy" against class labels, or "mse" against targets of
    # the output's shape (deepwave's observed data).
    loss: str = "cross_entropy"
    # What one item of a batch is ("samples/s"; a shot for deepwave: "shots/s").
    throughput_unit: str = "samples/s"
    # A model's own synthetic batch, made once on the device before timing starts:
    # (batch_size, device, dtype, generator) -> (inputs, targets). None: random inputs of
    # input_shape and random class labels (data.synthetic).
    synthetic_batch: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None
    # Items per sample of a batch, for throughput: a language model's tokens per sequence.
    items_per_sample: int = 1
    # FLOPs of one sample by the model's standard formula (training: bool) -> FLOPs, used
    # for TFLOP/s and MFU instead of counting (the count is recorded beside it); None:
    # FlopCounterMode's count.
    flops_per_sample: Callable[[bool], float] | None = None
    # A data-parallel cell's split of the model: "ddp" (replicas) or "fsdp" (FSDP2 shards,
    # one unit per module ``shard_units`` gives, then the whole).
    parallel: str = "ddp"
    shard_units: Callable[[torch.nn.Module], list[torch.nn.Module]] | None = None
    # For a module built on the meta device and then given uninitialised storage
    # (``to_empty``; its parameters maybe FSDP2's shards): sets, in place, its random
    # weights and the buffers its constructor computes. None: this builder cannot (an
    # FSDP cell then builds the whole model on each rank first).
    init_weights: Callable[[torch.nn.Module], None] | None = None


def build(name: str, opts: dict[str, Any] | None = None) -> BuiltModel:
    spec = models.get(name)
    full = spec.opts(opts)
    built = spec.builder("pytorch")(spec, full)
    if full:  # the options it was built with, defaults too: the cell holds only those given
        built.facts.setdefault("model_opts", full)
    return built


def parameter_count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
