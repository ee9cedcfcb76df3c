"""PARAM config grammar: data types, iterators, ranges, __copy__, operator names."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from dlbench.ops import grammar, iterators, registry
from dlbench.ops.grammar import SpecError
from dlbench.ops.timing import FALLBACK_L2_BYTES, l2_flush_bytes

PARAM_CONFIGS = Path(__file__).resolve().parent / "data" / "param-configs"


def value(spec, device="cpu"):
    return grammar.materialize(spec, device, "arg")


# -- data types ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["int", "long"])
def test_integer_scalars_take_a_value_or_an_inclusive_random_range(kind):
    assert value({"type": kind, "value": 237}) == 237
    drawn = {value({"type": kind, "value_range": [3, 5]}) for _ in range(200)}
    assert drawn == {3, 4, 5}


@pytest.mark.parametrize("kind", ["float", "double"])
def test_float_scalars_take_a_value_or_a_random_range(kind):
    assert value({"type": kind, "value": 1.25}) == 1.25
    drawn = [value({"type": kind, "value_range": [0.5, 2.0]}) for _ in range(100)]
    assert all(0.5 <= x <= 2.0 for x in drawn) and len(set(drawn)) > 1


def test_int_keeps_a_non_integer_value_as_param_does():
    # PARAM's own test_native_basic_ops.json passes {"type": "int", "value": 2.5}.
    assert value({"type": "int", "value": 2.5}) == 2.5


def test_bool_device_str_none():
    assert value({"type": "bool", "value": False}) is False
    assert value({"type": "device", "value": "cpu"}) == torch.device("cpu")
    assert value({"type": "str", "value": "sum"}) == "sum"
    assert value({"type": "str"}) == ""
    assert value({"type": "none"}) is None


def test_genericlist_and_tuple_hold_nested_specs():
    items = [{"type": "int", "value": 237},
             {"type": "tensor", "dtype": "float", "shape": [16, 32]}]
    got = value({"type": "genericlist", "value": items})
    assert isinstance(got, list) and got[0] == 237 and got[1].shape == (16, 32)
    got = value({"type": "tuple", "value": items})
    assert isinstance(got, tuple) and got[1].dtype == torch.float32


@pytest.mark.parametrize("name,dtype", [
    ("float", torch.float32), ("double", torch.float64), ("half", torch.float16),
    ("float16", torch.float16), ("bfloat16", torch.bfloat16), ("int", torch.int32),
    ("long", torch.int64), ("int8", torch.int8), ("uint8", torch.uint8), ("bool", torch.bool),
])
def test_tensor_dtypes_and_requires_grad_defaults(name, dtype):
    t = value({"type": "tensor", "dtype": name, "shape": [3, 4]})
    assert t.dtype == dtype and t.shape == (3, 4)
    # Float tensors require grad by default (PARAM); integer/bool tensors cannot.
    assert t.requires_grad == dtype.is_floating_point


def test_tensor_requires_grad_false_and_scalar_shape():
    t = value({"type": "tensor", "dtype": "float", "shape": [], "requires_grad": False})
    assert t.dim() == 0 and not t.requires_grad


def test_integer_tensor_value_range_is_inclusive():
    t = value({"type": "tensor", "dtype": "long", "shape": [4000], "value_range": [0, 3]})
    assert set(t.tolist()) == {0, 1, 2, 3}


def test_float_tensor_value_range():
    t = value({"type": "tensor", "dtype": "double", "shape": [1000], "value_range": [-2, -1]})
    assert t.min() >= -2 and t.max() <= -1 and t.std() > 0


def test_tensors_on_the_meta_device_have_shapes_only():
    t = value({"type": "tensor", "dtype": "float", "shape": [2, 3]}, device="meta")
    assert t.is_meta and t.shape == (2, 3)


@pytest.mark.parametrize("spec,message", [
    ({"type": "floaty", "value": 1}, "arg.type: unknown type 'floaty'"),
    ({"value": 1}, "arg.type: missing"),
    ({"type": "int"}, "arg: a int needs exactly one of value and value_range"),
    ({"type": "int", "value": 1, "value_range": [1, 2]}, "exactly one of"),
    ({"type": "int", "value": "3"}, "arg.value: expected a number, got '3'"),
    ({"type": "int", "value_range": [5, 1]}, "arg.value_range: min > max"),
    ({"type": "int", "value_range": [0.5, 1]}, "arg.value_range: expected [min, max] of integers"),
    ({"type": "bool", "value": 1}, "arg.value: expected true or false"),
    ({"type": "device", "value": "warp:9"}, "arg.value: expected a device"),
    ({"type": "tuple", "value": 3}, "arg.value: a tuple needs a list"),
    ({"type": "tensor", "shape": [2]}, "arg.dtype: missing"),
    ({"type": "tensor", "dtype": "floaty", "shape": [2]}, "arg.dtype: unknown dtype 'floaty'"),
    ({"type": "tensor", "dtype": "float"}, "arg.shape: missing"),
    ({"type": "tensor", "dtype": "float", "shape": [2, -1]}, "arg.shape[1]: expected a size >= 0"),
    ({"type": "tensor", "dtype": "long", "shape": [2], "requires_grad": True},
     "arg.requires_grad: a long tensor cannot require grad"),
    ({"type": "tensor", "dtype": "bool", "shape": [2], "value_range": [0, 1]},
     "arg.value_range: bool tensors take no value_range"),
    ({"type": "genericlist", "value": [{"type": "int", "value": 1}, {"type": "nope"}]},
     "arg.value[1].type: unknown type 'nope'"),
    ({"type": "int", "value": [1, 3, 1], "__range__": ["value"]},
     'arg.__range__: needs "input_iterator": "RangeConfigIterator"'),
])
def test_bad_specs_give_one_line_errors_naming_the_path(spec, message):
    with pytest.raises(SpecError) as info:
        value(spec)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


# -- iterators --------------------------------------------------------------------------


def items(iterator_cls, specs, key="input"):
    return list(iterator_cls({key: specs}, key, "cpu", "config[0]"))


def test_default_iterator_yields_each_spec_with_its_index():
    specs = [{"args": [{"type": "int", "value": 1}]},
             {"args": [{"type": "int", "value": 2}], "kwargs": {"x": {"type": "none"}}}]
    got = items(iterators.DefaultConfigIterator, specs)
    assert [i.id for i in got] == ["0", "1"]
    assert got[1].config == {"args": [{"type": "int", "value": 2}],
                             "kwargs": {"x": {"type": "none"}}}
    assert got[1].path == "config[0].input[1]" and got[1].error is None


def test_default_iterator_turns_a_bad_spec_into_one_error_item():
    specs = [{"args": [{"type": "int", "value": 1}]}, {"args": [{"type": "floaty"}]},
             {"args": [{"type": "int", "value": 3}]}]
    got = items(iterators.DefaultConfigIterator, specs)
    assert [i.error is None for i in got] == [True, False, True]
    assert got[1].error == "config[0].input[1].args[0].type: unknown type 'floaty'"


def test_simple_add_range_expands_to_33_inputs():
    config = json.loads((PARAM_CONFIGS / "simple_add_range.json").read_text())["torch.add"]
    ids, alphas = [], []
    for c, cfg in enumerate(config["config"]):
        for item in iterators.RangeConfigIterator(cfg, "input", "cpu", f"config[{c}]"):
            assert item.error is None
            ids.append(f"{c}|{item.id}")
            alphas.append(item.config["args"][1]["value"])
            assert "__range__" not in item.config["args"][1]
    assert len(ids) == 33 and len(set(ids)) == 33
    assert alphas[:10] == list(range(1, 11))  # [1, 10, 1] is inclusive
    assert alphas[10:16] == [10, 12, 14, 16, 18, 20]
    assert ids[10] == "0|1_0" and ids[-1] == "1|1_5"


def test_range_product_puts_the_first_arg_outermost_and_ranges_shapes_and_dtypes():
    spec = {"args": [
        {"type": "tensor", "dtype": ["float", "double"], "shape": [[1, 2], 3],
         "__range__": ["dtype", "shape"]},
        {"type": "str", "value": ["a", "b"], "__range__": ["value"]},
        {"type": "bool", "value": [True, False], "__range__": ["value"]},
    ]}
    got = items(iterators.RangeConfigIterator, [spec])
    combos = [(i.config["args"][0]["dtype"], i.config["args"][0]["shape"],
               i.config["args"][1]["value"], i.config["args"][2]["value"]) for i in got]
    assert len(combos) == 2 * 2 * 2 * 2
    assert combos[0] == ("float", [1, 3], "a", True)
    assert combos[1] == ("float", [1, 3], "a", False)
    assert combos[-1] == ("double", [2, 3], "b", False)
    assert [i.id for i in got][:3] == ["0_0", "0_1", "0_2"]


def test_range_over_kwargs_and_genericlist_items():
    spec = {"args": [{"type": "genericlist", "__range__": ["value"], "value": [
        {"type": "int", "value": [1, 2, 1], "__range__": ["value"]},
        {"type": "int", "value": 7}]}],
            "kwargs": {"dim": {"type": "long", "value": [0, 4, 2], "__range__": ["value"]}}}
    got = items(iterators.RangeConfigIterator, [spec])
    combos = [([v["value"] for v in i.config["args"][0]["value"]], i.config["kwargs"]["dim"]["value"])
              for i in got]
    assert combos == [([1, 7], 0), ([1, 7], 2), ([1, 7], 4), ([2, 7], 0), ([2, 7], 2),
                      ([2, 7], 4)]


def test_copy_fills_shape_elements_from_other_tensor_args():
    """PARAM's mm_range.json baddbmm: every combination must be a valid baddbmm."""
    spec = {"args": [
        {"type": "tensor", "dtype": "float", "shape": [[1, 2, 1], -1, -1], "__range__": ["shape"],
         "__copy__": [{"shape": [1, [1, 1]]}, {"shape": [2, [2, 2]]}]},
        {"type": "tensor", "dtype": "float", "shape": [-1, [4, 6, 1], [4, 6, 1]],
         "__range__": ["shape"], "__copy__": [{"shape": [0, [0, 0]]}]},
        {"type": "tensor", "dtype": "float", "shape": [-1, -1, 8],
         "__copy__": [{"shape": [0, [0, 0]]}, {"shape": [1, [1, 2]]}]},
    ]}
    got = items(iterators.RangeConfigIterator, [spec])
    assert len(got) == 2 * 3 * 3
    for item in got:
        assert item.error is None
        shapes = [a["shape"] for a in item.config["args"]]
        b, n, m = shapes[1]
        assert shapes == [[b, n, 8], [b, n, m], [b, m, 8]]
        assert all("__copy__" not in a for a in item.config["args"])
        args, _ = grammar.materialize_args(item.config, "cpu", item.path)
        assert torch.baddbmm(*args).shape == (b, n, 8)


