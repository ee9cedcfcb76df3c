"""The process group's backend of a collective cell (PARAM's ``--backend``), torch-free so
that the driver checks a study with it.

``auto`` is what PARAM picks by default and dlbench did before the axis: NCCL on GPUs,
gloo on CPUs. NCCL runs on GPUs only; gloo runs on both (on GPUs, fewer collectives: one
it lacks fails its cell with torch's own line); UCC where torch was built with it. MPI is
not offered: its processes must be started by ``mpirun``, and dlbench starts a cell's
processes with torchrun.
"""

from __future__ import annotations

AUTO = "auto"
BACKENDS = (AUTO, "nccl", "gloo", "ucc")


def resolved(backend: str | None, device: str) -> str:
    """The backend a cell on ``device`` (gpu or cpu; cuda as torch says it) runs on."""
    if backend in (None, "", AUTO):
        return "nccl" if device in ("gpu", "cuda") else "gloo"
    return backend


def problem(backend: str | None, device: str) -> str | None:
    """Why ``backend`` cannot run a cell on ``device``; None when it can."""
    if resolved(backend, device) == "nccl" and device not in ("gpu", "cuda"):
        return "nccl runs collectives on GPUs: a cell on device cpu takes gloo or ucc"
    return None
