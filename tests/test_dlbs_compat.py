"""The model runners against DLBS's own command line and log lines (seeds 000 and 002):
what a DLBS CPU experiment passes, and what DLBS's log parser reads back."""

from __future__ import annotations

import argparse

import pytest
from pytorch_cell import run_runner
from test_result import parse_like_dlbs  # DLBS's log parser's rule

from dlbench import cellrun, cli, study
from dlbench import result as R

# --- --num_gpus=0: DLBS's CPU run ------------------------------------------------------

# What DLBS's pytorch.args / mxnet.args give for an experiment without GPUs
# (--num_gpus=${exp.num_local_gpus} is 0, --device=${exp.device_type} is cpu).
DLBS_CPU = ["--model=deep_mnist", "--forward_only=false", "--batch_size=4", "--num_batches=2",
            "--num_warmup_batches=1", "--num_gpus=0", "--device=cpu", "--dtype=float32"]


def test_pytorch_runs_dlbs_cpu_command_line_as_the_one_device_cell(tmp_path):
    proc, res = run_runner(tmp_path, *DLBS_CPU, "--cudnn_benchmark=true",
                           "--cudnn_fastest=false", "--data_shuffle=false",
                           "--num_loader_threads=4")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert res["status"] == "ok" and res["cell"]["num_gpus"] == 1
    _, one = run_runner(tmp_path, *[a.replace("--num_gpus=0", "--num_gpus=1") for a in DLBS_CPU],
                        name="one.json")
    assert res["cell"] == one["cell"]
    assert study.cell_id("model", res["cell"]) == study.cell_id("model", one["cell"])
    assert res["measurements"][0]["items_per_iteration"] == 4  # one device's batch


def test_mxnet_takes_dlbs_cpu_command_line_as_the_one_device_cell(tmp_path, capsys):
    """In this process: with MXNet absent the runner still records the cell it was given
    (a failed result); with MXNet present it runs it. Either way the cell is num_gpus 1."""
    from dlbench.mxnet import runner

    out = tmp_path / "r.json"
    runner.main([*DLBS_CPU, f"--output={out}"])
    cell = R.read(out)["cell"]
    assert cell["num_gpus"] == 1
    one = runner.cell_of(runner.build_parser().parse_args(
        [a.replace("--num_gpus=0", "--num_gpus=1") for a in DLBS_CPU]))
    assert study.cell_id("model", cell) == study.cell_id("model", one)


@pytest.mark.parametrize("framework", ["pytorch", "mxnet"])
def test_no_gpus_on_a_gpu_device_is_one_line_naming_num_gpus(framework, capsys):
    if framework == "pytorch":
        from dlbench.pytorch.runner import main
    else:
        from dlbench.mxnet.runner import main
    with pytest.raises(SystemExit) as info:
        main(["--model=deep_mnist", "--num_gpus=0", "--device=gpu"])
    assert info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        "error: --num_gpus must be >= 1 with --device gpu, got 0 "
        "(0 is DLBS's CPU run: give --device cpu)")


def test_a_runner_without_model_keeps_its_num_gpus_bound():
    """The collectives runner's --num_gpus counts processes: 0 stays below its bound."""
    args = argparse.Namespace(num_gpus=0, device="cpu")
    cli.dlbs_cpu_devices(argparse.ArgumentParser(), args)
    assert args.num_gpus == 0


# --- __results.throughput__: samples per second, as DLBS ------------------------------


def test_the_dlbs_throughput_of_a_token_cell_is_its_effective_batch_per_second(capsys):
    """Two sequences of 64 tokens on each of 2 devices of 2 nodes: DLBS's line counts the
    8 sequences over the mean time; the result keeps tokens/s over the median."""
    res = R.new_result(kind="model", cell={"model": "llama_tiny", "batch_size": 2,
                                           "num_gpus": 2, "num_nodes": 2})
    res["measurements"] = [R.measurement(name="llama_tiny", pass_="training",
                                         times_s=[0.1, 0.4, 0.1], items_per_iteration=8 * 64,
                                         throughput_unit="tokens/s")]
    cellrun.print_dlbs_summary(R.finish(res, "ok", None))
    parsed = parse_like_dlbs(capsys.readouterr().out)
    assert parsed["results.throughput"] == pytest.approx(8 / 0.2)
    assert res["measurements"][0]["throughput"] == pytest.approx(8 * 64 / 0.1)


