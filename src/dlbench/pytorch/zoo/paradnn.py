"""ParaDnn's parameterized models in PyTorch: fully-connected, ResNet-like CNN and RNN.

The shapes follow ParaDnn's TensorFlow code (fc.py, cnn.py with resnet_model.py, rnn.py);
the option checks and size arithmetic are shared with the driver through
``dlbench.models.paradnn``.

FLOPs: all three families are counted (``dlbench.flop_counter``), none has a standard
formula (``flops_per_sample``) as the language models do. The count is exact for these
models: matrix products and convolutions, which the counter knows, forward and backward.
The RNN's recurrent layers run as one fused kernel (cuDNN's on a GPU, oneDNN's for an LSTM
on a CPU) that the counter counts by formulas equal to what the same layers count as
matrix products elsewhere: per layer 2·tokens·(gates·E² + gates·E²) forward, gates 1, 3
and 4 for rnn, gru and lstm, and twice that backward, less the initial state's gradient
(zeros, which need none). A formula of our own would make the RNN the one family whose
figure is not counted; ParaDnn's own figure, 6·Φ for training, is kept for FC cells only
(``phi``, ``phi_tflops``), Φ being defined for them alone.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dlbench.models import ModelSpec
from dlbench.models import paradnn as P
from dlbench.pytorch.zoo import BuiltModel

# ParaDnn's optimizers. RMSprop: learning rate 0.1, decay 0.9, momentum 0.9, epsilon 1.0.
# TensorFlow's RMSProp adds epsilon inside the square root (sqrt(ms + eps)), PyTorch's
# outside it (sqrt(ms) + eps): the same eps gives a different step size. The cost of a step,
# which is what a benchmark measures, is the same.
OPTIMIZER_KWARGS: dict[str, dict[str, float]] = {
    "rmsprop": {"lr": 0.1, "alpha": 0.9, "momentum": 0.9, "eps": 1.0},
    # ParaDnn's "sgd" is plain gradient descent at learning rate 0.1.
    "sgd": {"lr": 0.1},
    # Not in ParaDnn; PyTorch's defaults.
    "adam": {"lr": 1e-3},
}


def _batch_norm(channels: int, zero_gamma: bool = False) -> nn.BatchNorm2d:
    # TensorFlow's decay 0.9 is PyTorch's momentum 0.1.
    bn = nn.BatchNorm2d(channels, eps=1e-5, momentum=0.1)
    if zero_gamma:
        # ParaDnn starts the last normalization of each block at zero (init_zero).
        nn.init.zeros_(bn.weight)
    return bn


def _conv(cin: int, cout: int, kernel: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False)


class ParaDnnFC(nn.Sequential):
    """``layers`` hidden layers of ``nodes`` units, each followed by ReLU, then the output
    layer without activation: its weights number exactly ParaDnn's Φ."""

    def __init__(self, layers: int, nodes: int, input_size: int, output_size: int) -> None:
        modules: list[nn.Module] = []
        width = input_size
        for _ in range(layers):
            modules += [nn.Linear(width, nodes), nn.ReLU(inplace=True)]
            width = nodes
        modules.append(nn.Linear(width, output_size))
        super().__init__(*modules)


class ResidualBlock(nn.Module):
    """Two 3x3 convolutions; post-activation form (resnet_v1)."""

    def __init__(self, cin: int, filters: int, stride: int, projection: bool) -> None:
        super().__init__()
        self.main = nn.Sequential(
            _conv(cin, filters, 3, stride), _batch_norm(filters), nn.ReLU(inplace=True),
            _conv(filters, filters, 3), _batch_norm(filters, zero_gamma=True),
        )
        self.shortcut = (
            nn.Sequential(_conv(cin, filters, 1, stride), _batch_norm(filters))
            if projection else nn.Identity()
        )
        self.out_channels = filters

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.main(x) + self.shortcut(x))


class BottleneckBlock(nn.Module):
    """1x1 reduce, 3x3 (strided), 1x1 expand to 4x ``filters``."""

    def __init__(self, cin: int, filters: int, stride: int, projection: bool) -> None:
        super().__init__()
        cout = filters * P.BOTTLENECK_EXPANSION
        self.main = nn.Sequential(
            _conv(cin, filters, 1), _batch_norm(filters), nn.ReLU(inplace=True),
            _conv(filters, filters, 3, stride), _batch_norm(filters), nn.ReLU(inplace=True),
            _conv(filters, cout, 1), _batch_norm(cout, zero_gamma=True),
        )
        self.shortcut = (
            nn.Sequential(_conv(cin, cout, 1, stride), _batch_norm(cout))
            if projection else nn.Identity()
        )
        self.out_channels = cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.main(x) + self.shortcut(x))


