"""Profiling: NVTX ranges a CPU cell's capture waits for, settings a tool cannot run with,
the selection's hint about emulated precisions, the profiled run's result saying it was
profiled, and ``tables`` on a folder without exports.

nsys and ncu are not needed: where a tool would run, a test double stands in for it, and
whether nsys really opens its capture on the pushed range needs nsys itself.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dlbench import config_schema, nvtx_ranges, study
from dlbench.profiling import commands, run
from dlbench.profiling import config as pconfig

PYTHON = sys.executable
REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def tiny_cell(**grid):
    base = {"model": "deep_mnist", "device": "cpu", "batch_size": 2, "num_batches": 4,
            "num_warmup_batches": 1, **grid}
    (cell,) = study.expand_config({"studies": {"s": {"grid": base}}})
    return cell


def python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **env})


# NVTX ranges in a CPU process


def test_a_cpu_pytorch_process_pushes_ranges_with_torchs_own_binding():
    """With no GPU visible, the ranges an nsys capture waits for ('measure') were no-ops
    unless the nvtx package was installed: the capture never opened. torch's CUDA build has
    its NVTX binding without a GPU (whether nsys then captures needs nsys itself)."""
    proc = python("""
        import torch
        from dlbench import nvtx_ranges
        if not hasattr(torch._C, "_nvtx"):
            print("no binding")
        else:
            assert not torch.cuda.is_available()
            push, pop = nvtx_ranges._choose()
            print(push is torch.cuda.nvtx.range_push and pop is torch.cuda.nvtx.range_pop)
            nvtx_ranges.push("measure")
            nvtx_ranges.pop()
        """, CUDA_VISIBLE_DEVICES="")
    assert proc.returncode == 0, proc.stderr
    if proc.stdout.strip() == "no binding":
        pytest.skip("this torch build has no NVTX binding (a CPU-only build)")
    assert proc.stdout.strip() == "True"


def test_a_loop_that_cannot_push_the_range_a_capture_waits_for_stops_before_any_step():
    """Under a tool that waits for an NVTX range (the job sets NEEDED) a process without
    any NVTX binding fails at its first range, in one line naming the setting to change,
    before a single iteration runs; without NEEDED the ranges stay free no-ops."""
    code = """
        import sys
        sys.modules["nvtx"] = None  # the nvtx package absent, whether or not installed
        from dlbench import harness
        assert "torch" not in sys.modules
        steps = []
        try:
            harness.timed_loop(lambda: 0, steps.append, lambda: None, 2, 3)
        finally:
            print("steps", len(steps))
        """
    needed = python(code, **{nvtx_ranges.NEEDED: "profiling.tools.nsys.capture_range: none"})
    assert needed.returncode == 1 and needed.stdout.strip() == "steps 0"
    last = needed.stderr.strip().splitlines()[-1]
    assert last.startswith("dlbench.nvtx_ranges.NoNvtxError: the profiler waits for NVTX "
                           "ranges, but this process has no NVTX binding")
    assert last.endswith("or set profiling.tools.nsys.capture_range: none")
    env = {k: v for k, v in os.environ.items() if k != nvtx_ranges.NEEDED}
    free = subprocess.run([PYTHON, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300, env=env)
    assert free.returncode == 0 and free.stdout.strip() == "steps 5", free.stderr


def test_a_profiled_run_that_waits_for_a_range_is_told_so(tmp_path):
    """Told only where the tool waits for a range: not under nsys capture_range none nor
    under ncu with no nvtx_include."""
    cell = json.loads(tiny_cell(device="gpu").to_json())
    for tool, given, needed in [
            ("nsys", {}, "profiling.tools.nsys.capture_range: none"),
            ("ncu", {}, "profiling.tools.ncu.nvtx_include: []"),
            ("nsys", {"capture_range": "none"}, None),
            ("ncu", {"nvtx_include": []}, None)]:
        plan = run.build_plan(tool, cell, tmp_path, PYTHON, pconfig.settings(tool, given),
                              None)
        (profiled,) = [step for step in plan.steps if step.runs_cell]
        assert profiled.env.get(nvtx_ranges.NEEDED) == needed, (tool, given)


# Settings a tool cannot run with


def test_nsys_capture_on_the_cuda_profiler_api_is_refused_no_runner_starts_it():
    """No runner calls cudaProfilerStart: that capture would never open."""
    with pytest.raises(pconfig.ProfilingConfigError) as info:
        pconfig.settings("nsys", {"capture_range": "cudaProfilerApi"})
    assert str(info.value).startswith("profiling.tools.nsys.capture_range: ")
    assert "\n" not in str(info.value)
    assert pconfig.settings("nsys", {"capture_range": "none"})["capture_range"] == "none"


@pytest.mark.parametrize("field", ["trace", "reports"])
def test_an_empty_list_nsys_needs_one_of_is_refused_in_one_line(field):
    """`--trace=` and `nsys stats --report ''` failed only after the profiled run."""
    with pytest.raises(pconfig.ProfilingConfigError) as info:
        pconfig.settings("nsys", {field: []})
    assert str(info.value).startswith(f"profiling.tools.nsys.{field}: is an empty list; "
                                      "give one value at least (the default: ")
    config = {"studies": {"s": {"grid": {"model": "deep_mnist"}}},
              "profiling": {"tools": {"nsys": {field: []}}}}
    with pytest.raises(config_schema.WorkflowConfigError) as schema:
        config_schema.validate_config(config, SCHEMA)
    assert str(schema.value).startswith(f"profiling.tools.nsys.{field}")
    # Lists a tool runs without stay allowed empty.
    ncu = pconfig.settings("ncu", {"nvtx_include": [], "nvtx_exclude": [], "metrics": []})
    assert (ncu["nvtx_include"], ncu["metrics"]) == ([], [])


@pytest.mark.parametrize("name", ["HPCRUN-X", "_HPCRUN", "9LIVES", "HPCRUN X"])
def test_a_knob_name_that_is_not_one_says_what_a_name_is(name):
    with pytest.raises(pconfig.ProfilingConfigError) as info:
        pconfig.settings("hpcrun", {"knobs": {name: 1}})
    assert str(info.value) == (
        f"profiling.tools.hpcrun.knobs: knob name {name!r} must be UPPER_CASE: upper-case "
        "letters, digits and '_', starting with a letter")
    assert pconfig.settings("hpcrun", {"knobs": {"HPCRUN_X9": 1}})["knobs"] == {"HPCRUN_X9": 1}


# The selection's hint about precisions this CPU emulates


@pytest.fixture
def bfloat16_emulated(monkeypatch):
    from dlbench import cpu

    monkeypatch.setattr(study, "native_here",
                        lambda params: params.get("precision") != "bfloat16")
    monkeypatch.setattr(cpu, "precision_native", lambda precision, *a: precision != "bfloat16")


def no_cell_line(studies, defaults=None):
    config = {"studies": studies, **({"defaults": defaults} if defaults else {}),
              "profiling": {"select": [{"match": {"precision": "bf16"}, "tools": ["torch"]}]}}
    with pytest.raises(pconfig.ProfilingConfigError) as info:
        pconfig.select_jobs(config, study.expand_config(config), system="box")
    return str(info.value)


HINT = "; this CPU emulates it, and a study with precisions: native leaves such cells out"
GRID = {"model": "deep_mnist", "device": "cpu"}


def test_the_emulation_hint_only_where_a_native_studys_grid_would_have_the_precision(
        bfloat16_emulated):
    """Not where no study has precisions: native, nor where none lists the precision; yes
    where a native study's grid would have it (here from the config's defaults)."""
    for studies in [
            {"a": {"grid": {**GRID, "precision": "float32"}}},
            {"a": {"precisions": "native", "grid": {**GRID, "precision": "float32"}},
             "b": {"grid": {**GRID, "precision": "float16"}}}]:
        line = no_cell_line(studies)
        assert "no cell has precision 'bf16'" in line and not line.endswith(HINT), studies
    line = no_cell_line({"a": {"precisions": "native", "grid": dict(GRID)}},
                        defaults={"model": {"precision": ["float32", "bfloat16"]}})
    assert line.endswith("(the cells have: float32)" + HINT)


# The profiled run's own result says it was profiled


NSYS_DOUBLE = f"""#!{PYTHON}
# Test double of nsys: runs the application of `nsys profile`, writes a stats CSV.
import sys
from pathlib import Path

