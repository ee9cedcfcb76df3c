"""Snakemake script: every cell result -> results/benchmarks.parquet and .csv.

An invalid result file becomes a failed row (dlbench.aggregate) and is listed for the next
run, which moves it aside and measures its cell again: moved now, it would be missing from
this run's target. The job fails only when the table cannot be written, and then its log
ends with the traceback and the file it could not write.
"""


from dlbench import aggregate, job_log, workflow_support

with job_log.into(snakemake.log[0]):  # noqa: F821 (snakemake injects it)
    invalid = []
    table = aggregate.write(snakemake.input, snakemake.output.parquet, snakemake.output.csv,  # noqa: F821
                            move_invalid=False, invalid_later=invalid,
                            unstable_cv=snakemake.params.unstable_cv)  # noqa: F821
    workflow_support.record_invalid_later(invalid)
    print(f"{table.num_rows} rows from {len(snakemake.input)} result files")  # noqa: F821
