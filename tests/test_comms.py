"""Collective-communication cells (dlbench.comms): message sizes and bandwidths as
nccl-tests and PARAM's comms.py define them, the runner on two gloo processes of this CPU
(NCCL on GPUs is the same code path with another backend; it is not exercised here), the
workflow into the table and the report."""

import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from dlbench import aggregate, axes, study
from dlbench import result as R
from dlbench.comms import sizes as S
from dlbench.report import comms_charts
from dlbench.report.data import prepare

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("collective", "ranks", "factor"), [
    ("all_reduce", 8, 1.75), ("all_reduce", 2, 1.0), ("all_gather", 8, 0.875),
    ("reduce_scatter", 4, 0.75), ("all_to_all", 2, 0.5), ("broadcast", 8, 1.0),
    ("all_reduce", 1, 0.0), ("reduce", 8, 1.0), ("pt2pt", 8, 1.0), ("gather", 4, 0.75),
    ("scatter", 8, 0.875)])
def test_bus_bandwidth_factors_are_nccl_tests(collective, ranks, factor):
    assert S.bus_factor(collective, ranks) == pytest.approx(factor)


def test_a_sweep_goes_by_the_factor_and_splits_buffers_evenly_among_ranks():
    from dlbench import kinds

    assert S.sweep(8, 1024, 4) == [8, 32, 128, 512]
    assert S.sweep(8, 8, 2) == [8] and S.sweep(9, 8, 2) == []
    # 8 bytes of float32 are 2 elements; all_gather among 3 ranks needs a multiple of 3.
    assert S.elements(8, "all_reduce", "float32", 3) == 2
    assert S.elements(8, "all_gather", "float32", 3) == 3
    assert S.elements(100, "reduce_scatter", "float16", 4) == 48
    assert S.elements(1, "broadcast", "float64", 2) == 1
    # PARAM's --sb: an additive step instead of the factor.
    assert S.sweep(1024, 4096, 2, 1024) == [1024, 2048, 3072, 4096]
    assert S.sweep_problem(8, 64, 6, "float32") == "6 is no multiple of float32's 4 bytes"
    assert S.sweep_problem(8, 2**28, 8, "int8") == (
        "8 gives 33,554,432 message sizes from 8 to 268435456 bytes (at most 1,024)")
    assert S.sweep_problem(8, 2**28, 0, "int8") is None
    with pytest.raises(study.ConfigError, match="study 'c': step_bytes: 6 is no multiple"):
        study.expand_config({"studies": {"c": {"kind": "comms", "grid": {"step_bytes": 6}}}})
    (cell,) = study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
        "step_bytes": 1024, "begin_size": 1024, "end_size": 8192}}}})
    assert "--sb=1024" in kinds.get("comms").command(cell.params, Path("x.json"), "python",
                                                     None)
    # Sizes that round to the same buffer are measured once.
    assert S.buffers([1, 2, 4, 8], "all_reduce", "float32", 2) == [1, 2]


def test_comms_cells_are_named_by_collective_and_ranks_and_checked_in_one_line():
    cells = study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
        "collective": ["all_reduce", "all_to_all"], "num_gpus": [1, 8]}}}})
    assert sorted(c.id.rsplit("_", 1)[0] for c in cells) == [
        "pytorch_all-reduce_float32_1x_gpu", "pytorch_all-reduce_float32_8x_gpu",
        "pytorch_all-to-all_float32_1x_gpu", "pytorch_all-to-all_float32_8x_gpu"]
    with pytest.raises(study.ConfigError, match="study 'c': begin_size: 4096 is above "
                                                 "end_size 1024: no message size"):
        study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
            "begin_size": 4096, "end_size": 1024}}}})
    with pytest.raises(study.ConfigError, match="collective: unknown value 'reduce_scatter_v'"):
        study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
            "collective": "reduce_scatter_v"}}}})


def test_params_base_collectives_are_the_single_tensor_ones_timed_here(tmp_path):
    """PARAM's all_gather_base and reduce_scatter_base (all_gather_into_tensor,
    reduce_scatter_tensor) are the all_gather and reduce_scatter cells and runs here: the
    same cell id in a study, the collective recorded under its name by the runner, which
    calls it by its current name (no deprecation warning)."""
    from dlbench.comms import runner

    def cell(name):
        (one,) = study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
            "collective": name, "num_gpus": 2}}}})
        return one

    assert cell("all_gather_base").id == cell("all_gather").id
    assert cell("reduce_scatter_base").params["collective"] == "reduce_scatter"
    out = tmp_path / "cell.json"
    with warnings.catch_warnings():  # torch 2.14 deprecates reduce_scatter_tensor's name
        warnings.simplefilter("error", FutureWarning)
        assert runner.main(["--device=cpu", "--collective", "reduce_scatter_base", "--b=64",
                            "--e=64", "--w=1", "--n=2", "--c=1", f"--output={out}"]) == 0
    res = R.read(out)
    assert res["status"] == "ok" and res["cell"]["collective"] == "reduce_scatter"
    assert [m["name"] for m in res["measurements"]] == ["reduce_scatter|64"]
    assert res["measurements"][0]["extra"]["validated"] is True


def test_sizes_read_with_units_as_nccl_tests_and_param_write_them():
    assert [S.parse_size(t) for t in ("8", "64K", "256M", "1G", "4KiB", "2MB", "3 m")] == [
        8, 65536, 268435456, 2**30, 4096, 2 * 2**20, 3 * 2**20]
    for text in ("12X", "1.5M", "", "M"):
        with pytest.raises(ValueError, match="is no size: bytes, or a whole number with K"):
            S.parse_size(text)


def test_the_runner_takes_params_long_flag_names_and_sizes_with_units(tmp_path, capsys):
    """PARAM's comms.py spellings (--begin-size 1K --end-size 4K --blocking 1
    --collectives --data-types --in-split ...) read as the short flags; a size it cannot
    read is argparse's one line naming the flag."""
    from dlbench.comms import runner

    out = tmp_path / "cell.json"
    assert runner.main(["--device=cpu", "--collectives", "all_reduce", "--data-types",
                        "float64", "--begin-size", "1K", "--end-size", "4K", "--blocking", "1",
                        "--w=1", "--n=2", f"--output={out}"]) == 0
    res = R.read(out)
    assert res["status"] == "ok"
    cell = res["cell"]
    assert (cell["begin_size"], cell["end_size"], cell["blocking"], cell["data_type"]) == (
        1024, 4096, True, "float64")
    assert [m["bytes_per_iteration"] for m in res["measurements"]] == [1024, 2048, 4096]
    with pytest.raises(SystemExit) as exc:
        runner.main(["--device=cpu", "--e", "12X"])
    assert exc.value.code == 2
    assert "argument --e/--end-size: '12X' is no size" in capsys.readouterr().err
    args = runner.parser().parse_args(["--collective=all_to_allv", "--in-split", "1,2",
                                       "--out-split", "3,4", "--sizes", "8,16"])
    assert (args.i, args.o, args.ss) == ("1,2", "3,4", "8,16")


def test_a_command_line_relying_on_a_default_unlike_params_is_told_which(tmp_path, caplog):
    """PARAM's comms.py sweeps to 64 bytes over 5 non-blocking iterations (a window of 100
    for point-to-point); here 256 MiB over 20 blocking ones. A command line that leaves
    them out is told each, with both values; given (any spelling), they are not named; a
    study's cell gives every flag."""
    from dlbench import kinds
    from dlbench.comms import command_line

    p = command_line.parser()

    def unlike(*words):
        return command_line.defaults_unlike_params(*command_line.checked(p, list(words)))

    assert unlike("--device=cpu") == (
        "--e 268435456 (PARAM's 64), --n 20 (PARAM's 5), --z 1 (PARAM's 0)")
    assert unlike("--device=cpu", "--end-size", "1M", "--num_iters=5", "--blocking", "0") == (
        "--z 0 issues --window 20 collectives a timed iteration (PARAM issues all --n of "
        "them, then waits once)")  # PARAM's --window is its point-to-point tests'
    assert unlike("--device=cpu", "--pt2pt", "pairwise", "--e", "64", "--n", "5",
                  "--window", "100", "--num_gpus", "2") == (
        "--pt2pt pairwise pairs every rank i of the first half with i + n/2, all at once "
        "(PARAM's, without --src-ranks/--dst-ranks: rank 0 with 1)")
    assert unlike("--device=cpu", "--pt2pt", "pairwise", "--e", "64", "--n", "5",
                  "--window", "100", "--src-ranks", "0", "--dst-ranks", "1",
                  "--num_gpus", "2") is None
    assert unlike("--device=cpu", "--pt2pt", "one2one", "--e", "64", "--n", "5",
                  "--num_gpus", "2") == (
        "--window 20 (PARAM's 100)")
    assert unlike("--device=cpu", "--e=64", "--n=5", "--z=0", "--window=100") is None
    (cell,) = study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
        "collective": "pt2pt", "device": "cpu", "num_gpus": 2}}}})
    argv = kinds.get("comms").command(cell.params, Path("x.json"), "python", None)[3:]
    assert unlike(*argv) is None
    import logging

    from dlbench.comms import runner

    caplog.set_level(logging.INFO)
    assert runner.main(["--device=cpu", "--e", "64", "--n", "2", "--w", "1",
                        f"--output={tmp_path / 'cell.json'}"]) == 0
    assert ("defaults here, unlike PARAM's comms.py: --z 1 (PARAM's 0); give them to measure "
            "as PARAM does") in caplog.messages


def test_sizes_given_instead_of_a_sweep_are_not_told_the_sweeps_end():
    """--ss (a list of sizes), or an all_to_allv's --i or --o (one exchange of those
    blocks), replaces the sweep: its end, --e, is no default they rely on; the other
    defaults are still said."""
    from dlbench.comms import command_line

    p = command_line.parser()

    def unlike(*words):
        return command_line.defaults_unlike_params(*command_line.checked(p, list(words)))

    rest = "--n 20 (PARAM's 5), --z 1 (PARAM's 0)"
    assert unlike("--device=cpu", "--ss", "64,128") == rest
    for flag in ("--i", "--o"):
        assert unlike("--device=cpu", "--collective", "all_to_allv", "--num_gpus", "2",
                      flag, "100,300") == rest
    assert unlike("--device=cpu", "--collective", "all_to_allv").startswith(
        "--e 268435456 (PARAM's 64), ")


def test_params_command_line_runs_as_it_is_with_its_backend_device_and_log_flags(
        tmp_path, capsys, caplog):
    """PARAM's README command line (its rendezvous flags, --backend, --device, --log) runs
    unchanged: the backend named is the one used and recorded (and in the cell id), the
    rendezvous flags are said to be unused, PARAM's cuda and rocm are the GPU, and a
    backend that cannot run the cell is one line naming --backend (runner and study)."""
    from dlbench.comms import command_line, runner
    from dlbench.pytorch import distributed

    out = tmp_path / "cell.json"
    assert runner.main(["--master-ip", "127.0.0.1", "--master-port", "29500", "--b", "8",
                        "--e", "64", "--n", "2", "--w", "1", "--f", "2", "--z", "1",
                        "--collective", "all_reduce", "--backend", "gloo", "--device", "cpu",
                        "--log", "INFO", "--nw-stack", "pytorch-dist",
                        f"--output={out}"]) == 0
    res = R.read(out)
    assert res["status"] == "ok" and res["cell"]["backend"] == "gloo"
    assert res["extra"]["backend"] == "gloo"
    said = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("--master-ip is not used: torchrun's rendezvous") for m in said)
    assert any(m.startswith("--master-port is not used") for m in said)
    # Every flag whose default differs from PARAM's was given: nothing said of them.
    assert not any(m.startswith("defaults here, unlike PARAM's") for m in said)
    p = command_line.parser()
    for words in (["--device", "cuda"], ["--device=rocm"]):
        assert command_line.checked(p, words)[0].device == "gpu"
    with pytest.raises(SystemExit):
        command_line.checked(p, ["--backend", "nccl", "--device", "cpu"])
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        "error: --backend nccl runs collectives on GPUs: a cell on device cpu takes gloo or "
        "ucc")
    with pytest.raises(study.ConfigError, match="study 'c': backend: nccl runs collectives "
                                                 "on GPUs"):
        study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
            "backend": "nccl", "device": "cpu"}}}})
    (gloo,) = study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
        "backend": "gloo", "num_gpus": 2}}}})
    assert gloo.id.startswith("pytorch_all-reduce_float32_2x_gloo_gpu_")
    assert "--backend=gloo" in axes.argv("comms", gloo.params)
    import torch.distributed as dist

    if not dist.is_ucc_available():
        with pytest.raises(Exception, match=r"backend ucc: this torch .* was built without "
                                            r"it \(torch.distributed.is_ucc_available\(\)"):
            distributed.available_backend("ucc", "cpu")


