# The table is flagged update: Snakemake does not delete the previous table before the job
# and puts it back when the job fails (a full disk), instead of leaving none. An invalid
# cell result does not fail the job: it becomes a failed row, and the next run with that
# cell moves it into results/<system>/<study>/cells/invalid/ and measures the cell again
# (moved now, it would be missing from this run's target, rule all).


rule aggregate:
    input:
        cells=cell_result_files(),
        # Every other system's results found under results/, and this system's of
        # studies its config does not name (workflow_support.results_beside).
        beside=results_beside_files(),
    output:
        parquet=update("results/benchmarks.parquet"),
        csv=update("results/benchmarks.csv"),
    log:
        str(AGGREGATE_LOG),
    conda:
        "../../envs/driver.yaml"
    params:
        # Run-to-run CV above which a cell is flagged unstable (dlbench.run_to_run).
        unstable_cv=UNSTABLE_CV,
        # This run's system: only its invalid result files among this run's cells are
        # set aside (another system's cells are measured by that system's runs, another
        # config's cells by a run of that config).
        system=SYSTEM,
        # This system's results of a study this run's cells imply (the calibration
        # study) that it does not plan: the table's too, but read by name, not as
        # inputs, which Snakemake would ask the benchmark rule (their pattern's) to make.
        beside_in_own_studies=results_beside_in_own_studies(),
    script:
        "../scripts/aggregate.py"
