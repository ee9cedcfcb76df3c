"""Catalog models torchvision lacks, shaped as DLBS's PyTorch benchmarks define them
(python/pytorch_benchmarks/models in HewlettPackard/dlcookbook-dlbs): same layers, sizes
and input shapes, so results compare with DLBS's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from dlbench.models import ModelSpec
from dlbench.pytorch.zoo import BuiltModel


def _mlp(input_size: int, hidden: list[int], num_classes: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    width = input_size
    for size in hidden:
        layers += [nn.Linear(width, size), nn.ReLU(inplace=True)]
        width = size
    layers.append(nn.Linear(width, num_classes))
    return nn.Sequential(*layers)


def _classifier(features: int, hidden: tuple[int, int], num_classes: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(features, hidden[0]), nn.ReLU(inplace=True), nn.Dropout(),
        nn.Linear(hidden[0], hidden[1]), nn.ReLU(inplace=True), nn.Dropout(),
        nn.Linear(hidden[1], num_classes),
    )


def alexnet(num_classes: int) -> nn.Module:
    """The original single-tower AlexNet with local response normalization; 227x227 input."""
    features = nn.Sequential(
        nn.Conv2d(3, 96, 11, stride=4), nn.ReLU(inplace=True),
        nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=2), nn.MaxPool2d(3, stride=2),
        nn.Conv2d(96, 256, 5, padding=2), nn.ReLU(inplace=True),
        nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=2), nn.MaxPool2d(3, stride=2),
        nn.Conv2d(256, 384, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(384, 384, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(3, stride=2),
    )
    return nn.Sequential(features, _classifier(256 * 6 * 6, (4096, 4096), num_classes))


def overfeat(num_classes: int) -> nn.Module:
    """OverFeat "fast" (Sermanet et al. 2013) with dropout in the FC layers; 231x231 input."""
    features = nn.Sequential(
        nn.Conv2d(3, 96, 11, stride=4), nn.ReLU(inplace=True), nn.MaxPool2d(2, stride=2),
        nn.Conv2d(96, 256, 5), nn.ReLU(inplace=True), nn.MaxPool2d(2, stride=2),
        nn.Conv2d(256, 512, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(512, 1024, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(1024, 1024, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2, stride=2),
    )
    return nn.Sequential(features, _classifier(1024 * 6 * 6, (3072, 4096), num_classes))


# Inception v4 ------------------------------------------------------------------------------

# A convolution as (out_channels, kernel, stride, padding); kernels and paddings may be
# (height, width) pairs for the factorized 1x7 / 7x1 and 1x3 / 3x1 convolutions.
Conv = tuple[int, Any, int, Any]


class _Concat(nn.Module):
    """Parallel branches on the same input, concatenated along channels."""

    def __init__(self, *branches: nn.Module) -> None:
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([branch(x) for branch in self.branches], dim=1)


def _conv_bn(cin: int, conv: Conv) -> nn.Sequential:
    cout, kernel, stride, padding = conv
    # DLBS keeps the convolution bias in front of batch normalization (eps 2e-5).
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride=stride, padding=padding),
                         nn.BatchNorm2d(cout, eps=2e-5), nn.ReLU(inplace=True))


def _convs(cin: int, *convs: Conv) -> nn.Sequential:
    layers = []
    for conv in convs:
        layers.append(_conv_bn(cin, conv))
        cin = conv[0]
    return nn.Sequential(*layers)


def _split_1x3_3x1(cin: int, cout: int) -> _Concat:
    return _Concat(_convs(cin, (cout, (1, 3), 1, (0, 1))), _convs(cin, (cout, (3, 1), 1, (1, 0))))


def _avg_then_1x1(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.AvgPool2d(3, stride=1, padding=1), _convs(cin, (cout, 1, 1, 0)))


def _inception_a(cin: int) -> _Concat:  # 35x35, 384 -> 384 channels
    return _Concat(
        _convs(cin, (96, 1, 1, 0)),
        _convs(cin, (64, 1, 1, 0), (96, 3, 1, 1)),
        _convs(cin, (64, 1, 1, 0), (96, 3, 1, 1), (96, 3, 1, 1)),
        _avg_then_1x1(cin, 96),
    )


def _inception_b(cin: int) -> _Concat:  # 17x17, 1024 -> 1024 channels
    return _Concat(
        _convs(cin, (384, 1, 1, 0)),
        _convs(cin, (192, 1, 1, 0), (224, (1, 7), 1, (0, 3)), (256, (7, 1), 1, (3, 0))),
        _convs(cin, (192, 1, 1, 0), (192, (7, 1), 1, (3, 0)), (224, (1, 7), 1, (0, 3)),
               (224, (7, 1), 1, (3, 0)), (256, (1, 7), 1, (0, 3))),
        _avg_then_1x1(cin, 128),
    )


def _inception_c(cin: int) -> _Concat:  # 8x8, 1536 -> 1536 channels
    return _Concat(
        _convs(cin, (256, 1, 1, 0)),
        nn.Sequential(_convs(cin, (384, 1, 1, 0)), _split_1x3_3x1(384, 256)),
        nn.Sequential(_convs(cin, (384, 1, 1, 0), (448, (3, 1), 1, (1, 0)),
                             (512, (1, 3), 1, (0, 1))),
                      _split_1x3_3x1(512, 256)),
        _avg_then_1x1(cin, 256),
    )


def inception4(num_classes: int) -> nn.Module:
    """Inception v4 (Szegedy et al. 2016); 299x299 input, 8x8x1536 before the pool."""
    max_pool = nn.MaxPool2d
    features = nn.Sequential(
        _convs(3, (32, 3, 2, 0), (32, 3, 1, 0), (64, 3, 1, 1)),  # 147x147x64
        _Concat(_convs(64, (96, 3, 2, 0)), max_pool(3, stride=2)),  # 73x73x160
        _Concat(_convs(160, (64, 1, 1, 0), (96, 3, 1, 0)),
                _convs(160, (64, 1, 1, 0), (64, (1, 7), 1, (0, 3)),
                       (64, (7, 1), 1, (3, 0)), (96, 3, 1, 0))),  # 71x71x192
        _Concat(_convs(192, (192, 3, 2, 0)), max_pool(3, stride=2)),  # 35x35x384
        *(_inception_a(384) for _ in range(4)),
        _Concat(_convs(384, (384, 3, 2, 0)),
                _convs(384, (192, 1, 1, 0), (224, 3, 1, 1), (256, 3, 2, 0)),
                max_pool(3, stride=2)),  # reduction A: 17x17x1024
        *(_inception_b(1024) for _ in range(7)),
        _Concat(_convs(1024, (192, 1, 1, 0), (192, 3, 2, 0)),
                _convs(1024, (256, 1, 1, 0), (256, (1, 7), 1, (0, 3)),
                       (320, (7, 1), 1, (3, 0)), (320, 3, 2, 0)),
                max_pool(3, stride=2)),  # reduction B: 8x8x1536
        *(_inception_c(1536) for _ in range(3)),
        nn.AvgPool2d(8, stride=1),
    )
    classifier = nn.Sequential(nn.Flatten(), nn.Dropout(p=0.2), nn.Linear(1536, num_classes))
    return nn.Sequential(features, classifier)


# Deep ResNets ------------------------------------------------------------------------------

# Bottleneck units per stage, as DLBS's resnet.py lists them. DLBS's bottleneck unit
# (1x1, strided 3x3, 1x1 to 4x, projection in each stage's first unit) is torchvision's.
RESNET_UNITS = {"resnet200": [3, 24, 36, 3], "resnet269": [3, 30, 48, 8]}


def _resnet(units: list[int]) -> Callable[[int], nn.Module]:
    def build(num_classes: int) -> nn.Module:
        # Imported here: torchvision pulls in torch._dynamo (about 2 s per process), which
        # the cells of the fully-connected models below would pay for nothing.
        from torchvision.models.resnet import Bottleneck, ResNet

        return ResNet(Bottleneck, units, num_classes=num_classes)

    return build


# Fully-connected nets ------------------------------------------------------------------------

_HIDDEN = {
    "deep_mnist": [2500, 2000, 1500, 1000, 500],
    "sensor_net": [1024] * 3,
    "acoustic_model": [2048] * 5,
}

_IMAGE_MODELS: dict[str, Callable[[int], nn.Module]] = {
    "alexnet": alexnet,
    "overfeat": overfeat,
    "inception4": inception4,
    **{name: _resnet(units) for name, units in RESNET_UNITS.items()},
}


def build(spec: ModelSpec, opts: dict[str, Any]) -> BuiltModel:
    if spec.name in _HIDDEN:
        if len(spec.input_shape) != 1:
            raise ValueError(f"model {spec.name}: input_shape must be (features,), "
                             f"got {spec.input_shape}")
        module = _mlp(spec.input_shape[0], _HIDDEN[spec.name], spec.num_classes)
    elif spec.name in _IMAGE_MODELS:
        module = _IMAGE_MODELS[spec.name](spec.num_classes)
    else:
        raise KeyError(f"no DLBS model named {spec.name!r}")
    return BuiltModel(module, spec.input_shape, spec.num_classes, spec.input_kind)
