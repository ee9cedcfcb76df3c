"""Repeats: result names, the study setting, the run order, and the run-to-run statistics
the aggregate adds (dlbench.run_to_run, dlbench.bootstrap)."""

from pathlib import Path

import numpy as np
import pytest

from dlbench import aggregate, bootstrap, launch, run_to_run, study, systems, workflow_support
from dlbench import result as R

CELL = "pytorch_resnet18_training_0a1b2c3d"


def test_repeat_files_are_named_after_the_cell_and_the_first_keeps_its_old_name():
    assert systems.result_name(CELL) == f"{CELL}.json"
    assert systems.result_name(CELL, 3) == f"{CELL}_r3.json"
    for k in (0, 1, 12):
        path = systems.result_path("box", "s", CELL, repeat=k)
        assert systems.repeat_of(path) == k and systems.is_result_file(path)
    assert not systems.is_result_file(Path(f"{CELL}.param.json"))
    assert not systems.is_result_file(Path(f"{CELL}_r0.json"))  # the first run has no suffix


def test_repeats_is_a_study_setting_with_a_default_and_one_line_errors():
    config = {"repeats": 2, "studies": {"a": {"grid": {"model": "resnet18"}},
                                        "b": {"repeats": 5, "grid": {"model": "alexnet"}}}}
    assert workflow_support.repeat_counts(config) == {"a": 2, "b": 5}
    assert workflow_support.repeat_counts({"studies": {"a": {"grid": {}}}}) == {"a": 1}
    for bad in (0, 2.5, True, "3", study.MAX_REPEATS + 1):
        config = {"studies": {"s": {"repeats": bad, "grid": {"model": "resnet18"}}}}
        with pytest.raises(study.ConfigError) as info:
            study.expand_config(config)
        assert str(info.value).startswith("study 's': repeats:") and "\n" not in str(info.value)


def test_a_run_wants_every_cell_once_per_repeat_round_by_round():
    cells = study.expand_config({"studies": {
        "a": {"repeats": 3, "grid": {"model": "resnet18", "batch_size": [1, 2]}},
        "b": {"grid": {"model": "alexnet"}}}})
    paths = list(workflow_support.result_paths(cells, "box", {"a": 3, "b": 1}))
    assert len(paths) == 2 * 3 + 1
    rounds = [systems.repeat_of(p) for p in paths]
    assert rounds == sorted(rounds)  # every cell's first run, then every second, ...
    assert rounds.count(0) == 3 and rounds.count(2) == 2


def test_the_launcher_records_the_repeat_its_file_names(tmp_path):
    res = R.new_result(kind="model", cell={"model": "resnet18"}, study="s", cell_id=CELL)
    out = systems.result_path("box", "s", CELL, tmp_path / "results", repeat=2)
    assert launch.stamped(res, out)["repeat"] == 2


def _rows(medians, iterations=30, spread=0.01, status=None):
    rng = np.random.default_rng(7)
    rows = []
    for k, median in enumerate(medians):
        times = list(median * (1 + spread * rng.standard_normal(iterations)))
        rows.append({"system": "box", "study": "s", "cell_id": CELL, "repeat": k, "name": "m",
                     "op_name": None, "pass": "training",
                     "status": (status or {}).get(k, "ok"),
                     "time_median_s": float(np.median(times)), "times_s": times,
                     "time_mean_s": float(np.mean(times)), "time_std_s": float(np.std(times)),
                     "items_per_iteration": 8})
    return rows


def test_three_repeats_give_the_mean_of_medians_their_cv_and_an_unstable_flag():
    rows = _rows([0.10, 0.11, 0.12], spread=0.0)
    run_to_run.add_columns(rows)
    first = rows[0]
    assert first["repeats"] == 3 and first["ci_method"] == "repeats"
    assert first["cell_time_median_s"] == pytest.approx(0.11)
    assert first["cell_throughput"] == pytest.approx(8 / 0.11)
    assert first["run_to_run_cv"] == pytest.approx(0.01 / 0.11)
    assert first["unstable"] is True  # 9 % > 5 %
    assert first["cell_time_ci_low_s"] < 0.11 < first["cell_time_ci_high_s"]
    assert all(r["cell_time_median_s"] == first["cell_time_median_s"] for r in rows)
    relaxed = _rows([0.10, 0.11, 0.12], spread=0.0)
    run_to_run.add_columns(relaxed, unstable_cv=0.10)
    assert relaxed[0]["unstable"] is False


def test_the_cell_time_is_the_statistic_its_interval_is_of_whatever_the_rows_order():
    """Two modes (an autotuner's two picks): 11 runs at 0.100 s and 9 at 0.120 s. The
    median of the medians (0.100) lay outside the interval of their mean, the point drawn
    outside its own error bar; and the interval moved with the order of the rows."""
    medians = [0.100] * 11 + [0.120] * 9
    rows = _rows(medians, spread=0.0)
    run_to_run.add_columns(rows)
    first = rows[0]
    assert first["cell_time_median_s"] == pytest.approx(0.109)
    assert first["cell_time_ci_low_s"] < 0.109 < first["cell_time_ci_high_s"]
    order = [5, 0, 19, 3, 12, 1, 7, 18, 2, 9, 4, 11, 6, 14, 8, 16, 10, 13, 15, 17]
    shuffled = _rows([0.1 + 0.001 * k for k in order], spread=0.0)
    ordered = _rows([0.1 + 0.001 * k for k in range(20)], spread=0.0)
    for rows in (shuffled, ordered):
        run_to_run.add_columns(rows)
    assert (shuffled[0]["cell_time_ci_low_s"], shuffled[0]["cell_time_ci_high_s"]) == (
        ordered[0]["cell_time_ci_low_s"], ordered[0]["cell_time_ci_high_s"])


