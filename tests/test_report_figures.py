"""What the report's figures print and say of small rates and of several systems: a CPU's
TFLOP/s and samples per joule keep three significant digits in tooltips and numbers
tables (two systems 1.5x apart do not both read "0.01"), and the systems section's intro
says where the throughput chart puts the systems (a line style each, or a dropdown).
Built from result documents through the real aggregate Parquet and report, as
tests/test_report.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import vl_convert
from headless_chromium import chromium, needs_chromium
from test_report import model_cell, model_result, op_result, section_of, write_parquet

from dlbench import result as R
from dlbench.report import op_charts, render
from dlbench.report.data import load
from dlbench.report.export import vegalite_version

# Two CPU systems as the default demo measures them: 1.5x apart in TFLOP/s.
TFLOPS = {"sysA": 0.005953, "sysB": 0.008929}
TFLOPS_TEXT = {"0.00595", "0.00893"}
PER_JOULE = {"sysA": 0.0123, "sysB": 0.0141}
PER_JOULE_TEXT = {"0.0123", "0.0141"}
SECONDS = 0.5  # each measured iteration


def with_rapl_energy(res: dict, per_joule: float) -> None:
    """A CPU cell's monitor as on a host with readable RAPL counters: its energy is the
    host's, ``per_joule`` samples per joule."""
    monitor = res["extra"]["monitor"]
    energy = monitor["items"] / per_joule
    monitor["host"].update(rapl_zones=["package-0"], energy_j=energy)
    monitor.update(energy_j=energy, energy_sources=["host:rapl"], energy_note=None,
                   power_mean_w=energy / monitor["duration_s"],
                   power_max_w=1.1 * energy / monitor["duration_s"],
                   samples_per_joule=per_joule, notes=[])


def cpu_cell(system: str, batch: int) -> dict:
    """A monitored CPU training cell at ``TFLOPS[system]`` and ``PER_JOULE[system]``."""
    res = model_result("demo", model_cell("resnet50", "training", "float32", batch,
                                          device="cpu"), monitored=True)
    (m,) = res["measurements"]
    m.update(R.measurement(name=m["name"], pass_=m["pass"], times_s=[SECONDS] * 6,
                           items_per_iteration=batch,
                           flops_per_iteration=TFLOPS[system] * 1e12 * SECONDS))
    res["extra"]["monitor"].update(duration_s=6 * SECONDS, items=6 * batch)
    with_rapl_energy(res, PER_JOULE[system])
    res["system"] = system
    return res


@pytest.fixture(scope="module")
def cpu_demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of two CPU systems' cells at batch sizes 2 and 4: its index.html."""
    folder = tmp_path_factory.mktemp("cpu-demo")
    parquet = write_parquet(folder, [cpu_cell(s, b) for s in TFLOPS for b in (2, 4)])
    render(parquet, folder / "report")
    return folder / "report" / "index.html"


def page_specs(html: str) -> dict:
    start = html.index("const DLBENCH_SPECS = ") + len("const DLBENCH_SPECS = ")
    return json.JSONDecoder().raw_decode(html, start)[0]


def tooltip_formats(spec: object, field: str) -> set[str]:
    """The formats of every tooltip of ``field`` anywhere in a chart's spec."""
    found: set[str] = set()
    if isinstance(spec, dict):
        tips = spec.get("tooltip")
        for tip in tips if isinstance(tips, list) else []:
            if isinstance(tip, dict) and tip.get("field") == field:
                found.add(tip.get("format", ""))
        for value in spec.values():
            found |= tooltip_formats(value, field)
    elif isinstance(spec, list):
        for value in spec:
            found |= tooltip_formats(value, field)
    return found


def vega_texts(fmt: str, values: list[float]) -> set[str]:
    """``values`` as Vega writes them in ``fmt`` (what a tooltip shows), drawn by
    vl-convert as a text mark."""
    spec = {"data": {"values": [{"v": v, "i": i} for i, v in enumerate(values)]},
            "mark": "text", "encoding": {
                "y": {"field": "i", "type": "ordinal", "axis": None},
                "text": {"field": "v", "type": "quantitative", "format": fmt}}}
    svg = vl_convert.vegalite_to_svg(spec, vl_version=vegalite_version())
    return set(re.findall(r"<text[^>]*>([^<]*)</text>", svg))


@pytest.mark.parametrize(("chart", "field", "values", "texts"), [
    ("model-tflops", "tflops", list(TFLOPS.values()), TFLOPS_TEXT),
    ("energy-efficiency", "samples_per_joule", list(PER_JOULE.values()), PER_JOULE_TEXT),
])
def test_a_cpus_small_rates_keep_three_significant_digits_in_tooltips(cpu_demo, chart, field,
                                                                      values, texts):
    spec = page_specs(cpu_demo.read_text())[f"chart-{chart}"]
    (fmt,) = tooltip_formats(spec, field)
    assert vega_texts(fmt, values) == texts
    # Decimals, never an exponent, for the rates of a large GPU cell too.
    assert vega_texts(fmt, [3200.7, 12.345]) == {"3,200", "12.3"}


def opened_tables(page: Path, profile: Path) -> str:
    """The page's DOM once every numbers table was opened (built by its script)."""
    opener = ("<script>for (const d of document.querySelectorAll('details.numbers')) "
              "d.open = true;</script>")
    html = page.read_text()
    end = html.rindex("</body>")  # the bundle's own text has the tag too
    opened = page.with_name("opened.html")
    opened.write_text(html[:end] + opener + html[end:])
    done = chromium("--dump-dom", opened.as_uri(), profile=profile)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def column_texts(dom: str, table: str, heading: str) -> set[str]:
    start = dom.index(f'id="table-{table}"')
    rows = re.findall(r"<tr>(.*?)</tr>", dom[start:dom.index("</table>", start)])
    headings = re.findall(r"<th[^>]*>(.*?)</th>", rows[0])
    column = headings.index(heading)
    return {re.findall(r"<td[^>]*>(.*?)</td>", row)[column] for row in rows[1:]}


