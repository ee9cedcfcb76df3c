"""The environment of a PyTorch process, recorded with every result of a PyTorch runner
(model and operator cells alike), so that both describe one software stack in the same
fields: ``cuda_version``, ``cudnn_version`` and ``nccl_version`` (what the system
fingerprint reads), ``library_flags`` (the backend switches that change the numbers),
``nccl_env`` (the NCCL_* settings, which change what a collective or data-parallel cell
measures), the CPU's kernel capability, the machine's GPUs and the one the cell ran on."""

from __future__ import annotations

from typing import Any

import torch

from dlbench import environment, nccl_env, stages
from dlbench.pytorch.precision import library_flags


def collect(device: torch.device) -> dict[str, Any]:
    """What a PyTorch cell ran on (dlbench.environment's facts, torch's, the GPUs'), timed
    as the cell's ``environment`` stage."""
    with stages.stage("environment"):
        return _collect(device)


def _collect(device: torch.device) -> dict[str, Any]:
    env = environment.collect()
    env.update({
        "framework": "pytorch", "framework_version": torch.__version__,
        "cuda_version": torch.version.cuda, "library_flags": library_flags(),
        "cudnn_version": str(torch.backends.cudnn.version())
        if torch.backends.cudnn.is_available() else None,
    })
    env["nccl_version"] = nccl_version()
    settings = nccl_env.current()
    if settings:
        env["nccl_env"] = settings
    if hasattr(torch.backends, "cpu"):
        env["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    if device.type == "cuda" and torch.cuda.is_available():  # else the runner says why
        # The machine's GPUs as NVML lists them (environment.collect), as every other
        # result of the machine records them; CUDA counts only this cell's
        # CUDA_VISIBLE_DEVICES, so its list stands in only where NVML cannot answer.
        if not env.get("gpu_models"):
            env["gpu_models"] = [torch.cuda.get_device_name(i)
                                 for i in range(torch.cuda.device_count())]
        env["device_name"] = torch.cuda.get_device_name(device)
    return env


def nccl_version() -> str | None:
    """The NCCL this torch runs ("2.21.5"); None for a build without it."""
    try:
        if not torch.distributed.is_nccl_available():
            return None
        version = torch.cuda.nccl.version()
    except (RuntimeError, AttributeError):  # no NCCL library to ask
        return None
    return ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)
