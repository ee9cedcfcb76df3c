# The profiles' manifests are inputs: a profile's failure is a manifest too (status failed),
# so none holds the report back; without profiling.select the list is empty.
# The outputs are flagged update: Snakemake does not delete the previous report before the
# job and puts it back if the job fails; the writer itself replaces it only once the new
# one is whole (dlbench.report.output).


rule report:
    input:
        parquet="results/benchmarks.parquet",
        profiles=profile_targets(),
    output:
        html=update(
            report(
                "results/report/index.html",
                caption="../report/index.rst",
                category="Report",
            )
        ),
        charts=update(
            report(
                directory("results/report/charts"),
                patterns=["{name}.svg"],
                caption="../report/chart.rst",
                category="Charts",
            )
        ),
    log:
        "results/logs/report.log",
    conda:
        "../../envs/driver.yaml"
    params:
        profiles_dir=profiling_config.PROFILES_DIR,
        # This system's profiles of the studies the config names are the run's only, the
        # others' those their study's last run planned (workflow_support.profiles_kept).
        system=SYSTEM,
        studies=sorted(config.get("studies") or {}),
        # The system the others are compared with in the report (default: most cells).
        baseline_system=literal(config.get("baseline_system")),
    script:
        "../scripts/report.py"
