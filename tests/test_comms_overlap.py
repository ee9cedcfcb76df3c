"""Collectives overlapped with computation (compute_kernel, PARAM's --mode comms-compute;
dlbench.comms.overlap): the kernels, each part of an overlapped iteration timed on its
own, the cells a study makes, the runner in this process and on two gloo processes of this
CPU, the chart. The CUDA path (the kernels on a stream of their own beside NCCL's, timed
by CUDA events) runs here on stand-ins for torch.cuda only (the order of its calls, its
arithmetic); its timing on a device runs in the GPU acceptance check."""

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from dlbench import aggregate, kinds, study
from dlbench import result as R
from dlbench.comms import overlap
from dlbench.report import comms_charts
from dlbench.report.data import prepare

REPO = Path(__file__).resolve().parents[1]


def test_the_kernels_compute_what_they_count_into_their_own_buffer():
    import torch

    torch.manual_seed(3)
    gemm = overlap.kernel("gemm", 8, "float64", torch.device("cpu"))
    out = gemm.run()
    torch.manual_seed(3)  # the operands again, as the kernel drew them
    a, b = torch.rand(8, 8, dtype=torch.float64), torch.rand(8, 8, dtype=torch.float64)
    assert torch.equal(out, a @ b) and out.dtype == torch.float64
    assert (gemm.flops, gemm.bytes) == (2 * 8**3, 3 * 64 * 8)
    add = overlap.kernel("add", 4, "bfloat16", torch.device("cpu"))
    assert add.run().dtype == torch.bfloat16 and (add.flops, add.bytes) == (32, 3 * 16 * 2)
    copy = overlap.kernel("copy", 4, "float32", torch.device("cpu"))
    assert (copy.flops, copy.bytes) == (0, 2 * 16 * 4)


@pytest.mark.parametrize(("name", "want", "flops", "moved"), [
    ("add", lambda a, b: a + 2 * b, 32, 3), ("sub", lambda a, b: a - 2 * b, 32, 3),
    ("add_num", lambda a, b: a + 20, 16, 2), ("sub_num", lambda a, b: a - 20, 16, 2),
    ("copy", lambda a, b: a, 0, 2), ("d2h", lambda a, b: a, 0, 1),
    ("h2d", lambda a, b: a, 0, 1)])
def test_params_other_kernels_compute_what_they_count(name, want, flops, moved):
    """PARAM's elementwise kernels and copies (d2h and h2d between this CPU's buffers:
    their pinned host buffer and asynchronous copy on a GPU are not exercised here)."""
    import torch

    torch.manual_seed(5)
    work = overlap.kernel(name, 4, "float64", torch.device("cpu"))
    torch.manual_seed(5)  # the operands again, as the kernel drew them
    a, b = torch.rand(4, 4, dtype=torch.float64), torch.rand(4, 4, dtype=torch.float64)
    out = work.run()
    assert torch.equal(out, want(a, b)) and out.data_ptr() == work.run().data_ptr()
    assert (work.flops, work.bytes) == (flops, moved * 16 * 8)
    with pytest.raises(ValueError, match="unknown compute kernel 'conv'"):
        overlap.kernel("conv", 4, "float32", torch.device("cpu"))


def test_the_embedding_lookup_sums_each_bag_from_its_own_table():
    """PARAM's emb_lookup as one embedding_bag over the tables side by side: each bag the
    sum of its rows, each table's indices among its own rows, and the FLOPs and bytes
    counted (an add per element gathered; the rows, the indices and the output)."""
    import torch

    spec = overlap.Tables(dim=6, rows=50, tables=3, batch=4, bag=5)
    weight, indices, offsets = overlap.lookup_inputs(spec, torch.device("cpu"))
    assert weight.shape == (150, 6) and indices.shape == (60,) and offsets[-1] == 60
    for t, rows in enumerate(indices.reshape(3, 20)):
        assert ((rows >= 50 * t) & (rows < 50 * (t + 1))).all()
    work = overlap.kernel("emb_lookup", 100, "bfloat16", torch.device("cpu"), tables=spec)
    out = work.run()
    expected = weight[indices].reshape(12, 5, 6).sum(dim=1)
    assert torch.allclose(out, expected)
    assert (work.flops, work.shape) == (60 * 6, (3, 50, 6))
    assert work.bytes == 60 * 6 * 4 + 60 * 8 + 12 * 6 * 4


