"""ParaDnn's parameterized models: Φ, shape checks, optimizers and the example sweep."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from dlbench import models, study
from dlbench.models import paradnn as P
from dlbench.pytorch import zoo
from dlbench.pytorch.zoo import paradnn as torch_paradnn

EXAMPLE = Path(__file__).resolve().parents[1] / "config" / "examples" / "paradnn.yaml"


def fc_opts(**opts: object) -> dict:
    return models.get("paradnn_fc").opts(opts)


def cnn_opts(**opts: object) -> dict:
    return models.get("paradnn_cnn").opts(opts)


# Fully-connected -------------------------------------------------------------------------


def test_phi_formula_by_hand() -> None:
    # 512*512*3 + 512*(2000 + 1000) = 786,432 + 1,536,000
    assert P.fc_phi(layers=4, nodes=512, input_size=2000, output_size=1000) == 2_322_432
    # One hidden layer: only the input and output matrices.
    assert P.fc_phi(layers=1, nodes=10, input_size=3, output_size=2) == 50


@pytest.mark.parametrize("layers, nodes, input_size, output_size", [
    (1, 10, 3, 2), (2, 1, 1, 1), (4, 32, 2000, 1000), (7, 64, 10, 20), (16, 128, 784, 10),
])
def test_fc_weights_sum_to_phi(layers: int, nodes: int, input_size: int,
                               output_size: int) -> None:
    built = zoo.build("paradnn_fc", {"layers": layers, "nodes": nodes,
                                     "input_size": input_size, "output_size": output_size})
    weights = sum(p.numel() for name, p in built.module.named_parameters()
                  if name.endswith("weight"))
    biases = sum(p.numel() for name, p in built.module.named_parameters()
                 if name.endswith("bias"))
    phi = nodes * nodes * (layers - 1) + nodes * (input_size + output_size)
    assert weights == phi == built.facts["phi"]
    assert biases == layers * nodes + output_size
    assert built.input_shape == (input_size,)
    assert built.num_classes == output_size


def test_the_options_a_model_was_built_with_are_recorded_defaults_too() -> None:
    """A cell holds only the options its study gave; the result's extra says the rest."""
    built = zoo.build("paradnn_fc", {"nodes": 8, "input_size": 5, "output_size": 4})
    assert built.facts["model_opts"] == {**models.get("paradnn_fc").default_opts,
                                         "nodes": 8, "input_size": 5, "output_size": 4}
    assert "model_opts" not in zoo.build("deep_mnist").facts  # no options to speak of


def test_fc_relu_after_every_hidden_layer_and_not_after_output() -> None:
    module = zoo.build("paradnn_fc", {"layers": 3, "nodes": 8, "input_size": 5,
                                      "output_size": 4}).module
    kinds = [type(m).__name__ for m in module]
    assert kinds == ["Linear", "ReLU"] * 3 + ["Linear"]
    # A negative output survives: no activation follows the output layer.
    with torch.no_grad():
        module[-1].weight.zero_()
        module[-1].bias.fill_(-5.0)
        out = module(torch.rand(6, 5))
    assert out.shape == (6, 4)
    assert torch.equal(out, torch.full((6, 4), -5.0))


def test_rmsprop_has_paradnn_parameters_and_steps() -> None:
    built = zoo.build("paradnn_fc", {"layers": 1, "nodes": 4, "input_size": 3,
                                     "output_size": 2})
    assert built.optimizer == "rmsprop"
    assert built.optimizer_kwargs == {"lr": 0.1, "alpha": 0.9, "momentum": 0.9, "eps": 1.0}
    optimizer = torch.optim.RMSprop(built.module.parameters(), **built.optimizer_kwargs)
    before = [p.detach().clone() for p in built.module.parameters()]
    loss = torch.nn.functional.cross_entropy(built.module(torch.rand(8, 3)),
                                             torch.randint(0, 2, (8,)))
    loss.backward()
    optimizer.step()
    assert any(not torch.equal(a, p) for a, p in zip(before, built.module.parameters(),
                                                      strict=True))


@pytest.mark.parametrize("name, cls", [("adam", torch.optim.Adam), ("sgd", torch.optim.SGD)])
def test_other_optimizers_are_selectable(name: str, cls: type) -> None:
    built = zoo.build("paradnn_cnn", {"optimizer": name, "filters": 2})
    assert built.optimizer == name
    cls(built.module.parameters(), **built.optimizer_kwargs)


