"""The report at scale: chart encodings chosen from the axes that vary, the page's data held
once and packed, the sortable tables, and benchmarks/report_scale.py in a small run.

The synthetic studies come from the benchmark's own generator (result documents through
``aggregate.rows_of`` into the one Parquet schema), on grids small enough for 2 cores."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from dlbench import axes
from dlbench.report import datasets, encodings, model_charts, paradnn_charts, resource_charts
from dlbench.report.data import load
from dlbench.report.encodings import Encoding
from dlbench.report.page import TABLE_FORMAT

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "report_scale.py"
CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("report_scale", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def study(bench, tmp_path: Path, **grid) -> pd.DataFrame:
    """The report's frame of a synthetic study; ``grid`` overrides the one-value defaults."""
    base = {"model": ["resnet50"], "phase": ["training"], "precision": ["float32"],
            "batch_size": [8], "num_gpus": [1], "num_batches": [100]}
    parquet, _ = bench.write_table(tmp_path, {**base, **grid})
    return load(parquet)


def lines(figure) -> tuple[pd.DataFrame, list[str], list[str]]:
    """The rows a chart draws as lines and what tells one line from another: the facet
    field, the line layer's colour, detail and stroke dash, and the field of each filter
    bound to a dropdown (one value shown at a time)."""
    spec = figure.chart.to_dict()
    rows = pd.DataFrame(spec["datasets"][spec["data"]["name"]])
    inner = spec["spec"]
    (line,) = [layer for layer in inner["layer"]
               if (layer["mark"]["type"] if isinstance(layer["mark"], dict) else layer["mark"])
               == "line"]
    encoding = line["encoding"]
    keys = [spec["facet"]["field"]]
    for channel in ("color", "detail", "strokeDash"):
        for item in (encoding.get(channel) or []) if isinstance(encoding.get(channel), list) \
                else [encoding[channel]] if channel in encoding else []:
            keys.append(item["field"])
    params = {p["name"] for p in spec.get("params", []) if "bind" in p}
    picked = []
    for transform in inner.get("transform", []):
        for field, name in re.findall(r"datum\['([^']+)'\] == (\w+)", transform.get("filter", "")):
            assert name in params
            picked.append(field)
    return rows, keys, picked


def zig_zags(figure, x: str = "batch_size") -> int:
    """How many lines would visit one x value (batch size) twice."""
    rows, keys, picked = lines(figure)
    per_line = rows.groupby([*keys, *picked], dropna=False)[x]
    return int((per_line.nunique() != per_line.size()).sum())


def test_a_study_varying_only_batch_size_and_precision_gets_no_extra_facets(bench, tmp_path):
    frame = study(bench, tmp_path, precision=["float32", "bfloat16"], batch_size=[1, 2, 4])
    models = model_charts.model_frame(frame)
    encoding = encodings.choose(models)
    assert encoding == Encoding(panels=["model", "phase"])
    figure = model_charts.throughput_figure(models)
    spec = figure.chart.to_dict()
    # the throughput panels' own field (with the unit where units differ; not here)
    assert spec["facet"]["field"] == "panel_unit" and spec["columns"] == 1
    rows = spec["datasets"][spec["data"]["name"]]
    assert {r["panel_unit"] for r in rows} == {"resnet50 · training"}
    assert "params" not in spec and "strokeDash" not in spec["spec"]["layer"][0]["encoding"]
    assert zig_zags(figure) == 0
    assert "Choose" not in figure.caption


def test_num_batches_gets_a_line_style_and_no_line_visits_a_batch_size_twice(bench, tmp_path):
    frame = study(bench, tmp_path, precision=["float32", "bfloat16"], batch_size=[1, 2, 4],
                  num_batches=[50, 100])
    models = model_charts.model_frame(frame)
    encoding = encodings.choose(models)
    assert encoding.series == ["num_batches"] and encoding.filters == []
    figures = [model_charts.throughput_figure(models), model_charts.tflops_figure(models),
               resource_charts.energy_figure(models), resource_charts.power_figure(models)]
    for figure in figures:
        assert zig_zags(figure) == 0, figure.name
    legend = figures[0].chart.to_dict()["spec"]["layer"][0]["encoding"]["strokeDash"]
    assert legend["title"] == "measured iterations" and legend["sort"] == ["50 iterations", "100 iterations"]


