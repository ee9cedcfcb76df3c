"""What a reader of the report reads: sentences whose figures agree with their headline,
time and cells not left out without a word, a numbers table under every chart, tooltips
without "NaN", an operator input named by its arguments, counts in the singular for one."""

from __future__ import annotations

import copy
import json

import pytest
from test_efficiency import comms_doc
from test_efficiency import table as efficiency_table
from test_report import (
    model_cell,
    model_result,
    op_result,
    runs_of,
    section_of,
    write_parquet,
)
from test_report_input_wait import page_parts

from dlbench import result as R
from dlbench.report import (
    cpu_precision,
    model_charts,
    op_charts,
    output,
    render,
    roofline_charts,
    tables,
    time_charts,
)
from dlbench.report.data import load
from dlbench.report.style import nouns

# -- the CPU's reduced precision in words -------------------------------------------------


def test_a_faster_reduced_precision_gives_its_range_as_speed_ups_like_its_headline():
    """bfloat16 steps of 0.6 to 0.9 times float32's: the headline is a speed-up (1.3x
    faster), so is its range (1.1x-1.7x), not the time ratios (0.6x-0.9x) around it."""
    slowdowns = [0.6, 0.7, 0.8, 0.9]
    fact = {"cpu_model": "Xeon", "cpu_capability": None, "precision": "bfloat16",
            "native": "native", "slowdown_median": 0.75, "slowdown_min": min(slowdowns),
            "slowdown_max": max(slowdowns), "pairs": 4}
    assert cpu_precision.sentence(fact) == (
        "On Xeon, bfloat16 is native on this CPU: its bfloat16 steps ran 1.3× faster than "
        "float32 (median of 4 cell pairs, 1.1×–1.7×).")
    slower = {**fact, "slowdown_median": 3.0, "slowdown_min": 2.0, "slowdown_max": 4.5}
    assert cpu_precision.sentence(slower).endswith(
        "steps took 3.0× as long as float32 (median of 4 cell pairs, 2.0×–4.5×).")


# -- where the time went ------------------------------------------------------------------


def launcher_row(res: dict, seconds: float) -> dict:
    """The row the launcher writes for a runner it stopped: no measurements, no stages,
    its own time as wall_time_s."""
    res = copy.deepcopy(res)
    res.update(measurements=[], wall_time_s=seconds)
    res.pop("stages_s", None)
    return R.finish(res, "failed", "timed out after 600 s (timeout_s); the runner's process "
                                   "group was killed")


def test_a_cell_stopped_without_stages_counts_its_wall_time_as_not_broken_down(tmp_path):
    """Four cells with stages and a timed-out one of 600 s: the study's time is 610 s in 5
    cells, the 600 s a part of its own named as a lower bound, not 10 s in 4 cells."""
    done = []
    for batch in (8, 16, 32, 64):
        res = model_result("s", model_cell("resnet50", "training", "float32", batch))
        res["stages_s"] = {"startup": 1.0, "measure": 1.0, "other": 0.5}
        done.append(res)
    stopped = launcher_row(model_result("s", model_cell("resnet50", "training", "float32",
                                                         128)), 600.0)
    long = time_charts.stage_frame(load(write_parquet(tmp_path, [*done, stopped])))
    seconds = dict(zip(long["stage"], long["seconds"], strict=True))
    assert seconds["not broken down"] == 600.0 and seconds["measured"] == 4.0
    assert set(long["cells"]) == {5} and set(long["unstaged"]) == {1}
    line = time_charts.summary_line(long)
    assert line.startswith("The cells' own time: 10.2 min in 5 cells, of which the measured "
                           "iterations took 4 s (1%). The largest other part: start-up, 4 s. "
                           "10.0 min of it is the wall time of 1 cell that recorded no stages")
    assert "a lower bound of its cost" in line


def test_a_study_whose_cells_all_stopped_still_says_where_its_time_went(tmp_path):
    cells = [launcher_row(model_result("s", model_cell("resnet50", "training", "float32", b)),
                          s) for b, s in ((8, 600.0), (16, 0.5))]
    figure = time_charts.time_figure(load(write_parquet(tmp_path, cells)))
    assert figure is not None
    assert "in 2 cells" in figure.caption and "2 cells that recorded no stages" in figure.caption
    assert "unstaged" in {c.field for c in figure.table.columns}


# -- a numbers table under every chart ----------------------------------------------------


