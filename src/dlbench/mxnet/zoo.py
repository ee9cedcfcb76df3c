"""Gluon builders for the models in ``dlbench.models.CATALOG`` (entries naming
``dlbench.mxnet.zoo:build``).

A builder has the signature ``build(spec: ModelSpec, opts: dict) -> BuiltNet``: an
uninitialized ``HybridBlock`` (the runner initializes, casts and hybridizes it on its
contexts) with the sample shape and class count it expects.

The Gluon model zoo (no pretrained weights) is used where its network is the same as the
PyTorch runner's; our own Gluon blocks are used where it is not:

* ``resnet50/101/152``: Gluon's ``BottleneckV1`` strides in its first 1x1 convolution and
  gives the 1x1 convolutions a bias (25,575,912 parameters for ResNet-50). The PyTorch
  runner's torchvision ResNet is "v1.5"/"v1b": stride in the 3x3 convolution, no biases
  (25,557,032). ``BottleneckV1b`` below is that block, used in Gluon's ``ResNetV1`` frame.
* ``googlenet``: not in the Gluon zoo; built here with torchvision's layout (batch norm,
  3x3 "5x5" branch) and without the auxiliary classifiers.
* ``alexnet``: DLBS's AlexNet (96-256-384-384-256 filters, LRN, 227x227 input), not Gluon's
  ``alexnet``, which is the "one weird trick" variant served here as ``alexnet_owt``.
* ``deep_mnist``: DLBS's DeepMNIST as its MXNet and PyTorch backends define it, five
  fully-connected ReLU layers (2500-2000-1500-1000-500) over 784 features.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import mxnet as mx
from mxnet.gluon import HybridBlock, nn
from mxnet.gluon.contrib.nn import HybridConcurrent
from mxnet.gluon.model_zoo import vision

from dlbench import models
from dlbench.models import ModelSpec


@dataclass
class BuiltNet:
    block: HybridBlock
    # One sample's input, without the batch dimension (NCHW layout for images).
    input_shape: tuple[int, ...]
    num_classes: int
    # Facts recorded in the measurement's extra (where the architecture comes from).
    facts: dict[str, Any] = field(default_factory=dict)


def build(spec: ModelSpec, opts: dict[str, Any]) -> BuiltNet:
    try:
        maker, source = _MAKERS[spec.name]
    except KeyError:
        raise KeyError(f"model {spec.name!r} is not available for mxnet") from None
    block = maker(spec.num_classes)
    return BuiltNet(block, tuple(spec.input_shape), spec.num_classes, {"architecture": source})


def build_by_name(name: str, opts: dict[str, Any] | None = None) -> BuiltNet:
    spec = models.get(name)
    return spec.builder("mxnet")(spec, spec.opts(opts))


def parameter_count(block: HybridBlock, input_shape: tuple[int, ...]) -> int:
    """Trainable parameters (BatchNorm running statistics excluded, as in PyTorch's
    ``parameters()``), found by shape inference on the symbol: no memory, no forward."""
    sym = block(mx.sym.var("data"))
    arg_shapes, _, _ = sym.infer_shape(data=(1, *input_shape))
    shapes = dict(zip(sym.list_arguments(), arg_shapes, strict=True))
    total = 0
    for param in block.collect_params().values():
        if param.grad_req == "null":
            continue
        shape = shapes[param.name]
        count = 1
        for dim in shape:
            count *= dim
        total += count
    return total


# --- ResNet ----------------------------------------------------------------------------


class BottleneckV1b(HybridBlock):
    """ResNet bottleneck with the stride in the 3x3 convolution and bias-free convolutions
    (torchvision's layout). Same constructor as Gluon's ``BottleneckV1`` so that
    ``vision.ResNetV1`` can stack it."""

    def __init__(self, channels: int, stride: int, downsample: bool = False,
                 in_channels: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        mid = channels // 4
        self.body = nn.HybridSequential(prefix="")
        self.body.add(nn.Conv2D(mid, kernel_size=1, use_bias=False, in_channels=in_channels))
        self.body.add(nn.BatchNorm())
        self.body.add(nn.Activation("relu"))
        self.body.add(nn.Conv2D(mid, kernel_size=3, strides=stride, padding=1, use_bias=False,
                                in_channels=mid))
        self.body.add(nn.BatchNorm())
        self.body.add(nn.Activation("relu"))
        self.body.add(nn.Conv2D(channels, kernel_size=1, use_bias=False, in_channels=mid))
        self.body.add(nn.BatchNorm())
        if downsample:
            self.downsample = nn.HybridSequential(prefix="")
            self.downsample.add(nn.Conv2D(channels, kernel_size=1, strides=stride,
                                          use_bias=False, in_channels=in_channels))
            self.downsample.add(nn.BatchNorm())
        else:
            self.downsample = None

    def hybrid_forward(self, F, x):  # noqa: N803 (Gluon's signature)
        residual = self.downsample(x) if self.downsample is not None else x
        return F.Activation(self.body(x) + residual, act_type="relu")


def _resnet(depth: int):
    block_type, layers, channels = vision.resnet.resnet_spec[depth]
    block = vision.BasicBlockV1 if block_type == "basic_block" else BottleneckV1b

    def make(classes: int) -> HybridBlock:
        return vision.ResNetV1(block, layers, channels, classes=classes)

    source = "gluon ResNetV1 + BasicBlockV1" if block is vision.BasicBlockV1 else \
        "gluon ResNetV1 + BottleneckV1b (stride in 3x3, torchvision layout)"
    return make, source


# --- GoogLeNet -------------------------------------------------------------------------


def _conv_bn(channels: int, kernel: int, stride: int = 1, padding: int = 0) -> HybridBlock:
    """torchvision's BasicConv2d: bias-free convolution, batch norm (eps 1e-3), ReLU."""
    out = nn.HybridSequential(prefix="")
    out.add(nn.Conv2D(channels, kernel_size=kernel, strides=stride, padding=padding,
                      use_bias=False))
    out.add(nn.BatchNorm(epsilon=0.001))
    out.add(nn.Activation("relu"))
    return out


def _inception(c1: int, c3r: int, c3: int, c5r: int, c5: int, pool_proj: int) -> HybridBlock:
    out = HybridConcurrent(axis=1, prefix="")
    out.add(_conv_bn(c1, 1))
    branch = nn.HybridSequential(prefix="")
    branch.add(_conv_bn(c3r, 1), _conv_bn(c3, 3, padding=1))
    out.add(branch)
    # torchvision (and so the PyTorch runner) uses a 3x3 kernel in the "5x5" branch.
    branch = nn.HybridSequential(prefix="")
    branch.add(_conv_bn(c5r, 1), _conv_bn(c5, 3, padding=1))
    out.add(branch)
    branch = nn.HybridSequential(prefix="")
    branch.add(nn.MaxPool2D(pool_size=3, strides=1, padding=1, ceil_mode=True),
               _conv_bn(pool_proj, 1))
    out.add(branch)
    return out


def googlenet(classes: int) -> HybridBlock:
    net = nn.HybridSequential()
    with net.name_scope():
        net.add(_conv_bn(64, 7, stride=2, padding=3),
                nn.MaxPool2D(pool_size=3, strides=2, ceil_mode=True),
                _conv_bn(64, 1), _conv_bn(192, 3, padding=1),
                nn.MaxPool2D(pool_size=3, strides=2, ceil_mode=True),
                _inception(64, 96, 128, 16, 32, 32), _inception(128, 128, 192, 32, 96, 64),
                nn.MaxPool2D(pool_size=3, strides=2, ceil_mode=True),
                _inception(192, 96, 208, 16, 48, 64), _inception(160, 112, 224, 24, 64, 64),
                _inception(128, 128, 256, 24, 64, 64), _inception(112, 144, 288, 32, 64, 64),
                _inception(256, 160, 320, 32, 128, 128),
                nn.MaxPool2D(pool_size=2, strides=2, ceil_mode=True),
                _inception(256, 160, 320, 32, 128, 128), _inception(384, 192, 384, 48, 128, 128),
                nn.GlobalAvgPool2D(), nn.Flatten(), nn.Dropout(0.2), nn.Dense(classes))
    return net


# --- DLBS models -----------------------------------------------------------------------


def _lrn() -> HybridBlock:
    # DLBS's AlexNet normalization; Gluon has no LRN layer, the operator is wrapped.
    return nn.HybridLambda(lambda F, x: F.LRN(x, alpha=0.0001, beta=0.75, knorm=2, nsize=5))


def dlbs_alexnet(classes: int) -> HybridBlock:
    net = nn.HybridSequential()
    with net.name_scope():
        net.add(nn.Conv2D(96, kernel_size=11, strides=4, activation="relu"), _lrn(),
                nn.MaxPool2D(pool_size=3, strides=2),
                nn.Conv2D(256, kernel_size=5, padding=2, activation="relu"), _lrn(),
                nn.MaxPool2D(pool_size=3, strides=2),
                nn.Conv2D(384, kernel_size=3, padding=1, activation="relu"),
                nn.Conv2D(384, kernel_size=3, padding=1, activation="relu"),
                nn.Conv2D(256, kernel_size=3, padding=1, activation="relu"),
                nn.MaxPool2D(pool_size=3, strides=2),
                nn.Flatten(),
                nn.Dense(4096, activation="relu"), nn.Dropout(0.5),
                nn.Dense(4096, activation="relu"), nn.Dropout(0.5),
                nn.Dense(classes))
    return net


def dlbs_deep_mnist(classes: int) -> HybridBlock:
    net = nn.HybridSequential()
    with net.name_scope():
        net.add(nn.Flatten())
        for width in (2500, 2000, 1500, 1000, 500):
            net.add(nn.Dense(width, activation="relu"))
        net.add(nn.Dense(classes))
    return net


def _zoo(name: str):
    def make(classes: int) -> HybridBlock:
        return vision.get_model(name, pretrained=False, classes=classes)

    return make, f"gluon model zoo {name}"


_MAKERS = {
    "alexnet": (dlbs_alexnet, "DLBS AlexNet (own Gluon blocks)"),
    "alexnet_owt": _zoo("alexnet"),
    "googlenet": (googlenet, "torchvision GoogLeNet layout, no aux heads (own Gluon blocks)"),
    "inception3": _zoo("inceptionv3"),
    **{f"vgg{d}": _zoo(f"vgg{d}") for d in (11, 13, 16, 19)},
    **{f"resnet{d}": _resnet(d) for d in (18, 34, 50, 101, 152)},
    "deep_mnist": (dlbs_deep_mnist, "DLBS DeepMNIST (own Gluon blocks)"),
}