def test_params_num_coll_issues_that_many_per_iteration_as_a_window(tmp_path, capsys):
    """PARAM's --num-coll N (N collectives issued per iteration, waited for once): the
    non-blocking window of N, recorded so; beside --window, one line."""
    from dlbench.comms import runner

    out = tmp_path / "cell.json"
    assert runner.main(["--device=cpu", "--num-coll", "4", "--b=64", "--e=64", "--w=1",
                        "--n=2", f"--output={out}"]) == 0
    res = R.read(out)
    assert res["status"] == "ok"
    assert (res["cell"]["blocking"], res["cell"]["window"]) == (False, 4)
    assert res["extra"]["collectives_per_iteration"] == 4
    for argv, message in [(["--num-coll", "4", "--window=8"], "give one of them"),
                          (["--num-coll-per-iteration", "0"], "--num-coll must be >= 1")]:
        with pytest.raises(SystemExit) as exc:
            runner.main(["--device=cpu", *argv])
        assert exc.value.code == 2 and message in capsys.readouterr().err


def test_params_comma_lists_run_each_data_type_and_collective_in_turn(capsys, caplog):
    """PARAM's --collectives a,b --data-types x,y: each data type's collectives in turn
    (PARAM's order), each run printed as a single one is; with a result file, or a bad
    value anywhere in a list, one line before anything runs."""
    from dlbench.comms import runner

    runs, collectives = runner.listed_runs(["--collectives", "all_reduce,broadcast,",
                                            "--b=64", "--data-types=float32,int32"])
    assert collectives == 2 and runs == [
        ["--b=64", "--collective=all_reduce", "--data-type=float32"],
        ["--b=64", "--collective=broadcast", "--data-type=float32"],
        ["--b=64", "--collective=all_reduce", "--data-type=int32"],
        ["--b=64", "--collective=broadcast", "--data-type=int32"]]
    assert runner.listed_runs(["--collective", "reduce", "--e=8"]) == (
        [["--e=8", "--collective=reduce"]], 1)
    caplog.set_level("INFO", logger="dlbench.comms")
    assert runner.main(["--device=cpu", "--collectives", "all_reduce,all_gather",
                        "--data-types", "float32,float64", "--b=64", "--e=64", "--w=1",
                        "--n=2"]) == 0
    measured = [r.getMessage() for r in caplog.records if " among " in r.getMessage()]
    assert measured == [f"{c} of {t} among 1 rank(s) over gloo" for t in ("float32", "float64")
                        for c in ("all_reduce", "all_gather")]
    assert capsys.readouterr().out.count('__results.status__="ok"') == 4
    for argv, message in [
            (["--output=x.json"], "a result (--output, --study, --cell_id) is one "
                                  "collective's in one data type"),
            (["--pt2pt=one2one"], "no list of collectives beside it"),
            (["--data-types=float32,float8"], "argument --data-type/--data-types: invalid "
                                               "choice: 'float8'")]:
        with pytest.raises(SystemExit) as exc:
            runner.main(["--device=cpu", "--collectives=all_reduce,reduce", *argv])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and message in err and "collective 64 B" not in err


def test_a_flag_naming_no_value_is_refused_and_one_taken_no_notice_of_is_said(
        capsys, caplog):
    """An empty --collective is argparse's one line, not a run of the default collective;
    --window on a blocking collective and --root on one without a root run, each said
    unused in a line."""
    from dlbench.comms import runner

    for argv in (["--collective", ""], ["--collective="], ["--collectives=,"],
                 ["--data-types", ""]):
        with pytest.raises(SystemExit) as exc:
            runner.main(["--device=cpu", "--b=64", "--e=64", "--w=1", "--n=1", *argv])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and "invalid choice" in err and "COMMS-RES" not in err
    caplog.set_level("WARNING", logger="dlbench.comms")
    assert runner.main(["--device=cpu", "--b=64", "--e=64", "--w=1", "--n=1", "--window=50",
                        "--root=1"]) == 0
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        "--window 50 is not used: --z 1 waits for each collective (a window is --z 0's, "
        "and the point-to-point tests')",
        "--root 1 is not used: all_reduce has no root"]


def test_a_run_prints_params_comms_res_table_with_its_own_figures(tmp_path, capsys):
    """PARAM's COMMS-RES lines on stdout (a header, one line per size, --tag in the name),
    as scripts reading PARAM's output split them: total size, elements per rank (a piece
    for all_gather, as PARAM counts), the time percentiles and bandwidths of the result's
    own measurements."""
    from dlbench.comms import runner

    out = tmp_path / "cell.json"
    assert runner.main(["--device=cpu", "--collective=all_gather", "--b=1K", "--e=8K",
                        "--f=8", "--w=1", "--n=4", "--tag=rail0", f"--output={out}"]) == 0
    printed = capsys.readouterr().out.splitlines()
    heads = [line.split() for line in printed if line.strip().startswith("COMMS-RES ")]
    assert heads == [["COMMS-RES", "total-size", "(B)", "nElementsPerRank", "Time(us):p50",
                      "p75", "p95", "Min", "Max", "AlgBW(GB/s)", "BusBW(GB/s)",
                      "TotalTime(us):p50"]]
    rows = [line.split() for line in printed if "COMMS-RES-" in line]
    res = R.read(out)
    assert [r[0] for r in rows] == ["COMMS-RES-all_gather-float32-rail0"] * 2
    for row, m in zip(rows, res["measurements"], strict=True):
        assert int(row[1]) == m["bytes_per_iteration"] and int(row[2]) == m["extra"][
            "elements"]  # one process: its piece is the whole buffer
        assert float(row[3]) == pytest.approx(m["time_s"]["median"] * 1e6, abs=0.051)
        assert float(row[6]) == pytest.approx(m["time_s"]["min"] * 1e6, abs=0.051)
        assert float(row[8]) == pytest.approx(m["gbps"], abs=5e-4)
        assert float(row[10]) == 0.0
    from dlbench.comms import param_output

    assert param_output.elements_per_rank("reduce_scatter", 64, 4) == 16
    assert param_output.elements_per_rank("broadcast", 64, 4) == 64


def test_the_resource_monitor_covers_the_sweep_and_takes_the_launchers_flag(tmp_path):
    """A config's monitor interval and every profile job pass --monitor_interval_ms to the
    runner (before, the collectives' runner refused the flag and every such cell failed):
    the monitor samples the whole sweep, its summary in the result, its series beside it;
    0 turns it off."""
    import json

    from dlbench.comms import runner
    from dlbench.profiling import commands

    (cell,) = study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
        "num_gpus": 1, "device": "cpu", "end_size": 65536, "iterations": 40}}}})
    argv = commands.runner_argv(json.loads(cell.to_json()), tmp_path, "python", (None, None))
    assert argv[-1] == "--monitor_interval_ms=0"
    assert runner.parser().parse_args(argv[3:]).monitor_interval_ms == 0.0
    out = tmp_path / "cell.json"
    assert runner.main([*argv[3:-4], "--monitor_interval_ms=5", f"--output={out}"]) == 0
    res = R.read(out)
    summary = res["extra"]["monitor"]
    assert res["status"] == "ok" and summary["enabled"] and summary["sample_count"] >= 1
    assert (tmp_path / summary["series_file"]).exists()
    # its energy is the whole sweep's, said so: no samples per joule of the measured ones
    assert summary["window"].startswith("the whole sweep") and summary["items"] == 0.0
    assert summary["samples_per_joule"] is None
    assert runner.main([*argv[3:-4], "--monitor_interval_ms=0", f"--output={out}"]) == 0
    assert R.read(out)["extra"]["monitor"]["enabled"] is False


class _Event:
    """A CUDA event's stand-in: ``record()`` takes the next instant of ``clock``."""

    clock = iter(range(0, 10**6, 5))  # ms: each record 5 ms after the one before

    def __init__(self, enable_timing=False):
        self.at = None

    def record(self):
        self.at = next(_Event.clock)

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return end.at - self.at


def test_device_time_puts_events_around_each_call_and_gives_the_measured_ones(
        monkeypatch):
    """PARAM's --use-device-time: each iteration's collectives between two CUDA events (a
    stand-in here: no CUDA on this machine); the times are the last calls' (the measured
    ones) in seconds. A study's cell says it in its id and passes the switch; device cpu is
    one line."""
    import argparse

    import torch

    from dlbench import kinds
    from dlbench.comms import runner

    monkeypatch.setattr(torch.cuda, "Event", _Event)
    calls = []
    args = argparse.Namespace(collective="all_reduce", root=0, use_device_time=True, w=1,
                              n=2, window=20, kernel="none", graph_launches=0)
    monkeypatch.setattr(runner, "_step", lambda *a: (lambda batch: calls.append(batch)))
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: None, raising=False)
    (test,) = runner._timed_tests(args, (None, None), None, None, False, None, None)
    for batch in range(3):
        test.step(batch)
    assert calls == [0, 1, 2] and test.device_timed is test.step
    assert test.device_timed.times(2) == [0.005, 0.005]
    (cell,) = study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
        "num_gpus": 2, "device_time": True}}}})
    assert cell.id.rsplit("_", 1)[0] == "pytorch_all-reduce_float32_2x_devicetime_gpu"
    argv = kinds.get("comms").command(cell.params, Path("x.json"), "python", None)
    assert "--use-device-time" in argv
    assert runner.cell_of(runner.parser().parse_args(argv[3:]))["device_time"] is True
    (host,) = study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
        "num_gpus": 2}}}})
    argv = kinds.get("comms").command(host.params, Path("x.json"), "python", None)
    assert "--use-device-time" not in argv
    with pytest.raises(study.ConfigError, match="study 'c': device_time: CUDA events time "
                                                "the device: device gpu only"):
        study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
            "device": "cpu", "device_time": True}}}})


def test_device_time_holds_the_stream_while_the_host_launches_each_call(monkeypatch):
    """On an idle stream a start event fires before the call is queued, and the events
    would time the host's launch: a waiting kernel holds the stream first, for twice the
    recent launches (at least HOLD_MIN_S), its cycles from a rate measured once; a launch
    longer than its hold is counted. Stand-ins for the events and the waiting kernel: that
    the real hold takes the launch out of a collective's time on a GPU is not exercised."""
    import time

    import torch

    from dlbench import harness

    monkeypatch.setattr(torch.cuda, "Event", _Event)
    slept = []
    monkeypatch.setattr(torch.cuda, "_sleep", slept.append, raising=False)

    def step(launch_s):
        time.sleep(launch_s)  # the host's launch of the call

    timed = harness.DeviceTimedStep(step, 3)
    # Calibrated: the sleep kernel loaded, then HOLD_CALIBRATION_CYCLES between events
    # 5 ms apart (the stand-in's clock).
    rate = harness.HOLD_CALIBRATION_CYCLES / 0.005
    assert slept[1] == harness.HOLD_CALIBRATION_CYCLES
    for launch_s in (0.004, 0.0, 0.0):
        timed(launch_s)
    first, second, third = slept[2:]
    assert first == int(harness.HOLD_MIN_S * rate)  # nothing launched yet
    assert second >= int(0.008 * rate) and third >= int(0.008 * rate)  # twice 4 ms
    assert second == third and round(second / rate / harness.HOLD_MIN_S, 6).is_integer()
    assert timed.facts(3)["late_launches"] == 1  # the 4 ms launch outlasted 50 µs
    facts = timed.facts(2)
    assert facts["late_launches"] == 0 and facts["device_hold_s"] >= 0.008


def test_a_collective_cell_on_several_nodes_says_so_in_its_id_and_asks_slurm_for_them():
    """num_nodes 1 keeps the ids collective cells had before the axis; two nodes are one
    cluster job of two nodes with one task each (its GPUs on each), refused without a
    scheduler in one line."""
    from dlbench import workflow_support as support

    one, two = study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
        "num_gpus": 8, "num_nodes": [1, 2]}}}})
    assert one.id == "pytorch_all-reduce_float32_8x_gpu_4770ff82"  # as before num_nodes
    assert two.id.rsplit("_", 1)[0] == "pytorch_all-reduce_float32_8x_2nodes_gpu"
    assert support.cluster_resources(one) == {}
    assert support.cluster_resources(two) == {"nodes": 2, "tasks": 2, "mpi": "srun",
                                              "tasks_per_gpu": 0, "gres": "gpu:8"}
    assert support.gpus_of(two) == 16
    with pytest.raises(support.WorkflowConfigError,
                       match="study 'c': num_nodes: 2 nodes need a cluster scheduler"):
        support.check_single_node([one, two])


