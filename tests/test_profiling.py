"""Profiling: torch.profiler for real on the CPU; ncu, nsys and hpcrun through test doubles.

ncu, nsys and HPCToolkit cannot run on this machine (no GPU, not installed). Their tests put
test doubles of the executables on PATH: small scripts that record the arguments and the
environment they were given, run the profiled application as the real tool would (it is the
real runner, so its command line is exercised too), and write files in the tools' real
output formats (ncu's ``--csv --page raw``, nsys's ``stats --format csv``). What these
tests do not exercise is the tools themselves: their measurements, option parsing and
binary report formats.
"""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from dlbench import launch, study, systems
from dlbench.profiling import config as pconfig
from dlbench.profiling import run, summary, tables
from dlbench.profiling.tools import hpcrun as hpcrun_tool
from dlbench.profiling.tools import ncu as ncu_tool
from dlbench.profiling.tools import torch_profiler as torch_tool

PYTHON = sys.executable


def tiny_cell(**grid):
    base = {"model": "deep_mnist", "device": "cpu", "batch_size": 2, "num_batches": 4,
            "num_warmup_batches": 1}
    (cell,) = study.expand_config({"studies": {"s": {"grid": {**base, **grid}}}})
    return cell


def cell_json(cell):
    return json.loads(cell.to_json())


def profile_dir(root, tool, cell, system="box"):
    return root / system / tool / cell.study / cell.id


# Test doubles of the profilers


_DOUBLE_HEAD = f"""#!{PYTHON}
# Test double of a profiler executable: records its arguments, runs the application.
import json, os, subprocess, sys
from pathlib import Path

argv = sys.argv[1:]
env = {{k: os.environ.get(k) for k in ("LD_LIBRARY_PATH", "NSYS_NVTX_PROFILER_REGISTER_ONLY")}}
record = {{"tool": Path(sys.argv[0]).name, "argv": argv, "env": env}}

def log(**more):
    with open(os.environ["DOUBLE_LOG"], "a") as f:
        f.write(json.dumps({{**record, **more}}) + "\\n")

def run_app():
    app = argv[argv.index({PYTHON!r}):]
    return subprocess.run(app).returncode
"""

NCU_DOUBLE = _DOUBLE_HEAD + r'''
if "--import" in argv:
    log()
    # ncu --import R --csv --page raw --print-units base: header, units, one row per launch.
    nvtx = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
    print('"ID","Process ID","Process Name","Host Name","' + nvtx + '","Kernel Name",'
          '"Context","Stream","Block Size","Grid Size","Device","CC","dram__bytes.sum",'
          '"gpu__time_duration.sum","sm__throughput.avg.pct_of_peak_sustained_elapsed"')
    print('"","","","","","","","","","","","","byte","nsecond","%"')
    print('"0","4242","python3.11","node1","<default>:measure:batch 0:none:none","volta_sgemm_128x64_nn","1","7","(256, 1, 1)","(64, 2, 1)","0","9.0","1,048,576","12,288","71.52"')
    print('"1","4242","python3.11","node1","<default>:measure:batch 0:none:none","void at::native::vectorized_elementwise_kernel<4>(int)","1","7","(128, 1, 1)","(512, 1, 1)","0","9.0","65,536","2,048","n/a"')
    print('"2","4242","python3.11","node1","<default>:measure:batch 0:none:none","volta_sgemm_128x64_nn","1","7","(256, 1, 1)","(64, 2, 1)","0","9.0","1,048,576","12,800","70.01"')
    sys.exit(0)
if os.environ.get("DOUBLE_FAIL"):
    log()
    print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters", file=sys.stderr)
    sys.exit(3)
log()
print("==PROF== Connected to process", os.getpid(), file=sys.stderr)
rc = run_app()
report = argv[argv.index("--export") + 1] + ".ncu-rep"
Path(report).write_bytes(b"NCU-REP test double")
sys.exit(rc)
'''

NSYS_DOUBLE = _DOUBLE_HEAD + r'''
if argv[0] == "stats":
    log()
    base = argv[argv.index("--output") + 1]
    reports = argv[argv.index("--report") + 1].split(",")
    if "cuda_gpu_kern_sum" in reports:
        Path(base + "_cuda_gpu_kern_sum.csv").write_text(
            "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n"
            "62.5,5000000,40,125000.0,124000.0,120000,131000,2500.1,volta_sgemm_128x64_nn\n"
            '37.5,3000000,120,25000.0,24800.0,24000,27000,800.5,"void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int, T2, T3)"\n')
    if "nvtx_sum" in reports:
        Path(base + "_nvtx_sum.csv").write_text(
            "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Style,Range\n"
            "50.0,9000000,1,9000000.0,9000000.0,9000000,9000000,0.0,PushPop,measure\n"
            "50.0,8900000,4,2225000.0,2225000.0,2200000,2250000,20000.0,PushPop,batch 0\n")
    sys.exit(0)
log()
rc = run_app()
out = next(a.split("=", 1)[1] for a in argv if a.startswith("--output="))
Path(out + ".nsys-rep").write_bytes(b"NSYS-REP test double")
sys.exit(rc)
'''

HPCRUN_DOUBLE = _DOUBLE_HEAD + r'''
out = Path(argv[argv.index("-o") + 1])
out.mkdir(parents=True, exist_ok=True)
log()
rc = run_app()
(out / f"python-{os.getpid()}-0.hpcrun").write_bytes(b"samples")
sys.exit(rc)
'''

HPCSTRUCT_DOUBLE = _DOUBLE_HEAD + r'''
target = Path(argv[-1])
if target.is_dir():  # a measurements folder: GPU binaries' structure goes inside it
    log(files=sorted(p.name for p in target.iterdir()))
    (target / "structs").mkdir(exist_ok=True)
    (target / "structs" / "gpubins.hpcstruct").write_text("<HPCToolkitStructure/>")
else:
    log()
    Path(argv[argv.index("-o") + 1]).write_text("<HPCToolkitStructure/>")
'''

HPCPROF_DOUBLE = _DOUBLE_HEAD + r'''
log()
database = Path(argv[argv.index("-o") + 1])
database.mkdir(parents=True)
(database / "experiment.xml").write_text("<HPCToolkitExperiment/>")
'''