@needs_chromium
def test_a_cpus_small_rates_keep_three_significant_digits_in_the_numbers_tables(cpu_demo,
                                                                                tmp_path):
    dom = opened_tables(cpu_demo, tmp_path / "profile")
    assert column_texts(dom, "model-tflops", "TFLOP/s") == TFLOPS_TEXT
    assert column_texts(dom, "energy-efficiency", "samples/J") == PER_JOULE_TEXT


def test_an_operators_small_rates_keep_three_significant_digits_in_tooltips(tmp_path):
    """A CPU's matrix multiplications at a few GFLOP/s: the TFLOP/s and GB/s tooltips."""
    res = op_result("ops")
    res["cell"]["device"] = "cpu"
    for m in res["measurements"]:
        slow = [t * 2e4 for t in m["times_s"]]  # from 50 TFLOP/s to a few GFLOP/s
        m.update(R.measurement(name=m["name"], op_name=m["op_name"], pass_=m["pass"],
                               times_s=slow, items_per_iteration=1, throughput_unit="calls/s",
                               flops_per_iteration=m["flops_per_iteration"],
                               bytes_per_iteration=m["bytes_per_iteration"]))
    ops = op_charts.op_frame(load(write_parquet(tmp_path, [res])))
    for figure, rate in ((op_charts.tflops_figure(ops), "tflops"),
                         (op_charts.gbps_figure(ops), "gbps")):
        (fmt,) = tooltip_formats(figure.chart.to_dict(), rate)
        values = sorted(ops[rate].dropna().unique())
        assert values[0] < 0.01  # what two decimals print as 0.00
        assert len(vega_texts(fmt, values)) == len(values), (rate, values)


def systems_report(tmp_path: Path, systems: list[str]) -> str:
    """The systems section of the report of one cell at two batch sizes on each system."""
    results = []
    for system in systems:
        for batch in (16, 32):
            res = model_result("s", model_cell("resnet50", "training", "float32", batch))
            res["system"] = system
            results.append(res)
    outdir = tmp_path / "report"
    render(write_parquet(tmp_path, results), outdir)
    return (outdir / "index.html").read_text()


def test_the_systems_intro_names_the_line_style_each_of_few_systems_takes(tmp_path):
    html = systems_report(tmp_path, ["sysA", "sysB"])
    assert ("The same cells on each system (their throughput is in the throughput chart "
            "above, one line style per system).") in section_of(html, "systems")


def test_the_systems_intro_of_many_systems_names_the_dropdown_the_chart_has(tmp_path):
    """Eight systems are too many line styles: the throughput chart shows one at a time,
    and the intro says so, as its caption does."""
    html = systems_report(tmp_path, [f"sys{c}" for c in "ABCDEFGH"])
    assert ("Choose system above the chart; the images show system sysA."
            in section_of(html, "throughput"))
    intro = section_of(html, "systems")
    assert ("(their throughput is in the throughput chart above, one system at a time, "
            "chosen above that chart).") in intro
    assert "line style" not in intro


def comms_rows(system: str, slower: float) -> list[dict]:
    """The aggregate's rows of two all_reduce cells (2 and 4 processes) of one system."""
    return [{"cell_id": f"c{ranks}", "source": f"{system}/c{ranks}.json", "study": "net",
             "kind": "comms", "status": "ok", "throughput": 1 / (1e-5 * slower),
             "name": f"all_reduce|{size}", "pass": "collective", "op_name": "all_reduce",
             "collective": "all_reduce", "num_gpus": ranks, "num_nodes": 1, "system": system,
             "device": "gpu", "data_type": "float32", "framework": "pytorch",
             "bytes_per_iteration": size, "time_median_s": 1e-5 * slower,
             "time_p95_s": 1.1e-5 * slower, "gbps": size / (1e-5 * slower) / 1e9,
             "bus_gbps": 1.5 * size / (1e-5 * slower) / 1e9}
            for ranks in (2, 4) for size in (1024, 4096)]


@pytest.mark.parametrize("systems", [2, 6])
def test_stacked_charts_of_many_systems_share_one_dropdown_and_render(systems):
    """The collectives' and the language models' charts stack two faceted charts; with
    five systems or more, one system at a time is shown, chosen in a dropdown, and
    altair stopped the whole report lifting the dropdown out of the two (unnamed views).
    The dropdown is declared once, and the spec renders in Vega."""
    from test_report import llm_rows

    from dlbench.report import comms_charts, llm_charts
    from dlbench.report.data import prepare

    comms = prepare(pd.DataFrame([r for i in range(systems)
                                  for r in comms_rows(f"sys{i}", 1 + i)]))
    llm = prepare(pd.DataFrame([{**r, "system": f"sys{i}", "source": f"sys{i}/{r['source']}"}
                                for i in range(systems) for b in (1, 2)
                                for r in llm_rows(f"b{b}", b, slower=1 + i)]))
    for figure in (comms_charts.bandwidth_figure(comms), llm_charts.latency_figure(llm)):
        spec = figure.chart.to_dict()
        assert "vconcat" in spec
        names = [p["name"] for p in spec.get("params", [])]
        assert names == (["pick_system"] if systems > 4 else [])
        assert vl_convert.vegalite_to_svg(spec).count("<path") > 0