@pytest.mark.parametrize("arg,message", [
    ({"type": "float", "value": [1, 2], "__range__": ["value"]},
     "args[0].__range__: cannot range over 'value' of a float"),
    ({"type": "tensor", "dtype": "float", "shape": [2], "__range__": ["requires_grad"]},
     "args[0].__range__: cannot range over 'requires_grad' of a tensor"),
    ({"type": "int", "value": [3, 1, 1], "__range__": ["value"]},
     "args[0].value: range [3, 1, 1] needs start <= end"),
    ({"type": "tensor", "dtype": "float", "shape": [-1], "__copy__": [{"shape": [0, [1, 0]]}]},
     "args[0].__copy__[0].shape: args[1] is not a tensor arg"),
    ({"type": "tensor", "dtype": "float", "shape": [2, [1, 2]]},
     "args[0].shape[1]: expected a size >= 0, got [1, 2]"),
    # more values than len() can count (once an OverflowError that failed the whole cell)
    ({"type": "int", "value": [0, 10**20], "__range__": ["value"]},
     "args[0].value: range [0, 100000000000000000000] holds more values than can be counted"),
    ({"type": "tensor", "dtype": "float", "shape": [[1, 2**64]], "__range__": ["shape"]},
     "args[0].shape[0]: range [1, 18446744073709551616] holds more values than can be "
     "counted"),
])
def test_range_spec_errors_name_the_path(arg, message):
    got = items(iterators.RangeConfigIterator, [{"args": [arg]}])
    assert len(got) == 1 and got[0].config is None and got[0].id == "0_*"
    assert f"config[0].input[0].{message}" in got[0].error