@pytest.fixture
def doubles(tmp_path, monkeypatch):
    """PATH with test doubles of ncu, nsys, hpcrun, hpcstruct and hpcprof; returns a reader
    of what they recorded."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in (("ncu", NCU_DOUBLE), ("nsys", NSYS_DOUBLE), ("hpcrun", HPCRUN_DOUBLE),
                       ("hpcstruct", HPCSTRUCT_DOUBLE), ("hpcprof", HPCPROF_DOUBLE)):
        path = bindir / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "double-log.jsonl"
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("DOUBLE_LOG", str(log))

    def calls():
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return calls


def runner_tail(out_dir, cell, num_batches, warmup=1):
    """The profiled run's command line: the launcher's own for the cell (its flags and their
    order are test_launch's business), with the profile's iterations and its result in the
    profile folder."""
    profiled = cell_json(cell)
    profiled["params"] = {**profiled["params"], "num_batches": num_batches,
                          "num_warmup_batches": warmup}
    argv = launch.runner_command(profiled, out_dir / "result.json", PYTHON)
    assert argv[:3] == [PYTHON, "-m", "dlbench.pytorch"]
    assert {f"--num_batches={num_batches}", f"--num_warmup_batches={warmup}",
            f"--output={out_dir / 'result.json'}", "--study=s", f"--cell_id={cell.id}"} <= set(argv)
    return argv


def test_torch_profiler_on_cpu_writes_a_trace_and_an_operator_table(tmp_path, capsys):
    cell = tiny_cell()
    out = profile_dir(tmp_path / "profiles", "torch", cell)
    settings = pconfig.settings("torch", {"wait": 1, "warmup": 1, "active": 2})
    assert run.main("torch", cell_json(cell), out, PYTHON, settings, None) == 0
    trace = json.loads((out / "trace.json").read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert {"aten::addmm", "aten::mm"} <= names
    assert sum(1 for e in trace["traceEvents"] if e.get("name") == "ProfilerStep#3") == 1
    ops = pq.read_table(out / "operators.parquet")
    assert ops.schema.equals(torch_tool.operator_schema(), check_metadata=False)
    rows = {r["name"]: r for r in ops.to_pylist()}
    assert rows["ProfilerStep*"]["calls"] == 2 and rows["ProfilerStep*"]["is_user_annotation"]
    addmm = rows["aten::addmm"]  # deep_mnist's fully-connected layers, 2 active iterations
    assert addmm["calls"] >= 2 and addmm["calls"] % 2 == 0 and addmm["cpu_time_total_us"] > 0
    assert addmm["flops"] > 0 and rows["aten::view"]["flops"] is None
    assert all(r["self_device_time_us"] is None for r in rows.values())  # CPU: no device column
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "ok" and result["cell"]["num_batches"] == 4  # wait+warmup+active
    assert "monitor" in result["extra"] and result["extra"]["monitor"]["enabled"] is False
    manifest = json.loads((out / "profile.json").read_text())
    assert (manifest["status"], manifest["error"]) == ("ok", None)
    assert manifest["artifacts"] == {"trace": "trace.json", "operators": "operators.parquet"}
    assert manifest["commands"][0]["argv"] == [
        *runner_tail(out, cell, 4), "--monitor_interval_ms=0",
        f"--torch_profile_dir={out}", "--torch_profile_schedule=1,1,2"]

    (profile,) = summary.collect(tmp_path / "profiles", top=3)
    assert (profile.tool, profile.study, profile.cell_id, profile.status) == (
        "torch", "s", cell.id, "ok")
    assert profile.artifacts["trace"] == out / "trace.json"
    assert len(profile.top) == 3 and "ProfilerStep*" not in [t["name"] for t in profile.top]
    assert profile.top[0]["time_s"] >= profile.top[1]["time_s"] > 0
    assert profile.top[0]["time_kind"] == "self CPU" and 0 < profile.top[0]["share"] <= 1
    # The report says what its sums cover: 2 recorded iterations, not 1, nor the run's 4.
    assert profile.covers == ("summed over the 2 iterations the profiler recorded (its "
                              "schedule's active steps)")


def test_ncu_command_lines_and_raw_page_table_with_ncu_test_double(tmp_path, doubles):
    """ncu is a test double: checks our ncu/import command lines and the raw-page table."""
    args_file = tmp_path / "ncu_args.txt"
    args_file.write_text("# PARAM-style extra options\n--cache-control all\n"
                         "--replay-mode kernel\n")
    settings = pconfig.settings("ncu", {
        "sections": ["SpeedOfLight"], "metrics": ["gpu__time_duration.sum", "dram__bytes.sum"],
        "clock_control": "none", "launch_count": 50, "args_file": str(args_file)})
    cell = tiny_cell()
    out = profile_dir(tmp_path / "profiles", "ncu", cell)
    assert run.main("ncu", cell_json(cell), out, PYTHON, settings, None) == 0
    profiled, export = doubles()
    assert profiled["argv"] == [
        "--target-processes", "all", "--nvtx", "--nvtx-include", "measure/",
        "--nvtx-exclude", "l2_flush/", "--section", "SpeedOfLight", "--metrics", "gpu__time_duration.sum,dram__bytes.sum",
        "--clock-control", "none", "--launch-count", "50",
        "--cache-control", "all", "--replay-mode", "kernel",
        "--export", str(out / "report"), "--force-overwrite",
        *runner_tail(out, cell, 1), "--monitor_interval_ms=0"]
    assert export["argv"] == ["--import", f"{out / 'report'}.ncu-rep", "--csv", "--page",
                              "raw", "--print-units", "base"]
    kernels = pq.read_table(out / "kernels.parquet")
    assert kernels.num_rows == 3
    assert kernels.column("dram__bytes.sum").to_pylist() == [1048576, 65536, 1048576]
    assert kernels.column("duration_ns").to_pylist() == [12288.0, 2048.0, 12800.0]
    sol = kernels.column("sm__throughput.avg.pct_of_peak_sustained_elapsed").to_pylist()
    assert sol == [71.52, None, 70.01]
    assert kernels.schema.field("gpu__time_duration.sum").metadata == {b"unit": b"nsecond"}
    assert kernels.column("Block Size").to_pylist()[0] == "(256, 1, 1)"
    manifest = json.loads((out / "profile.json").read_text())
    assert manifest["artifacts"] == {"report": "report.ncu-rep", "raw": "raw.csv",
                                     "kernels": "kernels.parquet"}
    (profile,) = summary.collect(tmp_path / "profiles")
    assert [(t["name"], t["calls"]) for t in profile.top] == [
        ("volta_sgemm_128x64_nn", 2), ("void at::native::vectorized_elementwise_kernel<4>(int)", 1)]
    assert profile.top[0]["time_s"] == pytest.approx(25088e-9)
    assert profile.top[0]["share"] == pytest.approx(25088 / 27136)
    assert profile.covers == ("summed over the profiled run's 1 measured iteration, 50 "
                              "launches at most")


def test_nsys_command_lines_and_stats_tables_with_nsys_test_double(tmp_path, doubles):
    """nsys is a test double: checks our profile/stats command lines and the CSV tables."""
    cell = tiny_cell()
    out = profile_dir(tmp_path / "profiles", "nsys", cell)
    settings = pconfig.settings("nsys", {"num_batches": 2})
    assert run.main("nsys", cell_json(cell), out, PYTHON, settings, None) == 0
    profiled, stats = doubles()
    assert profiled["argv"] == [
        "profile", "--trace=cuda,nvtx", "--capture-range=nvtx", "--capture-range-end=stop",
        "--nvtx-capture=measure", f"--output={out / 'report'}", "--force-overwrite=true",
        *runner_tail(out, cell, 2), "--monitor_interval_ms=0"]
    assert profiled["env"]["NSYS_NVTX_PROFILER_REGISTER_ONLY"] == "0"
    assert stats["argv"] == ["stats", "--report", "cuda_gpu_kern_sum,nvtx_sum", "--format",
                             "csv", "--output", str(out / "stats"), "--force-export=true",
                             f"{out / 'report'}.nsys-rep"]
    kern = pq.read_table(out / "cuda_gpu_kern_sum.parquet").to_pylist()
    assert kern[1]["Name"].startswith("void at::native::vectorized_elementwise_kernel<4, ")
    assert kern[0]["Total Time (ns)"] == 5000000 and kern[0]["Instances"] == 40
    assert kern[0]["Time (%)"] == 62.5
    nvtx = pq.read_table(out / "nvtx_sum.parquet").to_pylist()
    assert [(r["Range"], r["Instances"]) for r in nvtx] == [("measure", 1), ("batch 0", 4)]
    (profile,) = summary.collect(tmp_path / "profiles")
    assert profile.artifacts["report"] == out / "report.nsys-rep"
    assert [t["name"] for t in profile.top][0] == "volta_sgemm_128x64_nn"
    assert profile.top[0]["share"] == pytest.approx(0.625)
    assert profile.covers.startswith("summed over the first NVTX range 'measure': a model "
                                     "cell's 2 measured iterations, ")


def test_hpcrun_gvprof_flow_with_hpctoolkit_test_doubles(tmp_path, doubles):
    """hpcrun, hpcstruct and hpcprof are test doubles: checks GVProf's two-pass command
    lines, the knobs, LD_LIBRARY_PATH with torch's library folder, and the database step."""
    import torch

    settings = pconfig.settings("hpcrun", {
        "events": ["gpu=nvidia,data_flow"],
        "knobs": {"HPCRUN_SANITIZER_READ_TRACE_IGNORE": 1,
                  "HPCRUN_SANITIZER_GPU_PATCH_RECORD_NUM": 131072}})
    cell = tiny_cell()
    out = profile_dir(tmp_path / "profiles", "hpcrun", cell)
    assert run.main("hpcrun", cell_json(cell), out, PYTHON, settings, None) == 0
    first, gpu_struct, measured, cpu_struct, prof = doubles()
    app = [*runner_tail(out, cell, 1), "--monitor_interval_ms=0"]
    measurements = str(out / "measurements")
    assert first["argv"] == ["-e", "gpu=nvidia", "-o", measurements, *app]
    # GVProf's FAQ: "For GPU binaries, we use hpcstruct --gpucfg no"
    assert gpu_struct["argv"] == ["--gpucfg", "no", "-j", "1", measurements]
    assert gpu_struct["files"] == []  # the first pass's samples were dropped
    assert measured["argv"] == [
        "-e", "gpu=nvidia,data_flow", "-ck", "HPCRUN_SANITIZER_READ_TRACE_IGNORE=1",
        "-ck", "HPCRUN_SANITIZER_GPU_PATCH_RECORD_NUM=131072", "-o", measurements, *app]
    torch_lib = str(Path(torch.__file__).parent / "lib")
    for call in (first, measured):
        assert call["env"]["LD_LIBRARY_PATH"].split(":")[0] == torch_lib
    interpreter = os.path.realpath(PYTHON)
    struct = str(out / f"{Path(interpreter).name}.hpcstruct")
    assert cpu_struct["argv"] == ["-j", "1", "-o", struct, interpreter]
    assert prof["argv"] == ["-S", struct, "-o", str(out / "database"), measurements]
    (profile,) = summary.collect(tmp_path / "profiles")
    assert profile.status == "ok" and profile.top == []
    assert profile.covers == ("over the whole profiled process: start-up, warm-up and its 1 "
                              "measured iteration")
    assert profile.artifacts["database"] == out / "database"
    assert out / "database" / "experiment.xml" in profile.files


def test_hpcrun_plain_gpu_tracing_has_no_first_pass():
    settings = pconfig.settings("hpcrun", {"jobs": 8, "gpucfg": False})
    plan = hpcrun_tool.hpcrun_plan(["python", "app"], Path("p"), settings, library_dir=None,
                                python_binary="/usr/bin/python3.11")
    assert [s.name for s in plan.steps] == ["profiled run", "hpcstruct of the GPU binaries",
                                            "hpcstruct of the interpreter", "hpcprof"]
    assert plan.steps[0].argv == ["hpcrun", "-e", "gpu=nvidia", "-o", "p/measurements",
                                  "python", "app"]
    assert plan.steps[0].env == {}
    assert plan.steps[1].argv == ["hpcstruct", "--gpucfg", "no", "-j", "8", "p/measurements"]


def test_hpcrun_gpucfg_is_off_unless_asked_as_gvprof_cfg_asks():
    """Off by default (GVProf's FAQ); true is gvprof -cfg's hpcstruct --gpucfg yes."""
    run_args = (["python", "app"], Path("p"))
    kw = {"library_dir": None, "python_binary": "/usr/bin/python3.11"}
    events = {"events": ["gpu=nvidia,data_flow"]}
    plan = hpcrun_tool.hpcrun_plan(*run_args, pconfig.settings("hpcrun", events), **kw)
    assert plan.steps[1].argv == ["hpcstruct", "--gpucfg", "no", "-j", "1", "p/measurements"]
    plan = hpcrun_tool.hpcrun_plan(*run_args, pconfig.settings(
        "hpcrun", {**events, "gpucfg": True}), **kw)
    assert plan.steps[1].argv == ["hpcstruct", "--gpucfg", "yes", "-j", "1", "p/measurements"]


def test_missing_binary_fails_only_that_job_in_one_line(tmp_path, capsys):
    cell = tiny_cell()
    out = profile_dir(tmp_path, "ncu", cell)
    settings = pconfig.settings("ncu", {"binary": "ncu-not-installed"})
    assert run.main("ncu", cell_json(cell), out, PYTHON, settings, None) == 1
    line = "ncu: binary 'ncu-not-installed' not found on PATH (set profiling.tools.ncu.binary)"
    assert capsys.readouterr().err.strip() == line
    assert (out / "error.txt").read_text() == line + "\n"
    assert not (out / "profile.json").exists() and not (out / "result.json").exists()
    (profile,) = summary.collect(tmp_path)
    assert profile.status == "failed" and profile.error == line


def test_a_hand_run_into_a_folder_of_other_files_is_refused_and_writes_nothing(
        tmp_path, capsys):
    """A profile starts by removing its folder: --out_dir naming a folder of one's own
    (results/, a home folder) lost everything in it, the missing binary found after.
    Refused in one line (exit 2) and left as it was; a profile's own folder, and a failed
    one's, are replaced as before."""
    cell = tiny_cell()
    mine = tmp_path / "important"
    (mine / "sub").mkdir(parents=True)
    (mine / "sub" / "data.txt").write_text("data")
    settings = pconfig.settings("ncu", {"binary": "ncu-not-installed"})
    for record_failure in (False, True):
        assert run.main("ncu", cell_json(cell), mine, PYTHON, settings, None,
                        record_failure=record_failure) == 2
        assert capsys.readouterr().err.strip() == (
            f"ncu: {mine}: holds files but no profile (none of capture.json, profile.json, "
            "error.txt, result.json), and a profile replaces its folder whole; give another "
            "--out_dir")
        assert sorted(p.name for p in mine.rglob("*")) == ["data.txt", "sub"]
    out = profile_dir(tmp_path, "ncu", cell)
    assert run.main("ncu", cell_json(cell), out, PYTHON, settings, None) == 1  # error.txt
    (out / "stale.ncu-rep").write_text("")
    assert run.main("ncu", cell_json(cell), out, PYTHON, settings, None) == 1
    assert sorted(p.name for p in out.iterdir()) == ["error.txt"]


def test_record_failure_writes_a_failed_manifest_and_exits_0(tmp_path, capsys):
    cell = tiny_cell()
    out = profile_dir(tmp_path, "ncu", cell)
    settings = pconfig.settings("ncu", {"binary": "ncu-not-installed"})
    assert run.main("ncu", cell_json(cell), out, PYTHON, settings, None,
                    record_failure=True) == 0
    line = "ncu: binary 'ncu-not-installed' not found on PATH (set profiling.tools.ncu.binary)"
    assert capsys.readouterr().err.strip().splitlines()[-1] == line
    assert (out / "error.txt").read_text() == line + "\n"
    manifest = json.loads((out / "profile.json").read_text())
    assert (manifest["status"], manifest["error"], manifest["tool"]) == ("failed", line, "ncu")
    assert (manifest["study"], manifest["cell_id"]) == ("s", cell.id)
    assert manifest["cell"]["model"] == "deep_mnist" and manifest["tables"] == {}
    assert manifest["settings"]["binary"] == "ncu-not-installed"
    assert [p.name for p in out.iterdir() if p.name.endswith(".tmp")] == []  # atomic
    (profile,) = summary.collect(tmp_path)
    assert (profile.status, profile.error, profile.top) == ("failed", line, [])
    assert profile.cell["batch_size"] == 2


def test_record_failure_of_a_failing_tool_from_the_command_line(tmp_path, doubles):
    """ncu test double exits 3; the job still ends 0 and its manifest says why."""
    cell = tiny_cell()
    out = tmp_path / "p"
    env = {**os.environ, "DOUBLE_FAIL": "1"}
    args = [PYTHON, "-m", "dlbench.profiling", "run", "--tool", "ncu", "--cell", cell.to_json(),
            "--out_dir", str(out), "--python", PYTHON]
    failed = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)
    line = ("ncu: profiled run (ncu) exited with code 3: ==ERROR== ERR_NVGPUCTRPERM - The user "
            "does not have permission to access NVIDIA GPU Performance Counters")
    assert failed.returncode == 1 and failed.stderr.strip().splitlines()[-1] == line
    assert not (out / "profile.json").exists()
    recorded = subprocess.run([*args, "--record-failure"], capture_output=True, text=True,
                              env=env, timeout=120)
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    assert recorded.stderr.strip().splitlines()[-1] == line
    manifest = json.loads((out / "profile.json").read_text())
    assert (manifest["status"], manifest["error"]) == ("failed", line)