def test_params_mm_dim_shapes_give_a_gemm_and_operands_of_their_own():
    """mm_shape (PARAM's --mm-dim m n p): a GEMM of A[m,n] and B[n,p], counted as such;
    the elementwise kernels' m x n operands (a third value, which PARAM allows them but
    add and sub, unused); the counts of values PARAM refuses, refused."""
    import torch

    cpu = torch.device("cpu")
    torch.manual_seed(7)
    gemm = overlap.kernel("gemm", 100, "float64", cpu, "6,4,3")
    torch.manual_seed(7)
    a, b = torch.rand(6, 4, dtype=torch.float64), torch.rand(4, 3, dtype=torch.float64)
    out = gemm.run()
    assert out.shape == (6, 3) and torch.equal(out, a @ b)
    assert (gemm.flops, gemm.bytes) == (2 * 6 * 4 * 3, (24 + 12 + 18) * 8)
    assert gemm.shape == (6, 4, 3) and overlap.kernel("gemm", 5, "float32", cpu).shape == (
        5, 5, 5)
    add = overlap.kernel("add", 100, "float32", cpu, "5,3")
    assert add.run().shape == (5, 3) and (add.flops, add.bytes) == (30, 3 * 15 * 4)
    h2d = overlap.kernel("h2d", 100, "float32", cpu, "5,3,7")
    assert h2d.run().shape == (5, 3) and h2d.bytes == 15 * 4
    assert (add.shape, h2d.shape) == ((5, 3), (5, 3))  # the operands': p unused
    assert overlap.operands("gemm", 9) == (9, 9, 9)
    assert overlap.operands("copy", 9, "2,5") == (2, 5, 5)
    for name, shape, message in [
            ("gemm", "6,4", "gemm takes m,n,p (A[m,n] times B[n,p]), got '6,4'"),
            ("add", "6,4,3", "add takes m,n, got '6,4,3'"),
            ("sub_num", "6", "'6' has 1 value(s): give m,n or m,n,p"),
            ("copy", "6,x", "'6,x' is not two or three comma-separated integers"),
            ("gemm", "6,0,2", "'6,0,2': every value must be >= 1")]:
        with pytest.raises(ValueError, match=re.escape(message)):
            overlap.operands(name, 100, shape)


class _Work:
    """A collective's work handle whose future completes ``seconds`` after it is issued
    (a gloo thread's)."""

    def __init__(self, seconds):
        import torch

        self.future = torch.futures.Future()
        threading.Timer(seconds, self.future.set_result, args=(None,)).start()

    def get_future(self):
        return self.future


def test_an_overlapped_host_step_times_the_collectives_and_the_computation_apart():
    """Two collectives of 60 ms issued, then three 5 ms kernels on this thread: the step
    ends with the collectives; their part is 60 ms and more, the computation's 15 ms and
    not the iteration's."""
    import torch

    issued = []

    def issue(_):
        issued.append(1)
        return _Work(0.06)

    sleeping = overlap.Kernel("gemm", lambda: time.sleep(0.005), 1.0, 1.0)
    both = overlap.Overlapped(issue, 2, sleeping, 3, torch.device("cpu"), iterations=2)
    for _ in range(2):
        start = time.perf_counter()
        both.step(None)
        assert time.perf_counter() - start >= 0.06
    assert len(issued) == 4
    (collectives,), (computing,) = both.times(1)
    assert collectives >= 0.06
    assert 0.015 <= computing < 0.045


class _Cuda:
    """Stand-ins for what the overlapped step asks of torch.cuda (no GPU here): each event
    records the next instant of a clock 1 ms apart, and every call is logged in order."""

    def __init__(self, monkeypatch):
        import contextlib

        import torch

        self.log, self.slept, clock = [], [], iter(range(10**6))
        cuda = self

        class Event:
            def __init__(self, enable_timing=False):
                self.at = None

            def record(self, stream=None):
                self.at = next(clock)
                cuda.log.append(("record", self.at))

            def synchronize(self):
                pass

            def elapsed_time(self, end):
                return float(end.at - self.at)

        class Stream:
            def __init__(self, device=None):
                pass

            def wait_stream(self, other):
                cuda.log.append(("wait",))

        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "Stream", Stream)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda: Stream())
        monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
        monkeypatch.setattr(torch.cuda, "_sleep", self.sleep, raising=False)

    def sleep(self, cycles):
        self.slept.append(cycles)
        self.log.append(("sleep", cycles))


