"""dlbench list: what a config expands to and what has run on each system."""

import csv
import io
import json

import yaml

from dlbench import command, listing, study, systems
from dlbench import result as R

CONFIG = {"system": "box", "studies": {
    "sweep": {"repeats": 2, "grid": {"model": "resnet18", "batch_size": [1, 2], "device": "cpu"}},
    "single": {"grid": {"model": "alexnet", "device": "cpu"}}}}


def write_status(results, system, cell, status, repeat=0, stages=None):
    res = R.new_result(kind="model", cell=dict(cell.params), study=cell.study, cell_id=cell.id)
    if stages:
        res["stages_s"] = stages
    if status == "ok":
        res["measurements"] = [R.measurement(name="m", pass_="training", times_s=[0.1, 0.1],
                                             items_per_iteration=1)]
    R.finish(res, status, None if status == "ok" else "boom")
    R.write(res, systems.result_path(system, cell.study, cell.id, results, repeat))


def run_list(tmp_path, capsys, *args):
    rc = command.main(["list", *args, "--configfile", str(tmp_path / "config.yaml"),
                       "--results", str(tmp_path / "results"), "--format", "csv"])
    out, err = capsys.readouterr()
    return rc, list(csv.DictReader(io.StringIO(out))), err


def test_studies_count_done_failed_and_missing_runs_per_system(tmp_path, capsys):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    cells = study.expand_config(CONFIG)
    sweep = [c for c in cells if c.study == "sweep"]
    results = tmp_path / "results"
    write_status(results, "box", sweep[0], "ok", stages={"startup": 1.5, "measure": 2.25})
    write_status(results, "box", sweep[0], "ok", repeat=1, stages={"startup": 1.0,
                                                                   "other": 0.5})
    write_status(results, "box", sweep[1], "oom")
    write_status(results, "other", sweep[0], "ok")  # a tree copied in from another machine
    rc, rows, _ = run_list(tmp_path, capsys, "studies")
    assert rc == 0
    by_study = {r["study"]: r for r in rows}
    assert by_study["sweep"]["cells"] == "2" and by_study["sweep"]["repeats"] == "2"
    assert (by_study["sweep"]["box done"], by_study["sweep"]["box failed"],
            by_study["sweep"]["box missing"]) == ("2", "1", "1")
    assert (by_study["sweep"]["other done"], by_study["sweep"]["other missing"]) == ("1", "3")
    assert by_study["single"]["box missing"] == "1"
    # The seconds its recorded runs took there: each process's stages, start-up included.
    assert (by_study["sweep"]["box s"], by_study["single"]["box s"]) == ("5", "0")

    rc, rows, _ = run_list(tmp_path, capsys, "cells")
    assert len(rows) == 2 * 2 + 1
    first = next(r for r in rows if r["cell_id"] == sweep[0].id and r["repeat"] == "1")
    assert (first["box"], first["other"]) == ("ok", "-")
    assert (first["box s"], first["other s"]) == ("1.5", "")



