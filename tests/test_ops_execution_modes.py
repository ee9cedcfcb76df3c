"""Execution modes of operator cells: PARAM's --pt2-model and --cuda-graph and the compile
axis in ``kind: ops`` studies. torch.compile with inductor runs for real on the CPU.

Not exercised here (no GPU): the CUDA-graph capture and replay itself
(``dlbench.ops.modes.capture``); what surrounds it is tested below (the flags, PARAM's
fallback off a GPU, the validation, and the timing loops driven by a prepared input's own
forward and backward as a replayed graph drives them)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dlbench import aggregate, axes, launch, study
from dlbench import result as R
from dlbench.ops import modes, registry
from dlbench.ops.cli import main
from dlbench.ops.timing import ExecOptions, Executor, new_metrics

needs_cxx = pytest.mark.skipif(
    shutil.which(os.environ.get("CXX", "g++")) is None,
    reason="inductor compiles C++ on the CPU and no C++ compiler was found "
           "(tests/system-deps.sh installs g++ where it may)")


def tensor(*shape):
    return {"type": "tensor", "dtype": "float", "shape": list(shape)}


def op_config(tmp_path: Path) -> Path:
    """torch.mm at two shapes (each compiled for itself) and a Linear module."""
    path = tmp_path / "ops.json"
    path.write_text(json.dumps({
        "torch.mm": {"config": [{"input": [{"args": [tensor(16, 32), tensor(32, 8)]},
                                           {"args": [tensor(24, 32), tensor(32, 8)]}]}]},
        "torch.nn.Linear": {"config": [{"build": [{"args": [{"type": "int", "value": 32},
                                                            {"type": "int", "value": 8}]}],
                                        "input": [{"args": [tensor(4, 32)]}]}]},
    }))
    return path


def run_ops(tmp_path: Path, config: Path, *flags: str, name: str = "out"):
    result_path = tmp_path / f"{name}_result.json"
    code = main(["-c", str(config), "-o", str(tmp_path / name), "--output", str(result_path),
                 "-l", "WARNING", *flags])
    lines = [json.loads(line) for line in (tmp_path / f"{name}.json").read_text().splitlines()]
    return code, lines, R.read(result_path)


def ops_grid(tmp_path: Path, **grid):
    return {"studies": {"ops": {"kind": "ops", "grid": {
        "op_config": str(op_config(tmp_path)), **grid}}}}


# --- validation, ids and the launcher's flags -----------------------------------------

def test_ops_studies_take_the_compile_axis_and_its_default_keeps_the_id(tmp_path):
    cells = study.expand_config(ops_grid(tmp_path, device="gpu",
                                         compile=list(axes.OPS_COMPILE_MODES)))
    assert len({c.id for c in cells}) == len(axes.OPS_COMPILE_MODES)
    (plain,) = study.expand_config(ops_grid(tmp_path, device="gpu"))
    assert [c.id for c in cells if c.params["compile"] == "eager"] == [plain.id]


def test_capture_modes_need_a_gpu_and_inductor_cudagraphs_is_for_operator_cells(tmp_path):
    for mode in ("cudagraphs", "inductor-cudagraphs"):
        with pytest.raises(study.ConfigError) as info:
            study.expand_config(ops_grid(tmp_path, device="cpu", compile=mode))
        assert "compile" in str(info.value) and "device gpu only" in str(info.value)
    with pytest.raises(study.ConfigError) as info:
        study.expand_config({"studies": {"m": {"grid": {"model": "resnet18",
                                                        "compile": "inductor-cudagraphs"}}}})
    assert "unknown value 'inductor-cudagraphs'" in str(info.value)


def test_the_launcher_passes_compile_to_the_operator_runner_and_leaves_eager_out(tmp_path):
    cells = study.expand_config(ops_grid(tmp_path, device="cpu",
                                         compile=["eager", "inductor-max-autotune"]))
    argvs = {c.params["compile"]: axes.argv("ops", c.params) for c in cells}
    assert "--compile" not in argvs["eager"]
    i = argvs["inductor-max-autotune"].index("--compile")
    assert argvs["inductor-max-autotune"][i + 1] == "inductor-max-autotune"
    compiled = next(c for c in cells if c.params["compile"] != "eager")
    env = launch.compile_cache_env({"cell_id": compiled.id, "study": "ops",
                                    "params": compiled.params},
                                   tmp_path / "results" / "ops" / "cells" / "x.json")
    assert launch.INDUCTOR_CACHE_ENV in env or launch.INDUCTOR_CACHE_ENV in os.environ


def test_param_flags_map_to_compile_modes():
    assert modes.from_param_flags(False, False) == "eager"
    assert modes.from_param_flags(True, False) == "inductor"
    assert modes.from_param_flags(False, True) == "cudagraphs"
    assert modes.from_param_flags(True, True) == "inductor-cudagraphs"
    assert modes.without_capture("inductor-cudagraphs") == "inductor"
    assert modes.without_capture("cudagraphs") == "eager"


def test_contradicting_compile_and_param_flags_are_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["-c", str(op_config(tmp_path)), "--compile", "inductor", "--cuda-graph"])
    assert "contradicts --pt2-model/--cuda-graph" in capsys.readouterr().err


def test_cuda_graph_off_a_gpu_is_dropped_with_a_warning_as_param_does(tmp_path, caplog):
    code, lines, res = run_ops(tmp_path, op_config(tmp_path), "--cuda-graph", "-i", "2")
    assert code == 0 and res["status"] == "ok"
    assert res["cell"]["compile"] == "eager"  # what ran
    assert lines[0]["run_options"]["cuda-graph"] is False
    assert any("CUDA graphs need a cuda device" in r.message for r in caplog.records)
    assert all("compile" not in m["extra"] for m in res["measurements"])


def test_cuda_l2_cache_off_off_a_gpu_is_dropped_with_a_warning_as_cuda_graph_is(tmp_path,
                                                                             caplog):
    """Nothing is flushed on a CPU: the result must not say off."""
    code, lines, res = run_ops(tmp_path, op_config(tmp_path), "--cuda-l2-cache", "off")
    assert code == 0 and res["status"] == "ok"
    assert res["cell"]["cuda_l2_cache"] == "on" and lines[0]["run_options"]["cuda_l2_cache"]
    (warning,) = [r.getMessage() for r in caplog.records if "--cuda-l2-cache" in r.getMessage()]
    assert warning.startswith("--cuda-l2-cache off flushes a GPU's L2 cache; nothing is "
                              "flushed on cpu")


def test_the_queued_modes_off_a_gpu_are_said_to_time_each_call_and_a_study_warned(
        tmp_path, caplog, capsys):
    """On a CPU every call is timed on its own whatever --exec-mode (PARAM's CPU loop): the
    runner said nothing, and a study sweeping the modes on a CPU planned three cells that
    measure one thing, unwarned."""
    code, _, res = run_ops(tmp_path, op_config(tmp_path), "--exec-mode", "continuous_events",
                           "-i", "2")
    assert code == 0 and res["cell"]["exec_mode"] == "continuous_events"  # its id's
    (warning,) = [r.getMessage() for r in caplog.records if "--exec-mode" in r.getMessage()]
    assert warning == ("--exec-mode continuous_events queues a GPU's calls; on cpu each "
                       "call is timed on its own, as discrete does")
    capsys.readouterr()
    study.expand_config(ops_grid(tmp_path, device="cpu",
                                 exec_mode=["discrete", "continuous", "continuous_events"]))
    assert "study 'ops': 2 of its 3 cells repeat another's measurement: they differ from " \
           "it only in exec_mode" in capsys.readouterr().err
    study.expand_config(ops_grid(tmp_path, device="gpu", exec_mode=["discrete", "continuous"]))
    assert "repeat another's" not in capsys.readouterr().err


def test_a_bare_cuda_l2_cache_flag_flushes_as_in_param():
    """PARAM's flag has no const: bare, its value is None, and it keeps the L2 warm only
    where the value is "on". A bare flag here meant on."""
    from dlbench.ops.cli import build_parser

    assert build_parser().parse_args(["-c", "x.json", "--cuda-l2-cache"]).cuda_l2_cache == "off"
    assert build_parser().parse_args(["-c", "x.json"]).cuda_l2_cache == "on"


def test_a_cpu_study_cell_with_the_l2_cache_off_is_a_config_error(tmp_path):
    with pytest.raises(study.ConfigError) as info:
        study.expand_config(ops_grid(tmp_path, device="cpu", cuda_l2_cache="off"))
    assert str(info.value) == ("study 'ops': cuda_l2_cache: off flushes a GPU's L2 cache "
                               "before each call: device gpu only")
    assert study.expand_config(ops_grid(tmp_path, device="gpu", cuda_l2_cache="off"))


def test_capture_is_refused_for_a_cpu_device():
    """The capture itself needs a GPU and is not run here."""
    with pytest.raises(ValueError, match="cuda device only"):
        modes.prepare("cudagraphs", torch.mm, [torch.ones(2, 2), torch.ones(2, 2)], {}, [],
                      False, torch.device("cpu"))


# --- the timing loops with a prepared input ------------------------------------------

@pytest.mark.parametrize(("loop", "forwards"), [("_discrete", 3), ("_continuous", 6)])
def test_loops_call_the_prepared_forward_and_backward_as_a_replayed_graph_does(loop, forwards):
    """A stand-in for replayed CUDA graphs (no GPU here): the loops call the prepared
    forward with its own (empty) arguments and the prepared backward, and leave the
    gradients it wrote alone (a captured backward writes the same buffers each time)."""
    a = torch.rand(8, 8, requires_grad=True)
    static_out = (a * 2).sum()
    calls = {"forward": 0, "backward": 0}

    def forward(*args, **kwargs):
        assert not args and not kwargs
        calls["forward"] += 1
        return static_out

    def backward(targets, grads):
        calls["backward"] += 1
        a.grad = torch.full_like(a, 2.0)

    prepared = modes.Prepared(forward, [], {}, [], backward=backward)
    executor = Executor(ExecOptions(device=torch.device("cpu"), backward=True))
    metrics = new_metrics(True)
    getattr(executor, loop)(3, prepared, metrics, "measure", "x:0")
    assert calls == {"forward": forwards, "backward": 3}
    assert metrics["backward"]["measure.time"]
    assert a.grad is not None and float(a.grad[0, 0]) == 2.0


def test_accuracy_of_a_prepared_input_against_the_eager_operator():
    x, y = torch.rand(16, 16), torch.rand(16, 16)
    same = modes.Prepared(torch.mm, [x, y], {}, [])
    assert modes.accuracy(same, torch.mm, [x, y], {})["ok"] is True
    off = modes.Prepared(lambda a, b: torch.mm(a, b) * 1.1, [x, y], {}, [])
    verdict = modes.accuracy(off, torch.mm, [x, y], {})
    assert verdict["ok"] is False and verdict["max_rel_error"] > 0.05
    half = modes.Prepared(torch.mm, [x.bfloat16(), y.bfloat16()], {}, [])
    assert modes.accuracy(half, torch.mm, [x.bfloat16(), y.bfloat16()], {})[
        "max_rel_tolerance"] == 1e-1  # held to bfloat16's tolerance


# --- inductor for real ----------------------------------------------------------------

@needs_cxx
def test_pt2_model_compiles_each_input_apart_from_its_measured_calls(tmp_path):
    """PARAM's --pt2-model with inductor on the CPU, forward and backward: every input has
    its compile time (the first call, untimed), one graph, no recompilation while measured,
    and an output that matches the eager operator; the rows carry the figures."""
    # In a process of its own: inductor leaves compile workers behind in the process that
    # compiled, which would then count as this test process's children in other tests.
    out = tmp_path / "res.json"
    proc = subprocess.run(
        [sys.executable, "-m", "dlbench.ops", "-c", str(op_config(tmp_path)), "--pt2-model",
         "-b", "-w", "0", "-i", "3", "-o", str(tmp_path / "out"), "--output", str(out)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, launch.INDUCTOR_CACHE_ENV: str(tmp_path / "cache")})
    res = R.read(out)
    lines = [json.loads(line) for line in (tmp_path / "out.json").read_text().splitlines()]
    assert proc.returncode == 0 and res["status"] == "ok", proc.stderr[-3000:]
    assert res["cell"]["compile"] == "inductor"
    assert lines[0]["run_options"]["pt2-model"] is True
    inputs = {(m["op_name"], m["name"]) for m in res["measurements"]}
    assert inputs == {("torch.mm", "0|0|0"), ("torch.mm", "0|0|1"),
                      ("torch.nn.Linear", "0|0|0")}
    for m in res["measurements"]:
        comp, acc = m["extra"]["compile"], m["extra"]["accuracy"]
        assert comp["mode"] == "inductor" and comp["compile_time_s"] > 0
        assert comp["graphs"] == 1 and comp["graph_breaks"] == 0
        assert comp["recompilations"] == 0 and comp["recompilations_measured"] == 0
        # -w 0: still no compilation among the measured calls
        assert max(m["times_s"]) < comp["compile_time_s"]
        assert acc["ok"] is True and acc["cosine"] > 0.9999
    rows = aggregate.rows_of(res, "x.json")
    assert all(r["compile"] == "inductor" and r["compile_time_s"] > 0 and r["inaccurate"] is False
               and r["recompiled_in_measurement"] is False for r in rows)


@needs_cxx
def test_a_compiler_failure_is_a_failed_input_in_one_line(tmp_path):
    """Without a working C++ compiler inductor fails: each input is an error naming the
    compiler's failure in one line, the full text is in the log, and the cell fails."""
    out = tmp_path / "res.json"
    config = tmp_path / "pointwise.json"  # a pointwise kernel is C++ (a matmul is a library call)
    config.write_text(json.dumps({"torch.add": {"config": [{"input": [
        {"args": [tensor(64), tensor(64)]}, {"args": [tensor(8, 8), tensor(8, 8)]}]}]}}))
    proc = subprocess.run(
        [sys.executable, "-m", "dlbench.ops", "-c", str(config), "-i", "1",
         "--pt2-model", "-o", str(tmp_path / "p"), "--output", str(out)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "CXX": "/bin/false",
             launch.INDUCTOR_CACHE_ENV: str(tmp_path / "cache")})
    res = R.read(out)
    assert proc.returncode == 1 and res["status"] == "failed"
    assert "torch.compile (inductor) failed: " in res["error"] and "\n" not in res["error"]
    assert "Traceback" in proc.stderr
    assert len(res["extra"]["errors"]) == 2


def test_the_registry_call_of_a_builtin_compiles_through_a_python_function():
    """torch.compile traces Python frames: a builtin is wrapped, not passed as it is."""
    fn, _, _ = registry.resolve("torch.mm")().call([], {})
    wrapped = modes._as_function(fn)
    assert wrapped is not fn and wrapped(torch.eye(2), torch.eye(2)).equal(torch.eye(2))
