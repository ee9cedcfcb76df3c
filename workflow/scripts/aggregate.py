"""Snakemake script: every cell result -> results/benchmarks.parquet and .csv."""

import sys

from dlbench import aggregate

with open(snakemake.log[0], "w") as log:  # noqa: F821 (snakemake injects it)
    sys.stderr = sys.stdout = log
    table = aggregate.write(snakemake.input, snakemake.output.parquet, snakemake.output.csv)  # noqa: F821
    print(f"{table.num_rows} rows from {len(snakemake.input)} result files")  # noqa: F821
