"""A Snakemake script's output into its job's log, the traceback included.

Snakemake shows a failed job's log. A script that redirects into its log with a plain
``with open(log)`` loses its own traceback: the exception leaves the block, the log is
closed, and Python then writes to a closed file ("lost sys.stderr"). ``into(log)`` prints
the traceback while the log is open and puts stdout and stderr back before re-raising.
"""

from __future__ import annotations

import contextlib
import sys
import traceback
from collections.abc import Iterator


@contextlib.contextmanager
def into(path: str) -> Iterator[None]:
    with open(path, "w") as log:
        saved = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = log
        try:
            yield
        except Exception:
            traceback.print_exc()
            raise
        finally:
            sys.stdout, sys.stderr = saved
