"""The calibration table's spread: each measured ceiling's iterations and their CV beside
its figure, "unsteady" in words beyond the unstable_cv threshold, and a table older than
those columns read with them empty."""

from __future__ import annotations

import re
import statistics

import pyarrow.parquet as pq
from test_efficiency import calibration_doc, table

from dlbench import result as R
from dlbench import run_to_run
from dlbench.report import data as report_data
from dlbench.report import efficiency_tables

# A bfloat16 GEMM at n = 1024 whose iterations ran 12.9 ms mostly and 20.3 ms at times.
SPREAD_TIMES = [0.0129] * 12 + [0.0203] * 4


def spread_doc() -> dict:
    """A GPU calibration whose bfloat16 GEMM varies from iteration to iteration and whose
    triad (at the same time every iteration) does not."""
    doc = calibration_doc({"bfloat16": 700.0}, 3000.0)
    gemm = doc["measurements"][0]
    doc["measurements"][0] = R.measurement(
        name=gemm["name"], op_name="gemm", pass_="calibration", times_s=SPREAD_TIMES,
        items_per_iteration=1, throughput_unit="iterations/s",
        flops_per_iteration=gemm["flops_per_iteration"],
        bytes_per_iteration=gemm["bytes_per_iteration"], extra=gemm["extra"])
    return doc


def rows_of(html: str) -> dict[str, dict[str, str]]:
    """The table's rows by kernel, each cell by its column's title."""
    heads = re.findall(r"<th>([^<]*)</th>", html)
    rows = {}
    for body in re.findall(r"<tr>(<td>.*?)</tr>", html):
        cells = dict(zip(heads, re.findall(r"<td>([^<]*)</td>", body), strict=True))
        rows[cells["kernel"]] = cells
    return rows


def test_each_ceiling_shows_its_iterations_and_cv_and_an_unsteady_one_says_so(tmp_path):
    html = efficiency_tables.calibration_table(table(tmp_path, [spread_doc()]))
    rows = rows_of(html)
    cv = statistics.stdev(SPREAD_TIMES) / statistics.fmean(SPREAD_TIMES)
    assert cv > run_to_run.DEFAULT_UNSTABLE_CV
    assert rows["gemm"]["iterations"] == "16"
    assert rows["gemm"]["CV of iterations"] == f"{100 * cv:.1f} %, unsteady"
    assert rows["triad"]["iterations"] == "2"
    assert rows["triad"]["CV of iterations"] == "0.0 %"
    # The other columns as they were.
    assert rows["gemm"]["vendor peak"] == "989.4" and rows["gemm"]["precision"] == "bfloat16"
    assert rows["triad"]["measured"].endswith("GB/s")
    assert "unsteady: the ceiling's iteration times vary by more than 5 %" in html


def test_steady_ceilings_have_no_unsteady_word_or_note(tmp_path):
    html = efficiency_tables.calibration_table(
        table(tmp_path, [calibration_doc({"bfloat16": 700.0}, 3000.0)]))
    assert "unsteady" not in html
    assert {r["CV of iterations"] for r in rows_of(html).values()} == {"0.0 %"}


def test_a_table_older_than_the_spread_columns_shows_them_empty(tmp_path):
    table(tmp_path, [spread_doc()])
    parquet = tmp_path / "benchmarks.parquet"
    old = pq.read_table(parquet)
    spread = [c for c in old.column_names
              if c in ("iterations", "within_run_cv", "times_s")
              or (c.startswith("time_") and c.endswith("_s"))]
    pq.write_table(old.drop_columns(spread), parquet)
    html = efficiency_tables.calibration_table(report_data.load(parquet))
    rows = rows_of(html)
    assert {(r["iterations"], r["CV of iterations"]) for r in rows.values()} == {("", "")}
    assert rows["gemm"]["measured"].endswith("TFLOP/s") and "unsteady" not in html


def test_a_table_without_within_run_cv_takes_the_cv_from_its_time_summary(tmp_path):
    table(tmp_path, [spread_doc()])
    parquet = tmp_path / "benchmarks.parquet"
    pq.write_table(pq.read_table(parquet).drop_columns(["within_run_cv"]), parquet)
    rows = rows_of(efficiency_tables.calibration_table(report_data.load(parquet)))
    cv = statistics.stdev(SPREAD_TIMES) / statistics.fmean(SPREAD_TIMES)
    assert rows["gemm"]["CV of iterations"] == f"{100 * cv:.1f} %, unsteady"


def test_unsteady_is_judged_by_the_unstable_cv_the_table_was_written_with(tmp_path):
    """A study that set unstable_cv: 0.5 accepts a 20 % spread in its cells' runs, and so
    in its ceilings' iterations; one of 0.01 calls it unsteady and says its threshold."""
    from dlbench import aggregate

    path = tmp_path / "results" / "cell.json"
    R.write(spread_doc(), path)
    for threshold, unsteady in ((0.5, False), (0.01, True)):
        parquet = tmp_path / f"t{threshold}.parquet"
        aggregate.write([path], parquet, move_invalid=False, unstable_cv=threshold)
        html = efficiency_tables.calibration_table(report_data.load(parquet))
        assert rows_of(html)["gemm"]["CV of iterations"].endswith(", unsteady") is unsteady
        assert (f"vary by more than {100 * threshold:g} % of their mean (unstable_cv)"
                in html) is unsteady
