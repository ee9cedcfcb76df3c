# Profiles of the cells that config's profiling.select names, one job per tool and cell,
# apart from the measurement job, in two halves:
# - profile_<framework> (one rule per framework with a profiled cell): the profiled run,
#   in the cell's framework software like its measurement (the image under
#   --use-singularity, the conda env under --use-conda, else the host): capture.json, with the tool's raw exports, under
#   results/profiles/<system>/<tool>/<study>/<cell>/ (each system its own, as its results);
# - profile_tables: on the driver (pyarrow), the exports become Parquet and profile.json is
#   written last.
# A missing or failing tool is a recorded result, like a failed cell (--record-failure): one
# line in the job's log naming the tool, the binary and the config key, and profile.json
# with "status": "failed" and that line, so the report, which takes the manifests as
# inputs, shows it. Rerun a fixed profile with `snakemake --forcerun profile_pytorch`
# (or delete its folder).


for fw in PROFILED_FRAMEWORKS:

    rule:
        name:
            f"profile_{fw.name}"
        input:
            *cell_inputs(fw.name),
        output:
            f"{profiling_config.PROFILES_DIR}/{SYSTEM}/{{tool}}/{{study}}/{{cell}}/{profiling_config.CAPTURE}",
        log:
            f"{profiling_config.PROFILES_DIR}/logs/{SYSTEM}/{{tool}}/{{study}}/{{cell}}.capture.log",
        wildcard_constraints:
            tool="|".join(profiling_config.TOOLS),
            cell=rf"{fw.name}_[^/]+",
        conda:
            framework_conda_env(fw)
        container:
            framework_container(fw.name)
        # The threads and set-resources of the cell's measurement job (cell_job_threads).
        threads: cell_job_threads(fw.name)
        resources:
            **cell_job_resources(fw.name),
            **per_node_gpu_resource(),
            # A profile perturbs the machine as much as a measurement: never beside one.
            benchmark_slot=1,
            gpu=gpus_of,
            # Each profiled run is stopped after the study's timeout_s, as its measurement.
            timeout_s=cell_timeout(fw.name),
        params:
            launcher=literal(launcher_command(fw.name)),
            python=literal(runner_python(fw.name)),
            cell=lambda wc: cell_of(wc).to_json(),
            data_dir=lambda wc: data_dir_of(cell_of(wc)),
            settings=lambda wc: json.dumps(
                profiling_config.tool_settings(config, wc.tool), sort_keys=True
            ),
            out_dir=lambda wc, output: str(Path(output[0]).parent),
        shell:
            "{params.launcher:q} -m dlbench.profiling capture --record-failure"
            " --tool {wildcards.tool:q} --cell {params.cell:q} --out_dir {params.out_dir:q}"
            " --python {params.python:q} --data_dir={params.data_dir:q}"
            " --settings {params.settings:q} --timeout_s {resources.timeout_s}"
            " > {log:q} 2>&1"


rule profile_tables:
    input:
        f"{profiling_config.PROFILES_DIR}/{SYSTEM}/{{tool}}/{{study}}/{{cell}}/{profiling_config.CAPTURE}",
    output:
        f"{profiling_config.PROFILES_DIR}/{SYSTEM}/{{tool}}/{{study}}/{{cell}}/{profiling_config.MANIFEST}",
    log:
        f"{profiling_config.PROFILES_DIR}/logs/{SYSTEM}/{{tool}}/{{study}}/{{cell}}.log",
    wildcard_constraints:
        tool="|".join(profiling_config.TOOLS),
    conda:
        "../../envs/driver.yaml"
    script:
        "../scripts/profile_tables.py"
