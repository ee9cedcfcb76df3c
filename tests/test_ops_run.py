"""``python -m dlbench.ops`` end to end on the CPU: PARAM's JSON-lines layout, our result
document, resume/stop ids, errors, execution modes, PARAM's whole-model configs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dlbench import result as R
from dlbench.ops import registry
from dlbench.ops.cli import main
from dlbench.ops.modes import Prepared
from dlbench.ops.timing import ExecOptions, Executor, L2Flusher, new_metrics

PARAM_CONFIGS = Path(__file__).resolve().parent / "data" / "param-configs"
GVPROF_UNITS = Path(__file__).resolve().parents[1] / "config" / "ops" / "gvprof_units.json"
PASS_KEYS = {"warmup.time", "warmup.gpu.memory", "measure.time", "measure.gpu.memory"}


def run_ops(tmp_path: Path, config: Path | str, *flags: str, prefix: str = "out"):
    """Run the CLI in-process; returns (exit code, JSON-lines records, result document)."""
    out = tmp_path / prefix
    result_path = tmp_path / f"{prefix}_result.json"
    code = main(["-c", str(config), "-o", str(out), "--output", str(result_path), "-l", "WARNING",
                 *flags])
    lines = [json.loads(line) for line in (tmp_path / f"{prefix}.json").read_text().splitlines()] \
        if (tmp_path / f"{prefix}.json").exists() else []
    return code, lines, R.read(result_path)


def op_lines(lines):
    return [line for line in lines if "op_name" in line]


def write_config(tmp_path: Path, config: dict) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def tensor(*shape, dtype="float"):
    return {"type": "tensor", "dtype": dtype, "shape": list(shape)}


# -- layout -------------------------------------------------------------------------------


def test_jsonl_has_params_layout_and_the_result_validates(tmp_path):
    code, lines, res = run_ops(tmp_path, PARAM_CONFIGS / "simple_mm.json", "-w", "2", "-i", "3",
                               "-b", "--study", "s1", "--cell_id", "c7")
    assert code == 0
    first, *ops, last = lines
    assert set(first) == {"run_options", "sys_info", "start_time"}
    assert first["run_options"]["pass_type"] == "backward"
    assert first["run_options"]["warmup"] == 2 and first["run_options"]["iteration"] == 3
    assert first["sys_info"]["pytorch_version"] and "hostname" in first["sys_info"]
    assert set(last) == {"finish_time"}
    (op,) = ops
    assert set(op) == {"op_name", "id", "metric", "config"}
    assert op["op_name"] == "torch.mm" and op["id"] == "0|0|0"
    assert set(op["metric"]) == {"forward", "backward"}
    for pass_ in ("forward", "backward"):
        metric = op["metric"][pass_]
        assert set(metric) == PASS_KEYS
        assert len(metric["warmup.time"]) == 2 and len(metric["measure.time"]) == 3
        assert all(t > 0 for t in metric["measure.time"])
        assert metric["measure.gpu.memory"] == []  # CPU run
    assert op["config"]["input"]["args"][0]["shape"] == [1024, 1024]

    R.validate(res)
    assert res["kind"] == "op" and res["status"] == "ok"
    assert (res["study"], res["cell_id"]) == ("s1", "c7")
    assert res["cell"]["framework"] == "pytorch" and res["cell"]["device"] == "cpu"
    assert res["cell"]["backward"] is True and res["cell"]["exec_mode"] == "discrete"
    fwd, bwd = res["measurements"]
    assert (fwd["name"], fwd["op_name"], fwd["pass"]) == ("0|0|0", "torch.mm", "forward")
    assert bwd["pass"] == "backward"
    assert fwd["throughput_unit"] == "iterations/s" and fwd["items_per_iteration"] == 1
    assert fwd["times_s"] == pytest.approx([t / 1e3 for t in op["metric"]["forward"]["measure.time"]])
    n = 1024
    assert fwd["flops_per_iteration"] == 2 * n**3
    assert bwd["flops_per_iteration"] == 2 * 2 * n**3  # grad of both operands
    assert fwd["bytes_per_iteration"] == 3 * n * n * 4
    assert fwd["tflops"] == pytest.approx(2 * n**3 / fwd["time_s"]["median"] / 1e12)
    assert fwd["gbps"] > 0
    # The monitor covered the whole run, not an input's calls, and says so with its figures.
    mon = res["extra"]["monitor"]
    assert mon["window"].startswith("the whole operator run")
    assert mon["energy_note"].startswith(f"over {mon['window']}")
    assert mon["samples_per_joule"] is None
    # Each input's warm-up and measured calls in their stages (the forward and backward
    # calls timed, and more: the phase holds the clocks' own work too).
    stages = res["stages_s"]
    assert stages["measure"] >= sum(fwd["times_s"]) + sum(bwd["times_s"])
    assert stages["warmup"] > 0 and "environment" in stages
    # Building the inputs and counting their FLOPs are stages of their own, not "other".
    assert stages["build"] > 0 and stages["flop_count"] > 0


def test_module_entry_point_runs_as_a_subprocess(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "dlbench.ops", "-c", str(PARAM_CONFIGS / "simple_add.json"),
         "-o", str(tmp_path / "sub"), "-i", "2", "--output", str(tmp_path / "sub_result.json")],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert '__results.status__="ok"' in proc.stdout
    lines = (tmp_path / "sub.json").read_text().splitlines()
    assert json.loads(lines[1])["op_name"] == "torch.add" and len(lines) == 3
    assert R.read(tmp_path / "sub_result.json")["measurements"][0]["flops_per_iteration"] is None


def test_version_flag_prints_and_exits(capsys):
    assert main(["--version"]) == 0
    assert "dlbench.ops" in capsys.readouterr().out


def test_append_keeps_earlier_runs(tmp_path):
    run_ops(tmp_path, PARAM_CONFIGS / "simple_add.json", "-i", "1")
    _, lines, _ = run_ops(tmp_path, PARAM_CONFIGS / "simple_add.json", "-i", "1", "-a")
    assert sum("run_options" in line for line in lines) == 2
    assert sum("finish_time" in line for line in lines) == 2


# -- ids: range expansion, resume, stop ---------------------------------------------------


def test_range_config_runs_33_inputs_with_param_ids(tmp_path):
    code, lines, res = run_ops(tmp_path, PARAM_CONFIGS / "simple_add_range.json", "-w", "0",
                               "-i", "1")
    ops = op_lines(lines)
    assert code == 0 and len(ops) == 33 and len(res["measurements"]) == 33
    assert ops[0]["id"] == "0|0|0_0" and ops[16]["id"] == "1|0|0_0" and ops[-1]["id"] == "1|0|1_5"
    assert ops[3]["config"]["input"]["args"][1] == {"value": 4, "type": "int"}


def test_resume_id_is_inclusive_and_stop_id_exclusive(tmp_path):
    code, lines, res = run_ops(tmp_path, PARAM_CONFIGS / "simple_add_range.json", "-w", "0",
                               "-i", "1", "-r", "torch.add|0|0|1_2", "-s", "torch.add|1|0|0_3")
    assert code == 0
    assert [op["id"] for op in op_lines(lines)] == [
        "0|0|1_2", "0|0|1_3", "0|0|1_4", "0|0|1_5", "1|0|0_0", "1|0|0_1", "1|0|0_2"]
    assert lines[-1].keys() == {"finish_time"}
    assert [m["name"] for m in res["measurements"]][0] == "0|0|1_2"


def test_a_resume_id_that_never_matches_skips_everything(tmp_path):
    code, lines, res = run_ops(tmp_path, PARAM_CONFIGS / "simple_add.json", "-r", "torch.add|9|9|9")
    assert code == 0 and op_lines(lines) == []
    assert res["status"] == "skipped" and res["measurements"] == []


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]


def test_a_stop_id_that_never_matches_runs_everything_and_says_so(tmp_path, caplog):
    code, lines, res = run_ops(tmp_path, PARAM_CONFIGS / "simple_add.json", "-i", "1",
                               "-s", "torch.add|9|9|9")
    assert code == 0 and res["status"] == "ok" and op_lines(lines)
    assert warnings_of(caplog) == [
        "stop id 'torch.add|9|9|9' matched no input: ran to the end of the config"]


def test_a_stop_id_before_the_resume_id_is_named_as_the_reason_nothing_ran(tmp_path, caplog):
    code, lines, res = run_ops(tmp_path, PARAM_CONFIGS / "simple_add_range.json", "-w", "0",
                               "-i", "1", "-r", "torch.add|1|0|0_3", "-s", "torch.add|0|0|1_2")
    assert code == 0 and op_lines(lines) == [] and res["status"] == "skipped"
    assert warnings_of(caplog) == [
        "stop id 'torch.add|0|0|1_2' comes before resume id 'torch.add|1|0|0_3': nothing ran"]


def test_zero_iterations_write_empty_metrics_as_param_does(tmp_path):
    code, lines, res = run_ops(tmp_path, PARAM_CONFIGS / "simple_add.json", "-w", "0", "-i", "0")
    (op,) = op_lines(lines)
    assert op["metric"] == {} and res["status"] == "skipped"


# -- errors -------------------------------------------------------------------------------


def test_bad_ops_and_specs_are_recorded_in_one_line_and_the_rest_still_runs(tmp_path):
    config = write_config(tmp_path, {
        "torch.foo": {"config": [{"input": [{"args": []}]}]},
        "torch.add": {"config": [{"input": [
            {"args": [tensor(4, 4), {"type": "floaty", "value": 1}]},
            {"args": [tensor(4, 4), tensor(5, 4)]},
            {"args": [tensor(4, 4), tensor(4, 4)]},
        ]}]},
        "torch.nn.Linear": {"config": [{"build": [{"args": [{"type": "int", "value": 3}]}],
                                        "input": [{"args": [tensor(2, 3)]}]}]},
        "torch.mm": {"input_iterator": "SometimesIterator", "config": []},
        "torch.mul": {"config": [{"input": [{"args": [tensor(2, 2), tensor(2, 2)]}]}]},
    })
    code, lines, res = run_ops(tmp_path, config, "-i", "1")
    errors = [line for line in lines if "error" in line]
    messages = [e["error"] for e in errors]
    assert messages[0] == "torch.foo: unknown operator (torch has no attribute 'foo')"
    assert messages[1] == "torch.add: config[0].input[0].args[1].type: unknown type 'floaty'"
    assert messages[2].startswith("torch.add: config[0].input[1]: RuntimeError: The size of")
    assert messages[3].startswith("torch.nn.Linear: config[0].build[0]: TypeError:")
    assert messages[4] == ("torch.mm: input_iterator: unknown iterator 'SometimesIterator' "
                           "(valid: DefaultConfigIterator, RangeConfigIterator)")
    assert all("\n" not in m for m in messages) and len(errors) == 5
    assert [e["id"] for e in errors] == [None, "0|0|0", "0|0|1", "0|0|0", None]
    assert [op["op_name"] for op in op_lines(lines) if "error" not in op] == ["torch.add", "torch.mul"]
    assert code == 0 and res["status"] == "ok" and len(res["measurements"]) == 2
    assert [e["error"] for e in res["extra"]["errors"]] == messages


def test_inputs_that_fail_beside_measured_ones_are_summed_up_and_become_table_rows(
        tmp_path, caplog):
    """The cell stays ok (what was measured stands, as PARAM goes on); each failed input is
    a failed row of the table, and the log ends with one line counting them."""
    from dlbench import aggregate

    config = write_config(tmp_path, {
        "torch.add": {"config": [{"input": [{"args": [tensor(4, 4), tensor(4, 4)]}]}]},
        "torch.mm": {"config": [{"input": [{"args": [tensor(4, 3), tensor(5, 4)]}]}]},
        "torch.nope": {"config": [{"input": [{"args": []}]}]},
    })
    code, _, res = run_ops(tmp_path, config, "-i", "2")
    assert code == 0 and res["status"] == "ok" and len(res["measurements"]) == 1
    summary = caplog.records[-1]
    assert summary.levelname == "WARNING" and summary.getMessage() == (
        "2 of 3 inputs failed; first: torch.mm: config[0].input[0]: RuntimeError: mat1 and "
        "mat2 shapes cannot be multiplied (4x3 and 5x4)")
    rows = aggregate.rows_of_file(tmp_path / "out_result.json")
    assert [(r["status"], r["op_name"], r["name"]) for r in rows] == [
        ("ok", "torch.add", "0|0|0"), ("failed", "torch.mm", "0|0|0"),
        ("failed", "torch.nope", None)]
    assert rows[2]["error"] == "torch.nope: unknown operator (torch has no attribute 'nope')"


def test_all_inputs_failing_makes_a_failed_result(tmp_path):
    config = write_config(tmp_path, {"torch.foo": {"config": [{"input": [{"args": []}]}]}})
    code, _, res = run_ops(tmp_path, config)
    assert code == 1 and res["status"] == "failed"
    assert "torch.foo: unknown operator" in res["error"]


def test_range_attributes_need_the_range_iterator(tmp_path):
    config = write_config(tmp_path, {"torch.add": {"config": [{"input": [{"args": [
        tensor(2), {"type": "int", "value": [1, 3, 1], "__range__": ["value"]}]}]}]}})
    _, _, res = run_ops(tmp_path, config)
    assert res["extra"]["errors"][0]["error"] == (
        "torch.add: config[0].input[0].args[1].__range__: needs \"input_iterator\": "
        "\"RangeConfigIterator\" (or build_iterator)")


def test_unreadable_config_fails_with_the_file_named(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text("{ not json")
    code, lines, res = run_ops(tmp_path, bad)
    assert code == 1 and lines == []
    assert res["status"] == "failed" and res["error"].startswith(f"config {bad}: not JSON")


def test_gpu_device_without_cuda_fails_cleanly_not_run_on_a_gpu(tmp_path):
    """Only the no-GPU branch: CUDA timing, events and the L2 flush are not exercised here."""
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    code, _, res = run_ops(tmp_path, PARAM_CONFIGS / "simple_add.json", "-d", "gpu")
    assert code == 1 and res["cell"]["device"] == "gpu"
    assert res["error"] == "device cuda: no CUDA GPU is available to torch"


def test_nsight_options_are_recorded_in_the_run_options(tmp_path):
    """PARAM's run_options record keeps the NSight options (test_ops_nsight.py runs them)."""
    args_file = tmp_path / "ncu_args.txt"
    args_file.write_text("--metrics sm__cycles_elapsed.avg\n")
    _, lines, res = run_ops(tmp_path, PARAM_CONFIGS / "simple_add.json", "--ncu-bin",
                            "/opt/ncu", "--ncu-args-file", str(args_file), "--nsys-warmup",
                            "2", "--run-batch-size", "7", "--batch-cmd",
                            "python -m dlbench.ops")
    opts = lines[0]["run_options"]
    assert opts["run_ncu"] is False and opts["ncu_bin"] == "/opt/ncu"
    assert "nsight" not in res["extra"]  # no tool asked for: none launched
    assert opts["ncu_args"] == "--metrics sm__cycles_elapsed.avg"
    assert opts["nsys_warmup"] == 2 and opts["run_batch_size"] == 7
    assert opts["batch_cmd"] == "python -m dlbench.ops"


