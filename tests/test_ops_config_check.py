"""A malformed op config is refused by the config check, before any job, in the line its
run would have recorded as a failed input; the check imports no framework, and every
PARAM op config passes it unchanged."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from dlbench import study
from dlbench.ops.iterators import MAX_EXPANDED

ROOT = Path(__file__).resolve().parent.parent
PARAM_CONFIGS = ROOT / "tests" / "data" / "param-configs"
SHIPPED = sorted([*PARAM_CONFIGS.glob("*.json"), *(ROOT / "config" / "ops").glob("*.json")])
DTYPES = ("float, float32, double, float64, half, float16, bfloat16, int, int32, long, int64, "
          "short, int16, int8, uint8, bool")


def param(name: str) -> dict[str, Any]:
    return json.loads((PARAM_CONFIGS / name).read_text())


def ops_study(*paths: Path) -> dict[str, Any]:
    return {"studies": {"o": {"kind": "ops", "grid": {
        "op_config": [str(p) for p in paths], "device": "cpu"}}}}


def check_error(path: Path) -> str:
    with pytest.raises(study.ConfigError) as info:
        study.expand_config(ops_study(path))
    return str(info.value)


def run_errors(config: dict[str, Any]) -> list[str]:
    """What the runner records as failed inputs, run on the meta device."""
    import torch

    from dlbench.ops import output
    from dlbench.ops.runner import Benchmark
    from dlbench.ops.timing import ExecOptions

    with output.JsonlWriter(Path(os.devnull)) as writer:
        bench = Benchmark(ExecOptions(device=torch.device("meta"), warmup=1, iterations=1),
                          writer)
        bench.run(config)
    return [error["error"] for error in bench.errors]


def with_operator(base: str, name: str) -> dict[str, Any]:
    """PARAM's mm.json with one more operator, a copy of its torch.mm, named ``name``."""
    config = param(base)
    config[name] = copy.deepcopy(config["torch.mm"])
    return config


def set_at(config: dict[str, Any], keys: tuple, value: Any) -> dict[str, Any]:
    config = copy.deepcopy(config)
    node = config
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value
    return config


BAD_NAMES = [
    ("numpy.matmul", "numpy.matmul: not on the operator allow-list (expected torch.*, aten::* "
                     "or one of pytorch.model.alex_net, pytorch.model.resnet)"),
    ("torch.nn.functionl.relu", "torch.nn.functionl.relu: not on the operator allow-list "
                                "(operators are looked up in torch, torch.nn, "),
    ("torch._C", "torch._C: unknown operator (not a public name)"),
    ("aten::_softmax", "aten::_softmax: unknown operator (bad aten name '_softmax')"),
]


@pytest.mark.parametrize(("name", "expected"), BAD_NAMES)
def test_an_operator_name_of_no_resolvable_form_among_good_ones_is_refused(
        tmp_path, name, expected):
    config = with_operator("mm.json", name)
    path = tmp_path / "ops.json"
    path.write_text(json.dumps(config))
    message = check_error(path)
    assert message.startswith(f"study 'o': op_config: {path}: {expected}")
    assert "\n" not in message
    # the line the run records for it, the other operators running
    assert [f"study 'o': op_config: {path}: {e}" for e in run_errors(config)] == [message]