def test_lines_of_one_point_give_their_point_shapes_a_legend(bench, tmp_path):
    """At one batch size a line is a point and shows no dash: the line-style legend alone
    told nothing apart (as a GPU study of one batch size on two systems showed), so the
    shapes get a legend; where every line has two points or more they need none."""
    for name in ("one", "lines"):
        (tmp_path / name).mkdir()
    lone = model_charts.model_frame(study(bench, tmp_path / "one", batch_size=[4],
                                          num_batches=[50, 100]))
    spec = model_charts.throughput_figure(lone).chart.to_dict()["spec"]["layer"][0]["encoding"]
    assert spec["shape"]["legend"] == {"title": "measured iterations (points)"}
    assert spec["shape"]["field"] == spec["strokeDash"]["field"] == "variant"
    lines = model_charts.model_frame(study(bench, tmp_path / "lines", batch_size=[1, 2],
                                           num_batches=[50, 100]))
    spec = model_charts.throughput_figure(lines).chart.to_dict()["spec"]["layer"][0]["encoding"]
    assert spec["shape"]["legend"] is None
    assert model_charts._points_title(["framework ·", "GPUs"]) == ["framework ·", "GPUs (points)"]


def test_a_line_style_standing_for_several_axes_has_its_legend_title_on_several_lines(
        bench, tmp_path, monkeypatch):
    """Three axes' names on one line ("framework · measured iterations · warm-up
    iterations") widened the chart past the page; a long title goes one axis a line."""
    assert encodings.series_title(["framework", "num_batches", "num_warmup_batches"]) == [
        "framework ·", "measured iterations ·", "warm-up iterations"]
    assert encodings.series_title(["framework", "num_gpus"]) == "framework · GPUs"
    frame = study(bench, tmp_path, batch_size=[1, 2, 4], num_batches=[50, 100],
                  num_gpus=[1, 2])
    models = model_charts.model_frame(frame)
    monkeypatch.setattr(encodings, "LEGEND_TITLE_CHARS", 10)  # so that two names are long
    legend = model_charts.throughput_figure(models).chart.to_dict()["spec"]["layer"][0][
        "encoding"]["strokeDash"]
    assert isinstance(legend["title"], list) and len(legend["title"]) == 2
    assert legend["title"][0].endswith(" ·")


def test_the_zig_zag_check_finds_lines_joining_two_num_batches(bench, tmp_path):
    """The check above can fail: a chart given no place for num_batches joins them."""
    frame = study(bench, tmp_path, batch_size=[1, 2, 4], num_batches=[50, 100])
    models = model_charts.model_frame(frame)
    data, panels = model_charts.with_panel(models.assign(variant=""), ["model", "phase"])
    chart = model_charts.lines_by_batch(
        data, y="throughput", y_title="throughput", colour="precision:N", tooltip=[],
        panels=panels, encoding=Encoding(panels=["model", "phase"]))
    figure = model_charts.Figure("t", "t", "", chart)
    assert zig_zags(figure) == 1