def profiling_cli(*args, python=PYTHON, env=None):
    return subprocess.run([python, "-m", "dlbench.profiling", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=300)


def test_capture_and_finish_as_two_processes_make_what_run_makes(tmp_path):
    """The workflow's two halves: capture leaves the raw exports and capture.json (no
    tables, no profile.json); finish adds the Parquet table and profile.json."""
    cell = tiny_cell()
    out = tmp_path / "p"
    settings = json.dumps({"wait": 1, "warmup": 1, "active": 2})
    captured = profiling_cli("capture", "--tool", "torch", "--cell", cell.to_json(),
                             "--out_dir", out, "--python", PYTHON, "--settings", settings)
    assert captured.returncode == 0, captured.stderr[-2000:]
    record = json.loads((out / "capture.json").read_text())
    assert (record["status"], record["tool"], record["cell_id"]) == ("ok", "torch", cell.id)
    assert (out / "operators.json").is_file() and (out / "trace.json").is_file()
    assert not (out / "profile.json").exists() and not (out / "operators.parquet").exists()
    finished = profiling_cli("finish", "--tool", "torch", "--out_dir", out)
    assert finished.returncode == 0, finished.stderr[-2000:]
    manifest = json.loads((out / "profile.json").read_text())
    assert manifest["status"] == "ok" and manifest["tables"] == {"operators": "operators.parquet"}
    assert manifest["commands"] == record["commands"] and manifest["settings"]["active"] == 2
    assert pq.read_table(out / "operators.parquet").num_rows > 0


def test_finish_carries_a_recorded_capture_failure_into_the_manifest(tmp_path):
    cell = tiny_cell()
    out = tmp_path / "p"
    line = "ncu: binary 'ncu-not-installed' not found on PATH (set profiling.tools.ncu.binary)"
    captured = profiling_cli("capture", "--tool", "ncu", "--cell", cell.to_json(), "--out_dir",
                             out, "--settings", '{"binary": "ncu-not-installed"}',
                             "--record-failure")
    assert captured.returncode == 0 and captured.stderr.strip().splitlines()[-1] == line
    assert json.loads((out / "capture.json").read_text())["status"] == "failed"
    strict = profiling_cli("finish", "--tool", "ncu", "--out_dir", out)
    assert strict.returncode == 1 and strict.stderr.strip().splitlines()[-1] == line
    assert not (out / "profile.json").exists()
    recorded = profiling_cli("finish", "--tool", "ncu", "--out_dir", out, "--record-failure")
    assert recorded.returncode == 0 and recorded.stderr.strip().splitlines()[-1] == line
    manifest = json.loads((out / "profile.json").read_text())
    assert (manifest["status"], manifest["error"], manifest["cell_id"]) == ("failed", line,
                                                                          cell.id)


def test_finish_without_a_capture_is_a_recorded_one_line_failure(tmp_path):
    out = tmp_path / "p"
    out.mkdir()
    (out / "capture.json").write_text('{"status": "ok", "tool": "nsys"}')
    done = profiling_cli("finish", "--tool", "ncu", "--out_dir", out, "--record-failure")
    assert done.returncode == 0
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"ncu: {out / 'capture.json'}: no capture record of this tool (")
    assert json.loads((out / "profile.json").read_text())["error"] == line


