"""GVProf's third workload: scalar (acoustic) wave propagation with the ``deepwave`` package,
as a full-waveform-inversion (FWI) step.

A cell's batch is a batch of shots. Each shot fires ``sources_per_shot`` Ricker wavelets
near the surface of a 2-D ``ny`` x ``nx`` velocity model (grid spacing ``dx`` metres) and
records ``nt`` time steps of ``dt`` seconds at ``receivers_per_shot`` receivers along the
surface, with a PML of ``pml_width`` cells on every side and a finite-difference
``accuracy`` of 2, 4, 6 or 8. Inference is the forward modelling; training is FWI: the
gradient of the misfit to observed data (made once, untimed, by the same propagator
through a true model with an anomaly) with respect to the velocity model, and an Adam
step on it. The velocity model is the only parameter: ``ny * nx`` of them.

Pure Python: the driver checks a study's options without importing torch or deepwave.
"""

from __future__ import annotations

from typing import Any

DEFAULT_OPTS: dict[str, Any] = {
    "ny": 100, "nx": 100, "dx": 4.0, "dt": 0.0008, "nt": 300, "freq": 25.0,
    "sources_per_shot": 1, "receivers_per_shot": 20, "pml_width": 20, "accuracy": 4,
}
# deepwave's scalar propagator is written for float32 and float64 only.
PRECISIONS = ("float32", "float64")
ACCURACIES = (2, 4, 6, 8)
INTEGERS = ("ny", "nx", "nt", "sources_per_shot", "receivers_per_shot", "pml_width",
            "accuracy")
POSITIVE = ("dx", "dt", "freq")
MIN_GRID = 10


def _integer(opts: dict[str, Any], name: str, minimum: int) -> int:
    value = opts[name]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"deepwave: {name} must be an integer >= {minimum}, got {value!r}")
    return value


def check_opts(opts: dict[str, Any]) -> None:
    """One line naming the option when a set of options cannot be propagated."""
    for name in POSITIVE:
        value = opts[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"deepwave: {name} must be a positive number, got {value!r}")
    ny, nx = _integer(opts, "ny", MIN_GRID), _integer(opts, "nx", MIN_GRID)
    _integer(opts, "nt", 1)
    _integer(opts, "sources_per_shot", 1)
    receivers = _integer(opts, "receivers_per_shot", 1)
    pml = _integer(opts, "pml_width", 0)
    if opts["accuracy"] not in ACCURACIES or isinstance(opts["accuracy"], bool):
        raise ValueError(f"deepwave: accuracy must be one of {ACCURACIES}, "
                         f"got {opts['accuracy']!r}")
    if receivers > nx:
        raise ValueError(f"deepwave: receivers_per_shot ({receivers}) cannot exceed nx ({nx}): "
                         "one receiver per surface cell at most")
    if ny <= 2 or nx <= 2:
        raise ValueError("deepwave: the grid needs room for the sources below its surface")
    del pml  # any width: deepwave pads the model outside the grid


def parameter_count(opts: dict[str, Any]) -> int:
    """The velocity model's cells: FWI's unknowns."""
    return int(opts["ny"]) * int(opts["nx"])


def source_columns(shots: int, nx: int, sources: int) -> list[list[int]]:
    """Each shot's source columns: shots spread evenly over the surface, a shot's sources
    side by side (wrapping at the edge)."""
    step = max(1, nx // max(1, shots))
    return [[(i * step + step // 2 + j) % nx for j in range(sources)] for i in range(shots)]


def receiver_columns(nx: int, receivers: int) -> list[int]:
    """Receivers spread evenly over the surface, the same for every shot."""
    return [int(round(k * (nx - 1) / max(1, receivers - 1))) if receivers > 1 else nx // 2
            for k in range(receivers)]