# -- execution modes, backward, profiling -------------------------------------------------


@pytest.mark.parametrize("mode", ["continuous", "continuous_events"])
def test_continuous_modes_time_each_call_on_cpu(tmp_path, mode):
    code, lines, res = run_ops(tmp_path, PARAM_CONFIGS / "simple_add.json", "--exec-mode", mode,
                               "-w", "1", "-i", "4", "-b")
    (op,) = op_lines(lines)
    assert code == 0 and lines[0]["run_options"]["op_exec_mode"] == mode
    assert len(op["metric"]["forward"]["measure.time"]) == 4
    assert len(op["metric"]["backward"]["measure.time"]) == 4
    assert res["measurements"][0]["extra"]["exec_mode"] == mode


def test_inplace_ops_have_no_backward_and_say_so(tmp_path):
    config = write_config(tmp_path, {"torch.add_": {"config": [{"input": [
        {"args": [tensor(8, 8), tensor(8, 8)]}]}]}})
    _, lines, res = run_ops(tmp_path, config, "-b", "-i", "2")
    (op,) = op_lines(lines)
    assert op["metric"]["backward"]["measure.time"] == []
    assert op["notes"] == ["backward skipped: the forward output has no autograd history"]
    assert [m["pass"] for m in res["measurements"]] == ["forward"]


