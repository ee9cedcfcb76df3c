"""Measured ceilings: what this machine's device actually achieves.

A calibration cell (cell kind ``calibrate``, runner ``python -m dlbench.calibrate``) runs
once per system and device: a sweep of large square GEMMs per precision (the achievable
TFLOP/s, ``gemm``) and STREAM's copy and triad kernels (the achievable memory bandwidth,
``copy`` and ``triad``). The aggregate divides every cell's achieved FLOP/s by the best
GEMM of its precision on the same system and device (``pct_of_measured``), and the report
draws them as a roofline's ceilings (dlbench.efficiency).
"""
