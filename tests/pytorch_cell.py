"""Running one cell through the PyTorch runner, as the launcher would: a real subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from dlbench import result as R


def run_runner(tmp_path: Path, *args: str, name: str = "r.json"
               ) -> tuple[subprocess.CompletedProcess, dict | None]:
    """``python -m dlbench.pytorch ARGS --output=tmp_path/name``: the finished process and
    the result it wrote (None when it wrote none)."""
    out = tmp_path / name
    proc = subprocess.run([sys.executable, "-m", "dlbench.pytorch", *args, f"--output={out}"],
                          capture_output=True, text=True, timeout=300)
    return proc, (R.read(out) if out.exists() else None)