def test_an_overlapped_gpu_step_holds_the_stream_and_times_the_iteration_by_events(
        monkeypatch):
    """On a GPU both parts queue behind a waiting kernel while the host launches them (the
    collectives' and the kernels' events would otherwise time the launch), and the whole
    iteration is timed by events from the same start to the end of both. Stand-ins for
    CUDA: the order of the calls and the arithmetic are checked, not a device's timing."""
    from types import SimpleNamespace

    from dlbench import harness

    cuda = _Cuda(monkeypatch)
    issued = []

    def issue(_):
        issued.append(1)
        cuda.log.append(("issue",))
        time.sleep(0.002)  # the host's launch of a collective
        return SimpleNamespace(wait=lambda: cuda.log.append(("wait_work",)))

    work = overlap.Kernel("gemm", lambda: cuda.log.append(("kernel",)), 1.0, 1.0)
    both = overlap.Overlapped(issue, 2, work, 3, SimpleNamespace(type="cuda"), iterations=3)
    calibration = len(cuda.log)  # the hold's rate, measured once
    for _ in range(3):
        both.step(None)
    first = cuda.log[calibration:][:cuda.log[calibration:].index(("wait_work",))]
    # the hold, then the start event, then everything the host launches
    assert first[0][0] == "sleep" and first[1][0] == "record"
    assert first.count(("issue",)) == 2 and first.count(("kernel",)) == 3
    rate = harness.HOLD_CALIBRATION_CYCLES / 0.001  # the stand-in events 1 ms apart
    assert cuda.slept[1] == harness.HOLD_CALIBRATION_CYCLES  # after the kernel's loading
    assert cuda.slept[2] == int(harness.HOLD_MIN_S * rate)  # nothing launched yet
    assert cuda.slept[3] >= int(0.008 * rate)  # twice the 4 ms of two launches
    # each step's events: start, compute start, compute end, collectives' end, both's end
    assert both.iterations(2) == [0.004, 0.004]
    (collectives, computing) = both.times(2)
    assert collectives == [0.003, 0.003] and computing == [0.001, 0.001]
    facts = both.facts(2)
    assert facts["device_hold_s"] >= 0.008 and facts["late_launches"] == 0
    cpu = overlap.Overlapped(issue, 1, work, 1, SimpleNamespace(type="cpu"), iterations=1)
    assert cpu.iterations(1) is None and cpu.facts(1) == {}


def test_the_kernels_alone_are_timed_by_events_on_a_gpu_as_beside_the_collectives(
        monkeypatch):
    """The slowdown's baseline is timed as the overlapped kernels are (CUDA events, the
    stream held): not the host's loop, whose launch and sync a small kernel's time would
    carry alone. Stand-ins for CUDA and the kernel; a device's timing is not exercised."""
    import argparse
    from types import SimpleNamespace

    from dlbench.comms import runner
    from dlbench.pytorch import distributed

    _Cuda(monkeypatch)
    ran = []
    monkeypatch.setattr(overlap, "kernel", lambda *a, **k: overlap.Kernel(
        "gemm", lambda: ran.append(1), 2.0e9, 1.0e9, (1, 1, 1)))
    monkeypatch.setattr(runner, "_all_allocated", lambda ok, device: ok)
    monkeypatch.setattr(distributed, "slowest_rank_times", lambda times, device: times)
    args = argparse.Namespace(kernel="gemm", mm_dim=8, comp_data_type="float32",
                              mm_shape=None, emb_dim=4, num_embs=8, num_emb_tables=1,
                              emb_batch_size=2, bag_size=1, num_compute=2, w=1, n=3)
    _, alone = runner._compute_alone(args, SimpleNamespace(type="cuda"), lambda: None)
    assert alone["timer"] == "cuda_events" and len(ran) == 2 * 4
    assert alone["time_s"]["median"] == pytest.approx(0.001)  # the stand-in events' 1 ms
    assert alone["tflops"] == pytest.approx(2 * 2.0e9 / 0.001 / 1e12)