def drifting(res: dict) -> dict:
    """``res`` with 40 iterations rising 20 % (the drift chart draws it)."""
    base = res["measurements"][0]["time_s"]["median"]
    times = [base * (1 + 0.2 * i / 39) for i in range(40)]
    res["measurements"][0].update(R.measurement(
        name=res["measurements"][0]["name"], pass_=res["measurements"][0]["pass"],
        times_s=times, items_per_iteration=64))
    return res


@pytest.fixture(scope="module")
def mixed_report(tmp_path_factory):
    """Model cells (one drifting, one out of memory), an operator cell whose inputs carry
    their PARAM config, and a collective of 8 processes (bus bandwidth above its time: two
    charts stacked)."""
    folder = tmp_path_factory.mktemp("mixed")
    models = [model_result("s", model_cell("resnet50", "training", "float32", b))
              for b in (32, 64)]
    drifting(models[1])
    oom = model_result("s", model_cell("resnet50", "training", "float32", 256), status="oom",
                       error="CUDA out of memory")
    ops = op_result("ops")
    for m in ops["measurements"]:
        n = {"0": 256, "1": 512, "2": 1024}[m["name"].rsplit("|", 1)[1]]
        m["extra"]["config"] = {"build": None, "input": {"args": [
            {"type": "tensor", "dtype": "float", "shape": [n, n]},
            {"type": "tensor", "dtype": "float", "shape": [n, n]}], "kwargs": {}}}
    comms = comms_doc()
    parquet = write_parquet(folder, [*models, oom, ops, comms])
    render(parquet, folder / "report")
    return (folder / "report" / "index.html").read_text()


# Charts with a plain table of their own under them instead.
PLAIN_TABLES = {"roofline"}


def test_every_chart_has_its_numbers_table(mixed_report):
    parts = page_parts(mixed_report)
    charts = {key.removeprefix("chart-") for key in parts["DLBENCH_SPECS"]}
    numbers = {key.removeprefix("table-") for key in parts["DLBENCH_TABLES"]}
    assert {"comms-bandwidth", "op-time", "op-tflops", "op-gbps", "drift"} <= charts
    assert charts - PLAIN_TABLES <= numbers  # (and tables of their own, no chart's)
    # The collectives' table reads the rows of the time's panels, one per message size.
    comms = parts["DLBENCH_TABLES"]["table-comms-bandwidth"]
    rows = [r for r in _rows(parts, comms["data"]) if r.get("time_us") is not None]
    assert len(rows) == 1 and rows[0]["busbw_gbps"] == pytest.approx(
        2**30 / 0.005 / 1e9 * 1.75, rel=1e-5)


def _rows(parts: dict, name: str) -> list[dict]:
    from dlbench.report import datasets

    return datasets.unpack(parts["DLBENCH_DATA"][name])


def test_an_operator_input_is_named_by_its_arguments_in_tooltips_and_tables(mixed_report):
    parts = page_parts(mixed_report)
    table = parts["DLBENCH_TABLES"]["table-op-time"]
    assert ["shapes", "arguments", ""] in table["columns"]
    shapes = {r["input"]: r["shapes"] for r in _rows(parts, table["data"])}
    assert shapes["torch.mm|0|2"] == "float[1024, 1024], float[1024, 1024]"
    for name in ("op-time", "op-tflops", "op-gbps"):
        assert '"field": "shapes"' in json.dumps(parts["DLBENCH_SPECS"][f"chart-{name}"])
    roofline = section_of(mixed_report, "roofline")
    assert "<th>arguments</th>" in roofline and "float[512, 512], float[512, 512]" in roofline


def test_input_arguments_read_scalars_lists_and_a_modules_build():
    extra = json.dumps({"config": {
        "build": {"args": [{"type": "int", "value": 32}],
                  "kwargs": {"kernel_size": {"type": "int", "value": 3}}},
        "input": {"args": [{"type": "tensor", "dtype": "long", "shape": [4, 20]},
                           {"type": "genericlist", "value": [{"type": "int", "value": 1},
                                                             {"type": "none"}]},
                           {"type": "float", "value_range": [0, 1]}],
                  "kwargs": {"dim": {"type": "int", "value": -1}}}}})
    assert op_charts.input_arguments(extra) == (
        "long[4, 20], [1, None], float in [0, 1], dim=-1", "32, kernel_size=3")
    assert op_charts.input_arguments("{}") == ("", "")
    assert op_charts.input_arguments(None) == ("", "")


def test_cells_that_did_not_finish_are_named_under_the_charts_against_batch_size(
        mixed_report):
    note = ("Not drawn in the charts against batch size: 1 cell out of memory: resnet50 · "
            "training · float32 · batch 256.")
    for section in ("throughput", "tflops"):
        text = section_of(mixed_report, section)
        assert note in text and '<a href="#failures">' in text, section


