"""The table and report of a run that ended with cells lacking a result.

A cell's job can end before dlbench's launcher records anything: the scheduler refused it
(sbatch: an account, a QOS, a limit no pre-check knows), stopped it (its time limit, a
failed node), or the run was interrupted. Snakemake then never runs the aggregate and
report jobs, which wait for every cell, and the run's table and report would miss every
cell it did measure, on each run for as long as that one job fails. So, at the end of a
run that failed with cells missing (the workflow's onerror), the table and report are
written from the results there are, the report says which cells are missing, and one line
says the same; the next run measures those cells and writes both again as usual.

Framework-free: the workflow's main process calls it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from dlbench import aggregate, run_to_run, systems

# Cells named in the report's note; the rest are counted.
NAMED = 20


def missing(planned: Sequence[str | Path]) -> list[str]:
    """The planned result files that do not exist."""
    return [str(path) for path in planned if not Path(path).exists()]


def table_behind(planned: Sequence[str | Path], parquet: str | Path) -> bool:
    """Whether the table is missing or older than one of the planned results."""
    try:
        made = Path(parquet).stat().st_mtime
    except OSError:
        return True
    for path in planned:
        try:
            if Path(path).stat().st_mtime > made:
                return True
        except OSError:
            continue
    return False


def cell_name(path: str) -> str:
    """``results/<system>/<study>/cells/<cell>.json`` -> ``<study>/<cell>``."""
    result = Path(path)
    return f"{result.parents[1].name}/{result.stem}"


def note(absent: Sequence[str], planned: int) -> str:
    """What the report says of the cells without a result."""
    names = ", ".join(cell_name(path) for path in absent[:NAMED])
    more = f" and {len(absent) - NAMED} more" if len(absent) > NAMED else ""
    return (f"This report was written at the end of a run in which {len(absent)} of "
            f"{planned} cell results were not made: their jobs ended before dlbench could "
            "record them (refused or stopped by the scheduler, or the run was interrupted; "
            "Snakemake's log says which). The table holds the results there are; the next "
            f"run measures the missing cells and writes both again. Missing: {names}{more}.")


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def write(planned: Sequence[str], others: Sequence[str], parquet: str, csv: str,
          report_dir: str, *, profiles_dir: str | None = None,
          profiles_kept: Callable[[Path], bool] | None = None,
          baseline_system: str | None = None,
          unstable_cv: float = run_to_run.DEFAULT_UNSTABLE_CV,
          table_job_ran: bool = True,
          say: Callable[[str], None] = _to_stderr) -> None:
    """Write the table and the report of the results there are where some of ``planned``
    (this run's result files) are missing; ``others``: the other result files the table
    keeps (dlbench.workflow_support.results_beside). ``say``
    gets a line before the work and one after it. Where no planned result is missing,
    nothing is done (or said) when the table's own job ran (``table_job_ran``: it failed,
    and its log says why) or the table is as new as every result; otherwise the run
    stopped after its cells and before its table (a SIGTERM lets running cells finish and
    starts nothing more), which is written then. With no result at all, nothing is
    written. It follows an interrupt as often as not: a second Ctrl-C stops it, leaving
    each file whole (old or new)."""
    absent = missing(planned)
    if not absent and (table_job_ran or not table_behind(planned, parquet)):
        return
    # Failed, or stopped by an interrupt: the lines above say which.
    lacking = (f"dlbench: {len(absent)} of {len(planned)} cell results are missing (their "
               "jobs failed or were stopped: see above)" if absent else
               "dlbench: the run stopped before its table")
    gone = set(absent)  # each planned file is looked at once; others were just found
    present = [*(str(path) for path in planned if str(path) not in gone), *others]
    if not present:
        kept = " (the one there is left as it was)" if Path(parquet).exists() else ""
        say(f"{lacking}; no result, so no new table{kept}")
        return
    say(f"{lacking}; writing the table and report of the "
        f"{len(present)} results there are (Ctrl-C to skip)")
    written: list[str] = []
    try:
        # Only this run's invalid files are moved aside: another system's runs (or a run
        # of another config) measure the others' cells, so each stays (a failed row).
        own = {systems.system_of(Path(path)) for path in planned}
        table = aggregate.write(present, parquet, csv, unstable_cv=unstable_cv,
                                own_system=own.pop() if len(own) == 1 else None,
                                own_files=[str(path) for path in planned])
        written.append(f"{parquet} ({table.num_rows} rows)")
        from dlbench import report  # altair: only where a report is written

        report.render(parquet, report_dir, profiles_dir=profiles_dir,
                      profiles_kept=profiles_kept,
                      baseline_system=baseline_system,
                      incomplete=report.Incomplete(len(absent), note(absent, len(planned)))
                      if absent else None)
        written.append(report_dir)
    except KeyboardInterrupt:
        say(f"dlbench: interrupted; written: {', '.join(written) or 'nothing'}")
        return
    except Exception as exc:  # noqa: BLE001 (the run has failed already: say why, go on)
        say(f"dlbench: the table and report of the results there are could not be written "
            f"(written: {', '.join(written) or 'nothing'}): {type(exc).__name__}: {exc}")
        return
    say(f"dlbench: {' and '.join(written)} hold the results there are; the next run "
        "measures the missing cells" if absent else
        f"dlbench: {' and '.join(written)} hold every result")
