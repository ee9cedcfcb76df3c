"""dlbench compare: matching, confidence intervals, verdicts, outputs and one-line errors,
on real result files aggregated by dlbench.aggregate."""

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from headless_chromium import drawn_charts, needs_chromium

from dlbench import aggregate, bootstrap, command
from dlbench import result as R
from dlbench.compare import Settings, compare
from dlbench.compare.__main__ import EXIT_BAD_INPUT, EXIT_SLOWER, main
from dlbench.compare.output import FILES

ENV = {"hostname": "h", "cpu_model": "Test CPU", "gpu_models": [], "framework": "pytorch",
       "framework_version": "2.9.0", "cuda_version": None}


def model_cell(model="resnet18", batch_size=8, phase="training", framework="pytorch"):
    return {"framework": framework, "model": model, "batch_size": batch_size,
            "precision": "float32", "phase": phase, "device": "cpu", "num_gpus": 1,
            "model_opts": {}}


def write_result(root, system, cell, times, *, study="s", status="ok", error=None, env=None,
                 tag=""):
    """A result file where the workflow puts one: results/<system>/<study>/cells/<id>.json,
    its id ending in a hash of the cell (and ``tag``, which changes the id only)."""
    digest = hashlib.sha256(json.dumps([cell, tag], sort_keys=True).encode()).hexdigest()[:8]
    cell_id = f"{cell['model']}_{cell['phase']}_bs{cell['batch_size']}_{digest}"
    res = R.new_result(kind="model", study=study, cell_id=cell_id, cell=cell)
    res["environment"] = dict(env or ENV)
    res["system"] = system  # as the launcher stamps it
    if status == "ok":
        res["measurements"].append(R.measurement(
            name=cell["model"], pass_=cell["phase"], times_s=list(times),
            items_per_iteration=cell["batch_size"]))
    R.finish(res, status, error)
    path = root / system / study / "cells" / f"{cell_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    R.write(res, path)
    return path


def noisy(median, n=40, spread=0.02, seed=0):
    rng = np.random.default_rng(seed)
    return median * (1 + spread * rng.standard_normal(n))


def verdict_of(comparison, model="resnet18"):
    cells = comparison.cells
    (row,) = cells[(cells["model"] == model) & (cells["side"] == "both")].itertuples()
    return row


def test_a_40_percent_slower_run_is_slower_with_an_interval_below_one_and_exits_1(tmp_path):
    write_result(tmp_path / "a", "sysA", model_cell(), noisy(0.100, seed=1))
    write_result(tmp_path / "b", "sysB", model_cell(), noisy(0.140, seed=2), tag="other id")
    out = tmp_path / "out"
    rc = main([str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)])
    assert rc == EXIT_SLOWER
    comparison = compare(str(tmp_path / "a"), str(tmp_path / "b"))
    row = verdict_of(comparison)
    assert row.verdict == "slower" and row.ci_method == "iterations"
    assert row.throughput_ratio == pytest.approx(0.1 / 0.14, rel=0.03)
    assert row.throughput_ci_low < row.throughput_ratio < row.throughput_ci_high < 1
    assert row.base_system == "sysA" and row.new_system == "sysB"
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    md = (out / "compare.md").read_text()
    assert "| slower | resnet18 training float32 bs8 |" in md
    table = pq.read_table(out / "compare.parquet")
    assert table.column("verdict").to_pylist() == ["slower"]
    assert json.loads(table.schema.metadata[b"dlbench.compare"])["threshold"] == 0.05
    html = (out / "compare.html").read_text()
    assert "src=\"http" not in html and "vega-chart" in html  # one offline file
    assert main([str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out),
                 "--fail-on", "none"]) == 0


def test_a_side_whose_host_took_cpu_time_from_its_runs_says_so_beside_its_verdict(tmp_path):
    """NEW slower on a busy virtual machine (a quarter of its CPU time stolen, its cgroup
    throttled): the verdict stands and its note says what may explain it; a quiet host
    says nothing."""
    write_result(tmp_path / "a", "sysA", model_cell(), noisy(0.100, seed=1))
    path = write_result(tmp_path / "b", "sysB", model_cell(), noisy(0.140, seed=2))
    res = R.read(path)
    res["extra"]["monitor"] = {"cpu_steal_fraction": 0.25, "cpu_throttled_s": 1.5}
    R.write(res, path)
    path = write_result(tmp_path / "a", "sysA", model_cell("alexnet"), noisy(0.05, seed=3))
    res = R.read(path)
    res["extra"]["monitor"] = {"cpu_steal_fraction": 0.001, "cpu_throttled_s": 0.0}
    R.write(res, path)
    write_result(tmp_path / "b", "sysB", model_cell("alexnet"), noisy(0.05, seed=4))
    comparison = compare(str(tmp_path / "a"), str(tmp_path / "b"))
    row = verdict_of(comparison)
    assert row.verdict == "slower"
    assert row.note == "NEW's host took CPU time from its runs (steal up to 25%, throttled up " \
                       "to 1.50 s)"
    assert not isinstance(verdict_of(comparison, "alexnet").note, str)


def test_a_side_whose_gpu_clocks_were_held_back_says_so_beside_its_verdict(tmp_path):
    """NEW slower, its GPU at its power cap in most samples: the verdict stands, and its
    note says what may explain it; a side held back in one sample of a hundred says
    nothing."""
    write_result(tmp_path / "a", "sysA", model_cell(), noisy(0.100, seed=1))
    path = write_result(tmp_path / "b", "sysB", model_cell(), noisy(0.140, seed=2))
    res = R.read(path)
    res["extra"]["monitor"] = {"gpu_power_limit_w": 500.0, "gpu_clocks_held_back": 0.62,
                               "gpu_clock_reasons": "power cap 62%"}
    R.write(res, path)
    write_result(tmp_path / "a", "sysA", model_cell("alexnet"), noisy(0.05, seed=3))
    path = write_result(tmp_path / "b", "sysB", model_cell("alexnet"), noisy(0.05, seed=4))
    res = R.read(path)
    res["extra"]["monitor"] = {"gpu_clocks_held_back": 0.01, "gpu_clock_reasons": "thermal 1%"}
    R.write(res, path)
    out = tmp_path / "out"
    main([str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out), "--fail-on", "none"])
    comparison = compare(str(tmp_path / "a"), str(tmp_path / "b"))
    row = verdict_of(comparison)
    assert row.verdict == "slower" and row.new_gpu_clocks_held_back == 0.62
    assert row.note == "NEW's GPU clocks held back in 62% of samples (power cap 62%)"
    assert not isinstance(verdict_of(comparison, "alexnet").note, str)  # no note: null
    md = (out / "compare.md").read_text()
    assert ("- resnet18 training float32 bs8: NEW's GPU clocks held back in 62% of samples "
            "(power cap 62%)") in md
    assert "held back" in (out / "compare.html").read_text()


