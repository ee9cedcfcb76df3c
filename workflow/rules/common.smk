import json
import sys
from pathlib import Path

from snakemake.utils import min_version, validate

from dlbench import study as dlbench_study

min_version("8.20")


validate(config, schema="../schemas/config.schema.yaml")


def _expand_cells(cfg):
    try:
        return dlbench_study.expand_config(cfg)
    except dlbench_study.ConfigError as exc:
        # One line naming the study and the field, before any job runs.
        print(f"dlbench config error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


CELLS = _expand_cells(config)
CELLS_BY_ID = {(cell.study, cell.id): cell for cell in CELLS}


wildcard_constraints:
    study=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    cell=r"[^/]+",
    dataset=r"[A-Za-z0-9][A-Za-z0-9_.-]*",


def cell_of(wildcards):
    return CELLS_BY_ID[(wildcards.study, wildcards.cell)]


def cell_result_files():
    return [f"results/{cell.study}/cells/{cell.id}.json" for cell in CELLS]


def framework_python(cell):
    """The interpreter of the cell's framework environment (DLBS's host_python_path)."""
    framework = cell.params.get("framework", "pytorch")
    configured = config.get("frameworks", {}).get(framework, {}).get("python") or ""
    return configured or sys.executable


def gpus_of(wildcards):
    cell = cell_of(wildcards)
    return cell.params["num_gpus"] if cell.params["device"] == "gpu" else 0


# Datasets (prepared by workflow/rules/datasets.smk)


def dataset_config(name):
    return config.get("datasets", {})[name]


def dataset_source(name):
    """The ImageFolder a dataset is made from: the user's tree, or the synthetic one."""
    spec = dataset_config(name)
    if spec.get("path"):
        return spec["path"]
    return f"results/datasets/{name}/image_folder"


def data_dir_of(cell):
    p = cell.params
    if cell.kind != "model" or p["data"] == "synthetic":
        return ""
    if p["framework"] == "mxnet":
        return f"results/datasets/{p['data']}/recordio"
    if p["data_backend"] == "image_folder":
        return dataset_source(p["data"])
    return f"results/datasets/{p['data']}/caffe_lmdb"


def dataset_input_of(wildcards):
    data_dir = data_dir_of(cell_of(wildcards))
    return [data_dir] if data_dir else []


def conversion_args(name, fmt):
    """Command-line options of a conversion, from the dataset's config (an argument list)."""
    spec = dataset_config(name)
    opts = {**spec.get("convert", {}), **spec.get(fmt, {})}
    args = []
    for key in ("resize", "quality", "seed", "workers", "subset"):
        if opts.get(key) is not None:
            args += [f"--{key}", str(opts[key])]
    for key in ("center_crop", "shuffle", "encoded"):
        if opts.get(key):
            args.append(f"--{key.replace('_', '-')}")
    return args


def synthetic_args(name):
    spec = dataset_config(name)["synthetic"]
    args = []
    for key in ("classes", "images_per_class", "image_size", "seed"):
        args += [f"--{key.replace('_', '-')}", str(spec[key])]
    return args
