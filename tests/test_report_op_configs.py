"""The operator charts' op configs: each config is labelled uniquely among the study's
(its file's stem, else the shortest trailing part of its path that tells it apart), and
the rate charts (TFLOP/s, GB/s) give each config a panel of its own, as the time chart
does, so that no line joins inputs of two configs. Built from result documents through
the real aggregate Parquet, as tests/test_report.py."""

from __future__ import annotations

import pandas as pd
import pytest
import vl_convert
from test_report import op_result, write_parquet

from dlbench.report import op_charts
from dlbench.report.data import load
from dlbench.report.export import vegalite_version


def ops_of(tmp_path, configs: list[str]) -> pd.DataFrame:
    """The operator frame of one op cell per config, the cells differing in nothing else."""
    results = []
    for i, config in enumerate(configs):
        res = op_result("ops")
        res["cell"] = {**res["cell"], "op_config": config}
        res["cell_id"] = f"pytorch_op_{i}"
        results.append(res)
    return op_charts.op_frame(load(write_parquet(tmp_path, results)))


@pytest.mark.parametrize(("paths", "labels"), [
    (["/c/simple_add.json", "/c/simple_add_range.json"], ["simple_add", "simple_add_range"]),
    (["x/mm.json", "y/mm.json", "x/add.json"], ["x/mm", "y/mm", "add"]),
    (["/c/a/h100/mm.json", "/c/b/h100/mm.json", "/c/a100/mm.json"],
     ["a/h100/mm", "b/h100/mm", "a100/mm"]),
    (["/c/mm.json", "c/mm.json"], ["/c/mm", "c/mm.json"]),
    (["/c/mm.json", None, "/c/mm.json"], ["mm", "?", "mm"]),
])
def test_each_op_config_gets_a_label_no_other_config_has(paths, labels):
    assert list(op_charts.config_labels(pd.Series(paths, dtype=object))) == labels


def test_two_configs_of_one_file_name_in_two_folders_are_two_panels(tmp_path):
    ops = ops_of(tmp_path, ["/configs/h100/mm.json", "/configs/a100/mm.json"])
    assert set(ops["config"]) == {"h100/mm", "a100/mm"}
    assert ops.groupby(["config", "input", "pass"]).size().max() == 1
    spec = op_charts.time_figure(ops).chart.to_dict()
    assert spec["facet"]["row"]["field"] == "config"


@pytest.mark.parametrize("figure", [op_charts.tflops_figure, op_charts.gbps_figure])
def test_rate_charts_have_a_panel_per_op_config(tmp_path, figure):
    """One operator at the same sizes in two configs: a panel each, the config in the
    tooltip, in what tells lines apart and in the numbers table; the chart draws."""
    ops = ops_of(tmp_path, ["/configs/simple_add.json", "/configs/simple_add_range.json"])
    drawn = figure(ops)
    spec = drawn.chart.to_dict()
    assert spec["facet"]["row"]["field"] == "config"
    assert set(drawn.chart.data["config"]) == {"simple_add", "simple_add_range"}
    lines, points = spec["spec"]["layer"]
    assert {"field": "config", "type": "nominal"} in lines["encoding"]["detail"]
    assert {"field": "config", "type": "nominal", "title": "op config"} in (
        points["encoding"]["tooltip"])
    assert "config" in [c.field for c in drawn.table.columns]
    svg = vl_convert.vegalite_to_svg(spec, vl_version=vegalite_version())
    assert "simple_add_range" in svg


def test_rate_charts_of_one_op_config_have_one_panel(tmp_path):
    ops = ops_of(tmp_path, ["/configs/simple_add.json"])
    spec = op_charts.tflops_figure(ops).chart.to_dict()
    assert "facet" not in spec and len(spec["layer"]) == 2
    assert "config" not in [c.field for c in op_charts.tflops_figure(ops).table.columns]


def test_the_roofline_labels_op_configs_as_the_operator_charts_do():
    from dlbench.report import roofline_charts

    ok = pd.DataFrame({"kind": ["op", "op", "model"],
                       "op_config": ["/configs/h100/mm.json", "/configs/a100/mm.json", None]})
    assert list(roofline_charts.op_configs(ok)) == ["h100/mm", "a100/mm", ""]