def test_aten_op_with_a_schema_runs(tmp_path):
    schema = "aten::mul.Tensor(Tensor self, Tensor other) -> Tensor"
    config = write_config(tmp_path, {"aten::mul": {"config": [{
        "build": [{"args": [{"type": "str", "value": schema}]}],
        "input": [{"args": [tensor(3, 3), tensor(3, 3)]}]}]}})
    code, lines, res = run_ops(tmp_path, config, "-b")
    assert code == 0 and [m["pass"] for m in res["measurements"]] == ["forward", "backward"]
    assert op_lines(lines)[0]["config"]["build"]["args"][0]["value"] == schema


def test_profile_writes_a_chrome_trace(tmp_path):
    _, lines, res = run_ops(tmp_path, PARAM_CONFIGS / "simple_add.json", "-p", "-i", "2")
    trace_file = tmp_path / "out_trace.json"
    assert lines[-1] == {"trace_file": str(trace_file)}
    events = json.loads(trace_file.read_text())["traceEvents"]
    assert any("param_bench:measure" in str(e.get("name")) for e in events)
    assert res["extra"]["trace_file"] == str(trace_file)


def test_each_inputs_calls_run_inside_the_ranges_the_profiling_jobs_select(tmp_path,
                                                                           monkeypatch):
    """The ncu and nsys jobs select the NVTX range "measure" (and PARAM's own filter
    "param_bench:measure" nested in it): each input's measured calls run inside both, its
    warmup calls inside "warmup". The ranges are recorded in place of NVTX (no GPU here)."""
    from dlbench import nvtx_ranges
    from dlbench.ops import timing

    stack, seen, pushed = [], [], []

    def push(name):
        stack.append(name)
        pushed.append(name)

    monkeypatch.setattr(nvtx_ranges, "_impl", (push, stack.pop))
    loop = timing.Executor._discrete

    def recorded_loop(self, count, *rest):
        seen.append((count, list(stack)))
        return loop(self, count, *rest)

    monkeypatch.setattr(timing.Executor, "_discrete", recorded_loop)
    code, _, res = run_ops(tmp_path, PARAM_CONFIGS / "simple_add_range.json", "-w", "2",
                           "-i", "3")
    inputs = len(res["measurements"])
    assert code == 0 and inputs > 1 and not stack
    assert seen == [(2, ["warmup", "param_bench:warmup"]),
                    (3, ["measure", "param_bench:measure"])] * inputs
    # and no other range: the calls' own labels are not these ranges
    assert pushed == ["warmup", "param_bench:warmup", "measure",
                      "param_bench:measure"] * inputs


