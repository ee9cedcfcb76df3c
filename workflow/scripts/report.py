"""Snakemake script: results/benchmarks.parquet -> the HTML report and its charts."""

import sys
from pathlib import Path

from dlbench import report

with open(snakemake.log[0], "w") as log:  # noqa: F821 (snakemake injects it)
    sys.stderr = sys.stdout = log
    files = report.render(snakemake.input[0], Path(snakemake.output.html).parent)  # noqa: F821
    print("\n".join(str(f) for f in files))