class ParaDnnResNet(nn.Module):
    """ParaDnn's ResNet family: a 7x7/2 stem and 3x3/2 max pool, four groups of ``blocks``
    blocks with ``filters`` x (1, 2, 4, 8) filters and strides 1, 2, 2, 2 (the first block of
    each group has a projection shortcut), a 7x7 average pool (stride 1, no padding) whose
    output is flattened into one dense layer of ``output_size``."""

    def __init__(self, filters: int, blocks: int, block_fn: str, input_size: int,
                 output_size: int) -> None:
        super().__init__()
        block_cls = BottleneckBlock if block_fn == "bottleneck" else ResidualBlock
        layers: list[nn.Module] = [
            _conv(3, filters, 7, 2), _batch_norm(filters), nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        ]
        channels = filters
        for width, stride in zip(P.GROUP_WIDTHS, (1, 2, 2, 2), strict=True):
            for i in range(blocks):
                block = block_cls(channels, filters * width, stride if i == 0 else 1, i == 0)
                layers.append(block)
                channels = block.out_channels
        self.trunk = nn.Sequential(*layers)
        self.pool = nn.AvgPool2d(P.FINAL_POOL, stride=1)
        pooled = P.cnn_pooled_size(input_size)
        self.dense = nn.Linear(channels * pooled * pooled, output_size)
        nn.init.normal_(self.dense.weight, std=0.01)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dense(torch.flatten(self.pool(self.trunk(x)), 1))


class ParaDnnRNN(nn.Module):
    """Embedding, ``layers`` stacked recurrent layers as wide as the embedding, and a linear
    layer over the vocabulary at every position (next-token prediction).

    PyTorch's recurrent layers keep two bias vectors per gate set where TensorFlow's cells
    keep one, so a layer here has ``embedding_size`` (RNN), 4x (LSTM) or 3x (GRU) more biases.
    """

    def __init__(self, layers: int, vocab_size: int, embedding_size: int, cell: str) -> None:
        super().__init__()
        rnn_cls = {"rnn": nn.RNN, "lstm": nn.LSTM, "gru": nn.GRU}[cell]
        self.embedding = nn.Embedding(vocab_size, embedding_size)
        self.rnn = rnn_cls(embedding_size, embedding_size, num_layers=layers, batch_first=True)
        self.output = nn.Linear(embedding_size, vocab_size)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.rnn(self.embedding(ids))
        return self.output(hidden)


def _optimizer(opts: dict[str, Any]) -> tuple[str, dict[str, float]]:
    name = opts["optimizer"]
    return name, dict(OPTIMIZER_KWARGS[name])


def _build_fc(spec: ModelSpec, opts: dict[str, Any]) -> BuiltModel:
    P.check_fc_opts(opts)
    shape = (opts["layers"], opts["nodes"], opts["input_size"], opts["output_size"])
    optimizer, kwargs = _optimizer(opts)
    return BuiltModel(ParaDnnFC(*shape), (opts["input_size"],), opts["output_size"],
                      spec.input_kind, optimizer=optimizer, optimizer_kwargs=kwargs,
                      facts={"phi": P.fc_phi(*shape), "fc_shape": list(shape)},
                      pure_precision=True)


def _build_cnn(spec: ModelSpec, opts: dict[str, Any]) -> BuiltModel:
    P.check_cnn_opts(opts)
    size = opts["input_size"]
    module = ParaDnnResNet(opts["filters"], opts["blocks"], opts["block_fn"], size,
                           opts["output_size"])
    optimizer, kwargs = _optimizer(opts)
    return BuiltModel(module, (3, size, size), opts["output_size"], spec.input_kind,
                      optimizer=optimizer, optimizer_kwargs=kwargs,
                      facts={"final_feature_map": P.cnn_feature_sizes(size)["group4"]},
                      pure_precision=True)


def _build_rnn(spec: ModelSpec, opts: dict[str, Any]) -> BuiltModel:
    P.check_rnn_opts(opts)
    module = ParaDnnRNN(opts["layers"], opts["vocab_size"], opts["embedding_size"],
                        opts["cell"])
    optimizer, kwargs = _optimizer(opts)
    return BuiltModel(module, (opts["max_length"],), opts["vocab_size"], spec.input_kind,
                      vocab_size=opts["vocab_size"], optimizer=optimizer,
                      optimizer_kwargs=kwargs, pure_precision=True)


_BUILDERS = {"paradnn_fc": _build_fc, "paradnn_cnn": _build_cnn, "paradnn_rnn": _build_rnn}


def build(spec: ModelSpec, opts: dict[str, Any]) -> BuiltModel:
    if spec.name not in _BUILDERS:
        raise KeyError(f"no ParaDnn model named {spec.name!r} (valid: {', '.join(_BUILDERS)})")
    return _BUILDERS[spec.name](spec, opts)