def test_a_non_blocking_cell_says_so_in_its_id_and_flags_and_blocking_ids_stay():
    """PARAM's --z 0 with a window of collectives; a blocking cell has no window (whatever
    the grid gives, one cell) and keeps the id it had before the axes existed."""
    from dlbench import kinds

    cells = study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
        "num_gpus": 8, "blocking": [True, False], "window": [20, 50]}}}})
    blocking = [c for c in cells if c.params["blocking"]]
    assert [c.id for c in blocking] == ["pytorch_all-reduce_float32_8x_gpu_4770ff82"]
    assert blocking[0].params["window"] is None
    windows = {c.params["window"]: c for c in cells if not c.params["blocking"]}
    assert sorted(windows) == [20, 50]
    assert windows[50].id.rsplit("_", 1)[0] == "pytorch_all-reduce_float32_8x_nonblocking_gpu"
    argv = kinds.get("comms").command(windows[50].params, Path("x.json"), "python", None)
    assert argv[argv.index("--z=0"):][:2] == ["--z=0", "--window=50"]
    argv = kinds.get("comms").command(blocking[0].params, Path("x.json"), "python", None)
    assert "--z=1" in argv and not any(a.startswith("--window") for a in argv)
    with pytest.raises(study.ConfigError, match="study 'c': window: must be >= 1, got 0"):
        study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
            "blocking": False, "window": 0}}}})


def test_non_blocking_issues_a_window_back_to_back_and_times_one_collective(
        tmp_path, monkeypatch):
    """The runner in this process (a group of one): each measured iteration issues the
    window's collectives without waiting (async_op), then waits for all; the time recorded
    is the window's divided among them. Each collective here holds the host 5 ms: one
    collective's time is 5 ms and more, a window of 4 would be 20 ms."""
    import time

    import torch.distributed as dist

    from dlbench.comms import runner

    issued = []
    real = dist.all_reduce

    def all_reduce(tensor, *args, async_op=False, **kwargs):
        if async_op:
            issued.append(tensor.numel())
            time.sleep(0.005)
        return real(tensor, *args, async_op=async_op, **kwargs)

    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    out = tmp_path / "cell.json"
    rc = runner.main(["--device=cpu", "--collective=all_reduce", "--b=64", "--e=64",
                      "--w=1", "--n=3", "--z=0", "--window=4", "--c=1",
                      f"--output={out}"])
    res = R.read(out)
    assert rc == 0 and res["status"] == "ok", res.get("error")
    assert res["cell"]["blocking"] is False and res["cell"]["window"] == 4
    assert issued == [16] * 4 * (1 + 3)  # a window in each warmup and measured iteration
    assert res["extra"]["collectives_per_iteration"] == 4
    (m,) = res["measurements"]
    assert m["iterations"] == 3 and m["extra"]["validated"] is True
    assert 0.005 <= m["time_s"]["median"] < 0.015


@pytest.mark.parametrize("blocking", [1, 0])
def test_blocking_waits_at_a_barrier_before_each_measured_iteration_outside_its_time(
        tmp_path, monkeypatch, blocking):
    """PARAM's --z 1: every rank meets at a barrier before each measured collective (here
    one holding the host 20 ms), and the time recorded leaves it out; --z 0 issues its
    windows back to back, no barrier between them."""
    import time

    import torch.distributed as dist

    from dlbench.comms import runner

    calls = []
    real_barrier, real_reduce = dist.barrier, dist.all_reduce

    def barrier(*args, **kwargs):
        calls.append("barrier")
        time.sleep(0.02)
        return real_barrier(*args, **kwargs)

    def all_reduce(tensor, *args, **kwargs):
        calls.append("all_reduce" if tensor.numel() == 16 else "other")
        return real_reduce(tensor, *args, **kwargs)

    monkeypatch.setattr(dist, "barrier", barrier)
    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    out = tmp_path / "cell.json"
    assert runner.main(["--device=cpu", "--collective=all_reduce", "--b=64", "--e=64",
                        "--w=1", "--n=3", f"--z={blocking}",
                        *([] if blocking else ["--window=2"]), f"--output={out}"]) == 0
    # After the barrier before the test (the times gathered after them left out):
    timed = [c for c in calls[calls.index("all_reduce"):] if c != "other"]
    measured = ["barrier", "all_reduce"] * 3 + ["barrier"] if blocking \
        else ["all_reduce"] * 6
    assert timed == ["all_reduce"] * (2 - blocking) + measured
    (m,) = R.read(out)["measurements"]
    assert m["time_s"]["max"] < 0.02


def test_point_to_point_pairs_ranks_as_param_and_refuses_what_cannot_pair():
    """one2one: rank 0 sends to rank 1, the others idle; pairwise: rank i with i + n/2 (on
    two nodes of 8 GPUs, each GPU with its counterpart on the other node)."""
    def peers(pattern, ranks):
        pairs = S.pt2pt_pairs(pattern, ranks)
        return [S.pt2pt_peer(pairs, r) for r in range(ranks)]

    assert peers("one2one", 4) == [(1, True), (0, False), (None, False), (None, False)]
    assert peers("pairwise", 4) == [(2, True), (3, True), (0, False), (1, False)]
    assert peers("pairwise", 16)[3] == (11, True)
    cells = study.expand_config({"studies": {"p": {"kind": "comms", "grid": {
        "collective": "pt2pt", "pt2pt": ["one2one", "pairwise"], "num_gpus": 8,
        "num_nodes": [1, 2], "blocking": False, "window": 64}}}})
    names = sorted(c.id.rsplit("_", 1)[0] for c in cells)
    assert names == ["pytorch_pt2pt_one2one_float32_8x_2nodes_gpu",
                     "pytorch_pt2pt_one2one_float32_8x_gpu",
                     "pytorch_pt2pt_pairwise_float32_8x_2nodes_gpu",
                     "pytorch_pt2pt_pairwise_float32_8x_gpu"]
    # blocking is the collectives' (None here); the window is the bandwidth tests'.
    assert {(c.params["blocking"], c.params["window"]) for c in cells} == {(None, 64)}
    (collective,) = study.expand_config({"studies": {"p": {"kind": "comms", "grid": {
        "pt2pt": "pairwise", "num_gpus": 2}}}})
    assert collective.params["pt2pt"] is None  # the pattern of an all_reduce: none
    with pytest.raises(study.ConfigError, match="study 'p': num_gpus: pt2pt pairwise pairs "
                                                "the processes: 3 is an odd count"):
        study.expand_config({"studies": {"p": {"kind": "comms", "grid": {
            "collective": "pt2pt", "pt2pt": "pairwise", "num_gpus": 3}}}})
    with pytest.raises(study.ConfigError, match="num_gpus: pt2pt needs two processes or "
                                                "more, not 1"):
        study.expand_config({"studies": {"p": {"kind": "comms", "grid": {
            "collective": "pt2pt", "num_gpus": 1}}}})


def test_params_src_and_dst_ranks_name_the_pairs_and_bad_ones_are_one_line(capsys):
    """PARAM's --src-ranks/--dst-ranks (a rank, a comma list kept in order with each rank
    once, an inclusive range start:end): src[i] sends to dst[i]; one given alone pairs with
    PARAM's default (rank 0 sends, rank 1 receives); what PARAM refuses (one2one with
    several, pairwise lists of unequal length or sharing a rank) and ranks outside the
    cell are one line naming the axis, in a study and on the runner."""
    from dlbench.comms import runner

    assert S.rank_list("0:3") == [0, 1, 2, 3] and S.rank_list("5,1,5") == [5, 1]
    assert S.pt2pt_pairs("pairwise", 8, "0:3", "7,6,5,4") == [(0, 7), (1, 6), (2, 5), (3, 4)]
    assert S.pt2pt_pairs("one2one", 8, "", "5") == [(0, 5)]
    assert S.pt2pt_pairs("one2one", 8, "6", "") == [(6, 1)]
    for pattern, src, dst, field, message in [
            ("one2one", "0,1", "2", "src_ranks", "one2one pairs one rank with one"),
            ("pairwise", "0:2", "4,5", "dst_ranks", "3 and 2 rank(s)"),
            ("pairwise", "0,1", "1,2", "dst_ranks", "rank 1 is in both"),
            ("one2one", "3", "3", "dst_ranks", "rank 3 is in both"),
            ("pairwise", "0:3", "4:8", "dst_ranks", "rank 8 is no rank of 8 process(es)"),
            ("one2one", "0-1", "", "src_ranks", "'0-1' is no list of ranks"),
            ("pairwise", "3:1", "4", "src_ranks", "'3:1' names no rank")]:
        with pytest.raises(S.PairsError, match=re.escape(message)) as exc:
            S.pt2pt_pairs(pattern, 8, src, dst)
        assert exc.value.field == field
        with pytest.raises(study.ConfigError, match=re.escape(f"study 'p': {field}: ")):
            study.expand_config({"studies": {"p": {"kind": "comms", "grid": {
                "collective": "pt2pt", "pt2pt": pattern, "num_gpus": 8, "src_ranks": src,
                "dst_ranks": dst}}}})
    (named,) = study.expand_config({"studies": {"p": {"kind": "comms", "grid": {
        "collective": "pt2pt", "pt2pt": "pairwise", "num_gpus": 8, "src_ranks": "0:3",
        "dst_ranks": "4:7"}}}})
    (own,) = study.expand_config({"studies": {"p": {"kind": "comms", "grid": {
        "collective": "pt2pt", "pt2pt": "pairwise", "num_gpus": 8}}}})
    assert named.id.rsplit("_", 1)[0] == "pytorch_pt2pt_pairwise_0-3to4-7_float32_8x_gpu"
    assert own.id.rsplit("_", 1)[0] == "pytorch_pt2pt_pairwise_float32_8x_gpu"
    assert named.id.rsplit("_", 1)[1] != own.id.rsplit("_", 1)[1]
    (reduced,) = study.expand_config({"studies": {"p": {"kind": "comms", "grid": {
        "collective": "all_reduce", "num_gpus": 8, "src_ranks": "0:3"}}}})
    assert reduced.params["src_ranks"] is None  # an all_reduce's pairs: none
    for argv, message in [
            (["--collective=all_reduce", "--src-ranks=1"], "--src-ranks names the ranks of "
                                                           "pt2pt or incast, not of "
                                                           "all_reduce"),
            (["--pt2pt=one2one", "--dst-ranks=a"], "--dst-ranks 'a' is no list of ranks"),
            (["--pt2pt=pairwise", "--num_gpus=4", "--src-ranks=0:1", "--dst-ranks=2:4"],
             "--dst-ranks: rank 4 is no rank of 4 process(es)")]:
        with pytest.raises(SystemExit) as exc:
            runner.main(["--device=cpu", *argv])
        assert exc.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "grid", "field", "message"), [
    (["--pt2pt", "one2one", "--num_gpus", "1"], {"collective": "pt2pt", "num_gpus": 1},
     "num_gpus", "pt2pt needs two processes or more, not 1"),
    (["--collective", "incast", "--num_gpus", "1"], {"collective": "incast", "num_gpus": 1},
     "num_gpus", "incast needs two processes or more, not 1"),
    (["--collective", "multicast", "--num_gpus", "1"],
     {"collective": "multicast", "num_gpus": 1}, "num_gpus",
     "multicast needs two processes or more, not 1"),
    (["--pt2pt", "pairwise", "--num_gpus", "3"],
     {"collective": "pt2pt", "pt2pt": "pairwise", "num_gpus": 3}, "num_gpus",
     "pt2pt pairwise pairs the processes: 3 is an odd count")])
def test_pairs_that_cannot_form_without_rank_lists_are_argparses_line_as_in_a_study(
        argv, grid, field, message, capsys):
    """A pattern, incast or multicast that cannot pair its processes, no --src-ranks or
    --dst-ranks given, is refused before any process starts, in one line naming the flag,
    with the words a study's check gives."""
    from dlbench.comms import runner

    with pytest.raises(study.ConfigError, match=re.escape(f"study 'p': {field}: {message} "
                                                          "(num_gpus x num_nodes)")):
        study.expand_config({"studies": {"p": {"kind": "comms", "grid": grid}}})
    with pytest.raises(SystemExit) as exc:
        runner.main(["--device=cpu", "--e=64", "--n=1", "--w=0", *argv])
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert err.splitlines()[-1] == (f"python -m dlbench.comms: error: --{field}: {message} "
                                    "(--num_gpus x --num_nodes)")


