"""PARAM's ``--ncu``/``--nsys`` in ``python -m dlbench.ops``: batches of the inputs that
ran, each launched under the tool with PARAM's options, the batch's config in shared
memory, and ``python -m dlbench.ops.batch`` running it.

Neither Nsight tool exists here: a stand-in executable (a real process on PATH) records
the command line it was given and runs the application part of it, as the tools do. What
ncu and nsys themselves record is not exercised (the GPU acceptance check does that).
"""

from __future__ import annotations

import json
import os
import sys
from multiprocessing import shared_memory
from pathlib import Path

import pytest
import torch

from dlbench import result as R
from dlbench.cellrun import CellError
from dlbench.ops import batch, nsight
from dlbench.ops.cli import bind_cuda, main

STAND_IN = '''#!{python}
import json, os, subprocess, sys
argv = sys.argv[1:]
out = argv[argv.index("--log-file" if "--log-file" in argv else "-o") + 1]
app = argv[argv.index({python!r}):]
proc = subprocess.run(app, capture_output=True, text=True)
with open(out, "w") as f:
    json.dump({{"argv": argv, "code": proc.returncode, "output": proc.stdout + proc.stderr}}, f)
sys.exit({exit_code})
'''


def stand_in(tmp_path: Path, name: str, exit_code: int = 0) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(STAND_IN.format(python=sys.executable, exit_code=exit_code))
    path.chmod(0o755)
    return path


def add_config(tmp_path: Path, *inputs_per_config: int) -> Path:
    """torch.add configs with the given numbers of inputs (each its own shape)."""
    configs = [{"input": [{"args": [{"type": "tensor", "dtype": "float", "shape": [4, k + 1]},
                                    {"type": "tensor", "dtype": "float", "shape": [4, k + 1]}]}
                          for k in range(n)]} for n in inputs_per_config]
    path = tmp_path / "add.json"
    path.write_text(json.dumps({"torch.add": {"config": configs}}))
    return path


def run_ops(tmp_path: Path, config: Path, *flags: str):
    out, result = tmp_path / "out", tmp_path / "result.json"
    code = main(["-c", str(config), "-o", str(out), "--output", str(result), "-l", "WARNING",
                 "--monitor_interval_ms=0", *flags])
    lines = ([json.loads(line) for line in (tmp_path / "out.json").read_text().splitlines()]
             if (tmp_path / "out.json").exists() else [])
    return code, lines, R.read(result)


@pytest.fixture
def on_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")


def test_ncu_runs_each_batch_of_a_builds_inputs_under_a_stand_in_with_params_options(
        tmp_path, on_path):
    """Three inputs of one build and one of another, two per batch: three launches, each
    with PARAM's ncu options, the args file's words, the batch's config (its inputs, with
    their ids, and the ncu counts) and a record in the JSON-lines file. ncu itself is not
    exercised: a stand-in runs the batch command."""
    stand_in(tmp_path, "ncu")
    args_file = tmp_path / "ncu_args.txt"
    args_file.write_text("--metrics dram__bytes.sum,lts__t_bytes.sum  # PARAM's example\n")
    code, lines, res = run_ops(tmp_path, add_config(tmp_path, 3, 1), "-i", "2", "--ncu",
                               "--run-batch-size", "2", "--ncu-args-file", str(args_file),
                               "--ncu-warmup", "2", "--ncu-iteration", "3")
    assert code == 0 and res["status"] == "ok" and len(res["measurements"]) == 4
    records = [line for line in lines if "ncu_file" in line]
    assert [(r["start_run_id"], r["end_run_id"]) for r in records] == [
        ("0|0|0", "0|0|1"), ("0|0|2", "0|0|2"), ("1|0|0", "1|0|0")]
    assert lines[-1].keys() == {"finish_time"}  # the launches come before the end
    first = records[0]
    inputs = first["config"]["op_info"]["config"][0]["input"]
    assert [i["id"] for i in inputs] == ["0", "1"] and inputs[1]["args"][0]["shape"] == [4, 2]
    assert first["config"]["run_options"]["warmup"] == 2
    assert first["config"]["run_options"]["iteration"] == 3
    assert first["config"]["op_name"] == "torch.add"
    assert first["config"]["config_build_id"] == "0|0"
    seen = json.loads(Path(first["ncu_file"]).read_text())
    # no --app-replay-buffer under ncu's default kernel replay (current ncu refuses it)
    assert seen["argv"][:10] == ["--log-file", first["ncu_file"], "--csv", "--nvtx",
                                 "--nvtx-include", "param_bench:measure/",
                                 "--nvtx-exclude", "l2_flush/", "--target-processes", "all"]
    assert seen["argv"][10:12] == ["--metrics", "dram__bytes.sum,lts__t_bytes.sum"]
    assert seen["argv"][12:15] == [sys.executable, "-m", "dlbench.ops.batch"]
    assert seen["argv"][15] == "-s" and seen["code"] == 0
    # the batch ran its two inputs, three measured calls each
    assert "input [0|0|0]" in seen["output"] and "input [0|0|1]" in seen["output"]
    assert "input [0|0|2]" not in seen["output"] and seen["output"].count("over 3") == 2
    assert len({r["ncu_file"] for r in records}) == 3  # one file per launch
    assert [(n["tool"], n["inputs"], n["returncode"]) for n in res["extra"]["nsight"]] == [
        ("ncu", 2, 0), ("ncu", 1, 0), ("ncu", 1, 0)]