def test_a_language_model_cell_through_the_runner_prints_samples_per_second(tmp_path):
    pytest.importorskip("transformers", reason="needs transformers")
    proc, res = run_runner(tmp_path, "--model=llama_tiny", "--batch_size=2", "--device=cpu",
                           "--num_batches=2", "--num_warmup_batches=1", "--count_flops=false",
                           '--model_opts={"sequence_length": 16}')
    assert proc.returncode == 0, proc.stderr[-2000:]
    (m,) = res["measurements"]
    assert m["throughput_unit"] == "tokens/s" and m["items_per_iteration"] == 2 * 16
    assert m["throughput"] == pytest.approx(2 * 16 / m["time_s"]["median"])
    parsed = parse_like_dlbs(proc.stdout)
    assert parsed["results.throughput"] == pytest.approx(2 / m["time_s"]["mean"], rel=1e-5)
    assert parsed["results.time"] == pytest.approx(m["time_s"]["mean"] * 1000, rel=1e-5)


# --- a failed cell: nothing DLBS's tools take for success ---------------------------------


def dlbs_takes_for_success(parsed: dict) -> bool:
    """DLBS's own rules for a run that succeeded, either of which counts it: BenchData.status
    (its reports, its launcher's rerun-on-failure) wants ``results.time`` > 0, and
    logparser.parse_log_files wants a numeric ``results.throughput`` > 0."""
    def positive(key: str) -> bool:
        value = parsed.get(key)
        return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0

    return positive("results.time") or positive("results.throughput")


def one_measurement(res: dict) -> None:
    res["measurements"] = [R.measurement(name="deep_mnist", pass_="training",
                                         times_s=[0.1, 0.2], items_per_iteration=4,
                                         throughput_unit="samples/s")]


@pytest.mark.parametrize(("raised", "status"), [
    (RuntimeError("the monitor's series could not be attached"), "failed"),
    (MemoryError("cannot allocate memory"), "oom"),
])
def test_a_cell_failing_after_its_measurement_prints_no_figure_dlbs_counts(
        tmp_path, capsys, raised, status):
    """The measurement finished, then the cell failed: its status and message lines only,
    the figures kept in its result file."""
    out = tmp_path / "r.json"
    res = R.new_result(kind="model", cell={"model": "deep_mnist", "batch_size": 4})
    with cellrun.recorded(res, str(out)):
        one_measurement(res)
        raise raised
    parsed = parse_like_dlbs(capsys.readouterr().out)
    assert parsed == {"results.status": status, "results.status_msg": cellrun.one_line(raised)}
    assert not dlbs_takes_for_success(parsed)
    written = R.read(out)
    assert written["status"] == status and written["measurements"][0]["times_s"] == [0.1, 0.2]


def test_the_same_cell_succeeding_is_one_dlbs_counts(capsys):
    """The rule above can tell: the cell that ends well prints the figures DLBS counts."""
    res = R.new_result(kind="model", cell={"model": "deep_mnist", "batch_size": 4})
    with cellrun.recorded(res, None):
        one_measurement(res)
        res["status"] = "ok"
    parsed = parse_like_dlbs(capsys.readouterr().out)
    assert dlbs_takes_for_success(parsed) and parsed["results.time"] == pytest.approx(150.0)
    assert parsed["exp.model_title"] == "DeepMNIST"