def test_incast_and_multicast_take_params_ranks_leaving_the_root_out_in_one_line_each(
        capsys):
    """PARAM's incast (src_ranks, else every rank, to the root) and multicast (the root to
    dst_ranks, else every rank): the root left out of its peers; what leaves no peer, or
    names a rank outside the cell, one line naming the axis; ids say the peers named and
    a root other than 0; no compute kernel beside them; the root's link's bytes per size."""
    from dlbench.comms import runner

    assert S.fan_peers("incast", 4, 0) == [1, 2, 3]
    assert S.fan_peers("multicast", 8, 3, dst="0:5") == [0, 1, 2, 4, 5]
    assert S.fan_peers("incast", 8, 2, src="6,2,1", dst="7") == [6, 1]  # dst: not incast's
    assert S.bus_factor("incast", 8) == S.bus_factor("multicast", 8) == 1.0
    for collective, root, src, dst, field, message in [
            ("incast", 0, "0", "", "src_ranks", "'0' names the root (0) alone"),
            ("multicast", 1, "", "1:9", "dst_ranks", "rank 8 is no rank of 8 process(es)"),
            ("incast", 0, "x", "", "src_ranks", "'x' is no list of ranks")]:
        with pytest.raises(S.PairsError, match=re.escape(message)) as exc:
            S.fan_peers(collective, 8, root, src, dst)
        assert exc.value.field == field
        with pytest.raises(study.ConfigError, match=re.escape(f"study 'f': {field}: ")):
            study.expand_config({"studies": {"f": {"kind": "comms", "grid": {
                "collective": collective, "num_gpus": 8, "root": root, "src_ranks": src,
                "dst_ranks": dst}}}})
    with pytest.raises(study.ConfigError, match=re.escape(
            "study 'f': num_gpus: incast needs two processes or more, not 1")):
        study.expand_config({"studies": {"f": {"kind": "comms", "grid": {
            "collective": "incast", "num_gpus": 1}}}})
    cells = study.expand_config({"studies": {"f": {"kind": "comms", "grid": {
        "collective": ["incast", "multicast"], "num_gpus": 8, "root": 2,
        "src_ranks": "4:7", "compute_kernel": "gemm"}}}})
    assert sorted(c.id.rsplit("_", 1)[0] for c in cells) == [
        "pytorch_incast_root2_from4-7_float32_8x_gpu",
        "pytorch_multicast_root2_float32_8x_gpu"]
    assert {c.params["compute_kernel"] for c in cells} == {None}
    for argv, message in [
            (["--collective=multicast", "--src-ranks=1"], "--src-ranks names the ranks of "
                                                          "pt2pt or incast, not of multicast"),
            (["--collective=incast", "--num_gpus=2", "--root=1", "--src-ranks=1"],
             "--src-ranks: '1' names the root (1) alone"),
            (["--collective=incast", "--kernel=gemm"], "--kernel gemm: incast "
                                                       "(point-to-point messages) runs "
                                                       "without a compute kernel")]:
        with pytest.raises(SystemExit) as exc:
            runner.main(["--device=cpu", *argv])
        assert exc.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("collective", ["pt2pt", "incast", "multicast"])
def test_the_runner_pairs_ranks_by_the_rule_the_study_checks(collective, tmp_path,
                                                              monkeypatch):
    """The runner's pairs (point-to-point, an incast's or multicast's peers) are those of
    sizes.message_pairs, the study's and the command line's rule: what it says cannot run
    is the cell's one line (the runner called past the command line's checks)."""
    from dlbench.comms import runner
    from dlbench.comms.command_line import parser

    calls = []

    def message_pairs(collective, pattern, ranks, root, src="", dst=""):
        calls.append((collective, pattern, ranks, root, src, dst))
        raise S.PairsError("dst_ranks", "no pairs by this rule")

    monkeypatch.setattr(S, "message_pairs", message_pairs)
    out = tmp_path / "cell.json"
    argv = ["--device=cpu", f"--collective={collective}", "--root=0", "--e=64", "--n=1",
            "--w=0", f"--output={out}"]
    args = parser().parse_args(argv)
    assert runner._run(args, argv) != 0
    doc = json.loads(out.read_text())
    assert (doc["status"], doc["error"]) == ("failed", "no pairs by this rule")
    assert calls == [(collective, args.pt2pt, 1, 0, "", "")]


def test_an_incast_row_from_the_wrong_sender_fails_the_roots_check():
    """The root's rows hold each sender's pattern: rows swapped (a message delivered into
    another sender's place) fail; a multicast receiver holds the root's."""
    import torch

    from dlbench.comms import validation as V

    count, peers = 40, (1, 3)
    rows = torch.zeros(2, count)
    for j, peer in enumerate(peers):
        rows[j].copy_(V._sent("incast", torch.arange(count), peer, 4, count))
    assert V.check("incast", (torch.zeros(count), rows), 0, 4, root=0, peers=peers).wrong == 0
    swapped = V.check("incast", (None, rows.flip(0)), 0, 4, root=0, peers=peers)
    assert swapped.wrong > 0 and swapped.elements == 2 * count
    assert V.check("incast", (torch.zeros(count), None), 2, 4, peers=peers).elements == 0
    got = V._sent("multicast", torch.arange(count), 2, 4, count)
    assert V.check("multicast", (None, got), 0, 4, root=2, peers=(0, 1)).wrong == 0
    assert V.check("multicast", (None, got), 0, 4, root=1, peers=(0, 2)).wrong > 0


def test_comm_groups_split_the_ranks_as_params_multi_comms_and_refuse_what_cannot_split(
        capsys):
    """PARAM's --multi-comms N: rank r in communicator r mod N, each running the collective
    among its members at once; the count must divide the processes; a root is one of a
    group's ranks; the id says the groups; point-to-point cells and incast name their own
    ranks (no groups)."""
    from dlbench.comms import runner

    assert S.group_members(2, 8) == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert S.group_members(8, 16)[3] == [3, 11]  # on two nodes of 8: one GPU per node
    assert S.groups_problem(4, 8) is None and S.groups_problem(1, 3) is None
    cells = study.expand_config({"studies": {"g": {"kind": "comms", "grid": {
        "collective": ["all_reduce", "pt2pt", "incast"], "num_gpus": 8, "comm_groups": 4,
        "root": 1}}}})
    assert sorted((c.id.rsplit("_", 1)[0], c.params["comm_groups"]) for c in cells) == [
        ("pytorch_all-reduce_float32_8x_4groups_gpu", 4),
        ("pytorch_incast_root1_float32_8x_gpu", None),
        ("pytorch_pt2pt_one2one_float32_8x_gpu", None)]
    for grid, message in [
            ({"num_gpus": 4, "comm_groups": 3}, "comm_groups: 4 process(es) do not split into "
                                                "3 groups of one size"),
            ({"num_gpus": 8, "comm_groups": 4, "collective": "reduce", "root": 2},
             "root: 2 is no rank of 2 process(es): the root is one of 0 to 1 (each of "
             "comm_groups)")]:
        with pytest.raises(study.ConfigError, match=re.escape(f"study 'g': {message}")):
            study.expand_config({"studies": {"g": {"kind": "comms", "grid": grid}}})
    for argv, message in [
            (["--num_gpus=4", "--multi-comms=3"], "--multi-comms 3: 4 process(es) do not "
                                                  "split into 3 groups of one size "
                                                  "(--num_gpus x --num_nodes; --multi-comms "
                                                  "must divide them)"),
            (["--num_gpus=4", "--multi-comms=2", "--pt2pt=one2one"],
             "--multi-comms: pt2pt names its own ranks"),
            (["--num_gpus=4", "--multi-comms=2", "--collective=scatter", "--root=2"],
             "--root 2 is no rank of 2 process(es)")]:
        with pytest.raises(SystemExit) as exc:
            runner.main(["--device=cpu", *argv])
        assert exc.value.code == 2 and message in capsys.readouterr().err


def test_a_point_to_point_message_is_checked_against_its_senders_pattern():
    import torch

    from dlbench.comms import validation as V

    sent = (torch.empty(40, dtype=torch.bfloat16), torch.empty(40, dtype=torch.bfloat16))
    got = (torch.empty(40, dtype=torch.bfloat16), torch.empty(40, dtype=torch.bfloat16))
    V.fill("pt2pt", sent, 3, 2)
    V.fill("pt2pt", got, 5, 2)
    assert got[1].abs().sum() == 0  # what a rank receives is cleared first
    got[1].copy_(sent[0])
    assert V.check_pt2pt(got, 5, 3) == V.Check(5, 0, 40)
    assert V.check_pt2pt(got, 5, 4).wrong == 40  # not what rank 4 sends
    got[1][17] = 0
    assert V.check_pt2pt(got, 5, 3) == V.Check(5, 1, 40, 17, 0.0, float((3 + 17) % 16 + 1))
    assert V.check_pt2pt(got, 6, None) == V.Check(6, 0, 0)  # a rank without a peer