DETAILS_LOG = """==PROF== Connected to process 4242 (/usr/bin/python3.12)
==PROF== Profiling "vectorized_elementwise_kernel": 0%....50%....100% - 1 pass
"ID","Process ID","Process Name","Host Name","thread Domain:Push/Pop_Range:PL_Type:PL_Value\
:CLR_Type:Color:Msg_Type:Msg","Kernel Name","Context","Stream","Block Size","Grid Size",\
"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value","Rule Name"
"0","4242","python3.12","node1","<default>:measure:param_bench:measure","vectorized_elementwise\
_kernel<4, add>","1","7","(128, 1, 1)","(4, 1, 1)","0","9.0","Command line profiler metrics",\
"gpu__time_duration.sum","usecond","2.46",""
"0","4242","python3.12","node1","<default>:measure:param_bench:measure","vectorized_elementwise\
_kernel<4, add>","1","7","(128, 1, 1)","(4, 1, 1)","0","9.0","Command line profiler metrics",\
"dram__bytes.sum","byte","1,048,576",""
"1","4242","python3.12","node1","<default>:measure:param_bench:measure","vectorized_elementwise\
_kernel<4, add>","1","7","(128, 1, 1)","(4, 1, 1)","0","9.0","Command line profiler metrics",\
"gpu__time_duration.sum","usecond","n/a",""
==PROF== Disconnected from process 4242
"""


def test_an_ncu_details_log_becomes_a_table_of_launches_and_metrics(tmp_path):
    """ncu's details page as PARAM's --ncu writes it (an NVTX column as --nvtx adds; ncu
    itself is not run): its messages around the table left out, IDs as
    numbers, each value as a number where it is one; a log without a table (no kernel
    profiled) is None, a CSV of another page is one line naming the file."""
    from dlbench.profiling.tables import TableError
    from dlbench.profiling.tools.ncu import ncu_details

    log_file = tmp_path / "run_ncu.log"
    log_file.write_text(DETAILS_LOG)
    table = ncu_details(log_file, tmp_path / "run_ncu.parquet")
    rows = table.to_pylist()
    assert [(r["ID"], r["Metric Name"], r["value"]) for r in rows] == [
        (0, "gpu__time_duration.sum", 2.46), (0, "dram__bytes.sum", 1048576.0),
        (1, "gpu__time_duration.sum", None)]
    assert rows[0]["Kernel Name"] == "vectorized_elementwise_kernel<4, add>"
    assert rows[0]["Metric Value"] == "2.46" and rows[0]["Metric Unit"] == "usecond"
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "run_ncu.parquet").equals(table)
    log_file.write_text("==PROF== Connected to process 1\n==WARNING== No kernels were "
                        "profiled.\n")
    assert ncu_details(log_file, tmp_path / "none.parquet") is None
    log_file.write_text('"ID","Process ID","Kernel Name","gpu__time_duration.sum"\n'
                        '"","","","nsecond"\n"0","1","k","2,000"\n')
    with pytest.raises(TableError, match=r"run_ncu.log: not ncu's details CSV \(no column "
                                         r"Metric Name, Metric Unit, Metric Value\)$"):
        ncu_details(log_file, tmp_path / "raw.parquet")


