# Dataset preparation: a synthetic ImageFolder (deterministic JPEGs) or a user's ImageFolder
# tree, converted on request to a Caffe LMDB (PyTorch runner) or MXNet RecordIO.
# Each rule writes into a temporary folder and renames it on success.

from dlbench.datasets import fingerprint as dataset_fingerprint

# A prepared dataset found cut short is removed, and its cells' results set aside, in
# common.smk (_prepare_cut_short_datasets_again), before anything counts the cells to run.


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
# Their process count (workers) writes the same records whatever it is (they come back in
# list order), so a new count alone must not prepare them again. Snakemake records every
# param but those it takes as derived from the job's input, output, threads or resources
# (a function of one of them): args, the command's options with the count, is one (a
# function of the output); options, the same without the count, is recorded instead (the
# value args had before: a dataset prepared without workers is not prepared again).
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
        options=lambda wc: conversion_args(wc.dataset, "lmdb"),
        args=lambda wc, output: conversion_command_args(wc.dataset, "lmdb"),
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
        options=lambda wc: conversion_args(wc.dataset, "recordio"),
        args=lambda wc, output: conversion_command_args(wc.dataset, "recordio"),
        source=lambda wc: dataset_fingerprint.source_fingerprint(
            support.datasets(config)[wc.dataset].get("path")
        ),
    shell:
        "{params.driver:q} -m dlbench.datasets recordio --record-failure"
        " --python {params.python:q} --source {input:q} --out {output:q}"
        " {params.args:q} > {log:q} 2>&1"
