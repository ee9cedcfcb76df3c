"""Prepare into a temporary folder beside the target; rename it into place on success.

A failed or interrupted run leaves whatever was prepared before untouched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def prepared_dir(target: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary folder; on success it replaces ``target``."""
    target = Path(target).absolute()
    target.parent.mkdir(parents=True, exist_ok=True)
    # Beside the target so that the final rename stays on one filesystem.
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; a dataset is shared read-only
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if target.exists() or target.is_symlink():
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
        os.rename(target, old / "previous")
    try:
        os.rename(tmp, target)
    except BaseException:
        if old is not None:
            os.rename(old / "previous", target)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
