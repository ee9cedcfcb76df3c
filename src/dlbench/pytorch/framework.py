"""PyTorch as the driver sees it (no torch import): see dlbench.frameworks."""

from dlbench.frameworks import Framework


def _dataset_format(params):
    # DLBS's PyTorch backend reads Caffe LMDB; image_folder reads the JPEG tree itself.
    return params.get("data_backend") or "caffe_lmdb"


FRAMEWORK = Framework(
    name="pytorch",
    runner="dlbench.pytorch",
    precisions=("float32", "tf32", "float16", "bfloat16", "float64"),
    kinds=("model", "ops", "calibrate", "llm_inference", "comms"),
    dataset_format=_dataset_format,
    conda_env="envs/pytorch.yaml",
    container="containers/pytorch.sif",
    library_package=("torch", "lib"),
    description="PyTorch (seed 000's flags)",
)