MXNET_PYTHON = Path(__file__).resolve().parents[1] / ".venvs" / "mxnet" / "bin" / "python"


@pytest.mark.skipif(not MXNET_PYTHON.exists(), reason="the MXNet environment is not built")
def test_capture_runs_in_an_environment_without_pyarrow(tmp_path):
    """The MXNet environment (and image) has no pyarrow: capture must not need it. Its
    profile here is an ncu capture whose binary is missing, recorded as a failure."""
    probe = subprocess.run([str(MXNET_PYTHON), "-c", "import pyarrow"], capture_output=True)
    assert probe.returncode != 0  # the premise: pyarrow is absent there
    cell = tiny_cell(framework="mxnet")
    out = tmp_path / "p"
    captured = profiling_cli("capture", "--tool", "ncu", "--cell", cell.to_json(), "--out_dir",
                             out, "--python", MXNET_PYTHON, "--settings",
                             '{"binary": "ncu-not-installed"}', "--record-failure",
                             python=MXNET_PYTHON)
    assert captured.returncode == 0, captured.stderr[-2000:]
    assert json.loads((out / "capture.json").read_text())["status"] == "failed"


def test_manifest_without_status_reads_as_ok_and_a_broken_one_as_failed(tmp_path):
    folder = tmp_path / "box" / "hpcrun" / "s" / "c1"
    folder.mkdir(parents=True)
    (folder / "profile.json").write_text(json.dumps(
        {"schema_version": 1, "tool": "hpcrun", "artifacts": {"database": "database"},
         "tables": {}, "files": ["database/experiment.xml"]}))
    broken = tmp_path / "box" / "torch" / "s" / "c2"
    broken.mkdir(parents=True)
    (broken / "profile.json").write_text('{"status": "ok", "tables": {"operators": "op')
    bad, ok = summary.collect(tmp_path)  # in the order of TOOLS
    assert (ok.tool, ok.status, ok.artifacts["database"]) == ("hpcrun", "ok", folder / "database")
    assert (bad.tool, bad.status) == ("torch", "failed")
    assert bad.error.startswith(f"torch: {broken}: unreadable profile (") and "\n" not in bad.error


