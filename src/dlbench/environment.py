"""What a cell ran on: host, CPU, GPUs, Python and dlbench revision.

Framework-specific facts (framework version, CUDA/cuDNN, library flags) are added by the
runner, which is the only process that imports its framework.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import dlbench
from dlbench import cpu


def cpu_model() -> str:
    """The CPU's name from the same cpuinfo as its capabilities (``dlbench.cpu``, which
    ``DLBENCH_CPUINFO`` may point elsewhere), so that a result never pairs one CPU's name
    with another's features."""
    info = cpu.this_cpu()
    if info is not None and info.model:
        return info.model
    return platform.processor() or platform.machine()


def memory_gib() -> float | None:
    try:
        import psutil

        return round(psutil.virtual_memory().total / 2**30, 2)
    except ImportError:
        return None


@cache
def git_revision() -> str | None:
    """The dlbench checkout's commit, when dlbench runs from a git checkout."""
    root = Path(dlbench.__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return os.environ.get("DLBENCH_GIT_REVISION")
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
        return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def gpus_from_nvml() -> dict[str, Any]:
    """GPU models and driver through NVML; empty where there is no NVIDIA driver."""
    try:
        import pynvml
    except ImportError:
        return {}
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver: NVMLError_LibraryNotFound and friends
        return {}
    try:
        count = pynvml.nvmlDeviceGetCount()
        names = []
        for i in range(count):
            # NVML counts every GPU of the node; inside a Slurm job whose device cgroup
            # holds only its own, the others refuse a handle (NVMLError_NoPermission).
            try:
                name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
            except pynvml.NVMLError:
                continue
            names.append(name.decode() if isinstance(name, bytes) else name)
        driver = pynvml.nvmlSystemGetDriverVersion()
        return {"gpu_models": names,
                "gpu_driver": driver.decode() if isinstance(driver, bytes) else driver}
    except pynvml.NVMLError:  # a driver that answers nothing: no GPU this process can use
        return {}
    finally:
        pynvml.nvmlShutdown()


def cpu_facts() -> dict[str, Any]:
    """The CPU's SIMD level and the ISA features that decide reduced-precision speed
    (``dlbench.cpu``), as ``cpu_<fact>``; a PyTorch runner replaces ``cpu_capability`` by
    torch's own word. The model and the logical CPU count are recorded apart."""
    info = cpu.this_cpu()
    facts = info.as_dict() if info else {"arch": platform.machine(), "capability": None,
                                         "features": [], "cores": None, "sockets": None,
                                         "native_precisions": []}
    return {f"cpu_{key}": value for key, value in facts.items()
            if key not in ("model", "logical_cpus")}


# The batch job a cell ran in, so that a result can be matched with the scheduler's own
# records (sacct, job logs) and a partition's nodes told apart from another's.
SCHEDULER_FACTS = {"slurm_job_id": ("SLURM_JOB_ID", "SLURM_JOBID"),
                   "slurm_partition": ("SLURM_JOB_PARTITION",)}


def scheduler_facts(environ: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """The Slurm job and partition this process runs in; null where it runs in none."""
    environ = os.environ if environ is None else environ
    return {key: next((environ[n] for n in names if environ.get(n)), None)
            for key, names in SCHEDULER_FACTS.items()}


def collect() -> dict[str, Any]:
    env: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        # The CPUs this process may run on (a Slurm job's cpuset, taskset): a job given 8
        # of a node's 64 cores runs its threads on 8, whatever cpu_count says.
        "cpus_usable": cpu.usable_cpus(),
        **cpu_facts(),
        "memory_gib": memory_gib(),
        "python_version": platform.python_version(),
        "dlbench_version": dlbench.__version__,
        "dlbench_git_revision": git_revision(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        # The image as the workflow names it (path or URI), else as Apptainer reports it.
        "container": (os.environ.get("DLBENCH_CONTAINER_IMAGE") or os.environ.get("APPTAINER_CONTAINER")
                      or os.environ.get("SINGULARITY_CONTAINER")),
        "container_digest": os.environ.get("DLBENCH_CONTAINER_DIGEST") or None,
        **scheduler_facts(),
        "framework": None,
        "framework_version": None,
        "library_flags": {},
        "gpu_models": [],
        "gpu_driver": None,
    }
    env.update(gpus_from_nvml())
    return env
