import json
import re

import pytest

from dlbench import cellrun
from dlbench import result as R


def ok_result(**cell):
    res = R.new_result(kind="model", cell={"framework": "pytorch", "model": "resnet18", **cell},
                       study="s", cell_id="c1")
    res["measurements"] = [R.measurement(name="resnet18", pass_="training",
                                         times_s=[0.2, 0.1, 0.3], items_per_iteration=8,
                                         flops_per_iteration=2e12, bytes_per_iteration=4e9)]
    return R.finish(res, "ok")


def test_measurement_derives_throughput_tflops_and_bandwidth_from_the_median():
    m = ok_result()["measurements"][0]
    assert m["time_s"]["median"] == 0.2
    assert m["throughput"] == pytest.approx(40.0)
    assert m["tflops"] == pytest.approx(10.0)
    assert m["gbps"] == pytest.approx(20.0)


def test_write_is_atomic_and_validated(tmp_path):
    path = tmp_path / "sub" / "cell.json"
    R.write(ok_result(), path)
    assert R.read(path)["status"] == "ok"
    assert [p.name for p in path.parent.iterdir()] == ["cell.json"]  # no temp file left
    bad = ok_result()
    bad["status"] = "great"
    with pytest.raises(ValueError, match="result field status: 'great' is not one of"):
        R.write(bad, path)
    assert R.read(path)["status"] == "ok"  # the earlier file is intact


