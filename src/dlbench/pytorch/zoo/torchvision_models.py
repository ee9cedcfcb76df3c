"""Catalog models that torchvision has, built untrained (no weights are downloaded)."""

from __future__ import annotations

from typing import Any

import torchvision

from dlbench.models import ModelSpec
from dlbench.pytorch.zoo import BuiltModel

# Catalog name -> torchvision constructor. VGG without batch norm, as DLBS benchmarks it.
_CONSTRUCTORS = {
    "alexnet_owt": "alexnet",  # torchvision's AlexNet is the "one weird trick" variant
    "googlenet": "googlenet",
    "inception3": "inception_v3",
    **{f"vgg{d}": f"vgg{d}" for d in (11, 13, 16, 19)},
    **{f"resnet{d}": f"resnet{d}" for d in (18, 34, 50, 101, 152)},
}
# Without their auxiliary classifiers these return one logits tensor in training mode too.
_AUX_HEADS = {"googlenet", "inception3"}


def build(spec: ModelSpec, opts: dict[str, Any]) -> BuiltModel:
    if spec.name not in _CONSTRUCTORS:
        raise KeyError(f"torchvision has no model for {spec.name!r}")
    kwargs: dict[str, Any] = {"weights": None, "num_classes": spec.num_classes}
    if spec.name in _AUX_HEADS:
        kwargs.update(aux_logits=False, init_weights=True)
    module = getattr(torchvision.models, _CONSTRUCTORS[spec.name])(**kwargs)
    return BuiltModel(module, spec.input_shape, spec.num_classes, spec.input_kind)