def test_a_multi_node_collective_outside_a_slurm_job_is_a_failed_result_in_one_line(tmp_path):
    """What srun would start is not exercised here (tests/test_slurm_two_nodes.py runs it):
    outside a Slurm job the runner records why it cannot start, and no worker starts."""
    out = tmp_path / "cell.json"
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("SLURM")}
    proc = subprocess.run([sys.executable, "-m", "dlbench.comms", "--device=cpu",
                           "--num_nodes=2", "--e=64", f"--output={out}"], env=env,
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 1
    res = R.read(out)
    R.validate(res)
    assert res["status"] == "failed" and res["cell"]["num_nodes"] == 2
    assert res["error"].startswith("num_nodes 2 needs a Slurm job of 2 nodes")
    assert "torch.distributed.run" not in proc.stderr


def test_the_chart_counts_processes_on_all_nodes_and_tells_node_counts_apart():
    """4 processes as 4 on one node and as 2 on each of 2 nodes are one colour (processes)
    and two line styles (nodes); a row from before num_nodes counts as one node."""
    def row(cell, gpus, nodes, size, seconds):
        return {"cell_id": cell, "source": f"{cell}.json", "study": "net", "kind": "comms",
                "status": "ok", "throughput": 1 / seconds, "name": f"all_reduce|{size}",
                "pass": "collective", "op_name": "all_reduce", "collective": "all_reduce",
                "num_gpus": gpus, "num_nodes": nodes, "system": "a", "device": "gpu",
                "data_type": "float32", "framework": "pytorch", "bytes_per_iteration": size,
                "time_median_s": seconds, "time_p95_s": seconds * 1.1,
                "gbps": size / seconds / 1e9, "bus_gbps": 1.5 * size / seconds / 1e9}

    frame = prepare(pd.DataFrame([
        row("one", 4, 1, 1024, 1e-5), row("one", 4, 1, 4096, 2e-5),
        row("two", 2, 2, 1024, 3e-5), row("two", 2, 2, 4096, 5e-5),
        row("old", 2, None, 1024, 1e-5)]))
    data = comms_charts.comms_frame(frame)
    by_cell = data.groupby("cell")[["ranks", "num_nodes"]].first()
    assert by_cell.to_dict("index") == {"a/one": {"ranks": 4, "num_nodes": 1},
                                        "a/two": {"ranks": 4, "num_nodes": 2},
                                        "a/old": {"ranks": 2, "num_nodes": 1}}
    figure = comms_charts.bandwidth_figure(frame)
    assert ("num_nodes", "nodes") in [(c.field, c.title) for c in figure.table.columns]
    assert "nodes" in json.dumps(figure.chart.to_dict())
    # Two sweeps of one collective on as many processes, apart only in their step and in
    # validation: each its own line (a place in the chart and a column of its table).
    sweeps = prepare(pd.DataFrame([
        {**row("by2", 4, 1, size, 1e-5), "step_factor": 2, "validate": False}
        for size in (1024, 2048, 4096)] + [
        {**row("by4", 4, 1, size, 2e-5), "step_factor": 4, "validate": True}
        for size in (1024, 4096)]))
    figure = comms_charts.bandwidth_figure(sweeps)
    placed = [c.field for c in figure.table.columns]
    assert "step_factor" in placed and "validate" in placed
    # PARAM's default sweep, 8 B to 256 MiB: nine sizes labelled, evenly on the log axis,
    # the last among them (a tick at each of its 26 sizes overlapped, and Vega hid labels
    # of its own choosing); sizes bunched near 1 KB beside it take no more labels.
    sizes = [8 * 2**k for k in range(26)]
    sweep = prepare(pd.DataFrame([row("full", 4, 1, size, 1e-5) for size in sizes]))
    spec = comms_charts.bandwidth_figure(sweep).chart.to_dict()
    ticks = {json.dumps([float(v) for v in values]) for values in _axis_values(spec)}
    want = [8 * 2**k for k in (0, 3, 6, 9, 12, 15, 18, 21, 25)]
    assert ticks == {json.dumps([float(v) for v in want])}
    assert '"labelOverlap": false' in json.dumps(spec)  # Vega hid 256 KiB beside 1 MiB
    assert comms_charts.size_ticks(sorted({*sizes, *range(1000, 1030)})) == want
    assert comms_charts.size_ticks([8, 16]) == [8, 16]


def _axis_values(spec):
    """Every explicit tick list in a Vega-Lite spec."""
    if isinstance(spec, dict):
        if isinstance(spec.get("axis"), dict) and "values" in spec["axis"]:
            yield spec["axis"]["values"]
        for value in spec.values():
            yield from _axis_values(value)
    elif isinstance(spec, list):
        for value in spec:
            yield from _axis_values(value)


def test_one_process_has_no_bus_bandwidth_to_chart():
    """A one-process cell's bus bandwidth (0 by definition) is null in the chart's data,
    beside a two-process cell's; with one-process cells only, the figure is the time
    panel alone."""
    def row(cell, gpus, size, seconds):
        return {"cell_id": cell, "source": f"{cell}.json", "study": "net", "kind": "comms",
                "status": "ok", "throughput": 1 / seconds, "name": f"all_reduce|{size}",
                "pass": "collective", "op_name": "all_reduce", "collective": "all_reduce",
                "num_gpus": gpus, "num_nodes": 1, "system": "a", "device": "gpu",
                "data_type": "float32", "framework": "pytorch", "bytes_per_iteration": size,
                "time_median_s": seconds, "time_p95_s": seconds * 1.1,
                "gbps": size / seconds / 1e9,
                "bus_gbps": S.bus_factor("all_reduce", gpus) * size / seconds / 1e9}

    both = prepare(pd.DataFrame([row("one", 1, 1024, 1e-5), row("two", 2, 1024, 2e-5)]))
    data = comms_charts.comms_frame(both).set_index("cell")
    assert pd.isna(data.loc["a/one", "busbw_gbps"])
    assert data.loc["a/two", "busbw_gbps"] == pytest.approx(1024 / 2e-5 / 1e9)
    assert "vconcat" in comms_charts.bandwidth_figure(both).chart.to_dict()
    alone = prepare(pd.DataFrame([row("one", 1, size, 1e-5) for size in (1024, 4096)]))
    spec = json.dumps(comms_charts.bandwidth_figure(alone).chart.to_dict())
    assert "vconcat" not in spec and "bus bandwidth" not in spec and "median time" in spec
    # Two processes split into two communicators of one (comm_groups 2): each collective
    # is one process's, its bus bandwidth none; two groups of two are coloured as two.
    groups = prepare(pd.DataFrame([{**row("split", 2, 1024, 1e-5), "comm_groups": 2,
                                    "bus_gbps": 0.0},
                                   {**row("pairs", 4, 1024, 2e-5), "comm_groups": 2}]))
    data = comms_charts.comms_frame(groups).set_index("cell")
    assert pd.isna(data.loc["a/split", "busbw_gbps"])
    assert (data.loc["a/split", "ranks"], data.loc["a/pairs", "ranks"]) == (1, 2)
    assert data.loc["a/pairs", "busbw_gbps"] > 0


def test_a_latency_test_has_no_bus_bandwidth_panel_and_the_dropdowns_stay_one_set():
    """Point-to-point latency rows (no bandwidth) chart their times only: the bus bandwidth
    panels are those of the tests that have one. Systems beyond a few line styles are a
    dropdown; one whose cells have no bus bandwidth (one process) keeps its place in the
    bus bandwidth's dropdown, the same as the time's."""
    def row(cell, system, collective, test, gpus, seconds, bus):
        size = 4096
        gbps = size / seconds / 1e9 if bus else None
        return {"cell_id": cell, "source": f"{cell}.json", "study": "net", "kind": "comms",
                "status": "ok", "throughput": 1 / seconds, "name": f"{collective}|{size}",
                "pass": test, "op_name": collective, "collective": collective,
                "num_gpus": gpus, "num_nodes": 1, "system": system, "device": "gpu",
                "data_type": "float32", "framework": "pytorch", "bytes_per_iteration": size,
                "time_median_s": seconds, "time_p95_s": seconds * 1.1,
                "gbps": gbps, "bus_gbps": gbps}

    pt2pt = [row("p", "a", "pt2pt", "latency", 2, 1e-5, False),
             row("p", "a", "pt2pt", "unidirectional", 2, 2e-5, True)]
    spec = comms_charts.bandwidth_figure(prepare(pd.DataFrame(pt2pt))).chart.to_dict()
    bus, time = spec["vconcat"]
    assert bus["facet"]["sort"] == ["pt2pt unidirectional"]
    assert [r["panel"] for r in spec["datasets"][bus["data"]["name"]]] == [
        "pt2pt unidirectional"]
    assert time["facet"]["sort"] == ["pt2pt latency", "pt2pt unidirectional"]
    # a latency row of a result made before the runner left its bandwidths null
    old = [row("p", "a", "pt2pt", "latency", 2, 1e-5, True), pt2pt[1]]
    spec = comms_charts.bandwidth_figure(prepare(pd.DataFrame(old))).chart.to_dict()
    assert spec["vconcat"][0]["facet"]["sort"] == ["pt2pt unidirectional"]
    data = comms_charts.comms_frame(prepare(pd.DataFrame(old))).set_index("collective")
    assert pd.isna(data.loc["pt2pt latency", "algbw_gbps"])
    systems = [row(f"r{i}", f"s{i}", "all_reduce", "collective", 2, 1e-5, True)
               for i in range(5)] + [row("solo", "s5", "all_reduce", "collective", 1, 1e-5,
                                         False)]
    data, panels, encoding, x, colour, tips = comms_charts._by_size(
        comms_charts.comms_frame(prepare(pd.DataFrame(systems))))
    assert encoding.filters == ["system"]
    # one dropdown for both charts: every system's, though the bus rows lack s5's
    spec = comms_charts.bandwidth_figure(prepare(pd.DataFrame(systems))).chart.to_dict()
    (dropdown,) = spec["params"]
    assert dropdown["bind"]["options"] == [f"s{i}" for i in range(6)]


def simulated(collective, inputs):
    """What each rank receives, computed here from every rank's input (float64 lists);
    a collective with a root has rank 0 for it."""
    gathers = collective in ("all_gather", "gather")
    n, count = len(inputs), len(inputs[0]) * (len(inputs) if gathers else 1)
    chunk = count // n
    if collective in ("all_reduce", "reduce"):  # reduce: rank 0's (the others unchecked)
        return [[sum(x[i] for x in inputs) for i in range(count)]] * n
    if collective == "broadcast":
        return [inputs[0]] * n
    if gathers:  # gather: rank 0's (the others unchecked)
        return [[v for x in inputs for v in x]] * n
    if collective == "scatter":
        return [inputs[0][r * chunk:(r + 1) * chunk] for r in range(n)]
    if collective == "reduce_scatter":
        return [[sum(x[r * chunk + k] for x in inputs) for k in range(chunk)] for r in range(n)]
    return [[inputs[s][r * chunk + k] for s in range(n) for k in range(chunk)]
            for r in range(n)]  # all_to_all


@pytest.mark.parametrize("collective", [c for c in S.COLLECTIVES
                                        if c != "pt2pt" and c not in S.FAN])
@pytest.mark.parametrize("ranks", [1, 3, 4])
def test_the_validation_patterns_give_what_the_collective_must_deliver(collective, ranks):
    """Every rank's expected values equal the collective done by hand on every rank's
    pattern (for PARAM's --c 1), and the patterns are not constant (a misplaced chunk
    shows)."""
    from dlbench.comms import validation as V

    count = S.elements(96, collective, "float32", ranks)
    inputs = [V.sent(collective, count, r, ranks).tolist() for r in range(ranks)]
    received = simulated(collective, inputs)
    for rank in range(ranks):
        assert V.expected(collective, count, rank, ranks).tolist() == received[rank]
    # One rank sums nothing: its reductions are constant.
    assert len(set(received[0])) > 1 or (ranks == 1 and collective.endswith(("reduce",
                                                                             "scatter")))
    if collective in ("reduce", "gather") and ranks > 1:  # only the root's is checked
        import torch

        scratch = (torch.zeros(count // ranks), torch.zeros(count)) if collective == "gather" \
            else (torch.zeros(count), None)
        assert V.check(collective, scratch, 1, ranks).wrong == 0
        assert V.check(collective, scratch, 0, ranks).wrong == count
    assert max(max(r) for r in received) <= max(16, 1.5 * ranks)


def test_a_wrong_element_fails_the_check_naming_rank_element_and_values(monkeypatch):
    """Checked a span of 16 elements at a time (as 2**24 at a time on a large buffer): the
    element in the third span is found and named by its place in the whole buffer."""
    import torch

    from dlbench.comms import validation as V

    monkeypatch.setattr(V, "CHUNK", 16)
    ranks, count = 4, 64
    source = torch.empty(count, dtype=torch.bfloat16)
    target = torch.empty(count, dtype=torch.bfloat16)
    buffers = (source, target)
    target.copy_(V.expected("all_to_all", count, 2, ranks))
    assert V.check("all_to_all", buffers, 2, ranks).wrong == 0
    target[37] = 0  # a chunk element lost on the way, and two more after it
    target[50:52] = 0
    bad = V.check("all_to_all", buffers, 2, ranks)
    assert (bad.wrong, bad.first, bad.got) == (3, 37, 0.0)
    V.fill("all_to_all", buffers, 2, ranks)  # span by span, as the collective sends it
    assert source.tolist() == V.sent("all_to_all", count, 2, ranks).tolist()
    assert target.tolist() == [0.0] * count
    ok = V.check("all_to_all", (source, V.expected("all_to_all", count, 0, ranks)
                                .to(torch.bfloat16)), 0, ranks)
    assert V.verdict("all_to_all", "128 B", [ok, bad]) == (
        f"all_to_all 128 B: data validation failed on 1 of 2 rank(s): rank 2 received 3 of "
        f"64 elements wrong (first at element 37: 0 instead of {bad.want:g})")
    assert V.verdict("all_to_all", "128 B", [ok]) is None
    # A value off its whole number fails, however little.
    source = torch.tensor([1.5 * 8 + 0.01] * 4, dtype=torch.float32)
    assert V.check("all_reduce", (source, None), 0, 8).wrong == 4


@pytest.mark.parametrize("data_type", ["bfloat16", "float16", "int8"])
def test_a_missing_rank_or_zeros_fail_the_check_at_any_rank_count_the_type_holds(data_type):
    """The patterns are whole numbers the type holds exactly, so they are compared exactly:
    one rank's contribution missing from a sum (every element short by one) and a result
    of zeros fail at every rank count that validation runs at; above it, the study and the
    command line refuse validation in the same one line."""
    import torch

    from dlbench.comms import validation as V
    from dlbench.comms.command_line import checked, parser

    dtype = getattr(torch, data_type)
    most = {"bfloat16": 171, "float16": 1365, "int8": 85}[data_type]
    for ranks in sorted({r for r in (2, 12, 32, 128) if r < most} | {most}):
        assert V.ranks_problem("all_reduce", data_type, ranks) is None
        want = V.expected("all_reduce", 64, 0, ranks)
        assert V.check("all_reduce", (want.to(dtype), None), 0, ranks).wrong == 0
        assert V.check("all_reduce", ((want - 1).to(dtype), None), 0, ranks).wrong == 64
        for collective in ("all_reduce", "broadcast"):
            zeros = (torch.zeros(64, dtype=dtype), None)
            assert V.check(collective, zeros, 0, ranks).wrong == 64
        gathered = (torch.zeros(64 // ranks or 1, dtype=dtype), torch.zeros(64, dtype=dtype))
        assert V.check("all_gather", gathered, 0, ranks).wrong == 64
    line = (f"all_reduce sums of {most + 1} processes outgrow the whole numbers {data_type} "
            f"holds exactly (at most {most} processes): validate with another data type")
    assert V.ranks_problem("all_reduce", data_type, most + 1) == line
    assert V.ranks_problem("all_gather", data_type, 4 * most) is None  # no sums: 1 to 16
    with pytest.raises(study.ConfigError, match=re.escape(f"validate: {line}")):
        study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
            "validate": True, "data_type": data_type, "num_gpus": 1,
            "num_nodes": most + 1}}}})
    argv = ["--device=cpu", f"--data-type={data_type}", "--c=1", "--num_gpus=1",
            f"--num_nodes={most + 1}"]
    with pytest.raises(SystemExit, match="2"):
        checked(parser(), argv)
    assert checked(parser(), [*argv[:-1], f"--num_nodes={most}"])[0].c == 1


