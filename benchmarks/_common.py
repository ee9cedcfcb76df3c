"""What every benchmark script shares: argparse types for counts and durations (the
runners' own, dlbench.cli), and the provenance each JSON starts with.

Standard library and dlbench.cli only at import time: ``gpu_acceptance.py`` runs on lent
GPU machines with no package index, and ``data_loaders.py`` runs itself in the MXNet
environment, which has no torch. dlbench is found in ``src/`` beside this folder where it
is not installed.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import socket
import sys
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[1] / "src"


def _dlbench_src() -> None:
    """dlbench from src/ beside this folder where it is not installed (a lent GPU machine
    runs the tree as it is)."""
    if str(SRC) not in sys.path and SRC.is_dir():
        sys.path.append(str(SRC))


_dlbench_src()
from dlbench.cli import above_zero, at_least, whole_numbers  # noqa: E402 (stdlib only)

# argparse types for counts (rounds, workers...), lists of them and durations: the runners'
positive_int = at_least(1)
positive_ints = whole_numbers(1)
positive_float = above_zero


def _torch_version() -> str | None:
    # Read from the installed metadata unless torch is already loaded: importing it only
    # to name it would add seconds to scripts that never use it.
    loaded = sys.modules.get("torch")
    if loaded is not None:
        return getattr(loaded, "__version__", None)
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def _dlbench_facts() -> dict[str, Any]:
    try:
        import dlbench
        from dlbench import cpu, environment
    except ImportError as exc:
        return {"cpu_model": platform.machine(), "dlbench_version": None,
                "dlbench_git_revision": None, "dlbench_unavailable": str(exc)}
    info = cpu.this_cpu()
    return {"cpu_model": info.model if info and info.model else platform.machine(),
            "dlbench_version": dlbench.__version__,
            "dlbench_git_revision": environment.git_revision()}


def provenance() -> dict[str, Any]:
    """When, where and with what a benchmark ran: the same keys in every script's JSON."""
    return {"created_utc": datetime.datetime.now(datetime.timezone.utc)
            .isoformat(timespec="seconds"),
            "host": socket.gethostname(), **_dlbench_facts(), "cpu_count": os.cpu_count(),
            "python": platform.python_version(), "torch": _torch_version()}
