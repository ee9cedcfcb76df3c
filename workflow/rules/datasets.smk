# Dataset preparation: a synthetic ImageFolder (deterministic JPEGs) or a user's ImageFolder
# tree, converted on request to a Caffe LMDB (PyTorch runner) or MXNet RecordIO.
# Each rule writes into a temporary folder and renames it on success.


rule dataset_synthetic:
    output:
        directory("results/datasets/{dataset}/image_folder"),
    log:
        "results/datasets/logs/{dataset}_image_folder.log",
    conda:
        "../../envs/driver.yaml"
    params:
        args=lambda wc: synthetic_args(wc.dataset),
        python=sys.executable,
    shell:
        "{params.python:q} -m dlbench.datasets synthetic --record-failure --out {output:q}"
        " {params.args:q}"
        " > {log:q} 2>&1"


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
        python=sys.executable,
    shell:
        "{params.python:q} -m dlbench.datasets lmdb --record-failure --source {input:q}"
        " --out {output:q} {params.args:q}"
        " > {log:q} 2>&1"


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
        python=framework_python("mxnet"),
        args=lambda wc: conversion_args(wc.dataset, "recordio"),
    shell:
        "{params.python:q} -m dlbench.datasets recordio --record-failure --source {input:q}"
        " --out {output:q}"
        " {params.args:q} > {log:q} 2>&1"
