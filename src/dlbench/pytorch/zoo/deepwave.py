"""deepwave's scalar wave propagation as a model: the velocity model is the parameter, a
batch is a batch of shots (see ``dlbench.models.deepwave`` for the shapes and options).

``deepwave`` is imported when a cell builds the model, so that the suite runs without it;
a cell without it fails with a line saying how to install it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dlbench.cellrun import CellError
from dlbench.models import ModelSpec
from dlbench.models import deepwave as D
from dlbench.pytorch.zoo import BuiltModel

# The background: velocity rising linearly with depth (m/s), and the true model's anomaly
# that observed data see (a faster disc in the middle).
TOP_VELOCITY, BOTTOM_VELOCITY, ANOMALY = 1500.0, 2500.0, 300.0
# Headroom for the propagator's time-step choice: FWI moves the velocities by at most the
# Adam learning rate per step, so the step (and the cost of an iteration) never changes.
MAX_VELOCITY = BOTTOM_VELOCITY + ANOMALY + 500.0
LEARNING_RATE = 1.0  # m/s per step at most (Adam)


def _deepwave() -> Any:
    try:
        import deepwave
    except ImportError as exc:
        raise CellError(f"model deepwave needs the deepwave package ({exc}): "
                        "pip install deepwave") from None
    return deepwave


def background(ny: int, nx: int) -> torch.Tensor:
    depth = torch.linspace(0.0, 1.0, ny).unsqueeze(1)
    return (TOP_VELOCITY + (BOTTOM_VELOCITY - TOP_VELOCITY) * depth).expand(ny, nx).clone()


def true_model(ny: int, nx: int) -> torch.Tensor:
    y, x = torch.meshgrid(torch.arange(ny, dtype=torch.float32),
                          torch.arange(nx, dtype=torch.float32), indexing="ij")
    disc = ((y - ny / 2) ** 2 + (x - nx / 2) ** 2) <= (min(ny, nx) / 6) ** 2
    return background(ny, nx) + ANOMALY * disc


class ScalarWave(nn.Module):
    """Forward modelling of a batch of shots: source signals (shots, sources, nt) in,
    receiver data (shots, receivers, nt) out."""

    def __init__(self, opts: dict[str, Any]) -> None:
        super().__init__()
        self.opts = dict(opts)
        self.velocity = nn.Parameter(background(opts["ny"], opts["nx"]))
        self._locations: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = {}

    def locations(self, shots: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Source and receiver cells (row 1, below the surface) of ``shots`` shots."""
        key = (shots, str(device))
        if key not in self._locations:
            o = self.opts
            src = torch.tensor(D.source_columns(shots, o["nx"], o["sources_per_shot"]))
            rec = torch.tensor(D.receiver_columns(o["nx"], o["receivers_per_shot"]))
            sources = torch.stack([torch.ones_like(src), src], dim=-1)
            receivers = torch.stack([torch.ones_like(rec), rec], dim=-1).expand(shots, -1, -1)
            self._locations[key] = (sources.to(device), receivers.contiguous().to(device))
        return self._locations[key]

    def propagate(self, velocity: torch.Tensor, amplitudes: torch.Tensor) -> torch.Tensor:
        o = self.opts
        sources, receivers = self.locations(amplitudes.shape[0], amplitudes.device)
        out = _deepwave().scalar(
            velocity, o["dx"], o["dt"], source_amplitudes=amplitudes,
            source_locations=sources, receiver_locations=receivers, pml_width=o["pml_width"],
            accuracy=o["accuracy"], pml_freq=o["freq"], max_vel=MAX_VELOCITY)
        return out[-1]  # the receivers' amplitudes

    def forward(self, amplitudes: torch.Tensor) -> torch.Tensor:
        return self.propagate(self.velocity, amplitudes)


def ricker(opts: dict[str, Any], dtype: torch.dtype) -> torch.Tensor:
    """One Ricker wavelet of ``nt`` steps, peaking after 1.5 periods (deepwave's own)."""
    freq = opts["freq"]
    return _deepwave().wavelets.ricker(freq, opts["nt"], opts["dt"], 1.5 / freq, dtype=dtype)


def build(spec: ModelSpec, opts: dict[str, Any]) -> BuiltModel:
    _deepwave()
    module = ScalarWave(opts)

    def synthetic_batch(batch_size: int, device: torch.device, dtype: torch.dtype,
                        gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Every source fires a Ricker wavelet; the targets are what the receivers record
        through the true model (one forward modelling, untimed)."""
        wavelet = ricker(opts, dtype).to(device)
        amplitudes = wavelet.repeat(batch_size, opts["sources_per_shot"], 1)
        with torch.no_grad():
            observed = module.propagate(true_model(opts["ny"], opts["nx"]).to(device, dtype),
                                        amplitudes)
        return amplitudes, observed

    return BuiltModel(
        module=module, input_shape=(opts["sources_per_shot"], opts["nt"]), num_classes=0,
        input_kind="waves", optimizer="adam", optimizer_kwargs={"lr": LEARNING_RATE},
        loss="mse", throughput_unit="shots/s", synthetic_batch=synthetic_batch,
        facts={"grid": [opts["ny"], opts["nx"]], "time_steps": opts["nt"],
               "receivers_per_shot": opts["receivers_per_shot"]})
