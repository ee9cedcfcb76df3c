"""Model cells: one model of the registry trained or run for inference by a framework."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dlbench import axes, frameworks, models
from dlbench.axes import AxisError
from dlbench.kinds import CellKind


class ModelKind(CellKind):
    name = "model"
    result_kind = "model"
    id_axes = ("framework", "model", "phase", "precision", "batch_size", "device", "num_gpus",
               "data")

    def readable_id(self, params: Mapping[str, Any]) -> list[str]:
        parts = super().readable_id(params)
        # resnet50_training_..._gpu4: the GPU count rides on the device.
        i = self.id_axes.index("num_gpus")
        parts = [*parts[:i - 1], parts[i - 1] + parts[i], *parts[i + 1:]]
        nodes = params.get("num_nodes") or 1
        # ..._gpu4_2nodes_...: only a multi-node cell says so (older ids stay as they were).
        return [*parts[:i], f"{nodes}nodes", *parts[i:]] if nodes > 1 else parts

    def id_part(self, axis: str, value: Any, params: Mapping[str, Any]) -> str | None:
        if axis == "batch_size":
            return f"bs{value}"
        if axis == "num_gpus":
            return str(value)
        if axis == "phase" and params.get("data_loader_only"):
            return "loader"
        return None

    def check(self, params: Mapping[str, Any], datasets: Mapping[str, Any]) -> None:
        fw = frameworks.get(params["framework"])
        if self.name not in fw.kinds:
            raise AxisError("framework", f"{fw.name} does not run {self.name} cells")
        name = params["model"]
        try:
            spec = models.get(name)
        except KeyError:
            raise AxisError("model", f"unknown value {name!r} "
                                     f"(valid: {', '.join(models.names())})") from None
        if fw.name not in spec.frameworks:
            raise AxisError("model", f"no {fw.name} implementation of {name} (pair "
                                     f"{fw.name}/{name}; {name} exists for "
                                     f"{', '.join(spec.frameworks)})")
        if spec.precisions is not None and params["precision"] not in spec.precisions:
            raise AxisError("precision", f"{name} runs in {' or '.join(spec.precisions)} only, "
                                         f"not {params['precision']}")
        check_gpu_only(params)
        check_nodes(params)
        if params.get("memory_format") == "channels_last" and spec.input_kind != "image":
            raise AxisError("memory_format", f"channels_last needs a model with 4-D (image) "
                                              f"inputs; {name} takes {spec.input_kind}")
        if params["data"] != "synthetic" and params["data"] not in datasets:
            valid = ["synthetic", *datasets]
            raise AxisError("data", f"unknown dataset {params['data']!r} "
                                    f"(valid: {', '.join(valid)})")
        if params["data"] != "synthetic" and spec.input_kind != "image":
            # A dataset is images (ImageFolder, LMDB, RecordIO); the runners would fail
            # every such cell on its first batch.
            raise AxisError("data", f"{name} takes {spec.input_kind}, not images: it "
                                    f"runs on synthetic data only, not on a dataset "
                                    f"({params['data']})")
        if params["data_loader_only"] and params["data"] == "synthetic":
            raise AxisError("data_loader_only", "needs a dataset on the data axis, not synthetic")
        _check_model_opts(spec, params["model_opts"])
        if (params["phase"] == "inference" and isinstance(params["model_opts"], Mapping)
                and params["model_opts"].get("activation_checkpointing")):
            # Nothing is kept for a backward pass: transformers skips it in eval mode (a
            # duplicate cell), or its hooks fail under inference_mode (Llama, Mixtral).
            raise AxisError("model_opts", "activation_checkpointing recomputes activations "
                                          "for the backward pass: phase training only")

    def command(self, params: Mapping[str, Any], output: Path, python: str,
                data_dir: str | None) -> list[str]:
        fw = frameworks.get(params["framework"])
        data = [f"--data_dir={data_dir}"] if data_dir else []
        return [python, "-m", fw.runner, *axes.argv(fw.name, params), *data]

    def data_dir(self, params: Mapping[str, Any], datasets: Mapping[str, Any]) -> str:
        name = params["data"]
        if name == "synthetic":
            return ""
        fmt = frameworks.get(params["framework"]).dataset_format
        fmt = fmt(params) if fmt else "image_folder"
        if fmt == "image_folder":
            # The user's own tree, or the synthetic one workflow/rules/datasets.smk makes.
            return (datasets.get(name) or {}).get("path") or \
                f"results/datasets/{name}/image_folder"
        return f"results/datasets/{name}/{fmt}"


def check_gpu_only(params: Mapping[str, Any]) -> None:
    """The values that exist on a GPU only (model and language-model cells)."""
    if params["precision"] == "tf32" and params["device"] != "gpu":
        raise AxisError("precision", "tf32 exists on device gpu only")
    if params.get("compile") == "cudagraphs" and params["device"] != "gpu":
        raise AxisError("compile", "cudagraphs captures CUDA graphs: device gpu only")
    if params.get("framework") == "mxnet" and params["device"] == "cpu":
        # What the MXNet runner refuses on a CPU, for every cell: a config error, not a
        # failed cell (a loader cell only converts its batches, which the CPU does).
        if params["precision"] == "float16" and not params.get("data_loader_only"):
            raise AxisError("precision", "float16 needs device gpu on mxnet (pair "
                                         "mxnet/cpu/float16: its CPU operators have no "
                                         "float16 GEMM or convolution)")
        if params.get("kv_store") == "nccl":
            raise AxisError("kv_store", "nccl needs device gpu (pair mxnet/cpu/nccl: NCCL "
                                        "reduces over GPUs)")


# MXNet's kvstores that reach across processes: parameter servers (dlbench.mxnet.dist).
DIST_KV_STORES = ("dist_sync", "dist_device_sync", "dist_async")


def check_nodes(params: Mapping[str, Any]) -> None:
    """A cell spanning nodes needs a way to exchange gradients between them."""
    nodes = params.get("num_nodes") or 1
    if nodes > 1 and params["framework"] == "mxnet" and params["kv_store"] not in DIST_KV_STORES:
        raise AxisError("kv_store", f"num_nodes {nodes} needs a distributed kvstore "
                                    f"({', '.join(DIST_KV_STORES)}), not {params['kv_store']}")
    if nodes > 1 and params.get("data_loader_only"):
        raise AxisError("num_nodes", "data_loader_only cells time one node's input pipeline: "
                                     "num_nodes must be 1")
    if params["framework"] == "mxnet" and params.get("kv_store") in DIST_KV_STORES \
            and params.get("warmup_until_steady"):
        # Each worker would end its warm-up on its own: under dist_sync one then waits for
        # pushes that never come, under dist_async measured steps meet another's warm-up.
        raise AxisError("warmup_until_steady", f"the workers of kv_store {params['kv_store']} "
                                               "do not agree when to stop warming up: false "
                                               "(num_warmup_batches)")


@functools.cache
def _checker(path: str):
    module_name, func = path.split(":")
    return getattr(importlib.import_module(module_name), func)


def _check_model_opts(spec: models.ModelSpec, opts: Any) -> None:
    try:
        full = spec.opts(opts)
        if spec.check_opts:
            _checker(spec.check_opts)(full)
    except ValueError as exc:
        raise AxisError("model_opts", str(exc)) from None


KIND = ModelKind()