def test_et_writes_pytorchs_execution_trace_of_the_run(tmp_path):
    """PARAM's --et: PyTorch's execution trace (the JSON Chakra and PARAM's et_replay
    read) of the whole run, each measured call a node; PARAM's JSON-lines file as without."""
    _, lines, res = run_ops(tmp_path, PARAM_CONFIGS / "simple_add.json", "--et", "-w", "1",
                            "-i", "3")
    et_file = tmp_path / "out_et.json"
    trace = json.loads(et_file.read_text())
    assert {"schema", "nodes"} <= trace.keys()
    names = [node["name"] for node in trace["nodes"]]
    assert "[param|cpu]" in names and names.count("aten::add") >= 1 + 3
    assert res["extra"]["et_file"] == str(et_file) and res["status"] == "ok"
    assert not any("et_file" in line for line in lines)
    _, _, plain = run_ops(tmp_path, PARAM_CONFIGS / "simple_add.json", prefix="plain")
    assert plain["extra"]["et_file"] is None and not (tmp_path / "plain_et.json").exists()


# -- PARAM's whole-model configs (every config's own test: test_param_configs.py) ------


@pytest.mark.slow
@pytest.mark.parametrize("name,model", [("alex_net.json", "alexnet_owt"),
                                        ("resnet.json", "resnet50")])