def test_a_side_whose_iteration_times_drifted_says_so_beside_its_verdict(tmp_path):
    """NEW's times rose through its run (a GPU heating up, say): the verdict stands and the
    note says which side drifted and by how much; BASE's steady run says nothing."""
    write_result(tmp_path / "a", "sysA", model_cell(), noisy(0.100, seed=1))
    rising = noisy(0.140, seed=2, spread=0.005) * np.linspace(1.0, 1.2, 40)
    write_result(tmp_path / "b", "sysB", model_cell(), rising)
    out = tmp_path / "out"
    main([str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out), "--fail-on", "none"])
    row = verdict_of(compare(str(tmp_path / "a"), str(tmp_path / "b")))
    assert row.verdict == "slower" and np.isnan(row.base_time_drift)
    assert row.new_time_drift == pytest.approx(0.2 / 1.1, abs=0.02)
    slowed = ("NEW's iteration times rose 18% over the measured run, most likely the "
              "system slowed during the run (heat, memory, other load)")
    assert row.note == slowed
    assert f"- resnet18 training float32 bs8: {slowed}" in (out / "compare.md").read_text()


def test_what_the_sides_recorded_differently_is_listed_with_the_verdicts(tmp_path, capsys):
    """NEW ran another torch and a driver BASE did not record: both are listed (in the
    Markdown, the page, the console and the Parquet's metadata); what both recorded alike
    is not; NEW's second host is told beside its first. An A/A comparison says that
    nothing differs, naming what is alike."""
    new_env = {**ENV, "framework_version": "2.10.0", "gpu_driver": "560.28"}
    for root, system, env, seed, gen in ((tmp_path / "a", "sysA", ENV, 1, 5),
                                        (tmp_path / "b", "sysB", new_env, 2, 4)):
        path = write_result(root, system, model_cell(), noisy(0.1 + 0.04 * (seed - 1), seed=seed),
                            env=env)
        res = R.read(path)  # the GPU settings the resource monitor read
        res["extra"]["monitor"] = {"gpus": [{"settings": {
            "pcie_generation": gen, "pcie_width": 16, "ecc": True, "sm_clock_max_mhz": 1980}}]}
        R.write(res, path)
    write_result(tmp_path / "a", "sysA", model_cell("alexnet"), noisy(0.05, seed=3))
    write_result(tmp_path / "b", "sysB", model_cell("alexnet"), noisy(0.05, seed=4),
                 env={**new_env, "hostname": "h2"})
    comparison = compare(str(tmp_path / "a"), str(tmp_path / "b"))
    assert [(d.field, d.base, d.new) for d in comparison.differences] == [
        ("GPU driver", "not recorded", "560.28"), ("host", "h", "h, h2"),
        ("GPU PCIe link", "Gen5 x16", "Gen4 x16"), ("pytorch version", "2.9.0", "2.10.0")]
    assert {"CPU Test CPU", "GPU ECC on", "GPU max SM clock (MHz) 1980"} <= set(comparison.alike)
    out = tmp_path / "out"
    main([str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out), "--fail-on", "none"])
    md = (out / "compare.md").read_text()
    assert "### What differs" in md and "| pytorch version | 2.9.0 | 2.10.0 |" in md
    assert "| CPU |" not in md  # alike on both sides
    assert ("differs: GPU driver not recorded -> 560.28; host h -> h, h2; GPU PCIe link "
            "Gen5 x16 -> Gen4 x16; pytorch version 2.9.0 -> 2.10.0") in capsys.readouterr().out
    assert "What differs" in (out / "compare.html").read_text()
    meta = json.loads(pq.read_table(out / "compare.parquet").schema.metadata[b"dlbench.compare"])
    assert meta["differences"][3] == {"field": "pytorch version", "base": "2.9.0",
                                      "new": "2.10.0"}
    same = compare(str(tmp_path / "a"), str(tmp_path / "a"))
    assert same.differences == []
    main([str(tmp_path / "a"), str(tmp_path / "a"), "--out", str(out), "--fail-on", "none"])
    assert ("Nothing the results recorded differs between the sides (CPU Test CPU; host h; "
            "GPU max SM clock (MHz) 1980; GPU ECC on; GPU PCIe link Gen5 x16; pytorch version "
            "2.9.0).") in (out / "compare.md").read_text()


def test_sides_run_in_other_cpusets_and_partitions_list_it_among_what_differs(tmp_path):
    """The same node type through two Slurm partitions, NEW's jobs given 8 of its 64 CPUs:
    both are listed; the Slurm job id, which differs on every run, is not."""
    base = {**ENV, "cpu_count": 64, "cpus_usable": 64, "slurm_partition": "full",
            "slurm_job_id": "11"}
    new = {**base, "cpus_usable": 8, "slurm_partition": "shared", "slurm_job_id": "12"}
    write_result(tmp_path / "a", "sysA", model_cell(), noisy(0.1, seed=1), env=base)
    write_result(tmp_path / "b", "sysB", model_cell(), noisy(0.14, seed=2), env=new)
    comparison = compare(str(tmp_path / "a"), str(tmp_path / "b"))
    assert [(d.field, d.base, d.new) for d in comparison.differences] == [
        ("CPUs usable", "64", "8"), ("Slurm partition", "full", "shared")]
    assert "CPUs 64" in comparison.alike


def test_a_change_at_one_scale_only_has_a_summary_of_its_own(tmp_path):
    """Slower with 2 processes only: the model's geometric mean halves it among the 1- and
    2-process cells, the scale's summary shows it whole."""
    for gpus, nodes, slow in ((1, 1, 1.0), (2, 1, 1.5), (2, 2, 1.0), (16, 1, 1.0)):
        cell = {**model_cell(), "num_gpus": gpus, "num_nodes": nodes}
        write_result(tmp_path / "a", "x", cell, noisy(0.1, seed=gpus + nodes))
        write_result(tmp_path / "b", "x", cell, noisy(0.1 * slow, seed=10 + gpus + nodes))
    summary = compare(str(tmp_path / "a"), str(tmp_path / "b")).summary.set_index(
        ["group", "value"])
    assert summary.loc[("scale", "num_gpus=2"), "slower"] == 1
    assert summary.loc[("scale", "num_gpus=2"), "geomean_ratio"] == pytest.approx(1 / 1.5,
                                                                                  rel=0.03)
    assert summary.loc[("scale", "num_gpus=1"), "same"] == 1
    assert summary.loc[("scale", "num_gpus=2 num_nodes=2"), "same"] == 1
    assert summary.loc[("model", "resnet18"), "cells"] == 4
    # in numbers' order: 2 before 16
    assert list(summary.loc["scale"].index) == ["num_gpus=1", "num_gpus=2",
                                               "num_gpus=2 num_nodes=2", "num_gpus=16"]