def test_the_note_counts_statuses_and_names_only_the_first_cells(tmp_path):
    cells = [model_result("s", model_cell("resnet50", "training", "float32", 8))]
    cells += [model_result("s", model_cell("resnet50", "training", "float32", b),
                           status="oom", error="out of memory")
              for b in (16, 32, 64, 128, 256, 512, 1024)]
    cells.append(model_result("s", model_cell("alexnet", "inference", "float32", 4),
                              status="failed", error="boom"))
    note = tables.unfinished_note(load(write_parquet(tmp_path, cells)))
    assert note.startswith('<p class="note unfinished">Not drawn in the charts against batch '
                           "size: 8 cells that did not finish (7 cells out of memory, 1 cell "
                           "failed): resnet50 · training · float32 · batch 16, out of memory;")
    assert "; and 2 more. " in note and "alexnet" not in note  # failed after out of memory
    ok_only = [model_result("s", model_cell("resnet50", "training", "float32", 8))]
    assert tables.unfinished_note(load(write_parquet(tmp_path / "ok", ok_only))) is None


def uncounted(cell: dict, note: str | None) -> dict:
    res = model_result("s", cell)
    m = res["measurements"][0]
    m["flops_per_iteration"] = m["tflops"] = None
    if note:
        m["extra"]["flops_note"] = note
    return res


def test_cells_without_a_flop_count_are_named_under_the_tflops_chart_with_the_reason(tmp_path):
    cells = [model_result("s", model_cell("resnet50", "training", "float32", 8))]
    cells += [uncounted(model_cell("resnet50", "training", "float32", b, framework="mxnet"),
                        "not available: MXNet has no FLOP counter") for b in (64, 8, 16, 32)]  # named by batch size
    cells.append(uncounted(model_cell("alexnet", "inference", "float32", 4), None))
    cells += [uncounted(model_cell("alexnet", "training", "float32", b),
                        "not available: FlopCounterMode has no formula for aten::_fused "
                        f"(it counted {b * 1000} FLOPs without them)") for b in (4, 8)]
    render(write_parquet(tmp_path, cells), tmp_path / "report")
    page = (tmp_path / "report" / "index.html").read_text()
    assert ('<p class="note uncounted">Without TFLOP/s, their FLOPs not counted: 4 cells '
            "(MXNet has no FLOP counter): resnet50 · mxnet · training · float32 · batch 8, "
            "resnet50 · mxnet · training · float32 · batch 16, resnet50 · mxnet · training · "
            "float32 · batch 32 and 1 more; 2 cells (FlopCounterMode has no formula for "
            "aten::_fused): alexnet · pytorch · training · float32 · batch 4, alexnet · "
            "pytorch · training · float32 · batch 8; 1 cell (no FLOP count recorded): "
            "alexnet · pytorch · inference · float32 · batch 4.</p>") in section_of(page, "tflops")
    counted = [model_result("s", model_cell("resnet50", "training", "float32", 8))]
    assert tables.uncounted_note(model_charts.model_frame(
        load(write_parquet(tmp_path / "all", counted)))) is None
    # A study of MXNet cells alone has the section for the note: why there is no chart.
    render(write_parquet(tmp_path / "mx", cells[1:5]), tmp_path / "mx" / "report")
    alone = section_of((tmp_path / "mx" / "report" / "index.html").read_text(), "tflops")
    assert "model-tflops" not in alone and ("4 cells (MXNet has no FLOP counter): resnet50 · "
                                            "training · float32 · batch 8") in alone


