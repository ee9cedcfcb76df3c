"""Why a GPU ran below its clock, and the settings it ran under (NVML).

A GPU lowers its clocks when it reaches its power limit, when it is too hot, or when the
board or the system tells it to (an external power brake, a hardware slowdown); a cell
measured then measures the GPU at that clock. Two systems that differ only in cooling or
in a power cap give different figures for that reason alone, so each cell records, per
GPU it used, the settings it ran under (``settings``: the enforced power limit, maximum
and application clocks, persistence and ECC modes, the PCIe link) and, per sample of the
resource monitor, NVML's clock event reasons (its "throttle reasons"), summarised as the
share of samples that had each (``summarize``).

Nothing here imports pynvml: the monitor hands over its NVML module and handles.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Iterable, Mapping
from typing import Any

# NVML's clock event reason bits (nvml.h, nvmlClocksEventReason*; the same bits as the
# older nvmlClocksThrottleReason*), grouped by what they mean for a measurement.
HELD_BACK = {
    "power_cap": 0x4,  # SwPowerCap: the board's power limit
    "thermal": 0x20 | 0x40,  # SwThermalSlowdown, HwThermalSlowdown
    "hardware_slowdown": 0x8 | 0x80,  # HwSlowdown, HwPowerBrakeSlowdown (external)
}
OTHER = {
    "idle": 0x1,  # GpuIdle: nothing to run (a host-bound step between kernels)
    "clocks_set": 0x2 | 0x100,  # application or display clocks set below the maximum
    "sync_boost": 0x10,
}
LABELS = {"power_cap": "power cap", "thermal": "thermal", "hardware_slowdown":
          "hardware slowdown", "idle": "idle", "clocks_set": "clocks set",
          "sync_boost": "sync boost"}
# A cell whose GPU was held back in this share of its samples or more is pointed out (the
# report's list, a note beside dlbench compare's verdict).
NOTABLE = 0.05
# A sample counts as held back when any of HELD_BACK's reasons is set.
HELD_BACK_MASK = functools.reduce(operator.or_, HELD_BACK.values())


def reasons(nvml: Any, handle: Any) -> int | None:
    """The GPU's current clock event reasons; None from an NVML binding without them
    (raises nvml.NVMLError where the GPU does not report them)."""
    read = (getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
            # the name before nvidia-ml-py 12.535
            or getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None))
    return int(read(handle)) if read is not None else None


def settings(nvml: Any, handle: Any) -> dict[str, Any]:
    """What the GPU ran under, each None where this GPU or driver does not say."""

    def ask(fn: str, *args: Any) -> Any:
        try:
            return getattr(nvml, fn)(handle, *args)
        except (nvml.NVMLError, AttributeError):
            return None

    def watts(milliwatts: Any) -> float | None:
        return milliwatts / 1000.0 if milliwatts is not None else None

    ecc = ask("nvmlDeviceGetEccMode")  # (current, pending)
    persistence = ask("nvmlDeviceGetPersistenceMode")
    sm = getattr(nvml, "NVML_CLOCK_SM", 1)
    return {
        "power_limit_w": watts(ask("nvmlDeviceGetEnforcedPowerLimit")),
        "default_power_limit_w": watts(ask("nvmlDeviceGetPowerManagementDefaultLimit")),
        "sm_clock_max_mhz": ask("nvmlDeviceGetMaxClockInfo", sm),
        "sm_clock_application_mhz": ask("nvmlDeviceGetApplicationsClock", sm),
        "persistence_mode": bool(persistence) if persistence is not None else None,
        "ecc": bool(ecc[0]) if isinstance(ecc, (list, tuple)) and ecc else None,
        "pcie_generation": ask("nvmlDeviceGetCurrPcieLinkGeneration"),
        "pcie_width": ask("nvmlDeviceGetCurrPcieLinkWidth"),
        "pcie_generation_max": ask("nvmlDeviceGetMaxPcieLinkGeneration"),
        "pcie_width_max": ask("nvmlDeviceGetMaxPcieLinkWidth"),
    }


def summarize(samples: Iterable[Any]) -> dict[str, Any]:
    """The share of samples with each reason, of those with a reading; ``held_back``: the
    share with any reason that lowers the clock below what the load asks for; ``text``:
    those reasons in words ("power cap 62%"), empty when none."""
    masks = [int(m) for m in samples if m is not None]
    if not masks:
        return {"samples": 0, "held_back": None, "reasons": {}, "text": None}
    share = {name: sum(bool(m & bits) for m in masks) / len(masks)
             for name, bits in {**HELD_BACK, **OTHER}.items()}
    held = sum(bool(m & HELD_BACK_MASK) for m in masks) / len(masks)
    return {"samples": len(masks), "held_back": held,
            "reasons": {name: value for name, value in share.items() if value > 0},
            "text": describe(share)}


def how_often(held_back: float | None, text: str | None) -> str | None:
    """How often and why GPU clocks were held back, where notably so ("in 62% of samples
    (power cap 62%)"); None below NOTABLE or without a reading."""
    if held_back is None or not math.isfinite(held_back) or held_back < NOTABLE:
        return None
    why = text if isinstance(text, str) and text else "reasons not recorded"
    return f"in {held_back:.0%} of samples ({why})"


def note(side: str, held_back: float | None, text: str | None) -> str | None:
    """One line saying that ``side``'s GPU clocks were held back, where notably so."""
    often = how_often(held_back, text)
    return f"{side}'s GPU clocks held back {often}" if often else None


def describe(share: Mapping[str, float]) -> str | None:
    """The reasons that held a GPU back, in words with their share of the samples."""
    parts = [f"{LABELS[name]} {share[name]:.0%}" for name in HELD_BACK if share.get(name)]
    return ", ".join(parts) or None
