"""Where a cell's wall time goes (dlbench.stages): exclusive stages, the rest as ``other``,
the process's start-up, and each runner's stages in its result."""

import subprocess
import sys
import time

import pytest

from dlbench import cellrun, harness, stages
from dlbench import result as R


@pytest.fixture(autouse=True)
def fresh_clock():
    stages.reset()
    yield
    stages.reset()


def test_a_nested_stage_is_charged_to_the_inner_one_only():
    with stages.stage("build"):
        time.sleep(0.05)
        with stages.stage("flop_count"):
            time.sleep(0.2)
        time.sleep(0.05)
    out = stages.breakdown(wall_s=1.0, startup_s=None)
    assert 0.2 <= out["flop_count"] < 0.35
    assert 0.1 <= out["build"] < 0.2  # not the 0.3 s the outer block lasted
    assert out["other"] == pytest.approx(1.0 - out["build"] - out["flop_count"], abs=1e-5)
    assert "startup" not in out


def test_stages_accumulate_and_come_out_in_their_order():
    for _ in range(3):
        with stages.stage("measure"):
            time.sleep(0.02)
        with stages.stage("warmup"):
            pass
    out = stages.breakdown(wall_s=0.01, startup_s=1.5)
    assert out["measure"] >= 0.06
    assert out["other"] == 0.0  # never negative, whatever the wall time said
    assert list(out) == [name for name in stages.NAMES if name in out]
    assert out["startup"] == 1.5


def test_an_unknown_stage_is_refused_in_one_line():
    with pytest.raises(ValueError, match="unknown stage 'setup'"), stages.stage("setup"):
        pass
    with pytest.raises(ValueError, match="unknown stage 'other'"), stages.stage("other"):
        pass


def test_a_framework_imported_inside_the_record_is_start_up_too():
    """A runner that imports its framework inside the record marks it startup: added to
    the process's start before the record, and within the wall time it is part of."""
    with stages.stage("startup"):
        time.sleep(0.05)
    out = stages.breakdown(wall_s=0.5, startup_s=1.0)
    assert 1.05 <= out["startup"] < 1.2
    assert out["other"] == pytest.approx(0.5 - (out["startup"] - 1.0), abs=1e-5)
    stages.reset()
    with stages.stage("startup"):
        pass
    assert "startup" in stages.breakdown(wall_s=0.1, startup_s=None)  # not on /proc: its own


def test_process_age_counts_from_the_process_start():
    code = ("import time; time.sleep(0.4); from dlbench import stages; "
            "print(stages.process_age_s())")
    age = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               check=True).stdout)
    assert 0.4 <= age < 30


def test_the_result_schema_names_every_stage_and_no_other():
    names = R.load_schema()["properties"]["stages_s"]["propertyNames"]["enum"]
    assert names == list(stages.NAMES)


def test_a_recorded_cell_has_its_stages_within_its_wall_time(tmp_path):
    res = R.new_result(kind="model", cell={"model": "m"})
    out = tmp_path / "r.json"
    with cellrun.recorded(res, str(out)):
        loop = harness.timed_loop(lambda: None, lambda _: time.sleep(0.01), lambda: None, 2, 5)
        res["measurements"] = [R.measurement(name="m", pass_="training", times_s=loop.times_s,
                                             items_per_iteration=1)]
    written = R.read(out)
    got = written["stages_s"]
    assert got["warmup"] >= 0.02 and got["measure"] >= sum(loop.times_s)
    inside = sum(v for k, v in got.items() if k != "startup")
    assert inside == pytest.approx(written["wall_time_s"], abs=1e-4)
    assert got["startup"] > 0


def test_a_failed_cell_still_says_where_its_time_went(tmp_path):
    res = R.new_result(kind="model", cell={"model": "m"})
    with cellrun.recorded(res, str(tmp_path / "r.json")), stages.stage("build"):
        time.sleep(0.05)
        raise RuntimeError("boom")
    written = R.read(tmp_path / "r.json")
    assert written["status"] == "failed" and written["stages_s"]["build"] >= 0.05


def test_a_cells_time_is_its_stages_start_up_included_else_its_wall_time():
    assert stages.total_s({"stages_s": {"startup": 1.5, "measure": 2.0, "other": 0.5},
                           "wall_time_s": 2.5}) == 4.0
    assert stages.total_s({"wall_time_s": 2.5}) == 2.5  # a result from before stages
    assert stages.total_s({"wall_time_s": None}) is None