def test_uncounted_cells_are_told_apart_by_every_axis_the_chart_tells_them_by(tmp_path):
    """Cells alike but for their GPU count or data source are two points of the chart and
    two names in the note; an axis that differs only between models (their iteration
    counts) is not said. ParaDnn cells drawn in TFLOP/s get their note in their section,
    named by their options."""
    reason = "not available: FlopCounterMode has no formula for aten::_fused"
    cells = [model_result("s", model_cell("resnet50", "training", "float32", 8,
                                          num_batches=50))]
    for gpus, data in ((1, "synthetic"), (2, "synthetic"), (1, "imagenet")):
        cells.append(uncounted(model_cell("alexnet", "training", "float32", 8, num_gpus=gpus,
                                          data=data, num_batches=100), reason))
        cells[-1]["cell_id"] = f"alexnet_{gpus}_{data}"
    for layers, counted in ((4, True), (8, False)):
        res = model_result("s", model_cell("resnet50", "training", "float32", 16))
        res["cell"].update(model="paradnn_fc", model_opts={"layers": layers, "nodes": 64})
        res["cell_id"] = f"paradnn_fc_{layers}"
        if not counted:
            res["measurements"][0]["flops_per_iteration"] = None
            res["measurements"][0]["tflops"] = None
            res["measurements"][0]["extra"]["flops_note"] = reason
        cells.append(res)
    render(write_parquet(tmp_path, cells), tmp_path / "report")
    page = (tmp_path / "report" / "index.html").read_text()
    assert ("3 cells (FlopCounterMode has no formula for aten::_fused): alexnet · training · "
            "float32 · batch 8 · 1 GPU · imagenet, alexnet · training · float32 · batch 8 · "
            "1 GPU · synthetic, alexnet · training · float32 · batch 8 · 2 GPUs · "
            "synthetic.") in section_of(page, "tflops")
    assert ("Without TFLOP/s, their FLOPs not counted: 1 cell (FlopCounterMode has no formula "
            "for aten::_fused): paradnn_fc · layers=8 · training · float32 · batch 16."
            ) in section_of(page, "paradnn")


def test_dlbench_report_renders_a_table_by_hand_and_refuses_a_bad_one_in_one_line(
        tmp_path, capsys):
    from dlbench import command

    parquet = write_parquet(tmp_path, [model_result("s", model_cell("alexnet", "training",
                                                                    "float32", 8))])
    assert command.main(["report", str(parquet), "--outdir", str(tmp_path / "out")]) == 0
    assert "alexnet" in (tmp_path / "out" / "index.html").read_text()
    # By default beside the table, named after it: never the workflow's results/report.
    assert command.main(["report", str(parquet)]) == 0
    assert "alexnet" in (parquet.with_name(f"{parquet.stem}-report") / "index.html").read_text()
    assert command.main(["report", str(tmp_path / "none.parquet")]) == 2
    assert capsys.readouterr().err == (f"dlbench report: {tmp_path / 'none.parquet'}: no such "
                                       "aggregate Parquet file\n")


# -- tooltips without NaN -----------------------------------------------------------------


def tooltip_fields(chart) -> set[str]:
    found: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "tooltip" and isinstance(value, list):
                    found.update(t.get("field") for t in value if isinstance(t, dict))
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(chart.to_dict())
    return found


def test_the_run_to_run_cv_is_a_tooltip_only_where_cells_ran_more_than_once(tmp_path):
    once = [model_result("s", model_cell("resnet50", "training", "float32", b))
            for b in (32, 64)]
    models = model_charts.model_frame(load(write_parquet(tmp_path / "once", once)))
    assert "run_to_run_cv" not in tooltip_fields(model_charts.throughput_figure(models).chart)
    repeated = runs_of(once[0])
    models = model_charts.model_frame(load(write_parquet(tmp_path / "rep", repeated)))
    assert "run_to_run_cv" in tooltip_fields(model_charts.throughput_figure(models).chart)


# -- a roofline without ceilings ----------------------------------------------------------


def cpu_op(dtype: str = "float") -> dict:
    from test_efficiency import op_doc

    return op_doc(dtype, device="cpu")


def test_a_roofline_without_ceilings_says_so_and_how_to_measure_them(tmp_path):
    frame = efficiency_table(tmp_path, [cpu_op()])
    figure = roofline_charts.roofline_figure(frame)
    assert figure.chart.to_dict()["title"].endswith("(no ceilings)")
    assert "each precision's roof" not in figure.caption
    assert "No roof for sysA · cpu · AMD EPYC 9654" in figure.caption
    assert "calibrate: true in the study measures its ceilings" in figure.caption
    assert "pct_of_roof" not in tooltip_fields(figure.chart)
    assert "% of roof" not in roofline_charts.roofline_table(frame)


# -- the environment table ----------------------------------------------------------------


