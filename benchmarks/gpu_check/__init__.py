"""The GPU acceptance check's parts (``benchmarks/gpu_acceptance.py`` runs them): its
settings and thresholds, the plan of commands, the verdicts on their results, and the
measurements that run in a process of their own (``--part``)."""
