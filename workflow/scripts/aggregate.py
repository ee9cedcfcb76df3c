"""Snakemake script: every cell result -> results/benchmarks.parquet and .csv.

An invalid result file becomes a failed row (dlbench.aggregate) and, when it is one of this
run's cells, is listed for the next run with that cell, which moves it aside and measures
the cell again: moved now, it would be missing from
this run's target. Two software stacks (or machines) under one system label, or two files
of one run of a cell, stop the job with one line naming both files: the user's to settle,
no traceback helps. Otherwise the
job fails only when the table cannot be written, and then its log ends with the traceback
and the file it could not write.
"""

import sys

from dlbench import aggregate, job_log, workflow_support

with job_log.into(snakemake.log[0]):  # noqa: F821 (snakemake injects it)
    invalid = []
    try:
        paths = [*snakemake.input, *snakemake.params.beside_in_own_studies]  # noqa: F821
        table = aggregate.write(paths, snakemake.output.parquet,  # noqa: F821
                                snakemake.output.csv, move_invalid=False,  # noqa: F821
                                invalid_later=invalid,
                                unstable_cv=snakemake.params.unstable_cv,  # noqa: F821
                                own_system=snakemake.params.system,  # noqa: F821
                                own_files=snakemake.input.cells)  # noqa: F821
    except aggregate.FilesRefused as exc:
        print(f"dlbench.aggregate: {exc}", file=sys.stderr)
        sys.exit(1)  # SystemExit: job_log keeps no traceback of it; the job fails
    workflow_support.record_invalid_later(invalid, snakemake.input.cells)  # noqa: F821
    print(f"{table.num_rows} rows from {len(paths)} result files")