BAD_ENTRIES = [
    ("mm.json", ("torch.bmm", "config", 0, "input", 3, "args", 1, "dtype"), "floaty",
     "torch.bmm: config[0].input[3].args[1].dtype: unknown dtype 'floaty' "
     f"(valid: {DTYPES})"),
    ("simple_add_range.json", ("torch.add", "config", 1, "input", 0, "args", 0, "shape", 1),
     -4, "torch.add: config[1].input[0].args[0].shape[1]: expected a size >= 0, got -4"),
    ("simple_add_range.json", ("torch.add", "input_iterator"), "RangeIterator",
     "torch.add: input_iterator: unknown iterator 'RangeIterator' (valid: "
     "DefaultConfigIterator, RangeConfigIterator)"),
    ("test_native_basic_ops.json",
     ("torch.nn.Conv2d", "config", 0, "build", 0, "kwargs", "stride", "value"), "4",
     "torch.nn.Conv2d: config[0].build[0].kwargs.stride.value: expected a number, got '4'"),
    ("test_native_basic_ops.json", ("torch.cat", "config", 0, "input", 0, "args", 0, "value",
                                    1, "requires_grad"), "yes",
     "torch.cat: config[0].input[0].args[0].value[1].requires_grad: expected true or false, "
     "got 'yes'"),
    ("test_native_basic_ops.json", ("torch.mean", "config"), {"input": []},
     "torch.mean: config: missing or not a list of {\"build\", \"input\"} objects"),
]


ARG = ("torch.add", "config", 0, "input", 0, "args")  # simple_add_range.json's first input
BIG = MAX_EXPANDED * 10**9  # counted, never expanded: made, it would never end
UNRUNNABLE = [
    ("test_native_basic_ops.json", ("torch.mean", "config"), [],
     "torch.mean: config: an empty list, no inputs to run"),
    ("mm.json", ("torch.bmm", "config", 0, "input"), [],
     "torch.bmm: config[0].input: an empty list, no inputs to run"),
    ("simple_add_range.json", (*ARG, 1, "value"), [1, BIG],
     "torch.add: config[0].input[0]: its __range__ fields make more than "
     f"{MAX_EXPANDED} combinations, the most one list may run"),
    ("simple_add_range.json", (*ARG, 0, "__copy__"), [{"shape": [2, [0, 0]]}],
     "torch.add: config[0].input[0].args[0].__copy__[0].shape: element 2 is outside shape "
     "[128, 256]"),
    ("simple_add_range.json", (*ARG, 0, "__copy__"), [{"shape": [0, [0, 5]]}],
     "torch.add: config[0].input[0].args[0].__copy__[0].shape: args[0] has no shape "
     "element 5"),
    ("simple_add_range.json", (*ARG, 0), {"type": "tensor", "dtype": "float",
                                          "shape": [-1, 256],
                                          "__copy__": [{"shape": [1, [0, 0]]}]},
     "torch.add: config[0].input[0].args[0].shape[0]: expected a size >= 0, got -1"),
]


# Nothing to run, or a range the run would refuse: refused alike, in the run's words.
ENTRIES = [*BAD_ENTRIES, *UNRUNNABLE]


@pytest.mark.parametrize(("base", "keys", "value", "expected"), ENTRIES,
                         ids=[e[-1].split(": ", 1)[1] for e in ENTRIES])
def test_a_bad_field_in_one_entry_is_refused_naming_operator_entry_and_field(
        tmp_path, base, keys, value, expected):
    config = set_at(param(base), keys, value)
    path = tmp_path / base
    path.write_text(json.dumps(config))
    assert check_error(path) == f"study 'o': op_config: {path}: {expected}"
    # unchanged at run time: the same line, as a failed input
    assert run_errors(config)[0] == expected


def test_a_list_past_the_limit_is_refused_at_the_spec_that_takes_it_there(tmp_path):
    """The limit counts a whole build or input list (the run expands the first spec before
    it finds the second too many); copies into placeholders from ranged shapes pass."""
    part = MAX_EXPANDED // 8 + 1  # four shapes times this: two such specs pass the limit
    spec = {"args": [
        {"type": "tensor", "dtype": "float", "shape": [[1, 4], 8], "__range__": ["shape"]},
        {"type": "tensor", "dtype": "float", "shape": [-1, 8],
         "__copy__": [{"shape": [0, [0, 0]]}]},
        {"type": "int", "value": [1, part], "__range__": ["value"]}]}
    config = {"torch.add": {"input_iterator": "RangeConfigIterator",
                            "config": [{"input": [spec, spec]}]}}
    path = tmp_path / "ops.json"
    path.write_text(json.dumps(config))
    assert check_error(path) == (
        f"study 'o': op_config: {path}: torch.add: config[0].input[1]: its {4 * part} "
        f"__range__ combinations and the {4 * part} before it exceed the {MAX_EXPANDED} "
        "one list may run")
    path.write_text(json.dumps(set_at(config, ("torch.add", "config", 0, "input"), [spec])))
    assert len(study.expand_config(ops_study(path))) == 1


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_param_and_shipped_op_config_passes_unchanged(path):
    (cell,) = study.expand_config(ops_study(path))
    assert cell.params["op_config"] == str(path)