def test_axes_too_many_for_line_styles_become_dropdowns_shown_one_value_at_a_time(
        bench, tmp_path):
    frame = study(bench, tmp_path, precision=["float32", "tf32", "bfloat16"],
                  batch_size=[1, 2], num_gpus=[1, 2, 4, 8, 16], num_batches=[50, 100])
    models = model_charts.model_frame(frame)
    encoding = encodings.choose(models)
    # 5 GPU counts would be 15 lines a panel with 3 precisions: a dropdown; num_batches
    # (2 values, 6 lines) keeps a line style.
    assert encoding.series == ["num_batches"] and encoding.filters == ["num_gpus"]
    assert encoding.defaults == {"num_gpus": 1}
    figure = model_charts.throughput_figure(models)
    (param,) = figure.chart.to_dict()["params"]
    assert param["bind"]["input"] == "select" and param["bind"]["options"] == [1, 2, 4, 8, 16]
    assert param["value"] == 1 and "GPUs" in figure.caption and figure.shows == {"num_gpus": 1}
    assert zig_zags(figure) == 0
    # Bars have no line styles: the axes take panels while they stay at most 12.
    bars = encodings.choose(models, panels=("model", "phase"), colour="precision", lines=False,
                            candidates=[a for a in encodings.model_axes() if a != "precision"])
    assert bars.panels == ["model", "phase", "num_gpus", "num_batches"] and not bars.filters
    fewer = encodings.choose(models, colour="precision", lines=False, max_panels=6,
                             candidates=[a for a in encodings.model_axes() if a != "precision"])
    assert fewer.panels == ["model", "phase", "num_gpus"] and fewer.filters == ["num_batches"]


def test_more_than_twelve_panels_make_the_model_a_dropdown(bench, tmp_path):
    names = ["resnet18", "resnet50", "resnet101", "alexnet", "vgg16", "googlenet", "inception3"]
    frame = study(bench, tmp_path, model=names, phase=["training", "inference"])
    models = model_charts.model_frame(frame)
    encoding = encodings.choose(models)
    assert encoding.panels == ["phase"] and encoding.filters == ["model"]
    assert encoding.defaults == {"model": "alexnet"}
    _, order, _ = model_charts.by_batch(models)
    assert order == ["training", "inference"]
    assert zig_zags(model_charts.throughput_figure(models)) == 0


def test_paradnn_lines_join_only_cells_of_one_configuration(bench, tmp_path):
    """ParaDnn's charts place the other axes too: num_batches as a line style, GPU counts
    (too many to tell apart) in a dropdown."""
    frame = study(bench, tmp_path, model=["paradnn_fc"], batch_size=[1, 2, 4],
                  num_gpus=[1, 2, 4, 8, 16], num_batches=[50, 100])
    paradnn = model_charts.model_frame(frame, paradnn=True)
    figure = paradnn_charts.by_batch_figure(paradnn)
    assert zig_zags(figure) == 0
    spec = figure.chart.to_dict()
    assert [p["name"] for p in spec["params"]] == ["pick_num_gpus"]
    assert spec["spec"]["layer"][0]["encoding"]["strokeDash"]["title"] == "measured iterations"
    assert figure.table is not None and figure.shows == {"num_gpus": 1}


def test_a_row_without_any_axis_of_a_line_style_reads_none_not_blank():
    """A point-to-point cell has no blocking mode: beside blocking and non-blocking cells
    its line style's legend entry says "(none)"; where no row has the axis, nothing."""
    frame = pd.DataFrame({"blocking": [True, False, None], "framework": ["a", "a", "a"]})
    assert encodings.labels(frame, ["blocking"]).tolist() == [
        "blocking on", "blocking off", "(none)"]
    assert encodings.labels(frame.iloc[2:], ["blocking"]).tolist() == [""]
    assert encodings.labels(frame, []).tolist() == ["", "", ""]


def test_text_values_that_say_nothing_alone_carry_their_axis_in_a_legend():
    """Point-to-point pairs named by src_ranks and dst_ranks: "src 0,1 · dst 3,2" in the
    legend, not "0,1 · 3,2"; a framework's name stays as it is."""
    frame = pd.DataFrame({"framework": ["pytorch"] * 2, "src_ranks": ["0,1", "0"],
                          "dst_ranks": ["3,2", "8"]})
    assert encodings.labels(frame, ["framework", "src_ranks", "dst_ranks"]).tolist() == [
        "pytorch · src 0,1 · dst 3,2", "pytorch · src 0 · dst 8"]


