"""The operator allow-list: an op config is data, so its operators compute on tensors and
touch no files, processes, seeds or process-wide settings, in every spelling of a name
(``aten::X``, ``torch.ops.aten.X``, ``torch.X``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dlbench import result as R
from dlbench.ops import registry
from dlbench.ops.cli import main

REPO = Path(__file__).resolve().parents[1]
CONFIG_DIRS = [REPO / "tests" / "data" / "param-configs",
               REPO / "config" / "ops"]
CONFIGS = sorted({p.resolve() for d in CONFIG_DIRS if d.is_dir() for p in d.glob("*.json")})
REFUSAL = "not on the operator allow-list"
HINT = "python -m dlbench.ops.registry"


def run_ops(tmp_path: Path, config: dict, *flags: str):
    """Run the CLI in-process on ``config``; returns (exit code, JSON-lines, result)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    out, result_path = tmp_path / "out", tmp_path / "out_result.json"
    code = main(["-c", str(path), "-o", str(out), "--output", str(result_path),
                 "-l", "CRITICAL", "-w", "0", "-i", "1", *flags])
    lines = [json.loads(line) for line in (tmp_path / "out.json").read_text().splitlines()]
    return code, lines, R.read(result_path)


def tensor(*shape, dtype="float", requires_grad=None):
    spec = {"type": "tensor", "dtype": dtype, "shape": list(shape)}
    if requires_grad is not None:
        spec["requires_grad"] = requires_grad
    return spec


def one(name: str, *args, build=None) -> dict:
    config = {"input": [{"args": list(args)}]}
    if build is not None:
        config["build"] = [{"args": list(build)}]
    return {name: {"config": [config]}}


def refusal(name: str) -> str:
    with pytest.raises(registry.OpError) as info:
        registry.resolve(name)
    return str(info.value)


def allowed(name: str) -> bool:
    try:
        registry.resolve(name)
    except registry.OpError:
        return False
    return True


# -- refused ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [
    # files
    "aten::from_file", "torch.from_file", "torch.ops.aten.from_file", "torch.save",
    "torch.load", "torch.Tensor.share_memory_",
    # seeds and random state
    "aten::manual_seed", "torch.manual_seed", "torch.ops.aten.manual_seed", "aten::seed",
    "torch.seed", "torch.initial_seed", "torch.get_rng_state", "torch.set_rng_state",
    # process-wide settings
    "torch.set_num_threads", "torch.set_default_dtype", "torch.set_default_device",
    "torch.use_deterministic_algorithms", "torch.set_printoptions", "torch.set_flush_denormal",
    "torch.set_float32_matmul_precision", "aten::set_grad_enabled", "aten::warn",
    "torch.compile", "torch.Tensor.backward",
    # outside torch, or torch namespaces that are not tensor math
    "os.system", "builtins.eval", "builtins.exec", "subprocess.run", "subprocess.check_output",
    "torch.hub.load", "torch.distributed.init_process_group", "torch.os.system",
    "torch.serialization.load", "torch.random.manual_seed",
    # modules that are not layers
    "torch.nn.Module", "torch.nn.Sequential", "torch.nn.ModuleDict", "torch.nn.SyncBatchNorm",
    "torch.nn.DataParallel",
])
def test_names_that_touch_more_than_tensors_are_refused_in_one_line(name):
    message = refusal(name)
    assert message.startswith(f"{name}: {REFUSAL} (")
    assert HINT in message and "\n" not in message


def test_both_spellings_of_from_file_and_manual_seed_give_reasons():
    assert "string argument 'filename'" in refusal("aten::from_file")
    assert "string argument 'filename'" in refusal("torch.from_file")
    assert "TorchScript interpreter builtin" in refusal("aten::manual_seed")
    assert "torch.random" in refusal("torch.manual_seed")


def test_every_torch_binding_has_the_verdict_of_its_aten_op():
    """torch.X, torch.nn.functional.X, torch.linalg.X, ... and aten::X agree."""
    namespaces = {"torch": torch, "torch.nn.functional": torch.nn.functional,
                  "torch.linalg": torch.linalg, "torch.special": torch.special,
                  "torch.fft": torch.fft, "torch.Tensor": torch.Tensor}
    ops = registry._dispatcher_overloads()
    compared = 0
    for prefix, owner in namespaces.items():
        for leaf in dir(owner):
            target = getattr(owner, leaf)
            op = getattr(target, "__name__", None)
            if (leaf.startswith("_") or isinstance(target, type) or not callable(target)
                    or op not in ops or op.startswith("_")):
                continue
            name = f"{prefix}.{leaf}"
            assert allowed(name) == allowed(f"aten::{op}"), name
            assert allowed(f"torch.ops.aten.{op}") == allowed(f"aten::{op}"), op
            compared += 1
    assert compared > 1000


