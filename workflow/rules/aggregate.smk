rule aggregate:
    input:
        cell_result_files(),
    output:
        parquet="results/benchmarks.parquet",
        csv="results/benchmarks.csv",
    log:
        "results/logs/aggregate.log",
    conda:
        "../../envs/driver.yaml"
    script:
        "../scripts/aggregate.py"