def test_a_study_overlaps_collectives_with_kernels_as_cells_of_their_own():
    """compute_kernel none keeps the id a collective cell had before the axis; a kernel's
    cell says it in its id and passes PARAM's flags; a point-to-point cell has none."""
    cells = study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
        "num_gpus": 8, "compute_kernel": ["none", "gemm"], "num_compute": [10, 20],
        "mm_dim": 2048, "compute_data_type": "bfloat16"}}}})
    alone = [c for c in cells if c.params["compute_kernel"] == "none"]
    assert [c.id for c in alone] == ["pytorch_all-reduce_float32_8x_gpu_4770ff82"]
    assert alone[0].params["num_compute"] is None and alone[0].params["mm_dim"] is None
    beside = {c.params["num_compute"]: c for c in cells if c not in alone}
    assert sorted(beside) == [10, 20]
    assert beside[20].id.rsplit("_", 1)[0] == "pytorch_all-reduce_float32_8x_gemm_gpu"
    argv = kinds.get("comms").command(beside[20].params, Path("x.json"), "python", None)
    assert argv[argv.index("--kernel=gemm"):][:5] == [
        "--kernel=gemm", "--num-compute=20", "--mm-dim=2048", "--mm-shape=",
        "--comp-data-type=bfloat16"]
    argv = kinds.get("comms").command(alone[0].params, Path("x.json"), "python", None)
    assert "--kernel=none" in argv and not any(a.startswith("--mm-dim") for a in argv)
    (p2p,) = study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
        "num_gpus": 2, "collective": "pt2pt", "compute_kernel": "gemm"}}}})
    assert p2p.params["compute_kernel"] is None and p2p.params["num_compute"] is None
    for grid, message in [
            ({"compute_kernel": "conv"}, "compute_kernel: unknown value 'conv'"),
            ({"compute_kernel": "gemm", "mm_dim": 0}, "mm_dim: must be >= 1, got 0"),
            ({"compute_kernel": "add", "compute_data_type": "int8"},
             "compute_data_type: unknown value 'int8'")]:
        with pytest.raises(study.ConfigError, match=f"study 'c': {message}"):
            study.expand_config({"studies": {"c": {"kind": "comms", "grid": grid}}})


def test_a_study_gives_a_gemm_its_shape_and_refuses_one_its_kernel_does_not_take():
    """mm_shape leaves mm_dim out of the cell and reaches the runner as --mm-shape; a cell
    without it keeps the id it had before the axis; a shape the kernel does not take is
    one line naming the study and the axis."""
    def cells(**grid):
        return study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
            "num_gpus": 8, "compute_kernel": "gemm", **grid}}}})

    (square,) = cells(mm_dim=2048)
    assert square.id == "pytorch_all-reduce_float32_8x_gemm_gpu_6e1a5498"
    (shaped,) = cells(mm_dim=2048, mm_shape="4096,8192,28672")
    assert shaped.params["mm_dim"] is None and shaped.params["mm_shape"] == "4096,8192,28672"
    assert shaped.id.rsplit("_", 1)[0] == "pytorch_all-reduce_float32_8x_gemm_gpu"
    assert shaped.id != square.id
    argv = kinds.get("comms").command(shaped.params, Path("x.json"), "python", None)
    assert "--mm-shape=4096,8192,28672" in argv
    assert not any(a.startswith("--mm-dim") for a in argv)
    for grid, message in [
            ({"mm_shape": "4096,8192"}, "mm_shape: gemm takes m,n,p"),
            ({"compute_kernel": "add", "mm_shape": "8,8,8"}, "mm_shape: add takes m,n"),
            ({"mm_shape": "8,y"}, "mm_shape: '8,y' is not two or three")]:
        with pytest.raises(study.ConfigError, match=re.escape(f"study 'c': {message}")):
            cells(**grid)