def test_failed_write_leaves_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "cell.json"
    R.write(ok_result(), path)

    def broken_dump(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(R.os, "fsync", broken_dump)
    with pytest.raises(OSError):
        R.write(ok_result(batch_size=4), path)
    assert json.loads(path.read_text())["cell"].get("batch_size") is None
    assert [p.name for p in tmp_path.iterdir()] == ["cell.json"]


def test_read_rejects_foreign_json(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"hello": 1}')
    with pytest.raises(ValueError, match="not a dlbench result"):
        R.read(path)
    path.write_text("{")
    with pytest.raises(ValueError, match="x.json: not a JSON result file"):
        R.read(path)


@pytest.mark.parametrize(("exc", "oom"), [
    (MemoryError(), True),
    (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
    (RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"), True),
    (type("OutOfMemoryError", (RuntimeError,), {})("boom"), True),
    # a library's handle or workspace, out of device memory (a batch near the limit)
    (RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
     True),
    (RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"), True),
    (RuntimeError("CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx`"),
     False),
    (ValueError("shapes do not match"), False),
])
def test_oom_classification(exc, oom):
    assert cellrun.is_oom(exc) is oom


def test_recorded_turns_exceptions_into_results(tmp_path, capsys):
    out = tmp_path / "r.json"
    res = R.new_result(kind="model", cell={"model": "m"})
    with cellrun.recorded(res, str(out)):
        raise RuntimeError("CUDA out of memory.\nmore details")
    written = R.read(out)
    assert written["status"] == "oom"
    assert written["error"] == "RuntimeError: CUDA out of memory."
    assert '__results.status__="oom"' in capsys.readouterr().out
    res = R.new_result(kind="model", cell={"model": "m"})
    with cellrun.recorded(res, str(out)):
        raise cellrun.CellError("dataset /x has no class folders")
    assert R.read(out)["error"] == "dataset /x has no class folders"
    assert cellrun.exit_code(R.read(out)) == 1


def test_a_worker_exit_signalled_while_the_failure_is_logged_does_not_lose_it(
        tmp_path, monkeypatch):
    """PyTorch's DataLoader raises from its SIGCHLD handler whenever a worker has died: a
    second worker exiting while the first death's traceback is logged raised again there,
    and the cell's row lost its error (or the runner its result). Here a real child exits
    during the logging, under a handler that raises as DataLoader's does."""
    import signal
    import subprocess
    import sys
    import time

    def dataloader_like(signum, frame):
        raise RuntimeError("DataLoader worker (pid 7) is killed by signal: Killed.")

    def slow_log(*args, **kwargs):
        time.sleep(1.0)  # the child exits meanwhile

    previous = signal.signal(signal.SIGCHLD, dataloader_like)
    monkeypatch.setattr(cellrun.log, "error", slow_log)
    out = tmp_path / "r.json"
    res = R.new_result(kind="model", cell={"model": "m"})
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    try:
        with cellrun.recorded(res, str(out)):
            raise RuntimeError("DataLoader worker (pid(s) 6) exited unexpectedly")
    finally:
        signal.signal(signal.SIGCHLD, previous)
        child.wait()
    written = R.read(out)
    assert written["status"] == "failed"
    assert written["error"] == "RuntimeError: DataLoader worker (pid(s) 6) exited unexpectedly"


def test_a_result_that_cannot_be_written_goes_to_stderr_and_fails_the_cell(tmp_path, capsys):
    """A measurement is not lost to an output that fails at the end: one line, the whole
    result on standard error, exit 1."""
    (tmp_path / "file").write_text("")
    res = R.new_result(kind="model", cell={"model": "m"})
    with cellrun.recorded(res, str(tmp_path / "file" / "r.json")):
        res["status"] = "ok"
    err = capsys.readouterr().err
    shown = json.loads(next(line for line in err.splitlines() if line.startswith("{")))
    assert shown["status"] == "ok" and shown["cell"] == {"model": "m"}
    assert res["status"] == "failed" and cellrun.exit_code(res) == 1
    assert res["error"].startswith(f"the result could not be written to {tmp_path}/file/r.json")


def test_a_runners_output_is_checked_before_anything_runs(tmp_path):
    """--output: a folder, or a path under a file, is an argparse error naming it; a path
    in folders still to make, or none, is taken."""
    import argparse

    from dlbench import cli

    (tmp_path / "file").write_text("")
    with pytest.raises(argparse.ArgumentTypeError, match="is a folder: give the result file"):
        cli.result_path(str(tmp_path))
    with pytest.raises(argparse.ArgumentTypeError, match=f"^{tmp_path}/file is not a folder$"):
        cli.result_path(str(tmp_path / "file" / "r.json"))
    assert cli.result_path(str(tmp_path / "a" / "b" / "r.json")).endswith("r.json")
    assert cli.result_path("") == ""


# DLBS's log parser (dlbs/logparser.py with DictUtils.add): this pattern on every line, then
# json.loads of the value; a value that is not JSON raises there.
DLBS_LINE = re.compile(r"[ \t]*__(.+?(?=__[ \t]*[=]))__[ \t]*=(.+)")


def parse_like_dlbs(text):
    found = {}
    for line in text.splitlines():
        match = DLBS_LINE.match(line)
        if match:
            found[match.group(1)] = json.loads(match.group(2))
    return found


def test_the_summary_lines_parse_with_dlbs_own_rule(capsys):
    res = R.new_result(kind="model", cell={"model": "m"})
    res["measurements"] = [R.measurement(name="m", pass_="training", times_s=[0.1, 0.4, 0.1],
                                         items_per_iteration=4, throughput_unit="samples/s")]
    cellrun.print_dlbs_summary(R.finish(res, "ok", None))
    parsed = parse_like_dlbs(capsys.readouterr().out)
    assert parsed["results.status"] == "ok"
    # DLBS's pair: the mean time and the items over it (the result's own throughput is at
    # the median, 40/s here)
    assert parsed["results.time"] == pytest.approx(200.0)
    assert parsed["results.throughput"] == pytest.approx(20.0)
    assert res["measurements"][0]["throughput"] == pytest.approx(40.0)
    assert parsed["results.time_data"] == pytest.approx([100.0, 400.0, 100.0])
    # DLBS prints np.std(times) (ddof 0): 141.42 ms, where the sample's std is 173.2 ms
    assert parsed["results.time_std"] == pytest.approx(141.421356, rel=1e-6)
    assert "results.measurements" not in parsed  # one measurement: DLBS's lines as they are
    # Several (an op config's inputs): the lines are the first's and say so.
    res["measurements"].append(R.measurement(
        name="torch.mm|1|0", pass_="forward", times_s=[0.5], items_per_iteration=1,
        throughput_unit="calls/s"))
    res["measurements"][0]["op_name"] = "torch.add"
    cellrun.print_dlbs_summary(res)
    parsed = parse_like_dlbs(capsys.readouterr().out)
    assert parsed["results.measurements"] == 2
    assert parsed["results.measurement"] == "m torch.add training"
    assert parsed["results.time"] == pytest.approx(200.0)
    failed = R.finish(R.new_result(kind="model", cell={}), "failed", 'quote " and \\ back')
    cellrun.print_dlbs_summary(failed)
    parsed = parse_like_dlbs(capsys.readouterr().out)
    assert parsed == {"results.status": "failed", "results.status_msg": 'quote " and \\ back'}


@pytest.mark.parametrize("runner", ["pytorch", "mxnet", "llm", "ops", "comms", "calibrate"])
def test_every_runner_refuses_a_folder_as_its_output_before_it_runs(runner, tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "src"
    done = subprocess.run([sys.executable, "-m", f"dlbench.{runner}", "--output", str(tmp_path)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(src)})
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].endswith(
        f"error: argument --output: {tmp_path} is a folder: give the result file's path")