def test_copy_outside_the_shape_is_an_error_per_combination():
    spec = {"args": [{"type": "tensor", "dtype": "float", "shape": [2]},
                     {"type": "tensor", "dtype": "float", "shape": [-1],
                      "__copy__": [{"shape": [3, [0, 0]]}]}]}
    (item,) = items(iterators.RangeConfigIterator, [spec])
    assert item.error == ("config[0].input[0].args[1].__copy__[0].shape: "
                          "element 3 is outside shape [-1]")


def test_unknown_iterator_name_is_an_error():
    with pytest.raises(SpecError, match="unknown iterator 'Nope'"):
        iterators.make_iterator("Nope", {"input": []}, "input", "cpu", "config[0]")


# -- operator names -----------------------------------------------------------------------


def test_torch_callables_modules_and_inplace_methods_resolve():
    add = registry.resolve("torch.add")()
    assert isinstance(add, registry.CallableOp) and add.func is torch.add and add.grad_enabled
    relu = registry.resolve("torch.nn.functional.relu")()
    assert relu.func is torch.nn.functional.relu
    inplace = registry.resolve("torch.add_")()
    assert inplace.func is torch.Tensor.add_ and not inplace.grad_enabled
    conv = registry.resolve("torch.nn.Conv2d")()
    conv.build([3, 8], {"kernel_size": 3}, "cpu")
    fn, args, _ = conv.call([torch.rand(1, 3, 8, 8)], {})
    assert fn(*args).shape == (1, 8, 6, 6) and len(conv.trainable()) == 2