def test_skipped_runs_are_counted_apart_from_failed_ones_in_every_format(tmp_path, capsys):
    # skipped: the framework is not installed on that system, which is no failure of the cell
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    cells = study.expand_config(CONFIG)
    sweep = [c for c in cells if c.study == "sweep"]
    single = next(c for c in cells if c.study == "single")
    results = tmp_path / "results"
    write_status(results, "box", sweep[0], "skipped")
    write_status(results, "box", sweep[0], "skipped", repeat=1)
    write_status(results, "box", sweep[1], "oom")
    write_status(results, "box", single, "failed")
    rc, rows, _ = run_list(tmp_path, capsys, "studies")
    assert rc == 0
    by_study = {r["study"]: r for r in rows}
    counts = [(r["box done"], r["box failed"], r["box skipped"], r["box missing"])
              for r in (by_study["sweep"], by_study["single"])]
    assert counts == [("0", "1", "2", "1"), ("0", "1", "0", "0")]
    args = ["list", "studies", "--configfile", str(tmp_path / "config.yaml"),
            "--results", str(results)]
    assert command.main([*args, "--format", "json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [list(r) for r in records] == [list(r) for r in rows]
    sweep_record = next(r for r in records if r["study"] == "sweep")
    assert (sweep_record["box failed"], sweep_record["box skipped"]) == (1, 2)
    assert command.main([*args, "--format", "text"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert "box failed  box skipped  box missing" in header

def test_models_lists_the_registry_with_its_frameworks(tmp_path, capsys):
    assert listing.main(["models", "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    resnet = next(r for r in rows if r["model"] == "resnet50")
    assert resnet["frameworks"] == "pytorch, mxnet" and resnet["input"] == "image 3x224x224"


def test_a_bad_config_is_one_line_naming_the_study_and_field(tmp_path, capsys):
    bad = {"studies": {"s": {"repeats": 0, "grid": {"model": "resnet18"}}}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(bad))
    rc, _, err = run_list(tmp_path, capsys, "studies")
    assert rc == 2 and err.count("\n") == 1 and "study 's': repeats: " in err
    rc = listing.main(["studies", "--configfile", str(tmp_path / "missing.yaml")])
    assert rc == 2 and "missing.yaml" in capsys.readouterr().err


def test_a_yaml_syntax_error_names_its_line_and_column_in_one_line(tmp_path, capsys):
    """PyYAML's first line is its context only ("while parsing a flow sequence"): the line
    and column where it went wrong come from its mark."""
    (tmp_path / "config.yaml").write_text("studies:\n  a:\n    grid: {model: [resnet18\n"
                                          "  b: 1\n")
    rc, _, err = run_list(tmp_path, capsys, "studies")
    assert rc == 2 and err.count("\n") == 1
    assert "config.yaml: not YAML (line 4, column 4: expected ',' or ']', but got ':', " \
           "while parsing a flow sequence)" in err


def test_a_study_given_twice_is_a_warning_as_in_the_workflow(tmp_path, capsys):
    """YAML keeps the last of two keys silently: the listing says so, as the workflow does,
    and lists what the workflow would run (the last)."""
    (tmp_path / "config.yaml").write_text(
        "studies:\n"
        "  s:\n    grid: {model: resnet18, device: cpu}\n"
        "  s:\n    grid: {model: alexnet, device: cpu}\n")
    (tmp_path / "results").mkdir()  # nothing run yet, in a results folder that exists
    rc, rows, err = run_list(tmp_path, capsys, "cells")
    assert rc == 0 and [r["cell_id"].split("_")[1] for r in rows] == ["alexnet"]
    assert err == (f"dlbench config warning: {tmp_path / 'config.yaml'}: line 4: key 's' is "
                   "given twice (the last one wins)\n")


def test_several_configfiles_merge_as_snakemake_merges_them(tmp_path, capsys):
    """A second file's study joins the first's studies (Snakemake merges mappings at every
    depth); both of Snakemake's forms of the option are taken."""
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    extra = tmp_path / "extra.yaml"
    extra.write_text(yaml.safe_dump({"studies": {
        "added": {"grid": {"model": "deep_mnist", "device": "cpu"}},
        "single": {"repeats": 3}}}))
    for form in (["--configfile", str(tmp_path / "config.yaml"), str(extra)],
                 ["--configfile", str(tmp_path / "config.yaml"), "--configfile", str(extra)]):
        rc = listing.main(["studies", *form, "--results", str(tmp_path / "results"),
                           "--format", "csv"])
        rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
        assert rc == 0
        assert {r["study"]: r["repeats"] for r in rows} == {"sweep": "2", "single": "3",
                                                            "added": "1"}


def test_merge_config_is_snakemakes_update_config():
    from snakemake.utils import update_config

    cases = [({"a": {"b": 1, "c": {"d": 2}}, "e": [1]}, {"a": {"c": {"x": 3}}, "e": [2]}),
             ({"a": 1}, {"a": {"b": 2}}), ({"a": {"b": 2}}, {"a": 1}),
             ({"a": 1}, {"a": {}}), ({"a": [1]}, {"a": {"b": {"c": None}}})]
    for base, over in cases:
        ours, theirs = yaml.safe_load(yaml.safe_dump(base)), yaml.safe_load(yaml.safe_dump(base))
        listing.merge_config(ours, over)
        update_config(theirs, over)
        assert ours == theirs, (base, over)


def test_a_system_label_of_digits_is_its_text(tmp_path, capsys):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({**CONFIG, "system": 2024}))
    rc, rows, err = run_list(tmp_path, capsys, "studies")
    assert rc == 0 and "2024 missing" in rows[0], err


def test_a_results_folder_that_does_not_exist_is_said_in_one_line(tmp_path, capsys):
    """A mistyped --results read as "nothing has run": every cell missing, exit 0, without
    a word. Now a warning names the folder (before the first run there is none, so the
    cells are still listed); a file given as the folder is an error."""
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    rc, rows, err = run_list(tmp_path, capsys, "studies")
    assert rc == 0 and {r["study"]: r["box missing"] for r in rows} == {"sweep": "4",
                                                                        "single": "1"}
    assert err == (f"dlbench list warning: --results {tmp_path / 'results'}: no such folder; "
                   "every cell is listed as missing\n")
    (tmp_path / "results").write_text("")
    rc, rows, err = run_list(tmp_path, capsys, "studies")
    assert (rc, rows) == (2, [])
    assert err == f"dlbench list: --results {tmp_path / 'results'}: not a folder\n"


def test_list_refuses_what_the_workflow_refuses_and_reads_snakemakes_argument_order(
        tmp_path, capsys):
    """retry_failed and monitor were read by the workflow only: list printed its table and
    exited 0 on a config the workflow stops at. "--configfile FILE studies" (Snakemake's
    order) took the word as a second file; a config not in UTF-8 was a traceback."""
    config = tmp_path / "config.yaml"
    for extra, problem in (({"retry_failed": "maybe"}, "config: retry_failed: unknown status"),
                           ({"monitor": {"interval_ms": float("nan")}},
                            "monitor.interval_ms: must be a finite number")):
        config.write_text(yaml.safe_dump({**CONFIG, **extra}))
        rc, _, err = run_list(tmp_path, capsys, "studies")
        assert rc == 2 and err.startswith(f"dlbench list: {problem}"), err
        assert len(err.splitlines()) == 1
    config.write_text(yaml.safe_dump(CONFIG))
    assert command.main(["list", "--configfile", str(config), "studies", "--format", "csv",
                         "--results", str(tmp_path / "results")]) == 0
    assert sorted(r["study"] for r in csv.DictReader(io.StringIO(capsys.readouterr().out))
                  ) == ["single", "sweep"]
    config.write_bytes("studies:\n  s: {description: café}\n".encode("latin-1"))
    rc, _, err = run_list(tmp_path, capsys, "studies")
    assert (rc, err) == (2, f"dlbench list: {config}: not UTF-8 text (byte 31); a config is "
                            "YAML in UTF-8\n")


def test_a_result_the_aggregate_would_set_aside_is_unreadable_not_done(tmp_path, capsys):
    """A file with a status the schema has not was counted in no column (the counts did
    not add up to the runs); one of another schema version or another cell's id was
    "done", though the aggregate sets it aside and the next run measures the cell again."""
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    single = next(c for c in study.expand_config(CONFIG) if c.study == "single")
    path = systems.result_path("box", single.study, single.id, tmp_path / "results", 0)
    write_status(tmp_path / "results", "box", single, "ok")
    good = json.loads(path.read_text())
    for change in ({"status": "weird"}, {"schema_version": 2}, {"cell_id": "other_cell"}):
        path.write_text(json.dumps({**good, **change}))
        rc, rows, _ = run_list(tmp_path, capsys, "cells")
        assert next(r for r in rows if r["study"] == "single")["box"] == "unreadable", change
        rc, rows, _ = run_list(tmp_path, capsys, "studies")
        row = next(r for r in rows if r["study"] == "single")
        assert (row["box done"], row["box failed"], row["box missing"]) == ("0", "1", "0")
    path.write_text(json.dumps(good))
    rc, rows, _ = run_list(tmp_path, capsys, "cells")
    assert next(r for r in rows if r["study"] == "single")["box"] == "ok"
    command.main(["list", "cells", "--configfile", str(tmp_path / "config.yaml"),
                  "--results", str(tmp_path / "results"), "--format", "json"])
    listed = json.loads(capsys.readouterr().out)
    assert {r["box s"] for r in listed if r["study"] == "sweep"} == {None}
