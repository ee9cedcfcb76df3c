"""Snakemake script: a captured profile's exports -> Parquet tables and profile.json.

A failure recorded by the capture job (or met here) becomes a failed profile.json, so the
job itself succeeds and the report shows the reason; an error this script cannot record
leaves its traceback in the log."""

import sys
from pathlib import Path

from dlbench import job_log
from dlbench.profiling import run

with job_log.into(snakemake.log[0]):  # noqa: F821 (snakemake injects it)
    code = run.main_finish(snakemake.wildcards.tool, Path(snakemake.output[0]).parent,  # noqa: F821
                           record_failure=True)
sys.exit(code)
