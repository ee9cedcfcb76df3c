"""Catalog models that torchvision has, built untrained (no weights are downloaded).

Which constructor builds a model is its catalog spec's ``torchvision`` field."""

from __future__ import annotations

from typing import Any

import torchvision

from dlbench.models import ModelSpec
from dlbench.pytorch.zoo import BuiltModel

# Constructors with auxiliary classifiers: without them these return one logits tensor in
# training mode too.
_AUX_HEADS = {"googlenet", "inception_v3"}


def constructor(spec: ModelSpec) -> str:
    """The torchvision.models function the spec names; a spec naming none (or one this
    torchvision lacks) is a one-line error, since nothing else says which function it is."""
    if not spec.torchvision:
        raise ValueError(f"model {spec.name}: its catalog spec names no torchvision "
                         f"constructor (ModelSpec.torchvision)")
    if not hasattr(torchvision.models, spec.torchvision):
        raise ValueError(f"model {spec.name}: torchvision {torchvision.__version__} has no "
                         f"model constructor {spec.torchvision!r}")
    return spec.torchvision


def build(spec: ModelSpec, opts: dict[str, Any]) -> BuiltModel:
    name = constructor(spec)
    kwargs: dict[str, Any] = {"weights": None, "num_classes": spec.num_classes}
    if name in _AUX_HEADS:
        kwargs.update(aux_logits=False, init_weights=True)
    module = getattr(torchvision.models, name)(**kwargs)
    return BuiltModel(module, spec.input_shape, spec.num_classes, spec.input_kind)
