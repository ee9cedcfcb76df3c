"""The report's chart of time spent waiting for input: real-data model cells' share of
their measured time waiting for their next batch, a bar per dataset, storage format and
loader threads and per system, beside their throughput; nothing where every cell ran on
synthetic data. Built from result documents through the real aggregate Parquet and
report, as tests/test_report.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import vl_convert
from headless_chromium import chart_names, drawn_charts, needs_chromium
from PIL import Image
from test_report import model_cell, model_result, section_of, write_parquet
from test_report_figures import column_texts, opened_tables

from dlbench.report import datasets, model_charts, render, sections
from dlbench.report.data import load
from dlbench.report.export import vegalite_version
from dlbench.report.style import PANEL_WIDTH

# Seconds each real-data cell waited for input over its measured iterations, by system
# and input (framework, data_backend, loader threads); its compute is the rest of them.
WAITS = {
    ("sysA", "pytorch", "caffe_lmdb", 4): 0.021,
    ("sysA", "pytorch", "image_folder", 4): 0.187,
    ("sysA", "pytorch", "caffe_lmdb", 1): 0.305,
    ("sysA", "mxnet", None, 4): 0.043,
    ("sysB", "pytorch", "caffe_lmdb", 4): 0.009,
    ("sysB", "pytorch", "image_folder", 4): 0.122,
}
SHARE_TITLE = "input wait, % of measured time"


def real_cell(system: str, framework: str, backend: str | None, threads: int,
              wait: float, num_gpus: int = 1) -> dict:
    """A resnet50 training cell reading imagenet that waited ``wait`` seconds for input."""
    cell = model_cell("resnet50", "training", "float32", 32, framework=framework,
                      data="imagenet", data_backend=backend, num_loader_threads=threads,
                      num_gpus=num_gpus)
    res = model_result("io", cell)
    res["cell_id"] = f"{framework}_{backend}_{threads}_{num_gpus}"
    res["system"] = system
    (m,) = res["measurements"]
    m.update(data_wait_s=wait, compute_s=sum(m["times_s"]) - wait)
    return res


def synthetic_cell(system: str, model: str) -> dict:
    """A synthetic-data cell as the PyTorch runner records one: its wait for the next
    ready-made batch is measured too (tens of microseconds), yet no input pipeline ran."""
    res = model_result("io", model_cell(model, "training", "float32", 32))
    res["cell_id"] = f"synthetic_{model}"
    res["system"] = system
    (m,) = res["measurements"]
    m.update(data_wait_s=4e-5, compute_s=sum(m["times_s"]) - 4e-5)
    return res


def study() -> list[dict]:
    return ([real_cell(*key, wait) for key, wait in WAITS.items()]
            + [synthetic_cell(s, m) for s in ("sysA", "sysB") for m in ("resnet50", "alexnet")])


def expected(results: list[dict]) -> dict[tuple[str, str], tuple[float, float]]:
    """(system, input in words) -> the real-data cells' share of their measured time spent
    waiting for input and their throughput, from their result documents."""
    out = {}
    for res in results:
        (m,) = res["measurements"]
        cell = res["cell"]
        if cell["data"] == "synthetic":
            continue
        storage = cell["data_backend"] or "recordio"  # MXNet reads RecordIO files
        source = " · ".join([cell["framework"], cell["data"], storage,
                             f"{cell['num_loader_threads']} loader thread"
                             + ("s" if cell["num_loader_threads"] != 1 else "")])
        share = m["data_wait_s"] / (m["data_wait_s"] + m["compute_s"])
        out[res["system"], source] = (share, m["throughput"])
    return out


def expected_shares(results: list[dict]) -> dict[tuple[str, str], float]:
    return {key: share for key, (share, _) in expected(results).items()}


def page_parts(html: str) -> dict:
    def const(name: str) -> object:
        start = html.index(f"const {name} = ") + len(f"const {name} = ")
        return json.JSONDecoder().raw_decode(html, start)[0]

    return {name: const(name) for name in ("DLBENCH_DATA", "DLBENCH_SPECS", "DLBENCH_TABLES")}


@pytest.fixture(scope="module")
def io_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    """The report of real-data cells on two systems beside synthetic ones: its folder."""
    folder = tmp_path_factory.mktemp("input-wait")
    results = study()
    render(write_parquet(folder, results), folder / "report")
    return folder / "report", results


def test_the_input_wait_numbers_give_each_real_data_cells_share_of_waiting(io_report):
    """The page's numbers table of the chart: a row per real-data cell with its share of
    waiting for input and its throughput; the synthetic cells have none."""
    outdir, results = io_report
    parts = page_parts((outdir / "index.html").read_text())
    table = parts["DLBENCH_TABLES"]["table-input-wait"]
    share_column = next(c for c in table["columns"] if c[0] == "wait_share")
    assert share_column == ["wait_share", SHARE_TITLE, ".1%"]
    rows = datasets.unpack(parts["DLBENCH_DATA"][table["data"]])
    shown = {(r["system"], r["source"]): (r["wait_share"], r["throughput"]) for r in rows}
    assert len(rows) == len(WAITS)  # not one synthetic cell among them
    wanted = expected(results)
    assert shown.keys() == wanted.keys()
    for key, figures in wanted.items():
        assert shown[key] == pytest.approx(figures, rel=1e-5), key


def test_the_input_wait_chart_is_drawn_in_the_input_section_with_its_axis_in_words(io_report):
    outdir, _ = io_report
    html = (outdir / "index.html").read_text()
    assert "input-wait" in chart_names(section_of(html, "loader"))
    spec = page_parts(html)["DLBENCH_SPECS"]["chart-input-wait"]
    text = json.dumps(spec, ensure_ascii=False)
    assert f'"title": "{SHARE_TITLE}"' in text and '"format": "%"' in text
    # One panel per model and phase: the synthetic alexnet cells have no wait to show.
    assert '"resnet50 · training"' in text and "alexnet" not in text
    with Image.open(outdir / "charts" / "input-wait.png") as image:
        assert image.width > 200 and image.height > 100
        colours = image.convert("RGB").getcolors(maxcolors=100_000)
        assert colours is None or len(colours) > 20, "input-wait.png looks blank"


def test_the_input_wait_spec_renders_a_bar_per_cell_as_long_as_its_share(io_report):
    """Drawn by Vega: a bar per real-data cell, its length its share of the panel's width
    (the axis runs from 0 to 100 %), each bar high enough to see."""
    outdir, results = io_report
    figure = model_charts.input_wait_figure(model_charts.model_frame(
        load(outdir.parent / "benchmarks.parquet")))
    svg = vl_convert.vegalite_to_svg(figure.chart.to_dict(), vl_version=vegalite_version())
    bars = [(float(w), float(h)) for w, h in re.findall(
        r'aria-roledescription="bar" d="M0,0h([\d.]+)v([\d.]+)h', svg)]
    shares = expected_shares(results).values()
    assert sorted(w for w, _ in bars) == pytest.approx(
        sorted(share * PANEL_WIDTH for share in shares), abs=0.01)
    assert min(h for _, h in bars) > 5
    assert "image_folder" in svg and "recordio" in svg


@needs_chromium
def test_the_input_wait_chart_draws_and_its_table_prints_percentages(io_report, tmp_path):
    outdir, results = io_report
    page = outdir / "index.html"
    names, drawn = drawn_charts(page, tmp_path / "drawn")
    assert "input-wait" in names and "input-wait" in drawn
    dom = opened_tables(page, tmp_path / "opened")
    assert column_texts(dom, "input-wait", SHARE_TITLE) == {
        f"{share * 100:.1f} %" for share in expected_shares(results).values()}


def test_only_real_data_cells_bring_the_input_wait_chart(tmp_path):
    """Without real-data cells there is no chart and no section for it; with them, the
    chart is the input section's."""
    results = study()
    frame = load(write_parquet(tmp_path / "all", results))
    synthetic = load(write_parquet(tmp_path / "synthetic",
                                   [r for r in results if r["cell"]["data"] == "synthetic"]))
    assert model_charts.input_wait_figure(model_charts.model_frame(synthetic)) is None
    assert "loader" not in {s.id for s in sections(synthetic)}
    (loader,) = [s for s in sections(frame) if s.id == "loader"]
    assert [b.name for b in loader.blocks] == ["input-wait"]
    assert "waiting" in loader.intro  # the section says what it shows


def test_the_caption_says_a_data_parallel_cell_shows_its_longest_waiting_rank(tmp_path):
    single = [real_cell("sysA", "pytorch", "caffe_lmdb", 4, 0.02)]
    parallel = [*single, real_cell("sysA", "pytorch", "caffe_lmdb", 4, 0.05, num_gpus=2)]
    captions = [model_charts.input_wait_figure(model_charts.model_frame(
        load(write_parquet(tmp_path / str(len(r)), r)))).caption for r in (single, parallel)]
    assert "waited longest for input" not in captions[0]
    assert "the process that waited longest for input" in captions[1]