def test_param_whole_model_configs_run_through_the_model_zoo(tmp_path, name, model):
    pytest.importorskip("dlbench.pytorch.zoo.torchvision_models")
    code, lines, res = run_ops(tmp_path, PARAM_CONFIGS / name, "-w", "0", "-i", "1")
    (op,) = op_lines(lines)
    assert code == 0 and res["extra"]["errors"] == [], res["extra"]["errors"]
    assert op["config"]["build"] == [] and len(op["metric"]["forward"]["measure.time"]) == 1
    # FLOPs counted on the meta device: the network's convolutions and linears.
    assert res["measurements"][0]["flops_per_iteration"] > 1e11
    assert res["measurements"][0]["extra"]["cost_device"] == "meta"


def test_gvprof_unit_workloads_run_forward_and_backward(tmp_path):
    code, lines, res = run_ops(tmp_path, GVPROF_UNITS, "-w", "0", "-i", "1", "-b")
    ops = op_lines(lines)
    assert code == 0 and res["extra"]["errors"] == []
    assert [op["op_name"] for op in ops] == ["torch.nn.Conv2d"] * 4 + [
        "torch.nn.ReplicationPad3d", "torch.nn.Embedding"]
    convs = [m for m in res["measurements"] if m["op_name"] == "torch.nn.Conv2d"
             and m["pass"] == "forward"]
    for m, (ch, size) in zip(convs, [(64, 56), (128, 28), (256, 14), (512, 7)], strict=True):
        assert m["flops_per_iteration"] == 2 * 32 * size * size * ch * ch * 9
    passes = {(m["op_name"], m["pass"]) for m in res["measurements"]}
    assert ("torch.nn.ReplicationPad3d", "backward") in passes
    assert ("torch.nn.Embedding", "backward") in passes


