# One job per cell. The launcher runs the cell's runner in the framework's interpreter
# and always leaves a result file: a failing cell becomes a 'failed' or 'oom' row.


rule benchmark:
    input:
        dataset=dataset_input_of,
    output:
        "results/{study}/cells/{cell}.json",
    log:
        "results/{study}/logs/{cell}.log",
    resources:
        # Timed cells never share a machine with another timed cell (see the profile).
        benchmark_slot=1,
        gpu=gpus_of,
    params:
        cell=lambda wc: cell_of(wc).to_json(),
        python=lambda wc: framework_python(cell_of(wc)),
        data_dir=lambda wc: data_dir_of(cell_of(wc)),
        launcher=sys.executable,
    shell:
        "{params.launcher:q} -m dlbench.launch --cell {params.cell:q} --output {output:q}"
        " --python {params.python:q} --data_dir={params.data_dir:q} > {log:q} 2>&1"