argv = sys.argv[1:]
if argv[0] == "stats":
    base = argv[argv.index("--output") + 1]
    Path(base + "_nvtx_sum.csv").write_text("Time (%),Range\\n100.0,measure\\n")
    sys.exit(0)
import subprocess
rc = subprocess.run(argv[argv.index({PYTHON!r}):]).returncode
out = next(a.split("=", 1)[1] for a in argv if a.startswith("--output="))
Path(out + ".nsys-rep").write_bytes(b"NSYS-REP test double")
sys.exit(rc)
"""


def test_a_profiled_runs_result_says_by_which_tool_and_the_measurements_counts(
        tmp_path, monkeypatch):
    """The profile's result.json has the profile's iteration counts in its cell; it must
    say that it was profiled (nsys by a test double, torch.profiler for real)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nsys").write_text(NSYS_DOUBLE)
    (bindir / "nsys").chmod(stat.S_IRWXU)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    cell = json.loads(tiny_cell().to_json())
    out = tmp_path / "nsys"
    settings = pconfig.settings("nsys", {"num_batches": 2})
    assert run.main("nsys", cell, out, PYTHON, settings, None) == 0
    result = json.loads((out / "result.json").read_text())
    assert result["cell"]["num_batches"] == 2
    assert result["extra"]["profiled"] == {
        "tool": "nsys", "capture_range": "nvtx", "nvtx_capture": "measure",
        "capture_range_end": "stop", "cell_num_batches": 4, "cell_num_warmup_batches": 1}

    out = tmp_path / "torch"
    settings = pconfig.settings("torch", {"wait": 0, "warmup": 1, "active": 1})
    assert run.main("torch", cell, out, PYTHON, settings, None) == 0
    result = json.loads((out / "result.json").read_text())
    assert result["extra"]["profiled"] == {
        "tool": "torch", "wait": 0, "warmup": 1, "active": 1, "cell_num_batches": 4,
        "cell_num_warmup_batches": 1}


