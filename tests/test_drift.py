"""Drift within a run (dlbench.drift): Mann-Kendall's test and Sen's slope on a
measurement's iteration times, and the table's, report's and compare's use of them."""

import math

import numpy as np
import pandas as pd
import pytest

from dlbench import drift


def wobble(n, spread=0.01):
    """A deterministic wobble around 1 with no trend (a period of three iterations)."""
    return 1 + spread * np.array([(-1, 0, 1)[i % 3] for i in range(n)])


def test_a_steady_rise_drifts_by_its_size_and_a_steady_fall_the_other_way():
    rising = np.linspace(1.0, 1.1, 50) * wobble(50)
    found = drift.trend(rising)
    assert found.change == pytest.approx(0.1, abs=0.01)
    assert found.p_value < 1e-6 and found.drifting and found.iterations == 50
    falling = drift.trend(rising[::-1])
    assert falling.change == pytest.approx(-0.1, abs=0.01) and falling.drifting
    assert drift.describe(found.change) == "iteration times rose 10% over the measured run"
    assert drift.note("NEW", falling.change, True) == (
        "NEW's iteration times fell 10% over the measured run, most likely still warming up "
        "(more warm-up iterations, or warmup_until_steady, would settle it)")
    assert drift.note("BASE", found.change, True, 0.4, "power cap 40%") == (
        "BASE's iteration times rose 10% over the measured run, most likely the GPU's "
        "clocks held back")
    assert drift.note("BASE", found.change, False) is None


def test_noise_a_slow_first_iteration_and_a_small_trend_are_not_drift():
    rng = np.random.default_rng(3)
    noise = 1 + 0.03 * rng.standard_normal(200)
    assert not drift.trend(noise).drifting
    first_slow = wobble(100)
    first_slow[0] = 5.0  # a first measured iteration that still paid for something
    found = drift.trend(first_slow)
    assert abs(found.change) < 0.01 and not found.drifting
    # Clear (a long, quiet run) but small: significance alone does not flag it.
    small = drift.trend(np.linspace(1.0, 1.02, 1000) * wobble(1000, 0.001))
    assert small.p_value < drift.SIGNIFICANCE and not small.drifting


def test_mann_kendall_p_is_the_textbook_normal_approximation_with_ties():
    """1..10: S = 45, var = 10*9*25/18 = 125; with the first two tied, S = 44 and the
    tie correction takes 2*1*9/18 off the variance; p = erfc(z/sqrt 2), z = (S - 1)/sd."""
    assert drift.trend(np.arange(1.0, 11.0)).p_value == pytest.approx(
        math.erfc(44 / math.sqrt(125) / math.sqrt(2)))
    tied = [1.0, 1.0, 2, 3, 4, 5, 6, 7, 8, 9]
    assert drift.trend(tied).p_value == pytest.approx(
        math.erfc(43 / math.sqrt(124) / math.sqrt(2)))
    assert drift.trend([2.0] * 12) == drift.Trend(change=0.0, p_value=1.0, iterations=12)


def test_a_long_run_is_tested_on_a_spread_of_its_iterations_and_keeps_its_size():
    found = drift.trend(np.linspace(1.0, 1.1, 20_000))  # a rise of 0.1 s, its median 1.05 s
    assert found.iterations == 20_000 and found.change == pytest.approx(0.1 / 1.05, rel=1e-6)
    assert found.drifting


def test_too_few_iterations_give_no_verdict():
    assert drift.trend(np.linspace(1, 2, drift.MIN_ITERATIONS - 1)) is None
    with_nan = [float("nan")] * 5 + list(np.linspace(1, 2, drift.MIN_ITERATIONS - 1))
    assert drift.values(with_nan) == {"time_drift": None, "time_drift_p": None,
                                      "drifting": None}
    assert drift.values(None)["drifting"] is None
    assert drift.note("BASE", 0.2, False) is None and drift.note("BASE", None, True) is None