def test_a_size_whose_data_arrive_wrong_fails_the_cell_with_the_sizes_before_it(
        tmp_path, monkeypatch):
    """The runner in this process (a group of one): the second size's check finds a wrong
    element, so the cell fails naming it; the first size was measured and validated."""
    from dlbench.comms import runner
    from dlbench.comms import validation as V

    real = V.check

    def check(collective, buffers, rank, ranks, peer=None, root=0, splits=None, peers=()):
        if buffers[0].numel() * 4 < 64:
            return real(collective, buffers, rank, ranks, peer, root, splits, peers)
        return V.Check(rank, 3, buffers[0].numel(), 5, 0.0, 1.0)

    monkeypatch.setattr(V, "check", check)
    out = tmp_path / "cell.json"
    rc = runner.main(["--device=cpu", "--collective=broadcast", "--b=32", "--e=64",
                      "--w=1", "--n=2", "--c=1", f"--output={out}"])
    res = R.read(out)
    assert rc != 0 and res["status"] == "failed"
    assert [(m["bytes_per_iteration"], m["extra"]["validated"]) for m in res["measurements"]] \
        == [(32.0, True)]
    assert res["error"] == ("broadcast 64 B: data validation failed on 1 of 1 rank(s): rank 0 "
                            "received 3 of 16 elements wrong (first at element 5: 0 instead "
                            "of 1)")


def run_comms(tmp_path, *flags):
    out = tmp_path / "cell.json"
    proc = subprocess.run([sys.executable, "-m", "dlbench.comms", "--device=cpu",
                           "--w=1", "--n=3", *flags, f"--output={out}"],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    return proc, R.read(out)


def test_a_gpu_collective_without_the_gpus_fails_in_one_line_before_torchrun(tmp_path):
    import torch

    if torch.cuda.device_count() >= 2:
        pytest.skip("this machine has two GPUs")
    proc, res = run_comms(tmp_path, "--num_gpus=2", "--device=cuda", "--b=1K", "--e=1K")
    assert proc.returncode == 1 and res["status"] == "failed"
    assert res["error"].startswith("device gpu: 2 processes need 2 GPUs on this node; ")
    assert "Traceback" not in proc.stderr


def test_two_processes_sweep_sizes_and_record_both_bandwidths(tmp_path, monkeypatch):
    """Two gloo processes through torchrun (PARAM's short flags pass through it): one
    measurement per size, algorithm bandwidth size / median time, bus bandwidth that times
    (n-1)/n for reduce_scatter; the NCCL this torch has and the NCCL_* settings recorded."""
    import torch

    from dlbench.pytorch import torch_environment

    monkeypatch.setenv("NCCL_ALGO", "Ring")
    proc, res = run_comms(tmp_path, "--num_gpus=2", "--collective=reduce_scatter",
                          "--b=1024", "--e=65536", "--f=8", "--c=1",
                          "--nccl_env=NCCL_PROTO=Simple")
    assert proc.returncode == 0, proc.stderr[-3000:]
    R.validate(res)
    assert res["status"] == "ok" and res["kind"] == "comms"
    assert res["cell"]["collective"] == "reduce_scatter" and res["cell"]["num_gpus"] == 2
    assert res["extra"]["ranks"] == 2 and res["extra"]["backend"] == "gloo"
    # The host's memory and CPU are every rank's on the node: torchrun's agent's tree.
    assert res["extra"]["monitor"]["host"]["processes_max"] >= 3
    # The runner's environment and the cell's own setting (nccl_env), in every process.
    assert res["environment"]["nccl_env"] == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}
    assert res["cell"]["nccl_env"] == "NCCL_PROTO=Simple"
    nccl = torch_environment.nccl_version()
    assert res["environment"]["nccl_version"] == nccl
    if torch.distributed.is_nccl_available():
        assert nccl == ".".join(map(str, torch.cuda.nccl.version()))
    assert aggregate.rows_of(res, "x.json")[0]["nccl_version"] == nccl
    assert [m["bytes_per_iteration"] for m in res["measurements"]] == [1024, 8192, 65536]
    for m in res["measurements"]:
        assert m["pass"] == "collective" and m["iterations"] == 3
        assert m["throughput_unit"] == "operations/s"  # of a window: not iterations
        assert m["gbps"] == pytest.approx(m["bytes_per_iteration"] / m["time_s"]["median"] / 1e9)
        assert m["extra"]["bus_gbps"] == pytest.approx(m["gbps"] * 0.5)
        assert m["extra"]["validated"] is True  # --c 1: each size's data checked
    # PARAM's COMMS-RES lines, once (rank 0) through torchrun: a piece per rank counted.
    rows = [line.split() for line in proc.stdout.splitlines() if "COMMS-RES-" in line]
    assert [(r[0], int(r[1]), int(r[2])) for r in rows] == [
        ("COMMS-RES-reduce_scatter-float32", size, size // 4 // 2)
        for size in (1024, 8192, 65536)]
    assert res["cell"]["validate"] is True


def test_two_processes_in_non_blocking_mode_overlap_a_window_and_validate_each_size(tmp_path):
    """PARAM's --z 0 among two gloo processes: each rank issues its window of all_gather
    collectives without waiting, the sizes are measured and their data checked after."""
    proc, res = run_comms(tmp_path, "--num_gpus=2", "--collective=all_gather", "--z=0",
                          "--window=3", "--b=64", "--e=1024", "--f=4", "--c=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    R.validate(res)
    assert res["status"] == "ok" and res["extra"]["collectives_per_iteration"] == 3
    assert (res["cell"]["blocking"], res["cell"]["window"]) == (False, 3)
    assert [(m["bytes_per_iteration"], m["extra"]["validated"])
            for m in res["measurements"]] == [(64.0, True), (256.0, True), (1024.0, True)]


def test_four_processes_pairwise_measure_latency_and_both_bandwidths_validated(tmp_path):
    """PARAM's --pt2pt alone (no --collective) among four gloo processes: rank 0 with 2 and
    1 with 3 at once; each size gives latency (half a ping-pong), unidirectional and
    bidirectional bandwidth (two messages per time), every size's messages validated."""
    proc, res = run_comms(tmp_path, "--num_gpus=4", "--pt2pt=pairwise", "--window=4",
                          "--b=256", "--e=4096", "--f=16", "--c=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    R.validate(res)
    assert res["status"] == "ok" and res["cell"]["collective"] == "pt2pt"
    assert (res["cell"]["pt2pt"], res["cell"]["window"]) == ("pairwise", 4)
    assert res["extra"]["pairs"] == [[0, 2], [1, 3]]
    assert "COMMS-RES" not in proc.stdout  # PARAM's table has no column for these tests
    assert [(m["name"], m["pass"], m["bytes_per_iteration"]) for m in res["measurements"]] == [
        ("pt2pt|256", "latency", 256.0), ("pt2pt|256", "unidirectional", 256.0),
        ("pt2pt|256", "bidirectional", 512.0), ("pt2pt|4096", "latency", 4096.0),
        ("pt2pt|4096", "unidirectional", 4096.0), ("pt2pt|4096", "bidirectional", 8192.0)]
    for m in res["measurements"]:
        assert m["iterations"] == 3 and m["extra"]["validated"] is True
        if m["pass"] == "latency":  # half a ping-pong: a time, no bandwidth
            assert m["gbps"] is None and m["extra"]["bus_gbps"] is None
        else:
            assert m["gbps"] > 0 and m["extra"]["bus_gbps"] == pytest.approx(m["gbps"])
    # What each test's iteration time was divided by: a ping-pong's two ways, the window.
    assert res["extra"]["collectives_per_iteration"] == {
        "latency": 2, "unidirectional": 4, "bidirectional": 4}
    rows = aggregate.rows_of(res, "x.json")
    assert [(r["pass"], r["gbps"] is None, r["bus_gbps"] is None) for r in rows[:3]] == [
        ("latency", True, True), ("unidirectional", False, False),
        ("bidirectional", False, False)]
    # The chart: a panel per test, each at the message size (not the bytes both ways).
    data = comms_charts.comms_frame(prepare(pd.DataFrame(rows)))
    assert sorted(set(zip(data["collective"], data["size_bytes"], strict=True))) == [
        ("pt2pt bidirectional", 256.0), ("pt2pt bidirectional", 4096.0),
        ("pt2pt latency", 256.0), ("pt2pt latency", 4096.0),
        ("pt2pt unidirectional", 256.0), ("pt2pt unidirectional", 4096.0)]
    figure = comms_charts.bandwidth_figure(prepare(pd.DataFrame(
        aggregate.rows_of(res, "x.json"))))
    # The panels in the order the tests run; no bus bandwidth panel for latency.
    bus, time = figure.chart.to_dict()["vconcat"]
    assert bus["facet"]["sort"] == ["pt2pt unidirectional", "pt2pt bidirectional"]
    assert time["facet"]["sort"] == ["pt2pt latency", *bus["facet"]["sort"]]


def test_one2one_among_three_processes_leaves_the_third_idle_and_measures_the_pair(tmp_path):
    """Ranks 0 and 1 exchange messages; rank 2 has no peer, issues nothing and still
    takes part in the barriers and the gathering of times and checks."""
    proc, res = run_comms(tmp_path, "--num_gpus=3", "--collective=pt2pt", "--window=2",
                          "--b=1024", "--e=1024", "--c=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert res["status"] == "ok", res.get("error")
    assert res["extra"]["pairs"] == [[0, 1]] and res["cell"]["pt2pt"] == "one2one"
    assert [m["pass"] for m in res["measurements"]] == ["latency", "unidirectional",
                                                        "bidirectional"]
    assert all(m["extra"]["validated"] for m in res["measurements"])


def test_src_and_dst_ranks_pair_the_ranks_named_and_leave_the_others_idle(tmp_path):
    """PARAM's --src-ranks 2 --dst-ranks 0 among three gloo processes: rank 2 sends, rank
    0 receives (the pair recorded so), rank 1 idles; the messages validated."""
    proc, res = run_comms(tmp_path, "--num_gpus=3", "--pt2pt=one2one", "--src-ranks=2",
                          "--dst-ranks=0", "--window=2", "--b=512", "--e=512", "--c=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert res["status"] == "ok", res.get("error")
    assert res["extra"]["pairs"] == [[2, 0]]
    assert (res["cell"]["src_ranks"], res["cell"]["dst_ranks"]) == ("2", "0")
    assert [(m["pass"], m["extra"]["validated"]) for m in res["measurements"]] == [
        ("latency", True), ("unidirectional", True), ("bidirectional", True)]


def test_incast_and_multicast_among_three_processes_move_each_peers_message_validated(
        tmp_path):
    """PARAM's incast (ranks 1 and 2 to the root, rank 0) and multicast from rank 2 to
    ranks 0 and 1 on three gloo processes: the pairs recorded, every message validated,
    each size's bytes those crossing the root's link (two messages), bus = algorithm
    bandwidth."""
    proc, res = run_comms(tmp_path, "--num_gpus=3", "--collective=incast", "--b=1024",
                          "--e=4096", "--f=4", "--c=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert res["status"] == "ok", res.get("error")
    assert res["extra"]["pairs"] == [[1, 0], [2, 0]]
    assert [(m["name"], m["bytes_per_iteration"], m["extra"]["validated"])
            for m in res["measurements"]] == [("incast|1024", 2048.0, True),
                                              ("incast|4096", 8192.0, True)]
    assert all(m["extra"]["bus_gbps"] == m["gbps"] for m in res["measurements"])
    # PARAM's COMMS-RES lines: the total size is the bytes the bandwidth is of (was one
    # message: 1024 B beside the bandwidth of 2048)
    rows = [line.split() for line in proc.stdout.splitlines() if "COMMS-RES-" in line]
    assert [(r[0], int(r[1])) for r in rows] == [("COMMS-RES-incast-float32", 2048),
                                                 ("COMMS-RES-incast-float32", 8192)]
    proc, res = run_comms(tmp_path, "--num_gpus=3", "--collective=multicast", "--root=2",
                          "--dst-ranks=0,1", "--b=512", "--e=512", "--c=1", "--z=0",
                          "--window=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert res["status"] == "ok", res.get("error")
    assert res["extra"]["pairs"] == [[2, 0], [2, 1]]
    assert (res["cell"]["root"], res["cell"]["dst_ranks"], res["cell"]["src_ranks"]) == (
        2, "0,1", None)
    (m,) = res["measurements"]
    assert (m["bytes_per_iteration"], m["extra"]["validated"]) == (1024.0, True)


def test_two_communicators_of_two_processes_each_run_at_once_validated(tmp_path):
    """--multi-comms 2 on four gloo processes: ranks 0 and 2, 1 and 3 each all_reduce
    among themselves at once (the bus factor of two ranks, 1, not of four, 1.5), and
    broadcast from each group's rank 1 (global ranks 2 and 3); every group's data
    validated."""
    proc, res = run_comms(tmp_path, "--num_gpus=4", "--multi-comms=2", "--b=1024",
                          "--e=1024", "--c=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert res["status"] == "ok", res.get("error")
    assert res["cell"]["comm_groups"] == 2 and res["extra"]["groups"] == [[0, 2], [1, 3]]
    assert (res["extra"]["ranks"], res["extra"]["group_ranks"]) == (4, 2)
    (m,) = res["measurements"]
    assert m["extra"]["validated"] and m["extra"]["bus_gbps"] == pytest.approx(m["gbps"])
    proc, res = run_comms(tmp_path, "--num_gpus=4", "--multi-comms=2",
                          "--collective=broadcast", "--root=1", "--b=256", "--e=256", "--c=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert res["status"] == "ok", res.get("error")
    assert [m["extra"]["validated"] for m in res["measurements"]] == [True]


def test_a_size_no_rank_can_hold_ends_the_sweep_for_all_ranks_with_what_was_measured(tmp_path):
    """The second size (1 TiB) cannot be allocated: every rank stops there together (none
    waits in a collective), the first size stays measured and the rest are named."""
    proc, res = run_comms(tmp_path, "--num_gpus=2", "--collective=all_reduce",
                          "--b=4096", f"--e={2**41}", f"--f={2**28}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert res["status"] == "ok"
    assert [m["bytes_per_iteration"] for m in res["measurements"]] == [4096]
    assert res["extra"]["sizes_not_measured"] == [2**40]  # bytes
    assert "alloc" in res["extra"]["stopped_by"].lower()


def test_one_process_runs_in_a_group_of_one(tmp_path):
    proc, res = run_comms(tmp_path, "--collective=broadcast", "--b=8", "--e=24", "--sb=8")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert res["status"] == "ok" and res["extra"]["ranks"] == 1
    assert res["cell"]["step_bytes"] == 8
    assert [(m["bytes_per_iteration"], m["extra"]["bus_gbps"] > 0)
            for m in res["measurements"]] == [(8.0, True), (16.0, True), (24.0, True)]


@pytest.mark.slow
def test_comms_cells_through_the_workflow_into_the_table_and_report(tmp_path):
    cfg = {"studies": {"net": {"kind": "comms", "grid": {
        "collective": "all_gather", "device": "cpu", "num_gpus": 2, "begin_size": 256,
        "end_size": 16384, "step_factor": 8, "iterations": 4, "warmup": 1}}}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--snakefile",
                           str(REPO / "Snakefile"), "--directory", str(tmp_path),
                           "--configfile", str(tmp_path / "config.yaml"), "--cores", "2"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = pq.read_table(tmp_path / "results" / "benchmarks.parquet").to_pylist()
    assert [(r["kind"], r["collective"], r["bytes_per_iteration"]) for r in rows] == [
        ("comms", "all_gather", 256.0), ("comms", "all_gather", 2048.0),
        ("comms", "all_gather", 16384.0)]
    assert all(r["bus_gbps"] == pytest.approx(r["gbps"] / 2) for r in rows)
    html = (tmp_path / "results" / "report" / "index.html").read_text()
    assert 'id="comms"' in html and "chart-comms-bandwidth" in html

    frame = prepare(pd.DataFrame(rows))
    data = comms_charts.comms_frame(frame)
    assert data["ranks"].tolist() == [2, 2, 2]
    # at the cell's time (one run: its own), computed again: equal but for rounding
    assert data["busbw_gbps"].tolist() == pytest.approx([r["bus_gbps"] for r in rows],
                                                        rel=1e-12)
    figure = comms_charts.bandwidth_figure(frame)
    assert figure is not None and "2(n-1)/n" in figure.caption
    assert comms_charts.bandwidth_figure(frame[frame["kind"] != "comms"]) is None
    # A comms result's rows: bus_gbps from each measurement's extra.
    res = json.loads(next((tmp_path / "results").rglob("cells/*.json")).read_text())
    assert [r["bus_gbps"] for r in aggregate.rows_of(res, "x.json")] == [
        m["extra"]["bus_gbps"] for m in res["measurements"]]


@pytest.mark.parametrize("collective", sorted(S.ROOTED - S.FAN))  # FAN: their own test
def test_a_root_other_than_rank_0_sends_or_receives_and_is_checked_there(collective):
    """PARAM's --root: the root's pattern is what a broadcast or a scatter sends; after a
    reduce or a gather only the root's buffer holds the result, so only it is checked."""
    import torch

    from dlbench.comms import validation as V

    ranks, root, count = 4, 2, 32
    chunk = count // ranks
    inputs = [V.sent(collective, count, r, ranks, root).tolist() for r in range(ranks)]
    if collective in ("broadcast", "scatter"):  # only the root's input is sent
        assert inputs[root] != inputs[0] and set(inputs[0]) == {0.0}
    received = {"broadcast": lambda: inputs[root],
                "gather": lambda: [v for x in inputs for v in x],
                "scatter": lambda: inputs[root][root * chunk:(root + 1) * chunk],
                "reduce": lambda: [sum(x[i] for x in inputs) for i in range(count)]
                }[collective]()
    right = V.expected(collective, count, root, ranks, root)
    assert right.tolist() == received
    if collective == "scatter":  # rank 0 receives the root's first block
        assert V.expected(collective, count, 0, ranks, root).tolist() == inputs[root][:chunk]

    def buffers(result):
        if collective in ("gather", "scatter"):
            return torch.empty(count // ranks if collective == "gather" else count), result
        return result, None

    scratch = torch.zeros(right.numel())
    assert V.check(collective, buffers(right), root, ranks, root=root).wrong == 0
    assert V.check(collective, buffers(scratch), root, ranks, root=root).wrong == right.numel()
    # A reduce's or gather's other ranks hold scratch (rank 0 too, when it is no root).
    others = 0 if collective in ("reduce", "gather") else right.numel()
    assert V.check(collective, buffers(scratch), 0, ranks, root=root).wrong == others
    filled = buffers(torch.empty(right.numel()))
    V.fill(collective, filled, root, ranks, root)
    assert filled[0].tolist() == inputs[root]


def test_a_root_is_an_axis_of_broadcast_and_reduce_cells_and_must_be_a_rank(capsys):
    from dlbench import kinds
    from dlbench.comms import runner

    cells = study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
        "num_gpus": 4, "collective": ["broadcast", "all_reduce"], "root": [0, 3]}}}})
    by = {(c.params["collective"], c.params["root"]): c for c in cells}
    assert sorted(by, key=str) == [("all_reduce", None), ("broadcast", 0), ("broadcast", 3)]
    (plain,) = study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
        "num_gpus": 4, "collective": "broadcast"}}}})
    assert by[("broadcast", 0)].id == plain.id  # the id a broadcast cell had before roots
    assert by[("broadcast", 3)].id.rsplit("_", 1)[0] == "pytorch_broadcast_root3_float32_4x_gpu"
    argv = kinds.get("comms").command(by[("broadcast", 3)].params, Path("x.json"), "python",
                                      None)
    assert "--root=3" in argv
    assert not any(a.startswith("--root") for a in kinds.get("comms").command(
        by[("all_reduce", None)].params, Path("x.json"), "python", None))
    (across,) = study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
        "num_gpus": 4, "num_nodes": 2, "collective": "reduce", "root": 7}}}})
    assert across.params["root"] == 7
    with pytest.raises(study.ConfigError, match=r"study 'c': root: 4 is no rank of 4 "
                                                r"process\(es\): the root is one of 0 to 3 "
                                                r"\(num_gpus x num_nodes\)"):
        study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
            "num_gpus": 4, "collective": "reduce", "root": 4}}}})
    with pytest.raises(SystemExit) as exc:
        runner.main(["--device=cpu", "--collective=broadcast", "--num_gpus=2", "--root=2"])
    assert exc.value.code == 2
    assert "--root 2 is no rank of 2 process(es)" in capsys.readouterr().err


