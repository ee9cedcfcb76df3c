"""The table and report of a run that ended with cells lacking a result
(dlbench.incomplete_run). Through a real Snakemake run whose launcher is killed:
tests/test_workflow_faults.py."""

import os
from pathlib import Path

import pyarrow.parquet as pq

from dlbench import incomplete_run, systems
from dlbench import result as R


def result_file(root: Path, cell_id: str) -> str:
    res = R.new_result(kind="model", cell={"framework": "pytorch", "model": "resnet18"},
                       study="s", cell_id=cell_id)
    res["measurements"] = [R.measurement(name="resnet18", pass_="training",
                                         times_s=[0.1, 0.11, 0.1], items_per_iteration=8,
                                         throughput_unit="samples/s")]
    R.finish(res, "ok", None)
    path = systems.result_path("local", "s", cell_id, root)
    R.write(res, path)
    return str(path)


def planned_paths(root: Path, *cell_ids: str) -> list[str]:
    return [str(systems.result_path("local", "s", cell_id, root)) for cell_id in cell_ids]


def test_nothing_is_written_when_every_planned_result_exists(tmp_path):
    """The run failed elsewhere (the aggregate's or the report's own job): their logs say
    why, and the table is not written twice."""
    planned = [result_file(tmp_path, "pytorch_a_00000001")]
    parquet, said = tmp_path / "t.parquet", []
    incomplete_run.write(planned, [], str(parquet), str(tmp_path / "t.csv"),
                         str(tmp_path / "report"), say=said.append)
    assert said == [] and not parquet.exists()


def test_a_run_stopped_after_its_cells_and_before_its_table_writes_it(tmp_path):
    """A SIGTERM lets the running cells finish and starts nothing more: every result is
    there and the table's job never ran. The table is written then, without a note of
    missing cells; once it is as new as every result, nothing is written again."""
    planned = [result_file(tmp_path, "pytorch_a_00000001")]
    parquet, report, said = tmp_path / "t.parquet", tmp_path / "report", []
    incomplete_run.write(planned, [], str(parquet), str(tmp_path / "t.csv"), str(report),
                         table_job_ran=False, say=said.append)
    assert said == ["dlbench: the run stopped before its table; writing the table and "
                    "report of the 1 results there are (Ctrl-C to skip)",
                    f"dlbench: {parquet} (1 rows) and {report} hold every result"]
    assert "Incomplete run" not in (report / "index.html").read_text()
    said.clear()
    incomplete_run.write(planned, [], str(parquet), str(tmp_path / "t.csv"), str(report),
                         table_job_ran=False, say=said.append)
    assert said == []  # the table is as new as every result
    os.utime(planned[0])  # a result newer than the table
    os.utime(parquet, (1, 1))
    assert incomplete_run.table_behind(planned, parquet)


def test_the_results_there_are_make_the_table_and_the_report_names_the_missing(tmp_path):
    done = result_file(tmp_path, "pytorch_a_00000001")
    planned = [done, *planned_paths(tmp_path, "pytorch_b_00000002", "pytorch_c_00000003")]
    parquet, report, said = tmp_path / "t.parquet", tmp_path / "report", []
    incomplete_run.write(planned, [], str(parquet), str(tmp_path / "t.csv"), str(report),
                         say=said.append)
    assert said == [
        "dlbench: 2 of 3 cell results are missing (their jobs failed or were stopped: see "
        "above); writing "
        "the table and report of the 1 results there are (Ctrl-C to skip)",
        f"dlbench: {parquet} (1 rows) and {report} hold the results there are; the next run "
        "measures the missing cells"]
    assert [r["cell_id"] for r in pq.read_table(parquet).to_pylist()] == ["pytorch_a_00000001"]
    page = (report / "index.html").read_text()
    assert "Incomplete run" in page
    assert "2 of 3 cell results were not made" in page
    assert "Missing: s/pytorch_b_00000002, s/pytorch_c_00000003." in page
    # The header counts them: 3 cells, 1 ok, 2 missing.
    assert ('<div class="card"><div class="num">3</div><div class="lbl">cells</div>' in page
            and '<div class="num">2</div><div class="lbl">missing</div>' in page)


