# Profiles of the cells that config's profiling.select names, one job per tool and cell,
# apart from the measurement job. Outputs: results/profiles/<tool>/<study>/<cell>/ with
# profile.json written last. A missing or failing tool is a recorded result, like a failed
# cell (--record-failure): one line in the job's log naming the tool, the binary and the
# config key, and profile.json with "status": "failed" and that line, so the report, which
# takes the manifests as inputs, shows it. Rerun a fixed profile with
# `snakemake --forcerun profile` (or delete its folder).


rule profile:
    input:
        dataset=dataset_input_of,
    output:
        f"{profiling_config.PROFILES_DIR}/{{tool}}/{{study}}/{{cell}}/{profiling_config.MANIFEST}",
    log:
        f"{profiling_config.PROFILES_DIR}/logs/{{tool}}/{{study}}/{{cell}}.log",
    wildcard_constraints:
        tool="|".join(profiling_config.TOOLS),
    conda:
        "../../envs/pytorch.yaml"
    threads: cell_threads
    resources:
        # A profile perturbs the machine as much as a measurement: never beside one.
        benchmark_slot=1,
        gpu=gpus_of,
    params:
        cell=lambda wc: cell_of(wc).to_json(),
        python=lambda wc: framework_python(cell_of(wc)),
        data_dir=lambda wc: data_dir_of(cell_of(wc)),
        settings=lambda wc: json.dumps(
            profiling_config.tool_settings(config, wc.tool), sort_keys=True
        ),
        out_dir=lambda wc, output: str(Path(output[0]).parent),
        launcher=sys.executable,
    shell:
        "{params.launcher:q} -m dlbench.profiling run --record-failure --tool {wildcards.tool:q}"
        " --cell {params.cell:q} --out_dir {params.out_dir:q} --python {params.python:q}"
        " --data_dir={params.data_dir:q} --settings {params.settings:q} > {log:q} 2>&1"