def test_missing_hpcprof_names_its_own_config_key(tmp_path, doubles, capsys):
    cell = tiny_cell()
    settings = pconfig.settings("hpcrun", {"hpcprof": "/opt/hpctoolkit/bin/hpcprof"})
    assert run.main("hpcrun", cell_json(cell), tmp_path / "p", PYTHON, settings, None) == 1
    assert capsys.readouterr().err.strip() == (
        "hpcrun: binary '/opt/hpctoolkit/bin/hpcprof' is not an executable file "
        "(set profiling.tools.hpcrun.hpcprof)")
    assert doubles() == []  # nothing ran


def test_failing_tool_is_one_line_with_its_last_error(tmp_path, doubles, capsys, monkeypatch):
    """ncu test double exits 3 with ncu's permission error."""
    monkeypatch.setenv("DOUBLE_FAIL", "1")
    cell = tiny_cell()
    out = tmp_path / "p"
    assert run.main("ncu", cell_json(cell), out, PYTHON, pconfig.settings("ncu"), None) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("ncu: profiled run (ncu) exited with code 3: ==ERROR== ERR_NVGPUCTRPERM "
                       "- The user does not have permission to access NVIDIA GPU Performance "
                       "Counters")
    assert (out / "error.txt").read_text().strip() == err[-1]


def test_raw_csv_units_and_tool_chatter(tmp_path):
    raw = tmp_path / "raw.csv"
    raw.write_text('==PROF== Disconnected from process 1\n'
                   '"ID","Kernel Name","gpu__time_duration.sum","launch__grid_size"\n'
                   '"","","usecond",""\n'
                   '"0","k1","1.5","1,024"\n')
    table = ncu_tool.ncu_kernels(raw, tmp_path / "k.parquet")
    assert table.column("duration_ns").to_pylist() == [1500.0]
    assert table.column("launch__grid_size").to_pylist() == [1024]
    raw.write_text('"ID","Kernel Name","gpu__time_duration.sum"\n"","","cycle"\n"0","k1","3"\n')
    with pytest.raises(tables.TableError, match="unknown time unit 'cycle'"):
        ncu_tool.ncu_kernels(raw, tmp_path / "k.parquet")
    raw.write_text('"ID","Kernel Name"\n"",""\n')
    with pytest.raises(tables.TableError, match="no kernel was profiled"):
        ncu_tool.ncu_kernels(raw, tmp_path / "k.parquet")


def test_ncu_keeps_the_kernel_duration_when_sections_or_metrics_replace_its_default_set(
        tmp_path):
    """Chosen sections or metrics replace ncu's default set, duration included: every
    kernel then showed 0.000 µs in the report. The duration is added to --metrics (not
    without any choice: a --metrics alone would replace the default set), and a table
    without durations has no ranking of zeros."""
    def metrics(**chosen):
        argv = ncu_tool.ncu_plan(["app"], Path("p"), pconfig.settings("ncu", chosen)).steps[0].argv
        return argv[argv.index("--metrics") + 1] if "--metrics" in argv else None

    assert metrics() is None
    assert metrics(sections=["MemoryWorkloadAnalysis"]) == "gpu__time_duration.sum"
    assert metrics(metrics=["dram__bytes.sum"]) == "dram__bytes.sum,gpu__time_duration.sum"
    assert metrics(metrics=["gpu__time_duration.sum"]) == "gpu__time_duration.sum"
    assert metrics(set="full") == "gpu__time_duration.sum"
    raw = tmp_path / "raw.csv"
    raw.write_text('"ID","Kernel Name","dram__bytes.sum"\n"","","byte"\n"0","k1","64"\n')
    ncu_tool.ncu_kernels(raw, tmp_path / "kernels.parquet")
    assert ncu_tool.PROFILER.top_entries(tmp_path, {"kernels": "kernels.parquet"}, 5) == []


# Selection of the cells to profile


def grid_config(profiling):
    return {"studies": {
        "a": {"grid": {"model": ["deep_mnist", "resnet18"], "precision": ["float32", "bfloat16"],
                       "batch_size": [8, 64], "device": "cpu"}},
        "m": {"grid": {"framework": "mxnet", "model": "resnet18", "batch_size": 64}},
    }, "profiling": profiling}


def select(profiling):
    config = grid_config(profiling)
    return pconfig.select_jobs(config, study.expand_config(config), system="box")


