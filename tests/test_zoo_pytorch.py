"""The PyTorch model zoo: parameter counts of every catalog model and its output contract.

Expected counts are published figures or arithmetic over the architecture, never numbers
read back from our modules. Large models are built on CPU (real initialization) and then
run on the "meta" device, which computes shapes without arithmetic; small ones also run a
real forward pass.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torchvision
from published_counts import TORCHVISION_PUBLISHED

from dlbench import models
from dlbench.models import llm as L
from dlbench.pytorch import zoo
from dlbench.pytorch.zoo import torchvision_models, transformers


def conv(cin: int, cout: int, kernel: int | tuple[int, int], bias: bool = True) -> int:
    kh, kw = kernel if isinstance(kernel, tuple) else (kernel, kernel)
    return cin * cout * kh * kw + (cout if bias else 0)


def linear(cin: int, cout: int) -> int:
    return cin * cout + cout


def batch_norm(channels: int) -> int:
    return 2 * channels


def mlp(sizes: list[int]) -> int:
    return sum(linear(a, b) for a, b in zip(sizes, sizes[1:], strict=False))


def bottleneck_resnet(units: list[int], num_classes: int = 1000) -> int:
    """ResNet v1 with bottleneck units (1x1, 3x3, 1x1 to 4x; projection in each stage's
    first unit; convolutions without bias, each followed by batch norm)."""
    total = conv(3, 64, 7, bias=False) + batch_norm(64)
    cin = 64
    for stage, n in enumerate(units):
        width = 64 * 2**stage
        cout = 4 * width
        for i in range(n):
            total += conv(cin, width, 1, bias=False) + batch_norm(width)
            total += conv(width, width, 3, bias=False) + batch_norm(width)
            total += conv(width, cout, 1, bias=False) + batch_norm(cout)
            if i == 0:
                total += conv(cin, cout, 1, bias=False) + batch_norm(cout)
            cin = cout
    return total + linear(cin, num_classes)


def bert_mlm(hidden: int, layers: int, intermediate: int, vocab: int = 30522) -> int:
    """BertForMaskedLM without pooler; the decoder weight is the word embedding (tied)."""
    embeddings = (vocab + 512 + 2) * hidden + 2 * hidden
    attention = 4 * linear(hidden, hidden) + 2 * hidden
    feed_forward = linear(hidden, intermediate) + linear(intermediate, hidden) + 2 * hidden
    head = linear(hidden, hidden) + 2 * hidden + vocab
    return embeddings + layers * (attention + feed_forward) + head


# Output channels of every convolution of Inception v4 (each has a bias in DLBS's version).
INCEPTION4_CONV_BIASES = (
    (32 + 32 + 64) + 96 + (64 + 96 + 64 + 64 + 64 + 96) + 192  # stem
    + 4 * (96 + 64 + 96 + 64 + 96 + 96 + 96)  # 4 x inception A
    + (384 + 192 + 224 + 256)  # reduction A
    + 7 * (384 + 192 + 224 + 256 + 192 + 192 + 224 + 224 + 256 + 128)  # 7 x inception B
    + (192 + 192 + 256 + 256 + 320 + 320)  # reduction B
    + 3 * (256 + 384 + 256 + 256 + 384 + 448 + 512 + 256 + 256 + 256)  # 3 x inception C
)
# torchvision's Inception v3 auxiliary head: 1x1 conv to 128, 5x5 conv to 768, FC to 1000.
INCEPTION3_AUX = (conv(768, 128, 1, bias=False) + batch_norm(128)
                  + conv(128, 768, 5, bias=False) + batch_norm(768) + linear(768, 1000))

EXPECTED_PARAMETERS = {
    **TORCHVISION_PUBLISHED,
    "inception3": TORCHVISION_PUBLISHED["inception3"] - INCEPTION3_AUX,  # we build it without
    # DLBS's definitions, by arithmetic.
    "alexnet": (conv(3, 96, 11) + conv(96, 256, 5) + conv(256, 384, 3) + conv(384, 384, 3)
                + conv(384, 256, 3) + mlp([256 * 6 * 6, 4096, 4096, 1000])),
    "overfeat": (conv(3, 96, 11) + conv(96, 256, 5) + conv(256, 512, 3) + conv(512, 1024, 3)
                 + conv(1024, 1024, 3) + mlp([1024 * 6 * 6, 3072, 4096, 1000])),
    # Inception v4's published count (no convolution biases) plus DLBS's biases.
    "inception4": 42_679_816 + INCEPTION4_CONV_BIASES,
    "resnet200": bottleneck_resnet([3, 24, 36, 3]),
    "resnet269": bottleneck_resnet([3, 30, 48, 8]),
    "deep_mnist": mlp([784, 2500, 2000, 1500, 1000, 500, 10]),
    "sensor_net": mlp([784, 1024, 1024, 1024, 16]),
    "acoustic_model": mlp([540, 2048, 2048, 2048, 2048, 2048, 8192]),
    "bert_base": 109_514_298,  # bert-base-uncased BertForMaskedLM, published
    "bert_large": bert_mlm(hidden=1024, layers=24, intermediate=4096),
    # ParaDnn defaults: see test_paradnn.py for the families.
    "paradnn_fc": (512 * 512 * 3 + 512 * (2000 + 1000)) + (4 * 512 + 1000),
    # Residual blocks, 32 filters, one block per group, 7x7 map pooled to 1x1.
    "paradnn_cnn": (conv(3, 32, 7, bias=False) + batch_norm(32) + sum(
        conv(cin, width, 3, bias=False) + conv(width, width, 3, bias=False)
        + conv(cin, width, 1, bias=False) + 3 * batch_norm(width)
        for cin, width in ((32, 32), (32, 64), (64, 128), (128, 256))
    ) + linear(256, 1000)),
    "paradnn_rnn": (1024 * 100 + 5 * (100 * 100 * 2 + 2 * 100) + linear(100, 1024)),
    # The velocity model, 100 x 100 cells by default.
    "deepwave": 100 * 100,
    # Language models: the published counts (model cards), and for the tiny presets the
    # formula that reproduces them (tests/test_llm.py).
    **L.PUBLISHED,
    **{name: L.parameter_count(L.default_opts(name)) for name in L.PRESETS
       if name not in L.PUBLISHED},
}


def test_arithmetic_reproduces_published_counts() -> None:
    """The formulas used above for resnet200/269 and bert_large give published figures."""
    assert bottleneck_resnet([3, 4, 6, 3]) == 25_557_032
    assert bottleneck_resnet([3, 8, 36, 3]) == 60_192_808
    assert bottleneck_resnet([3, 24, 36, 3]) == 64_673_832
    assert bert_mlm(hidden=768, layers=12, intermediate=3072) == 109_514_298


PYTORCH_MODELS = models.for_framework("pytorch")


def test_every_pytorch_model_has_an_expected_count() -> None:
    assert set(PYTORCH_MODELS) == set(EXPECTED_PARAMETERS)


# The specs torchvision builds: the constructor each names is the only record of which
# torchvision function that is, so a missing or misspelt one shows here, not when a cell runs.
TORCHVISION_SPECS = [
    spec for spec in map(models.get, PYTORCH_MODELS)
    if spec.builders["pytorch"] == f"{torchvision_models.__name__}:build"
]


def test_every_torchvision_spec_names_a_constructor_torchvision_has() -> None:
    assert TORCHVISION_SPECS
    unbuildable = {spec.name: spec.torchvision for spec in TORCHVISION_SPECS
                   if not spec.torchvision or not hasattr(torchvision.models, spec.torchvision)}
    assert unbuildable == {}


@pytest.mark.parametrize("constructor, message", [
    ("", "model resnet18: its catalog spec names no torchvision constructor "
         "(ModelSpec.torchvision)"),
    ("resnet17", f"model resnet18: torchvision {torchvision.__version__} has no model "
                 f"constructor 'resnet17'"),
])
def test_torchvision_refuses_a_spec_without_a_constructor_in_one_line(
        constructor: str, message: str) -> None:
    spec = dataclasses.replace(models.get("resnet18"), torchvision=constructor)
    with pytest.raises(ValueError) as info:
        torchvision_models.build(spec, {})
    assert str(info.value) == message


def _meta_input(built: zoo.BuiltModel, batch: int) -> torch.Tensor:
    shape = (batch, *built.input_shape)
    if built.input_kind == "tokens":
        return torch.randint(0, built.vocab_size, shape, device="meta")
    return torch.rand(shape, device="meta")


@pytest.mark.parametrize("name", PYTORCH_MODELS)
def test_parameter_count_and_output_shape(name: str) -> None:
    """Builds on CPU, counts parameters, then checks the training-mode output shapes on the
    meta device (shapes only: no arithmetic is run, so numerics are not exercised here)."""
    spec = models.get(name)
    if name in L.PRESETS:
        # Up to 70 B weights: built on the meta device; tests/test_llm.py runs the tiny ones.
        with torch.device("meta"):
            built = zoo.build(name)
        assert zoo.parameter_count(built.module) == EXPECTED_PARAMETERS[name]
        return
    built = zoo.build(name)
    assert built.input_kind == spec.input_kind
    assert zoo.parameter_count(built.module) == EXPECTED_PARAMETERS[name]
    if built.input_kind == "waves":
        # deepwave's propagator is compiled code that cannot run on the meta device: its
        # shapes are checked with real arithmetic in tests/test_deepwave.py.
        return
    module = built.module.to("meta").train()
    out = module(_meta_input(built, 2))
    # googlenet and inception3 have their auxiliary heads off: one tensor in training mode.
    assert type(out) is torch.Tensor
    if built.input_kind == "tokens":
        assert out.shape == (2, *built.input_shape, built.vocab_size)
        assert built.num_classes == built.vocab_size
    else:
        assert out.shape == (2, built.num_classes)


@pytest.mark.parametrize("name, shape, classes", [
    ("deep_mnist", (784,), 10),
    ("sensor_net", (784,), 16),
    ("resnet18", (3, 224, 224), 1000),
])
def test_forward_pass_on_cpu(name: str, shape: tuple[int, ...], classes: int) -> None:
    built = zoo.build(name)
    assert built.input_shape == shape
    module = built.module.eval()
    with torch.no_grad():
        out = module(torch.rand(1, *shape))
    assert out.shape == (1, classes)
    assert torch.isfinite(out).all()


def test_bert_decoder_is_tied_to_word_embeddings() -> None:
    shape = transformers.BertShape(hidden=32, layers=2, heads=4, intermediate=64)
    model = transformers.BertForMaskedLM(shape, vocab_size=100).eval()
    assert model.decoder.weight is model.embeddings.word.weight
    ids = torch.randint(0, 100, (3, 16))
    with torch.no_grad():
        logits = model(ids)
    assert logits.shape == (3, 16, 100)
    # Position matters: the same token at two positions gives different logits.
    same = torch.full((1, 2), 7)
    with torch.no_grad():
        pair = model(same)
    assert not torch.allclose(pair[0, 0], pair[0, 1])


def test_bert_options_set_shapes() -> None:
    built = zoo.build("bert_base", {"sequence_length": 64, "vocab_size": 1000})
    assert built.input_shape == (64,)
    assert built.vocab_size == built.num_classes == 1000
    expected = bert_mlm(hidden=768, layers=12, intermediate=3072, vocab=1000)
    assert zoo.parameter_count(built.module) == expected


@pytest.mark.parametrize("opts, message", [
    ({"sequence_length": 513}, "model_opts.sequence_length must be <= 512"),
    ({"sequence_length": 0}, "model_opts.sequence_length must be a positive integer"),
    ({"vocab_size": "big"}, "model_opts.vocab_size must be a positive integer"),
])
def test_bert_rejects_bad_options(opts: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        zoo.build("bert_base", opts)
