"""Operator microbenchmarks driven by PARAM's JSON operator configs:
``python -m dlbench.ops -c config.json [-b] [-d cuda] ...``.

Modules: ``configfile`` (reading the file), ``precheck`` (what the driver refuses in it
before any job, without torch), ``grammar`` (argument specs to values),
``iterators`` (config expansion), ``registry`` (operators by name), ``timing``
(execution modes), ``cost`` (FLOPs and bytes), ``runner`` (walking a config), ``output``
(JSON-lines and result), ``nsight`` (PARAM's ``--ncu``/``--nsys`` launches) and ``batch``
(the batch they run), ``cli``.
"""