def test_a_study_shapes_an_embedding_lookup_by_its_tables_not_by_mm_dim():
    """emb_lookup cells take the tables' axes (PARAM's flags on the runner's command line)
    and none of mm_dim, mm_shape or compute_data_type; a GEMM cell of the same grid keeps
    its id and takes no table axis."""
    cells = study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
        "num_gpus": 8, "compute_kernel": ["gemm", "emb_lookup"], "mm_dim": 2048,
        "emb_dim": 64, "bag_size": 40}}}})
    gemm, emb = sorted(cells, key=lambda c: c.params["compute_kernel"] == "emb_lookup")
    assert gemm.id == "pytorch_all-reduce_float32_8x_gemm_gpu_6e1a5498"
    assert gemm.params["emb_dim"] is None and gemm.params["bag_size"] is None
    assert (emb.params["mm_dim"], emb.params["mm_shape"], emb.params["compute_data_type"]) \
        == (None, None, None)
    assert (emb.params["emb_dim"], emb.params["num_embs"], emb.params["num_emb_tables"],
            emb.params["emb_batch_size"], emb.params["bag_size"]) == (64, 100000, 8, 512, 40)
    assert emb.id.rsplit("_", 1)[0] == "pytorch_all-reduce_float32_8x_emb_lookup_gpu"
    argv = kinds.get("comms").command(emb.params, Path("x.json"), "python", None)
    assert argv[argv.index("--kernel=emb_lookup"):][:7] == [
        "--kernel=emb_lookup", "--num-compute=100", "--emb-dim=64", "--num-embs=100000",
        "--num-emb-tables-per-device=8", "--batch-size=512", "--bag-size=40"]
    assert not any(a.startswith(("--mm-dim", "--comp-data-type")) for a in argv)
    with pytest.raises(study.ConfigError, match="study 'c': bag_size: must be >= 1, got 0"):
        study.expand_config({"studies": {"c": {"kind": "comms", "grid": {
            "compute_kernel": "emb_lookup", "bag_size": 0}}}})


def test_the_runner_overlaps_params_embedding_lookup_with_its_flags(tmp_path, capsys):
    """PARAM's --kernel emb_lookup with its table flags (and their other spellings) in a
    group of one: the tables the cell records, the lookups timed alone and beside each
    size, their FLOPs counted; --mm-dim beside it is refused in one line."""
    from dlbench.comms import runner

    out = tmp_path / "cell.json"
    rc = runner.main(["--device=cpu", "--kernel", "emb_lookup", "--ntables", "2",
                      "--num-embs", "1000", "--emb-dim", "16", "--batch-size", "32",
                      "--bag-size", "4", "--num-compute-per-iteration=2", "--b=64", "--e=256",
                      "--f=4",
                      "--w=1", "--n=2", "--c=1", f"--output={out}"])
    res = R.read(out)
    assert rc == 0 and res["status"] == "ok", res.get("error")
    R.validate(res)
    cell = res["cell"]
    assert (cell["compute_kernel"], cell["num_emb_tables"], cell["emb_batch_size"],
            cell["mm_dim"]) == ("emb_lookup", 2, 32, None)
    alone = res["extra"]["compute_alone"]
    assert alone["tables"] == {"dim": 16, "rows": 1000, "tables": 2, "batch": 32, "bag": 4}
    assert (alone["shape"], alone["data_type"], alone["dim"]) == ([2, 1000, 16], "float32",
                                                                  None)
    assert alone["flops_per_iteration"] == 2 * (2 * 32 * 4 * 16)
    assert all(m["extra"]["compute_overlapped"]["slowdown"] > 0 for m in res["measurements"])
    with pytest.raises(SystemExit) as exc:
        runner.main(["--device=cpu", "--kernel", "emb_lookup", "--mm-dim", "64"])
    assert exc.value.code == 2
    assert "--mm-dim/--mm-shape: emb_lookup is shaped by its tables" in capsys.readouterr().err


