"""Result files that cannot be trusted never fail the aggregate: each becomes one failed
row naming the file and the problem, and is moved aside so that its cell runs again.
A table that cannot be written keeps the previous one and says why in the job's log."""

from __future__ import annotations

import errno
import json
import os
import re
import runpy
import sys
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

from dlbench import aggregate, atomic, workflow_support
from dlbench import result as R

SCRIPT = Path(__file__).resolve().parents[1] / "workflow" / "scripts" / "aggregate.py"


def result(cell_id: str, study: str = "s", **cell) -> dict:
    res = R.new_result(kind="model", study=study, cell_id=cell_id,
                       cell={"framework": "pytorch", "model": "resnet18", "batch_size": 8,
                             "precision": "float32", "phase": "training", "device": "cpu",
                             "num_gpus": 1, **cell})
    res["measurements"].append(R.measurement(name="resnet18", pass_="training",
                                             times_s=[0.1, 0.2], items_per_iteration=8))
    return R.finish(res, "ok")


def cell_path(root: Path, cell_id: str, study: str = "s") -> Path:
    return root / "results" / study / "cells" / f"{cell_id}.json"


def write_json(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def good_and_bad(tmp_path: Path, bad_bytes: bytes) -> tuple[Path, Path]:
    """results/s/cells/A.json (valid) and results/s/cells/B.json (``bad_bytes``)."""
    good = write_json(cell_path(tmp_path, "A"), result("A"))
    bad = cell_path(tmp_path, "B")
    bad.write_bytes(bad_bytes)
    return good, bad


def without(data: dict, key: str) -> dict:
    return {k: v for k, v in data.items() if k != key}


VALID_B = json.dumps(result("B")).encode()
BAD_FILES = {
    "truncated": (VALID_B[: len(VALID_B) // 2], "not a JSON result file"),
    "random bytes": (bytes(range(256)) * 4, "not a JSON result file (not UTF-8 text"),
    "empty": (b"", "not a JSON result file"),
    "not a result": (b"[1, 2]", "not a dlbench result of schema version 1"),
    "status excellent": (json.dumps({**result("B"), "status": "excellent"}).encode(),
                         "result field status: 'excellent' is not one of"),
    "no kind": (json.dumps(without(result("B"), "kind")).encode(),
                "'kind' is a required property"),
    "another cell's id": (json.dumps(result("A")).encode(),
                          "cell_id is 'A' but its path says 'B'"),
    "another study's": (json.dumps(result("B", study="t")).encode(),
                        "study is 't' but its path says 's'"),
    # a profile's own run (results/profiles/.../result.json) copied among the cells: its
    # times carry the profiler's cost, and it read as a measurement
    "a profiled run's": (json.dumps({**result("B"), "extra": {"profiled": {"tool": "torch"}}}
                                    ).encode(),
                         "a profiled run's result (extra.profiled, tool 'torch'): its times "
                         "carry the profiler's cost, so it is no measurement"),
}


@pytest.mark.parametrize("content, problem", BAD_FILES.values(), ids=list(BAD_FILES))
def test_an_invalid_result_is_a_failed_row_and_is_moved_aside(tmp_path, capsys, content,
                                                              problem):
    good, bad = good_and_bad(tmp_path, content)
    parquet, csv = tmp_path / "results" / "benchmarks.parquet", tmp_path / "results" / "b.csv"
    table = aggregate.write([good, bad], parquet, csv)
    assert pq.read_table(parquet).equals(table) and csv.read_text().count("\n") == 3
    rows = {row["cell_id"]: row for row in table.to_pylist()}
    assert set(rows) == {"A", "B"} and len(table) == 2  # one row each, whatever B says
    assert rows["A"]["status"] == "ok" and rows["A"]["throughput"] > 0
    row = rows["B"]
    assert (row["study"], row["status"], row["source"]) == ("s", "failed", str(bad))
    assert row["kind"] is None and row["throughput"] is None
    # Nothing is lost: the file is moved, intact, into invalid/ beside the results.
    assert not bad.exists()
    (moved,) = (bad.parent / "invalid").iterdir()
    assert moved.name.startswith("B.") and moved.suffix == ".json"
    assert moved.read_bytes() == content
    error = row["error"]
    assert error.startswith(f"invalid result file {bad}: ") and problem in error
    assert f"moved to {moved} so that the next run measures the cell again" in error
    assert "\n" not in error and len(error) < 700
    assert json.loads(row["extra"]) == {"invalid_result": error.split(": ", 1)[1].split(
        "; moved to")[0], "moved_to": str(moved)}
    # The job's log (stderr) says the same, in one line.
    assert capsys.readouterr().err == f"dlbench.aggregate: {error}\n"


def test_an_integer_beyond_int64_is_a_failed_row_naming_the_field(tmp_path, capsys):
    good = write_json(cell_path(tmp_path, "A"), result("A"))
    absurd = write_json(cell_path(tmp_path, "B"), result("B", batch_size=10**23))
    R.validate(json.loads(absurd.read_text()))  # the schema sets no upper bound
    table = aggregate.write([good, absurd], tmp_path / "t.parquet")
    row = table.to_pylist()[1]
    assert row["status"] == "failed" and row["batch_size"] is None
    assert row["error"].startswith(f"invalid result file {absurd}: field batch_size: "
                                   f"{10**23} is outside int64; moved to ")
    assert table.to_pylist()[0]["batch_size"] == 8


def test_a_value_of_the_wrong_shape_in_an_open_part_is_named(tmp_path, capsys):
    res = result("B")
    res["environment"]["cpu_count"] = "many"  # the schema leaves environment open
    res["extra"]["monitor"] = ["not", "a", "summary"]
    bad = write_json(cell_path(tmp_path, "B"), res)
    (row,) = aggregate.build_table([bad]).to_pylist()
    assert row["status"] == "failed" and str(bad) in row["error"]
    assert "cannot be tabulated (AttributeError" in row["error"]
    res["extra"] = {}
    bad.write_text(json.dumps(res))
    (row,) = aggregate.build_table([bad]).to_pylist()
    assert "field cpu_count: Could not convert 'many'" in row["error"]
    assert bad.exists()  # build_table alone moves nothing


def test_identity_is_checked_only_where_the_path_gives_one(tmp_path):
    # Outside results/<study>/cells/ a file is whatever it says it is.
    elsewhere = write_json(tmp_path / "mine" / "x.json", result("A", study="t"))
    (row,) = aggregate.build_table([elsewhere]).to_pylist()
    assert (row["study"], row["cell_id"], row["status"]) == ("t", "A", "ok")
    assert aggregate.expected_identity("results/s/cells/c1.json") == {"study": "s",
                                                                      "cell_id": "c1"}
    assert aggregate.expected_identity("x/c1.json") is None


def test_moving_aside_never_replaces_an_earlier_file(tmp_path, monkeypatch):
    monkeypatch.setattr(atomic, "_stamp", lambda: "20250101T000000Z")
    path = cell_path(tmp_path, "B")
    moved = []
    for text in ("first", "second", "third"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        moved.append(aggregate.move_aside(path))
    assert [p.name for p in moved] == ["B.20250101T000000Z.json", "B.20250101T000000Z.1.json",
                                       "B.20250101T000000Z.2.json"]
    assert [p.read_text() for p in moved] == ["first", "second", "third"]


def test_a_file_that_cannot_be_moved_is_still_a_row_that_says_so(tmp_path, capsys):
    missing = cell_path(tmp_path, "gone")
    (row,) = aggregate.write([missing], tmp_path / "t.parquet").to_pylist()
    assert row["cell_id"] == "gone" and row["status"] == "failed"
    assert "could not be moved aside" in row["error"] and "remove it" in row["error"]


def test_no_result_files_give_an_empty_table(tmp_path):
    table = aggregate.write([], tmp_path / "t.parquet", tmp_path / "t.csv")
    assert table.num_rows == 0 and pq.read_table(tmp_path / "t.parquet").schema.equals(
        aggregate.SCHEMA)


def enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_keeps_the_previous_table_and_names_the_file(tmp_path, monkeypatch):
    good = write_json(cell_path(tmp_path, "A"), result("A"))
    parquet, csv = tmp_path / "t.parquet", tmp_path / "t.csv"
    aggregate.write([good], parquet, csv)
    before = parquet.read_bytes(), csv.read_bytes()
    monkeypatch.setattr(type(aggregate.SCHEMA.empty_table().to_pandas()), "to_csv", enospc)
    with pytest.raises(atomic.WriteError) as info:
        aggregate.write([good, good], parquet, csv)
    assert info.value.errno == errno.ENOSPC
    assert str(info.value) == (f"[Errno 28] {csv}: No space left on device; the previous "
                               "table is left as it was")
    # The Parquet, written first, is not swapped in without its CSV; no temporary is left.
    assert (parquet.read_bytes(), csv.read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results", "t.csv", "t.parquet"]


def test_a_table_that_cannot_be_synced_keeps_the_previous_pair(tmp_path, monkeypatch):
    """Both files are synced before either replaces its previous version: a Parquet whose
    sync fails (a full NFS quota shows there) leaves the old CSV too, not a new CSV beside
    the old table."""
    good = write_json(cell_path(tmp_path, "A"), result("A"))
    parquet, csv = tmp_path / "t.parquet", tmp_path / "t.csv"
    aggregate.write([good], parquet, csv)
    before = parquet.read_bytes(), csv.read_bytes()
    real_fsync = atomic._fsync

    def parquet_sync_fails(path, mode=None):
        if path.name.startswith(".t.parquet."):
            enospc()
        real_fsync(path, mode)

    monkeypatch.setattr(atomic, "_fsync", parquet_sync_fails)
    with pytest.raises(atomic.WriteError) as info:
        aggregate.write([good, good], parquet, csv)
    assert str(info.value).startswith(f"[Errno 28] {parquet}: No space left on device")
    assert (parquet.read_bytes(), csv.read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results", "t.csv", "t.parquet"]


class NamedInputs(list):
    """snakemake.input: every file, and the named groups as attributes."""


def run_script(tmp_path: Path, monkeypatch, inputs: list[Path],
               beside: list[Path] = ()) -> Path:
    """workflow/scripts/aggregate.py as Snakemake runs it, in this process (``inputs``: the
    run's cells, ``beside``: the other results the table keeps); return its log."""
    log = tmp_path / "logs" / "aggregate.log"
    log.parent.mkdir(exist_ok=True)
    named = NamedInputs(str(p) for p in [*inputs, *beside])
    named.cells, named.beside = [str(p) for p in inputs], [str(p) for p in beside]
    fake = SimpleNamespace(input=named, log=[str(log)],
                           output=SimpleNamespace(parquet=str(tmp_path / "t.parquet"),
                                                  csv=str(tmp_path / "t.csv")),
                           params=SimpleNamespace(unstable_cv=0.05, system="box",
                                                  beside_in_own_studies=[]))
    # The script lists invalid files for the next run under results/ of the working
    # directory: this test's, never the repository's.
    monkeypatch.chdir(tmp_path)
    # The script redirects them; whatever it leaves, the test gets its own back.
    monkeypatch.setattr(sys, "stdout", sys.stdout)
    monkeypatch.setattr(sys, "stderr", sys.stderr)
    runpy.run_path(str(SCRIPT), init_globals={"snakemake": fake}, run_name="__main__")
    return log


def test_the_script_logs_invalid_files_and_succeeds(tmp_path, monkeypatch):
    good, bad = good_and_bad(tmp_path, b"\x00\xff garbage")
    log = run_script(tmp_path, monkeypatch, [good, bad])
    lines = log.read_text().splitlines()
    assert lines[0].startswith(f"dlbench.aggregate: invalid result file {bad}: ")
    assert lines[1] == "2 rows from 2 result files"


def test_another_systems_invalid_file_stays_a_failed_row_and_is_not_set_aside(tmp_path,
                                                                             monkeypatch):
    """Only the invalid files of this run's cells are listed for its next run to set aside:
    another system's cells are measured by that system's runs, another config's by its
    runs, so their files stay where they are (a failed row saying whose it is) instead of
    leaving the table for good. A following run of another config moves none of them."""
    def invalid(system: str, cell_id: str) -> Path:
        path = tmp_path / "results" / system / "s" / "cells" / f"{cell_id}.json"
        path.parent.mkdir(parents=True)
        path.write_bytes(b"{broken")
        return path

    ours, theirs = invalid("box", "A"), invalid("other", "B")
    # this system's, of a study this run's config does not name: its cell is measured by
    # a run of a config that names it
    unnamed = tmp_path / "results" / "box" / "t" / "cells" / "C.json"
    unnamed.parent.mkdir(parents=True)
    unnamed.write_bytes(b"{broken")
    log = run_script(tmp_path, monkeypatch, [ours], beside=[theirs, unnamed])
    listed = (tmp_path / workflow_support.INVALID_LATER).read_text().splitlines()
    assert listed == [str(ours)]
    rows = {(row["system"], row["study"] or row["source"].split("/")[-3]): row
            for row in pq.read_table(tmp_path / "t.parquet").to_pylist()}
    assert "the next run moves it aside" in rows["box", "s"]["error"]
    assert rows["other", "s"]["error"].endswith(
        "left in place: the next run of system 'other' measures the cell again")
    assert rows["other", "s"]["status"] == "failed" and rows["other", "s"]["cell_id"] == "B"
    assert rows["box", "t"]["error"].endswith(
        "left in place: a run of a config with this cell (study 't') measures the cell again")
    assert str(theirs) in log.read_text()
    listing = tmp_path / workflow_support.INVALID_LATER
    # a run of another config (without ours) moves nothing, and its aggregate keeps ours
    # listed for the next run with our cell
    assert workflow_support.set_aside_invalid([str(unnamed)], listing) == []
    other = write_json(tmp_path / "results" / "box" / "u" / "cells" / "D.json",
                       result("D", study="u"))
    run_script(tmp_path, monkeypatch, [other], beside=[ours, theirs, unnamed])
    assert ours.exists() and listing.read_text().splitlines() == [str(ours)]
    # the next run with ours moves it, and its job's log under the same stamp (the cell's
    # next job would write over it); nothing is left listed
    job_log = workflow_support.cell_log(ours)
    job_log.parent.mkdir(parents=True, exist_ok=True)
    job_log.write_text("the run that wrote the invalid file\n")
    (moved,) = workflow_support.set_aside_invalid([str(ours)], listing)
    assert moved.parent.name == "invalid" and moved.exists()
    assert theirs.exists() and unnamed.exists() and not ours.exists()
    assert not listing.exists()
    stamp = moved.name[len(ours.stem):-len(".json")]
    kept = job_log.parent / "invalid" / f"{job_log.stem}{stamp}.log"
    assert not job_log.exists() and kept.read_text() == "the run that wrote the invalid file\n"


def test_an_invalid_repeats_row_says_which_repeat(tmp_path):
    bad = cell_path(tmp_path, "pytorch_x_0000000a_r2")
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"{broken")
    (row,) = aggregate.build_table([bad]).to_pylist()
    assert (row["cell_id"], row["repeat"], row["status"]) == ("pytorch_x_0000000a", 2, "failed")


def test_a_file_given_twice_is_one_run_and_a_copy_of_a_run_is_refused(tmp_path, capsys,
                                                                      monkeypatch):
    """Overlapping globs by hand (cells/*.json ./cells/A.json) gave a second repeat that
    never ran and a run-to-run CV of 0; a copy of a result beside it would do the same."""
    a = write_json(cell_path(tmp_path, "A"), result("A"))
    monkeypatch.chdir(tmp_path)
    table = aggregate.build_table([a, Path("results/s/cells/./A.json")])
    assert table.column("repeats").to_pylist() == [1]
    copy = tmp_path / "kept" / "A.json"
    copy.parent.mkdir()
    copy.write_bytes(a.read_bytes())
    assert aggregate.main([str(a), str(copy), "--parquet", str(tmp_path / "t.parquet")]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    started = json.loads(a.read_text())["started_at"]
    assert line == (f"dlbench.aggregate: {a} and {copy} are both the result of one run of cell "
                    f"A (repeat 0, study s, started {started}): give one of them")
    assert not (tmp_path / "t.parquet").exists()
    # Another run of the cell (another checkout's repeat 0) is a run of its own, and an
    # unreadable file beside them no run at all.
    other = {**result("A"), "started_at": "2020-01-01T00:00:00.000+00:00"}
    again = write_json(tmp_path / "other" / "A.json", other)
    broken = tmp_path / "broken" / "A.json"
    broken.parent.mkdir()
    broken.write_text("{")
    table = aggregate.build_table([a, again, broken])
    assert table.column("repeats").to_pylist()[:2] == [2, 2]


def test_two_software_stacks_under_one_label_stop_the_script_in_one_line(tmp_path,
                                                                        monkeypatch):
    """As the README says: one line naming both files, no traceback; the job fails."""
    def stack(cell_id: str, version: str) -> Path:
        res = {**result(cell_id), "system": "box", "fingerprint": {
            "hardware": {}, "software": {"framework": "pytorch", "framework_version": version}}}
        return write_json(tmp_path / "results" / "box" / "s" / "cells" / f"{cell_id}.json", res)

    a, b = stack("A", "2.9.0"), stack("B", "2.10.0")
    with pytest.raises(SystemExit) as info:
        run_script(tmp_path, monkeypatch, [a, b])
    assert info.value.code == 1
    (line,) = (tmp_path / "logs" / "aggregate.log").read_text().splitlines()
    assert line.startswith("dlbench.aggregate: system 'box': two pytorch software stacks")
    assert str(a) in line and str(b) in line
    assert not (tmp_path / "t.parquet").exists()


def test_the_script_keeps_the_traceback_in_its_log_when_it_fails(tmp_path, monkeypatch):
    good = write_json(cell_path(tmp_path, "A"), result("A"))
    monkeypatch.setattr(aggregate.pq, "write_table", enospc)
    with pytest.raises(OSError):
        run_script(tmp_path, monkeypatch, [good])
    text = (tmp_path / "logs" / "aggregate.log").read_text()
    assert text.startswith("Traceback (most recent call last):")
    last = text.strip().splitlines()[-1]
    assert "No space left on device" in last and str(tmp_path / "t.parquet") in last
    assert not sys.stderr.closed  # the error itself reached a live stderr


def test_the_table_is_kept_by_snakemake_when_the_job_fails():
    """update(): Snakemake neither deletes it before the job nor after a failure."""
    rule = (SCRIPT.parents[1] / "rules" / "aggregate.smk").read_text()
    for name in ("parquet", "csv"):
        assert re.search(rf"^\s+{name}=update\(", rule, re.MULTILINE), name


def test_a_listed_file_valid_again_is_kept_not_measured_again(tmp_path):
    """The aggregate listed a cut-short result; its user copied the original back before
    the next run, which moved the valid file to invalid/ and measured the cell again."""
    good = write_json(cell_path(tmp_path, "A"), result("A"))
    bad = cell_path(tmp_path, "B")
    bad.write_bytes(b"{broken")
    listing = tmp_path / workflow_support.INVALID_LATER
    listing.parent.mkdir(parents=True, exist_ok=True)
    listing.write_text(f"{good}\n{bad}\n")  # as if A had been found cut short too
    (moved,) = workflow_support.set_aside_invalid([str(good), str(bad)], listing)
    assert moved.parent.name == "invalid" and not bad.exists()
    assert good.exists() and json.loads(good.read_text())["cell_id"] == "A"
    assert not listing.exists()


def test_a_dry_run_is_told_which_listed_files_the_run_would_set_aside(tmp_path):
    """A dry run said "Nothing to be done" of a listed invalid file that the real run then
    moved aside and measured again; it is told now, and nothing moves."""
    good = write_json(cell_path(tmp_path, "A"), result("A"))
    bad = cell_path(tmp_path, "B")
    bad.write_bytes(b"{broken")
    listing = tmp_path / workflow_support.INVALID_LATER
    listing.parent.mkdir(parents=True, exist_ok=True)
    listing.write_text(f"{good}\n{bad}\n")
    assert workflow_support.invalid_to_set_aside([str(good), str(bad)], listing) == [str(bad)]
    assert workflow_support.invalid_to_set_aside([str(good)], listing) == []
    assert bad.exists() and listing.exists()
