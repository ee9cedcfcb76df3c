"""dlbench compare: every cell's note reaches the Markdown summary and the console, failed
runs are numbered as the report numbers them, and system labels resolve (and fail) on
what results/ holds; on real result files."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_compare import model_cell, noisy, write_result

from dlbench import aggregate
from dlbench import result as R
from dlbench.compare import compare
from dlbench.compare.__main__ import EXIT_BAD_INPUT, EXIT_SLOWER, main

HELD_BACK = "NEW's GPU clocks held back in 62% of samples (power cap 62%)"


def _held_back(path):
    res = R.read(path)
    res["extra"]["monitor"] = {"gpu_power_limit_w": 500.0, "gpu_clocks_held_back": 0.62,
                               "gpu_clock_reasons": "power cap 62%"}
    R.write(res, path)


def _run(*args, cwd=None):
    """``python -m dlbench.compare`` in a process of its own, as CI runs it."""
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "dlbench.compare", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, env=env, check=False)


def test_a_held_back_note_of_a_cell_judged_the_same_is_in_the_markdown_and_the_console(
        tmp_path):
    """NEW's GPU at its power cap: the inference cell is the same, the training cell
    faster, both held back. compare.md gave the note of the faster cell only, and the
    console none; docs/compare.md says the note is in the Markdown summary."""
    a, b = tmp_path / "a", tmp_path / "b"
    for phase, new_time in (("inference", 0.100), ("training", 0.060)):
        write_result(a, "sysA", model_cell(phase=phase), noisy(0.100, seed=1))
        _held_back(write_result(b, "sysB", model_cell(phase=phase), noisy(new_time, seed=2)))
    out = tmp_path / "out"
    done = _run(a, b, "--out", out)
    assert done.returncode == 0, done.stderr
    cells = compare(str(a), str(b)).cells.set_index("phase")
    assert cells.loc["inference", "verdict"] == "same"
    assert cells.loc["inference", "note"] == HELD_BACK
    md = (out / "compare.md").read_text()
    assert "#### Notes on unchanged cells (1)" in md
    (line,) = [x for x in md.splitlines() if x.startswith("| resnet18 inference")]
    assert line.endswith(f"| {HELD_BACK} |")
    assert f"- resnet18 training float32 bs8: {HELD_BACK}" in md  # the faster cell's, as before
    assert ("  notes: 1 unchanged cell has a note (listed in compare.md and compare.html)"
            in done.stdout.splitlines())


def test_one_run_a_side_note_of_a_20_percent_change_is_in_the_markdown_with_its_ratio(
        tmp_path, capsys):
    """One run a side, NEW 1.2x faster with an interval above 1: same, with a note that one
    run cannot tell such a change. compare.md said "No cell is faster or slower." and
    nothing more, so a reader of the pull request never learnt that a 20 % change was
    seen."""
    a, b = tmp_path / "a", tmp_path / "b"
    write_result(a, "x", model_cell(), noisy(0.120, seed=1))
    write_result(b, "x", model_cell(), noisy(0.100, seed=2))
    out = tmp_path / "out"
    assert main([str(a), str(b), "--out", str(out)]) == 0
    md = (out / "compare.md").read_text()
    assert "### Changed cells (0)" in md and "#### Notes on unchanged cells (1)" in md
    (line,) = [x for x in md.splitlines() if x.startswith("| resnet18 training float32 bs8 |")]
    cells = line.strip("| ").split(" | ")
    assert float(cells[1].rstrip("×")) == pytest.approx(1.2, rel=0.03)
    low, high = (float(v) for v in cells[2].split("–"))
    assert 1 < low < 1.2 < high
    assert cells[3].startswith("one run on a side: a change under 25 % cannot be told")
    assert "notes: 1 unchanged cell has a note" in capsys.readouterr().out


def test_many_notes_of_unchanged_cells_are_folded_away(tmp_path):
    """Thirty held-back cells of the same speed: the list is folded, as the other long
    lists are, and has every one."""
    a, b = tmp_path / "a", tmp_path / "b"
    for batch in range(1, 31):
        write_result(a, "x", model_cell(batch_size=batch), noisy(0.1, seed=batch))
        _held_back(write_result(b, "x", model_cell(batch_size=batch), noisy(0.1, seed=99)))
    out = tmp_path / "out"
    assert main([str(a), str(b), "--out", str(out)]) == 0
    md = (out / "compare.md").read_text()
    assert "<summary>Notes on unchanged cells (30)</summary>" in md
    assert md.count(f"| {HELD_BACK} |") == 30


def _repeat(path, k):
    """The result file of repeat ``k`` of the cell whose first run is ``path``."""
    moved = path.with_name(f"{path.stem}_r{k}.json")
    path.rename(moved)
    return moved


def test_a_failed_run_is_numbered_from_1_of_the_cells_runs_as_the_report_does(tmp_path):
    """NEW's cell ran 3 times and its second run (repeat 1) failed: "run 2 of 3", as the
    report's "Cells that did not finish" names it (it read "run 1"). A cell's only run
    says no run: there is no other."""
    a, b = tmp_path / "a", tmp_path / "b"
    for k in range(3):
        path = write_result(a, "x", model_cell(), noisy(0.1, seed=k))
        if k:
            _repeat(path, k)
        failed = k == 1
        path = write_result(b, "x", model_cell(), [] if failed else noisy(0.1, seed=9 + k),
                            status="failed" if failed else "ok",
                            error="RuntimeError: boom" if failed else None)
        if k:
            _repeat(path, k)
    write_result(a, "x", model_cell("alexnet"), noisy(0.1, seed=5))
    write_result(b, "x", model_cell("alexnet"), [], status="failed", error="OSError: once")
    out = tmp_path / "out"
    assert main([str(a), str(b), "--out", str(out), "--fail-on", "slower"]) == 0
    md = (out / "compare.md").read_text()
    assert "| NEW | resnet18 training float32 bs8 · run 2 of 3 | failed | RuntimeError: boom |" \
        in md
    assert "| NEW | alexnet training float32 bs8 | failed | OSError: once |" in md


def _system_folders(results, labels):
    for label in labels:
        write_result(results, label, model_cell(), noisy(0.1, seed=1))


def test_an_unknown_label_names_the_tables_systems_and_the_results_folders(
        tmp_path, monkeypatch, capsys):
    """results/ has the folders sysC..sysH and a table of sysA and sysB: the error named
    the table's systems only, though a label may be any of those folders too."""
    monkeypatch.chdir(tmp_path)
    results = Path("results")
    assert main(["sysZ", "sysA", "--out", "o"]) == EXIT_BAD_INPUT
    assert ("results/benchmarks.parquet: no such file or folder (BASE 'sysZ' and NEW 'sysA': "
            "not a file, a folder or a system folder under results/, so read as system labels "
            "of this table; results/ has system folders: none; give --table)\n"
            ) in capsys.readouterr().err
    _system_folders(tmp_path / "elsewhere", ["sysA", "sysB"])
    aggregate.write(sorted((tmp_path / "elsewhere").glob("*/*/cells/*.json")),
                    results / "benchmarks.parquet")
    _system_folders(results, [f"sys{c}" for c in "CDEFGH"])
    (results / "report").mkdir()  # a folder results/ keeps for itself: no system's
    assert main(["sysZ", "sysA", "--out", "o"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert ("results/benchmarks.parquet: unknown system label 'sysZ' for BASE (field system; "
            "the table has: sysA, sysB; results/ has system folders: sysC, sysD, sysE, sysF, "
            "sysG, sysH)") in err
    _system_folders(results, [f"more{i}" for i in range(5)])
    assert main(["sysZ", "sysA", "--out", "o"]) == EXIT_BAD_INPUT
    assert "system folders: more0, more1, more2, more3, more4, sysC, sysD, sysE and 3 more)" \
        in capsys.readouterr().err


def test_a_label_with_a_folder_reads_its_folder_when_the_other_label_has_none(
        tmp_path, monkeypatch):
    """boxA's folder has its batch-8 and batch-16 cells, the table (of a run of a config
    with batch 8 only) boxA's batch-8 cell and boxB's both. boxB has no folder (its files
    are elsewhere): boxA was read from the table too, and its batch-16 cell came out as
    "no such cell in BASE" though its result file is in results/boxA/."""
    monkeypatch.chdir(tmp_path)
    results = Path("results")
    for batch in (8, 16):
        write_result(results, "boxA", model_cell(batch_size=batch), noisy(0.1, seed=batch))
        write_result(tmp_path / "copied", "boxB", model_cell(batch_size=batch),
                     noisy(0.07, seed=batch))
    aggregate.write([*results.glob("boxA/*/cells/*bs8_*.json"),
                     *(tmp_path / "copied").glob("boxB/*/cells/*.json")],
                    results / "benchmarks.parquet")
    comparison = compare("boxA", "boxB")
    both = comparison.cells[comparison.cells["side"] == "both"]
    assert sorted(both["batch_size"]) == [8, 16] and set(both["verdict"]) == {"faster"}
    assert comparison.base.label == f"boxA ({Path('results/boxA')})"
    assert comparison.new.label == f"boxB in {Path('results/benchmarks.parquet')}"


def test_a_new_side_whose_every_cell_failed_is_compared_and_fails_the_gate(tmp_path):
    """A broken driver: every cell BASE measured failed in NEW. That is the comparison's
    finding (newly failing, the outputs written, exit 1), not inputs without a cell in
    common (exit 2, nothing written)."""
    a, b = tmp_path / "a", tmp_path / "b"
    for model in ("resnet18", "vgg11"):
        write_result(a, "x", model_cell(model), noisy(0.1, seed=1))
        write_result(b, "x", model_cell(model), [], status="failed", error="CUDA error")
    comparison = compare(str(a), str(b))
    assert comparison.newly_failed == 2 and comparison.counts["not compared"] == 2
    out = tmp_path / "out"
    assert main([str(a), str(b), "--out", str(out)]) == EXIT_SLOWER
    assert (out / "compare.md").is_file() and (out / "compare.parquet").is_file()
    assert main([str(a), str(b), "--out", str(out), "--fail-on", "none"]) == 0


def test_a_cell_base_measured_that_fails_in_new_fails_the_gate_one_failing_on_both_not(
        tmp_path):
    """Nothing slower, but NEW's resnet18 failed where BASE measured it (a crash is a
    regression a gate must not pass); alexnet failed on both sides and ran out of memory
    nowhere new: it alone keeps the gate open, as ``--fail-on slower`` does."""
    a, b = tmp_path / "a", tmp_path / "b"
    write_result(a, "x", model_cell(), noisy(0.1, seed=1))
    write_result(b, "x", model_cell(), [], status="oom", error="CUDA out of memory")
    write_result(a, "x", model_cell("vgg11"), noisy(0.1, seed=2))
    write_result(b, "x", model_cell("vgg11"), noisy(0.1, seed=3))
    out = tmp_path / "out"
    done = _run(a, b, "--out", out)
    assert done.returncode == EXIT_SLOWER, done.stderr
    assert "newly failing: 1 cell measured in BASE failed or ran out of memory in NEW" \
        in done.stdout
    assert main([str(a), str(b), "--out", str(out), "--fail-on", "slower"]) == 0
    c, d = tmp_path / "c", tmp_path / "d"
    for root in (c, d):
        write_result(root, "x", model_cell("alexnet"), [], status="failed", error="boom")
        write_result(root, "x", model_cell("vgg11"), noisy(0.1, seed=4))
    assert main([str(c), str(d), "--out", str(out)]) == 0


def _oom_runs(root, ooms):
    """resnet18 run 3 times (repeats 0 to 2), those in ``ooms`` out of memory; repeat 0
    written last, as each is first written where repeat 0's file goes."""
    for k in (1, 2, 0):
        oom = k in ooms
        path = write_result(root, "x", model_cell(), [] if oom else noisy(0.1, seed=k),
                            status="oom" if oom else "ok",
                            error="CUDA out of memory" if oom else None)
        if k:
            _repeat(path, k)


def test_the_same_oom_run_on_both_sides_is_not_newly_failing_one_more_is(tmp_path):
    """BASE and NEW each ran out of memory in the second of three runs: an A/A comparison,
    which exited 1 ("newly failing: 1 cell"). NEW out of memory in its third run as well
    lost one run more than BASE: newly failing."""
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    _oom_runs(a, {1})
    _oom_runs(b, {1})
    _oom_runs(c, {1, 2})
    out = tmp_path / "out"
    same = compare(str(a), str(b))
    assert (same.newly_failed, same.counts["not compared"], same.counts["same"]) == (0, 2, 1)
    assert main([str(a), str(b), "--out", str(out)]) == 0
    assert compare(str(a), str(c)).newly_failed == 1
    assert main([str(a), str(c), "--out", str(out)]) == EXIT_SLOWER


def repeat_rows(medians, system, unstable=None, cv=None):
    """One side's rows of one cell run len(medians) times, as the table holds them (the
    aggregate's run-to-run flag and CV where given)."""
    import numpy as np
    import pandas as pd

    rows = []
    for repeat, median in enumerate(medians):
        times = noisy(median, n=30, spread=0.005, seed=repeat)
        rows.append({"study": "s", "kind": "model", "model": "resnet18", "phase": "training",
                     "batch_size": 8, "name": "resnet18", "pass": "training", "status": "ok",
                     "repeat": repeat, "system": system, "unstable": unstable,
                     "run_to_run_cv": cv, "time_median_s": float(np.median(times)),
                     "times_s": list(times), "time_p95_s": float(np.quantile(times, .95)),
                     "time_p99_s": float(np.quantile(times, .99)),
                     "throughput": 8 / float(np.median(times)), "throughput_unit": "samples/s",
                     "items_per_iteration": 8, "iterations": 30})
    frame = pd.DataFrame(rows)
    return frame.reindex(columns=list(dict.fromkeys([*aggregate.SCHEMA.names, "repeat"])))


def test_a_side_whose_runs_disagree_says_so_beside_the_verdict():
    """NEW's three runs: 0.25, 0.23 and 2.09 s (one run far off, as a busy machine gives):
    the verdict is the same (its interval spans it) and the note says NEW's runs disagree,
    with their CV as the table flagged it and the range of their medians; BASE's agree."""
    from dlbench.compare import Side, compare_sides

    base = repeat_rows([0.234, 0.236, 0.230], "a", unstable=False, cv=0.01)
    new = repeat_rows([0.249, 0.230, 2.09], "b", unstable=True, cv=1.25)
    comparison = compare_sides(Side("BASE", "a", base), Side("NEW", "b", new))
    (row,) = comparison.cells.itertuples()
    assert row.verdict == "same"
    assert "NEW's 3 runs disagree (run-to-run CV 125%; medians 0.23 to 2.09 s)" in row.note
    assert "BASE's" not in row.note
    from dlbench.compare.output import geomean_text

    assert geomean_text(comparison).endswith("; no cell changed beyond its noise).")


def test_a_median_time_of_0_is_not_compared_and_says_why(tmp_path):
    """An operator below its timer's resolution recorded 0 s: no ratio (it was an infinite
    one, and a crash where the changed cells were sorted by it), the row not compared."""
    from dlbench.compare import Side, compare_sides

    base = repeat_rows([0.1, 0.1], "a")
    new = repeat_rows([0.1, 0.1], "b").assign(time_median_s=0.0)
    comparison = compare_sides(Side("BASE", "a", base), Side("NEW", "b", new))
    (row,) = comparison.cells.itertuples()
    assert row.verdict == "not compared" and row.note.startswith("a median time of 0 on a side")
    assert not comparison.summary["geomean_ratio"].notna().any()


def test_bad_settings_and_a_crash_are_exit_2_not_the_slower_exit_1(tmp_path, capsys):
    """A CI gate reads exit 1 as a regression: a negative seed, resamples that would need
    gigabytes, and a table whose times are text all exit 2 in one line."""
    a, b = tmp_path / "a", tmp_path / "b"
    write_result(a, "x", model_cell(), noisy(0.1, seed=1))
    write_result(b, "x", model_cell(), noisy(0.1, seed=2), error=None)
    for flag in (["--seed", "-1"], ["--resamples", "100000000"]):
        with pytest.raises(SystemExit) as exc:
            main([str(a), str(b), "--out", str(tmp_path / "o"), *flag])
        assert exc.value.code == EXIT_BAD_INPUT
    capsys.readouterr()
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = aggregate.write(sorted(b.rglob("*.json")), tmp_path / "b.parquet")
    texts = table.set_column(table.schema.get_field_index("time_median_s"), "time_median_s",
                             pa.array(["fast"] * len(table)))
    pq.write_table(texts, tmp_path / "text.parquet")
    assert main([str(a), str(tmp_path / "text.parquet"), "--out",
                 str(tmp_path / "o")]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(
        "python -m dlbench.compare: could not compare (")


def test_an_error_message_is_text_in_the_markdown_not_markup(tmp_path):
    """A failed run's error holding HTML (</details> closes the folded section in a pull
    request's rendering) is escaped in compare.md."""
    a, b = tmp_path / "a", tmp_path / "b"
    write_result(a, "x", model_cell(), noisy(0.1, seed=1))
    write_result(b, "x", model_cell(), [], status="failed", error="bad </details><script>x")
    main([str(a), str(b), "--out", str(tmp_path / "o"), "--fail-on", "none"])
    md = (tmp_path / "o" / "compare.md").read_text()
    assert "bad &lt;/details&gt;&lt;script&gt;x" in md and "<script>" not in md


def test_a_label_beside_a_path_says_how_to_give_it(tmp_path):
    """``dlbench compare sysA other/results/sysB``: the label is read as a path, and the
    line says so and names the folder to give instead."""
    b = tmp_path / "b"
    write_result(b, "x", model_cell(), noisy(0.1, seed=1))
    done = _run("sysA", b, "--out", tmp_path / "o", cwd=tmp_path)
    assert done.returncode == EXIT_BAD_INPUT
    assert done.stderr.strip() == (
        f"python -m dlbench.compare: BASE sysA: no such file or folder; a system label beside "
        f"a path is read as a path: give its folder ({Path('results') / 'sysA'}) or both as "
        "labels")