def test_two_runs_of_the_same_distribution_are_judged_the_same(tmp_path):
    for i, model in enumerate(["resnet18", "alexnet", "vgg11", "resnet50", "googlenet"]):
        write_result(tmp_path / "a", "x", model_cell(model), noisy(0.05 * (i + 1), seed=10 + i))
        write_result(tmp_path / "b", "x", model_cell(model), noisy(0.05 * (i + 1), seed=20 + i))
    comparison = compare(str(tmp_path / "a"), str(tmp_path / "b"))
    assert comparison.counts["same"] == 5 and not comparison.any_slower
    overall = comparison.summary[comparison.summary["group"] == "all"].iloc[0]
    assert overall["geomean_ratio"] == pytest.approx(1, abs=0.03)
    # Nothing differs (an A/A comparison): the console says so too.
    from dlbench.compare.output import console_summary

    assert not comparison.differences and comparison.alike
    assert console_summary(comparison)[3] == (
        f"  differs: nothing the results recorded ({len(comparison.alike)} facts alike; "
        "listed in compare.md)")


def test_a_real_change_below_the_threshold_is_same_and_counts_once_the_threshold_is_lower(
        tmp_path):
    write_result(tmp_path / "a", "x", model_cell(), noisy(0.100, n=200, spread=0.002, seed=3))
    write_result(tmp_path / "b", "x", model_cell(), noisy(0.103, n=200, spread=0.002, seed=4))
    default = verdict_of(compare(str(tmp_path / "a"), str(tmp_path / "b")))
    assert default.throughput_ci_high < 1  # the change is real...
    assert default.verdict == "same"  # ...but smaller than 5 %
    strict = verdict_of(compare(str(tmp_path / "a"), str(tmp_path / "b"),
                                settings=Settings(threshold=0.01, single_run_threshold=0.01)))
    assert strict.verdict == "slower"


def test_single_runs_judge_only_changes_beyond_run_to_run_variation_and_repeats_judge_less(
        tmp_path):
    """12 % slower: one run a side cannot tell that from run-to-run variation (same, with
    a note saying why); three runs a side that agree can (slower)."""
    a, b = tmp_path / "a", tmp_path / "b"
    write_result(a, "x", model_cell(), noisy(0.100, seed=1))
    write_result(b, "x", model_cell(), noisy(0.112, seed=2))
    single = verdict_of(compare(str(a), str(b)))
    assert single.throughput_ci_high < 1 and single.verdict == "same"
    assert "run-to-run variation" in single.note and "repeats" in single.note
    import pandas as pd

    from dlbench.compare import Side, compare_sides
    from dlbench.compare.inputs import read_folder

    def runs(median, seeds):
        frames = []
        for k, seed in enumerate(seeds):
            folder = tmp_path / f"{median}-{k}"
            write_result(folder, "x", model_cell(), noisy(median * (1 + 0.01 * k), seed=seed))
            frames.append(read_folder(folder).assign(repeat=k))
        return pd.concat(frames, ignore_index=True)

    repeats = verdict_of(compare_sides(Side("BASE", "a", runs(0.100, [1, 2, 3])),
                                       Side("NEW", "b", runs(0.112, [4, 5, 6]))))
    assert repeats.ci_method == "repeats" and repeats.verdict == "slower"


def test_cells_with_a_note_beside_cells_without_one_are_compared_and_written(tmp_path):
    """One cell 12 % slower (single runs: same, with a note), one 40 % slower (no note):
    the notes column mixes text and none, which pandas 3 reads back as NaN for none (once
    a crash joining NaN into a note). Both cells judged, the files written, exit 1."""
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, slow, fast in ((a, 0.100, 0.100), (b, 0.112, 0.140)):
        write_result(folder, "x", model_cell(batch_size=8), noisy(slow, seed=1))
        write_result(folder, "x", model_cell(batch_size=16), noisy(fast, seed=2))
    cells = compare(str(a), str(b)).cells.set_index("batch_size")
    assert cells.loc[8, "verdict"] == "same" and "run-to-run" in cells.loc[8, "note"]
    assert cells.loc[16, "verdict"] == "slower" and pd.isna(cells.loc[16, "note"])
    assert main([str(a), str(b), "--out", str(tmp_path / "out")]) == EXIT_SLOWER
    assert all((tmp_path / "out" / name).is_file() for name in FILES)