@pytest.mark.parametrize("collective", sorted(S.ROOTED))
def test_two_processes_run_a_rooted_collective_from_rank_1_validated(tmp_path, collective):
    proc, res = run_comms(tmp_path, "--num_gpus=2", f"--collective={collective}",
                          "--root=1", "--b=64", "--e=1024", "--f=16", "--c=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert res["status"] == "ok" and res["cell"]["root"] == 1
    assert [(m["bytes_per_iteration"], m["extra"]["validated"])
            for m in res["measurements"]] == [(64.0, True), (1024.0, True)]


def test_a_list_of_message_sizes_replaces_the_sweep_and_its_axes(tmp_path, capsys):
    """PARAM's --ss: the sizes given, each once and in their order, and none of the
    sweep's axes in the cell (two studies apart only in those are one cell); a sweep's
    cell keeps its id; a size that is no whole number of bytes is refused in one line."""
    from dlbench import kinds
    from dlbench.comms import runner

    cells = study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
        "num_gpus": 8, "message_sizes": ["", "26214400,1024"], "begin_size": [8, 64]}}}})
    listed = [c for c in cells if c.params["message_sizes"]]
    assert len(listed) == 1 and len(cells) == 3
    assert [listed[0].params[a] for a in ("begin_size", "end_size", "step_factor",
                                          "step_bytes")] == [None] * 4
    assert "pytorch_all-reduce_float32_8x_gpu_4770ff82" in [c.id for c in cells]
    argv = kinds.get("comms").command(listed[0].params, Path("x.json"), "python", None)
    assert "--ss=26214400,1024" in argv and not any(a.startswith("--b=") for a in argv)
    for text, message in [("1k,2", "'1k' is no message size"), ("8,0", "'0' is no message size"),
                          (",".join(["8"] * 1025), "1,025 message sizes (at most 1,024)")]:
        with pytest.raises(study.ConfigError,
                           match=re.escape(f"study 'c': message_sizes: {message}")):
            study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
                "message_sizes": text}}}})
        assert S.sizes_problem(text).startswith(message)
    assert S.explicit_sizes("64, 16,64") == [64, 16]
    out = tmp_path / "cell.json"
    rc = runner.main(["--device=cpu", "--collective=all_reduce", "--ss=64,16,64", "--b=4096",
                      "--e=8", "--w=1", "--n=2", f"--output={out}"])
    res = R.read(out)
    assert rc == 0 and res["status"] == "ok", res.get("error")
    assert [m["bytes_per_iteration"] for m in res["measurements"]] == [64.0, 16.0]
    assert (res["cell"]["message_sizes"], res["cell"]["begin_size"]) == ("64,16,64", None)
    with pytest.raises(SystemExit) as exc:
        runner.main(["--device=cpu", "--ss=8,x"])
    assert exc.value.code == 2 and "--ss 'x' is no message size" in capsys.readouterr().err


# -- all_to_allv: uneven blocks (PARAM's --i, --o) ---------------------------------------