def test_gpu_continuous_loop_bookkeeping_runs_on_cpu_without_gpu_timing():
    """Calls the GPU continuous-mode loop directly on CPU tensors to check its records
    (one mean per loop, backward = forward+backward mean minus forward mean); CUDA
    synchronization, events and memory peaks are not exercised without a GPU."""
    executor = Executor(ExecOptions(device=torch.device("cpu"), backward=True,
                                    exec_mode="continuous"))
    op = registry.resolve("torch.mm")()
    a, b = torch.rand(64, 64, requires_grad=True), torch.rand(64, 64, requires_grad=True)
    fn, args, kwargs = op.call([a, b], {})
    metrics = new_metrics(True)
    executor._continuous(3, Prepared(fn, args, kwargs, [a, b]), metrics, "measure",
                         "torch.mm:0|0|0")
    assert len(metrics["forward"]["measure.time"]) == 1
    assert len(metrics["backward"]["measure.time"]) == 1
    assert metrics["forward"]["measure.time"][0] > 0
    assert a.grad is not None and a.grad.shape == (64, 64)


def test_the_l2_flush_runs_in_its_own_nvtx_range_that_the_ncu_job_excludes(monkeypatch):
    """With the L2 cache off each measured call follows a flush, inside the input's
    "measure" range: its own range around it (and nothing else) lets ncu leave the flush
    kernel out. Run on the CPU with a host buffer standing in for the GPU's: the flush
    kernel on a GPU and ncu's filter themselves are not exercised."""
    from dlbench import nvtx_ranges
    from dlbench.profiling import config as pconfig

    stack, seen = [], []

    def push(name):
        stack.append(name)
        seen.append(tuple(stack))

    monkeypatch.setattr(nvtx_ranges, "_impl", (push, stack.pop))
    executor = Executor(ExecOptions(device=torch.device("cpu"), warmup=2, iterations=3))
    flusher = object.__new__(L2Flusher)
    flusher.buffer, flusher.count = torch.empty(1 << 16, dtype=torch.uint8), 0
    executor.flusher = flusher
    op = registry.resolve("torch.add")()
    executor.run(op, [torch.rand(8), torch.rand(8)], {}, "torch.add:0|0|0")
    flushes = [s for s in seen if s[-1] == nvtx_ranges.L2_FLUSH]
    assert [s[0] for s in flushes] == ["warmup"] * 2 + ["measure"] * 3 and flusher.count == 5
    assert not any(len(s) > len(f) and s[:len(f)] == f for f in flushes for s in seen)
    assert stack == []
    excluded = pconfig.settings("ncu", {})["nvtx_exclude"]
    assert excluded == [f"{nvtx_ranges.L2_FLUSH}/"]


