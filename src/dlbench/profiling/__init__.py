"""Profiling of selected cells with torch.profiler, Nsight Compute, Nsight Systems and
HPCToolkit (hpcrun, as GVProf uses it).

A profile is its own workflow job, never the measurement: the config's ``profiling.select``
names cells by axis values and the tools to run on them (``config``); each job's command
lines are built here as argument lists (``commands``), run by ``python -m
dlbench.profiling run`` (``run``), and the tools' exports become Parquet tables
(``tables``) that ``summary`` reads for the report. ``torch_profiler`` is the hook the
PyTorch runner uses for ``--torch_profile_dir``.
"""

TOOLS = ("torch", "ncu", "nsys", "hpcrun")