def test_interpreter_overloads_of_an_allowed_aten_op_are_refused():
    op = registry.resolve("aten::add")()
    op.build([], {}, "cpu")
    with pytest.raises(registry.OpError, match=f"aten::add.str: {REFUSAL}"):
        op.call(["a", "b"], {})
    with pytest.raises(registry.OpError, match=REFUSAL):
        op.build(["aten::add.str(str a, str b) -> str"], {}, "cpu")
    with pytest.raises(registry.OpError, match="no overload takes these arguments"):
        op.call([torch.ones(2)], {})


def test_the_schema_rules_on_single_overloads():
    def verdict(schema: str) -> str | None:
        return registry.overload_refusal(torch._C.parse_schema(schema))

    assert verdict("aten::mm(Tensor self, Tensor mat2) -> Tensor") is None
    assert verdict("aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) "
                   "-> Tensor(a!)") is None
    assert verdict("aten::randn(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, "
                   "Device? device=None, bool? pin_memory=None) -> Tensor") is None
    assert verdict("aten::div.Tensor_mode(Tensor self, Tensor other, *, str? rounding_mode) "
                   "-> Tensor") is None
    assert "'filename'" in verdict(
        "aten::from_file(str filename, bool? shared=None, int? size=0, *, ScalarType? "
        "dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor")
    assert "'path'" in verdict("aten::dump(Tensor self, str path) -> Tensor")
    assert "writes none" in verdict("aten::poke(Tensor self) -> ()")
    assert "not a tensor factory" in verdict("aten::get_gradients(int context_id) "
                                             "-> Dict(Tensor, Tensor)")
    assert "non-tensor argument 'self'" in verdict(
        "aten::seed(Generator(a!) self, Tensor t) -> Tensor")


# -- a refused operator through the CLI ---------------------------------------------------


@pytest.mark.parametrize("name", ["aten::from_file", "torch.from_file",
                                  "torch.ops.aten.from_file"])
def test_from_file_in_a_config_leaves_files_alone_and_fails_the_cell(tmp_path, name):
    victim = tmp_path / "victim.bin"
    victim.write_bytes(b"\x7f" + bytes(range(1, 100)))
    created = tmp_path / "created.bin"
    path = lambda p: {"type": "str", "value": str(p)}  # noqa: E731
    true, size = {"type": "bool", "value": True}, {"type": "int", "value": 4000}
    config = {name: {"config": [{"input": [{"args": [path(victim), true, size]},
                                           {"args": [path(created), true, size]}]}]}}
    if name == "aten::from_file":
        config["torch.ops.aten.from_file"] = {"config": [{
            "build": [{"args": [{"type": "str", "value": (
                "aten::from_file(str filename, bool? shared=None, int? size=0, *, "
                "ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
                "bool? pin_memory=None) -> Tensor")}]}],
            "input": [{"args": [path(victim), true, size]}]}]}
    code, lines, res = run_ops(tmp_path, config)
    assert victim.stat().st_size == 100 and victim.read_bytes()[0] == 0x7F
    assert not created.exists()
    assert code == 1 and res["status"] == "failed" and res["measurements"] == []
    errors = [line for line in lines if "error" in line]
    assert errors and all(e["id"] is None and REFUSAL in e["error"] for e in errors)
    assert res["error"].endswith(f"{name}: {REFUSAL} (aten::from_file: its string "
                                 "argument 'filename' is not an option selector: an op may "
                                 f"not name a file); `{HINT}` lists what is allowed")


