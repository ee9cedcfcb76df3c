"""Profiling of selected cells with torch.profiler, Nsight Compute, Nsight Systems and
HPCToolkit (hpcrun, as GVProf uses it), or any tool with a module in ``tools``.

A profile is its own workflow job, never the measurement: the config's ``profiling.select``
names cells by axis values and the tools to run on them (``config``); each job's command
lines are built as argument lists by the tool's module (``tools/<tool>.py``, found by
``registry``; the shared pieces are in ``commands``), run by ``python -m dlbench.profiling
run`` (``run``), and the tools' exports become Parquet tables (``tables``) that ``summary``
reads for the report. ``base`` holds the ``Profiler`` class a tool module instantiates and
``spec`` the typed settings it declares. ``torch_profiler`` is the hook the PyTorch runner
uses for ``--torch_profile_dir``.

Nothing is imported here: the PyTorch runner imports ``torch_profiler`` without the rest.
"""