@pytest.mark.parametrize("opts, message", [
    ({"optimizer": "adagrad"},
     r"paradnn_fc: model_opts.optimizer must be one of rmsprop, adam, sgd, got 'adagrad'"),
    ({"layers": 0}, r"paradnn_fc: model_opts.layers must be >= 1, got 0"),
    ({"nodes": 2.5}, r"paradnn_fc: model_opts.nodes must be an integer, got 2.5"),
    ({"input_size": True}, r"paradnn_fc: model_opts.input_size must be an integer, got True"),
])
def test_fc_check_rejects_bad_options(opts: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        P.check_fc_opts(fc_opts(**opts))
    with pytest.raises(ValueError, match=message):
        zoo.build("paradnn_fc", opts)


# Convolutional ---------------------------------------------------------------------------


def conv_bn(cin: int, cout: int, kernel: int) -> int:
    return cin * cout * kernel * kernel + 2 * cout


def paradnn_resnet_params(filters: int, blocks: int, block_fn: str, pooled: int,
                          output_size: int) -> int:
    """Convolutions without bias, each followed by batch norm; projection shortcut in each
    group's first block; dense over the flattened pooled x pooled map."""
    total = conv_bn(3, filters, 7)
    cin = filters
    for width in (filters, 2 * filters, 4 * filters, 8 * filters):
        for i in range(blocks):
            if block_fn == "residual":
                cout = width
                total += conv_bn(cin, width, 3) + conv_bn(width, width, 3)
            else:
                cout = 4 * width
                total += conv_bn(cin, width, 1) + conv_bn(width, width, 3)
                total += conv_bn(width, cout, 1)
            if i == 0:
                total += conv_bn(cin, cout, 1)
            cin = cout
    return total + cin * pooled * pooled * output_size + output_size


@pytest.mark.parametrize("filters, blocks, block_fn, input_size, pooled, output_size", [
    (8, 3, "residual", 200, 1, 10),
    (4, 2, "bottleneck", 300, 4, 500),  # 300 -> 10x10 map -> 4x4 after the 7x7 pool
    (16, 1, "bottleneck", 224, 1, 1000),
])
def test_cnn_parameter_count(filters: int, blocks: int, block_fn: str, input_size: int,
                             pooled: int, output_size: int) -> None:
    built = zoo.build("paradnn_cnn", {"filters": filters, "blocks": blocks,
                                      "block_fn": block_fn, "input_size": input_size,
                                      "output_size": output_size})
    expected = paradnn_resnet_params(filters, blocks, block_fn, pooled, output_size)
    assert zoo.parameter_count(built.module) == expected
    assert built.input_shape == (3, input_size, input_size)
    assert built.num_classes == output_size


def test_cnn_forward_at_smallest_valid_input() -> None:
    built = zoo.build("paradnn_cnn", {"filters": 2, "blocks": 2, "block_fn": "bottleneck",
                                      "input_size": 193, "output_size": 7})
    out = built.module.train()(torch.rand(2, 3, 193, 193))
    assert out.shape == (2, 7)
    assert built.facts["final_feature_map"] == 7


@pytest.mark.parametrize("size", [33, 100, 192, 193, 200, 224, 300])
def test_size_arithmetic_matches_the_torch_module(size: int) -> None:
    module = torch_paradnn.ParaDnnResNet(2, 1, "residual", 200, 3).eval()
    with torch.no_grad():
        final = module.trunk(torch.rand(1, 3, size, size))
    assert final.shape[-1] == final.shape[-2] == P.cnn_feature_sizes(size)["group4"]


def test_feature_map_below_the_pool_really_fails_in_torch() -> None:
    """What the check prevents: ParaDnn's 7x7 pool over the 4x4 map of input 100."""
    assert P.cnn_feature_sizes(100)["group4"] == 4
    with pytest.raises(RuntimeError):
        torch.nn.AvgPool2d(7, stride=1)(torch.rand(1, 2, 4, 4))


def test_cnn_sizes_by_hand() -> None:
    # 200 -> stem 100 -> pool 50 -> groups 50, 25, 13, 7
    assert P.cnn_feature_sizes(200) == {"stem": 100, "pool": 50, "group1": 50, "group2": 25,
                                        "group3": 13, "group4": 7}
    assert P.cnn_pooled_size(300) == 4
    assert P.cnn_min_input_size() == 193


@pytest.mark.parametrize("opts, message", [
    ({"input_size": 100},
     r"^paradnn_cnn: model_opts.input_size 100 leaves a 4x4 feature map before the 7x7 "
     r"average pool, so the feature map vanishes; use input_size >= 193$"),
    ({"input_size": 192}, r"input_size 192 leaves a 6x6 feature map"),
    ({"block_fn": "dense"},
     r"paradnn_cnn: model_opts.block_fn must be one of residual, bottleneck, got 'dense'"),
    ({"filters": 0}, r"paradnn_cnn: model_opts.filters must be >= 1, got 0"),
    ({"blocks": "8"}, r"paradnn_cnn: model_opts.blocks must be an integer, got '8'"),
])
def test_cnn_check_rejects_with_one_line(opts: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        P.check_cnn_opts(cnn_opts(**opts))
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=message):
        zoo.build("paradnn_cnn", opts)


# Recurrent -------------------------------------------------------------------------------


@pytest.mark.parametrize("cell, gates", [("rnn", 1), ("lstm", 4), ("gru", 3)])
def test_rnn_cells(cell: str, gates: int) -> None:
    opts = {"layers": 2, "max_length": 6, "vocab_size": 50, "embedding_size": 8, "cell": cell}
    built = zoo.build("paradnn_rnn", opts)
    e, v = 8, 50
    expected = v * e + 2 * gates * (2 * e * e + 2 * e) + (e * v + v)
    assert zoo.parameter_count(built.module) == expected
    assert built.input_shape == (6,)
    assert built.vocab_size == built.num_classes == 50
    out = built.module(torch.randint(0, 50, (3, 6)))
    assert out.shape == (3, 6, 50)


def test_rnn_check_rejects_unknown_cell() -> None:
    with pytest.raises(ValueError, match=r"paradnn_rnn: model_opts.cell must be one of rnn, "
                                         r"lstm, gru, got 'transformer'"):
        zoo.build("paradnn_rnn", {"cell": "transformer"})


# Catalog hooks and the example sweep -----------------------------------------------------


def _check(name: str):
    module, func = models.get(name).check_opts.split(":")
    return getattr(importlib.import_module(module), func)


@pytest.mark.parametrize("name", ["paradnn_fc", "paradnn_cnn", "paradnn_rnn"])
def test_catalog_names_a_check_that_accepts_the_defaults(name: str) -> None:
    spec = models.get(name)
    _check(name)(spec.opts(None))
    built = zoo.build(name)
    assert built.facts is not None


def test_checks_import_without_torch() -> None:
    """The driver validates studies without a framework: the checks must not pull torch."""
    code = ("import sys, dlbench.models.paradnn as p; "
            "p.check_cnn_opts({'filters': 16, 'blocks': 1, 'block_fn': 'residual', "
            "'input_size': 200, 'output_size': 10, 'optimizer': 'rmsprop'}); "
            "sys.exit(1 if 'torch' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_example_config_covers_paradnn_ranges() -> None:
    every = study.expand_config(yaml.safe_load(EXAMPLE.read_text()))
    # and one calibration cell of the GPU (calibrate: true): the roofline's ceilings
    assert [c.params["device"] for c in every if c.kind == "calibrate"] == ["gpu"]
    cells = [c for c in every if c.kind == "model"]
    fc = [c.params for c in cells if c.params["model"] == "paradnn_fc"]
    cnn = [c.params for c in cells if c.params["model"] == "paradnn_cnn"]
    assert len(fc) == 6 * 9 * 9
    assert len(cnn) == 3 * 8 * 2 * 3 * 2 * 5
    assert all(c.params["device"] == "gpu" for c in cells)

    def values(cells: list[dict], key: str) -> set:
        return {c["model_opts"][key] for c in cells}

    assert values(fc, "layers") == {4, 8, 16, 32, 64, 128}
    assert values(fc, "nodes") == {32 * 2**i for i in range(9)}
    assert {c["batch_size"] for c in fc} == {64 * 2**i for i in range(9)}
    assert values(cnn, "filters") == {16, 32, 64}
    assert values(cnn, "blocks") == set(range(1, 9))
    assert values(cnn, "input_size") == {200, 300}
    assert values(cnn, "output_size") == {500, 1000, 1500}
    assert values(cnn, "block_fn") == {"residual", "bottleneck"}
    assert {c["batch_size"] for c in cnn} == {64, 128, 256, 512, 1024}
    for params in fc + cnn:
        _check(params["model"])(models.get(params["model"]).opts(params["model_opts"]))