@pytest.mark.parametrize(("iterations", "method"), [(2, "none"), (5, "none"), (6, "iterations")])
def test_one_run_of_too_few_iterations_for_a_95_percent_interval_has_none(iterations,
                                                                            method):
    """From 5 iterations the bootstrap's 95 % interval of the median was their whole range,
    which covers the median 94 % of the time at best (50 % at 2): the table and the
    report's whiskers called it a 95 % confidence interval."""
    (row,) = _rows([0.2], iterations=iterations, spread=0.05)
    run_to_run.add_columns([row])
    assert row["ci_method"] == method
    assert (row["cell_time_ci_low_s"] is None) == (method == "none")


def test_one_run_is_bootstrapped_over_its_iterations_and_cannot_be_called_stable():
    (row,) = _rows([0.2], iterations=200, spread=0.02)
    run_to_run.add_columns([row])
    assert row["ci_method"] == "iterations" and row["unstable"] is None
    assert row["run_to_run_cv"] is None and row["within_run_cv"] == pytest.approx(0.02, rel=0.2)
    assert row["cell_time_ci_low_s"] < row["time_median_s"] < row["cell_time_ci_high_s"]
    assert (row["cell_time_ci_high_s"] - row["cell_time_ci_low_s"]) / 0.2 < 0.02


def test_a_failed_repeat_does_not_count():
    rows = _rows([0.10, 0.10, 0.5], status={2: "failed"})
    run_to_run.add_columns(rows)
    assert rows[0]["repeats"] == 2 and "repeats" not in rows[2]


def test_results_without_a_cell_id_are_never_repeats_of_each_other():
    """Runners used on their own write no cell id: two files (batch 4 and 64, say) are two
    cells; the rows of one file stay together."""
    rows = _rows([0.01, 0.5, 0.5])
    for row, source in zip(rows, ["bs4.json", "bs64.json", "bs64.json"], strict=True):
        row.update(cell_id=None, study=None, source=source)
    rows[2]["name"] = "other"
    run_to_run.add_columns(rows)
    assert [r["repeats"] for r in rows] == [1, 1, 1]
    assert rows[1]["cell_throughput"] == pytest.approx(8 / rows[1]["time_median_s"])
    together = _rows([0.10, 0.11])
    for row, source in zip(together, ["a.json", "b.json"], strict=True):
        row["source"] = source  # the workflow's repeats: one cell id, a file each
    run_to_run.add_columns(together)
    assert [r["repeats"] for r in together] == [2, 2]


def test_the_interval_over_few_repeats_covers_the_truth_about_95_percent_of_the_time():
    """Three repeats per cell, 400 cells drawn from a known distribution: the plain
    percentile bootstrap would cover the true mean ~75 % of the time; the expanded one
    must be near the nominal 95 %."""
    rng = np.random.default_rng(11)
    truth = 0.1
    samples = [truth * (1 + 0.05 * rng.standard_normal(3)) for _ in range(400)]
    low, high = bootstrap.median_interval(samples, [True] * len(samples), resamples=1000)
    coverage = float(np.mean((low <= truth) & (truth <= high)))
    assert 0.88 <= coverage <= 0.995, coverage


def test_the_aggregate_reads_repeats_from_result_files(tmp_path):
    paths = []
    for k, median in enumerate([0.1, 0.1, 0.1]):
        res = R.new_result(kind="model", study="s", cell_id=CELL,
                           cell={"framework": "pytorch", "model": "resnet18", "batch_size": 8})
        res["measurements"].append(R.measurement(
            name="resnet18", pass_="training", times_s=[median, median * 1.01, median * 0.99],
            items_per_iteration=8))
        R.finish(res, "ok")
        path = systems.result_path("box", "s", CELL, tmp_path / "results", repeat=k)
        R.write(launch.stamped(res, path), path)
        paths.append(path)
    rows = aggregate.build_table(paths).to_pylist()
    assert [r["repeat"] for r in rows] == [0, 1, 2]
    assert {r["repeats"] for r in rows} == {3} and {r["ci_method"] for r in rows} == {"repeats"}
    assert rows[0]["unstable"] is False and rows[0]["run_to_run_cv"] == pytest.approx(0)


def test_run_counts_are_result_files_or_the_highest_repeat_and_one_without_either():
    """The report and compare count a cell's runs alike: its distinct result files, or its
    highest repeat + 1 where a run left no file; a table without either counts a row one
    run, never zero."""
    import pandas as pd

    frame = pd.DataFrame({"cell": ["a", "a", "b", "c"],
                          "source": ["a_r0.json", "a_r0.json", "b_r0.json", None],
                          "repeat": [0, 0, 2, None]})
    counts = run_to_run.run_counts(frame, [frame["cell"]])
    assert counts.tolist() == [1, 1, 3, 1]
    bare = frame[["cell"]]
    assert run_to_run.run_counts(bare, [bare["cell"]]).tolist() == [1, 1, 1, 1]
