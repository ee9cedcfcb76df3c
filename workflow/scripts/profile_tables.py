"""Snakemake script: a captured profile's exports -> Parquet tables and profile.json.

A failure recorded by the capture job (or met here) becomes a failed profile.json, so the
job itself succeeds and the report shows the reason."""

import sys
from pathlib import Path

from dlbench.profiling import run

with open(snakemake.log[0], "w") as log:  # noqa: F821 (snakemake injects it)
    sys.stderr = sys.stdout = log
    code = run.main_finish(snakemake.wildcards.tool, Path(snakemake.output[0]).parent,  # noqa: F821
                           record_failure=True)
sys.exit(code)
