"""Snakemake script: a captured profile's exports -> Parquet tables and profile.json.

A failure recorded by the capture job (or met here) becomes a failed profile.json, so the
job itself succeeds and the report shows the reason; an error this script cannot record
leaves its traceback in the log."""

import sys
import traceback
from pathlib import Path

from dlbench.profiling import run

with open(snakemake.log[0], "w") as log:  # noqa: F821 (snakemake injects it)
    saved = sys.stdout, sys.stderr
    sys.stderr = sys.stdout = log
    try:
        code = run.main_finish(snakemake.wildcards.tool, Path(snakemake.output[0]).parent,  # noqa: F821
                               record_failure=True)
    except Exception:
        # Into the log while it is open: Snakemake shows a failed job's log.
        traceback.print_exc()
        raise
    finally:
        # The re-raised error goes to the job's own stderr, never to the closed log.
        sys.stdout, sys.stderr = saved
sys.exit(code)