def test_aten_ops_resolve_through_torch_ops_with_a_schema():
    op = registry.resolve("aten::add")()
    op.build(["aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"], {},
             "cpu")
    assert op.func is torch.ops.aten.add.Tensor
    fn, args, kwargs = op.call([torch.ones(2), torch.ones(2)], {"alpha": 3})
    assert fn(*args, **kwargs).tolist() == [4.0, 4.0]
    with pytest.raises(registry.OpError, match="schema is for aten::mul"):
        op.build(["aten::mul.Tensor(Tensor self, Tensor other) -> Tensor"], {}, "cpu")


@pytest.mark.parametrize("name,message", [
    ("torch.foo", "torch.foo: unknown operator (torch has no attribute 'foo')"),
    ("torch.nn.functional.nope", "nn.functional has no attribute 'nope'"),
    ("aten::definitely_not_an_op", "torch.ops.aten has no 'definitely_not_an_op'"),
    ("numpy.add", "expected torch.*, aten::*"),
    ("torch.os.system", "operators are looked up in"),
    ("torch._C._nn", "operators are looked up in"),
    ("torch.load", "torch.load: not on the operator allow-list"),
    ("torch.set_default_dtype", "not on the operator allow-list"),
    ("torch.nn.Parameter", "not a torch.nn.Module"),
])
def test_unknown_or_unsafe_names_are_rejected(name, message):
    with pytest.raises(registry.OpError) as info:
        registry.resolve(name)
    assert message in str(info.value)


def test_param_model_workloads_map_to_the_model_zoo():
    op = registry.resolve("pytorch.model.resnet")()
    assert isinstance(op, registry.ZooModelOp) and op.model == "resnet50"
    assert registry.resolve("pytorch.model.alex_net")().model == "alexnet_owt"


# -- L2 flush sizing (the flush itself needs a CUDA GPU) -----------------------------------


def test_l2_flush_size_comes_from_the_device_properties_not_run_without_gpu():
    """Sizing only: the GPU buffer write (L2Flusher.flush) is not exercised without CUDA."""
    size, message = l2_flush_bytes(SimpleNamespace(name="H100", L2_cache_size=50 * 2**20))
    assert size == 100 * 2**20 and message is None
    size, message = l2_flush_bytes(SimpleNamespace(name="OldGPU"))
    assert size == FALLBACK_L2_BYTES and "OldGPU does not report L2_cache_size" in message


def test_an_unknown_field_with_a_newline_in_its_name_is_logged_on_one_line(caplog):
    spec = {"type": "int", "value": 3, "bad\nERROR forged": 1}
    with caplog.at_level("WARNING", logger="dlbench.ops"):
        grammar.check(spec, "args[0]")
    (record,) = caplog.records
    assert "\n" not in record.getMessage() and "bad\\nERROR forged" in record.getMessage()
