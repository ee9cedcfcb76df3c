"""Snakemake script: results/benchmarks.parquet and the profiles -> the HTML report.

The new report replaces the previous one only once it is whole (dlbench.report.output);
a failure leaves the previous one, and the log ends with the traceback and the file that
could not be written.
"""

import logging
import sys
from pathlib import Path

from dlbench import job_log, report, workflow_support

with job_log.into(snakemake.log[0]):  # noqa: F821 (snakemake injects it)
    # Warnings (a baseline_system that is no system) go to the log and to the console,
    # where the run is watched; the log alone would keep them out of sight.
    for stream, form in ((sys.stderr, "%(levelname)s %(name)s: %(message)s"),
                         (sys.__stderr__, "dlbench: report: %(message)s")):
        handler = logging.StreamHandler(stream)
        handler.setLevel(logging.WARNING)
        handler.setFormatter(logging.Formatter(form))
        logging.getLogger("dlbench").addHandler(handler)
    files = report.render(
        snakemake.input.parquet,  # noqa: F821
        Path(snakemake.output.html).parent,  # noqa: F821
        profiles_dir=snakemake.params.profiles_dir,  # noqa: F821
        baseline_system=snakemake.params.baseline_system,  # noqa: F821
        profiles_kept=workflow_support.profiles_kept(
            snakemake.params.system, snakemake.params.studies,  # noqa: F821
            snakemake.input.profiles),  # noqa: F821
    )
    print("\n".join(str(f) for f in files))