def test_the_runner_reads_params_mm_dim_with_three_values_as_a_gemm_shape(tmp_path, capsys):
    """PARAM's --mm-dim m n p on the runner's command line: the cell records the shape
    and the GEMM's FLOPs are 2mnp; two values for a GEMM are refused in one line."""
    from dlbench.comms import command_line, runner

    assert command_line.params_mm_dim(["--mm-dim", "4", "5", "--b=8"]) == ["--mm-shape=4,5", "--b=8"]
    assert command_line.params_mm_dim(["--mm-dim", "4", "--b=8"]) == ["--mm-dim", "4", "--b=8"]
    assert command_line.params_mm_dim(["--comp-dim", "4", "5", "6"]) == ["--mm-shape=4,5,6"]
    assert command_line.params_mm_dim(["--comp-dim", "4", "--comp-dim=5"]) == [
        "--mm-dim", "4", "--mm-dim=5"]
    out = tmp_path / "cell.json"
    rc = runner.main(["--device=cpu", "--mode", "comms-compute", "--mm-dim", "24", "16", "8",
                      "--num-compute=2", "--b=64", "--e=64", "--w=1", "--n=2",
                      f"--output={out}"])
    res = R.read(out)
    assert rc == 0 and res["status"] == "ok", res.get("error")
    R.validate(res)
    assert (res["cell"]["mm_shape"], res["cell"]["mm_dim"]) == ("24,16,8", None)
    alone = res["extra"]["compute_alone"]
    assert alone["shape"] == [24, 16, 8] and alone["dim"] is None
    assert alone["flops_per_iteration"] == 2 * 2.0 * 24 * 16 * 8
    with pytest.raises(SystemExit) as exc:
        runner.main(["--device=cpu", "--kernel", "gemm", "--mm-dim", "64", "32"])
    assert exc.value.code == 2
    assert "--mm-dim/--mm-shape: gemm takes m,n,p" in capsys.readouterr().err


def test_the_runner_takes_params_mode_and_refuses_a_kernel_it_would_not_run(capsys):
    from dlbench.comms import runner

    for argv, message in [
            (["--mode", "comms", "--kernel", "add"],
             "--kernel add computes beside the collectives: that is --mode comms-compute"),
            (["--pt2pt", "one2one", "--kernel", "gemm"],
             "--kernel gemm: point-to-point tests run without a compute kernel"),
            (["--mode", "compute"], "argument --mode: invalid choice: 'compute'")]:
        with pytest.raises(SystemExit) as exc:
            runner.main(["--device=cpu", *argv])
        assert exc.value.code == 2 and message in capsys.readouterr().err


def test_in_comms_compute_mode_a_size_times_its_collective_apart_from_the_kernels(
        tmp_path, monkeypatch):
    """PARAM's --mode comms-compute (kernel gemm) in a group of one: the kernels (here each
    holding the host 4 ms) are timed alone before the sweep and beside each size; the
    size's measurement is the collective's part, far below the iteration's 8 ms, and the
    kernels beside it take about their time alone."""
    from dlbench.comms import runner

    made = []

    def sleeping(name, dim, data_type, device, shape="", tables=None):
        made.append((name, dim, data_type, device.type))
        return overlap.Kernel(name, lambda: time.sleep(0.004), 2.0 * dim**3, 3.0 * dim * dim)

    monkeypatch.setattr(overlap, "kernel", sleeping)
    out = tmp_path / "cell.json"
    rc = runner.main(["--device=cpu", "--mode", "comms-compute", "--num-compute=2",
                      "--mm-dim=64", "--comp-data-type=bfloat16", "--b=64", "--e=256",
                      "--f=4", "--w=1", "--n=4", "--c=1", f"--output={out}"])
    res = R.read(out)
    assert rc == 0 and res["status"] == "ok", res.get("error")
    R.validate(res)
    assert made == [("gemm", 64, "bfloat16", "cpu")]
    cell = res["cell"]
    assert (cell["compute_kernel"], cell["num_compute"], cell["mm_dim"],
            cell["compute_data_type"]) == ("gemm", 2, 64, "bfloat16")
    alone = res["extra"]["compute_alone"]
    assert (alone["kernel"], alone["per_iteration"]) == ("gemm", 2)
    assert alone["flops_per_iteration"] == 2 * 2.0 * 64**3
    assert 0.008 <= alone["time_s"]["median"] < 0.03
    assert alone["tflops"] == pytest.approx(
        alone["flops_per_iteration"] / alone["time_s"]["median"] / 1e12)
    assert [m["bytes_per_iteration"] for m in res["measurements"]] == [64.0, 256.0]
    for m in res["measurements"]:
        assert m["extra"]["validated"] is True and m["iterations"] == 4
        iteration = m["extra"]["iteration_time_s"]["median"]
        assert iteration >= 0.008 and m["time_s"]["median"] < iteration / 2
        beside = m["extra"]["compute_overlapped"]
        assert beside["slowdown"] == pytest.approx(
            beside["time_s"]["median"] / alone["time_s"]["median"])
        assert 0.7 < beside["slowdown"] < 2.0