def test_each_ncu_launch_gets_its_logs_table_and_kernel_count(tmp_path, on_path):
    """A stand-in ncu that runs the batch and writes a details log (ncu itself is not
    exercised): the result's record of each launch names the Parquet table made beside
    the log and counts its kernel launches; a log without a table counts none."""
    path = stand_in(tmp_path, "ncu")
    path.write_text(path.read_text().replace(
        "    json.dump(", f"    f.write({DETAILS_LOG!r})\n    0 and json.dump("))
    code, _, res = run_ops(tmp_path, add_config(tmp_path, 1), "-i", "1", "--ncu")
    assert code == 0 and res["status"] == "ok"
    (launch,) = res["extra"]["nsight"]
    assert launch["kernels"] == 2 and launch["table"] == launch["file"].replace(".log",
                                                                                ".parquet")
    assert Path(launch["table"]).is_file()
    stand_in(tmp_path, "ncu")  # a log of no table
    code, _, res = run_ops(tmp_path, add_config(tmp_path, 1), "-i", "1", "--ncu")
    (launch,) = res["extra"]["nsight"]
    assert code == 0 and launch["kernels"] == 0 and "table" not in launch


@pytest.mark.parametrize(("extra", "buffered"), [
    ([], False), (["--replay-mode", "kernel"], False), (["--replay-mode", "application"], True),
    (["--replay-mode=app-range"], True), (["--replay-mode", "application", "--replay-mode",
                                           "kernel"], False)])
def test_ncu_gets_params_replay_buffer_only_under_application_replay(extra, buffered):
    """PARAM's --app-replay-buffer file applies to application replay alone: current ncu
    exits 1 when it is given under the default kernel replay (seen on an H100), so it
    is passed only where the args file chooses application replay (its last
    --replay-mode counts, as in ncu)."""
    options = nsight.TOOLS["ncu"].options("out.log", extra)
    assert (options[3:5] == ["--app-replay-buffer", "file"]) is buffered
    assert ("--app-replay-buffer" in options) is buffered
    assert options[-7:] == ["--nvtx", "--nvtx-include", "param_bench:measure/",
                            "--nvtx-exclude", "l2_flush/", "--target-processes", "all"]


def test_nsys_alone_after_no_measured_call_with_params_counts(tmp_path, on_path):
    """PARAM's way to profile without measuring: -w 0 -i 0 measures nothing and still runs
    the inputs under the tool, with nsys's own counts (5 and 10). nsys itself is not
    exercised: a stand-in runs the batch command."""
    stand_in(tmp_path, "nsys")
    code, lines, res = run_ops(tmp_path, add_config(tmp_path, 1), "-w", "0", "-i", "0",
                               "--nsys")
    assert res["status"] == "skipped" and not res["measurements"]
    (record,) = [line for line in lines if "nsys_file" in line]
    assert record["nsys_file"].endswith("_nsys.nsys-rep")
    assert record["config"]["run_options"]["warmup"] == 5
    assert record["config"]["run_options"]["iteration"] == 10
    seen = json.loads(Path(record["nsys_file"]).read_text())
    assert seen["argv"][:5] == ["profile", "-t", "cuda,nvtx", "-o", record["nsys_file"]]
    assert "over 10" in seen["output"] and seen["code"] == 0


def test_a_tool_that_fails_is_an_error_of_the_run_not_of_its_measurements(tmp_path, on_path):
    stand_in(tmp_path, "ncu", exit_code=3)
    code, lines, res = run_ops(tmp_path, add_config(tmp_path, 1), "--ncu")
    assert res["status"] == "ok" and len(res["measurements"]) == 1
    (error,) = res["extra"]["errors"]
    assert error["error"].startswith("torch.add: ncu exited with code 3 on inputs 0|0|0 to "
                                     "0|0|0 (its output: ")
    assert any(line.get("error") == error["error"] for line in lines)
    assert res["extra"]["nsight"][0]["returncode"] == 3


@pytest.mark.parametrize(("flags", "message"), [
    (["--ncu"], "--ncu: 'ncu' not found on PATH (give --ncu-bin)"),
    (["--nsys", "--nsys-bin", "/no/such/nsys"], "--nsys-bin /no/such/nsys: not an executable "
                                                "file"),
    (["--ncu", "--ncu-bin", "{ncu}", "--batch-cmd", "python -c 'unclosed"],
     "--batch-cmd: No closing quotation"),
])
def test_a_tool_that_cannot_run_is_refused_in_one_line_before_anything_is_measured(
        tmp_path, flags, message):
    ncu = stand_in(tmp_path, "ncu")
    flags = [flag.format(ncu=ncu) for flag in flags]
    code, lines, res = run_ops(tmp_path, add_config(tmp_path, 1), *flags)
    assert code != 0 and res["status"] == "failed" and res["error"] == message
    assert lines == [] and not res["measurements"]