def test_the_table_gives_each_measurement_its_drift(tmp_path):
    """Through dlbench.aggregate from result files: a rising run drifts, a steady one does
    not, one of six iterations has no verdict, a failed cell's row is empty."""
    from dlbench import aggregate
    from dlbench import result as R

    paths = []
    for name, times, status in (("rising", np.linspace(0.1, 0.12, 40) * wobble(40), "ok"),
                                ("steady", 0.1 * wobble(40), "ok"),
                                ("short", np.linspace(0.1, 0.2, 6), "ok"),
                                ("broken", [], "failed")):
        res = R.new_result(kind="model", study="s", cell_id=name,
                           cell={"framework": "pytorch", "model": "resnet18"})
        if status == "ok":
            res["measurements"].append(R.measurement(name=name, pass_="training",
                                                     times_s=list(times),
                                                     items_per_iteration=8))
        R.finish(res, status, None if status == "ok" else "boom")
        paths.append(tmp_path / f"{name}.json")
        R.write(res, paths[-1])
    table = aggregate.build_table(paths).to_pandas().set_index("cell_id")
    flags = {name: None if pd.isna(flag) else bool(flag)
             for name, flag in table["drifting"].items()}
    assert flags == {"rising": True, "steady": False, "short": None, "broken": None}
    assert table.loc["rising", "time_drift"] == pytest.approx(0.02 / 0.11, abs=0.01)
    for name in ("short", "broken"):
        assert table.loc[name, ["time_drift", "time_drift_p"]].isna().all()


def test_the_table_says_whether_a_warm_up_until_steady_settled(tmp_path):
    """warmup_settled and warmup_seconds from a measurement's extra.warmup (model cells)
    or the result's (language models); null for a fixed warm-up."""
    from dlbench import aggregate
    from dlbench import result as R

    paths = []
    for name, where, warmup in (
            ("settled", "measurement", {"iterations": 31, "settled": True, "seconds": 2.5}),
            ("limited", "result", {"generations": 53, "settled": False, "seconds": 300.2}),
            ("fixed", None, None)):
        res = R.new_result(kind="model", study="s", cell_id=name,
                           cell={"framework": "pytorch", "model": "resnet18"})
        extra = {"warmup": warmup} if warmup else {}
        res["measurements"].append(R.measurement(
            name=name, pass_="training", times_s=[0.1] * 5, items_per_iteration=8,
            extra=extra if where == "measurement" else {}))
        if where == "result":
            res["extra"].update(extra)
        R.finish(res, "ok")
        paths.append(tmp_path / f"{name}.json")
        R.write(res, paths[-1])
    table = aggregate.build_table(paths).to_pandas().set_index("cell_id")
    assert table.loc["settled", "warmup_settled"] == True  # noqa: E712 (numpy bool)
    assert table.loc["limited", "warmup_settled"] == False  # noqa: E712
    assert table.loc["limited", "warmup_seconds"] == pytest.approx(300.2)
    assert table.loc["fixed", ["warmup_settled", "warmup_seconds"]].isna().all()


def test_a_drift_is_read_as_warm_up_a_gpu_held_back_or_a_system_slowing():
    assert drift.reading(-0.08).startswith("falling: still warming up")
    assert drift.reading(0.08, 0.3, "thermal 30%") == (
        "rising: the GPU's clocks held back in 30% of samples (thermal 30%)")
    assert drift.reading(0.08, 0.01, "thermal 1%").startswith("rising: the system slowed")
    assert drift.reading(0.08, float("nan")).startswith("rising: the system slowed")
    # A warm-up until steady: stopped at its limit, or settled while a slower fall went on.
    assert drift.reading(-0.08, warmup_settled=False) == (
        "falling: still warming up: the warm-up until steady reached its limit before the "
        "times settled")
    assert "more slowly than the warm-up until steady could see" in drift.reading(
        -0.08, warmup_settled=True)
    assert "warmup_until_steady" in drift.reading(-0.08)


def test_a_late_step_down_is_not_read_as_a_warm_up():
    """Flat for 15 iterations, then a quarter faster: "falling: still warming up" said a
    longer warm-up would help, which it would not. A fall early in the run still reads as
    warm-up; the step's place is where the times before and after it differ most."""
    late = [1.0, 1.07, 1.02, 1.0, 1.05] * 3 + [0.75, 0.74, 0.76, 0.75, 0.74]
    early = [1.6, 1.3, 1.1] + [1.0, 1.02, 0.99, 1.01] * 4 + [1.0, 0.99, 1.0]
    assert drift.step_at(late) == pytest.approx(15 / 20)
    assert drift.step_at(early) == pytest.approx(3 / len(early))
    assert drift.reading(-0.3, step=drift.step_at(late)).startswith(
        "falling: a step down late in the run, not a warm-up")
    assert drift.reading(-0.3, step=drift.step_at(early)).startswith("falling: still warming up")
    assert drift.step_at([1.0] * 5) is None and drift.step_at(None) is None
    assert drift.step_at(float("nan")) is None  # a row whose times were not kept