def test_the_environment_names_the_system_and_marks_a_cpu_hosts_gpu_libraries(tmp_path):
    gpu = model_result("s", model_cell("resnet50", "training", "float32", 32))
    gpu["system"] = "bigbox"
    cpu = model_result("s", model_cell("resnet50", "training", "float32", 64, device="cpu"))
    cpu["system"] = "laptop"
    cpu["environment"].update(hostname="lap01", gpu_models=[], gpu_driver=None,
                              cudnn_version="92400")
    headers, rows = tables.environment_rows(load(write_parquet(tmp_path, [gpu, cpu])))
    named = {row[0]: dict(zip(headers, row, strict=True)) for row in rows}
    assert headers[:2] == ["system", "host"]
    assert named["bigbox"]["host"] == "node01" and named["laptop"]["host"] == "lap01"
    assert (named["bigbox"]["CUDA"], named["bigbox"]["cuDNN"]) == ("12.4", "9.1.0")
    assert (named["laptop"]["CUDA"], named["laptop"]["cuDNN"], named["laptop"]["NCCL"]) == (
        "12.4 (build)", "9.24.0 (build)", "2.21.5 (build)")
    html = tables.environment_table(load(write_parquet(tmp_path, [gpu, cpu])))
    assert "(build): on a host without a GPU, the version the framework was built with" in html


@pytest.mark.parametrize(("version", "text"), [
    ("92400", "9.24.0"), ("90100", "9.1.0"), ("8902", "8.9.2"), ("7605", "7.6.5"),
    ("9.1.0", "9.1.0"), (None, "")])
def test_cudnns_number_reads_as_its_release(version, text):
    assert tables.cudnn_text(version) == text


# -- counts in words ----------------------------------------------------------------------


def test_one_is_singular_in_the_header_and_the_numbers(tmp_path):
    assert (nouns(1, "cell"), nouns(2, "cell"), nouns(1234, "row")) == (
        "1 cell", "2 cells", "1,234 rows")
    assert nouns(2, "process", "processes") == "2 processes"
    res = model_result("s", model_cell("resnet50", "training", "float32", 32))
    res["stages_s"] = {"startup": 1.0, "measure": 1.0}
    render(write_parquet(tmp_path, [res]), tmp_path / "report")
    html = (tmp_path / "report" / "index.html").read_text()
    assert "(1 row)." in html and "The numbers: 1 row (click" in html
    assert "cell(s)" not in html and " 1 rows" not in html


def test_dlbench_report_refuses_a_folder_holding_what_no_report_wrote_and_keeps_it(
        tmp_path, capsys):
    """A report replaces index.html and charts/ whole: --outdir naming a folder with a
    user's own page or files in charts/ lost them, with exit 0. Such a folder is refused in
    one line (exit 2) and left as it was; a report's own folder, one of a release before
    the generator tag included, is replaced; a folder given as the table is named as one."""
    from dlbench import command

    parquet = write_parquet(tmp_path, [model_result("s", model_cell("alexnet", "training",
                                                                    "float32", 8))])
    mine = tmp_path / "mine"
    (mine / "charts").mkdir(parents=True)
    (mine / "charts" / "notes.txt").write_text("notes")
    assert command.main(["report", str(parquet), "--outdir", str(mine)]) == 2
    assert capsys.readouterr().err == (
        f"dlbench report: {mine / 'charts'}: holds 'notes.txt', not a chart of a dlbench "
        "report, and a report replaces the folder whole; give another --outdir\n")
    (mine / "charts" / "notes.txt").unlink()
    (mine / "index.html").write_text("<html>my page</html>")
    assert command.main(["report", str(parquet), "--outdir", str(mine)]) == 2
    assert "index.html: not a page of a dlbench report" in capsys.readouterr().err
    assert (mine / "index.html").read_text() == "<html>my page</html>"

    ours = tmp_path / "ours"
    assert command.main(["report", str(parquet), "--outdir", str(ours)]) == 0
    page = (ours / "index.html").read_text()
    # a page written before the generator tag is still known as a report's
    (ours / "index.html").write_text(page.replace(output.GENERATOR, ""))
    (ours / "charts" / "stale.svg").write_text("<svg/>")
    (ours / "charts" / ".snakemake_timestamp").write_text("")  # the workflow's charts/
    assert command.main(["report", str(parquet), "--outdir", str(ours)]) == 0
    assert output.GENERATOR in (ours / "index.html").read_text()
    assert not (ours / "charts" / "stale.svg").exists()

    assert command.main(["report", str(tmp_path)]) == 2
    assert capsys.readouterr().err.endswith(
        f"{tmp_path}: a folder, not an aggregate Parquet file (such as "
        "results/benchmarks.parquet)\n")
    # a mistyped profiles folder read as "no profiles", unsaid
    assert command.main(["report", str(parquet), "--outdir", str(ours),
                         "--profiles_dir", str(tmp_path / "nope")]) == 0
    assert capsys.readouterr().err == (
        f"dlbench report: warning: --profiles_dir {tmp_path / 'nope'}: no such folder; the "
        "report has no Profiles section\n")