def test_one_split_for_every_rank_makes_one_exchange_as_params_command_line_does():
    ins, outs = S.exchange([1, 0, 3], [], 3)
    assert ins == [[1, 0, 3]] * 3  # rank r sends in_split[j] to rank j ...
    assert outs == [[1, 1, 1], [0, 0, 0], [3, 3, 3]]  # ... so rank j gets in_split[j] from each
    ins, outs = S.exchange([], [2, 5], 2)
    assert (ins, outs) == ([[2, 2], [5, 5]], [[2, 5], [2, 5]])
    assert S.exchange([4, 4], [4, 4], 2) == ([[4, 4], [4, 4]], [[4, 4], [4, 4]])
    with pytest.raises(ValueError, match=re.escape("in_split has 3 block(s) for 2 process(es) "
                                                   "(num_gpus x num_nodes): one per rank")):
        S.exchange([1, 2, 3], [], 2)
    with pytest.raises(ValueError, match="in_split and out_split disagree"):
        S.exchange([1, 2], [1, 2], 2)
    assert S.split_problem("1,x").startswith("'x' is no count of elements")
    assert S.split_problem("0,0") == "every block is empty: nothing to exchange"
    assert S.split_problem("") is None and S.split_problem("0,7") is None


@pytest.mark.parametrize(("in_split", "out_split"), [([1, 0, 3], []), ([], [2, 5, 1])])
def test_an_uneven_exchange_is_validated_block_by_block(in_split, out_split):
    """Each rank's pattern, exchanged by hand block by block as all_to_allv does, is what
    every rank's check expects; a rank that receives two blocks in each other's place
    fails it."""
    import torch

    from dlbench.comms import validation as V

    ranks = 3
    ins, outs = S.exchange(in_split, out_split, ranks)
    sources = []
    for r in range(ranks):
        source = torch.zeros(sum(ins[r]))
        V.fill("all_to_allv", (source, torch.zeros(sum(outs[r]))), r, ranks,
               splits=(ins[r], outs[r]))
        sources.append(source)

    def block(s, j):  # what rank s sends rank j
        start = sum(ins[s][:j])
        return sources[s][start:start + ins[s][j]]

    for j in range(ranks):
        received = torch.cat([block(s, j) for s in range(ranks)])
        assert received.numel() == sum(outs[j])
        check = V.check("all_to_allv", (sources[j], received), j, ranks,
                        splits=(ins[j], outs[j]))
        assert check.wrong == 0 and check.elements == sum(outs[j])
    j = 0  # rank 0 with the blocks of rank 1 and 2 swapped
    swapped = torch.cat([block(0, j), block(2, j), block(1, j)])
    assert not torch.equal(swapped, torch.cat([block(s, j) for s in range(ranks)]))
    assert V.check("all_to_allv", (sources[j], swapped), j, ranks,
                   splits=(ins[j], outs[j])).wrong > 0


def test_an_all_to_allv_cell_given_a_split_exchanges_it_instead_of_the_sweep(capsys):
    from dlbench import kinds
    from dlbench.comms import runner

    cells = study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
        "collective": ["all_to_allv", "all_reduce"], "num_gpus": 2,
        "in_split": "1024,4096"}}}})
    uneven = next(c for c in cells if c.params["collective"] == "all_to_allv")
    reduce = next(c for c in cells if c.params["collective"] == "all_reduce")
    assert uneven.params["begin_size"] is None and uneven.params["out_split"] == ""
    assert reduce.params["in_split"] is None and reduce.params["begin_size"] == 8
    argv = kinds.get("comms").command(uneven.params, Path("x.json"), "python", None)
    assert "--i=1024,4096" in argv and not any(a.startswith("--b=") for a in argv)
    assert uneven.id.startswith("pytorch_all-to-allv_float32_2x_gpu_")
    for grid, message in [
            ({"in_split": "1,2,3"}, "in_split: in_split has 3 block(s) for 2 process(es)"),
            ({"out_split": "1,x"}, "out_split: 'x' is no count of elements"),
            ({"in_split": "1,2", "message_sizes": "64"}, "message_sizes: an all_to_allv "
                                                         "given in_split")]:
        with pytest.raises(study.ConfigError, match=re.escape(f"study 'c': {message}")):
            study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
                "collective": "all_to_allv", "num_gpus": 2, **grid}}}})
    for flags, message in [(["--collective=all_reduce", "--i=1,2"],
                            "--i splits the blocks of all_to_allv, not all_reduce"),
                           (["--collective=all_to_allv", "--num_gpus=2", "--o=1,2,3"],
                            "--o: out_split has 3 block(s) for 2 process(es)"),
                           (["--collective=all_to_allv", "--i=1", "--ss=64"],
                            "--ss: an all_to_allv given --i or --o")]:
        with pytest.raises(SystemExit) as exc:
            runner.main(["--device=cpu", *flags])
        assert exc.value.code == 2 and message in capsys.readouterr().err


def test_two_processes_exchange_uneven_blocks_validated(tmp_path):
    """PARAM's --i on two gloo processes: rank 0 gets three elements from each rank,
    rank 1 five; the data validated on both."""
    proc, res = run_comms(tmp_path, "--num_gpus=2", "--collective=all_to_allv", "--i=3,5",
                          "--c=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (m,) = res["measurements"]
    assert (m["name"], m["bytes_per_iteration"], m["extra"]["validated"]) == (
        "all_to_allv|32", 32.0, True)
    assert res["extra"]["exchange"] == {"in_splits": [[3, 5], [3, 5]],
                                        "out_splits": [[3, 3], [5, 5]]}
    assert res["cell"]["in_split"] == "3,5" and res["cell"]["begin_size"] is None


# -- PARAM's --include-0B --------------------------------------------------------------


def test_params_include_0b_sends_nothing_to_the_next_rank_as_its_own_example_shows():
    """PARAM's comment's 4-rank example of 4 elements, the remainder kept, and every
    exchange validated block by block as all_to_allv makes it (3 ranks, 7 elements)."""
    import torch

    from dlbench.comms import validation as V

    ins, outs = S.zero_block_exchange(4, 4)
    assert ins == [[2, 0, 1, 1], [1, 2, 0, 1], [1, 1, 2, 0], [0, 1, 1, 2]]
    assert outs == [[2, 1, 1, 0], [0, 2, 1, 1], [1, 0, 2, 1], [1, 1, 0, 2]]
    ins, outs = S.zero_block_exchange(7, 3)
    assert ins == [[4, 0, 3], [3, 4, 0], [0, 3, 4]] and all(sum(r) == 7 for r in outs)
    # On two ranks the next is the only other: nothing would cross between ranks.
    for ranks in (1, 2):
        with pytest.raises(ValueError, match="needs 3 or more processes"):
            S.zero_block_exchange(8, ranks)
    sources = []
    for r in range(3):
        source = torch.zeros(7)
        V.fill("all_to_allv", (source, torch.zeros(7)), r, 3, splits=(ins[r], outs[r]))
        sources.append(source)
    for j in range(3):
        received = torch.cat([sources[s][sum(ins[s][:j]):sum(ins[s][:j + 1])]
                              for s in range(3)])
        assert V.check("all_to_allv", (sources[j], received), j, 3,
                       splits=(ins[j], outs[j])).wrong == 0


def test_a_study_and_the_runner_take_include_0b_for_an_all_to_allv_sweep_only(capsys):
    from dlbench import kinds
    from dlbench.comms import runner

    cells = study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
        "collective": ["all_to_allv", "all_reduce"], "num_gpus": 4, "include_0b": True}}}})
    zero = next(c for c in cells if c.params["collective"] == "all_to_allv")
    reduce = next(c for c in cells if c.params["collective"] == "all_reduce")
    assert zero.params["include_0b"] is True and reduce.params["include_0b"] is None
    assert zero.id.startswith("pytorch_all-to-allv_float32_4x_include0B_gpu_")
    assert "--include-0B" in kinds.get("comms").command(zero.params, Path("x.json"),
                                                        "python", None)
    (plain,) = study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
        "collective": "all_to_allv", "num_gpus": 4}}}})
    assert "--include-0B" not in kinds.get("comms").command(plain.params, Path("x.json"),
                                                            "python", None)
    with pytest.raises(study.ConfigError, match=re.escape(
            "study 'c': include_0b: needs 3 or more processes")):
        study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
            "collective": "all_to_allv", "num_gpus": 2, "include_0b": True}}}})
    for flags, message in [(["--collective=all_reduce", "--include-0B"],
                            "--include-0B sets the blocks of the all_to_allv sweep"),
                           (["--collective=all_to_allv", "--num_gpus=2", "--include-0B"],
                            "--include-0B needs 3 or more processes")]:
        with pytest.raises(SystemExit) as exc:
            runner.main(["--device=cpu", *flags])
        assert exc.value.code == 2 and message in capsys.readouterr().err


def test_three_processes_exchange_with_a_zero_byte_block_validated(tmp_path):
    """PARAM's --include-0B on three gloo processes: every size's blocks as PARAM makes
    them, each rank sending nothing to the next, the data validated on every rank."""
    proc, res = run_comms(tmp_path, "--num_gpus=3", "--collective=all_to_allv",
                          "--include-0B", "--b=24", "--e=96", "--f=4", "--c=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    R.validate(res)
    assert res["cell"]["include_0b"] is True
    assert [(m["bytes_per_iteration"], m["extra"]["validated"]) for m in res["measurements"]] \
        == [(24.0, True), (96.0, True)]


def test_graph_launches_capture_n_collectives_once_and_time_each_replay(monkeypatch):
    """PARAM's --graph-launches: --w collectives eagerly on a stream of their own, --n of
    them captured in one CUDA graph, each timed iteration one replay of it (after one
    untimed replay), one collective's time a replay's over --n. Stand-ins for torch.cuda:
    the order of the calls is checked; a graph's timing on a GPU is not exercised here."""
    import argparse
    import contextlib

    import torch

    from dlbench.comms import graphs, runner

    log = []

    class Stream:
        def wait_stream(self, other):
            log.append("wait")

    class Graph:
        def replay(self):
            log.append("replay")

    capturing = []

    @contextlib.contextmanager
    def graph(g):
        capturing.append(True)
        log.append("capture")
        yield
        capturing.pop()
        log.append("captured")

    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", Stream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(torch.cuda, "graph", graph)
    calls = []
    monkeypatch.setattr(runner, "_call", lambda *a, **k: (
        lambda batch: calls.append("graphed" if capturing else "eager")))
    args = argparse.Namespace(collective="all_reduce", root=0, use_device_time=False, w=2,
                              n=3, window=20, kernel="none", graph_launches=4)
    (test,) = runner._timed_tests(args, (None, None), None, None, False, None, None)
    assert calls == ["eager", "eager", "graphed", "graphed", "graphed"]
    assert isinstance(test.step, graphs.GraphedCollectives)
    assert (test.per_iteration, test.counts) == (3, (1, 4))
    test.step(None)
    assert log[-1] == "replay" and len(calls) == 5  # a replay calls nothing on the host
    assert graphs.problem(0, "cpu", False, True, True) is None


def test_graph_launches_are_a_gpu_cells_axis_refused_where_they_cannot_apply(capsys):
    """The axis: in the cell's id and flags when set; refused on a CPU, with non-blocking
    collectives, device time or a compute kernel (study and command line alike); blank
    for point-to-point cells."""
    from dlbench import kinds
    from dlbench.comms import runner

    (cell,) = study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
        "num_gpus": 1, "graph_launches": 10}}}})
    assert cell.id.rsplit("_", 1)[0] == "pytorch_all-reduce_float32_1x_graph10_gpu"
    argv = kinds.get("comms").command(cell.params, Path("x.json"), "python", None)
    assert "--graph-launches=10" in argv
    assert runner.cell_of(runner.parser().parse_args(argv[3:]))["graph_launches"] == 10
    (plain,) = study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
        "num_gpus": 1}}}})
    assert "graph" not in plain.id and "--graph-launches=0" in kinds.get("comms").command(
        plain.params, Path("x.json"), "python", None)
    for grid, words in [({"device": "cpu"}, "device gpu only"),
                        ({"blocking": False}, "blocking collectives"),
                        ({"device_time": True}, "device_time does not apply"),
                        ({"compute_kernel": "gemm"}, "no compute_kernel beside them")]:
        with pytest.raises(study.ConfigError, match=f"study 'c': graph_launches: .*{words}"):
            study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
                "graph_launches": 5, **grid}}}})
    (p2p,) = study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
        "collective": "pt2pt", "num_gpus": 2, "graph_launches": 5}}}})
    assert p2p.params["graph_launches"] is None
    for flags, words in [(["--device=cpu"], "device gpu only"),
                         (["--z=0"], "blocking collectives"),
                         (["--pt2pt=one2one", "--num_gpus=2"],
                          "pt2pt sends point-to-point messages")]:
        with pytest.raises(SystemExit):
            runner.main(["--graph-launches=5", *flags])
        assert "--graph-launches: " in (err := capsys.readouterr().err) and words in err