def test_the_run_batch_size_must_be_positive(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["-c", str(add_config(tmp_path, 1)), "--ncu", "--run-batch-size", "0"])
    assert exit_.value.code == 2 and "--run-batch-size must be >= 1" in capsys.readouterr().err


def test_the_batchs_gpu_is_one_this_process_sees():
    assert nsight.visible_device(1, 2, None) == "1"
    assert nsight.visible_device(1, 2, "4, 6") == "6"  # through the parent's own list
    with pytest.raises(CellError, match=r"^--batch-cuda-device 1: no such GPU \(visible: 0 "
                                        r"to 0\)$"):
        nsight.visible_device(1, 1, None)
    with pytest.raises(CellError, match=r"\(visible: none\)$"):
        nsight.visible_device(0, 0, None)


# -- python -m dlbench.ops.batch ----------------------------------------------------------

def test_a_batch_on_cuda_alone_runs_on_the_gpu_its_launch_left_visible(monkeypatch):
    """The launcher writes device "cuda" (no index) into the batch's config and leaves the
    batch one GPU: the batch makes the current GPU its device. torch.set_device refuses a
    device without an index, which failed every --ncu batch on an H100; that GPU path
    is not exercised here (torch.cuda's calls are stood in for)."""
    chosen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    assert bind_cuda(torch.device("cuda")) == torch.device("cuda", 1)
    assert bind_cuda(torch.device("cuda:0")) == torch.device("cuda", 0)
    assert chosen == [torch.device("cuda", 1), torch.device("cuda", 0)]
    with pytest.raises(ValueError, match=r"^device cuda:2: only 2 GPU\(s\) visible$"):
        bind_cuda(torch.device("cuda:2"))


def batch_config(**changes) -> dict:
    config = {"op_name": "torch.mul", "config_build_id": "0|0",
              "op_info": {"input_data_generator": "PyTorch:DefaultDataGenerator", "config": [
                  {"build": None, "input": [
                      {"id": "0_1", "args": [{"type": "tensor", "dtype": "float",
                                              "shape": [3, 3]},
                                             {"type": "float", "value": 2.0}]},
                      {"id": "0_2", "args": [{"type": "tensor", "dtype": "float",
                                              "shape": [5]},
                                             {"type": "float", "value": 3.0}]}]}]},
              "run_options": {"device": "cpu", "pass_type": "forward", "warmup": 1,
                              "iteration": 2, "op_exec_mode": "discrete"}}
    config.update(changes)
    return config


def test_a_batch_runs_its_inputs_from_shared_memory_or_a_file(tmp_path, caplog):
    text = json.dumps(batch_config()).encode()
    shm = shared_memory.SharedMemory(create=True, size=len(text))
    try:
        shm.buf[:len(text)] = text
        with caplog.at_level("INFO", logger="dlbench.ops"):
            assert batch.main(["-s", shm.name]) == 0
    finally:
        shm.close()
        shm.unlink()
    assert "input [0|0|0_1]" in caplog.text and "input [0|0|0_2]" in caplog.text
    assert "batch: 2 input(s) ran" in caplog.text
    path = tmp_path / "batch.json"
    path.write_text(json.dumps(batch_config()))
    assert batch.run_batch(json.loads(path.read_text())) == 2
    assert batch.main(["-f", str(path)]) == 0


@pytest.mark.parametrize(("config", "message"), [
    ("[1]", "the batch config is an array, not an object"),
    ("{", "not JSON"),
    (json.dumps(batch_config(op_name="os.system")), "os.system"),
    (json.dumps(batch_config(op_name=None)), "config.op_name: missing or null"),
    (json.dumps(batch_config(run_options={"device": "cpu", "warmup": -1})),
     "run_options.warmup: -1 is no count of iterations"),
    (json.dumps(batch_config(run_options={"device": "tpu"})),
     "run_options.device: unknown device 'tpu'"),
    (json.dumps(batch_config(run_options={"device": "cpu", "compile": "jit"})),
     "run_options.compile: 'jit' is none of eager, "),
    pytest.param(json.dumps(batch_config(run_options={"device": "cuda"})),
                 "run_options.device: device cuda: no CUDA GPU is available to torch",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here")),
])
def test_a_batch_config_that_cannot_run_is_one_line_and_exit_code_2(tmp_path, capsys,
                                                                    config, message):
    path = tmp_path / "batch.json"
    path.write_text(config)
    assert batch.main(["-f", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dlbench.ops.batch: ") and message in err and "\n" not in err
