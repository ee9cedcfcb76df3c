# Dataset preparation: a synthetic ImageFolder (deterministic JPEGs) or a user's ImageFolder
# tree, converted on request to a Caffe LMDB (PyTorch runner) or MXNet RecordIO.
# Each rule writes into a temporary folder and renames it on success.

from dlbench.datasets import DatasetError
from dlbench.datasets import fingerprint as dataset_fingerprint
from dlbench.datasets import quick as dataset_quick

# A prepared dataset cut short (data.mdb shorter than its meta pages declare, a .rec ending
# before its last indexed record) kills its readers with SIGBUS, and Snakemake, seeing the
# folder, would never prepare it again: remove it before the DAG is built, and set aside
# the results of the cells reading it (Snakemake prepares a missing input only for a job
# that runs), so that it is prepared again and they rerun. One header read per prepared
# folder, not per cell; in the main process only (cluster jobs parse this file again).
if workflow.is_main_process:
    try:
        _removed = dataset_quick.remove_broken_prepared(
            {data_dir_of(cell) for cell in CELLS}, dry_run=_dry_run
        )
    except DatasetError as exc:
        print(f"dlbench: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    _paths = support.results_reading(config, CELLS, SYSTEM, REPEATS, _removed)
    _run_again(_paths, f"{len(_paths)} cell(s) reading the removed dataset(s)")


rule dataset_synthetic:
    output:
        directory("results/datasets/{dataset}/image_folder"),
    log:
        "results/datasets/logs/{dataset}_image_folder.log",
    conda:
        "../../envs/driver.yaml"
    params:
        args=lambda wc: synthetic_args(wc.dataset),
        python=literal(support.this_python()),
    shell:
        "{params.python:q} -m dlbench.datasets synthetic --record-failure --out {output:q}"
        " {params.args:q}"
        " > {log:q} 2>&1"


# The conversions' input is the source's root folder, whose mtime an image replaced or
# added inside a class folder leaves as it was: their params hold the source tree's
# fingerprint (dlbench.datasets.fingerprint), so that such a change prepares them again.
rule dataset_lmdb:
    input:
        lambda wc: dataset_source(wc.dataset),
    output:
        directory("results/datasets/{dataset}/caffe_lmdb"),
    log:
        "results/datasets/logs/{dataset}_caffe_lmdb.log",
    conda:
        "../../envs/driver.yaml"
    params:
        args=lambda wc: conversion_args(wc.dataset, "lmdb"),
        python=literal(support.this_python()),
        source=lambda wc: dataset_fingerprint.source_fingerprint(
            support.datasets(config)[wc.dataset].get("path")
        ),
    shell:
        "{params.python:q} -m dlbench.datasets lmdb --record-failure --source {input:q}"
        " --out {output:q} {params.args:q}"
        " > {log:q} 2>&1"


# Started with the driver's interpreter, which always exists: it runs the conversion in
# MXNet's (--python), and records a missing MXNet environment as the preparation's failure
# (the MXNet cells are then skipped with the reason), instead of a shell exiting 127.
rule dataset_recordio:
    input:
        lambda wc: dataset_source(wc.dataset),
    output:
        directory("results/datasets/{dataset}/recordio"),
    log:
        "results/datasets/logs/{dataset}_recordio.log",
    conda:
        "../../envs/mxnet.yaml"
    params:
        driver=literal(support.this_python()),
        python=literal(framework_python("mxnet")),
        args=lambda wc: conversion_args(wc.dataset, "recordio"),
        source=lambda wc: dataset_fingerprint.source_fingerprint(
            support.datasets(config)[wc.dataset].get("path")
        ),
    shell:
        "{params.driver:q} -m dlbench.datasets recordio --record-failure"
        " --python {params.python:q} --source {input:q} --out {output:q}"
        " {params.args:q} > {log:q} 2>&1"