def test_manual_seed_in_a_config_does_not_reseed(tmp_path):
    seed = {"type": "int", "value": 1234}
    config = {**one("aten::manual_seed", seed), **one("torch.ops.aten.manual_seed", seed),
              **one("torch.manual_seed", seed), **one("torch.mm", tensor(2, 2), tensor(2, 2))}
    code, lines, res = run_ops(tmp_path, config)
    assert torch.initial_seed() == 0  # the CLI's own seed, not the config's
    assert code == 0 and res["status"] == "ok"
    assert [e["op_name"] for e in res["extra"]["errors"]] == [
        "aten::manual_seed", "torch.ops.aten.manual_seed", "torch.manual_seed"]
    assert all(REFUSAL in e["error"] for e in res["extra"]["errors"])
    assert [m["op_name"] for m in res["measurements"]] == ["torch.mm"]


# -- allowed ------------------------------------------------------------------------------


def test_tensor_ops_layers_and_aten_ops_resolve_and_run(tmp_path):
    schema = "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"
    config = {
        **one("torch.mm", tensor(4, 3), tensor(3, 5)),
        **one("aten::mm", tensor(4, 3), tensor(3, 5)),
        **one("torch.ops.aten.mm", tensor(4, 3), tensor(3, 5)),
        **one("aten::add", tensor(4, 4), tensor(4, 4)),
        **one("torch.ops.aten.add", tensor(4, 4), tensor(4, 4),
              build=[{"type": "str", "value": schema}]),
        **one("aten::add_", tensor(4, 4, requires_grad=False),
              tensor(4, 4, requires_grad=False)),
        **one("torch.nn.functional.relu", tensor(4, 4)),
        **one("torch.nn.Conv2d", tensor(1, 2, 6, 6),
              build=[{"type": "int", "value": 2}, {"type": "int", "value": 3},
                     {"type": "int", "value": 3}]),
        **one("torch.nn.Embedding", {**tensor(2, 3, dtype="long", requires_grad=False),
                                     "value_range": [0, 9]},
              build=[{"type": "int", "value": 10}, {"type": "int", "value": 4}]),
    }
    code, lines, res = run_ops(tmp_path, config)
    assert code == 0 and res["extra"]["errors"] == [], res["extra"]["errors"]
    assert [m["op_name"] for m in res["measurements"]] == list(config)
    assert all(m["times_s"] for m in res["measurements"])


@pytest.mark.parametrize("name", [
    "torch.mm", "aten::mm", "aten::add", "aten::add_", "torch.ops.aten.add",
    "torch.nn.functional.relu", "torch.nn.Conv2d", "torch.nn.Embedding", "torch.bmm",
    "torch.baddbmm", "torch.matmul", "torch.addmm", "torch.cat", "torch.stack",
    "torch.reshape", "torch.transpose", "torch.softmax", "torch.randn", "torch.zeros",
    "torch.add_", "torch.clamp_", "torch.einsum", "torch.unique", "torch.linalg.norm",
    "torch.fft.fft", "torch.special.expit", "torch.Tensor.add", "torch.Tensor.split",
    "torch.nn.functional.layer_norm", "torch.nn.functional.scaled_dot_product_attention",
    "torch.nn.functional.logsigmoid", "torch.nn.Linear", "torch.nn.ReLU", "torch.nn.Dropout",
    "torch.nn.MaxPool2d", "torch.nn.BatchNorm2d", "torch.nn.LayerNorm",
    "torch.nn.ReplicationPad3d", "torch.nn.LSTM", "torch.nn.GRU", "torch.nn.MultiheadAttention",
    "torch.nn.TransformerEncoderLayer", "pytorch.model.alex_net", "pytorch.model.resnet",
])
def test_benchmark_material_is_allowed(name):
    assert allowed(name)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_shipped_config_resolves(config):
    names = list(json.loads(config.read_text()))
    assert names
    for name in names:
        registry.resolve(name)()


def test_the_registry_lists_the_rules_and_what_they_allow(capsys):
    assert registry.main([]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "compute on tensors" in out[0]
    for name in ("torch.mm", "aten::mm", "torch.nn.Conv2d", "torch.nn.functional.relu",
                 "pytorch.model.resnet"):
        assert name in out
    for name in ("aten::from_file", "torch.from_file", "torch.load", "torch.manual_seed"):
        assert name not in out
    assert registry.main(["torch.mm", "aten::from_file"]) == 1
    verdicts = capsys.readouterr().out.splitlines()
    assert verdicts[0] == "torch.mm: allowed"
    assert verdicts[1].startswith(f"aten::from_file: {REFUSAL}")