def test_no_result_at_all_writes_no_table(tmp_path):
    parquet, said = tmp_path / "t.parquet", []
    incomplete_run.write(planned_paths(tmp_path, "pytorch_a_00000001"), [], str(parquet),
                         str(tmp_path / "t.csv"), str(tmp_path / "report"), say=said.append)
    assert said == ["dlbench: 1 of 1 cell results are missing (their jobs failed or were "
                    "stopped: see above); no result, so no new table"]
    assert not parquet.exists()
    parquet.write_bytes(b"the table of an earlier run")
    said.clear()
    incomplete_run.write(planned_paths(tmp_path, "pytorch_a_00000001"), [], str(parquet),
                         str(tmp_path / "t.csv"), str(tmp_path / "report"), say=said.append)
    assert said[0].endswith("no result, so no new table (the one there is left as it was)")
    assert parquet.read_bytes() == b"the table of an earlier run"


def test_the_note_names_twenty_cells_and_counts_the_rest(tmp_path):
    absent = planned_paths(tmp_path, *(f"pytorch_m_{i:08x}" for i in range(25)))
    text = incomplete_run.note(absent, 30)
    assert text.startswith("This report was written at the end of a run in which 25 of 30 ")
    assert "pytorch_m_00000014" not in text  # the 21st
    assert text.endswith("s/pytorch_m_00000013 and 5 more.")


def test_a_table_that_cannot_be_written_is_one_line(tmp_path):
    """The run has failed already: what went wrong here is said, not raised."""
    planned = [result_file(tmp_path, "pytorch_a_00000001"),
               *planned_paths(tmp_path, "pytorch_b_00000002")]
    blocked, said = tmp_path / "file", []
    blocked.write_text("")
    incomplete_run.write(planned, [], str(blocked / "t.parquet"), str(blocked / "t.csv"),
                         str(tmp_path / "report"), say=said.append)
    assert said[-1].startswith("dlbench: the table and report of the results there are "
                               "could not be written (written: nothing): ")
    assert "t.parquet" in said[-1]


def test_a_second_interrupt_stops_it_and_says_what_was_written(tmp_path, monkeypatch):
    """Ctrl-C during the report (after the table): the table is new and whole, the report
    as it was, and the line says so."""
    from dlbench import report

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "render", interrupted)
    planned = [result_file(tmp_path, "pytorch_a_00000001"),
               *planned_paths(tmp_path, "pytorch_b_00000002")]
    parquet, said = tmp_path / "t.parquet", []
    incomplete_run.write(planned, [], str(parquet), str(tmp_path / "t.csv"),
                         str(tmp_path / "report"), say=said.append)
    assert said[-1] == f"dlbench: interrupted; written: {parquet} (1 rows)"
    assert pq.read_table(parquet).num_rows == 1


def test_only_this_runs_invalid_files_are_moved_aside(tmp_path, monkeypatch):
    """Another system's invalid result stays where it is (its own runs measure the cell
    again), and so does this system's of a study the run does not name; this run's is
    moved into invalid/ for its next run to measure."""
    from dlbench import report

    monkeypatch.setattr(report, "render", lambda *args, **kwargs: None)
    root = tmp_path / "results"
    ours = Path(result_file(root, "pytorch_a_00000001"))
    ours.write_text("{broken")
    theirs = systems.result_path("other", "s", "pytorch_b_00000002", root)
    theirs.parent.mkdir(parents=True)
    theirs.write_text("{broken")
    # this system's, of a study the run's config does not name: a run naming it measures it
    unnamed = systems.result_path("local", "t", "pytorch_d_00000004", root)
    unnamed.parent.mkdir(parents=True)
    unnamed.write_text("{broken")
    planned = [str(ours), *planned_paths(root, "pytorch_c_00000003")]
    incomplete_run.write(planned, [str(theirs), str(unnamed)], str(tmp_path / "t.parquet"),
                         str(tmp_path / "t.csv"), str(tmp_path / "report"), say=lambda _: None)
    assert theirs.exists() and unnamed.exists() and not ours.exists()
    assert len(list((ours.parent / "invalid").iterdir())) == 1
    rows = pq.read_table(tmp_path / "t.parquet").to_pylist()
    assert sorted((r["system"], r["status"]) for r in rows) == [
        ("local", "failed"), ("local", "failed"), ("other", "failed")]
