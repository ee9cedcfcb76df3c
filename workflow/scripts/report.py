"""Snakemake script: results/benchmarks.parquet and the profiles -> the HTML report."""

import sys
from pathlib import Path

from dlbench import report

with open(snakemake.log[0], "w") as log:  # noqa: F821 (snakemake injects it)
    sys.stderr = sys.stdout = log
    files = report.render(
        snakemake.input.parquet,  # noqa: F821
        Path(snakemake.output.html).parent,  # noqa: F821
        profiles_dir=snakemake.params.profiles_dir,  # noqa: F821
    )
    print("\n".join(str(f) for f in files))
