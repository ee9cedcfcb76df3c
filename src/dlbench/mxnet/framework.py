"""MXNet as the driver sees it (no mxnet import): see dlbench.frameworks."""

from dlbench.frameworks import Framework

FRAMEWORK = Framework(
    name="mxnet",
    runner="dlbench.mxnet",
    precisions=("float32", "float16"),
    dataset_format=lambda params: "recordio",
    conda_env="envs/mxnet.yaml",
    python=".venvs/mxnet/bin/python",  # make mxnet-env (Python 3.11, numpy<1.24)
    container="containers/mxnet.sif",
    library_package=("mxnet", ""),
    description="MXNet Gluon (seed 002's flags)",
)