def test_the_pytorch_runner_with_its_profiler_says_so_in_its_result(tmp_path):
    """A run by hand with --torch_profile_dir, outside a profile job."""
    cell = json.loads(tiny_cell().to_json())
    argv = [*commands.runner_argv(cell, tmp_path, PYTHON, (2, 1)),
            f"--torch_profile_dir={tmp_path / 'trace'}", "--torch_profile_schedule=0,1,1"]
    assert argv[:3] == [PYTHON, "-m", "dlbench.pytorch"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["status"] == "ok", result["error"]
    assert result["extra"]["profiled"] == {"tool": "torch", "wait": 0, "warmup": 1, "active": 1}


# `tables` on a folder without exports


def test_tables_of_a_folder_without_exports_is_one_line_and_fails_for_every_tool(tmp_path):
    """nsys and hpcrun printed an empty line and exited 0; ncu and torch said what was
    missing and exited 1."""
    for tool, line in [
            ("nsys", "nsys: no export to make a table of in {folder}"),
            ("hpcrun", "hpcrun: a profile of this tool has no tables (an HPCToolkit "
                       "database, for hpcviewer)"),
            ("ncu", "ncu: {folder}/raw.csv: cannot be read (No such file or directory)"),
            ("torch", "torch: {folder}/operators.json: not a torch.profiler operator table")]:
        proc = subprocess.run([PYTHON, "-m", "dlbench.profiling", "tables", "--tool", tool,
                               str(tmp_path)], capture_output=True, text=True, timeout=300)
        assert (proc.returncode, proc.stdout) == (1, ""), tool
        assert proc.stderr.startswith(line.format(folder=tmp_path)), tool
        assert proc.stderr.count("\n") == 1, tool


def test_a_language_model_cells_profile_sets_its_generations_not_iterations():
    """An llm_inference cell counts generations in num_batches (the axis table's kinds):
    its profile set `iterations`, which its runner does not take, and ncu replayed every
    generation of the measurement."""
    cell = {"kind": "llm_inference", "params": {"num_batches": 5, "num_warmup_batches": 2}}
    assert commands.profiled_params(cell, 1, 0) == {"num_batches": 1, "num_warmup_batches": 0}
    ops = {"kind": "ops", "params": {"iterations": 50, "warmup": 5}}
    assert commands.profiled_params(ops, 1, 0) == {"iterations": 1, "warmup": 0}
    assert commands.iteration_keys("comms") == ("iterations", "warmup")