def test_cells_match_on_what_was_measured_and_the_unmatched_say_why(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_result(a, "x", model_cell(), noisy(0.1, seed=1))
    write_result(b, "x", model_cell(), noisy(0.1, seed=2), tag="another cell id")
    write_result(a, "x", model_cell(batch_size=16), noisy(0.2, seed=3))
    write_result(b, "x", model_cell(batch_size=32), noisy(0.4, seed=4))
    write_result(a, "x", model_cell("alexnet"), noisy(0.1, seed=5))
    write_result(b, "x", model_cell("alexnet"), [], status="failed", error="RuntimeError: boom")
    cells = compare(str(a), str(b)).cells
    by_verdict = {v: rows for v, rows in cells.groupby("verdict")}
    assert set(by_verdict["same"]["batch_size"]) == {8}
    notes = dict(zip(by_verdict["base only"]["label"], by_verdict["base only"]["note"],
                     strict=True))
    assert notes == {"alexnet training float32 bs8": "NEW: failed: RuntimeError: boom",
                     "resnet18 training float32 bs16": "no such cell in NEW"}
    assert list(by_verdict["new only"]["batch_size"]) == [32]
    (failed,) = by_verdict["not compared"].itertuples()
    assert (failed.side, failed.status) == ("new", "failed")


def test_system_labels_of_one_table_are_compared_and_a_mixed_side_is_refused(tmp_path, capsys):
    results = tmp_path / "results"
    write_result(results, "old", model_cell(), noisy(0.10, seed=1))
    write_result(results, "new", model_cell(), noisy(0.07, seed=2),
                 env={**ENV, "framework_version": "2.10.0"})
    table = tmp_path / "benchmarks.parquet"
    aggregate.write(sorted(results.glob("*/*/cells/*.json")), table)
    comparison = compare("old", "new", table=table)
    assert verdict_of(comparison).verdict == "faster"
    assert comparison.base.label == f"old in {table}"

    assert main([str(table), str(table), "--out", str(tmp_path / "o")]) == EXIT_BAD_INPUT
    assert f"dlbench compare --table {table} new old" in capsys.readouterr().err
    assert main(["old", "typo", "--table", str(table), "--out", str(tmp_path / "o")]) \
        == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown system label 'typo'" in err and "new, old" in err


def test_two_labels_with_folders_are_every_result_file_of_each_system(tmp_path, monkeypatch):
    """The table holds only the cells of the config last run for the system that ran it:
    compared through it, the same files gave another verdict after another config's run
    (a cell 'no such cell in NEW'). Two labels with folders read the folders."""
    monkeypatch.chdir(tmp_path)
    results = Path("results")
    for system, median in (("boxA", 0.10), ("boxB", 0.07)):
        write_result(results, system, model_cell(), noisy(median, seed=1))
        write_result(results, system, model_cell(batch_size=16), noisy(2 * median, seed=2))
    # the table of a run of boxB's config holding only its batch-8 cell
    aggregate.write([*results.glob("boxA/*/cells/*.json"),
                     *results.glob("boxB/*/cells/*bs8_*.json")], results / "benchmarks.parquet")
    comparison = compare("boxA", "boxB")
    both = comparison.cells[comparison.cells["side"] == "both"]
    assert len(both) == 2 and set(both["verdict"]) == {"faster"}
    assert comparison.new.label == f"boxB ({Path('results/boxB')})"


def test_a_labels_folder_is_read_as_its_studies_plans_say(tmp_path, monkeypatch):
    """A cell the system's last run of its study no longer planned (plan.json) is left out
    of the table, and of a comparison of its folder too: an old result of another torch
    version there stopped the comparison (two software stacks under one label)."""
    from dlbench import systems

    monkeypatch.chdir(tmp_path)
    results = Path("results")
    for system, median in (("boxA", 0.10), ("boxB", 0.07)):
        write_result(results, system, model_cell(), noisy(median, seed=1))
    dropped = write_result(results, "boxA", model_cell(batch_size=16), noisy(0.2, seed=2),
                           env={**ENV, "framework_version": "2.1.0"})
    kept = sorted(p.name for p in dropped.parent.glob("*.json") if p != dropped)
    systems.write_plan(dropped.parent.parent / systems.PLAN_FILE,
                       systems.Plan(frozenset(kept), frozenset()))
    comparison = compare("boxA", "boxB")
    assert len(comparison.cells) == 1 and set(comparison.cells["verdict"]) == {"faster"}
    # a plan naming none of the folder's results: said so, not "no result files"
    systems.write_plan(dropped.parent.parent / systems.PLAN_FILE,
                       systems.Plan(frozenset({"new_cell_0000000a.json"}), frozenset()))
    from dlbench.compare.inputs import InputError, read_folder

    with pytest.raises(InputError, match=r"^results/boxA: none of its 2 result file\(s\) is "
                                         r"one its study's last run planned"):
        read_folder(results / "boxA")


def _bad_table(path, version):
    good = pa.table({name: pa.array([], type=pa.string()) for name in
                     ("study", "kind", "status", "name", "pass")}
                    | {"time_median_s": pa.array([], type=pa.float64())})
    pq.write_table(good.replace_schema_metadata({aggregate.TABLE_VERSION_KEY: version}), path)
    return path


@pytest.mark.parametrize("case, expected", [
    ("missing", "no such file or folder"),
    ("not parquet", "not a readable Parquet file"),
    ("version", "layout version 99"),
    ("empty folder", "neither benchmarks.parquet nor result files (**/cells/*.json)\n"),
    ("misnamed", "cells/a.json not named as a result (<cell id>_<8 hex digits>.json)"),
    ("nothing common", "no common cells"),
])
def test_inputs_that_cannot_be_compared_exit_2_with_one_line_naming_the_file(
        tmp_path, capsys, case, expected):
    good = tmp_path / "good"
    write_result(good, "x", model_cell(), noisy(0.1))
    other = tmp_path / "other"
    write_result(other, "x", model_cell("alexnet"), noisy(0.1))
    bad = {"missing": tmp_path / "nope.parquet",
           "not parquet": tmp_path / "x.parquet",
           "version": _bad_table(tmp_path / "v.parquet", b"99"),
           "empty folder": tmp_path / "empty",
           "misnamed": tmp_path / "misnamed",
           "nothing common": other}[case]
    (tmp_path / "x.parquet").write_text("not parquet")
    (tmp_path / "empty").mkdir()
    (tmp_path / "misnamed" / "s" / "cells").mkdir(parents=True)
    (tmp_path / "misnamed" / "s" / "cells" / "a.json").write_text("{}")
    rc = command.main(["compare", str(good), str(bad), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == EXIT_BAD_INPUT
    assert err.count("\n") == 1 and expected in err and err.startswith("dlbench compare: ")
    if case != "nothing common":
        assert str(bad) in err
    assert not (tmp_path / "o").exists()  # nothing written


def test_an_out_that_is_a_file_is_refused_before_comparing(tmp_path, capsys):
    """Once "File exists; the previous comparison is left as it was", after the work."""
    (tmp_path / "file").write_text("")
    for out in (tmp_path / "file", tmp_path / "file" / "deeper"):
        with pytest.raises(SystemExit) as exit_:
            command.main(["compare", "a", "b", "--out", str(out)])
        assert exit_.value.code == EXIT_BAD_INPUT
        assert capsys.readouterr().err.splitlines()[-1] == (
            f"dlbench compare: error: argument --out: {tmp_path}/file is not a folder")


def test_files_runners_write_beside_results_are_not_read_as_results(tmp_path):
    path = write_result(tmp_path / "a", "x", model_cell(), noisy(0.1))
    write_result(tmp_path / "b", "x", model_cell(), noisy(0.1, seed=9))
    # An operator cell's PARAM log: JSON lines, not a result.
    path.with_suffix(".param.json").write_text('{"a": 1}\n{"b": 2}\n')
    comparison = compare(str(tmp_path / "a"), str(tmp_path / "b"))
    assert comparison.counts["not compared"] == 0 and comparison.counts["same"] == 1


def test_repeats_are_resampled_as_repeats_with_a_wider_interval_than_their_iterations():
    """Two processes per side whose medians differ by 8 %: one process's iterations say
    nothing of that spread, so the interval over repeats must be the wider one."""
    import pandas as pd

    def side(medians, system):
        rows = []
        for repeat, median in enumerate(medians):
            times = noisy(median, n=50, spread=0.005, seed=repeat)
            rows.append({"study": "s", "kind": "model", "model": "resnet18", "phase": "training",
                         "batch_size": 8, "name": "resnet18", "pass": "training",
                         "status": "ok", "repeat": repeat, "system": system,
                         "time_median_s": float(np.median(times)), "times_s": list(times),
                         "time_p95_s": float(np.quantile(times, .95)),
                         "time_p99_s": float(np.quantile(times, .99)),
                         "throughput": 8 / float(np.median(times)),
                         "throughput_unit": "samples/s", "items_per_iteration": 8,
                         "iterations": 50})
        frame = pd.DataFrame(rows)  # with every column of the table, as inputs reads it
        return frame.reindex(columns=list(dict.fromkeys([*aggregate.SCHEMA.names, "repeat"])))

    from dlbench.compare import Side, compare_sides

    base = side([0.100, 0.108], "a")
    new = side([0.104, 0.100], "b")
    repeats = verdict_of(compare_sides(Side("BASE", "a", base), Side("NEW", "b", new)))
    assert repeats.ci_method == "repeats" and repeats.base_repeats == 2
    single = verdict_of(compare_sides(Side("BASE", "a", base.iloc[:1].assign(repeat=None)),
                                      Side("NEW", "b", new.iloc[:1].assign(repeat=None))))
    assert single.ci_method == "iterations"
    assert (repeats.throughput_ci_high - repeats.throughput_ci_low
            > 3 * (single.throughput_ci_high - single.throughput_ci_low))
    assert repeats.verdict == "same"


def _side_of(medians, system, spread=0.001):
    import pandas as pd

    rows = []
    for repeat, median in enumerate(medians):
        times = noisy(median, n=50, spread=spread, seed=repeat)
        rows.append({"study": "s", "kind": "model", "model": "resnet18", "phase": "training",
                     "batch_size": 8, "name": "resnet18", "pass": "training",
                     "status": "ok", "repeat": repeat if len(medians) > 1 else None,
                     "system": system, "time_median_s": float(np.median(times)),
                     "times_s": list(times), "time_p95_s": float(np.quantile(times, .95)),
                     "time_p99_s": float(np.quantile(times, .99)),
                     "throughput": 100 / float(np.median(times)),
                     "throughput_unit": "samples/s", "items_per_iteration": 100,
                     "iterations": 50})
    return pd.DataFrame(rows).reindex(columns=list(dict.fromkeys([*aggregate.SCHEMA.names,
                                                                  "repeat"])))


def test_repeats_against_one_run_are_judged_as_one_run():
    """BASE ran 3 times, NEW once, 11 % faster on tight iterations: the one run cannot
    show its own run-to-run spread, so the 25 % single-run threshold applies (it was judged
    at 5 %, as repeats on both sides: an A/A false-positive rate near 14 %)."""
    from dlbench.compare import Side, compare_sides

    cell = verdict_of(compare_sides(Side("BASE", "a", _side_of([0.100, 0.101, 0.099], "a")),
                                    Side("NEW", "b", _side_of([0.090], "b"))))
    assert cell.ci_method == "repeats+iterations"
    assert cell.throughput_ci_low > 1 and cell.verdict == "same"
    assert "one run on a side" in cell.note


def test_a_sides_throughput_and_the_ratio_are_of_one_time_and_the_order_of_repeats_is_no_fact():
    """BASE's repeats at 0.10 and 0.20 s, NEW's at 0.15 and 0.15 s: the same mean time, so
    the same throughput (667/s a side; BASE read 750/s, the mean of its runs' throughputs,
    beside a ratio of 1). And repeats listed in another order give the same interval."""
    from dlbench.compare import Side, compare_sides

    cell = verdict_of(compare_sides(Side("BASE", "a", _side_of([0.10, 0.20], "a")),
                                    Side("NEW", "b", _side_of([0.15, 0.15], "b"))))
    assert cell.throughput_ratio == pytest.approx(1.0, rel=0.01)
    assert cell.base_throughput == pytest.approx(cell.new_throughput, rel=0.01)
    assert cell.base_throughput == pytest.approx(100 / 0.15, rel=0.01)
    medians = [0.092, 0.105, 0.098, 0.110, 0.101, 0.095, 0.108, 0.099]

    def interval(order):
        base = _side_of([medians[i] for i in order], "a", spread=0.0)
        new = _side_of([0.1] * 8, "b")
        got = verdict_of(compare_sides(Side("BASE", "a", base), Side("NEW", "b", new)))
        return got.throughput_ci_low, got.throughput_ci_high

    assert interval(range(8)) == interval([3, 7, 0, 5, 1, 6, 2, 4])


def test_t_quantiles_match_published_tables():
    # Student's t, two-sided 95 %: 12.706 (1 dof), 4.303 (2), 2.776 (4), 2.228 (10).
    for dof, value in ((1, 12.706), (2, 4.303), (4, 2.776), (10, 2.228)):
        assert bootstrap.t_quantile(0.975, dof) == pytest.approx(value, abs=1e-3)


def write_collective(root, system, nodes, sizes_and_times, pt2pt=None):
    """A collective cell's result: one measurement per message size (a point-to-point
    cell of pattern ``pt2pt``: its latency and bidirectional tests of each size)."""
    collective = "pt2pt" if pt2pt else "all_reduce"
    cell = {"framework": "pytorch", "collective": collective, "data_type": "bfloat16",
            "num_gpus": 8, "num_nodes": nodes, "device": "gpu", "pt2pt": pt2pt}
    digest = hashlib.sha256(json.dumps(cell, sort_keys=True).encode()).hexdigest()[:8]
    cell_id = f"pytorch_{collective}_bfloat16_8x_gpu_{digest}"
    res = R.new_result(kind="comms", study="net", cell_id=cell_id, cell=cell)
    res["environment"] = dict(ENV)
    res["system"] = system
    passes = ("latency", "bidirectional") if pt2pt else ("collective",)
    for size, times in sizes_and_times:
        res["measurements"] += [R.measurement(
            name=f"{collective}|{size}", op_name=collective, pass_=test,
            times_s=list(times), items_per_iteration=1.0, throughput_unit="iterations/s",
            bytes_per_iteration=float(size)) for test in passes]
    R.finish(res, "ok")
    path = root / system / "net" / "cells" / f"{cell_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    R.write(res, path)


def test_collective_sizes_are_compared_one_by_one_under_labels_naming_them(tmp_path):
    """Each message size of a collective cell is its own comparison, labelled as the
    cell id names the cell, then the size: a slower large size, the same small one."""
    a, b = tmp_path / "a", tmp_path / "b"
    for root, slow in ((a, 1.0), (b, 1.6)):
        write_collective(root, "x", 1, [(8, noisy(2e-5, seed=1)),
                                        (2**30, noisy(5e-3 * slow, seed=2))])
        write_collective(root, "x", 2, [(1536 * 1024, noisy(1e-4, seed=3))])
        write_collective(root, "x", 2, [(8, noisy(3e-6, seed=4))], pt2pt="pairwise")
    cells = compare(str(a), str(b)).cells
    verdicts = dict(zip(cells["label"], cells["verdict"], strict=True))
    assert verdicts == {"all_reduce bfloat16 8x 8 B": "same",
                        "all_reduce bfloat16 8x 1 GiB": "slower",
                        "all_reduce bfloat16 8x 2nodes 1.5 MiB": "same",
                        "pt2pt pairwise latency bfloat16 8x 2nodes 8 B": "same",
                        "pt2pt pairwise bidirectional bfloat16 8x 2nodes 8 B": "same"}
    summary = compare(str(a), str(b)).summary.set_index(["group", "value"])
    assert summary.loc[("collective", "all_reduce"), "cells"] == 3
    assert summary.loc[("collective", "all_reduce"), "slower"] == 1
    # A point-to-point cell's latency and bandwidth are summarised apart.
    assert summary.loc[("collective", "pt2pt latency"), "cells"] == 1
    assert summary.loc[("collective", "pt2pt bidirectional"), "cells"] == 1


@needs_chromium
def test_the_compare_pages_charts_draw_their_cells_in_headless_chromium(tmp_path):
    """The page's script gives each chart its rows from the page's data: every chart
    draws marks, and the speed-up chart's rows are the compared cells."""
    a, b = tmp_path / "a", tmp_path / "b"
    for root, slow in ((a, 1.0), (b, 1.5)):
        write_result(root, "x", model_cell(), noisy(0.1 * slow, seed=1))
        write_result(root, "x", model_cell("alexnet"), noisy(0.1, seed=2))
        write_collective(root, "x", 1, [(8, noisy(2e-5, seed=3))])
    out = tmp_path / "out"
    main([str(a), str(b), "--out", str(out), "--fail-on", "none"])
    page = out / "compare.html"
    names, drawn = drawn_charts(page, tmp_path / "profile")
    assert names == ["speedup", "distribution", "geomeans"] and drawn == names
    html = page.read_text()
    def script_value(name):
        return json.JSONDecoder().raw_decode(html.split(f"const {name} = ", 1)[1])[0]

    data, uses = script_value("DLBENCH_DATA"), script_value("DLBENCH_USES")
    (name,) = uses["chart-speedup"]
    from dlbench.report import datasets

    labels = sorted(r["label"] for r in datasets.unpack(data[name]))
    assert labels == ["[net] all_reduce bfloat16 8x 8 B", "[s] alexnet training float32 bs8",
                      "[s] resnet18 training float32 bs8"]


def test_a_result_from_before_an_axis_existed_matches_one_at_its_default(tmp_path):
    """A BASE measured by a release without num_nodes, compile and memory_format (its
    cells hold none) is the same cell as NEW at their defaults, not at other values."""
    a, b = tmp_path / "a", tmp_path / "b"
    write_result(a, "x", model_cell(), noisy(0.1, seed=1))
    later = {"num_nodes": 1, "compile": "eager", "memory_format": "contiguous"}
    write_result(b, "x", {**model_cell(), **later}, noisy(0.1, seed=2))
    write_result(b, "x", {**model_cell(), **later, "compile": "inductor"}, noisy(0.05, seed=3))
    cells = compare(str(a), str(b)).cells
    assert sorted(zip(cells["verdict"], cells["compile"], strict=True)) == [
        ("new only", "inductor"), ("same", "eager")]
    # A table an older aggregate wrote holds nulls there: the same key as the default.
    import pandas as pd

    from dlbench.compare.match import keys_of

    old = pd.DataFrame([{"study": "s", "num_nodes": None, "compile": None, "validate": None}])
    new = pd.DataFrame([{"study": "s", "num_nodes": 1, "compile": "eager", "validate": False}])
    assert keys_of(old).tolist() == keys_of(new).tolist()
    assert keys_of(old).tolist() != keys_of(new.assign(num_nodes=2)).tolist()


def test_swapping_base_and_new_swaps_faster_and_slower():
    """A ratio of 1.31 at the 25 % single-run threshold was faster, its mirror 0.763 same
    (slower needed 1 - 0.25): the bound for slower is 1 / 1.25."""
    from dlbench.compare.ratios import verdicts

    cells = pd.DataFrame({"throughput_ratio": [1.31, 1 / 1.31, 1.2, 1 / 1.2],
                          "throughput_ci_low": [1.2, 0.30, 1.1, 0.80],
                          "throughput_ci_high": [3.3, 0.835, 1.3, 0.91],
                          "ci_method": ["iterations"] * 4})
    verdict, _ = verdicts(cells, 0.05, 0.25)
    assert list(verdict) == ["faster", "slower", "same", "same"]


def test_a_cell_on_one_side_only_shows_the_cells_figures_across_its_runs():
    """Its repeats at 0.10, 0.12 and 0.14 s: the cell's time is their mean, 0.12 s, as a
    compared cell's (it showed the last run's row, 0.14 s)."""
    from dlbench.compare import Side, compare_sides

    base = _side_of([0.10, 0.12, 0.14], "a", spread=0.0)
    base = base.assign(model="resnet50", name="resnet50", cell_time_median_s=0.12,
                       cell_throughput=100 / 0.12)
    both = _side_of([0.1], "a", spread=0.0)
    comparison = compare_sides(Side("BASE", "a", pd.concat([base, both], ignore_index=True)),
                               Side("NEW", "b", _side_of([0.1], "b", spread=0.0)))
    (row,) = comparison.cells[comparison.cells["side"] == "base"].itertuples()
    assert row.base_time_median_s == pytest.approx(0.12)
    assert row.base_throughput == pytest.approx(100 / 0.12)


def test_comparing_an_input_with_itself_says_so(tmp_path, capsys):
    write_result(tmp_path / "r", "x", model_cell(), noisy(0.1, seed=1))
    folder = str(tmp_path / "r" / "x")
    assert main([folder, folder + "/", "--out", str(tmp_path / "o")]) == 0
    assert (f"warning: BASE and NEW are the same input ({folder}): every cell is compared "
            "with itself") in capsys.readouterr().err


def test_a_cells_failed_runs_not_compared_say_which_run_they_are():
    """Numbered from 1 and of the cell's runs, as the report's "Cells that did not finish"
    names them (repeat 1 read "run 1" here and "run 2 of 3" there)."""
    from dlbench.compare import Side, compare_sides

    new = _side_of([0.1, 0.1, 0.1], "b", spread=0.0)
    new["error"] = new["error"].astype(object)
    new.loc[1:, "status"] = "failed"
    new.loc[1:, "error"] = "timed out after 2 s (timeout_s)"
    comparison = compare_sides(Side("BASE", "a", _side_of([0.1], "a", spread=0.0)),
                               Side("NEW", "b", new))
    skipped = comparison.cells[comparison.cells["verdict"] == "not compared"]
    assert sorted(label.rsplit(" · ", 1)[-1] for label in skipped["label"]) == [
        "run 2 of 3", "run 3 of 3"]


def test_a_cpu_cells_peak_memory_is_its_processes_peak_rss():
    """Its memory column was always empty: a CPU cell has no device memory."""
    from dlbench.compare import Side, compare_sides

    base = _side_of([0.1], "a", spread=0.0).assign(peak_host_rss_bytes=2.0e9)
    new = _side_of([0.1], "b", spread=0.0).assign(peak_host_rss_bytes=2.5e9)
    row = verdict_of(compare_sides(Side("BASE", "a", base), Side("NEW", "b", new)))
    assert row.memory_metric == "peak_host_rss_bytes"
    assert row.memory_ratio == pytest.approx(1.25)


def test_a_cpu_cells_host_memory_is_its_processes_pss_where_both_sides_have_it():
    """The RSS sum counts the pages loader workers share with their parent once per
    worker: 8 workers against 0 looked like 3x the memory where their PSS is 1.1x."""
    from dlbench.compare import Side, compare_sides

    base = _side_of([0.1], "a", spread=0.0).assign(peak_host_rss_bytes=2.0e9,
                                                    peak_host_pss_bytes=1.0e9)
    new = _side_of([0.1], "b", spread=0.0).assign(peak_host_rss_bytes=6.0e9,
                                                   peak_host_pss_bytes=1.1e9)
    row = verdict_of(compare_sides(Side("BASE", "a", base), Side("NEW", "b", new)))
    assert (row.memory_metric, row.host_memory_metric) == ("peak_host_pss_bytes",) * 2
    assert row.memory_ratio == pytest.approx(1.1)
    assert row.host_memory_ratio == pytest.approx(1.1)


def test_a_side_without_pss_compares_host_memory_by_rss_on_both_sides():
    """An older table (no PSS column filled): both sides' RSS, never PSS against RSS."""
    from dlbench.compare import Side, compare_sides

    base = _side_of([0.1], "a", spread=0.0).assign(peak_host_rss_bytes=2.0e9)
    new = _side_of([0.1], "b", spread=0.0).assign(peak_host_rss_bytes=3.0e9,
                                                   peak_host_pss_bytes=1.0e9)
    row = verdict_of(compare_sides(Side("BASE", "a", base), Side("NEW", "b", new)))
    assert (row.memory_metric, row.host_memory_metric) == ("peak_host_rss_bytes",) * 2
    assert row.host_memory_ratio == pytest.approx(1.5)


def test_sides_with_no_cell_in_common_name_the_setting_that_differs(tmp_path):
    """A run with num_warmup_batches 2 against one with 1: exit 2 named no field."""
    from dlbench.compare import InputError, Side, compare_sides

    base = _side_of([0.1], "a").assign(num_warmup_batches=1)
    new = _side_of([0.1], "b").assign(num_warmup_batches=2)
    with pytest.raises(InputError) as info:
        compare_sides(Side("BASE", "a", base), Side("NEW", "b", new))
    assert str(info.value).endswith(": the sides differ in num_warmup_batches (1 vs 2)")


def test_sides_with_no_setting_apart_but_no_cell_in_common_name_their_nearest_cells(tmp_path):
    """resnet18 at batch 8 against batch 16, vgg11 of other phases and batches: no column
    differs throughout, and the error named none ("no ok row of one has ...")."""
    from dlbench.compare import InputError

    a, b = tmp_path / "a", tmp_path / "b"
    write_result(a, "x", model_cell(batch_size=8), noisy(0.1, seed=1))
    write_result(a, "x", model_cell("vgg11", batch_size=16), noisy(0.1, seed=2))
    write_result(b, "x", model_cell(batch_size=16), noisy(0.1, seed=3))
    write_result(b, "x", model_cell("vgg11", batch_size=8, phase="inference"),
                 noisy(0.1, seed=4))
    with pytest.raises(InputError) as info:
        compare(str(a), str(b))
    assert str(info.value).endswith(": the nearest cells differ in batch_size (8 vs 16)")


def test_a_side_with_rows_of_empty_axes_still_matches_the_other_sides_cells(tmp_path):
    """NEW also holds an unreadable result file, a failed row with every axis empty (as
    calibration and operator rows leave the model axes empty): its batch_size column has
    nulls, read as 8.0 beside BASE's 8, and no cell matched ("no common cells", exit 2)."""
    a, b = tmp_path / "a", tmp_path / "b"
    write_result(a, "x", model_cell(), noisy(0.1, seed=1))
    write_result(b, "x", model_cell(), noisy(0.1, seed=2))
    (b / "x" / "s" / "cells" / "resnet18_training_bs64_deadbeef.json").write_text("{\n")
    comparison = compare(str(a), str(b))
    row = verdict_of(comparison)
    assert (row.verdict, row.batch_size) == ("same", 8)
    assert comparison.counts["not compared"] == 1
    assert main([str(a), str(b), "--out", str(tmp_path / "out")]) == 0


def test_a_cell_without_an_interval_is_judged_on_its_ratio_against_the_single_run_threshold(
        tmp_path):
    """One iteration a side (ci_method none): a tenfold slowdown was "judged same whatever
    the ratio" and passed the gate. Beyond the 25 % single-run threshold it is slower or
    faster, within it the same; each says it has no interval. So is a side of 5
    iterations, whose bootstrap interval was their whole range (a 94 % interval at most);
    6 have one."""
    a, b = tmp_path / "a", tmp_path / "b"
    for batch, base, new in ((8, 0.1, 1.0), (16, 0.1, 0.11), (32, 1.0, 0.1)):
        write_result(a, "x", model_cell(batch_size=batch), [base])
        write_result(b, "x", model_cell(batch_size=batch), [new])
    write_result(a, "x", model_cell(batch_size=64), [0.100, 0.101, 0.099, 0.100, 0.102])
    write_result(b, "x", model_cell(batch_size=64), [0.130, 0.131, 0.129, 0.130, 0.128])
    write_result(a, "x", model_cell(batch_size=128), [0.100, 0.101, 0.099, 0.100, 0.102, 0.1])
    write_result(b, "x", model_cell(batch_size=128), [0.130, 0.131, 0.129, 0.130, 0.128, 0.13])
    cells = compare(str(a), str(b)).cells.set_index("batch_size").sort_index()
    assert list(cells["ci_method"]) == ["none"] * 4 + ["iterations"]
    assert dict(cells["verdict"]) == {8: "slower", 16: "same", 32: "faster", 64: "slower",
                                      128: "slower"}
    assert set(cells["note"][:4]) == {"no confidence interval (one run of fewer than 6 "
                                      "iterations on a side): judged on its ratio alone "
                                      "against the 25 % single-run threshold"}
    assert cells.loc[128, "throughput_ci_high"] < 1
    assert main([str(a), str(b), "--out", str(tmp_path / "out")]) == EXIT_SLOWER


def _with_energy(path, sources, samples_per_joule):
    """The result at ``path`` with a monitor summary whose energy counts ``sources``."""
    res = R.read(path)
    res["extra"]["monitor"] = {"energy_j": 100.0, "energy_sources": sources,
                               "samples_per_joule": samples_per_joule}
    R.write(res, path)
    return path


GPU_AND_RAPL = ["gpu:nvml_total_energy", "host:rapl"]
GPU_ONLY = ["gpu:nvml_total_energy"]


def test_energy_of_sides_that_counted_different_sources_has_no_ratio_and_says_why(tmp_path):
    """BASE counted its GPUs and the host's RAPL, NEW (RAPL unreadable without root) its
    GPUs only: NEW read 1.5x the samples per joule, an energy ratio of 0.67 that was the
    missing host energy, not efficiency. No ratio, and the note names both sides' sources;
    a cell whose sides counted the same keeps its ratio and has no note."""
    a, b = tmp_path / "a", tmp_path / "b"
    _with_energy(write_result(a, "sysA", model_cell(), noisy(0.1, seed=1)), GPU_AND_RAPL, 2.0)
    _with_energy(write_result(b, "sysB", model_cell(), noisy(0.1, seed=2)), GPU_ONLY, 3.0)
    _with_energy(write_result(a, "sysA", model_cell("alexnet"), noisy(0.1, seed=3)),
                 GPU_AND_RAPL, 2.0)
    _with_energy(write_result(b, "sysB", model_cell("alexnet"), noisy(0.1, seed=4)),
                 list(reversed(GPU_AND_RAPL)), 4.0)
    out = tmp_path / "out"
    main([str(a), str(b), "--out", str(out), "--fail-on", "none"])
    comparison = compare(str(a), str(b))
    row = verdict_of(comparison)
    assert np.isnan(row.energy_per_sample_ratio)
    assert np.isnan(row.energy_ci_low) and np.isnan(row.energy_ci_high)
    assert row.note == ("energy not compared: BASE counted gpu:nvml_total_energy+host:rapl, "
                        "NEW counted gpu:nvml_total_energy")
    assert row.verdict == "same"  # the throughput verdict stands
    same = verdict_of(comparison, "alexnet")
    assert same.energy_per_sample_ratio == pytest.approx(0.5) and not isinstance(same.note, str)
    written = pq.read_table(out / "compare.parquet").to_pandas().set_index("model")
    assert pd.isna(written.loc["resnet18", "energy_per_sample_ratio"])
    assert "energy not compared" in written.loc["resnet18", "note"]
    # an unchanged cell's note is in the Markdown summary's list of such notes
    md = (out / "compare.md").read_text()
    assert "#### Notes on unchanged cells (1)" in md
    assert ("| energy not compared: BASE counted gpu:nvml_total_energy+host:rapl, NEW counted "
            "gpu:nvml_total_energy |") in md


def test_an_older_table_without_energy_sources_compares_energy_as_before(tmp_path):
    """A BASE table written before the energy_sources column: what its energy counted is
    unknown, so its energy is compared as it was (the ratio and no note), against a NEW
    that records its sources."""
    a, b = tmp_path / "a", tmp_path / "b"
    _with_energy(write_result(a, "sysA", model_cell(), noisy(0.1, seed=1)), GPU_AND_RAPL, 2.0)
    _with_energy(write_result(b, "sysB", model_cell(), noisy(0.1, seed=2)), GPU_ONLY, 4.0)
    table = aggregate.build_table(sorted(a.glob("*/*/cells/*.json")))
    old = tmp_path / "old.parquet"
    pq.write_table(table.drop_columns(["energy_sources"]), old)
    row = verdict_of(compare(str(old), str(b)))
    assert row.energy_per_sample_ratio == pytest.approx(0.5)
    assert not isinstance(row.note, str)


def test_energy_of_a_side_with_unrecorded_or_mixed_sources_has_no_ratio():
    """A side whose rows have energy but no sources (its table has the column), and a side
    whose repeats counted differently (RAPL readable in one run only), have no one energy
    figure to set against the other side's."""
    from dlbench.compare import Side, compare_sides

    def side(system, sources):
        frame = _side_of([0.1] * len(sources), system, spread=0.0)
        return frame.assign(samples_per_joule=2.0, energy_sources=sources)

    unrecorded = verdict_of(compare_sides(Side("BASE", "a", side("a", [None])),
                                          Side("NEW", "b", side("b", ["gpu:nvml_total_energy"]))))
    assert np.isnan(unrecorded.energy_per_sample_ratio)
    assert unrecorded.note == ("energy not compared: BASE's sources not recorded, "
                               "NEW counted gpu:nvml_total_energy")
    mixed = ["gpu:nvml_total_energy+host:rapl", "gpu:nvml_total_energy"]
    runs = verdict_of(compare_sides(Side("BASE", "a", side("a", mixed)),
                                    Side("NEW", "b", side("b", mixed))))
    assert np.isnan(runs.energy_per_sample_ratio)
    assert runs.note.startswith("energy not compared: BASE's runs counted gpu:nvml_total_energy "
                                "or gpu:nvml_total_energy+host:rapl, NEW's runs counted")
    alike = verdict_of(compare_sides(Side("BASE", "a", side("a", mixed[:1] * 2)),
                                     Side("NEW", "b", side("b", mixed[:1] * 3))))
    assert alike.energy_per_sample_ratio == pytest.approx(1.0)
    # against a side of unknown sources (an older table): its own mixed runs still count
    unknown = side("a", [None]).drop(columns="energy_sources")
    against_unknown = verdict_of(compare_sides(Side("BASE", "a", unknown),
                                               Side("NEW", "b", side("b", mixed))))
    assert np.isnan(against_unknown.energy_per_sample_ratio)
    assert against_unknown.note.startswith("energy not compared: NEW's runs counted ")