def test_selection_matches_expanded_cells_by_axis_values():
    jobs = select({"select": [
        {"match": {"model": "resnet18", "batch_size": 64, "precision": "bf16",
                   "framework": "pytorch"}, "tools": ["torch", "hpcrun"]},
        {"match": {"study": "a", "model": "deep_mnist", "batch_size": [8, 64],
                   "precision": "float32"}, "tools": ["nsys"]},
        {"match": {"model": "resnet18", "batch_size": 64, "precision": "bfloat16",
                   "framework": "pytorch"}, "tools": ["hpcrun"]},  # already selected
    ]})
    assert [(j.tool, j.cell.params["model"], j.cell.params["batch_size"]) for j in jobs] == [
        ("torch", "resnet18", 64), ("hpcrun", "resnet18", 64),
        ("nsys", "deep_mnist", 8), ("nsys", "deep_mnist", 64)]
    assert jobs[0].target == f"results/profiles/box/torch/a/{jobs[0].cell.id}/profile.json"


@pytest.mark.parametrize(("profiling", "message"), [
    ({"select": [{"match": {"modle": "x"}, "tools": ["torch"]}]},
     "profiling.select[0].match: unknown axis 'modle'"),
    ({"select": [{"match": {"model": "vgg16"}, "tools": ["torch"]}]},
     "profiling.select[0].match: matches no cell of any study: no cell has model 'vgg16' "
     "(the cells have: deep_mnist, resnet18)"),
    ({"select": [{"match": {"study": "b", "model": "resnet18"}, "tools": ["torch"]}]},
     "profiling.select[0].match: matches no cell of any study: no cell has study 'b' (the "
     "cells have: a, m)"),
    ({"select": [{"match": {"model": "resnet18"}, "tools": ["perf"]}]},
     "profiling.select[0].tools: unknown tool 'perf' (valid: torch, ncu, nsys, hpcrun"),
    ({"select": [{"match": {"model": "resnet18", "batch_size": 64}, "tools": ["torch"]}]},
     "profiling.select[0]: tool torch profiles PyTorch model cells; cell mxnet_resnet18"),
    ({"tools": {"ncu": {"clock_control": "fast"}}},
     "profiling.tools.ncu.clock_control: unknown value 'fast' (valid: base, none)"),
    ({"tools": {"nsys": {"binry": "x"}}}, "profiling.tools.nsys.binry: unknown setting"),
    ({"tools": {"hpcrun": {"knobs": {"lower": 1}}}},
     "profiling.tools.hpcrun.knobs: knob name 'lower' must be UPPER_CASE"),
    ({"select": [{"match": {}, "tools": ["torch"], "extra": 1}]},
     "profiling.select[0]: needs exactly the keys match and tools"),
    ({"tools": {"ncu": {"extra_args": ["--log-file", "/home/u/notes.txt"]}}},
     "profiling.tools.ncu.extra_args: '--log-file' is refused: --log-file chooses where"),
    ({"tools": {"nsys": {"reports": ["cuda_gpu_kern_sum", "../../x"]}}},
     "profiling.tools.nsys.reports: '../../x' is not a name"),
])
def test_profiling_config_errors_are_one_line(profiling, message):
    with pytest.raises(pconfig.ProfilingConfigError) as info:
        select(profiling)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


# A config names no file outside results/ for a tool to write, and no code for it to load:
# each tool module refuses the options that would.
@pytest.mark.parametrize(("tool", "words", "option"), [
    ("ncu", ["--log-file", "/home/u/notes.txt"], "--log-file"),
    ("ncu", ["--export=/x"], "--export"),
    ("ncu", ["-o", "/x"], "-o"),
    ("ncu", ["-o/x"], "-o"),
    ("ncu", ["-fo", "/x"], "-o"),  # -f takes no value: -f -o /x
    ("ncu", ["--log", "/x"], "--log-file"),  # ncu takes an unambiguous abbreviation
    ("ncu", ["-i", "old.ncu-rep"], "-i"),
    ("ncu", ["--section-folder", "/tmp/x"], "--section-folder"),  # Python rules ncu runs
    ("ncu", ["--section-folder-recursive=/tmp/x"], "--section-folder-recursive"),
    ("ncu", ["--section-folder-restore"], "--section-folder-restore"),
    ("ncu", ["--config-file-path", "/tmp/ncu.cfg"], "--config-file-path"),
    ("ncu", ["--preload-library", "/tmp/x.so"], "--preload-library"),
    ("ncu", ["--injection-path-64=/tmp/x"], "--injection-path-64"),
    ("nsys", ["--output=/home/u/x"], "--output"),
    ("nsys", ["-o", "/home/u/x"], "-o"),
    ("nsys", ["-e", "LD_PRELOAD=/tmp/x.so"], "-e"),
    ("nsys", ["--env-var=LD_PRELOAD=/tmp/x.so"], "--env-var"),
    ("nsys", ["--command-file", "/tmp/switches"], "--command-file"),
    ("nsys", ["--after-report-ready=/tmp/x.sh"], "--after-report-ready"),
    ("nsys", ["--gds-libs-path", "/tmp/lib"], "--gds-libs-path"),
])
def test_tool_options_that_write_elsewhere_load_code_or_set_the_environment_are_refused(
        tool, words, option):
    with pytest.raises(pconfig.ProfilingConfigError) as info:
        pconfig.settings(tool, {"extra_args": ["--cache-control", "all", *words]})
    message = str(info.value)
    assert message.startswith(f"profiling.tools.{tool}.extra_args: {words[0]!r} is refused: "
                              f"{option} ") and "\n" not in message


@pytest.mark.parametrize(("tool", "words", "refused"), [
    ("nsys", ["/bin/sh", "-c", "touch /tmp/x"], "'/bin/sh' is refused: a word that is no "),
    ("ncu", ["--", "/bin/sh"], "'--' is refused: it ends the tool's options"),
    ("ncu", ["-f", "/bin/sh"], "'/bin/sh' is refused: a word that is no "),
    ("nsys", ["--trace=cuda", "sh"], "'sh' is refused: a word that is no "),
    ("ncu", ["--set", "full", "extra"], "'extra' is refused: a word that is no "),
])
def test_a_word_that_would_end_the_tools_options_is_refused(tool, words, refused):
    """extra_args go before dlbench's own --output and the runner: a plain word that is no
    option's value, or "--", made the rest the program's (nsys profiling /bin/sh, its
    --output the shell's argument)."""
    with pytest.raises(pconfig.ProfilingConfigError) as info:
        pconfig.settings(tool, {"extra_args": words})
    assert str(info.value).startswith(f"profiling.tools.{tool}.extra_args: {refused}")