def test_num_gpus_of_a_cpu_cell_reads_as_processes_in_a_legend():
    """On a CPU a cell's num_gpus counts processes sharing it (efficiency's one rule): a
    legend or panel title says "2 processes" there, "2 GPUs" on a GPU, one in the singular."""
    frame = pd.DataFrame({"num_gpus": [2, 2, 1, None, 1],
                          "device": ["gpu", "cpu", "cpu", "cpu", "gpu"]})
    assert encodings.labels(frame, ["num_gpus"]).tolist() == [
        "2 GPUs", "2 processes", "1 process", "(none)", "1 GPU"]
    assert encodings.labels(frame[["num_gpus"]], ["num_gpus"]).tolist()[:2] == [
        "2 GPUs", "2 GPUs"]


def test_num_gpus_is_titled_by_what_it_counts_in_legends_dropdowns_and_tables():
    """A chart of CPU cells titles num_gpus "processes", of GPU cells "GPUs", of both
    "GPUs or processes": in its line style's legend, its dropdown's caption note and its
    numbers table alike."""
    def encoding_of(devices):
        frame = pd.DataFrame({"model": "m", "phase": "training", "device": devices,
                              "num_gpus": [1, 2] * (len(devices) // 2)})
        return encodings.choose(frame, candidates=["num_gpus"])

    cpu, gpu, both = (encoding_of(d) for d in (["cpu"] * 2, ["gpu"] * 2,
                                               ["gpu", "gpu", "cpu", "cpu"]))
    assert cpu.series == ["num_gpus"]
    assert (cpu.series_title(), gpu.series_title(), both.series_title()) == (
        "processes", "GPUs", "GPUs or processes")
    assert encodings.series_title(["framework", "num_gpus"], cpu.titles) == \
        "framework · processes"
    narrow = encodings.choose(pd.DataFrame({"model": "m", "phase": "training",
                                            "device": "cpu", "num_gpus": range(1, 20)}),
                              candidates=["num_gpus"], lines=False, max_panels=2)
    assert narrow.filters == ["num_gpus"] and "Choose processes above" in narrow.note()
    assert [c.title for c in model_charts.axis_columns(cpu) if c.field == "num_gpus"] == [
        "processes"]


def test_every_model_axis_of_the_axis_table_has_a_place():
    """A new axis needs no edit of the report: the candidates come from the axis table."""
    placed = set(encodings.model_axes()) | set(encodings.ROLES)
    for name, _ in axes.columns():
        if name in {a.name for a in axes.of_kind("model")}:
            assert encodings.DERIVED.get(name, name) in placed, name


def test_packed_columns_round_trip_with_text_coded_constants_kept_and_nulls_left_out():
    rows = [{"model": "resnet50", "batch": 1, "x": 1234.56789123, "runs": 3, "none": None,
             "flag": True},
            {"model": "alexnet", "batch": 2, "x": None, "runs": 3, "none": None,
             "flag": False},
            {"model": "resnet50", "batch": 4, "x": 0.000123456789, "runs": 3, "none": None,
             "flag": True},
            # Whole numbers stay exact (a message size of 1 GiB, in bytes).
            {"model": "alexnet", "batch": 8, "x": 1073741824.0, "runs": 3, "none": None,
             "flag": False}]
    packed = datasets.pack(rows, keep=["model", "batch", "x", "runs", "none", "flag"])
    assert packed["columns"]["model"] == {"levels": ["resnet50", "alexnet"],
                                          "codes": [0, 1, 0, 1]}
    assert packed["columns"]["runs"] == {"const": 3} and "none" not in packed["columns"]
    back = datasets.unpack(packed)
    assert [r["model"] for r in back] == ["resnet50", "alexnet", "resnet50", "alexnet"]
    assert back[0]["x"] == 1234.57 and back[1]["x"] is None and back[2]["x"] == 0.000123457
    assert back[3]["x"] == 1073741824
    assert [r["flag"] for r in back] == [True, False, True, False]
    assert datasets.pack(pd.DataFrame(rows)) == datasets.pack(rows)
    assert datasets.fields_used({"transform": [{"filter": "isValid(datum.tflops) && "
                                                "datum['num gpus'] == pick"}],
                                 "encoding": {"x": {"field": "batch_size"}}}) == \
        {"tflops", "num gpus", "batch_size"}


def page_parts(html: str) -> dict:
    def const(name: str) -> object:
        start = html.index(f"const {name} = ") + len(f"const {name} = ")
        return json.JSONDecoder().raw_decode(html, start)[0]

    return {name: const(name) for name in ("DLBENCH_DATA", "DLBENCH_SPECS", "DLBENCH_USES",
                                           "DLBENCH_TABLES")}


@pytest.fixture(scope="module")
def small_run(bench, tmp_path_factory):
    """benchmarks/report_scale.py on 2 models x 2 batch sizes of its grid (400 cells)."""
    folder = tmp_path_factory.mktemp("scale")
    out = folder / "report_scale.json"
    assert bench.main(["--out", str(out), "--rounds", "1", "--cells-scale", "5",
                       "--keep", str(folder / "report")]) == 0
    return json.loads(out.read_text()), folder / "report"


def test_the_page_holds_the_rows_of_the_charts_against_batch_size_once(small_run):
    result, report = small_run
    parts = page_parts((report / "index.html").read_text())
    uses = parts["DLBENCH_USES"]
    by_batch = {uses[f"chart-{n}"][0] for n in ("throughput", "energy-efficiency", "power",
                                                 "peak-host-memory", "model-tflops")}
    assert len(by_batch) == 1
    (name,) = by_batch
    fields = set(parts["DLBENCH_DATA"][name]["columns"])
    used = set().union(*(datasets.fields_used(parts["DLBENCH_SPECS"][k])
                         for k, names in uses.items() if name in names))
    tabled = {c[0] for t in parts["DLBENCH_TABLES"].values() if t["data"] == name
              for c in t["columns"]}
    assert fields <= used | tabled and "environment" not in fields and "cpu_model" not in fields
    assert result["cells"] == 2 * 2 * 5 * 2 * 5 * 2


def test_every_numbers_table_uses_a_format_the_page_can_write(small_run):
    _, report = small_run
    tables = page_parts((report / "index.html").read_text())["DLBENCH_TABLES"]
    assert {"table-throughput", "table-scaling", "table-model-efficiency"} <= set(tables)
    for conf in tables.values():
        for field, _title, fmt in conf["columns"]:
            assert fmt == "" or re.match(TABLE_FORMAT, fmt), (field, fmt)


@pytest.mark.skipif(not CHROMIUM.exists(),
                    reason="needs headless Chromium at /usr/bin/chromium (apt-get install chromium)")
def test_the_small_run_draws_every_chart_and_its_tables_sort_in_chromium(small_run, tmp_path):
    result, report = small_run
    assert result["chromium"]["all_drawn"], result["chromium"]
    assert result["chromium"]["failed"] == [] and len(result["chromium"]["charts"]) >= 8
    # Open the throughput table and sort it by throughput, descending (two clicks).
    page = tmp_path / "index.html"
    shutil.copytree(report / "charts", tmp_path / "charts")
    html = (report / "index.html").read_text()
    clicker = """<script>
const box = document.getElementById("table-throughput");
box.closest("details").open = true;
setTimeout(() => {
  const th = [...box.querySelectorAll("th")].find((h) => h.textContent.startsWith("throughput"));
  th.click(); th.click();
}, 100);
</script>"""
    end = html.rindex("</body>")  # the bundle's own text has the tag too
    page.write_text(html[:end] + clicker + html[end:])
    done = subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=20000",
         "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=180)
    dom = done.stdout
    start = dom.index('id="table-throughput"')
    table = dom[start:dom.index("</table>", start)]
    headings = re.findall(r"<th[^>]*>(.*?)</th>", table)
    column = next(i for i, h in enumerate(headings) if h.startswith("throughput"))
    assert 'aria-sort="descending"' in table
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row)
             for row in re.findall(r"<tr>(.*?)</tr>", table)]
    values = [float(row[column].replace(",", "")) for row in cells if row]
    assert len(values) == 400 and values == sorted(values, reverse=True) and values[0] > values[-1]
