"""The private name a runner writes its result under until its launcher accepts it.

``.<result name>.<launcher pid>.running`` beside the result: a name of one launcher only,
so a runner that outlives its launcher can never leave a file that passes for the cell's
result. Files a runner writes beside its result (the monitor's time series) are named
after the result itself (``final_path``), not after this name.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_STAGED = re.compile(r"^\.(?P<name>.+)\.\d+\.running$")


def staging_path(output: Path, pid: int | None = None) -> Path:
    return output.with_name(f".{output.name}.{os.getpid() if pid is None else pid}.running")


def stale(output: Path) -> list[Path]:
    """Staged results of earlier launchers of this cell (left by killed ones)."""
    return sorted(output.parent.glob(f".{output.name}.*.running"))


def final_path(path: str | os.PathLike[str]) -> Path:
    """The result a staged path stands for (any other path: itself)."""
    path = Path(path)
    match = _STAGED.match(path.name)
    return path.with_name(match["name"]) if match else path