def test_tool_options_of_other_kinds_are_kept():
    ncu = ["--section", "MemoryWorkloadAnalysis", "--cache-control", "all", "-f", "-k", "foo",
           "-c", "5", "--import-source", "yes", "--rename-kernels", "off"]
    assert pconfig.settings("ncu", {"extra_args": ncu})["extra_args"] == ncu
    # --export and --stats write beside --output, in the profile's folder
    nsys = ["--cuda-memory-usage=true", "-t", "cuda,osrt", "--stats=true", "--export=sqlite"]
    assert pconfig.settings("nsys", {"extra_args": nsys})["extra_args"] == nsys


@pytest.mark.parametrize("report", ["/tmp/pwn", "../../x", "cuda_gpu_kern_sum:base"])
def test_nsys_reports_are_report_names_not_paths(report):
    """A report is a file name in the profile folder (<report>.parquet)."""
    with pytest.raises(pconfig.ProfilingConfigError) as info:
        pconfig.settings("nsys", {"reports": ["nvtx_sum", report]})
    assert str(info.value).startswith("profiling.tools.nsys.reports: ")


def test_ncu_args_file_options_are_refused_before_ncu_runs(tmp_path, doubles):
    """The args file is read when the job runs: its words meet extra_args's check there."""
    args_file = tmp_path / "ncu_args.txt"
    args_file.write_text("--cache-control all\n--section-folder /tmp/rules  # runs rules\n")
    settings = pconfig.settings("ncu", {"args_file": str(args_file)})
    cell = tiny_cell()
    out = profile_dir(tmp_path / "profiles", "ncu", cell)
    assert run.main("ncu", cell_json(cell), out, PYTHON, settings, None) == 1
    line = (out / "error.txt").read_text()
    assert line.startswith(f"ncu: args file {str(args_file)!r}: '--section-folder' is refused: "
                           "--section-folder ")
    assert line.endswith("(set profiling.tools.ncu.args_file)\n") and line.count("\n") == 1
    assert doubles() == []  # ncu never ran


def test_settings_overlay_the_defaults():
    ncu = pconfig.settings("ncu", {"binary": "/opt/ncu", "num_batches": 3})
    assert ncu["binary"] == "/opt/ncu" and ncu["num_batches"] == 3
    assert ncu["nvtx_include"] == ["measure/"] and ncu["clock_control"] == "base"
    assert pconfig.tool_settings({}, "nsys")["capture_range"] == "nvtx"