def test_two_processes_overlap_a_non_blocking_window_with_add_kernels_validated(tmp_path):
    """Two gloo processes through torchrun: each iteration's window of all_reduce beside
    five elementwise adds on this CPU's other thread; every size measured, validated, the
    computation beside it recorded; the rows reach the overlap chart."""
    out = tmp_path / "cell.json"
    proc = subprocess.run(
        [sys.executable, "-m", "dlbench.comms", "--num_gpus=2", "--device=cpu",
         "--kernel=add", "--num-compute=5", "--mm-dim=128", "--z=0", "--window=2",
         "--b=1024", "--e=65536", "--f=64", "--w=1", "--n=3", "--c=1", f"--output={out}"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = R.read(out)
    R.validate(res)
    assert res["status"] == "ok" and res["extra"]["collectives_per_iteration"] == 2
    assert res["extra"]["compute_alone"]["gbps"] > 0
    assert res["extra"]["compute_alone"]["bytes_per_iteration"] == 5 * 3 * 128 * 128 * 4
    assert [(m["bytes_per_iteration"], m["extra"]["validated"],
             m["extra"]["compute_overlapped"]["slowdown"] > 0)
            for m in res["measurements"]] == [(1024.0, True, True), (65536.0, True, True)]
    frame = prepare(pd.DataFrame(aggregate.rows_of(res, "cell.json")))
    data = comms_charts.overlap_frame(frame)
    assert data["size_bytes"].tolist() == [1024.0, 65536.0]
    assert data["slowdown"].tolist() == [
        m["extra"]["compute_overlapped"]["slowdown"] for m in res["measurements"]]


def _row(cell, kernel, size, seconds, slowdown=None):
    extra = {} if slowdown is None else {
        "compute_alone": {"time_s": {"median": 1e-3}},
        "compute_overlapped": {"time_s": {"median": slowdown * 1e-3,
                                          "p95": slowdown * 1.2e-3},
                               "slowdown": slowdown}}
    return {"cell_id": cell, "source": f"{cell}.json", "study": "net", "kind": "comms",
            "status": "ok", "throughput": 1 / seconds, "name": f"all_reduce|{size}",
            "pass": "collective", "op_name": "all_reduce", "collective": "all_reduce",
            "num_gpus": 2, "num_nodes": 1, "system": "a", "device": "gpu",
            "data_type": "float32", "framework": "pytorch", "bytes_per_iteration": size,
            "compute_kernel": kernel, "time_median_s": seconds, "time_p95_s": seconds * 1.1,
            "gbps": size / seconds / 1e9, "bus_gbps": size / seconds / 1e9,
            "extra": json.dumps(extra)}


def test_the_charts_set_a_collective_beside_a_kernel_apart_and_show_the_kernels_slowdown():
    frame = prepare(pd.DataFrame([
        _row("alone", "none", 1024, 1e-5), _row("alone", "none", 4096, 2e-5),
        _row("gemm", "gemm", 1024, 3e-5, 1.25), _row("gemm", "gemm", 4096, 6e-5, 1.5)]))
    bandwidth = comms_charts.bandwidth_figure(frame)
    assert "compute_kernel" in [c.field for c in bandwidth.table.columns]
    data = comms_charts.overlap_frame(frame)
    assert data["cell"].tolist() == ["a/gemm", "a/gemm"]
    assert data[["slowdown", "compute_us", "compute_alone_us"]].values.tolist() == [
        [1.25, 1250.0, 1000.0], [1.5, 1500.0, 1000.0]]
    figure = comms_charts.overlap_figure(frame)
    assert figure.name == "comms-overlap" and "slowdown" in json.dumps(figure.chart.to_dict())
    assert comms_charts.overlap_figure(frame[frame["compute_kernel"] == "none"]) is None
    older = frame.drop(columns=["compute_kernel"])  # results from before the axis
    assert comms_charts.overlap_figure(older) is None
