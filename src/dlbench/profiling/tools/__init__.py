"""One module per profiler, each defining ``PROFILER`` (see ``dlbench.profiling.base``).

The registry (``dlbench.profiling.registry``) imports every module here. A module imports
only what the framework's environment has at its top (``base``, ``spec``, ``commands``,
the standard library): pyarrow and the table helpers are imported inside ``convert`` and
``top_entries``, which run on the driver; ``run``, ``config`` and ``summary`` import the
registry, so a tool module imports them inside its methods, never at its top.
"""