@pytest.mark.slow
def test_workflow_profiles_a_cell_apart_and_a_missing_tool_is_a_recorded_failure(tmp_path):
    """One Snakemake run: a deep_mnist CPU cell measured, profiled with torch.profiler, and
    with an nsys that is not installed. The nsys profile is a recorded failure (one line in
    its log and in its manifest); the measurement, the torch profile, the aggregate and the
    report, which shows both profiles, are all made and Snakemake exits 0."""
    import re

    import yaml

    repo = Path(__file__).resolve().parents[1]
    config = {
        "studies": {"tiny": {"grid": {
            "framework": "pytorch", "model": "deep_mnist", "phase": "training",
            "precision": "float32", "batch_size": 2, "device": "cpu", "num_batches": 5,
            "num_warmup_batches": 1}}},
        "profiling": {"select": [{"match": {"model": "deep_mnist"}, "tools": ["torch", "nsys"]}],
                      "tools": {"nsys": {"binary": "nsys-not-installed-here"}}},
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    proc = subprocess.run([PYTHON, "-m", "snakemake", "--snakefile", str(repo / "Snakefile"),
                           "--directory", str(tmp_path), "--configfile",
                           str(tmp_path / "config.yaml"), "--cores", "2"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Error in rule" not in proc.stderr
    (cell,) = study.expand_config(config)
    results = tmp_path / "results"
    (row,) = pq.read_table(results / "benchmarks.parquet").to_pylist()
    assert row["status"] == "ok" and row["peak_host_rss_bytes"] > 0, proc.stderr[-3000:]
    assert (results / systems.default_label() / "tiny" / "cells" / f"{cell.id}.monitor.parquet").is_file()
    here = systems.default_label()
    torch_dir = results / "profiles" / here / "torch" / "tiny" / cell.id
    assert json.loads((torch_dir / "profile.json").read_text())["status"] == "ok"
    assert (torch_dir / "trace.json").is_file()
    assert pq.read_table(torch_dir / "operators.parquet").num_rows > 0
    line = ("nsys: binary 'nsys-not-installed-here' not found on PATH "
            "(set profiling.tools.nsys.binary)")
    nsys_log = results / "profiles" / "logs" / here / "nsys" / "tiny" / f"{cell.id}.log"
    assert nsys_log.read_text().strip().splitlines()[-1] == line
    manifest = json.loads((results / "profiles" / here / "nsys" / "tiny" / cell.id /
                           "profile.json").read_text())
    assert (manifest["status"], manifest["error"]) == ("failed", line)
    profiles = summary.by_cell(summary.collect(results / "profiles"))[(here, "tiny", cell.id)]
    assert {(p.tool, p.status) for p in profiles} == {("torch", "ok"), ("nsys", "failed")}

    html = (results / "report" / "index.html").read_text()
    section = html[html.index('<section id="profiles">'):]
    section = section[:section.index("</section>")]
    assert "torch · ok" in section and "nsys · failed" in section
    assert line.replace("'", "&#x27;") in section
    links = re.findall(r'href="([^"#][^"]*)"', section)
    assert f"../profiles/{here}/torch/tiny/{cell.id}/trace.json" in links
    for href in links:
        assert (results / "report" / href).exists(), href
    assert re.search(r'id="chart-profile-[^"]*torch-tiny-[^"]+"', section)

    def dry_run(*args):
        done = subprocess.run([PYTHON, "-m", "snakemake", "--snakefile", str(repo / "Snakefile"),
                               "--directory", str(tmp_path), "--configfile",
                               str(tmp_path / "config.yaml"), "-n", *args],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout + done.stderr

    # Another system (machine, software stack) profiles its own cells, as it measures them.
    assert "profile_pytorch" in dry_run("--config", "system=other-box")
    # Profiles made before they were kept per system become this system's: none reruns.
    for tool in ("torch", "nsys"):
        (results / "profiles" / here / tool).rename(results / "profiles" / tool)
    (results / "profiles" / "logs" / here / "nsys").rename(results / "profiles" / "logs" / "nsys")
    output = dry_run()
    assert f"as system {here!r}" in output and "profile_pytorch" not in output
    assert (torch_dir / "trace.json").is_file() and nsys_log.is_file()


def _runner_parsers():
    """Each runner module's own parser (what ``python -m <module>`` parses)."""
    from dlbench.calibrate.runner import parser as calibrate
    from dlbench.comms.command_line import parser as comms
    from dlbench.llm.runner import parser as llm
    from dlbench.mxnet.runner import build_parser as mxnet
    from dlbench.ops.cli import build_parser as ops
    from dlbench.pytorch.runner import parser as pytorch

    return {"dlbench.pytorch": pytorch, "dlbench.mxnet": mxnet, "dlbench.ops": ops,
            "dlbench.calibrate": calibrate, "dlbench.llm": llm, "dlbench.comms": comms}


def test_every_runner_takes_the_monitor_flag_that_launches_and_profile_jobs_pass(tmp_path):
    """A config's monitor interval (through the launcher) and every profile job add
    --monitor_interval_ms to a cell's runner command: each runner of the shipped configs'
    cells (a model of each framework, operators, language model, calibration, collectives)
    must parse it (the language-model, calibration and collectives runners refused it,
    failing every such cell). Argument lists only: nothing runs."""
    import yaml

    from dlbench.profiling import commands

    repo = Path(__file__).resolve().parents[1]
    config = yaml.safe_load((repo / "config" / "config.yaml").read_text())
    comms = yaml.safe_load((repo / "config" / "examples" / "comms.yaml").read_text())
    cells = study.expand_config({**config, "studies": {**config["studies"],
                                                       **comms["studies"]}})
    parsers, seen = _runner_parsers(), {}
    for cell in cells:
        argv = commands.runner_argv(json.loads(cell.to_json()), tmp_path, "python",
                                    (None, None))
        seen.setdefault(argv[2], argv)
    assert set(seen) == set(parsers)  # every runner a shipped config reaches
    for module, argv in seen.items():
        args = parsers[module]().parse_args(argv[3:])
        assert args.monitor_interval_ms == 0.0, module


def test_profiles_of_the_layout_before_systems_move_under_the_system_never_over_one(tmp_path):
    """root/<tool>/<study>/<cell>/ (files right inside) moves to root/<system>/...; a system
    named like a tool (its profiles one level deeper) and a profile already there stay."""
    old = tmp_path / "torch" / "s" / "c1"
    old.mkdir(parents=True)
    (old / "capture.json").write_text("{}")
    (tmp_path / "logs" / "torch" / "s").mkdir(parents=True)
    (tmp_path / "logs" / "torch" / "s" / "c1.log").write_text("log\n")
    named_like_a_tool = tmp_path / "ncu" / "torch" / "s" / "c2"
    named_like_a_tool.mkdir(parents=True)
    (named_like_a_tool / "profile.json").write_text("{}")
    moves = pconfig.adopt("box", tmp_path)
    assert [to for _, to in moves] == [tmp_path / "box" / "torch" / "s" / "c1",
                                       tmp_path / "logs" / "box" / "torch" / "s" / "c1.log"]
    assert (tmp_path / "box" / "torch" / "s" / "c1" / "capture.json").is_file()
    assert named_like_a_tool.is_dir() and pconfig.adopt("box", tmp_path) == []
    again = tmp_path / "torch" / "s" / "c1"
    again.mkdir(parents=True)
    (again / "capture.json").write_text('{"later": 1}')
    assert pconfig.adopt("box", tmp_path) == []  # one there already: left where it is
    assert (tmp_path / "box" / "torch" / "s" / "c1" / "capture.json").read_text() == "{}"


def test_a_profiled_run_is_stopped_after_the_studys_timeout(tmp_path):
    """A hung profiled cell once held its job (and the workflow) for ever: its measurement
    is stopped after timeout_s, and so is each step of its profile, in one line."""
    from dlbench.profiling.commands import ProfileError, Step

    hang = Step("profile", [sys.executable, "-c", "import time; time.sleep(60)"])
    with pytest.raises(ProfileError) as info:
        run.run_step("torch", hang, tmp_path, timeout_s=1.0)
    assert str(info.value) == (
        f"torch: profile ({Path(sys.executable).name}) stopped after 1 s (the study's "
        "timeout_s)")
    done = Step("profile", [sys.executable, "-c", "print('ok')"])
    run.run_step("torch", done, tmp_path, timeout_s=30.0)


def test_a_hand_run_profile_with_an_incomplete_cell_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "dlbench.profiling", "run", "--tool", "torch",
                           "--cell", '{"study": "x"}', "--out_dir", str(tmp_path / "p")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].endswith(
        "error: --cell: no cell_id, kind, params (a cell as study.Cell.to_json writes it)")


def test_a_selection_of_a_precision_this_cpu_leaves_out_says_why(monkeypatch):
    """The docs' own selection (precision bfloat16) matched nothing on a CPU that emulates
    it, under a study with precisions: native, and the line did not say why."""
    from dlbench import cpu

    monkeypatch.setattr(study, "native_here", lambda params: params.get("precision") != "bfloat16")
    monkeypatch.setattr(cpu, "precision_native", lambda precision, *a: precision != "bfloat16")
    config = {"studies": {"n": {"precisions": "native", "grid": {
        "model": "deep_mnist", "device": "cpu", "precision": ["float32", "bfloat16"]}}},
        "profiling": {"select": [{"match": {"precision": "bf16"}, "tools": ["torch"]}]}}
    with pytest.raises(pconfig.ProfilingConfigError) as info:
        pconfig.select_jobs(config, study.expand_config(config), system="box")
    assert str(info.value) == (
        "profiling.select[0].match: matches no cell of any study: no cell has precision 'bf16' "
        "(the cells have: float32); this CPU emulates it, and a study with precisions: native "
        "leaves such cells out")


@pytest.mark.parametrize("operators", [[{"name": 1}], ["aten::mm"], {"name": "x"}])
def test_a_malformed_operator_table_is_one_line_naming_it(tmp_path, operators):
    """A row of other types ended in pyarrow's traceback, and the finish job failed
    without recording why."""
    source = tmp_path / "operators.json"
    source.write_text(json.dumps({"operators": operators}))
    with pytest.raises(tables.TableError) as info:
        torch_tool.torch_operators(source, tmp_path / "operators.parquet")
    assert str(info.value).startswith(f"{source}: not a torch.profiler operator table (")
    assert "\n" not in str(info.value)


def test_a_calibration_cells_profile_runs_the_profiles_iterations():
    """A calibration cell has no iteration axes: the profile's counts (ncu and hpcrun: one
    iteration) were dropped from its command line, and every kernel ran its default 3 + 10
    iterations under the tool. They are its runner's --iterations and --warmup now;
    other kinds keep them as axis flags."""
    from dlbench.calibrate.runner import parser as calibrate
    from dlbench.profiling import commands

    (cell,) = [c for c in study.expand_config({"studies": {"s": {
        "calibrate": True, "grid": {"model": "deep_mnist", "device": "cpu"}}}})
        if c.kind == "calibrate"]
    argv = commands.runner_argv(json.loads(cell.to_json()), Path("p"), "python", (1, 0))
    args = calibrate().parse_args(argv[3:])
    assert (args.iterations, args.warmup) == (1, 0)
    assert commands.iteration_flags("model", 1, 0) == []
    assert commands.iteration_flags("calibrate", None, None) == []