@pytest.mark.parametrize(("kind", "model", "title"), [
    ("model", "resnet50", "ResNet50"), ("model", "alexnet_owt", "AlexNetOWT"),
    ("model", "inception3", "InceptionV3"), ("model", "bert_large", "BERT-Large"),
    ("model", "paradnn_fc", "paradnn_fc"),  # no title of its own: its name
    ("op", "gemm", None), ("comms", None, None),
])
def test_a_model_cell_prints_dlbs_model_title_from_the_registry(kind, model, title):
    """DLBS's backends print ``__exp.model_title__`` after a run that succeeded, and its
    reports group and label by it: its spelling for its own models, the registry's title or
    name for others, nothing for a cell of no catalogued model."""
    res = {"kind": kind, "cell": {"model": model} if model else {}}
    assert cellrun.model_title(res) == title


def test_a_result_that_cannot_be_written_prints_failed_and_no_figures(tmp_path, capsys):
    """The write comes after the measurement and fails the cell: the summary lines, printed
    after it, say failed and hold no time or throughput."""
    (tmp_path / "file").write_text("")
    res = R.new_result(kind="model", cell={"model": "deep_mnist", "batch_size": 4})
    with cellrun.recorded(res, str(tmp_path / "file" / "r.json")):
        one_measurement(res)
        res["status"] = "ok"
    parsed = parse_like_dlbs(capsys.readouterr().out)
    assert parsed["results.status"] == "failed"
    assert parsed["results.status_msg"].startswith("the result could not be written to ")
    assert not dlbs_takes_for_success(parsed)


def test_a_result_refused_by_its_schema_still_prints_failed_and_no_figures(
        tmp_path, capsys, monkeypatch):
    """A write that fails otherwise than by the disk (the schema refuses the document: a
    defect, raised on) still leaves the log's status line saying failed, no figures."""
    def refuses(res, path):
        raise ValueError("result schema: 'x' is not valid")

    monkeypatch.setattr(R, "write", refuses)
    res = R.new_result(kind="model", cell={"model": "deep_mnist", "batch_size": 4})
    with pytest.raises(ValueError), cellrun.recorded(res, str(tmp_path / "r.json")):
        one_measurement(res)
        res["status"] = "ok"
    parsed = parse_like_dlbs(capsys.readouterr().out)
    assert parsed["results.status"] == "failed"
    assert parsed["results.status_msg"] == ("the result could not be written: ValueError: "
                                            "result schema: 'x' is not valid")
    assert not dlbs_takes_for_success(parsed)


def test_the_pytorch_runner_failing_after_its_measurement_prints_no_figures(
        tmp_path, capsys, monkeypatch):
    """In this process, on the CPU: the process group's shutdown, after the measurement,
    raises. A data-parallel cell's other ranks (torchrun) are not exercised."""
    from dlbench.pytorch import distributed
    from dlbench.pytorch.runner import main

    def fails() -> None:
        raise RuntimeError("process group shutdown failed")

    monkeypatch.setattr(distributed, "shutdown", fails)
    out = tmp_path / "r.json"
    assert main([*DLBS_CPU, "--count_flops=false", f"--output={out}"]) == 1
    parsed = parse_like_dlbs(capsys.readouterr().out)
    assert parsed["results.status"] == "failed"
    assert parsed["results.status_msg"] == "RuntimeError: process group shutdown failed"
    assert not dlbs_takes_for_success(parsed)
    assert R.read(out)["measurements"][0]["time_s"]["mean"] > 0  # it had measured


def test_booleans_take_dlbs_t_and_f_and_refuse_other_words():
    """DLBS's mxnet_benchmarks read --forward_only=t as true (its str2bool: true, on, t,
    1); here it was an argparse error. Another word stays an error (DLBS read it as
    false, silently)."""
    assert [cli.str2bool(w) for w in ("t", "T", "true", "on", "1")] == [True] * 5
    assert [cli.str2bool(w) for w in ("f", "false", "off", "0", "no")] == [False] * 5
    with pytest.raises(argparse.ArgumentTypeError, match="expected true or false, got 'maybe'"):
        cli.str2bool("maybe")