def test_inputs_the_allocator_cannot_hold_make_an_oom_result(tmp_path):
    """A tensor of 2**42 floats (16 TiB): more than the host has free, so not made, and a
    cell where no input could be allocated is out of memory, not a failure."""
    config = write_config(tmp_path, {"torch.add": {"config": [{"input": [{"args": [
        {"type": "tensor", "dtype": "float", "shape": [2**42]},
        {"type": "tensor", "dtype": "float", "shape": [2**42]}]}]}]}})
    code, _, res = run_ops(tmp_path, config)
    assert res["status"] == "oom", res["error"]
    assert "its tensors need 35,184 GB, more than the " in res["error"]
    assert res["extra"]["errors"][0]["oom"] is True


def test_inputs_larger_than_the_free_memory_are_not_made_but_recorded_out_of_memory(
        tmp_path, monkeypatch):
    """Inputs below the host's RAM but above what it has free (two 14 GB tensors on a 23 GB
    host) were granted and filled, until the kernel's OOM killer took this run or another
    process. They are not made: the input is out of memory, the others still run; a build's
    arguments alike. Sizes past int64 are a one-line config error."""
    from dlbench.ops import runner

    monkeypatch.setattr(runner, "free_memory", lambda device: 3 * 256 * 256 * 4)
    config = write_config(tmp_path, {"torch.add": {"config": [{"input": [
        {"args": [{"type": "tensor", "dtype": "float", "shape": [256, 256]},
                  {"type": "tensor", "dtype": "float", "shape": [256, 256]}]},
        {"args": [{"type": "tensor", "dtype": "float", "shape": [512, 512]},
                  {"type": "tensor", "dtype": "float", "shape": [512, 512]}]}]}]}})
    code, lines, res = run_ops(tmp_path, config)
    assert [m["op_name"] for m in res["measurements"]] == ["torch.add"]
    (error,) = res["extra"]["errors"]
    assert error["oom"] is True and error["error"].endswith(
        "its tensors need 2.1 MB, more than the 786 kB free on cpu (out of memory before the "
        "call)")
    huge = tmp_path / "huge" / "config.json"
    huge.parent.mkdir()
    write_config(huge.parent, {"torch.add": {"config": [{"input": [{"args": [
        {"type": "tensor", "dtype": "float", "shape": [10**23]}]}]}]}})
    code, _, res = run_ops(tmp_path, huge, prefix="huge")
    assert "shape[0]: 100000000000000000000000 is past the largest size a tensor can have" \
        in res["error"]


def test_a_float32_operator_is_ieee_float32_where_tf32_could_run_it(tmp_path, monkeypatch):
    """PyTorch's default runs float32 convolutions in TF32 on a GPU, and an operator cell
    is held against the float32 peak: the runner turns TF32 off, as float32 model cells
    do. Not exercised: a GPU; the flags set_tf32 sets, and that the runner asks for them
    off on its device before anything runs, are."""
    from dlbench.pytorch import precision

    before = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    try:
        torch.backends.cudnn.allow_tf32 = True
        precision.set_tf32("cuda", False)
        assert not torch.backends.cudnn.allow_tf32
        assert not torch.backends.cuda.matmul.allow_tf32
        precision.set_tf32("cpu", True)  # no GPU math to change
        assert not torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before
    asked = []
    monkeypatch.setattr(precision, "set_tf32", lambda *args: asked.append(args))
    code, _, _ = run_ops(tmp_path, PARAM_CONFIGS / "simple_mm.json", "-w", "1", "-i", "1")
    assert code == 0 and asked == [("cpu", False)]
