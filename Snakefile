# dlbench: benchmark deep-learning frameworks over a grid of cells.
#   snakemake --cores all                      # the study in config/config.yaml
#   snakemake --cores all --configfile my.yaml # another study
#   snakemake --cores all --use-singularity    # each cell in its framework's container
#   snakemake --profile profiles/slurm         # on a Slurm cluster


# A config given with --configfile replaces the default study instead of extending it
# (one without studies is refused, not run as the default study); --config alone
# (retry_failed=true, system=NAME) sets values of the default study's.
if not workflow.configfiles and "studies" not in config:

    configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/datasets.smk"
include: "workflow/rules/benchmark.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/profile.smk"


# On a cluster these run on the driving host, as without one: each reads or writes files
# only, in seconds, and would otherwise wait in the queue for a cell's allocation.
localrules:
    aggregate,
    report,
    profile_tables,


rule all:
    input:
        # The cells' results too: Snakemake remakes a missing file only for a job that
        # needs it, and the Parquet, already there, would not (a result set aside as
        # invalid, or by retry_failed, must run again).
        cell_result_files(),
        "results/benchmarks.parquet",
        "results/report/index.html",
        # Also inputs of the report; a failed profile is recorded (status failed), not lost.
        profile_targets(),
