"""Snakemake script: results/benchmarks.parquet and the profiles -> the HTML report.

The new report replaces the previous one only once it is whole (dlbench.report.output);
a failure leaves the previous one, and the log ends with the traceback and the file that
could not be written.
"""

import sys
import traceback
from pathlib import Path

from dlbench import report

with open(snakemake.log[0], "w") as log:  # noqa: F821 (snakemake injects it)
    saved = sys.stdout, sys.stderr
    sys.stderr = sys.stdout = log
    try:
        files = report.render(
            snakemake.input.parquet,  # noqa: F821
            Path(snakemake.output.html).parent,  # noqa: F821
            profiles_dir=snakemake.params.profiles_dir,  # noqa: F821
        )
        print("\n".join(str(f) for f in files))
    except Exception:
        # Into the log while it is open: Snakemake shows a failed job's log.
        traceback.print_exc()
        raise
    finally:
        # The re-raised error goes to the job's own stderr, never to the closed log.
        sys.stdout, sys.stderr = saved
