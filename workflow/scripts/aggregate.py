"""Snakemake script: every cell result -> results/benchmarks.parquet and .csv.

An invalid result file becomes a failed row and is moved aside, so that the next run
measures its cell again (dlbench.aggregate); the job fails only when the table cannot be
written, and then its log ends with the traceback and the file it could not write.
"""


from dlbench import aggregate, job_log

with job_log.into(snakemake.log[0]):  # noqa: F821 (snakemake injects it)
    table = aggregate.write(snakemake.input, snakemake.output.parquet, snakemake.output.csv,  # noqa: F821
                            unstable_cv=snakemake.params.unstable_cv)  # noqa: F821
    print(f"{table.num_rows} rows from {len(snakemake.input)} result files")  # noqa: F821
