"""Snakemake script: every cell result -> results/benchmarks.parquet and .csv.

An invalid result file becomes a failed row and is moved aside, so that the next run
measures its cell again (dlbench.aggregate); the job fails only when the table cannot be
written, and then its log ends with the traceback and the file it could not write.
"""

import sys
import traceback

from dlbench import aggregate

with open(snakemake.log[0], "w") as log:  # noqa: F821 (snakemake injects it)
    saved = sys.stdout, sys.stderr
    sys.stderr = sys.stdout = log
    try:
        table = aggregate.write(snakemake.input, snakemake.output.parquet, snakemake.output.csv)  # noqa: F821
        print(f"{table.num_rows} rows from {len(snakemake.input)} result files")  # noqa: F821
    except Exception:
        # Into the log while it is open: Snakemake shows a failed job's log.
        traceback.print_exc()
        raise
    finally:
        # The re-raised error goes to the job's own stderr, never to the closed log.
        sys.stdout, sys.stderr = saved