def test_the_check_imports_no_framework(tmp_path):
    """The driver's check walks every spec kind (devices, ranged dtypes, tuples, builds,
    whole models) of every shipped config and refuses a bad one, with torch never loaded."""
    devices = {"torch.add": {"config": [{"input": [{"args": [
        {"type": "tensor", "dtype": "float", "shape": [2]},
        {"type": "tensor", "dtype": "float", "shape": [2]}],
        "kwargs": {"out": {"type": "none"}, "where": {"type": "device", "value": "cuda:0"}}}]}]}}
    (tmp_path / "devices.json").write_text(json.dumps(devices))
    bad = set_at(devices, ("torch.add", "config", 0, "input", 0, "args", 1, "dtype"), "f32")
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    script = textwrap.dedent(f"""
        import json, sys
        from dlbench import study
        good = {json.dumps([str(p) for p in [*SHIPPED, tmp_path / "devices.json"]])}
        config = {{"studies": {{"o": {{"kind": "ops", "grid": {{"op_config": good}}}}}}}}
        print(len(study.expand_config(config)))
        config["studies"]["o"]["grid"]["op_config"] = {str(tmp_path / "bad.json")!r}
        try:
            study.expand_config(config)
        except study.ConfigError as exc:
            print(exc)
        print("torch" in sys.modules)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    count, refusal, torch_loaded = proc.stdout.splitlines()
    assert int(count) == len(SHIPPED) + 1
    assert refusal.endswith("bad.json: torch.add: config[0].input[0].args[1].dtype: unknown "
                            f"dtype 'f32' (valid: {DTYPES})")
    assert torch_loaded == "False"
    assert proc.stderr == ""  # nothing said of a config that passes


def test_dlbench_list_stops_at_a_bad_op_config_in_one_line(tmp_path):
    path = tmp_path / "llama2.json"
    path.write_text(json.dumps(set_at(param("llama2.json"),
                                      ("torch.mm", "config", 2, "input", 0, "args", 0, "dtype"),
                                      "bf16")))
    configfile = tmp_path / "config.yaml"
    configfile.write_text(json.dumps(ops_study(PARAM_CONFIGS / "mm.json", path)))
    proc = subprocess.run([sys.executable, "-c", "import sys; from dlbench.command import main; sys.exit(main())",
                           "list", "cells", "--configfile", str(configfile),
                           "--results", str(tmp_path / "results")],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode != 0 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"dlbench list: study 'o': op_config: {path}: torch.mm: config[2].input[0].args[0]"
        f".dtype: unknown dtype 'bf16' (valid: {DTYPES})"]


def test_a_fixed_op_config_passes_at_once_though_the_check_is_cached(tmp_path):
    path = tmp_path / "ops.json"
    good = param("simple_mm.json")
    path.write_text(json.dumps(set_at(good, ("torch.mm", "config", 0, "input", 0, "args", 0,
                                             "dtype"), "floaty")))
    assert check_error(path).endswith("unknown dtype 'floaty' (valid: " + DTYPES + ")")
    assert check_error(path).endswith("unknown dtype 'floaty' (valid: " + DTYPES + ")")
    before = path.stat().st_mtime_ns
    path.write_text(json.dumps(good))
    os.utime(path, ns=(before + 10**9, before + 10**9))  # a new version, however coarse the clock
    assert len(study.expand_config(ops_study(path))) == 1
