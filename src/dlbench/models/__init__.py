"""The model registry: every model any runner can benchmark, in one place.

The registry is plain data so that the workflow driver can validate a study without
importing a framework. Each entry names, per framework, the builder function that makes
the network (``"module:function"``), imported only inside that framework's process.

To add a model: add one ``ModelSpec`` to ``CATALOG`` below and write its builder. A
framework plug-in (dlbench.frameworks) may add builders and models of its own.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from dlbench.models import deepwave as _deepwave
from dlbench.models import llm as _llm

_TV = "dlbench.pytorch.zoo.torchvision_models:build"
_DLBS = "dlbench.pytorch.zoo.dlbs_models:build"
_BERT = "dlbench.pytorch.zoo.transformers:build"
_PARADNN = "dlbench.pytorch.zoo.paradnn:build"
_MX = "dlbench.mxnet.zoo:build"
_PARADNN_CHECKS = "dlbench.models.paradnn"
_DEEPWAVE = "dlbench.pytorch.zoo.deepwave:build"
_LLM = "dlbench.pytorch.zoo.llm:build"


@dataclass(frozen=True)
class ModelSpec:
    name: str
    # Input of one sample, without the batch dimension: (C, H, W) for images, (features,)
    # for fully-connected nets, (sequence_length,) for token models.
    input_shape: tuple[int, ...]
    num_classes: int
    input_kind: str  # "image" | "features" | "tokens" | "waves" (source signals per shot)
    builders: dict[str, str] = field(default_factory=dict)
    # Options a study may set through model_opts, with their defaults.
    default_opts: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    # "module:function" of a pure-Python check of the full option set (``opts`` returns
    # it) that raises ValueError with a one-line message; None when any values do.
    check_opts: str | None = None
    # The precisions it runs in; None: every precision its framework has.
    precisions: tuple[str, ...] | None = None
    # What reports call it (DLBS's ``exp.model_title``: "ResNet50", "AlexNetOWT"); the
    # name where none is given.
    title: str = ""
    # The torchvision.models constructor that builds it when its PyTorch builder is _TV
    # ("alexnet" for alexnet_owt); "" for every other model.
    torchvision: str = ""

    @property
    def model_title(self) -> str:
        return self.title or self.name

    @property
    def frameworks(self) -> tuple[str, ...]:
        return tuple(self.builders)

    def builder(self, framework: str) -> Callable[..., Any]:
        if framework not in self.builders:
            raise KeyError(f"model {self.name!r} is not available for {framework}")
        module_name, func = self.builders[framework].split(":")
        return getattr(importlib.import_module(module_name), func)

    def opts(self, overrides: dict[str, Any] | None) -> dict[str, Any]:
        """Default options updated by ``overrides``; unknown option names are an error."""
        overrides = dict(overrides or {})
        unknown = sorted(set(overrides) - set(self.default_opts))
        if unknown:
            valid = ", ".join(sorted(self.default_opts)) or "none"
            raise ValueError(
                f"model {self.name}: unknown model_opts {', '.join(unknown)} (valid: {valid})"
            )
        return {**self.default_opts, **overrides}


def _image(name: str, size: int, *, builders: dict[str, str], desc: str = "",
           title: str | None = None, torchvision: str = "") -> ModelSpec:
    """An ImageNet-shaped model (3 x size x size, 1000 classes); its title is DLBS's unless
    one is given."""
    if title is None:
        title = DLBS_TITLES.get(name, "")
    return ModelSpec(name, (3, size, size), 1000, "image", builders, {}, desc, title=title,
                     torchvision=torchvision)


# DLBS's titles of its models (its backends print them as ``__exp.model_title__``, and its
# reports group and label by them), spelled as DLBS does.
DLBS_TITLES = {
    "alexnet": "AlexNet", "alexnet_owt": "AlexNetOWT", "googlenet": "GoogleNet",
    "inception3": "InceptionV3", "inception4": "InceptionV4", "overfeat": "Overfeat",
    **{f"vgg{d}": f"VGG{d}" for d in (11, 13, 16, 19)},
    **{f"resnet{d}": f"ResNet{d}" for d in (18, 34, 50, 101, 152, 200, 269)},
    "deep_mnist": "DeepMNIST", "sensor_net": "SensorNet", "acoustic_model": "AcousticModel",
}


# MXNet builders (dlbench.mxnet.zoo) make the same networks as the PyTorch ones: parameter
# counts agree for every model with both builders (tests/test_mxnet_runner.py). No shared
# model differs by design; to keep it so, the MXNet zoo uses its own blocks where Gluon's
# differ: ResNet-50/101/152 (Gluon's v1 strides in the 1x1 convolution and adds biases),
# GoogLeNet (absent from Gluon; torchvision's layout, no auxiliary heads, as PyTorch builds
# it), AlexNet (DLBS's; Gluon's alexnet is alexnet_owt). Inception v3 is Gluon's, which has
# no auxiliary head either.
_TV_MX = {"pytorch": _TV, "mxnet": _MX}

CATALOG: tuple[ModelSpec, ...] = (
    # DLBS's image models; input sizes as DLBS feeds them.
    _image("alexnet", 227, builders={"pytorch": _DLBS, "mxnet": _MX}, desc="AlexNet (DLBS)"),
    # torchvision's AlexNet is the "one weird trick" variant.
    _image("alexnet_owt", 224, builders=_TV_MX, desc="AlexNet, one weird trick",
           torchvision="alexnet"),
    _image("googlenet", 224, builders=_TV_MX, desc="GoogLeNet / Inception v1",
           torchvision="googlenet"),
    _image("inception3", 299, builders=_TV_MX, desc="Inception v3", torchvision="inception_v3"),
    _image("inception4", 299, builders={"pytorch": _DLBS}, desc="Inception v4"),
    _image("overfeat", 231, builders={"pytorch": _DLBS}, desc="OverFeat (fast)"),
    # VGG without batch norm, as DLBS benchmarks it.
    *(_image(f"vgg{d}", 224, builders=_TV_MX, desc=f"VGG-{d}", torchvision=f"vgg{d}")
      for d in (11, 13, 16, 19)),
    *(_image(f"resnet{d}", 224, builders=_TV_MX, desc=f"ResNet-{d}", torchvision=f"resnet{d}")
      for d in (18, 34, 50, 101, 152)),
    *(_image(f"resnet{d}", 224, builders={"pytorch": _DLBS}, desc=f"ResNet-{d}")
      for d in (200, 269)),
    ModelSpec("deep_mnist", (784,), 10, "features", {"pytorch": _DLBS, "mxnet": _MX}, {},
              "DLBS's DeepMNIST: five FC layers (2500, 2000, 1500, 1000, 500)",
              title=DLBS_TITLES["deep_mnist"]),
    ModelSpec("sensor_net", (784,), 16, "features", {"pytorch": _DLBS}, {},
              "DLBS's SensorNet: three FC layers of 1024", title=DLBS_TITLES["sensor_net"]),
    ModelSpec("acoustic_model", (540,), 8192, "features", {"pytorch": _DLBS}, {},
              "DLBS's acoustic model: five FC layers of 2048",
              title=DLBS_TITLES["acoustic_model"]),
    # Transformer encoders with a masked-LM head over synthetic tokens.
    ModelSpec("bert_base", (128,), 30522, "tokens", {"pytorch": _BERT},
              {"sequence_length": 128, "vocab_size": 30522}, "BERT-Base, masked-LM head",
              check_opts="dlbench.models:check_bert_opts", title="BERT-Base"),
    ModelSpec("bert_large", (128,), 30522, "tokens", {"pytorch": _BERT},
              {"sequence_length": 128, "vocab_size": 30522}, "BERT-Large, masked-LM head",
              check_opts="dlbench.models:check_bert_opts", title="BERT-Large"),
    # ParaDnn's parameterized families (seed 004), shaped by model_opts.
    ModelSpec("paradnn_fc", (2000,), 1000, "features", {"pytorch": _PARADNN},
              {"layers": 4, "nodes": 512, "input_size": 2000, "output_size": 1000,
               "optimizer": "rmsprop"}, "ParaDnn fully-connected family",
              check_opts=f"{_PARADNN_CHECKS}:check_fc_opts"),
    ModelSpec("paradnn_cnn", (3, 200, 200), 1000, "image", {"pytorch": _PARADNN},
              {"filters": 32, "blocks": 1, "block_fn": "residual", "input_size": 200,
               "output_size": 1000, "optimizer": "rmsprop"}, "ParaDnn ResNet family",
              check_opts=f"{_PARADNN_CHECKS}:check_cnn_opts"),
    # Next-token prediction at every position; ParaDnn rnn.py's defaults.
    ModelSpec("paradnn_rnn", (50,), 1024, "tokens", {"pytorch": _PARADNN},
              {"layers": 5, "max_length": 50, "vocab_size": 1024, "embedding_size": 100,
               "cell": "rnn", "optimizer": "rmsprop"}, "ParaDnn recurrent family",
              check_opts=f"{_PARADNN_CHECKS}:check_rnn_opts"),
    # GVProf's third workload (seed 001): wave propagation, a batch of shots (deepwave).
    ModelSpec("deepwave", (1, 300), 0, "waves", {"pytorch": _DEEPWAVE},
              dict(_deepwave.DEFAULT_OPTS), "deepwave scalar wave propagation (FWI step)",
              check_opts="dlbench.models.deepwave:check_opts",
              precisions=_deepwave.PRECISIONS),
    # Decoder-only language models (transformers configurations, random weights); a
    # sample is a sequence of sequence_length tokens, throughput is in tokens/s.
    *(ModelSpec(name, (128,), _llm.PRESETS[name][1]["vocab_size"], "tokens", {"pytorch": _LLM},
                _llm.default_opts(name), f"{_llm.family(name)} causal LM ({name})",
                check_opts="dlbench.models.llm:check_opts") for name in _llm.PRESETS),
)

def check_bert_opts(opts: dict[str, Any]) -> None:
    """BERT's learned position table has 512 rows: longer sequences cannot be embedded."""
    length, vocab = opts["sequence_length"], opts["vocab_size"]
    if isinstance(length, bool) or not isinstance(length, int) or not 1 <= length <= 512:
        raise ValueError(f"bert: sequence_length must be an integer in 1..512, got {length!r}")
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 1:
        raise ValueError(f"bert: vocab_size must be a positive integer, got {vocab!r}")


@functools.cache
def _catalog() -> dict[str, ModelSpec]:
    """CATALOG, with the builders and models that framework plug-ins add."""
    from dlbench import frameworks

    by_name = {spec.name: spec for spec in CATALOG}
    for fw in frameworks.registry().values():
        for spec in fw.new_models:
            by_name.setdefault(spec.name, spec)
        for name, builder in fw.models.items():
            if name not in by_name:
                raise ValueError(f"framework {fw.name}: builder for unknown model {name!r}")
            spec = by_name[name]
            by_name[name] = replace(spec, builders={**spec.builders, fw.name: builder})
    return by_name


def names() -> list[str]:
    return list(_catalog())


def get(name: str) -> ModelSpec:
    try:
        return _catalog()[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r} (valid: {', '.join(names())})") from None


def for_framework(framework: str) -> list[str]:
    return [spec.name for spec in _catalog().values() if framework in spec.builders]
