# One job per cell, one rule per framework of dlbench.frameworks that has cells in this
# run (a new framework needs no edit here): each declares its framework's software, the image used under
# --use-apptainer and the conda env used under --use-conda (without either, the cell runs
# in the host interpreter of frameworks.<fw>.python). Only what differs between cells is a
# function of the job; what a framework's cells share is computed once per rule.
# The launcher runs the cell's runner in that environment, gives a GPU cell its own GPUs,
# and always leaves a result file: a failing cell becomes a 'failed' or 'oom' row.
# A study's repeats (dlbench.study.repeats) are jobs of one rule per round, <cell>_r<k>.json;
# round k's priority is -k, so that the scheduler runs every cell's first run, then every
# cell's second, ...: slow drift (thermals, other tenants) spreads over all cells instead
# of biasing the ones that happen to run last.


for fw, k in itertools.product(FRAMEWORKS_IN_USE, range(REPEAT_ROUNDS)):

    rule:
        name:
            f"benchmark_{fw.name}{dlbench_systems.repeat_suffix(k)}"
        input:
            *cell_inputs(fw.name),
        # Only this system's results are made here (other systems' are read as they are):
        # its label is part of the pattern, not a wildcard.
        output:
            f"results/{SYSTEM}/{{study}}/cells/{{cell}}{dlbench_systems.repeat_suffix(k)}.json",
        log:
            f"results/{SYSTEM}/{{study}}/logs/{{cell}}{dlbench_systems.repeat_suffix(k)}.log",
        wildcard_constraints:
            # Cell ids start with their framework (model and operator cells alike) and end
            # with their hash, so that no round's output pattern matches another round's.
            cell=rf"{fw.name}_[^/]+_[0-9a-f]{{8}}",
            # This system's results of other studies than this run's are the table's as
            # they are (a run of another config made them).
            study=OWN_STUDIES_PATTERN,
        priority: -k
        conda:
            framework_conda_env(fw)
        container:
            framework_container(fw.name)
        threads: cell_job_threads(fw.name)
        resources:
            # Nodes, tasks and per-node GPUs of multi-node cells (cluster runs only).
            **multi_node_resources(),
            **per_node_gpu_resource(),
            # A repeat round's rule: what set-resources gives the first round's.
            **cell_job_resources(fw.name),
            # Timed cells never share a machine with another timed cell (see the profile).
            benchmark_slot=1,
            gpu=gpus_of,
            # The study's timeout_s: the launcher stops the cell after it.
            timeout_s=cell_timeout(fw.name),
        # Their values are what Snakemake records per result and compares (rerun-triggers:
        # params): a new parameter or a changed value reruns every finished cell.
        params:
            launcher=literal(launcher_command(fw.name)),
            framework=literal(framework_options(fw.name)),
            cell=cell_options,
        # exec: the launcher replaces the job's shell, so that it dies with the Snakemake
        # process running the job (and its runner with it: dlbench.subproc). The command
        # names no loop variable: Snakemake evaluates it again when the job runs, when fw
        # is the loop's last framework (values per framework come through params).
        shell:
            "exec {params.launcher:q} -m dlbench.launch {params.cell:q} {params.framework:q}"
            " --timeout_s {resources.timeout_s} --output {output:q} > {log:q} 2>&1"
