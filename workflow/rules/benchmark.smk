# One job per cell, one rule per framework: each declares its framework's software, the
# image used under --use-apptainer and the conda env used under --use-conda (without
# either, the cell runs in the host interpreter of frameworks.<fw>.python).
# The launcher runs the cell's runner in that environment, gives a GPU cell its own GPUs,
# and always leaves a result file: a failing cell becomes a 'failed' or 'oom' row.


rule benchmark_pytorch:
    input:
        dataset=dataset_input_of,
    output:
        "results/{study}/cells/{cell}.json",
    log:
        "results/{study}/logs/{cell}.log",
    wildcard_constraints:
        # Model and operator cells of PyTorch: their ids start with the framework.
        cell=r"pytorch_[^/]+",
    conda:
        "../../envs/pytorch.yaml"
    container:
        framework_container("pytorch")
    threads: cell_threads
    resources:
        # Timed cells never share a machine with another timed cell (see the profile).
        benchmark_slot=1,
        gpu=gpus_of,
    params:
        cell=lambda wc: cell_of(wc).to_json(),
        launcher=lambda wc: launcher_command(cell_of(wc)),
        python=lambda wc: runner_python(cell_of(wc)),
        data_dir=lambda wc: data_dir_of(cell_of(wc)),
        image=lambda wc: container_image_of(cell_of(wc)),
        digest=lambda wc: container_digest_of(cell_of(wc)),
        monitor=monitor_option(),
    shell:
        "{params.launcher:q} -m dlbench.launch --cell {params.cell:q} --output {output:q}"
        " --python {params.python:q} --data_dir={params.data_dir:q}"
        " --container_image={params.image:q} --container_digest={params.digest:q}"
        " {params.monitor:q}"
        " > {log:q} 2>&1"


use rule benchmark_pytorch as benchmark_mxnet with:
    wildcard_constraints:
        cell=r"mxnet_[^/]+",
    conda:
        "../../envs/mxnet.yaml"
    container:
        framework_container("mxnet")
